package fuse

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/resources"
	"github.com/braidlabs/braid/operators/sampling"
	"github.com/braidlabs/braid/operators/semconv"
)

// Counters are the stage's record accounting, summed over its tasks. Every
// member read ends in exactly one of Fused (via a trace), Late, Unjoined,
// Truncated or TooLarge; every record a stage cannot handle in DLQ or
// Skipped (ErrorPolicy).
type Counters struct {
	Messages         atomic.Int64 // input messages read from sources
	Members          atomic.Int64 // members cut from decoded messages
	Local            atomic.Int64 // trace groups fused in place (fast path)
	Repartitioned    atomic.Int64 // trace groups sent to the repartition topic
	Fused            atomic.Int64 // FusedTrace records emitted (all revisions)
	Revisions        atomic.Int64 // of which revision > 0
	Late             atomic.Int64 // members sent to the late topic
	DLQ              atomic.Int64 // records a stage could not handle sent to the dead-letter topic (ErrorPolicy dead_letter)
	Skipped          atomic.Int64 // records a stage could not handle dropped (ErrorPolicy skip)
	Future           atomic.Int64 // members more than MaxClockSkew ahead of their record's timestamp (sent to the late topic, or re-stamped)
	TooLarge         atomic.Int64 // members larger than MaxRecordBytes allows (handled by ErrorPolicy.Ingest)
	RepairedUTF8     atomic.Int64 // members, resources and scopes re-encoded because a string held invalid UTF-8
	Split            atomic.Int64 // repartition and resolve records cut into several to fit MaxRecordBytes
	Chunked          atomic.Int64 // late and dead-letter copies cut into braid.chunk records
	Parts            atomic.Int64 // fused traces split into parts to fit MaxRecordBytes
	DerivedDropped   atomic.Int64 // Derived or ResourceContext fields left out of a fused trace: they did not marshal, or did not fit a part
	UnjoinedLogs     atomic.Int64 // log records without a trace id
	UnjoinedPoint    atomic.Int64 // metric points without an exemplar trace id, not kept as resource samples
	ResourcePoint    atomic.Int64 // metric points without an exemplar written to the resources table
	Truncated        atomic.Int64 // members cut by a per-trace cap
	Evicted          atomic.Int64 // open traces emitted early and dropped from memory because MaxOpenTraceBytes was reached (a later member revises them)
	IdleFlushed      atomic.Int64 // dirty traces emitted by the processing-time flush (FlushAfter) before event time closed them
	Unrevised        atomic.Int64 // re-emissions not written: the record would have said what the trace's last one said
	Spills           atomic.Int64 // times pending members were written to state before a checkpoint because MaxOpenTraceBytes was reached
	ChunkReads       atomic.Int64 // chunks read back from state to emit a trace: its members were not kept in memory since a checkpoint wrote them (a revision, a restart, a full MaxOpenTraceBytes share)
	OpenTraces       atomic.Int64 // traces in state
	OpenTraceBytes   atomic.Int64 // gauge: memory of open traces (MaxOpenTraceBytes share), bytes
	WaitingLogBytes  atomic.Int64 // gauge: memory of logs waiting for a request id (MaxWaitingLogBytes share), bytes
	ClosedLate       atomic.Int64 // of Late: members of a trace already emitted and purged (reason "trace already closed")
	ClosedTraces     atomic.Int64 // gauge: tombstones of closed traces held (ClosedRetention)
	ClosedTraceBytes atomic.Int64 // gauge: memory of those tombstones (MaxClosedTraceBytes share), bytes
	ClosedEvicted    atomic.Int64 // tombstones forgotten before ClosedRetention because MaxClosedTraceBytes was reached

	// Resolve stage (request-id joins).
	Declared           atomic.Int64 // request ids declared by spans
	Resolved           atomic.Int64 // trace-less logs joined to a trace by request id
	Unresolved         atomic.Int64 // trace-less logs whose request id no span declared in time (sent to the late topic)
	ResolveForwarded   atomic.Int64 // resolve records sent to another task
	RequestIDConflicts atomic.Int64 // request ids declared by a second trace (ignored)
	OpenRequests       atomic.Int64 // request ids in state
	WaitingEvicted     atomic.Int64 // waiting logs sent to the late topic because MaxWaitingLogBytes was reached (reason "memory budget")

	// kvgraph stage.
	KVLogs           atomic.Int64 // KV-block event, sanitizer and Xid logs routed to the kvgraph stage
	IncidentTags     atomic.Int64 // incident tags sent to polluted requests' traces
	IncidentTagsLate atomic.Int64 // of which arrived after their trace was purged
	KVBuffered       atomic.Int64 // KV events held until the watermark passes them
	KVSpilled        atomic.Int64 // of which held in state only, their members over KVGraph.MaxKVBufferBytes
	KVPointReads     atomic.Int64 // spilled KV events read back alone: they came after later ones had been released (readAhead)
	KVShed           atomic.Int64 // held KV events whose places left memory too, the places alone over KVGraph.MaxKVBufferBytes (shedPlaces)
	KVLateEvents     atomic.Int64 // KV events that arrived behind the watermark (handed over at once)
}

