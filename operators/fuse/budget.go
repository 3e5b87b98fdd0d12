package fuse

import (
	"fmt"

	"github.com/braidlabs/braid/engine"
)

// traceOverhead approximates the memory of an open trace besides its
// pending members: the struct, its map entry, timer and flush-queue
// entries.
const traceOverhead = 200

// evictedOverhead is the memory an evicted trace keeps: its purge timer.
const evictedOverhead = 32

// relieve brings the open traces back under MaxOpenTraceBytes: first the
// pending members of every changed trace go to state (nothing is lost: the
// checkpoint would have written them); if the trace records alone still
// exceed the share, the traces whose timers come first (the oldest last
// event times) are emitted early and leave memory until 90 % of the share
// is free. An evicted trace stays in state; a member that arrives for it
// loads it back and revises it, and it is purged when the watermark passes
// its last event time plus IdleGap plus AllowedLateness, as any other.
func (p *fuser) relieve(t *engine.Task, wm int64) error {
	target := p.cfg.MaxOpenTraceBytes - p.cfg.MaxOpenTraceBytes/10
	// Stored members first, the latest kept first (the traces emitted
	// last): they are in state already.
	for i := len(p.keeping) - 1; i >= 0 && p.storedBytes > 0 && p.shareBytes() > target; i-- {
		p.forget(p.keeping[i])
		p.keeping[i] = nil
		p.keeping = p.keeping[:i]
	}
	if p.shareBytes() <= target {
		return nil
	}
	p.s.counters.Spills.Add(1)
	for _, tr := range p.changed {
		if tr.gone || len(tr.pending) == 0 {
			continue
		}
		if err := p.flushTrace(t, tr, false); err != nil {
			return err
		}
	}
	for p.shareBytes() > target && len(p.timers) > 0 {
		tm := p.timers.pop()
		tr := tm.tr
		if tr.gone || tr.timerAt != tm.at {
			continue
		}
		tr.timerAt = 0
		if err := p.evict(t, tr, wm); err != nil {
			return err
		}
	}
	return nil
}

// shareBytes is what the open traces take of MaxOpenTraceBytes: those in
// memory and the evicted ones' purge timers.
func (p *fuser) shareBytes() int64 { return p.openBytes + int64(p.evicted)*evictedOverhead }

// forget drops tr's stored members from memory (their chunks stay in
// state).
func (p *fuser) forget(tr *trace) {
	if tr.stored == nil {
		return
	}
	p.openBytes -= int64(len(tr.stored))
	p.storedBytes -= int64(len(tr.stored))
	tr.stored = nil
}

// evict emits tr if it changed since its last emission and drops it from
// memory, leaving it in state.
func (p *fuser) evict(t *engine.Task, tr *trace, wm int64) error {
	p.s.counters.Evicted.Add(1)
	if tr.dirty {
		if err := p.emit(t, tr, wm); err != nil {
			return err
		}
		tr.dirty = false
	}
	if err := p.flushTrace(t, tr, false); err != nil {
		return err
	}
	p.unmap(tr)
	p.openBytes -= traceOverhead
	p.evicted++
	p.evictTimers.push(evictTimer{at: p.nextAction(tr), id: tr.id})
	return nil
}

// reload loads evicted trace id back from state; nil if it is not there.
func (p *fuser) reload(t *engine.Task, id [16]byte) (*trace, error) {
	v, ok, err := t.State.Get(p.scratch[:0], metaKey(p.key[:0], id))
	if err != nil || !ok {
		return nil, err
	}
	p.scratch = v
	tr := &trace{id: id}
	if err := decodeMeta(v, tr); err != nil {
		return nil, fmt.Errorf("fuse: trace %x: %w", id, err)
	}
	p.traces[id] = tr
	p.openBytes += traceOverhead
	p.evicted--
	return tr, nil
}

// fireEvicted purges the evicted traces due at wm; fired counts against
// the timer slice.
func (p *fuser) fireEvicted(t *engine.Task, wm int64, fired int) (int, error) {
	for ; len(p.evictTimers) > 0 && p.evictTimers[0].at <= wm; fired++ {
		if fired >= timerSlice {
			p.backlog = true
			return fired, nil
		}
		et := p.evictTimers.pop()
		if p.traces[et.id] != nil {
			continue // loaded back: its own timer decides
		}
		v, ok, err := t.State.Get(p.scratch[:0], metaKey(p.key[:0], et.id))
		if err != nil {
			return fired, err
		}
		if !ok {
			continue
		}
		p.scratch = v
		tr := &trace{id: et.id}
		if err := decodeMeta(v, tr); err != nil {
			return fired, fmt.Errorf("fuse: trace %x: %w", et.id, err)
		}
		if p.nextAction(tr) > wm {
			continue // revised and evicted again: a later timer purges it
		}
		// purge expects the trace in memory.
		p.traces[tr.id] = tr
		p.openBytes += traceOverhead
		p.evicted--
		if err := p.purge(t, tr, wm); err != nil {
			return fired, err
		}
	}
	return fired, nil
}

type evictTimer struct {
	at int64
	id [16]byte
}

func (a evictTimer) before(b evictTimer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return string(a.id[:]) < string(b.id[:])
}
