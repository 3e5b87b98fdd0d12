package fuse

import (
	"encoding/binary"
	"fmt"
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
// Tombstones live in memory (a map, and a queue in purge order, which is
// expiry order: purges happen in watermark order) and in state, so that a
// restart keeps them: the tombstones of one checkpoint are one value
// under "c"+bucket number (at most closedPerBucket of them, so that a
// value fits a chunk), written at the checkpoint and deleted when its last
// tombstone has left memory — two state writes per checkpoint, not per
// trace. MaxClosedTraceBytes bounds them; when it is full the oldest go
// first (counted in ClosedEvicted). A member for a trace whose tombstone
// expired or was evicted starts a new trace at revision 0, as any member
// for an unknown trace does.

const prefixClosed = byte('c')

// closedOverhead is the memory of one tombstone: its map entry (id and
// revision, at the map's load factor) and its queue entry (expiry, id,
// revision, bucket), bytes. TestClosedOverheadCoversTheHeap measures it.
const closedOverhead = 80

// closedEntryBytes bounds a tombstone in a bucket value: id, revision and
// expiry varints.
const closedEntryBytes = 16 + binary.MaxVarintLen32 + binary.MaxVarintLen64

// reasonClosed is the late reason of a member whose trace was emitted and
// purged.
const reasonClosed = "trace already closed"

// closedEntry is a tombstone in the expiry queue.
type closedEntry struct {
	at     int64 // event time at which it expires
	id     [16]byte
	rev    uint32 // the trace's next revision
	bucket uint32 // the state value that holds it
}

// closedBucket is the state value of the tombstones of one checkpoint (or
// part of one): they are consecutive in the queue.
type closedBucket struct {
	seq    uint32
	live   int  // its tombstones still in memory
	stored bool // written to state
}

func closedKey(dst []byte, seq uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, prefixClosed), seq)
}

// closedPerBucket is the most tombstones of one bucket value.
func (p *fuser) closedPerBucket() int { return p.chunkBytes() / closedEntryBytes }

// closeTrace records the tombstone of tr, purged at watermark wm.
func (p *fuser) closeTrace(t *engine.Task, tr *trace, wm int64) error {
	if p.cfg.ClosedRetention <= 0 || !tr.emitted {
		return nil
	}
	if _, ok := p.closed[tr.id]; ok {
		return nil // cannot happen: a closed trace does not reopen
	}
	n := len(p.closedBuckets)
	if n == p.bucketHead || p.closedBuckets[n-1].stored || p.closedBuckets[n-1].live >= p.closedPerBucket() {
		p.closedBuckets = append(p.closedBuckets, closedBucket{seq: p.closedSeq})
		p.closedSeq++
		n++
	}
	b := &p.closedBuckets[n-1]
	b.live++
	p.closed[tr.id] = tr.revision
	p.closedQ = append(p.closedQ, closedEntry{at: satAdd(wm, int64(p.cfg.ClosedRetention)), id: tr.id, rev: tr.revision, bucket: b.seq})
	for int64(len(p.closed))*closedOverhead > p.cfg.MaxClosedTraceBytes && len(p.closed) > 0 {
		p.s.counters.ClosedEvicted.Add(1)
		if err := p.dropClosed(t); err != nil {
			return err
		}
	}
	return nil
}

// dropClosed forgets the oldest tombstone, and deletes its bucket from
// state when it was the bucket's last.
func (p *fuser) dropClosed(t *engine.Task) error {
	e := p.closedQ[p.closedHead]
	p.closedQ[p.closedHead] = closedEntry{}
	p.closedHead++
	delete(p.closed, e.id)
	if p.closedHead > 1024 && p.closedHead*2 > len(p.closedQ) {
		n := copy(p.closedQ, p.closedQ[p.closedHead:])
		clear(p.closedQ[n:])
		p.closedQ, p.closedHead = p.closedQ[:n], 0
	}
	b := &p.closedBuckets[p.bucketHead]
	if b.seq != e.bucket {
		return fmt.Errorf("fuse: closed trace %x: bucket %d at the head, %d in the entry", e.id, b.seq, e.bucket)
	}
	if b.live--; b.live > 0 {
		return nil
	}
	seq, stored := b.seq, b.stored
	p.closedBuckets[p.bucketHead] = closedBucket{}
	p.bucketHead++
	if p.bucketHead > 64 && p.bucketHead*2 > len(p.closedBuckets) {
		n := copy(p.closedBuckets, p.closedBuckets[p.bucketHead:])
		p.closedBuckets, p.bucketHead = p.closedBuckets[:n], 0
	}
	if !stored {
		return nil
	}
	return t.State.Delete(closedKey(p.key[:0], seq))
}