// Stage is the fuse stage: its topology for the engine and its counters.
type Stage struct {
	cfg        Config
	counters   Counters
	probes     []decodeProbe    // per source: decode failures of its first messages
	table      *resources.Table // nil when the resources stage is off
	kvCounters kvgraph.Counters
}

// KVCounters returns the kvgraph stage's live counters.
func (s *Stage) KVCounters() *kvgraph.Counters { return &s.kvCounters }

// New validates cfg and returns the stage.
func New(cfg Config) (*Stage, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Stage{cfg: cfg, probes: make([]decodeProbe, len(cfg.Sources))}
	if cfg.ResourcesTopic != "" {
		s.table = resources.NewTable(cfg.Partitions, cfg.ResourceIdleness, cfg.ResourceRetain, time.Now())
		s.table.SetLimits(cfg.ResourceLimits)
	}
	return s, nil
}

// closingWatermark is the event time up to which a task's timers may
// fire at watermark wm: a trace is emitted with the resource values of its
// window only once the resources table has them all (nil table: wm).
func (s *Stage) closingWatermark(t *engine.Task, wm int64) int64 {
	if s.table != nil {
		wm = min(wm, s.table.Watermark(t.Now()))
	}
	return wm
}

// Resources is the resources stage's table; nil when it is off.
func (s *Stage) Resources() *resources.Table { return s.table }

// Config returns the stage's configuration with defaults filled in.
func (s *Stage) Config() Config { return s.cfg }

// Counters returns the live counters.
func (s *Stage) Counters() *Counters { return &s.counters }

// Topology returns what the engine runs.
func (s *Stage) Topology() engine.Topology {
	inputs := make([]engine.Input, 0, len(s.cfg.Sources)+2)
	for _, src := range s.cfg.Sources {
		inputs = append(inputs, engine.Input{Topic: src.Topic})
	}
	// Internal inputs: ingest writes all three; resolve (logs held until
	// their request is declared) and kvgraph (incident tags) forward to
	// fuse.
	inputs = append(inputs,
		engine.Input{Topic: s.cfg.ResolveTopic, Internal: true},
		engine.Input{Topic: s.cfg.KVTopic, Internal: true},
		engine.Input{Topic: s.cfg.RepartitionTopic, Internal: true, From: []string{s.cfg.ResolveTopic, s.cfg.KVTopic}})
	if s.cfg.Alerts != nil {
		// Partial aggregates of what the task emits (traces fused from
		// every other input) and reads (samples, incidents). Aside: the
		// traces they are made of must not wait for them (a hop more
		// than the traces' own inputs); the alerts stage evaluates at
		// the watermark that covers them (Task.WatermarkAll).
		// Deferred: they are written when the task prepares a
		// checkpoint.
		inputs = append(inputs, engine.Input{Topic: s.cfg.AlertsTopic, Internal: true, Aside: true, Deferred: true,
			From: []string{s.cfg.ResolveTopic, s.cfg.KVTopic, s.cfg.RepartitionTopic}})
	}
	var globals []engine.Global
	if s.table != nil {
		globals = append(globals, s.table.Global(s.cfg.ResourcesTopic))
	}
	return engine.Topology{
		Globals:    globals,
		Name:       "fuse",
		Inputs:     inputs,
		Partitions: s.cfg.Partitions,
		Changelog:  s.cfg.ChangelogTopic,
		NewProcessor: func(t *engine.Task) (engine.Processor, error) {
			return newTask(s, t.Partition), nil
		},
	}
}

