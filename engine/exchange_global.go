package engine

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The global tables' side of the local exchange (Config.LocalExchange):
// what the tasks of this instance write to a global topic is fed to the
// table in memory as they send it, besides the reader that feeds every
// instance's records from Kafka once committed; between checkpoints a
// task also feeds its source watermark as it moves (progress markers), so
// that the table's watermark follows this instance's sources within a
// checkpoint.
//
// Data records are numbered per (partition, sending task), as on internal
// topics; the reader skips a copy numbered at or below what was fed
// already, and a record from memory is fed only when it is the next, and
// waits for its predecessors from Kafka otherwise (after a restart the
// reader first reads the topic from its start). Markers take no number:
// they carry the last one their sender had assigned, and are fed once
// that record has been, and only if no later marker of the sender was
// (by the sender's clock, their timestamp), so that a checkpoint's marker
// read from Kafka never takes back what a progress marker fed since.
//
// Unlike a task's state, the table cannot go back to a checkpoint: what an
// aborted checkpoint fed stays, and the same numbers sent again after the
// rollback are skipped. A task derives its records for the table from
// each input record alone, in input order, and numbers nothing else, so
// the numbers sent again carry the same records, which the table has.

// gmsg is a record or marker for a global table; a marker's seq is the
// number of the last record its sender had sent before it.
type gmsg struct {
	epoch  uint64
	seq    uint64
	marker bool
	r      *kgo.Record
	bytes  int64
}

type globalExchange struct {
	mu    sync.Mutex
	parts int
	// fed, markedAt and waiting per (global, partition, sending task),
	// at (g*P+q)*P+from: the last number fed, the timestamp of the last
	// marker fed (unix ns), and what waits for its predecessors.
	fed      []uint64
	markedAt []int64
	waiting  [][]gmsg
}

func (x *globalExchange) init(globals, parts int) {
	n := globals * parts * parts
	x.parts = parts
	x.fed = make([]uint64, n)
	x.markedAt = make([]int64, n)
	x.waiting = make([][]gmsg, n)
}

func (x *globalExchange) index(g int, q, from int32) int {
	return (g*x.parts+int(q))*x.parts + int(from)
}

// feedRead feeds a record read from Kafka on global topic gi to g,
// unless the exchange fed it already. Reader goroutine.
func (e *Engine) feedRead(g *Global, gi int, r *kgo.Record, now time.Time) {
	from, seq, ok := takeSeq(r)
	x := &e.gx
	x.mu.Lock()
	defer x.mu.Unlock()
	if !ok || from < 0 || int(from) >= x.parts || r.Partition < 0 || int(r.Partition) >= x.parts {
		g.Feed(r, now)
		return
	}
	i := x.index(gi, r.Partition, from)
	if isMarker(r) {
		e.feedMarker(g, i, r, now)
		return
	}
	if seq <= x.fed[i] {
		e.stats.ExchangeSkipped.Add(1)
		return
	}
	x.fed[i] = seq
	g.Feed(r, now)
	e.drainGlobal(g, i, now)
}

func isMarker(r *kgo.Record) bool {
	return r.Value == nil && len(r.Headers) == 1 && r.Headers[0].Key == markerHeader
}

// feedMarker feeds marker r at i unless a later one of its sender was fed.
// x.mu held.
func (e *Engine) feedMarker(g *Global, i int, r *kgo.Record, now time.Time) {
	x := &e.gx
	at := recordTime(r)
	if at < x.markedAt[i] {
		return
	}
	x.markedAt[i] = at
	g.Feed(r, now)
}

// feedLocal hands m, which task from sent to partition q of global topic
// gi, to the table: fed now if it is the next in sequence, else it waits.
func (e *Engine) feedLocal(gi int, q, from int32, m gmsg) {
	x := &e.gx
	if q < 0 || int(q) >= x.parts || from < 0 || int(from) >= x.parts {
		return
	}
	g := &e.topo.Globals[gi]
	x.mu.Lock()
	defer x.mu.Unlock()
	i := x.index(gi, q, from)
	w := x.waiting[i]
	if m.marker && len(w) > 0 && w[len(w)-1].marker && w[len(w)-1].epoch == m.epoch {
		// A newer watermark of the same sender replaces one that waits.
		e.xbytes.Add(m.bytes - w[len(w)-1].bytes)
		w[len(w)-1] = m
		return
	}
	if !m.marker && e.xbytes.Load()+m.bytes > e.xlimit {
		e.stats.ExchangeGaps.Add(1)
		return // the reader feeds it from Kafka
	}
	e.xbytes.Add(m.bytes)
	x.waiting[i] = append(w, m)
	e.drainGlobal(g, i, e.cfg.Now())
}

