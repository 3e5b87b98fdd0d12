package replay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/state"
)

// pipeline runs the fuse topology over merged input records: one
// engine.Harness per partition, all on this goroutine, with the
// repartition topic replaced by in-memory routing.
//
// Processing time is a clock this pipeline drives from the data: the
// largest record timestamp fed so far (Kafka timestamps are data, so the
// same range gives the same clock). Idleness is therefore judged in record
// time, and nothing that decides output reads the wall clock.
//
// Checkpoints stand in for the live job's: every checkpointRecords records,
// and whenever the clock has moved by checkpointInterval since the last
// one (sparse data), every task checkpoints in partition order. That writes
// pending members to the temporary store (bounded memory) and makes each
// task send its watermark marker to every task, which the routing delivers
// as the repartition topic would.
type pipeline struct {
	cfg      fuse.Config
	topo     engine.Topology
	ecfg     engine.Config
	hs       []*engine.Harness
	internal map[string]int // input index of each internal topic
	now      time.Time
	started  bool

	checkpointRecords int
	checkpointEvery   time.Duration
	sinceCheckpoint   int
	lastCheckpoint    time.Time

	// sink receives every record for the fused, late and dlq topics, in
	// emission order.
	sink func(*kgo.Record) error
}

type pipelineConfig struct {
	stage             *fuse.Stage
	store             *state.Store
	outOfOrderness    time.Duration
	idleness          time.Duration
	checkpointRecords int
	checkpointEvery   time.Duration
	logger            *slog.Logger
	sink              func(*kgo.Record) error
}

func newPipeline(c pipelineConfig) *pipeline {
	if c.checkpointEvery <= 0 {
		c.checkpointEvery = 5 * time.Second
	}
	if c.checkpointRecords <= 0 {
		c.checkpointRecords = 1000
	}
	topo := c.stage.Topology()
	// No changelog: the replay's state is thrown away at the end.
	topo.Changelog = ""
	return &pipeline{
		cfg:  c.stage.Config(),
		topo: topo,
		ecfg: engine.Config{
			Store:          c.store,
			OutOfOrderness: c.outOfOrderness,
			Idleness:       c.idleness,
			Logger:         c.logger,
			MaxRecordBytes: c.stage.Config().MaxRecordBytes,
			MaxClockSkew:   c.stage.Config().MaxClockSkew,
		},
		internal:          internalInputs(c.stage.Topology()),
		checkpointRecords: c.checkpointRecords,
		checkpointEvery:   c.checkpointEvery,
		sink:              c.sink,
	}
}

// start opens the tasks with processing time at now.
func (pl *pipeline) start(now time.Time) error {
	pl.now, pl.lastCheckpoint, pl.started = now, now, true
	for p := range pl.topo.Partitions {
		h, err := engine.NewHarness(pl.ecfg, pl.topo, p, now)
		if err != nil {
			pl.close()
			return fmt.Errorf("replay: open task %d: %w", p, err)
		}
		pl.hs = append(pl.hs, h)
	}
	return nil
}

// feed processes one record of source input (a topic index) read from
// partition rec.Partition.
func (pl *pipeline) feed(input int, rec *kgo.Record) error {
	if !pl.started {
		if err := pl.start(rec.Timestamp); err != nil {
			return err
		}
	}
	if rec.Timestamp.After(pl.now) {
		pl.setNow(rec.Timestamp)
	}
	if pl.sinceCheckpoint >= pl.checkpointRecords || pl.now.Sub(pl.lastCheckpoint) >= pl.checkpointEvery {
		if err := pl.checkpoint(); err != nil {
			return err
		}
	}
	pl.sinceCheckpoint++
	p := rec.Partition
	if err := pl.hs[p].Process(input, rec); err != nil {
		return err
	}
	return pl.drain(p)
}

func (pl *pipeline) setNow(now time.Time) {
	pl.now = now
	for _, h := range pl.hs {
		h.SetNow(now)
	}
}

// checkpoint checkpoints every task in partition order, routing each one's
// watermark markers before the next.
func (pl *pipeline) checkpoint() error {
	pl.sinceCheckpoint, pl.lastCheckpoint = 0, pl.now
	for p, h := range pl.hs {
		if err := h.Checkpoint(); err != nil {
			return fmt.Errorf("replay: checkpoint task %d: %w", p, err)
		}
		if err := pl.drain(int32(p)); err != nil {
			return err
		}
	}
	return nil
}

// finish moves every task's watermark to the end of time, in partition
// order: every open trace is emitted.
func (pl *pipeline) finish() error {
	for p, h := range pl.hs {
		if err := h.Finish(); err != nil {
			return fmt.Errorf("replay: finish task %d: %w", p, err)
		}
		if err := pl.drain(int32(p)); err != nil {
			return err
		}
	}
	return nil
}

// drain routes what task p emitted, in order: trace groups and watermark
// markers for the internal topics go at once to their task's internal
// input (whose own emissions are drained before p's next record), the rest
// to the sink.
func (pl *pipeline) drain(p int32) error {
	h := pl.hs[p]
	for len(h.Out) > 0 {
		out := h.Out
		h.Out = nil
		for i, r := range out {
			out[i] = nil
			in, ok := pl.internal[r.Topic]
			if !ok {
				if err := pl.sink(r); err != nil {
					return err
				}
				continue
			}
			q := r.Partition
			if q < 0 || int(q) >= len(pl.hs) {
				return fmt.Errorf("replay: task %d sent a record to repartition partition %d of %d", p, q, len(pl.hs))
			}
			if err := pl.hs[q].Process(in, r); err != nil {
				return err
			}
			if err := pl.drain(q); err != nil {
				return err
			}
		}
	}
	return nil
}

// internalInputs maps each internal topic of topo to its input index.
func internalInputs(topo engine.Topology) map[string]int {
	m := map[string]int{}
	for i, in := range topo.Inputs {
		if in.Internal {
			m[in.Topic] = i
		}
	}
	return m
}

func (pl *pipeline) close() {
	for _, h := range pl.hs {
		h.Close()
	}
	pl.hs = nil
}