// trace is the in-memory record of one open trace (≈150 bytes with its map
// entry and timer). Its members live in the keyspace and in pending.
type trace struct {
	id          [16]byte
	first, last int64
	revision    uint32 // revision of the next emission
	digest      uint64 // of the last emission's content (emit) from a processing-time flush on; 0: none
	emitted     bool   // emitted at least once
	observed    bool   // handed to the alerts stage and LLM metrics (an emission with spans)
	dirty       bool   // changed since the last emission
	changed     bool   // in processor.changed
	spans, logs uint32
	points      uint32
	dropped     [3]uint32 // spans, logs, points cut by caps
	bytes       uint32
	chunks      uint32 // chunks in the keyspace
	inState     bool   // its record is in the keyspace (written, or read from there)
	gone        bool   // no longer p.traces' entry for its id (purged or evicted)
	pending     []byte // members since the last checkpoint (a chunk)
	// stored: the members of the chunks in the keyspace, all of them,
	// kept from when a checkpoint wrote them (flushTrace) until the
	// emission, which then reads nothing back; nil when they are not
	// (read them from state).
	stored    []byte
	sinceRes  uint32 // bytes of pending from its last member that states its resource
	lastRes   []byte // resource of pending's last member
	timerAt   int64  // scheduled timer, 0 if none
	touchedAt int64  // processing time of the last member, ns
	// sampling stage: why the trace is kept (0: not, so far), the rate
	// then, and how many members (in arrival order) were written to the
	// sampled topics
	sampled    sampling.Reason
	sampleRate float64
	sent       uint32
}

// touch is an entry of the processing-time flush queue.
type touch struct {
	at int64
	tr *trace
}

type fuser struct {
	outputs   // cfg, the stage's configuration, and the writes every stage shares
	s         *Stage
	partition int32
	traces    map[[16]byte]*trace
	timers    minHeap[timer]
	backlog   bool // due timers remain after the last slice
	flushing  bool // emit is called by the processing-time flush (flushIdle)
	// lastInput: the processing time, ns, of the task's last record that
	// may keep traces open (every input but the alerts stage's).
	lastInput *int64
	touched   []touch // in processing-time order; head at touchedHead
	touchHead int
	changed   []*trace
	key       []byte
	scratch   []byte
	emitter   emitter
	deriver   semconv.Deriver
	attrs     []semconv.KV // scratch of traceIdentity: the attributes of resource attrsOf
	attrsOf   []byte
	pattrs    []semconv.KV

	// memory share (MaxOpenTraceBytes)
	openBytes   int64 // traceOverhead per trace in memory + pending and stored members
	storedBytes int64 // of which stored members
	// pendingMean: the mean size a trace's pending members reach (a
	// moving average), the capacity a trace's first member allocates, so
	// that most traces allocate once instead of at every doubling.
	pendingMean int
	// freePending: buffers of pending members that left their trace,
	// for the next traces (freePendingMax of at most freePendingCap).
	freePending  [][]byte
	keeping      []*trace            // traces given stored members, in that order (some since emitted or purged)
	reportedOpen int64               // what the gauge holds of this task
	evicted      int                 // traces emitted early and dropped from memory, still in state
	evictTimers  minHeap[evictTimer] // when each evicted trace is purged

	// tombstones of closed traces (closed.go), bounded by MaxClosedTraceBytes
	closed         map[[16]byte]uint32 // trace id → its next revision
	closedQ        []closedEntry       // in expiry order; head at closedHead
	closedHead     int
	closedBuckets  []closedBucket // the state values of closedQ, in its order; head at bucketHead
	bucketHead     int
	closedSeq      uint32 // number of the next bucket
	reportedClosed int64  // tombstones the gauges hold of this task

	// Where an emitted trace goes besides braid.fused: the alerts stage
	// and the derived LLM metrics (observe), and the sampling stage (nil
	// when off), which decides whether trace stores keep it.
	observe  traceObserver
	sampling traceSampler
	sampMem  []sampling.Member // the members handed to sampling
}

// traceObserver is how the fuse stage hands an emitted trace to the
// alerts stage and the derived LLM metrics (alertsStage).
type traceObserver interface {
	wantsTraces() bool
	trace(t *engine.Task, tr *emittedTrace)
}

// traceSampler is how the fuse stage asks the sampling stage
// (samplingStage) whether trace stores keep an emitted trace, and hands it
// the members of a kept one.
type traceSampler interface {
	config() *sampling.Config
	decide(st *sampling.Trace, first bool, reason sampling.Reason, rate float64) sampling.Decision
	write(t *engine.Task, id [16]byte, members []sampling.Member, d sampling.Decision)
}

