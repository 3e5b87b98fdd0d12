package engine

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The local exchange (Config.LocalExchange): what a task writes to an
// internal topic also reaches the task of the destination partition in
// memory when that task runs on the same instance, and the watermark the
// task would send there follows in memory as it moves (progress markers),
// not only with each checkpoint's markers, which become readable once the
// checkpoint commits. Kafka stays the path of record: every record is still
// written to the topic, in the same transaction, and read back.
//
// Every record a task writes to an internal topic carries a sequence
// number per (topic, destination partition) in a header (seqHeader); the
// receiving task keeps, per (topic, sending task), the last number it
// processed. Both counters are kept in state at every checkpoint. A copy
// — from memory or from Kafka — numbered at or below the last processed
// is one the task has processed already and is skipped; one from memory
// is processed only when it is the next in sequence, and waits for its
// predecessors from Kafka otherwise (after a restart, a rebalance, or a
// copy the exchange's memory bound left out). One transaction covers
// every task of an instance, so what a task processed from memory is
// committed exactly when the records it came from are: an abort rolls
// both back, and copies delivered before it (an older exchange epoch) are
// dropped.
//
// A progress marker carries the last sequence number the sender assigned
// on that (topic, partition) and is applied once the receiver has
// processed up to it, so it is never ahead of records sent before it. A
// task sends none between a checkpoint's barrier and its outcome (what it
// holds then may still be rolled back), nor on a Deferred input (what the
// processor writes there waits for the checkpoint).

// seqHeader is the header of a record's sequence number on an internal
// topic: the sending task (4 bytes) and the number (8 bytes), big-endian.
// It is always the record's last header.
const seqHeader = "braid.seq"

// progressEvery is how often at most a task sends progress markers.
const progressEvery = 20 * time.Millisecond

// xmsgOverhead is what a message in the exchange costs beyond its record.
const xmsgOverhead = 96

func encodeSeq(from int32, seq uint64) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, uint32(from))
	binary.BigEndian.PutUint64(b[4:], seq)
	return b
}

// takeSeq removes r's sequence header and returns it; ok is false when r
// has none (a marker or record written without the exchange, or by an
// older version).
func takeSeq(r *kgo.Record) (from int32, seq uint64, ok bool) {
	n := len(r.Headers)
	if n == 0 || r.Headers[n-1].Key != seqHeader {
		return 0, 0, false
	}
	v := r.Headers[n-1].Value
	if len(v) != 12 {
		return 0, 0, false
	}
	r.Headers = r.Headers[: n-1 : n-1]
	return int32(binary.BigEndian.Uint32(v)), binary.BigEndian.Uint64(v[4:]), true
}

// xmsg is one message of the exchange: a record (r) or a progress marker.
type xmsg struct {
	epoch uint64
	k     int   // internal topic
	from  int32 // sending task
	seq   uint64
	r     *kgo.Record
	// A progress marker's watermark, idle flag, read horizon and the time
	// it was sent (unix ns).
	wm      int64
	idle    bool
	horizon int64
	sent    int64
	bytes   int64
}