// expireClosed forgets the tombstones due at wm; fired counts against the
// timer slice.
func (p *fuser) expireClosed(t *engine.Task, wm int64, fired int) (int, error) {
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

// checkpointClosed writes the buckets of the tombstones added since the
// last checkpoint: the live tombstones of the unstored buckets, which are
// the last of the queue.
func (p *fuser) checkpointClosed(t *engine.Task) error {
	first, tail := len(p.closedBuckets), 0
	for first > p.bucketHead && !p.closedBuckets[first-1].stored {
		first--
		tail += p.closedBuckets[first].live
	}
	q := p.closedQ[len(p.closedQ)-tail:]
	for i := first; i < len(p.closedBuckets); i++ {
		b := &p.closedBuckets[i]
		v := p.scratch[:0]
		for _, e := range q[:b.live] {
			v = append(v, e.id[:]...)
			v = binary.AppendUvarint(v, uint64(e.rev))
			v = binary.AppendVarint(v, e.at)
		}
		p.scratch = v
		q = q[b.live:]
		if err := t.State.Set(closedKey(p.key[:0], b.seq), v); err != nil {
			return fmt.Errorf("fuse: write closed traces: %w", err)
		}
		b.stored = true
	}
	return nil
}

// lateClosed sends m, a member of closed trace id, to the late topic.
func (p *fuser) lateClosed(t *engine.Task, id [16]byte, next uint32, m *member) {
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

// restoreClosed reloads the tombstones, bucket by bucket in the order
// they were written (which is expiry order).
func (p *fuser) restoreClosed(t *engine.Task) error {
	clear(p.closed)
	clear(p.closedQ)
	p.closedQ, p.closedHead = p.closedQ[:0], 0
	p.closedBuckets, p.bucketHead, p.closedSeq = p.closedBuckets[:0], 0, 0
	err := eachKey(t, prefixClosed, func(k, v []byte) error {
		if len(k) != 5 {
			return nil
		}
		b := closedBucket{seq: binary.BigEndian.Uint32(k[1:]), stored: true}
		for len(v) > 0 {
			if len(v) < 16 {
				return fmt.Errorf("fuse: closed traces %d: %w", b.seq, errCorruptChunk)
			}
			e := closedEntry{id: [16]byte(v[:16]), bucket: b.seq}
			v = v[16:]
			rev, n := binary.Uvarint(v)
			if n <= 0 || rev > 1<<32-1 {
				return fmt.Errorf("fuse: closed traces %d: %w", b.seq, errCorruptChunk)
			}
			v = v[n:]
			if e.at, n = binary.Varint(v); n <= 0 {
				return fmt.Errorf("fuse: closed traces %d: %w", b.seq, errCorruptChunk)
			}
			v = v[n:]
			e.rev = uint32(rev)
			if _, dup := p.closed[e.id]; dup {
				continue // written twice by a corrupt store: the first stands
			}
			p.closed[e.id] = e.rev
			p.closedQ = append(p.closedQ, e)
			b.live++
		}
		if b.live > 0 { // (a bucket is never written empty)
			p.closedBuckets = append(p.closedBuckets, b)
		}
		p.closedSeq = max(p.closedSeq, b.seq+1)
		return nil
	})
	if err != nil {
		return err
	}
	// A smaller budget than the run that wrote them: the oldest go.
	for int64(len(p.closed))*closedOverhead > p.cfg.MaxClosedTraceBytes && len(p.closed) > 0 {
		if err := p.dropClosed(t); err != nil {
			return err
		}
	}
	return nil
}
