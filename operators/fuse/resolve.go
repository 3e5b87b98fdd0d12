package fuse

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
)

// The resolve stage joins log records that carry only a request id (no
// trace id: what vLLM, SGLang, llama.cpp and Triton engine logs look like)
// to the trace that a span declared for that request id.
//
// Keyed by request id: ingest sends every such log, and a declaration
// (request id → trace id) for every span that names a request id, to the
// task owning hash(request id) — in place when that is the task itself,
// else through Config.ResolveTopic. There, whichever arrives first waits
// for the other, in event time: a log whose request id is declared is
// forwarded to fuse (in place or through the repartition topic, keyed by
// the trace id); a log still undeclared when the watermark passes its time
// plus AllowedLateness goes to the late topic with reason
// "unresolved request id" (counted in Unresolved) — flagged, not lost.
//
// Watermarks stay correct across the extra hop: the resolve topic comes
// before the repartition topic among the engine's internal inputs, so the
// watermark a task sends on the repartition topic covers what it may still
// forward from resolve (see engine.Input.Internal).

// RequestIDs extracts request ids from serialized OTLP records; a compiled
// semconv.RequestIDs implements it. Both methods must be safe for
// concurrent use and must not retain their argument.
type RequestIDs interface {
	// FromSpan returns the request id a span declares (gen_ai.request.id,
	// rid, request_id...).
	FromSpan(span []byte) (string, bool)
	// FromLog returns the request id a log record names in an attribute or
	// its body.
	FromLog(log []byte) (string, bool)
}

// Resolve record values: a tag byte, then
//
//	tagDeclare: trace id (16 bytes), event time (varint)
//	tagLogs:    a chunk of log members
const (
	tagDeclare = 'D'
	tagLogs    = 'L'
)

// Resolve state: a record per request id under "q"+id (declaration,
// times, number of waiting-log chunks) and its waiting logs in chunks of at
// most chunkBytes under "w"+uvarint(len(id))+id+chunk number, so that no state
// value grows with the number of logs that name one request.
const (
	prefixRequest = byte('q')
	prefixWaiting = byte('w')
)

// request is the resolve state of one request id.
type request struct {
	id       string
	trace    [16]byte
	declared bool
	declTime int64  // latest event time of a declaring span
	waiting  []byte // chunk of logs waiting for a declaration
	first    int64  // earliest waiting log time
	changed  bool
	stored   bool   // has a record in the keyspace
	chunks   uint32 // waiting-log chunks in the keyspace
	storedTo int    // waiting[:storedTo] is in those chunks
	cleared  bool   // waiting was emptied since the last checkpoint
	timerAt  int64
}

// requestOverhead approximates the memory of a request record besides its
// id and waiting logs (struct, map entry, timer).
const requestOverhead = 160

// resolver is the resolve stage of a task: the request ids it owns, their
// declarations and waiting logs, and the grouping of a message's
// trace-less logs by request id (waitingLog, flushMessage). A log whose
// request is declared goes on to the fuse stage of its trace: in place
// through deliver, else through the repartition topic. Used on the
// task's goroutine only.
type resolver struct {
	outputs
	s         *Stage
	partition int32
	// deliver hands resolved logs, members of trace id, to this task's
	// fuse stage.
	deliver func(t *engine.Task, id [16]byte, chunk []byte) error

	requests        map[string]*request
	reqTimers       minHeap[reqTimer]
	changedReqs     []*request
	waitHeap        minHeap[waitEntry] // requests with waiting logs, oldest first (lazily pruned)
	waitingBytes    int64              // bytes of waiting logs in memory
	reportedWaiting int64              // what the gauge holds of this task
	requestBytes    int64              // request records in memory (approximate)

	// The trace-less logs of the message being processed, by request id.
	rgroups  map[string]int
	rids     []string
	rwriters []chunkWriter

	key, scratch []byte
}

func newResolver(s *Stage, o outputs, partition int32, deliver func(*engine.Task, [16]byte, []byte) error) *resolver {
	return &resolver{outputs: o, s: s, partition: partition, deliver: deliver, requests: map[string]*request{}, rgroups: map[string]int{}}
}