// inbox is a task's end of the exchange. Senders never wait on it: a task
// may send to one that is sending to it.
type inbox struct {
	mu     sync.Mutex
	msgs   []xmsg
	signal chan struct{}
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

func (b *inbox) push(m xmsg) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take returns what was pushed since the last take; buf (emptied) takes
// its place.
func (b *inbox) take(buf []xmsg) []xmsg {
	b.mu.Lock()
	out := b.msgs
	b.msgs = buf[:0]
	b.mu.Unlock()
	return out
}

// exchangeOn reports whether the tasks of this engine exchange internal
// records in memory.
func (e *Engine) exchangeOn() bool {
	return e.cfg.LocalExchange && !e.cfg.AtLeastOnce && e.sink == nil && len(e.internal)+len(e.topo.Globals) > 0
}

// bumpExchange makes every message in the exchange stale, and drops what
// waits for the global tables: on an abort, which rolls back what was
// sent. Run goroutine. (A task revoked and opened again starts from its
// last checkpoint too, but a revocation aborts the transaction it came
// in.)
func (e *Engine) bumpExchange() {
	e.xepoch.Add(1)
	e.purgeGlobal()
}

// exchangeIndex is the index of r's topic among those the exchange
// numbers records on (Engine.xk), -1 if it numbers none or is off.
func (t *Task) exchangeIndex(r *kgo.Record) int {
	if t.seqOut == nil {
		return -1
	}
	if x, ok := t.e.xk[r.Topic]; ok {
		return x
	}
	return -1
}

// stamp numbers r, a record for internal topic k (or global topic
// k-len(internal)), in its sequence to r.Partition.
func (t *Task) stamp(k int, r *kgo.Record) {
	i := k*int(t.e.topo.Partitions) + int(r.Partition)
	t.seqOut[i]++
	n := len(r.Headers)
	// A copy of the headers: the processor's slice may be shared.
	r.Headers = append(r.Headers[:n:n], kgo.RecordHeader{Key: seqHeader, Value: encodeSeq(t.Partition, t.seqOut[i])})
}

// send produces r in the current transaction and hands a copy of a
// numbered record to its partition's task if it runs here (an internal
// topic's) or to this instance's table (a global topic's); x is its
// exchangeIndex.
func (t *Task) send(r *kgo.Record, x int, marker bool) {
	switch k := len(t.e.internal); {
	case x < 0 || t.seqOut == nil:
	case x < k:
		t.deliver(x, r)
	default:
		t.deliverGlobal(x-k, r)
	}
	if marker {
		t.e.produceMarker(r)
		return
	}
	t.e.produce(r)
}

func (t *Task) deliver(k int, r *kgo.Record) {
	e := t.e
	if r.Partition < 0 || int(r.Partition) >= len(e.xch) {
		return
	}
	if !e.xown[r.Partition].Load() {
		return // read from Kafka on another instance
	}
	c, seq, ok := localCopy(r)
	if !ok {
		return
	}
	size := int64(RecordBytes(c)) + xmsgOverhead
	if e.xbytes.Load()+size > e.xlimit {
		e.stats.ExchangeGaps.Add(1)
		return // the receiver reads it from Kafka
	}
	e.xbytes.Add(size)
	e.xch[r.Partition].push(xmsg{epoch: e.xepoch.Load(), k: k, from: t.Partition, seq: seq, r: c, bytes: size})
}

// localCopy is what the exchange hands on of r, a numbered record being
// produced: a copy without the sequence header (the client owns r now),
// stamped with the time as the client stamps it, and its number.
func localCopy(r *kgo.Record) (*kgo.Record, uint64, bool) {
	n := len(r.Headers)
	if n == 0 || r.Headers[n-1].Key != seqHeader || len(r.Headers[n-1].Value) != 12 {
		return nil, 0, false
	}
	seq := binary.BigEndian.Uint64(r.Headers[n-1].Value[4:])
	c := *r
	c.Headers = c.Headers[: n-1 : n-1]
	if c.Timestamp.IsZero() {
		c.Timestamp = time.Now()
	}
	return &c, seq, true
}

// sendProgress hands the markers the task would send now on every internal
// topic to the tasks of this instance, if they moved since the last ones
// (at most every progressEvery). Not while holding: what the task did
// since its barrier may be rolled back.
func (t *Task) sendProgress() {
	e := t.e
	if t.seqOut == nil || t.failed || t.holding || t.now.Sub(t.progAt) < progressEvery {
		return
	}
	t.progAt = t.now
	p := int(e.topo.Partitions)
	horizon := t.readHorizon()
	epoch := e.xepoch.Load()
	if epoch != t.progEpoch {
		// What was sent before may have been dropped: send again.
		clear(t.progSent)
		t.progEpoch = epoch
	}
	for k := range e.internal {
		if e.deferred[k] {
			continue
		}
		wm, idle := t.markerFor(k)
		if s := t.progSent[k]; s.sent && s.wm == wm && s.idle == idle && s.horizon == horizon {
			continue
		}
		t.progSent[k] = progress{sent: true, wm: wm, idle: idle, horizon: horizon}
		for q := range p {
			if !e.xown[q].Load() {
				continue
			}
			b := e.xch[q]
			e.xbytes.Add(xmsgOverhead)
			b.push(xmsg{epoch: epoch, k: k, from: t.Partition, seq: t.seqOut[k*p+q], wm: wm, idle: idle, horizon: horizon, sent: t.now.UnixNano(), bytes: xmsgOverhead})
		}
	}
	t.sendGlobalProgress(epoch)
}

type progress struct {
	sent    bool
	wm      int64
	idle    bool
	horizon int64
}

// takeLocal processes what the exchange brought. It reports whether it
// processed anything.
func (t *Task) takeLocal() bool {
	msgs := t.xin.take(t.xbuf)
	defer func() {
		clear(msgs)
		t.xbuf = msgs[:0]
	}()
	e := t.e
	epoch := e.xepoch.Load()
	if epoch != t.xepoch {
		// A rollback or a task that came or went: what waits was sent
		// before it.
		t.clearWaiting()
		t.xepoch = epoch
	}
	if t.failed {
		for _, m := range msgs {
			e.xbytes.Add(-m.bytes)
		}
		return false
	}
	t.now = e.cfg.Now()
	p := int(e.topo.Partitions)
	did := false
	for _, m := range msgs {
		if m.epoch != epoch {
			e.xbytes.Add(-m.bytes)
			continue
		}
		i := m.k*p + int(m.from)
		t.waiting[i] = append(t.waiting[i], m)
		if t.drainWaiting(i) {
			did = true
		}
		if t.failed {
			break
		}
	}
	return did
}

// drainWaiting processes the messages waiting from sending task i (k*P +
// from) that are next in sequence, and drops those already processed.
func (t *Task) drainWaiting(i int) bool {
	w := t.waiting[i]
	did := false
	for len(w) > 0 && !t.failed {
		m := &w[0]
		last := t.seqIn[i]
		switch {
		case m.r == nil && m.seq <= last:
			t.reportMarker(m.k, m.from, m.wm, m.idle, m.sent, m.horizon)
			did = true
		case m.r != nil && m.seq <= last:
			// Processed from Kafka already.
		case m.r != nil && m.seq == last+1:
			t.seqIn[i] = m.seq
			t.e.stats.ExchangeRecords.Add(1)
			input := t.e.inputIndex[t.e.internal[m.k]]
			t.fail(t.processData(m.r, input, t.clock(m.r, input)))
			did = true
		default:
			t.waiting[i] = w
			return did
		}
		t.e.xbytes.Add(-m.bytes)
		*m = xmsg{}
		w = w[1:]
	}
	if len(w) == 0 {
		w = t.waiting[i][:0]
	}
	t.waiting[i] = w
	return did
}

// seen reports whether the task processed the record numbered seq from
// task from on internal topic k already (then it is skipped), and else
// notes it as processed.
func (t *Task) seen(k int, from int32, seq uint64) bool {
	if from < 0 || from >= t.e.topo.Partitions {
		return false
	}
	i := k*int(t.e.topo.Partitions) + int(from)
	if seq <= t.seqIn[i] {
		t.e.stats.ExchangeSkipped.Add(1)
		return true
	}
	t.seqIn[i] = seq
	return false
}

// clearWaiting drops what waits in the exchange and in the inbox.
func (t *Task) clearWaiting() {
	for i, w := range t.waiting {
		for _, m := range w {
			t.e.xbytes.Add(-m.bytes)
		}
		clear(w)
		t.waiting[i] = w[:0]
	}
}

func (t *Task) dropInbox() {
	if t.xin == nil {
		return
	}
	msgs := t.xin.take(t.xbuf)
	for _, m := range msgs {
		t.e.xbytes.Add(-m.bytes)
	}
	clear(msgs)
	t.xbuf = msgs[:0]
	t.clearWaiting()
}

// xseqKey holds a task's sequence counters: sent, per (internal topic,
// partition), then processed, per (internal topic, sending task).
var xseqKey = []byte("\x00\x01xseq")

func encodeSeqs(out, in []uint64) []byte {
	b := make([]byte, 0, 8+(len(out)+len(in))*3)
	b = binary.AppendUvarint(b, uint64(len(out)))
	for _, v := range out {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range in {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// decodeSeqs fills out and in from v; false if v does not fit them (none,
// or another partition count): they stay zero.
func decodeSeqs(v []byte, out, in []uint64) bool {
	n, w := binary.Uvarint(v)
	if w <= 0 || n != uint64(len(out)) {
		return false
	}
	v = v[w:]
	vals := make([]uint64, 0, len(out)+len(in))
	for len(v) > 0 {
		x, w := binary.Uvarint(v)
		if w <= 0 {
			return false
		}
		vals = append(vals, x)
		v = v[w:]
	}
	if len(vals) != len(out)+len(in) {
		return false
	}
	copy(out, vals)
	copy(in, vals[len(out):])
	return true
}

// drainAfter processes what waited from task from on internal topic k
// once a record of it was read from Kafka.
func (t *Task) drainAfter(k int, from int32) {
	if t.waiting == nil || from < 0 || from >= t.e.topo.Partitions {
		return
	}
	if i := k*int(t.e.topo.Partitions) + int(from); len(t.waiting[i]) > 0 {
		t.drainWaiting(i)
	}
}

// xsignal is the channel that says the inbox has messages; nil (never
// ready) without the exchange.
func (t *Task) xsignal() <-chan struct{} {
	if t.xin == nil {
		return nil
	}
	return t.xin.signal
}

// local takes what the exchange brought, then fires the timers it made
// due and passes the watermark on.
func (t *Task) local() {
	if !t.takeLocal() {
		return
	}
	if !t.holding {
		t.fail(t.advance())
	}
	t.setPending()
	t.sendProgress()
}

// loadSeqs sets the sequence counters to the last checkpoint's (zero if it
// has none). What waits in the inbox stays: what the other tasks sent
// since that checkpoint, in the current epoch, is still to be processed.
func (t *Task) loadSeqs() error {
	if t.seqIn == nil {
		return nil
	}
	clear(t.seqIn)
	out := t.seqOut
	if out == nil {
		out = make([]uint64, len(t.seqIn))
	}
	clear(out)
	v, ok, err := t.ks.Get(nil, xseqKey)
	if err != nil || !ok {
		return err
	}
	if !decodeSeqs(v, out, t.seqIn) {
		clear(out)
		clear(t.seqIn)
		t.Log.Warn("ignoring the exchange's sequence numbers of the last checkpoint: not of this topology")
	}
	return nil
}
