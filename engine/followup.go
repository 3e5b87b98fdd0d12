package engine

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Follow-up checkpoints. A task's timers fire on a watermark that includes
// the other tasks' markers on the internal topics; markers are written in a
// checkpoint's transaction and readable only once it commits. What a task
// emits when they arrive would wait for the next regular checkpoint, a full
// CheckpointInterval later. While live, the engine instead follows such a
// checkpoint up as soon as every task of this instance has read past the
// markers it committed (or after Config.FollowUpWait), if any task's
// watermark moved or it emitted meanwhile. The markers of a follow-up feed
// the next hop (a topic with From), so a regular checkpoint has up to
// Engine.hops follow-ups; then the regular schedule goes on.

// followUp is the follow-up checkpoint in waiting.
type followUp struct {
	armed bool
	// at: the follow-up runs by then even if not every task has read its
	// markers (Config.FollowUpWait after the commit).
	at time.Time
	// step: follow-ups already run since the last regular checkpoint.
	step int
}

// due is when the poll loop must next stop: the regular checkpoint at
// next, or the follow-up's deadline if earlier.
func (f followUp) due(next time.Time) time.Time {
	if f.armed && f.at.Before(next) {
		return f.at
	}
	return next
}

// markerOffsets collects, per internal topic and partition, the offset
// after the last marker this instance produced in the current transaction.
type markerOffsets struct {
	mu   sync.Mutex
	next map[string]map[int32]int64
}

func (m *markerOffsets) note(topic string, p int32, next int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == nil {
		m.next = map[string]map[int32]int64{}
	}
	if m.next[topic] == nil {
		m.next[topic] = map[int32]int64{}
	}
	m.next[topic][p] = max(m.next[topic][p], next)
}

// take returns what was collected and starts over.
func (m *markerOffsets) take() map[string]map[int32]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.next
	m.next = nil
	return n
}

// produceMarker produces a watermark marker to an internal topic and notes
// its offset once the broker has it.
func (e *Engine) produceMarker(r *kgo.Record) {
	if e.sink != nil {
		e.produce(r)
		return
	}
	e.produceWith(r, e.markerPromise)
}

func (e *Engine) markerPromise(r *kgo.Record, err error) {
	e.promise(r, err)
	if err == nil {
		e.marks.note(r.Topic, r.Partition, r.Offset+1)
	}
}

// live reports whether every task of the instance is caught up with its
// sources (Task.CaughtUp, as published) or was at some moment in the last
// CheckpointInterval: not reading a backlog. Under a steady stream a task
// is behind by a fetch or two most of the time, and caught up only between
// them; one that reads a backlog is not caught up until it has read it. A
// window of its own, not the time since the last checkpoint: follow-ups
// and requested checkpoints come often, and a busy task is seldom caught
// up in a fraction of a second. Called once per checkpoint, as its barrier
// has passed, and by the poll loop before a requested checkpoint (Run
// goroutine only).
func (e *Engine) live() bool {
	since := e.cfg.Now().Add(-e.cfg.CheckpointInterval).UnixNano()
	live := len(e.tasks) > 0
	for _, t := range e.tasks {
		if !t.pub.caughtUp.Load() && t.pub.caughtUpAt.Load() < since {
			live = false
		}
	}
	return live
}

// armFollowUp decides, after a committed checkpoint that was the step-th
// follow-up (0: a regular one), whether a follow-up comes, and returns
// what each task must read first: per partition, per internal input, the
// offset after the last marker the checkpoint wrote to that partition (0:
// none). Called before the tasks get the checkpoint's outcome.
func (e *Engine) armFollowUp(marks map[string]map[int32]int64, live bool, step int) map[int32][]int64 {
	e.follow = followUp{}
	if !live || step >= e.hops || e.cfg.FollowUpWait <= 0 {
		return nil
	}
	targets := map[int32][]int64{}
	for p := range e.tasks {
		next := make([]int64, len(e.internal))
		found := false
		for k, topic := range e.internal {
			if o, ok := marks[topic][p]; ok {
				next[k], found = o, true
			}
		}
		if found {
			targets[p] = next
		}
	}
	if len(targets) == 0 {
		return nil
	}
	e.followWait.Store(int64(len(targets)))
	e.followUseful.Store(false)
	e.follow = followUp{armed: true, at: e.cfg.Now().Add(e.cfg.FollowUpWait), step: step}
	return targets
}

// followUpDue reports whether the armed follow-up should run now: every
// task has read its markers, or the wait is over. A wait that is over
// while nothing was released and some task has not read its markers yet
// goes on for another FollowUpWait (the task is busy, not behind: the
// instance is live, and what it releases is the follow-up's point), up
// to the next regular checkpoint, which disarms it — unless a requested
// checkpoint is due, which the follow-up then is.
func (e *Engine) followUpDue(now time.Time) bool {
	switch {
	case !e.follow.armed:
		return false
	case e.followWait.Load() <= 0:
		return true
	case now.Before(e.follow.at):
		return false
	case !e.followUseful.Load() && !e.requestDue(now):
		e.follow.at = now.Add(e.cfg.FollowUpWait)
		return false
	}
	return true
}