// process implements stage: the repartition topic's chunks of members,
// keyed by trace id (from ingest, resolve and incident tags of other tasks).
func (p *fuser) process(t *engine.Task, rec *kgo.Record, _ int) error {
	id, ok := otlp.ParseTraceIDHex(rec.Key)
	if !ok {
		return p.reject(t, rec, stageFuse, "repartition record without a trace id key")
	}
	if err := validChunk(rec.Value); err != nil {
		return p.reject(t, rec, stageFuse, "repartition record: "+err.Error())
	}
	return p.add(t, id, rec.Value)
}

// add fuses a chunk of members of trace id.
//
// Lateness is the trace's, not each member's: members of a trace that is
// still open join it however old their own event times are (its purge,
// not theirs, ends what it takes), and members that arrive together — a
// chunk is one trace's part of a record — are late only if the newest of
// them is. A server that writes a request's spans when the request ends
// (INPUTS.md: vLLM) gives its early spans event times as old as the
// request is long; judged alone, those of a request longer than the
// allowed lateness would go to braid.late while the rest of their trace
// is fused.
func (p *fuser) add(t *engine.Task, id [16]byte, chunk []byte) error {
	wm := t.Watermark()
	tr := p.traces[id]
	next, closed := uint32(0), false
	if tr == nil && len(p.closed) > 0 {
		next, closed = p.closed[id]
	}
	if tr == nil && !closed && p.evicted > 0 {
		// A trace evicted from memory, looked up in the keyspace.
		var err error
		if tr, err = p.reload(t, id); err != nil {
			return err
		}
	}
	newest := int64(math.MinInt64) // of the chunk's members, once one is late
	err := readMembers(chunk, func(m *member) error {
		// An open trace takes the member however late it is (an incident
		// tag included: no input record, and the trace is still here).
		late := tr == nil && p.isLate(m.time, wm)
		if late && !closed {
			if newest == math.MinInt64 {
				newest = newestMember(chunk)
			}
			late = p.isLate(newest, wm)
		}
		if late || closed {
			switch {
			case m.kind == kindIncident:
				p.s.counters.IncidentTagsLate.Add(1) // not an input record: nothing to send
			case late:
				p.late(t, id, m)
			default:
				p.lateClosed(t, id, next, m)
			}
			return nil
		}
		if tr == nil {
			tr = &trace{id: id, first: m.time, last: m.time}
			p.traces[id] = tr
			p.openBytes += traceOverhead
			p.s.counters.OpenTraces.Add(1)
		}
		if m.kind != kindIncident && p.capped(tr, m) {
			p.s.counters.Truncated.Add(1)
			tr.dropped[m.kind-1]++
		} else {
			w := chunkWriter{buf: tr.pending, lastRes: tr.lastRes}
			if w.buf == nil {
				w.buf = p.newPending()
			}
			if len(tr.pending) > 0 && int(tr.sinceRes)+len(m.body) < p.chunkBytes() {
				w.n = 1 // may refer to the previous resource; else restate it, so a chunk can start here
			}
			size := len(w.buf)
			w.appendMember(m)
			if size = len(w.buf) - size; w.restated {
				tr.sinceRes = uint32(size)
			} else {
				tr.sinceRes += uint32(size)
			}
			p.openBytes += int64(len(w.buf) - len(tr.pending))
			tr.pending, tr.lastRes = w.buf, w.lastRes
			tr.bytes += uint32(len(m.body) + len(m.resource))
			switch m.kind {
			case kindSpan:
				tr.spans++
			case kindLog:
				tr.logs++
			case kindPoint:
				tr.points++
			}
		}
		tr.first = min(tr.first, m.time)
		tr.last = max(tr.last, m.time)
		tr.dirty = true
		if now := t.Now().UnixNano(); tr.touchedAt != now && p.cfg.FlushAfter > 0 {
			tr.touchedAt = now
			p.touched = append(p.touched, touch{at: now, tr: tr})
		}
		p.markChanged(tr)
		p.schedule(tr)
		return nil
	})
	if err != nil {
		return err
	}
	if p.openBytes > p.cfg.MaxOpenTraceBytes {
		err = p.relieve(t, wm)
	}
	return err
}

// reportMemory publishes the task's memory shares in the gauges (the task
// calls it after each of its calls).
func (p *fuser) reportMemory() {
	if d := p.shareBytes() - p.reportedOpen; d != 0 {
		p.s.counters.OpenTraceBytes.Add(d)
		p.reportedOpen += d
	}
	if d := int64(len(p.closed)) - p.reportedClosed; d != 0 {
		p.s.counters.ClosedTraces.Add(d)
		p.s.counters.ClosedTraceBytes.Add(d * closedOverhead)
		p.reportedClosed += d
	}
}

