package fuse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
)

// One key, one revision sequence: when a trace is purged (the watermark
// passed its last event time plus IdleGap plus AllowedLateness), the task
// keeps a tombstone of it — its id and the revision it would emit next —
// for ClosedRetention of event time. A member that arrives for a
// tombstoned trace (a log stamped long after its spans, an exemplar of a
// later scrape) goes to the late topic with reason "trace already closed"
// and header braid.revision, the trace's last revision: it never starts
// the trace again at revision 0. Incident tags for a closed trace are
// counted in IncidentTagsLate, as any tag that comes after its trace.
//
// Tombstones live in memory (a map and a queue in purge order, which is
// expiry order: purges happen in watermark order) and in state under
// "c"+trace id (next revision, expiry), so that a restart keeps them;
// MaxClosedTraceBytes bounds them, and when it is full the oldest go
// first (counted in ClosedEvicted). A member for a trace whose tombstone
// expired or was evicted starts a new trace at revision 0, as any member
// for an unknown trace does.

const prefixClosed = byte('c')

// closedOverhead is the memory of one tombstone: its map entry (id and
// revision, at the map's load factor) and its queue entry (id and expiry),
// bytes. TestClosedOverheadCoversTheHeap measures it.
const closedOverhead = 80

// reasonClosed is the late reason of a member whose trace was emitted and
// purged.
const reasonClosed = "trace already closed"

// closedEntry is a tombstone in the expiry queue.
type closedEntry struct {
	at int64 // event time at which it expires
	id [16]byte
}

func closedKey(dst []byte, id [16]byte) []byte { return append(append(dst, prefixClosed), id[:]...) }

// closeTrace records the tombstone of tr, purged at watermark wm.
func (p *processor) closeTrace(t *engine.Task, tr *trace, wm int64) error {
	if p.cfg.ClosedRetention <= 0 || !tr.emitted {
		return nil
	}
	if _, ok := p.closed[tr.id]; ok {
		return nil // cannot happen: a closed trace does not reopen
	}
	at := satAdd(wm, int64(p.cfg.ClosedRetention))
	b := binary.AppendUvarint(p.scratch[:0], uint64(tr.revision))
	b = binary.AppendVarint(b, at)
	p.scratch = b
	if err := t.State.Set(closedKey(p.key[:0], tr.id), b); err != nil {
		return fmt.Errorf("fuse: write closed trace: %w", err)
	}
	p.closed[tr.id] = tr.revision
	p.closedQ = append(p.closedQ, closedEntry{at: at, id: tr.id})
	for int64(len(p.closed))*closedOverhead > p.cfg.MaxClosedTraceBytes && len(p.closed) > 0 {
		p.s.counters.ClosedEvicted.Add(1)
		if err := p.dropClosed(t); err != nil {
			return err
		}
	}
	return nil
}

// dropClosed forgets the oldest tombstone.
func (p *processor) dropClosed(t *engine.Task) error {
	e := p.closedQ[p.closedHead]
	p.closedQ[p.closedHead] = closedEntry{}
	p.closedHead++
	delete(p.closed, e.id)
	if p.closedHead > 1024 && p.closedHead*2 > len(p.closedQ) {
		n := copy(p.closedQ, p.closedQ[p.closedHead:])
		clear(p.closedQ[n:])
		p.closedQ, p.closedHead = p.closedQ[:n], 0
	}
	return t.State.Delete(closedKey(p.key[:0], e.id))
}

// expireClosed forgets the tombstones due at wm; fired counts against the
// timer slice.
func (p *processor) expireClosed(t *engine.Task, wm int64, fired int) (int, error) {
	for ; p.closedHead < len(p.closedQ) && p.closedQ[p.closedHead].at <= wm; fired++ {
		if fired >= timerSlice {
			p.backlog = true
			return fired, nil
		}
		if err := p.dropClosed(t); err != nil {
			return fired, err
		}
	}
	return fired, nil
}

// lateClosed sends m, a member of closed trace id, to the late topic.
func (p *processor) lateClosed(t *engine.Task, id [16]byte, next uint32, m *member) {
	p.s.counters.Late.Add(1)
	p.s.counters.ClosedLate.Add(1)
	key := otlp.AppendTraceIDHex(make([]byte, 0, 32), id)
	p.sendLate(t, key, m, reasonClosed, revisionHeader(next)...)
}

// revisionHeader is braid.revision with the last revision emitted before
// next, if any.
func revisionHeader(next uint32) []kgo.RecordHeader {
	if next == 0 {
		return nil
	}
	return []kgo.RecordHeader{{Key: "braid.revision", Value: strconv.AppendUint(nil, uint64(next-1), 10)}}
}

// restoreClosed reloads the tombstones.
func (p *processor) restoreClosed(t *engine.Task) error {
	clear(p.closed)
	clear(p.closedQ)
	p.closedQ, p.closedHead = p.closedQ[:0], 0
	err := eachKey(t, prefixClosed, func(k, v []byte) error {
		if len(k) != 17 {
			return nil
		}
		id := [16]byte(k[1:])
		rev, n := binary.Uvarint(v)
		if n <= 0 || rev > 1<<32-1 {
			return fmt.Errorf("fuse: closed trace %x: %w", id, errCorruptChunk)
		}
		at, m := binary.Varint(v[n:])
		if m <= 0 {
			return fmt.Errorf("fuse: closed trace %x: %w", id, errCorruptChunk)
		}
		p.closed[id] = uint32(rev)
		p.closedQ = append(p.closedQ, closedEntry{at: at, id: id})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(p.closedQ, func(a, b closedEntry) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.id[:], b.id[:])
	})
	// A smaller budget than the run that wrote them: the oldest go.
	for int64(len(p.closed))*closedOverhead > p.cfg.MaxClosedTraceBytes && len(p.closed) > 0 {
		p.s.counters.ClosedEvicted.Add(1)
		if err := p.dropClosed(t); err != nil {
			return err
		}
	}
	return nil
}
