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

// clearWaiting empties r's waiting logs (forwarded, flagged or evicted).
func (p *processor) clearWaiting(r *request) {
	p.waitingBytes -= int64(len(r.waiting))
	r.waiting, r.first = nil, 0
	r.cleared = true
}

func (p *processor) requestFor(id string) *request {
	r := p.requests[id]
	if r == nil {
		r = &request{id: id}
		p.requests[id] = r
		p.requestBytes += int64(requestOverhead + len(id))
		p.s.counters.OpenRequests.Add(1)
	}
	return r
}

// routeRequest sends a resolve record (tag, then payload) to the task
// owning request id rid; a chunk of logs too large for one record goes as
// several.
func (p *processor) routeRequest(t *engine.Task, rid string, tag byte, payload []byte) error {
	q := otlp.HashPartition([]byte(rid), p.cfg.Partitions)
	if q == p.partition {
		if tag == tagDeclare {
			return p.resolveDeclare(t, rid, payload)
		}
		return p.waitOrForward(t, rid, payload)
	}
	p.s.counters.ResolveForwarded.Add(1)
	if tag == tagLogs {
		return p.emitMembers(t, p.cfg.ResolveTopic, q, []byte(rid), []byte{tagLogs}, payload)
	}
	v := append(make([]byte, 0, 1+len(payload)), tag)
	t.Emit(&kgo.Record{Topic: p.cfg.ResolveTopic, Partition: q, Key: []byte(rid), Value: append(v, payload...)})
	return nil
}

func (p *processor) processResolve(t *engine.Task, rec *kgo.Record) error {
	if len(rec.Key) == 0 || len(rec.Value) == 0 {
		return p.reject(t, rec, stageResolve, "resolve record without a request id key or value")
	}
	rid, v := string(rec.Key), rec.Value
	switch v[0] {
	case tagDeclare:
		if len(v) < 18 {
			return p.reject(t, rec, stageResolve, "short request id declaration")
		}
		return p.resolveDeclare(t, rid, v[1:])
	case tagLogs:
		if err := validChunk(v[1:]); err != nil {
			return p.reject(t, rec, stageResolve, "resolve record: "+err.Error())
		}
		return p.waitOrForward(t, rid, v[1:])
	}
	return p.reject(t, rec, stageResolve, "unknown resolve record tag "+strconv.Quote(string(v[:1])))
}

// resolveDeclare applies a declaration: trace id (16 bytes), event time
// (varint).
func (p *processor) resolveDeclare(t *engine.Task, rid string, v []byte) error {
	if len(v) < 17 {
		return fmt.Errorf("fuse: short declaration for request %q", rid)
	}
	var id [16]byte
	copy(id[:], v[:16])
	ts, n := binary.Varint(v[16:])
	if n <= 0 {
		ts = 0 // a corrupt time: the declaration still stands
	}
	return p.declare(t, rid, id, ts)
}

func (p *processor) declare(t *engine.Task, rid string, id [16]byte, ts int64) error {
	r := p.requestFor(rid)
	if r.declared && r.trace != id {
		// A request id reused by another trace (a client retry with the
		// same id): the first declaration stands.
		p.s.counters.RequestIDConflicts.Add(1)
		return nil
	}
	if !r.declared {
		p.s.counters.Declared.Add(1)
	}
	r.declared, r.trace = true, id
	r.declTime = max(r.declTime, ts)
	if len(r.waiting) > 0 {
		chunk := r.waiting
		p.clearWaiting(r)
		if err := p.forward(t, r, chunk); err != nil {
			return err
		}
	}
	p.requestChanged(r)
	return nil
}

// waitOrForward handles logs naming request r: forwarded when the request
// is declared, else kept until it is or allowed lateness runs out.
func (p *processor) waitOrForward(t *engine.Task, rid string, chunk []byte) error {
	r := p.requestFor(rid)
	if r.declared {
		return p.forward(t, r, chunk)
	}
	wm := t.Watermark()
	err := readMembers(chunk, func(m *member) error {
		if p.isLate(m.time, wm) {
			p.unresolved(t, rid, m)
			return nil
		}
		w := chunkWriter{buf: r.waiting}
		w.appendMember(m)
		if len(r.waiting) == 0 || m.time < r.first {
			r.first = m.time
			p.waitHeap.push(waitEntry{first: m.time, r: r})
		}
		p.waitingBytes += int64(len(w.buf) - len(r.waiting))
		r.waiting = w.buf
		return nil
	})
	if err != nil {
		return err
	}
	if len(r.waiting) == 0 && !r.stored {
		p.forget(r)
		return nil
	}
	p.requestChanged(r)
	err = p.enforceWaitingBudget(t)
	p.reportMemory()
	return err
}