// waitingLog adds a trace-less log naming request rid to the message's
// group for rid.
func (rs *resolver) waitingLog(rid string, it *otlp.Item, sig otlp.Signal, rec *kgo.Record) {
	g, ok := rs.rgroups[rid]
	if !ok {
		g = len(rs.rids)
		rs.rgroups[rid] = g
		rs.rids = append(rs.rids, rid)
		if g == len(rs.rwriters) {
			rs.rwriters = append(rs.rwriters, chunkWriter{})
		}
		rs.rwriters[g].reset(rs.rwriters[g].buf[:0])
	}
	rs.rwriters[g].appendItem(it, sig, rec.Topic, rec.Partition, rec.Offset)
}

// startMessage forgets the groups of the message before.
func (rs *resolver) startMessage() {
	clear(rs.rgroups)
	rs.rids = rs.rids[:0]
}

// flushMessage sends each group of the message's logs to the task owning
// its request id.
func (rs *resolver) flushMessage(t *engine.Task) error {
	for g, rid := range rs.rids {
		if err := rs.routeRequest(t, rid, tagLogs, rs.rwriters[g].buf); err != nil {
			return err
		}
	}
	return nil
}

// reportMemory publishes the waiting logs' memory in the gauge.
func (rs *resolver) reportMemory() {
	if d := rs.waitingBytes - rs.reportedWaiting; d != 0 {
		rs.c.WaitingLogBytes.Add(d)
		rs.reportedWaiting += d
	}
}

// close leaves the stage's gauges and forgets its requests.
func (rs *resolver) close() {
	rs.c.OpenRequests.Add(-int64(len(rs.requests)))
	rs.c.WaitingLogBytes.Add(-rs.reportedWaiting)
	rs.reportedWaiting = 0
	clear(rs.requests)
}

// clearWaiting empties r's waiting logs (forwarded, flagged or evicted).
func (rs *resolver) clearWaiting(r *request) {
	rs.waitingBytes -= int64(len(r.waiting))
	r.waiting, r.first = nil, 0
	r.cleared = true
}

func (rs *resolver) requestFor(id string) *request {
	r := rs.requests[id]
	if r == nil {
		r = &request{id: id}
		rs.requests[id] = r
		rs.requestBytes += int64(requestOverhead + len(id))
		rs.c.OpenRequests.Add(1)
	}
	return r
}

// routeRequest sends a resolve record (tag, then payload) to the task
// owning request id rid; a chunk of logs too large for one record goes as
// several.
func (rs *resolver) routeRequest(t *engine.Task, rid string, tag byte, payload []byte) error {
	q := otlp.HashPartition([]byte(rid), rs.cfg.Partitions)
	if q == rs.partition {
		if tag == tagDeclare {
			return rs.resolveDeclare(t, rid, payload)
		}
		return rs.waitOrForward(t, rid, payload)
	}
	rs.c.ResolveForwarded.Add(1)
	if tag == tagLogs {
		return rs.emitMembers(t, rs.cfg.ResolveTopic, q, []byte(rid), []byte{tagLogs}, payload)
	}
	v := append(make([]byte, 0, 1+len(payload)), tag)
	t.Emit(&kgo.Record{Topic: rs.cfg.ResolveTopic, Partition: q, Key: []byte(rid), Value: append(v, payload...)})
	return nil
}

// process handles a record of the resolve topic: a declaration, or logs
// naming a request id this task owns.
func (rs *resolver) process(t *engine.Task, rec *kgo.Record, _ int) error {
	if len(rec.Key) == 0 || len(rec.Value) == 0 {
		return rs.reject(t, rec, stageResolve, "resolve record without a request id key or value")
	}
	rid, v := string(rec.Key), rec.Value
	switch v[0] {
	case tagDeclare:
		if len(v) < 18 {
			return rs.reject(t, rec, stageResolve, "short request id declaration")
		}
		return rs.resolveDeclare(t, rid, v[1:])
	case tagLogs:
		if err := validChunk(v[1:]); err != nil {
			return rs.reject(t, rec, stageResolve, "resolve record: "+err.Error())
		}
		return rs.waitOrForward(t, rid, v[1:])
	}
	return rs.reject(t, rec, stageResolve, "unknown resolve record tag "+strconv.Quote(string(v[:1])))
}

