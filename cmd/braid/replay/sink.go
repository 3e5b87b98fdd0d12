package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/arrowexport"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

// sink receives the fused records of the replay, in emission order.
type sink interface {
	write(r *kgo.Record) error
	// close finishes the output; abort discards what it can (a partial
	// file) after an error.
	close() error
	abort()
}

// topicSink produces fused records as the live job does (key = trace id
// hex, value = FusedTrace, header braid.revision), with a plain idempotent
// producer, partitioned by otlp.HashPartition over the topic's partitions.
type topicSink struct {
	cl         *kgo.Client
	topic      string
	partitions int32
	ctx        context.Context

	mu  sync.Mutex
	err error
}

func newTopicSink(ctx context.Context, opts []kgo.Opt, replication int16, topic string, partitions int32) (*topicSink, int32, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic),
	)...)
	if err != nil {
		return nil, 0, fmt.Errorf("replay: %w", err)
	}
	adm := kadm.NewClient(cl)
	have, err := kafka.PartitionCounts(ctx, adm, topic)
	if err == nil {
		if n, ok := have[topic]; ok {
			partitions = n // an existing topic keeps its partitions
		} else {
			err = kafka.EnsureTopics(ctx, adm, replication, kafka.Topic{Name: topic, Partitions: partitions})
		}
	}
	if err != nil {
		cl.Close()
		return nil, 0, fmt.Errorf("replay: output topic %s: %w", topic, err)
	}
	return &topicSink{cl: cl, topic: topic, partitions: partitions, ctx: ctx}, partitions, nil
}

func (s *topicSink) write(r *kgo.Record) error {
	if err := s.firstErr(); err != nil {
		return err
	}
	s.cl.Produce(s.ctx, &kgo.Record{
		Topic:     s.topic,
		Partition: otlp.HashPartition(r.Key, s.partitions),
		Key:       r.Key,
		Value:     r.Value,
		Headers:   r.Headers,
	}, s.promise)
	return nil
}

func (s *topicSink) promise(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("replay: produce to %s: %w", s.topic, err)
	}
	s.mu.Unlock()
}

func (s *topicSink) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *topicSink) close() error {
	err := s.cl.Flush(s.ctx)
	s.cl.Close()
	return errors.Join(s.firstErr(), err)
}

func (s *topicSink) abort() { s.cl.Close() }

// fileSink writes fused records to an Arrow or Parquet file.
type fileSink struct {
	w    *arrowexport.Writer
	path string
	json bool
	ft   braidpb.FusedTrace
}

func newFileSink(path string, f arrowexport.Format, json bool) (*fileSink, error) {
	w, err := arrowexport.Create(path, f)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &fileSink{w: w, path: path, json: json}, nil
}

func (s *fileSink) write(r *kgo.Record) error {
	s.ft.Reset()
	var err error
	if s.json {
		err = protojson.Unmarshal(r.Value, &s.ft)
	} else {
		err = proto.Unmarshal(r.Value, &s.ft)
	}
	if err != nil {
		return fmt.Errorf("replay: decode fused record %s: %w", r.Key, err)
	}
	return s.w.Write(&s.ft)
}

func (s *fileSink) close() error { return s.w.Close() }

func (s *fileSink) abort() {
	s.w.Close()
	os.Remove(s.path)
}