func (p *fuser) capped(tr *trace, m *member) bool {
	if int(tr.bytes)+len(m.body)+len(m.resource) > p.cfg.MaxBytes {
		return true
	}
	switch m.kind {
	case kindSpan:
		return int(tr.spans) >= p.cfg.MaxSpans
	case kindLog:
		return int(tr.logs) >= p.cfg.MaxLogs
	default:
		return int(tr.points) >= p.cfg.MaxPoints
	}
}

func (p *fuser) markChanged(tr *trace) {
	if !tr.changed {
		tr.changed = true
		p.changed = append(p.changed, tr)
	}
}

// schedule makes sure tr has a timer at or before its next action.
func (p *fuser) schedule(tr *trace) {
	at := p.nextAction(tr)
	if tr.timerAt != 0 && tr.timerAt <= at {
		return // the pending timer fires first and reschedules
	}
	tr.timerAt = at
	p.timers.push(timer{at: at, tr: tr})
}

// nextAction is the event time at which tr is emitted (dirty) or purged.
func (p *fuser) nextAction(tr *trace) int64 {
	if tr.dirty {
		return satAdd(tr.last, int64(p.cfg.IdleGap))
	}
	return satAdd(satAdd(tr.last, int64(p.cfg.IdleGap)), int64(p.cfg.AllowedLateness))
}

// onWatermark implements stage: fires due timers in order, then flushes
// traces idle in processing time.
func (p *fuser) onWatermark(t *engine.Task, wm int64) (bool, error) {
	if err := p.fireTimers(t, wm); err != nil {
		return p.backlog, err
	}
	return p.backlog, p.flushIdle(t, wm)
}

// flushIdle emits the dirty traces that received nothing for FlushAfter,
// once the task itself has received nothing for that long and the
// instance is live (engine.Task.Live), at most timerSlice of them a call.
func (p *fuser) flushIdle(t *engine.Task, wm int64) error {
	if p.cfg.FlushAfter <= 0 {
		return nil
	}
	deadline := t.Now().UnixNano() - int64(p.cfg.FlushAfter)
	if *p.lastInput > deadline || !t.Live() {
		// Input is still flowing (perhaps a backlog far behind in event
		// time), or it stopped only because the job is behind (a task
		// reading a backlog, the poll loop held by backpressure): the
		// watermark will close the traces, once, with every member.
		return nil
	}
	for flushed := 0; p.touchHead < len(p.touched) && p.touched[p.touchHead].at <= deadline; {
		if flushed == timerSlice {
			// A slice at a time, as the timers: a checkpoint barrier
			// waits for one slice at most (engine.Backlogger).
			p.backlog = true
			break
		}
		tc := p.touched[p.touchHead]
		p.touched[p.touchHead] = touch{}
		p.touchHead++
		tr := tc.tr
		if tr.gone || tr.touchedAt != tc.at || !tr.dirty {
			continue
		}
		p.flushing = true
		err := p.emit(t, tr, wm)
		p.flushing = false
		if err != nil {
			return err
		}
		flushed++
		p.s.counters.IdleFlushed.Add(1)
		// Emitted before the resources table has the trace's window (its
		// samples may still come): still changed, so that the close in
		// event time, which waits for the table, emits it again with its
		// window whole — the last revision is what a replay writes.
		tr.dirty = p.s.table != nil && p.s.table.Watermark(t.Now()) < tr.last
		p.markChanged(tr)
		p.schedule(tr)
	}
	if p.touchHead > 1024 && p.touchHead*2 > len(p.touched) {
		n := copy(p.touched, p.touched[p.touchHead:])
		clear(p.touched[n:])
		p.touched, p.touchHead = p.touched[:n], 0
	}
	return nil
}

// timerSlice bounds the emissions of one OnWatermark call of a stage; the
// engine calls again while Backlog reports more (see engine.Backlogger).
const timerSlice = 512