// resolveDeclare applies a declaration: trace id (16 bytes), event time
// (varint).
func (rs *resolver) resolveDeclare(t *engine.Task, rid string, v []byte) error {
	if len(v) < 17 {
		return fmt.Errorf("fuse: short declaration for request %q", rid)
	}
	var id [16]byte
	copy(id[:], v[:16])
	ts, n := binary.Varint(v[16:])
	if n <= 0 {
		ts = 0 // a corrupt time: the declaration still stands
	}
	return rs.declare(t, rid, id, ts)
}

func (rs *resolver) declare(t *engine.Task, rid string, id [16]byte, ts int64) error {
	r := rs.requestFor(rid)
	if r.declared && r.trace != id {
		// A request id reused by another trace (a client retry with the
		// same id): the first declaration stands.
		rs.c.RequestIDConflicts.Add(1)
		return nil
	}
	if !r.declared {
		rs.c.Declared.Add(1)
	}
	r.declared, r.trace = true, id
	r.declTime = max(r.declTime, ts)
	if len(r.waiting) > 0 {
		chunk := r.waiting
		rs.clearWaiting(r)
		if err := rs.forward(t, r, chunk); err != nil {
			return err
		}
	}
	rs.requestChanged(r)
	return nil
}

// waitOrForward handles logs naming request r: forwarded when the request
// is declared, else kept until it is or allowed lateness runs out.
func (rs *resolver) waitOrForward(t *engine.Task, rid string, chunk []byte) error {
	r := rs.requestFor(rid)
	if r.declared {
		return rs.forward(t, r, chunk)
	}
	wm := t.Watermark()
	err := readMembers(chunk, func(m *member) error {
		if rs.isLate(m.time, wm) {
			rs.unresolved(t, rid, m)
			return nil
		}
		w := chunkWriter{buf: r.waiting}
		w.appendMember(m)
		if len(r.waiting) == 0 || m.time < r.first {
			r.first = m.time
			rs.waitHeap.push(waitEntry{first: m.time, r: r})
		}
		rs.waitingBytes += int64(len(w.buf) - len(r.waiting))
		r.waiting = w.buf
		return nil
	})
	if err != nil {
		return err
	}
	if len(r.waiting) == 0 && !r.stored {
		rs.forget(r)
		return nil
	}
	rs.requestChanged(r)
	return rs.enforceWaitingBudget(t)
}

// enforceWaitingBudget sends the oldest waiting logs (all those of the
// request whose earliest waiting log is oldest, then the next) to the late
// topic with reason "memory budget" while the waiting logs exceed
// MaxWaitingLogBytes.
func (rs *resolver) enforceWaitingBudget(t *engine.Task) error {
	for rs.waitingBytes > rs.cfg.MaxWaitingLogBytes && len(rs.waitHeap) > 0 {
		e := rs.waitHeap.pop()
		r := e.r
		if rs.requests[r.id] != r || len(r.waiting) == 0 || r.first != e.first {
			continue // stale
		}
		err := readMembers(r.waiting, func(m *member) error {
			rs.c.WaitingEvicted.Add(1)
			rs.c.Late.Add(1)
			rs.sendLate(t, []byte(r.id), m, "memory budget")
			return nil
		})
		if err != nil {
			return err
		}
		rs.clearWaiting(r)
		rs.requestChanged(r)
	}
	// Stale entries: rebuild when they dominate.
	if len(rs.waitHeap) > 1024 && len(rs.waitHeap) > 4*len(rs.requests) {
		live := rs.waitHeap[:0]
		for _, e := range rs.waitHeap {
			if rs.requests[e.r.id] == e.r && len(e.r.waiting) > 0 && e.r.first == e.first {
				live = append(live, e)
			}
		}
		clear(rs.waitHeap[len(live):])
		rs.waitHeap = live
		rs.waitHeap.init()
	}
	return nil
}

// waitEntry orders requests with waiting logs by their earliest one.
type waitEntry struct {
	first int64
	r     *request
}

func (a waitEntry) before(b waitEntry) bool {
	if a.first != b.first {
		return a.first < b.first
	}
	return a.r.id < b.r.id
}

