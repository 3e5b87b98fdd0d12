package report

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

// Reader re-reads input records by their Kafka coordinates.
type Reader interface {
	// Read returns the record at topic/partition/offset.
	Read(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error)
}

// KafkaReader reads single records with a direct (group-less) consumer.
type KafkaReader struct {
	cl      *kgo.Client
	timeout time.Duration
}

// NewKafkaReader returns a Reader over the brokers of opts; each Read waits
// at most timeout for its record. Close it when done.
func NewKafkaReader(timeout time.Duration, opts ...kgo.Opt) (*KafkaReader, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &KafkaReader{cl: cl, timeout: timeout}, nil
}

// Close closes the client.
func (r *KafkaReader) Close() { r.cl.Close() }

// Read consumes topic/partition from offset until that record arrives.
func (r *KafkaReader) Read(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}})
	defer r.cl.RemoveConsumePartitions(map[string][]int32{topic: {partition}})
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	for {
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("re-read %s/%d/%d: %w", topic, partition, offset, err)
		}
		var found *kgo.Record
		fs.EachRecord(func(rec *kgo.Record) {
			if found == nil && rec.Topic == topic && rec.Partition == partition && rec.Offset >= offset {
				found = rec
			}
		})
		for _, e := range fs.Errors() {
			if e.Topic == topic && e.Partition == partition {
				return nil, fmt.Errorf("re-read %s/%d/%d: %w", topic, partition, offset, e.Err)
			}
		}
		if found != nil {
			if found.Offset != offset {
				return nil, fmt.Errorf("re-read %s/%d/%d: the partition has no record there (next is %d)", topic, partition, offset, found.Offset)
			}
			return found, nil
		}
	}
}

// Reread is one cited input record, re-read: its KV events (KV ops,
// sanitizer and Xid lines) as kvgraph parses them.
type Reread struct {
	Origin string          `json:"origin"` // topic/partition/offset
	Bytes  int             `json:"bytes"`
	Events []kvgraph.Event `json:"-"`
	Err    string          `json:"error,omitempty"`
}

// reread reads the record at o and parses the KV events in it; encoding
// is taken from the value (JSON starts with '{').
func reread(ctx context.Context, r Reader, o *braidpb.Origin) Reread {
	out := Reread{Origin: fmt.Sprintf("%s/%d/%d", o.Topic, o.Partition, o.Offset)}
	rec, err := r.Read(ctx, o.Topic, o.Partition, o.Offset)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	out.Bytes = len(rec.Value)
	enc := otlp.EncodingProto
	if v := bytes.TrimLeft(rec.Value, " \t\r\n"); len(v) > 0 && v[0] == '{' {
		enc = otlp.EncodingJSON
	}
	items, err := otlp.NewDecoder().Decode(otlp.SignalLogs, enc, rec.Value)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	origin := kvgraph.Origin{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset}
	for _, it := range items {
		ev, ok := kvgraph.ParseEvent(it.Resource, it.Payload, it.Time, origin)
		if !ok {
			continue
		}
		ev = cloneEvent(ev)
		out.Events = append(out.Events, ev)
	}
	return out
}

// cloneEvent copies the slices an Event aliases.
func cloneEvent(ev kvgraph.Event) kvgraph.Event {
	ev.Body = bytes.Clone(ev.Body)
	ev.Kernel = bytes.Clone(ev.Kernel)
	ev.OpText = bytes.Clone(ev.OpText)
	ev.Request = bytes.Clone(ev.Request)
	ev.GPUUUID = bytes.Clone(ev.GPUUUID)
	ev.Host = bytes.Clone(ev.Host)
	ev.Instance = bytes.Clone(ev.Instance)
	return ev
}
