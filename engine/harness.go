package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Harness drives one task of a topology without Kafka, on the caller's
// goroutine: records go in, emitted records are collected, checkpoints,
// aborts and restarts happen when the caller says. Operator tests and
// micro-benchmarks use it; it is a fake of the runtime, not a mock. Like
// the broker, it refuses records over Config.MaxRecordBytes: Process,
// Advance and Checkpoint return ErrRecordTooLarge.
type Harness struct {
	e   *Engine
	t   *Task
	now time.Time
	p   int32
	// closed: the task is closed (Close).
	closed bool
	// Out collects every emitted record, in order.
	Out []*kgo.Record
}

// NewHarness opens task partition of topo with cfg (Store required; the
// Kafka fields are ignored). Processing time starts at now and moves only
// through SetNow.
func NewHarness(cfg Config, topo Topology, partition int32, now time.Time) (*Harness, error) {
	cfg.Group, cfg.TransactionalID = "harness", "harness"
	h := &Harness{now: now, p: partition}
	cfg.Now = func() time.Time { return h.now }
	e, err := New(cfg, topo)
	if err != nil {
		return nil, err
	}
	globals := map[string]*Global{}
	for i := range topo.Globals {
		globals[topo.Globals[i].Topic] = &topo.Globals[i]
	}
	e.sink = func(r *kgo.Record) {
		// What goes to a global topic is read back at once, as the
		// engine's reader would (after the commit).
		if g := globals[r.Topic]; g != nil {
			g.Feed(r, h.now)
			return
		}
		h.Out = append(h.Out, r)
	}
	h.e = e
	if err := h.open(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *Harness) open() error {
	t, err := h.e.openTaskNoRun(context.Background(), h.p)
	if err != nil {
		return err
	}
	h.t = t
	return nil
}

// Task is the task under test.
func (h *Harness) Task() *Task { return h.t }

// SetNow sets processing time.
func (h *Harness) SetNow(now time.Time) { h.now = now }

// Process feeds records read from input (a Topology.Inputs index), then
// lets the watermark advance, as the engine does after each polled batch.
func (h *Harness) Process(input int, recs ...*kgo.Record) error {
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = h.e.topo.Inputs[input].Topic
		}
	}
	h.t.handle(taskMsg{kind: msgRecords, input: input, recs: recs})
	return h.err()
}

// Advance re-evaluates the watermark, as the task's ticker does, and goes
// on while the processor reports a backlog.
func (h *Harness) Advance() error {
	h.t.fail(h.t.advance())
	for bl, ok := h.t.proc.(Backlogger); ok && bl.Backlog() && !h.t.failed; {
		h.t.fail(h.t.advance())
	}
	return h.err()
}

// Step re-evaluates the watermark once: one OnWatermark call, as the task
// makes after each batch of records, whatever backlog it leaves.
func (h *Harness) Step() error {
	h.t.fail(h.t.advance())
	return h.err()
}

// Finish advances the watermark to the end of time: every timer fires. The
// global topics end too.
func (h *Harness) Finish() error {
	for _, g := range h.e.topo.Globals {
		if g.End != nil {
			g.End()
		}
	}
	h.t.all.Advance(1<<63 - 1)
	if h.t.full != nil {
		h.t.full.Advance(1<<63 - 1)
	}
	return h.Advance()
}

// Requested is the checkpoint the task asked for (Task.RequestCheckpoint)
// and no Checkpoint has met yet: unix ns, 0 for none.
func (h *Harness) Requested() int64 { return h.e.wantAt.Load() }

// Checkpoint prepares and commits a checkpoint (it meets the requests up
// to now).
func (h *Harness) Checkpoint() error {
	h.e.metRequests(h.now.UnixNano())
	if err := h.t.prepare(); err != nil {
		return err
	}
	if err := h.err(); err != nil {
		// The transaction would abort.
		return errors.Join(err, h.t.rollback())
	}
	return h.t.commit()
}

// Abort prepares a checkpoint and then aborts it, as after a failed
// transaction: state returns to the last commit.
func (h *Harness) Abort() error {
	if err := h.t.prepare(); err != nil {
		return err
	}
	h.e.produceErr.Store(nil) // what the transaction produced is gone with it
	return h.t.rollback()
}

// Restart closes the task without a checkpoint and opens it again from its
// keyspace, as after a crash.
func (h *Harness) Restart() error {
	h.t.handle(taskMsg{kind: msgClose})
	if h.t.closeErr != nil {
		return h.t.closeErr
	}
	return h.open()
}

// Marker decodes r if it is a watermark marker a task wrote on an
// internal topic: the task that wrote it and the watermark it carries.
func Marker(r *kgo.Record) (task int32, wm int64, ok bool) {
	if r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != markerHeader {
		return 0, 0, false
	}
	task, wm, _, ok = decodeMarker(r.Headers[0].Value)
	return task, wm, ok
}

// Watermark is the task's watermark.
func (h *Harness) Watermark() int64 { return h.t.lastWM }

// MarkCaughtUp marks every source partition of the task caught up at its
// position, as the engine does when the brokers report that the task has
// read to each partition's end: Task.CaughtUp is true, and a source with no
// record for Config.CaughtUpIdleness of processing time stops holding the
// watermark back, each until its next record. (The Harness has no broker:
// without MarkCaughtUp its task is never caught up.)
func (h *Harness) MarkCaughtUp() {
	for i := range h.t.caught {
		h.t.setCaught(i, true)
	}
	h.t.publishCaughtUp()
}

// AddSiblingBehind puts beside the task another task of its instance that
// reads a backlog and has never been caught up: Task.Live is false from
// then on, whatever the task's own sources say.
func (h *Harness) AddSiblingBehind() {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	h.e.mu.tasks[h.p+1] = &published{}
}

// Close closes the task. A second Close does nothing. (Its error is
// CloseErr's.)
func (h *Harness) Close() {
	if h.closed {
		return
	}
	h.closed = true
	h.t.handle(taskMsg{kind: msgClose})
}

// CloseErr closes the task and returns what closing its processor and
// keyspace returned.
func (h *Harness) CloseErr() error {
	if h.closed {
		return nil
	}
	h.Close()
	return h.t.closeErr
}

// err returns the task's error, or else the first record the task emitted
// over MaxRecordBytes.
func (h *Harness) err() error {
	select {
	case err := <-h.t.errc:
		return fmt.Errorf("engine: harness task: %w", err)
	default:
	}
	if perr := h.e.produceErr.Swap(nil); perr != nil {
		return fmt.Errorf("engine: harness task: %w", *perr)
	}
	return nil
}