// forward sends resolved logs to the fuse task of r's trace.
func (rs *resolver) forward(t *engine.Task, r *request, chunk []byte) error {
	n := 0
	if err := readMembers(chunk, func(*member) error { n++; return nil }); err != nil {
		return err
	}
	rs.c.Resolved.Add(int64(n))
	rs.key = otlp.AppendTraceIDHex(rs.key[:0], r.trace)
	q := otlp.HashPartition(rs.key, rs.cfg.Partitions)
	if q == rs.partition {
		return rs.deliver(t, r.trace, chunk)
	}
	rs.c.Repartitioned.Add(1)
	return rs.emitMembers(t, rs.cfg.RepartitionTopic, q, append([]byte(nil), rs.key...), nil, chunk)
}

func (rs *resolver) unresolved(t *engine.Task, rid string, m *member) {
	rs.c.Unresolved.Add(1)
	rs.sendLate(t, []byte(rid), m, "unresolved request id "+rid+": no span declared it within allowed lateness")
}

func (rs *resolver) requestChanged(r *request) {
	if !r.changed {
		r.changed = true
		rs.changedReqs = append(rs.changedReqs, r)
	}
	rs.scheduleRequest(r)
}

// requestAction is when r's waiting logs are flagged or r is forgotten.
func (rs *resolver) requestAction(r *request) int64 {
	if len(r.waiting) > 0 {
		return satAdd(r.first, int64(rs.cfg.AllowedLateness)+1)
	}
	return satAdd(r.declTime, int64(rs.cfg.IdleGap)+int64(rs.cfg.AllowedLateness))
}

func (rs *resolver) scheduleRequest(r *request) {
	at := rs.requestAction(r)
	if r.timerAt != 0 && r.timerAt <= at {
		return
	}
	r.timerAt = at
	rs.reqTimers.push(reqTimer{at: at, r: r})
}

// onWatermark implements stage: the requests due at wm (held, like the
// traces, until the resources table covers it) are flagged and forgotten,
// a slice at a time.
func (rs *resolver) onWatermark(t *engine.Task, wm int64) (bool, error) {
	_, more, err := rs.fire(t, rs.s.closingWatermark(t, wm), timerSlice)
	return more, err
}

// fire flags and forgets requests due at wm, at most budget of
// them; more: some due are left.
func (rs *resolver) fire(t *engine.Task, wm int64, budget int) (fired int, more bool, err error) {
	for len(rs.reqTimers) > 0 && rs.reqTimers[0].at <= wm {
		if fired == budget {
			return fired, true, nil
		}
		fired++
		tm := rs.reqTimers.pop()
		r := tm.r
		if rs.requests[r.id] != r || r.timerAt != tm.at {
			continue
		}
		r.timerAt = 0
		if at := rs.requestAction(r); at > wm {
			rs.scheduleRequest(r)
			continue
		}
		if len(r.waiting) > 0 {
			err := readMembers(r.waiting, func(m *member) error {
				rs.unresolved(t, r.id, m)
				return nil
			})
			if err != nil {
				return fired, false, err
			}
			rs.clearWaiting(r)
			if r.declared {
				rs.requestChanged(r)
				continue
			}
		}
		rs.forget(r)
		if r.stored {
			if err := rs.deleteRequest(t, r); err != nil {
				return fired, false, err
			}
		}
	}
	return fired, false, nil
}

// deleteRequest deletes r's record and waiting-log chunks.
func (rs *resolver) deleteRequest(t *engine.Task, r *request) error {
	if err := rs.deleteWaitingChunks(t, r); err != nil {
		return err
	}
	return t.State.Delete(requestKey(rs.key[:0], r.id))
}

func (rs *resolver) deleteWaitingChunks(t *engine.Task, r *request) error {
	for c := uint32(0); c < r.chunks; c++ {
		if err := t.State.Delete(waitingKey(rs.key[:0], r.id, c)); err != nil {
			return err
		}
	}
	r.chunks, r.storedTo = 0, 0
	return nil
}

func (rs *resolver) forget(r *request) {
	delete(rs.requests, r.id)
	rs.waitingBytes -= int64(len(r.waiting))
	rs.requestBytes -= int64(requestOverhead + len(r.id))
	rs.c.OpenRequests.Add(-1)
}

func requestKey(dst []byte, id string) []byte { return append(append(dst, prefixRequest), id...) }

func waitingKey(dst []byte, id string, chunk uint32) []byte {
	dst = append(dst, prefixWaiting)
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	return binary.BigEndian.AppendUint32(dst, chunk)
}

