package kvgraph

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
)

// Standalone is a topology that runs the processor on its own over topics
// of OTLP LogsData (otlp_proto): one task per partition, every log record of
// a partition goes to the task's processor. It is for replay, tests and
// benchmarks; the job runs the processor inside the fuse stage, which routes
// KV-event logs by host.name. Inputs must be partitioned by host (one
// host's GPUs on one partition) for propagation to be seen.
func Standalone(cfg Config, inputs []string, partitions int32, changelog string) engine.Topology {
	cfg.EnsureDefaults()
	if cfg.Counters == nil {
		cfg.Counters = &Counters{}
	}
	ins := make([]engine.Input, len(inputs))
	for i, in := range inputs {
		ins[i] = engine.Input{Topic: in}
	}
	return engine.Topology{
		Name:       "kvgraph",
		Inputs:     ins,
		Partitions: partitions,
		Changelog:  changelog,
		NewProcessor: func(t *engine.Task) (engine.Processor, error) {
			return &standalone{p: NewProcessor(cfg, t.Partition), dec: otlp.NewDecoder()}, nil
		},
	}
}

type standalone struct {
	p   *Processor
	dec *otlp.Decoder
}

func (s *standalone) Process(t *engine.Task, rec *kgo.Record, input int) error {
	items, err := s.dec.Decode(otlp.SignalLogs, otlp.EncodingProto, rec.Value)
	if err != nil {
		t.Touch(input)
		s.p.c.Ignored.Add(1)
		return nil
	}
	if len(items) == 0 {
		t.Touch(input)
	}
	for i := range items {
		it := &items[i]
		t.Observe(input, it.Time)
		origin := Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		if it.Repaired() {
			// The decoder repaired invalid UTF-8: check the event as the
			// message held it, so that an identity that was invalid is
			// rejected (with the record as read), not merged with another.
			res, lr := it.Original()
			if err := Check(res, lr); err != nil {
				if err := s.p.Reject(t, res, lr, origin, err); err != nil {
					return err
				}
				continue
			}
		}
		if err := s.p.Add(t, it.Resource, it.Payload, it.Time, origin); err != nil {
			return err
		}
	}
	return nil
}

func (s *standalone) OnWatermark(t *engine.Task, wm int64) error { return s.p.OnWatermark(t, wm) }
func (s *standalone) Backlog() bool                              { return s.p.Backlog() }
func (s *standalone) PrepareCheckpoint(t *engine.Task) error     { return s.p.PrepareCheckpoint(t) }
func (s *standalone) Restore(t *engine.Task) error               { return s.p.Restore(t) }
