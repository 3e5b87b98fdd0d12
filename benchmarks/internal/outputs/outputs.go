// Package outputs reads braid's output topics back for the benchmarks:
// a topic to its end, the head of a FusedTrace record, and the requests
// the independent reference model (kvaccuracy/kvref) finds polluted in the
// KV-block events of a logs topic.
package outputs

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/kvaccuracy/kvref"
	"github.com/braidlabs/braid/connectors/simulator"
)

// ReadToEnd reads topic from its start to the end offsets it has when
// called (read_committed), calling fn for each record that is not a
// transaction marker. It gives up after limit.
func ReadToEnd(ctx context.Context, brokers []string, topic string, limit time.Duration, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()) // a transaction's marker may end a partition
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("%s end offsets: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("%s end offsets: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}

// FusedHead is what the benchmarks read of a FusedTrace record.
type FusedHead struct {
	TraceID             string // hex
	Revision            uint32
	Part, Parts         uint32
	Spans, Logs, Points int
	Polluted            bool // flags hold FLAG_POLLUTED
}

// Field numbers of FusedTrace (operators/braidpb/braid/v1/braid.proto).
const (
	fTraceID  = 1
	fRevision = 2
	fSpans    = 6
	fLogs     = 7
	fPoints   = 8
	fFlags    = 10
	fPart     = 15
	fParts    = 16

	flagPolluted = 7 // braidpb.Flag_FLAG_POLLUTED
)

// ReadFusedHead reads the head of a FusedTrace without decoding its
// members; false when b is not one.
func ReadFusedHead(b []byte) (FusedHead, bool) {
	var h FusedHead
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return h, false
		}
		b = b[l:]
		switch {
		case typ == protowire.BytesType && (n == fTraceID || n == fSpans || n == fLogs || n == fPoints):
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return h, false
			}
			switch n {
			case fTraceID:
				h.TraceID = hex.EncodeToString(v)
			case fSpans:
				h.Spans++
			case fLogs:
				h.Logs++
			case fPoints:
				h.Points++
			}
			b = b[l:]
		case n == fFlags && typ == protowire.BytesType: // packed
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return h, false
			}
			for len(v) > 0 {
				f, k := protowire.ConsumeVarint(v)
				if k < 0 {
					return h, false
				}
				h.Polluted = h.Polluted || f == flagPolluted
				v = v[k:]
			}
			b = b[l:]
		case n == fFlags && typ == protowire.VarintType:
			f, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return h, false
			}
			h.Polluted = h.Polluted || f == flagPolluted
			b = b[l:]
		case typ == protowire.VarintType && (n == fRevision || n == fPart || n == fParts):
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return h, false
			}
			switch n {
			case fRevision:
				h.Revision = uint32(v)
			case fPart:
				h.Part = uint32(v)
			case fParts:
				h.Parts = uint32(v)
			}
			b = b[l:]
		default:
			l = protowire.ConsumeFieldValue(n, typ, b)
			if l < 0 {
				return h, false
			}
			b = b[l:]
		}
	}
	return h, len(h.TraceID) == 32
}

// TopRevisions keeps, per trace, the highest revision read and whether
// any record of it carries FLAG_POLLUTED: what a consumer that keeps the
// latest revision of each key sees.
type TopRevisions map[string]*Top

// Top is a trace's highest revision read.
type Top struct {
	Revision uint32
	Flagged  bool
}

// Add records one FusedTrace head.
func (t TopRevisions) Add(h FusedHead) {
	top := t[h.TraceID]
	if top == nil {
		top = &Top{Revision: h.Revision}
		t[h.TraceID] = top
	}
	if h.Revision > top.Revision {
		top.Revision, top.Flagged = h.Revision, false
	}
	if h.Revision == top.Revision && h.Polluted {
		top.Flagged = true
	}
}

// RefPollution is a request the reference model finds polluted: its
// first foreign read, on GPU (gpu.uuid), and the trace id (hex) its KV
// events carry ("" if none does).
type RefPollution struct {
	kvref.Pollution
	GPU     string
	TraceID string
}

// RefPolluted reads every KV event of a logs topic (OTLP protobuf export
// requests) back and replays each GPU's (by gpu.uuid) in event-time order,
// ties in the order read, through the reference model: the requests it
// finds polluted, by request id. A change of service.instance.id on a GPU
// is a new server process with a fresh pool.
func RefPolluted(ctx context.Context, brokers []string, topic string) (map[string]RefPollution, error) {
	byGPU := map[string][]simulator.KVEvent{}
	traceOf := map[string]string{} // request id → trace id of its KV events
	err := ReadToEnd(ctx, brokers, topic, 10*time.Minute, func(r *kgo.Record) {
		var ld logspb.LogsData // the wire layout of an export request
		if proto.Unmarshal(r.Value, &ld) != nil {
			return
		}
		for _, rl := range ld.ResourceLogs {
			ra := attrMap(rl.Resource.GetAttributes())
			gpu, inst := attrStr(ra["gpu.uuid"]), attrStr(ra["service.instance.id"])
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					a := attrMap(l.Attributes)
					op := attrStr(a["kv.op"])
					if op == "" || gpu == "" {
						continue
					}
					rid := attrStr(a["gen_ai.request.id"])
					if rid != "" && len(l.TraceId) == 16 && traceOf[rid] == "" {
						traceOf[rid] = hex.EncodeToString(l.TraceId)
					}
					byGPU[gpu] = append(byGPU[gpu], simulator.KVEvent{Time: time.Unix(0, int64(l.TimeUnixNano)), Op: op,
						Block: int(attrInt(a["kv.block.id"], -1)), Hash: attrStr(a["kv.block.hash"]), RefCnt: int(attrInt(a["kv.block.ref_cnt"], -1)),
						Layer: int(attrInt(a["kv.layer.index"], -1)), LayerCount: int(attrInt(a["kv.layer.count"], 0)),
						Addr: attrInt(a["kv.write.addr"], -1), Bytes: attrInt(a["kv.write.bytes"], -1),
						LayerBase: attrInt(a["kv.layer.base"], 0), LayerSize: attrInt(a["kv.layer.size"], 0),
						RequestID: rid, Instance: inst})
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	polluted := map[string]RefPollution{}
	for gpu, evs := range byGPU {
		slices.SortStableFunc(evs, func(a, b simulator.KVEvent) int { return a.Time.Compare(b.Time) })
		m, inst := kvref.New(), evs[0].Instance
		for _, ev := range evs {
			if ev.Instance != inst {
				m.Restart(0) // a new server process: a fresh pool
				inst = ev.Instance
			}
			m.Apply(ev)
		}
		for r, p := range m.Polluted() {
			polluted[r] = RefPollution{p, gpu, traceOf[r]}
		}
	}
	return polluted, nil
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func attrInt(v *commonpb.AnyValue, def int64) int64 {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_StringValue:
		if n, err := strconv.ParseInt(x.StringValue, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func attrStr(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return ""
}