// prepareCheckpoint writes the changed requests' records.
func (rs *resolver) prepareCheckpoint(t *engine.Task) error {
	for _, r := range rs.changedReqs {
		r.changed = false
		if rs.requests[r.id] != r {
			continue
		}
		if r.cleared || len(r.waiting) < r.storedTo {
			if err := rs.deleteWaitingChunks(t, r); err != nil {
				return err
			}
			r.cleared = false
		}
		for rest := r.waiting[r.storedTo:]; len(rest) > 0; {
			n, err := chunkPrefix(rest, rs.chunkBytes())
			if err != nil {
				return err
			}
			if err := t.State.Set(waitingKey(rs.key[:0], r.id, r.chunks), rest[:n]); err != nil {
				return fmt.Errorf("fuse: write waiting logs: %w", err)
			}
			r.chunks++
			rest = rest[n:]
		}
		r.storedTo = len(r.waiting)
		b := rs.scratch[:0]
		flags := byte(0)
		if r.declared {
			flags = 1
		}
		b = append(b, 2, flags)
		b = append(b, r.trace[:]...)
		b = binary.AppendVarint(b, r.declTime)
		b = binary.AppendVarint(b, r.first)
		b = binary.AppendUvarint(b, uint64(r.chunks))
		rs.scratch = b
		if err := t.State.Set(requestKey(rs.key[:0], r.id), b); err != nil {
			return fmt.Errorf("fuse: write request record: %w", err)
		}
		r.stored = true
	}
	clear(rs.changedReqs)
	rs.changedReqs = rs.changedReqs[:0]
	return nil
}

// restore reloads every request record.
func (rs *resolver) restore(t *engine.Task) error {
	rs.c.OpenRequests.Add(-int64(len(rs.requests)))
	defer func() { rs.c.OpenRequests.Add(int64(len(rs.requests))) }()
	clear(rs.requests)
	rs.reqTimers = rs.reqTimers[:0]
	rs.changedReqs = rs.changedReqs[:0]
	clear(rs.waitHeap)
	rs.waitHeap = rs.waitHeap[:0]
	rs.waitingBytes, rs.requestBytes = 0, 0
	return eachKey(t, prefixRequest, func(k, v []byte) error {
		r := &request{id: string(k[1:]), stored: true}
		if len(v) < 18 || (v[0] != 1 && v[0] != 2) {
			return fmt.Errorf("fuse: request %q: unknown record version", r.id)
		}
		version := v[0]
		r.declared = v[1]&1 != 0
		copy(r.trace[:], v[2:18])
		v = v[18:]
		var n int
		if r.declTime, n = binary.Varint(v); n <= 0 {
			return fmt.Errorf("fuse: request %q: %w", r.id, errCorruptChunk)
		}
		v = v[n:]
		if r.first, n = binary.Varint(v); n <= 0 {
			return fmt.Errorf("fuse: request %q: %w", r.id, errCorruptChunk)
		}
		v = v[n:]
		if version == 1 {
			// Waiting logs inline; the next checkpoint writes them as chunks.
			r.waiting = append([]byte(nil), v...)
			r.cleared = len(r.waiting) > 0
			rs.requestChanged(r)
		} else {
			chunks, n := binary.Uvarint(v)
			if n <= 0 || chunks > 1<<31 {
				return fmt.Errorf("fuse: request %q: %w", r.id, errCorruptChunk)
			}
			for c := uint32(0); c < uint32(chunks); c++ {
				var ok bool
				var err error
				if r.waiting, ok, err = t.State.Get(r.waiting, waitingKey(rs.key[:0], r.id, c)); err != nil {
					return err
				} else if !ok {
					return fmt.Errorf("fuse: request %q: waiting-log chunk %d of %d missing", r.id, c, chunks)
				}
			}
			r.chunks, r.storedTo = uint32(chunks), len(r.waiting)
		}
		rs.requests[r.id] = r
		rs.requestBytes += int64(requestOverhead + len(r.id))
		rs.waitingBytes += int64(len(r.waiting))
		if len(r.waiting) > 0 {
			rs.waitHeap.push(waitEntry{first: r.first, r: r})
		}
		rs.scheduleRequest(r)
		return nil
	})
}

type reqTimer struct {
	at int64
	r  *request
}

// before orders by time, then request id (deterministic output).
func (a reqTimer) before(b reqTimer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.r.id < b.r.id
}