// followTarget is what a task must read before the follow-up checkpoint,
// and what it was when the checkpoint committed.
type followTarget struct {
	next    []int64 // per internal input: offset to reach (0: none)
	wm      int64   // Task.lastWM at the commit
	emitted int64   // Task.emitted at the commit
}

// sentMarker is what the task's last marker on an internal topic said.
type sentMarker struct {
	wm   int64
	idle bool
}

// setFollow takes the targets of a committed checkpoint (nil: no
// follow-up). Task goroutine.
func (t *Task) setFollow(next []int64) {
	t.follow = nil
	if next != nil {
		t.follow = &followTarget{next: next, wm: t.lastWM, emitted: t.emitted}
	}
}

// checkFollow tells the engine, once the task has read past the markers of
// the last checkpoint (and fired the timers they made due), whether a
// follow-up is worth it for this task: its watermark moved, it emitted, or
// a marker it would send now differs from the last. The last task to
// report wakes the poll loop. Task goroutine.
func (t *Task) checkFollow() {
	f := t.follow
	if f == nil {
		return
	}
	for k, o := range f.next {
		if o > 0 && t.offsets[t.e.internal[k]] < o {
			return
		}
	}
	t.follow = nil
	if t.lastWM > f.wm || t.emitted > f.emitted || t.markersMoved() {
		t.e.followUseful.Store(true)
	}
	if t.e.followWait.Add(-1) == 0 {
		if wake := t.e.wake.Load(); wake != nil {
			(*wake)()
		}
	}
}

// markerFor returns the marker the task sends on internal input k now:
// the watermark of its sources and of the inputs in k's From, and whether
// all of them are idle. A follow-up's markers carry the sources' watermark
// of their own moment, as a regular checkpoint's do: what they release at
// the last hop waits for the next regular checkpoint, but it would
// otherwise be released only by that checkpoint's markers and committed
// by its follow-ups, later still. So a trace whose watermark came just
// after a regular checkpoint waits an interval less the follow-ups' head
// start, not an interval plus their chain. A processor's held watermark
// (WatermarkHolder) caps it.
func (t *Task) markerFor(k int) (int64, bool) {
	wm, idle := t.up[k].w.Current(t.now), t.up[k].w.Idle(t.now)
	if h, ok := t.proc.(WatermarkHolder); ok {
		if held := h.HeldWatermark(t.e.inputIndex[t.e.internal[k]]); held < wm {
			return held, false
		}
	}
	return wm, idle
}

// markersMoved reports whether a marker the task would send now on some
// internal topic differs from the one it sent last.
func (t *Task) markersMoved() bool {
	for k, s := range t.sent {
		if wm, idle := t.markerFor(k); wm != s.wm || idle != s.idle {
			return true
		}
	}
	return false
}

// RequestCheckpoint asks for a checkpoint whose barrier comes at or after
// at (processing time, unix ns), before the regular schedule would bring
// one: a task that holds live output until every task has committed what
// it read up to some moment (engine.Task.MarkerHorizon) asks for the
// checkpoint whose markers show it. Any checkpoint that begins at or after
// at meets the request (its markers carry a later time): a follow-up on
// its way, else one run for it like a regular checkpoint, with its
// follow-ups, as soon as at has passed and Config.RequestSpacing since the
// last regular or requested one, and only while every task of the instance
// is live (caught up with its sources within the last interval). The
// regular schedule stays. A request at or before the start of the last
// checkpoint is met already (its markers are on their way) and ignored,
// so a task may ask again on every watermark while it waits. In a Harness
// it only records the request (Harness.Requested).
func (t *Task) RequestCheckpoint(at int64) {
	e := t.e
	if at <= e.lastStart.Load() {
		return
	}
	for {
		w := e.wantAt.Load()
		if w != 0 && w <= at {
			return
		}
		if e.wantAt.CompareAndSwap(w, at) {
			break
		}
	}
	if wake := e.wake.Load(); wake != nil {
		(*wake)() // the poll in progress may end later than at
	}
}

// requestAt returns when the requested checkpoint (RequestCheckpoint)
// comes: the time asked for, or RequestSpacing after the last regular or
// requested checkpoint if later; ok is false when none was asked for.
func (e *Engine) requestAt() (at time.Time, ok bool) {
	w := e.wantAt.Load()
	if w == 0 {
		return time.Time{}, false
	}
	at = time.Unix(0, w)
	if sp := e.lastFresh.Add(e.cfg.RequestSpacing); sp.After(at) {
		at = sp
	}
	return at, true
}

// wanted returns the requested checkpoint's time if it comes before due,
// else due.
func (e *Engine) wanted(due time.Time) time.Time {
	if at, ok := e.requestAt(); ok && at.Before(due) {
		return at
	}
	return due
}

// requestDue reports whether a requested checkpoint's time has come.
func (e *Engine) requestDue(now time.Time) bool {
	at, ok := e.requestAt()
	return ok && !at.After(now)
}

// metRequests notes that a checkpoint begins at now (unix ns): the
// requests up to now are met.
func (e *Engine) metRequests(now int64) {
	e.lastStart.Store(now)
	for {
		w := e.wantAt.Load()
		if w == 0 || w > now || e.wantAt.CompareAndSwap(w, 0) {
			return
		}
	}
}