func (p *fuser) fireTimers(t *engine.Task, wm int64) error {
	p.backlog = false
	// A trace is emitted with the resource values of its window only once
	// the table has them all.
	wm = p.s.closingWatermark(t, wm)
	fired, err := p.fireEvicted(t, wm, 0)
	if err != nil || p.backlog {
		return err
	}
	for ; len(p.timers) > 0 && p.timers[0].at <= wm; fired++ {
		if fired == timerSlice {
			p.backlog = true
			return nil
		}
		tm := p.timers.pop()
		tr := tm.tr
		if tr.gone || tr.timerAt != tm.at {
			continue // purged, or superseded by an earlier timer
		}
		tr.timerAt = 0
		at := p.nextAction(tr)
		if at > wm {
			p.schedule(tr)
			continue
		}
		if tr.dirty {
			if err := p.emit(t, tr, wm); err != nil {
				return err
			}
			tr.dirty = false
			p.markChanged(tr)
			p.schedule(tr)
			continue
		}
		if err := p.purge(t, tr, wm); err != nil {
			return err
		}
	}
	_, err = p.expireClosed(t, wm, fired)
	return err
}

// newestMember is the latest event time of chunk's members other than
// incident tags (MinInt64: none). chunk has been read once: it is well
// formed.
func newestMember(chunk []byte) int64 {
	newest := int64(math.MinInt64)
	_ = readMembers(chunk, func(m *member) error {
		if m.kind != kindIncident {
			newest = max(newest, m.time)
		}
		return nil
	})
	return newest
}

var (
	prefixMeta = byte('m')
	prefixData = byte('d')
)

func metaKey(dst []byte, id [16]byte) []byte { return append(append(dst, prefixMeta), id[:]...) }

func dataKey(dst []byte, id [16]byte, chunk uint32) []byte {
	dst = append(append(dst, prefixData), id[:]...)
	return binary.BigEndian.AppendUint32(dst, chunk)
}

// purge deletes tr, due at watermark wm, and keeps its tombstone.
func (p *fuser) purge(t *engine.Task, tr *trace, wm int64) error {
	// The chunk keys are known: point deletes, no range tombstone (which
	// Pebble's indexed batch would re-fragment on every later read) and no
	// iterator. A trace that never reached the keyspace (emitted within
	// the checkpoint that read it) has nothing there to delete: no
	// tombstone, in the keyspace nor the changelog.
	if tr.inState {
		for c := uint32(0); c < tr.chunks; c++ {
			if err := t.State.Delete(dataKey(p.key[:0], tr.id, c)); err != nil {
				return err
			}
		}
		if err := t.State.Delete(metaKey(p.key[:0], tr.id)); err != nil {
			return err
		}
	}
	p.forget(tr)
	p.unmap(tr)
	p.openBytes -= traceOverhead + int64(len(tr.pending))
	p.notePending(len(tr.pending))
	p.recyclePending(tr.pending) // the trace is gone: nothing reads them again
	tr.pending = nil
	p.s.counters.OpenTraces.Add(-1)
	return p.closeTrace(t, tr, wm)
}

// unmap takes tr out of p.traces; the lists that still hold it (timers,
// the flush queue, changed) skip it by tr.gone.
func (p *fuser) unmap(tr *trace) {
	delete(p.traces, tr.id)
	tr.gone = true
}

// newPending returns an empty buffer for a trace's pending members: a
// recycled one, else one of the mean size they reach.
func (p *fuser) newPending() []byte {
	if n := len(p.freePending); n > 0 {
		b := p.freePending[n-1]
		p.freePending[n-1] = nil
		p.freePending = p.freePending[:n-1]
		return b
	}
	return make([]byte, 0, min(p.pendingMean+p.pendingMean/4, p.chunkBytes()))
}

// recyclePending keeps b, a buffer of pending members that nothing reads
// any more, for newPending — unless the list is full or b large: what the
// list holds outside the open-traces share stays under
// freePendingMax × freePendingCap (1 MiB) per task.
func (p *fuser) recyclePending(b []byte) {
	if cap(b) > 0 && cap(b) <= freePendingCap && len(p.freePending) < freePendingMax {
		p.freePending = append(p.freePending, b[:0])
	}
}

const (
	freePendingMax = 64
	freePendingCap = 16 << 10
)

// notePending counts a trace's pending members of n bytes, as they go
// to a chunk or with the trace, in pendingMean.
func (p *fuser) notePending(n int) {
	if n > 0 {
		p.pendingMean += (n - p.pendingMean) / 16
	}
}

// maxChunk bounds one chunk, so that a changelog record stays well under
// Kafka's default message.max.bytes (1 MiB).
const maxChunk = 256 << 10

// chunkBytes is the chunk size: maxChunk, or a quarter of MaxRecordBytes
// if that is less. A chunk is at most this, or one member that is larger
// (members are at most maxMemberBytes).
func (o *outputs) chunkBytes() int { return min(maxChunk, o.cfg.MaxRecordBytes/4) }