// drainGlobal feeds what waits at i that is next in sequence, and drops
// what was fed already or belongs to an older exchange epoch. x.mu held.
func (e *Engine) drainGlobal(g *Global, i int, now time.Time) {
	x := &e.gx
	w := x.waiting[i]
	epoch := e.xepoch.Load()
	for len(w) > 0 {
		m := &w[0]
		switch {
		case m.epoch != epoch:
		case m.seq <= x.fed[i]:
			if m.marker {
				e.feedMarker(g, i, m.r, now)
			}
		case !m.marker && m.seq == x.fed[i]+1:
			x.fed[i] = m.seq
			g.Feed(m.r, now)
			e.stats.ExchangeRecords.Add(1)
		default:
			x.waiting[i] = w
			return
		}
		e.xbytes.Add(-m.bytes)
		*m = gmsg{}
		w = w[1:]
	}
	x.waiting[i] = nil
}

// deliverGlobal feeds a copy of r, a numbered record for global topic gi,
// to this instance's table.
func (t *Task) deliverGlobal(gi int, r *kgo.Record) {
	if c, seq, ok := localCopy(r); ok {
		t.e.feedLocal(gi, r.Partition, t.Partition, gmsg{epoch: t.e.xepoch.Load(), seq: seq, marker: isMarker(c), r: c, bytes: int64(RecordBytes(c)) + xmsgOverhead})
	}
}

// sendGlobalProgress feeds the task's source watermark, if it moved, to
// this instance's global tables, as the marker it would write there.
func (t *Task) sendGlobalProgress(epoch uint64) {
	e := t.e
	if len(e.topo.Globals) == 0 {
		return
	}
	wm, idle := t.srcOnly.Current(t.now), t.srcOnly.Idle(t.now)
	k0 := len(e.internal)
	if s := t.progSent[k0]; s.sent && s.wm == wm && s.idle == idle {
		return
	}
	t.progSent[k0] = progress{sent: true, wm: wm, idle: idle}
	marker := encodeMarker(t.Partition, wm, idle)
	p := int(e.topo.Partitions)
	for gi, g := range e.topo.Globals {
		for q := range int32(p) {
			r := &kgo.Record{Topic: g.Topic, Partition: q, Timestamp: t.now, Headers: []kgo.RecordHeader{{Key: markerHeader, Value: marker}}}
			e.feedLocal(gi, q, t.Partition, gmsg{epoch: epoch, seq: t.seqOut[(k0+gi)*p+int(q)], marker: true, r: r, bytes: xmsgOverhead})
		}
	}
}

// purgeGlobal drops what waits for the global tables from before an
// abort (bumpExchange).
func (e *Engine) purgeGlobal() {
	x := &e.gx
	epoch := e.xepoch.Load()
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, w := range x.waiting {
		n := 0
		for _, m := range w {
			if m.epoch == epoch {
				w[n] = m
				n++
			} else {
				e.xbytes.Add(-m.bytes)
			}
		}
		clear(w[n:])
		x.waiting[i] = w[:n]
	}
}

// markAfter gives r, a marker for global topic gi, the number of the last
// record the task sent to its partition (a marker takes none of its own)
// and the task's clock as its timestamp.
func (t *Task) markAfter(gi int, r *kgo.Record) {
	i := (len(t.e.internal)+gi)*int(t.e.topo.Partitions) + int(r.Partition)
	r.Timestamp = t.now
	n := len(r.Headers)
	r.Headers = append(r.Headers[:n:n], kgo.RecordHeader{Key: seqHeader, Value: encodeSeq(t.Partition, t.seqOut[i])})
}