// enforceWaitingBudget sends the oldest waiting logs (all those of the
// request whose earliest waiting log is oldest, then the next) to the late
// topic with reason "memory budget" while the waiting logs exceed
// MaxWaitingLogBytes.
func (p *processor) enforceWaitingBudget(t *engine.Task) error {
	for p.waitingBytes > p.cfg.MaxWaitingLogBytes && len(p.waitHeap) > 0 {
		e := p.waitHeap.pop()
		r := e.r
		if p.requests[r.id] != r || len(r.waiting) == 0 || r.first != e.first {
			continue // stale
		}
		err := readMembers(r.waiting, func(m *member) error {
			p.s.counters.WaitingEvicted.Add(1)
			p.s.counters.Late.Add(1)
			p.sendLate(t, []byte(r.id), m, "memory budget")
			return nil
		})
		if err != nil {
			return err
		}
		p.clearWaiting(r)
		p.requestChanged(r)
	}
	// Stale entries: rebuild when they dominate.
	if len(p.waitHeap) > 1024 && len(p.waitHeap) > 4*len(p.requests) {
		live := p.waitHeap[:0]
		for _, e := range p.waitHeap {
			if p.requests[e.r.id] == e.r && len(e.r.waiting) > 0 && e.r.first == e.first {
				live = append(live, e)
			}
		}
		clear(p.waitHeap[len(live):])
		p.waitHeap = live
		p.waitHeap.init()
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
func (p *processor) forward(t *engine.Task, r *request, chunk []byte) error {
	n := 0
	if err := readMembers(chunk, func(*member) error { n++; return nil }); err != nil {
		return err
	}
	p.s.counters.Resolved.Add(int64(n))
	p.key = otlp.AppendTraceIDHex(p.key[:0], r.trace)
	q := otlp.HashPartition(p.key, p.cfg.Partitions)
	if q == p.partition {
		return p.add(t, r.trace, chunk)
	}
	p.s.counters.Repartitioned.Add(1)
	return p.emitMembers(t, p.cfg.RepartitionTopic, q, append([]byte(nil), p.key...), nil, chunk)
}

func (p *processor) unresolved(t *engine.Task, rid string, m *member) {
	p.s.counters.Unresolved.Add(1)
	p.sendLate(t, []byte(rid), m, "unresolved request id "+rid+": no span declared it within allowed lateness")
}

func (p *processor) requestChanged(r *request) {
	if !r.changed {
		r.changed = true
		p.changedReqs = append(p.changedReqs, r)
	}
	p.scheduleRequest(r)
}

// requestAction is when r's waiting logs are flagged or r is forgotten.
func (p *processor) requestAction(r *request) int64 {
	if len(r.waiting) > 0 {
		return satAdd(r.first, int64(p.cfg.AllowedLateness)+1)
	}
	return satAdd(r.declTime, int64(p.cfg.IdleGap)+int64(p.cfg.AllowedLateness))
}

func (p *processor) scheduleRequest(r *request) {
	at := p.requestAction(r)
	if r.timerAt != 0 && r.timerAt <= at {
		return
	}
	r.timerAt = at
	p.reqTimers.push(reqTimer{at: at, r: r})
}

// fireRequests flags and forgets requests due at wm; it shares the timer
// slice budget with the trace timers.
func (p *processor) fireRequests(t *engine.Task, wm int64, budget int) (int, error) {
	fired := 0
	for len(p.reqTimers) > 0 && p.reqTimers[0].at <= wm {
		if fired == budget {
			p.backlog = true
			return fired, nil
		}
		fired++
		tm := p.reqTimers.pop()
		r := tm.r
		if p.requests[r.id] != r || r.timerAt != tm.at {
			continue
		}
		r.timerAt = 0
		if at := p.requestAction(r); at > wm {
			p.scheduleRequest(r)
			continue
		}
		if len(r.waiting) > 0 {
			err := readMembers(r.waiting, func(m *member) error {
				p.unresolved(t, r.id, m)
				return nil
			})
			if err != nil {
				return fired, err
			}
			p.clearWaiting(r)
			if r.declared {
				p.requestChanged(r)
				continue
			}
		}
		p.forget(r)
		if r.stored {
			if err := p.deleteRequest(t, r); err != nil {
				return fired, err
			}
		}
	}
	return fired, nil
}

// deleteRequest deletes r's record and waiting-log chunks.
func (p *processor) deleteRequest(t *engine.Task, r *request) error {
	if err := p.deleteWaitingChunks(t, r); err != nil {
		return err
	}
	return t.State.Delete(requestKey(p.key[:0], r.id))
}

func (p *processor) deleteWaitingChunks(t *engine.Task, r *request) error {
	for c := uint32(0); c < r.chunks; c++ {
		if err := t.State.Delete(waitingKey(p.key[:0], r.id, c)); err != nil {
			return err
		}
	}
	r.chunks, r.storedTo = 0, 0
	return nil
}

func (p *processor) forget(r *request) {
	delete(p.requests, r.id)
	p.waitingBytes -= int64(len(r.waiting))
	p.requestBytes -= int64(requestOverhead + len(r.id))
	p.s.counters.OpenRequests.Add(-1)
}

func requestKey(dst []byte, id string) []byte { return append(append(dst, prefixRequest), id...) }

func waitingKey(dst []byte, id string, chunk uint32) []byte {
	dst = append(dst, prefixWaiting)
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	return binary.BigEndian.AppendUint32(dst, chunk)
}

// checkpointRequests writes the changed requests' records.
func (p *processor) checkpointRequests(t *engine.Task) error {
	for _, r := range p.changedReqs {
		r.changed = false
		if p.requests[r.id] != r {
			continue
		}
		if r.cleared || len(r.waiting) < r.storedTo {
			if err := p.deleteWaitingChunks(t, r); err != nil {
				return err
			}
			r.cleared = false
		}
		for rest := r.waiting[r.storedTo:]; len(rest) > 0; {
			n, err := chunkPrefix(rest, p.chunkBytes())
			if err != nil {
				return err
			}
			if err := t.State.Set(waitingKey(p.key[:0], r.id, r.chunks), rest[:n]); err != nil {
				return fmt.Errorf("fuse: write waiting logs: %w", err)
			}
			r.chunks++
			rest = rest[n:]
		}
		r.storedTo = len(r.waiting)
		b := p.scratch[:0]
		flags := byte(0)
		if r.declared {
			flags = 1
		}
		b = append(b, 2, flags)
		b = append(b, r.trace[:]...)
		b = binary.AppendVarint(b, r.declTime)
		b = binary.AppendVarint(b, r.first)
		b = binary.AppendUvarint(b, uint64(r.chunks))
		p.scratch = b
		if err := t.State.Set(requestKey(p.key[:0], r.id), b); err != nil {
			return fmt.Errorf("fuse: write request record: %w", err)
		}
		r.stored = true
	}
	clear(p.changedReqs)
	p.changedReqs = p.changedReqs[:0]
	return nil
}

// restoreRequests reloads every request record.
func (p *processor) restoreRequests(t *engine.Task) error {
	p.s.counters.OpenRequests.Add(-int64(len(p.requests)))
	defer func() { p.s.counters.OpenRequests.Add(int64(len(p.requests))) }()
	clear(p.requests)
	p.reqTimers = p.reqTimers[:0]
	p.changedReqs = p.changedReqs[:0]
	clear(p.waitHeap)
	p.waitHeap = p.waitHeap[:0]
	p.waitingBytes, p.requestBytes = 0, 0
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
			p.requestChanged(r)
		} else {
			chunks, n := binary.Uvarint(v)
			if n <= 0 || chunks > 1<<31 {
				return fmt.Errorf("fuse: request %q: %w", r.id, errCorruptChunk)
			}
			for c := uint32(0); c < uint32(chunks); c++ {
				var ok bool
				var err error
				if r.waiting, ok, err = t.State.Get(r.waiting, waitingKey(p.key[:0], r.id, c)); err != nil {
					return err
				} else if !ok {
					return fmt.Errorf("fuse: request %q: waiting-log chunk %d of %d missing", r.id, c, chunks)
				}
			}
			r.chunks, r.storedTo = uint32(chunks), len(r.waiting)
		}
		p.requests[r.id] = r
		p.requestBytes += int64(requestOverhead + len(r.id))
		p.waitingBytes += int64(len(r.waiting))
		if len(r.waiting) > 0 {
			p.waitHeap.push(waitEntry{first: r.first, r: r})
		}
		p.scheduleRequest(r)
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