// prepareCheckpoint implements stage: pending members become a chunk,
// and every changed trace's record is written.
func (p *fuser) prepareCheckpoint(t *engine.Task) error {
	if err := p.checkpointClosed(t); err != nil {
		return err
	}
	for _, tr := range p.changed {
		tr.changed = false
		if tr.gone {
			continue // purged
		}
		if err := p.flushTrace(t, tr, true); err != nil {
			return err
		}
	}
	clear(p.changed)
	p.changed = p.changed[:0]
	// The traces whose stored members went since: out of the list.
	n := 0
	for _, tr := range p.keeping {
		if tr.stored != nil {
			p.keeping[n] = tr
			n++
		}
	}
	clear(p.keeping[n:])
	p.keeping = p.keeping[:n]
	return nil
}

// flushTrace writes tr's pending members as chunks, and its record. With
// keep, the members stay in memory as tr.stored if it holds every
// earlier chunk, for the emission (at a checkpoint: the memory they take
// stays counted in the share, and relieve drops them first), while the
// members kept take at most half the share: the other half is for what
// comes until the next checkpoint (reading a backlog, kept members that
// the pending ones push out only cost the heap); else they leave memory,
// with what stored held.
func (p *fuser) flushTrace(t *engine.Task, tr *trace, keep bool) error {
	keep = keep && len(tr.pending) > 0 && (tr.chunks == 0 || tr.stored != nil) && len(tr.stored)+len(tr.pending) <= p.chunkBytes() &&
		p.storedBytes+int64(len(tr.pending)) <= p.cfg.MaxOpenTraceBytes/2
	tr.inState = true
	p.notePending(len(tr.pending))
	for rest := tr.pending; len(rest) > 0; {
		n, err := chunkPrefix(rest, p.chunkBytes())
		if err != nil {
			return err
		}
		if err := t.State.Set(dataKey(p.key[:0], tr.id, tr.chunks), rest[:n]); err != nil {
			return fmt.Errorf("fuse: write chunk: %w", err)
		}
		tr.chunks++
		rest = rest[n:]
	}
	switch {
	case keep && tr.stored == nil:
		tr.stored = tr.pending
		p.storedBytes += int64(len(tr.pending))
		p.keeping = append(p.keeping, tr)
	case keep:
		tr.stored = append(tr.stored, tr.pending...)
		p.storedBytes += int64(len(tr.pending))
		p.recyclePending(tr.pending)
	default:
		p.forget(tr)
		p.openBytes -= int64(len(tr.pending))
		p.recyclePending(tr.pending) // the batch has a copy
	}
	tr.pending, tr.lastRes = nil, nil
	p.scratch = encodeMeta(p.scratch[:0], tr)
	if err := t.State.Set(metaKey(p.key[:0], tr.id), p.scratch); err != nil {
		return fmt.Errorf("fuse: write trace record: %w", err)
	}
	return nil
}

// restore implements stage: reloads every open trace's record and
// rebuilds what works from it in memory — event-time timers, and the
// processing-time flush queue (FlushAfter), in which a restored trace
// that changed since its last emission counts as touched now, so that it
// is emitted FlushAfter after the restart even if no input comes — and
// the tombstones of closed traces.
func (p *fuser) restore(t *engine.Task) error {
	p.s.counters.OpenTraces.Add(-int64(len(p.traces) + p.evicted))
	clear(p.traces)
	p.timers = p.timers[:0]
	clear(p.evictTimers)
	p.evictTimers, p.evicted, p.openBytes, p.storedBytes = p.evictTimers[:0], 0, 0, 0
	clear(p.keeping)
	p.keeping = p.keeping[:0]
	clear(p.touched)
	p.touched, p.touchHead = p.touched[:0], 0
	p.changed = p.changed[:0]
	if err := p.restoreClosed(t); err != nil {
		return err
	}
	defer func() { p.s.counters.OpenTraces.Add(int64(len(p.traces))) }()
	now := t.Now().UnixNano()
	err := eachKey(t, prefixMeta, func(k, v []byte) error {
		if len(k) != 17 {
			return nil
		}
		tr := &trace{}
		copy(tr.id[:], k[1:])
		if err := decodeMeta(v, tr); err != nil {
			return fmt.Errorf("fuse: trace %x: %w", tr.id, err)
		}
		p.traces[tr.id] = tr
		p.openBytes += traceOverhead
		if tr.dirty && p.cfg.FlushAfter > 0 {
			// Silent since its last member before the stop (as of the
			// checkpoint), or since now if that is unknown or ahead.
			if tr.touchedAt <= 0 || tr.touchedAt > now {
				tr.touchedAt = now
			}
			p.touched = append(p.touched, touch{at: tr.touchedAt, tr: tr})
		} else {
			tr.touchedAt = 0
		}
		p.schedule(tr)
		return nil
	})
	if err != nil {
		return err
	}
	// The flush queue is in processing-time order.
	slices.SortStableFunc(p.touched, func(a, b touch) int { return cmp.Compare(a.at, b.at) })
	return nil
}

// eachKey calls fn for every key under prefix in t's keyspace, in key
// order; k and v are valid during the call only.
func eachKey(t *engine.Task, prefix byte, fn func(k, v []byte) error) error {
	it, err := t.State.Iter([]byte{prefix}, []byte{prefix + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// encodeMeta is a trace's state record: version 3, times, flags, counts,
// the processing time of its last member (so that a restart keeps
// flush_after's clock), and the sampling stage's reason, rate and members
// written. Version 2 lacks the sampling fields, version 1 also the
// processing time.
func encodeMeta(b []byte, tr *trace) []byte {
	b = append(b, 3) // version
	b = binary.AppendVarint(b, tr.first)
	b = binary.AppendVarint(b, tr.last)
	flags := byte(0)
	if tr.emitted {
		flags |= 1
	}
	if tr.dirty {
		flags |= 2
	}
	b = append(b, flags)
	for _, v := range []uint32{tr.revision, tr.spans, tr.logs, tr.points, tr.dropped[0], tr.dropped[1], tr.dropped[2], tr.bytes, tr.chunks} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.AppendVarint(b, tr.touchedAt)
	b = append(b, byte(tr.sampled))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(tr.sampleRate))
	return binary.AppendUvarint(b, uint64(tr.sent))
}

func decodeMeta(b []byte, tr *trace) error {
	if len(b) < 1 || b[0] < 1 || b[0] > 3 {
		return fmt.Errorf("fuse: unknown trace record version")
	}
	version := b[0]
	b = b[1:]
	tr.inState = true
	var n int
	tr.first, n = binary.Varint(b)
	if n <= 0 {
		return errCorruptChunk
	}
	b = b[n:]
	tr.last, n = binary.Varint(b)
	if n <= 0 || len(b) < n+1 {
		return errCorruptChunk
	}
	b = b[n:]
	tr.emitted, tr.dirty = b[0]&1 != 0, b[0]&2 != 0
	// Not persisted: a trace emitted before a restart counts as observed
	// (rather than twice).
	tr.observed = tr.emitted
	b = b[1:]
	for _, v := range []*uint32{&tr.revision, &tr.spans, &tr.logs, &tr.points, &tr.dropped[0], &tr.dropped[1], &tr.dropped[2], &tr.bytes, &tr.chunks} {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return errCorruptChunk
		}
		*v = uint32(x)
		b = b[n:]
	}
	tr.touchedAt = 0
	if version >= 2 {
		var n int
		if tr.touchedAt, n = binary.Varint(b); n <= 0 {
			return errCorruptChunk
		}
		b = b[n:]
	}
	if version >= 3 {
		if len(b) < 9 {
			return errCorruptChunk
		}
		tr.sampled = sampling.Reason(b[0])
		tr.sampleRate = math.Float64frombits(binary.LittleEndian.Uint64(b[1:9]))
		x, n := binary.Uvarint(b[9:])
		if n <= 0 {
			return errCorruptChunk
		}
		tr.sent = uint32(x)
	}
	return nil
}

type timer struct {
	at int64
	tr *trace
}

// before orders timers by time, then trace id.
func (a timer) before(b timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return string(a.tr.id[:]) < string(b.tr.id[:])
}

// close implements stage: the task leaves the stage's gauges (its
// partition was revoked, or the job stops).
func (p *fuser) close() {
	c := &p.s.counters
	c.OpenTraces.Add(-int64(len(p.traces) + p.evicted))
	c.OpenTraceBytes.Add(-p.reportedOpen)
	c.ClosedTraces.Add(-p.reportedClosed)
	c.ClosedTraceBytes.Add(-p.reportedClosed * closedOverhead)
	p.reportedOpen, p.reportedClosed = 0, 0
	clear(p.traces)
	p.evicted = 0
	clear(p.keeping)
	p.keeping, p.storedBytes = p.keeping[:0], 0
}
