package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
	"github.com/braidlabs/braid/windows"
)

type msgKind uint8

const (
	msgRecords msgKind = iota
	msgBarrier
	msgCommit
	msgAbort
	msgClose
)

type taskMsg struct {
	kind  msgKind
	input int
	recs  []*kgo.Record
	bytes int64 // RecordBytes of recs, counted in Engine.queued
	// end is the partition's end (last stable offset) in the fetch recs
	// came from; 0 or less: unknown (the Harness).
	end   int64
	reply chan error
	// runOn (msgBarrier): seal the checkpoint and go on processing, output
	// held until the outcome (Config.RunOn).
	runOn bool
	// follow (msgCommit): what the task must read before the follow-up
	// checkpoint, per internal input (followTarget.next); nil: none.
	follow []int64
}

// Task is one partition of the topology: its state, watermarks and
// processor. Its methods are for the processor and are called on the task's
// goroutine only.
type Task struct {
	// Partition is the task's partition number.
	Partition int32
	// State is the task's keyed state.
	State *State
	// Log is tagged with the topology and partition.
	Log *slog.Logger

	e    *Engine
	ks   *state.Keyspace
	proc Processor
	wmh  WatermarkHandler

	in   chan taskMsg
	errc chan error
	done chan struct{}

	// up[k] covers the source inputs and the internal inputs that may
	// forward to internal topic k (Input.From): the watermark sent
	// downstream on topic k, so that nothing the task forwards on it is
	// older than its earlier markers allowed.
	up []upstream
	// srcOnly covers the source inputs only: the watermark sent on global
	// topics and on internal topics without From, which only records read
	// from sources feed.
	srcOnly *windows.Watermarks
	// fed are the distinct trackers that observe the sources: all,
	// srcOnly and those of the internal topics with From.
	fed []*windows.Watermarks
	// all covers source inputs and every upstream task of every internal
	// input but those of Aside inputs: the watermark that fires timers.
	all *windows.Watermarks
	// full covers every input, Aside ones too (Task.WatermarkAll); nil
	// when the topology has none, and all is that watermark.
	full *windows.Watermarks

	// recMax[i] is the largest record timestamp (unix ns) read on source
	// i, recAll the largest of every record the task read (sources and
	// internal topics, markers included); curTS that of the record being
	// processed. MinTime: none (records without a timestamp, as in most
	// Harness tests, count as none).
	recMax []int64
	recAll int64
	curTS  int64
	// caught[i]: source i is caught up (CaughtUp).
	caught []bool
	// realign: the instance's floor moved (Engine.align); align again.
	realign chan struct{}

	offsets   map[string]int64 // input topic → next offset
	markers   markerTimes      // timestamps of the upstream tasks' last markers
	lastWM    int64
	restoreWM int64
	now       time.Time
	failed    bool
	pub       published
	// seek: where consumption of the task's partitions must go back to
	// before it reads (see openKeyspace); nil normally.
	seek map[string]int64
	// closeErr is what closing the processor and keyspace returned.
	closeErr error

	// follow: what to read before the follow-up checkpoint the engine
	// waits for; nil when it waits for none. emitted counts Emit and
	// EmitChunks calls; sent[k] is the last marker sent on internal
	// input k.
	follow  *followTarget
	emitted int64
	sent    []sentMarker

	// Between a run-on barrier and its outcome (holding): the input
	// offsets the checkpoint has (sealed in the keyspace), and the output
	// of the records processed since, produced once the next transaction
	// has begun.
	holding     bool
	sealOffs    map[string]int64
	sealEmitted int64 // emitted at the barrier
	held        []*kgo.Record
	// committing: the bytes of a local commit in flight counted in
	// Engine.flushing (noteCommitting).
	committing int64
	// applied is how long the task took to apply the last outcome
	// (its local commit — begun, when it ran on —, or its rollback).
	applied time.Duration

	// The local exchange (exchange.go), nil when off: the task's inbox,
	// the last sequence number sent per (internal topic k, partition q)
	// at k*P+q and processed per (k, sending task) at k*P+from, what
	// waits there for its predecessors, the progress markers sent last
	// (per k, then one for the global topics) and when, and the exchange
	// epoch the task last saw.
	xin       *inbox
	xbuf      []xmsg
	seqOut    []uint64
	seqIn     []uint64
	waiting   [][]xmsg
	progSent  []progress
	progAt    time.Time
	progEpoch uint64
	xepoch    uint64
}

var wmKey = []byte("\x00\x01watermark")

// upstream tracks the watermark a task sends on one internal topic: its
// sources, then the upstream tasks of each internal input in From. A topic
// without From shares the task's source-only tracker.
type upstream struct {
	w    *windows.Watermarks
	from []int // internal inputs tracked after the sources, in order
}

func (e *Engine) newUpstream(k int, now time.Time) upstream {
	u := upstream{from: e.internalFrom[k]}
	n := e.sources + len(u.from)*int(e.topo.Partitions)
	u.w = windows.NewWatermarks(n, e.cfg.OutOfOrderness, e.cfg.Idleness, now)
	u.w.SetCaughtUpIdleness(e.cfg.CaughtUpIdleness)
	for i := e.sources; i < n; i++ {
		u.w.MarkUpstream(i)
	}
	return u
}

// index is where upstream task up of internal input k sits in u.w.
func (u upstream) index(e *Engine, k int, up int32) (int, bool) {
	for i, j := range u.from {
		if j == k {
			return e.sources + i*int(e.topo.Partitions) + int(up), true
		}
	}
	return 0, false
}

// restore sets u's maxima from a checkpoint's (laid out as Task.all's).
func (u upstream) restore(all []int64, e *Engine) {
	p := int(e.topo.Partitions)
	m := make([]int64, 0, e.sources+len(u.from)*p)
	for i := range e.sources {
		m = append(m, at(all, i))
	}
	for _, j := range u.from {
		for q := range p {
			m = append(m, at(all, e.sources+j*p+q))
		}
	}
	u.w.RestoreMaxima(m)
}

func at(m []int64, i int) int64 {
	if i < len(m) {
		return m[i]
	}
	return windows.MinTime
}

// newWatermarks tracks the sources and the upstream tasks of the first n
// internal inputs.
func (e *Engine) newWatermarks(n int, now time.Time) *windows.Watermarks {
	ups := n * int(e.topo.Partitions)
	w := windows.NewWatermarks(e.sources+ups, e.cfg.OutOfOrderness, e.cfg.Idleness, now)
	w.SetCaughtUpIdleness(e.cfg.CaughtUpIdleness)
	for i := e.sources; i < e.sources+ups; i++ {
		w.MarkUpstream(i)
	}
	return w
}

// openTaskNoRun opens task p without starting its goroutine. ctx bounds
// the restore from the changelog.
func (e *Engine) openTaskNoRun(ctx context.Context, p int32) (*Task, error) {
	ks, seek, err := e.openKeyspace(ctx, p)
	if err != nil {
		return nil, err
	}
	now := e.cfg.Now()
	t := &Task{
		Partition: p,
		State:     &State{ks: ks, changelog: e.topo.Changelog, partition: p, limit: e.cfg.MaxRecordBytes},
		seek:      seek,
		Log:       e.log.With("stage", e.topo.Name, "partition", p),
		e:         e,
		ks:        ks,
		in:        make(chan taskMsg, e.cfg.QueueDepth),
		errc:      make(chan error, 1),
		done:      make(chan struct{}),
		offsets:   map[string]int64{},
		now:       now,
	}
	t.State.emit = t.produce
	if n := len(e.internal) * int(e.topo.Partitions); n+len(e.topo.Globals) > 0 {
		t.seqIn = make([]uint64, n)
		if e.exchangeOn() {
			t.xin = e.xch[p]
			t.seqOut = make([]uint64, (len(e.internal)+len(e.topo.Globals))*int(e.topo.Partitions))
			t.waiting = make([][]xmsg, n)
			t.progSent = make([]progress, len(e.internal)+1) // the last: every global topic's
		}
	}
	t.caught = make([]bool, e.sources)
	t.pub.ends.init(e.sources)
	t.pub.floor.Store(windows.MaxTime)
	if e.cfg.Alignment > 0 {
		t.pub.queued = make([]atomic.Int64, min(e.sources, 64))
	}
	t.realign = make(chan struct{}, 1)
	t.newWatermarks(now)
	if err := t.loadCommitted(); err != nil {
		return nil, errors.Join(err, ks.Close())
	}
	proc, err := e.topo.NewProcessor(t)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("engine: processor for partition %d: %w", p, err), ks.Close())
	}
	t.proc = proc
	t.wmh, _ = proc.(WatermarkHandler)
	if r, ok := proc.(Restorer); ok {
		if err := r.Restore(t); err != nil {
			return nil, errors.Join(fmt.Errorf("engine: restore partition %d: %w", p, err), t.closeProc(), ks.Close())
		}
	}
	return t, nil
}

// newWatermarks gives the task new watermark trackers and record clocks,
// as a task that has read nothing has: loadCommitted then sets them to
// its last checkpoint. A rollback starts them anew too, or the records
// read again would be judged by a watermark their first reading raised.
func (t *Task) newWatermarks(now time.Time) {
	e := t.e
	t.recMax = make([]int64, e.sources)
	for i := range t.recMax {
		t.recMax[i] = windows.MinTime
	}
	t.recAll, t.curTS = windows.MinTime, windows.MinTime
	t.all = e.newWatermarks(len(e.internal), now)
	t.srcOnly = e.newWatermarks(0, now)
	t.fed = []*windows.Watermarks{t.all, t.srcOnly}
	if e.anyAside {
		t.full = e.newWatermarks(len(e.internal), now)
		t.fed = append(t.fed, t.full)
		for k, aside := range e.aside {
			if aside {
				for up := range int(e.topo.Partitions) {
					t.all.Exclude(e.sources + k*int(e.topo.Partitions) + up)
				}
			}
		}
	}
	t.up = make([]upstream, len(e.internal))
	for k := range t.up {
		if len(e.internalFrom[k]) == 0 {
			t.up[k] = upstream{w: t.srcOnly}
			continue
		}
		t.up[k] = e.newUpstream(k, now)
		t.fed = append(t.fed, t.up[k].w)
	}
}

func (t *Task) closeProc() error {
	if c, ok := t.proc.(Closer); ok {
		return c.Close()
	}
	return nil
}

// encodeWatermarks is the checkpointed watermark value: the watermark, the
// largest record timestamp seen, every input's maximum, and a format byte.
func encodeWatermarks(wm, recAll int64, maxima []int64) []byte {
	b := make([]byte, 0, 8*(2+len(maxima))+1)
	b = binary.BigEndian.AppendUint64(b, uint64(wm))
	b = binary.BigEndian.AppendUint64(b, uint64(recAll))
	for _, m := range maxima {
		b = binary.BigEndian.AppendUint64(b, uint64(m))
	}
	return append(b, 1)
}

// decodeWatermarks reads encodeWatermarks' value, or the earlier format
// (watermark and maxima, no record timestamp: recAll MinTime).
func decodeWatermarks(v []byte) (wm, recAll int64, maxima []int64, ok bool) {
	recAll = windows.MinTime
	switch {
	case len(v) >= 17 && len(v)%8 == 1 && v[len(v)-1] == 1:
		recAll = int64(binary.BigEndian.Uint64(v[8:]))
		v = append(v[:8:8], v[16:len(v)-1]...)
	case len(v) >= 8 && len(v)%8 == 0:
	default:
		return windows.MinTime, windows.MinTime, nil, false
	}
	wm = int64(binary.BigEndian.Uint64(v))
	maxima = make([]int64, 0, len(v)/8-1)
	for b := v[8:]; len(b) >= 8; b = b[8:] {
		maxima = append(maxima, int64(binary.BigEndian.Uint64(b)))
	}
	return wm, recAll, maxima, true
}

// addSkew is ts + d, saturating; MinTime stays MinTime (nothing known).
func addSkew(ts int64, d time.Duration) int64 {
	if ts == windows.MinTime {
		return windows.MinTime
	}
	if ts > windows.MaxTime-int64(d) {
		return windows.MaxTime
	}
	return ts + int64(d)
}

// recordTime is r's timestamp in unix ns, MinTime when it has none.
func recordTime(r *kgo.Record) int64 {
	if r.Timestamp.IsZero() || r.Timestamp.Before(minRecordTime) || r.Timestamp.After(maxRecordTime) {
		return windows.MinTime
	}
	return r.Timestamp.UnixNano()
}

// Record timestamps outside these are none (Kafka's -1, or no valid ns).
var (
	minRecordTime = time.Unix(0, 1)
	maxRecordTime = time.Unix(0, windows.MaxTime/2)
)

// setCeiling bounds the all-idle rule of every tracker by the largest
// record timestamp seen plus the skew.
func (t *Task) setCeiling() {
	c := addSkew(t.recAll, t.e.cfg.MaxClockSkew)
	if c == windows.MinTime {
		c = windows.MaxTime // no record timestamp seen: no evidence
	}
	for _, w := range t.fed {
		w.SetCeiling(c)
	}
}

// loadCommitted reads the watermark and offsets of the last checkpoint.
func (t *Task) loadCommitted() error {
	v, ok, err := t.ks.Get(nil, wmKey)
	if err != nil {
		return err
	}
	t.restoreWM = windows.MinTime
	wm, recAll, maxima, ok := decodeWatermarks(v)
	if ok {
		t.restoreWM = wm
		t.recAll = max(t.recAll, recAll)
		// A watermark or maximum beyond the evidence (the records seen,
		// or else, for a checkpoint of the earlier format, processing
		// time) plus the skew is lowered: it would send everything later
		// to the late topic.
		bound := addSkew(t.recAll, t.e.cfg.MaxClockSkew)
		if bound == windows.MinTime && t.e.sink == nil {
			bound = addSkew(t.e.cfg.Now().UnixNano(), t.e.cfg.MaxClockSkew)
		}
		if bound != windows.MinTime {
			clamped := t.restoreWM > bound
			t.restoreWM = min(t.restoreWM, bound)
			for i, m := range maxima {
				if m > bound {
					maxima[i], clamped = bound, true
				}
			}
			if clamped {
				t.Log.Warn("restored watermark is ahead of the record clock; lowered", "watermark", wm, "to", t.restoreWM, "largest_record_time", recAll, "max_clock_skew", t.e.cfg.MaxClockSkew)
			}
		}
		t.all.RestoreMaxima(maxima)
		t.srcOnly.RestoreMaxima(maxima)
		if t.full != nil {
			t.full.RestoreMaxima(maxima)
		}
		for _, u := range t.up {
			if len(u.from) > 0 {
				u.restore(maxima, t.e)
			}
		}
	}
	t.setCeiling()
	t.lastWM = t.restoreWM
	t.pub.watermark.Store(t.restoreWM)
	t.all.Advance(t.restoreWM)
	if err := t.loadSeqs(); err != nil {
		return err
	}
	offs, err := t.ks.Offsets()
	if err != nil {
		return err
	}
	t.offsets = map[string]int64{}
	for topic, ps := range offs {
		if o, ok := ps[t.Partition]; ok {
			t.offsets[topic] = o
		}
	}
	// Consumption starts again from these offsets: whether the sources
	// are caught up is known again only from the next report.
	for i := range t.caught {
		t.setCaught(i, false)
	}
	t.publishCaughtUp()
	return t.State.loadChunked()
}

func (t *Task) run() {
	defer close(t.done)
	tick := time.NewTicker(t.e.cfg.TickInterval)
	defer tick.Stop()
	bl, _ := t.proc.(Backlogger)
	for {
		if bl != nil && !t.failed && !t.holding && bl.Backlog() {
			select {
			case m := <-t.in:
				if t.handle(m) {
					return
				}
			case <-t.pub.ends.signal:
				t.takeEnds()
			case <-t.xsignal():
				t.local()
			default:
				t.fail(t.advance())
			}
			continue
		}
		select {
		case m := <-t.in:
			if t.handle(m) {
				return
			}
		case <-t.pub.ends.signal:
			t.takeEnds()
		case <-t.xsignal():
			t.local()
		case <-t.realign:
			t.align()
		case <-t.ks.Committing():
			t.absorb()
		case <-tick.C:
			if !t.failed {
				t.fail(t.ks.Settle(false))
			}
			if !t.failed && !t.holding {
				t.fail(t.advance())
			}
			t.sendProgress()
		}
	}
}

// handle processes one message; it reports whether the task is finished.
func (t *Task) handle(m taskMsg) bool {
	switch m.kind {
	case msgRecords:
		src := t.e.srcIndex[m.input]
		if m.bytes > 0 {
			defer t.e.dequeued(m.bytes)
			if src >= 0 && src < len(t.pub.queued) {
				defer t.unqueue(src, m.bytes)
			}
		}
		if t.failed {
			return false
		}
		// The background sync of the last checkpoint, if it failed.
		if err := t.ks.Settle(false); err != nil {
			t.fail(err)
			return false
		}
		t.now = t.e.cfg.Now()
		data := 0
		for _, r := range m.recs {
			if !r.Attrs.IsControl() {
				data++
			}
		}
		t.pub.records.Add(int64(data))
		if src >= 0 && data > 0 {
			t.setCaught(src, false) // active again until the next report
		}
		for _, r := range m.recs {
			if err := t.processRecord(r, m.input); err != nil {
				t.fail(err)
				return false
			}
		}
		if src >= 0 && m.end > 0 {
			t.judge(src, m.end, -1)
		}
		t.publishCaughtUp()
		t.align()
		if !t.holding {
			// While holding, timers wait for the outcome: what they
			// would emit could only be held.
			t.fail(t.advance())
		}
		t.setPending()
		if src < 0 && !t.failed && !t.holding {
			t.checkFollow()
		}
		t.sendProgress()
	case msgBarrier:
		err := t.prepare()
		if err != nil || !m.runOn {
			m.reply <- err
			// Nothing may be produced until the transaction has ended:
			// wait for the outcome, the next message the engine sends.
			return t.handle(<-t.in)
		}
		// Run on: the checkpoint is sealed in the keyspace, and what the
		// task does until the outcome belongs to the next one.
		t.sealOffs = maps.Clone(t.offsets)
		t.sealEmitted = t.emitted
		t.holding = true
		m.reply <- t.ks.Seal(t.checkpointOffsets(t.sealOffs))
	case msgCommit:
		ranOn, start := t.holding, time.Now()
		err := t.commit()
		t.applied = time.Since(start)
		t.release()
		t.setPending()
		t.setFollow(m.follow)
		if ranOn && t.follow != nil {
			// What it held goes into the transaction the follow-up
			// commits: it counts as emitted since.
			t.follow.emitted = t.sealEmitted
		}
		m.reply <- err
		if err == nil && !t.failed {
			// A memtable the next checkpoint would fill is rotated
			// now, its disk syncs outside the pause (after a commit
			// in the background, once it has ended: absorb).
			t.fail(t.ks.MakeRoom())
		}
		if ranOn && err == nil && !t.failed {
			// The timers that waited while holding.
			t.fail(t.advance())
		}
	case msgAbort:
		start := time.Now()
		t.drop()
		err := t.rollback()
		t.applied = time.Since(start)
		t.setPending()
		t.setFollow(nil)
		m.reply <- err
	case msgClose:
		t.dropInbox()
		t.e.pending.Add(-t.pub.pending.Swap(0))
		t.closeErr = errors.Join(t.closeProc(), t.ks.Close())
		t.noteCommitting()
		if t.closeErr != nil {
			t.Log.Error("close task", "err", t.closeErr)
		}
		return true
	}
	return false
}

func (t *Task) fail(err error) {
	if err == nil || t.failed {
		return
	}
	t.failed = true
	t.errc <- err
}

func (t *Task) processRecord(r *kgo.Record, input int) error {
	t.offsets[r.Topic] = r.Offset + 1
	if r.Attrs.IsControl() {
		// A transaction marker: no data, but the position moves past it
		// (as the consumer's and the committed offsets do).
		return nil
	}
	ts := t.clock(r, input)
	if t.seqIn != nil && t.e.topo.Inputs[input].Internal {
		if from, seq, ok := takeSeq(r); ok {
			k := t.e.xk[r.Topic]
			var err error
			if !t.seen(k, from, seq) {
				err = t.processData(r, input, ts)
			}
			t.drainAfter(k, from)
			return err
		}
	}
	return t.processData(r, input, ts)
}

// clock takes r's record time into the task's record clocks and returns
// it (MinTime: none).
func (t *Task) clock(r *kgo.Record, input int) int64 {
	ts := recordTime(r)
	if t.e.sink == nil {
		// A producer's clock far ahead must not carry the bounds along:
		// no record time counts beyond processing time plus the skew
		// (the Harness's clock is a test's, not a clock).
		ts = min(ts, addSkew(t.now.UnixNano(), t.e.cfg.MaxClockSkew))
	}
	if ts > t.recAll {
		t.recAll = ts
		t.setCeiling()
	}
	if i := t.e.srcIndex[input]; i >= 0 && ts > t.recMax[i] {
		t.recMax[i] = ts
	}
	return ts
}

// processData processes a record that is not a transaction marker, read
// from Kafka or taken from the local exchange; ts is its record time.
func (t *Task) processData(r *kgo.Record, input int, ts int64) error {
	if t.e.topo.Inputs[input].Internal && r.Value == nil && len(r.Headers) == 1 && r.Headers[0].Key == markerHeader {
		up, wm, idle, ok := decodeMarker(r.Headers[0].Value)
		if !ok || up < 0 || up >= t.e.topo.Partitions {
			t.Log.Warn("ignoring malformed watermark marker", "topic", r.Topic, "offset", r.Offset)
			return nil
		}
		k := t.e.xk[r.Topic]
		horizon, ok := decodeHorizon(r.Key)
		if !ok {
			horizon = windows.MaxTime
		}
		t.reportMarker(k, up, wm, idle, recordTime(r), horizon)
		return nil
	}
	t.curTS = ts
	err := t.proc.Process(t, r, input)
	t.curTS = windows.MinTime
	return err
}

// align publishes which source partitions are more than Config.Alignment
// ahead, in event time, of the task's slowest source partition that has a
// backlog (not caught up), for the Run goroutine to pause (Engine.align).
// A partition with a backlog that has shown no event time yet counts as
// the slowest. The slowest is never paused, and once it has read to its
// end it holds nothing back: the others resume.
func (t *Task) align() {
	a := t.e.cfg.Alignment
	if a <= 0 {
		return
	}
	n := min(len(t.e.srcTopics), 64) // the bits of published.ahead
	own := windows.MaxTime
	for i := range n {
		if !t.caught[i] {
			// One with a backlog and no event time yet: its first
			// records may be as old as any, so the others wait for it.
			own = min(own, t.all.Max(i))
		}
	}
	if was := t.pub.floor.Swap(own); was != own && was <= t.e.floor.Load() && t.e.stats.AlignedPartitions.Load() > 0 {
		// The instance's slowest source moved, and partitions wait
		// on it: the poll in progress may wait on those alone.
		if wake := t.e.wake.Load(); wake != nil {
			(*wake)()
		}
	}
	// The instance's other tasks' slowest sources as well: a trace's
	// members come from any task (repartitioned, forwarded), so one
	// task's open traces wait for the slowest source of the instance.
	floor := min(own, t.e.floor.Load())
	var ahead uint64
	was := t.pub.ahead.Load()
	if floor != windows.MaxTime {
		// A paused source resumes once it is within half the bound, so
		// that it is not paused and resumed at every batch of the
		// slowest (each resumption starts its fetches anew).
		pause, resume := addSkew(floor, a), addSkew(floor, a/2)
		for i := range n {
			limit := pause
			if was&(1<<i) != 0 {
				limit = resume
			}
			if m := t.all.Max(i); m != windows.MinTime && m > limit {
				ahead |= 1 << i
			}
		}
	}
	if was != ahead {
		t.pub.ahead.Store(ahead)
		// The poll in progress may wait on partitions that are all
		// paused or at their end: end it, so that the change applies.
		if wake := t.e.wake.Load(); wake != nil {
			(*wake)()
		}
	}
}

// unqueue counts n bytes of source i's queued records as processed, and
// wakes the poll loop when a source paused for its queue drained to half
// its bound (Engine.align resumes it).
func (t *Task) unqueue(i int, n int64) {
	q := t.pub.queued[i].Add(-n)
	if t.pub.full.Load()&(1<<i) != 0 && q <= t.e.qbound.Load()/2 {
		if wake := t.e.wake.Load(); wake != nil {
			(*wake)()
		}
	}
}

// wakeAlign has the task align its sources again (the instance's floor
// moved). Any goroutine.
func (t *Task) wakeAlign() {
	select {
	case t.realign <- struct{}{}:
	default:
	}
}

// advance recomputes the watermark and hands it to the processor: timers due
// at it fire, including those that records processed since made due.
func (t *Task) advance() error {
	t.now = t.e.cfg.Now()
	wm := t.all.Current(t.now)
	if wm < t.lastWM {
		return nil
	}
	t.lastWM = wm
	t.pub.watermark.Store(wm)
	if t.wmh != nil {
		return t.wmh.OnWatermark(t, wm)
	}
	return nil
}

// prepare readies the task's part of a checkpoint.
func (t *Task) prepare() error {
	if t.failed {
		return errors.New("task failed")
	}
	if err := t.advance(); err != nil {
		return err
	}
	if c, ok := t.proc.(Checkpointer); ok {
		if err := c.PrepareCheckpoint(t); err != nil {
			return err
		}
	}
	t.sent = t.sent[:0]
	horizon := encodeHorizon(t.readHorizon())
	markers := make([]*kgo.Record, 0, len(t.e.internal)*int(t.e.topo.Partitions))
	var gmarkers []*kgo.Record
	for k, topic := range t.e.internal {
		wm, idle := t.markerFor(k)
		t.sent = append(t.sent, sentMarker{wm: wm, idle: idle})
		marker := encodeMarker(t.Partition, wm, idle)
		for q := int32(0); q < t.e.topo.Partitions; q++ {
			r := &kgo.Record{Topic: topic, Partition: q, Key: horizon, Headers: []kgo.RecordHeader{{Key: markerHeader, Value: marker}}}
			if t.seqOut != nil {
				t.stamp(k, r)
			}
			markers = append(markers, r)
		}
	}
	if len(t.e.topo.Globals) > 0 {
		marker := encodeMarker(t.Partition, t.srcOnly.Current(t.now), t.srcOnly.Idle(t.now))
		for gi, g := range t.e.topo.Globals {
			for q := int32(0); q < t.e.topo.Partitions; q++ {
				r := &kgo.Record{Topic: g.Topic, Partition: q, Headers: []kgo.RecordHeader{{Key: markerHeader, Value: marker}}}
				if t.seqOut != nil {
					t.markAfter(gi, r)
				}
				gmarkers = append(gmarkers, r)
			}
		}
	}
	if t.seqOut != nil {
		// The markers are numbered too; before the checkpoint record,
		// which closes what restore replays.
		if err := t.State.Set(xseqKey, encodeSeqs(t.seqOut, t.seqIn)); err != nil {
			return err
		}
	}
	// The watermark and every input's maximum: a restarted task resumes
	// exactly here, even if no new input arrives.
	if err := t.State.Set(wmKey, encodeWatermarks(t.lastWM, t.recAll, t.maxima())); err != nil {
		return err
	}
	if t.State.changelog != "" {
		// The checkpoint record closes this checkpoint in the changelog:
		// restore replays up to the one whose offsets the group committed.
		if err := t.State.log(checkpointKey, encodeTaskOffsets(t.offsets)); err != nil {
			return err
		}
	}
	for _, r := range gmarkers {
		t.send(r, t.e.xk[r.Topic], false)
	}
	for _, r := range markers {
		t.send(r, t.e.xk[r.Topic], true)
	}
	return nil
}

// checkpointOffsets are offs as the keyspace records them.
func (t *Task) checkpointOffsets(offs map[string]int64) state.Offsets {
	o := state.Offsets{}
	for topic, off := range offs {
		o[topic] = map[int32]int64{t.Partition: off}
	}
	return o
}

func (t *Task) commit() error {
	failpoint("before-local-checkpoint")
	var err error
	if t.holding {
		// The checkpoint sealed at the barrier; what the task wrote
		// since stays pending. Its commit and sync run in the
		// background.
		err = t.ks.CommitSealed()
		failpoint("local-commit-in-flight")
	} else {
		err = t.ks.Checkpoint(t.checkpointOffsets(t.offsets))
	}
	if err != nil {
		return err
	}
	t.takeFlush()
	t.noteCommitting()
	t.pub.stateBytes.Store(int64(t.ks.Size()))
	return nil
}

// noteCommitting counts the memory the keyspace holds for a local commit
// in flight (state.Keyspace.CommittingBytes) with the batches Pebble holds
// until their flush (Engine.flushing): it bounds polling like them, and
// is not pending state a checkpoint could lower — counted so, every
// checkpoint's commit in flight would look like a batch to checkpoint.
// Once it goes, the poll loop is woken.
func (t *Task) noteCommitting() {
	n := t.ks.CommittingBytes()
	if d := n - t.committing; d != 0 {
		t.committing = n
		t.e.flushing.Add(d)
		if d < 0 {
			t.e.signalDrained()
		}
	}
}

// absorb takes in the local commit of a sealed checkpoint that ran in the
// background (CommitSealed) once it has ended: the keyspace drops the
// checkpoint from its pending writes, and a memtable the next checkpoint
// would fill is rotated now, its disk syncs outside the pause.
func (t *Task) absorb() {
	// Taken in even by a failed task: Committing stays ready until then.
	err := t.ks.Absorb()
	t.noteCommitting()
	if t.failed {
		return
	}
	if err != nil {
		t.fail(err)
		return
	}
	t.takeFlush()
	t.setPending()
	t.fail(t.ks.MakeRoom())
}

// takeFlush counts a committed batch that Pebble holds in memory until its
// flush against the bound, until then.
func (t *Task) takeFlush() {
	if f := t.ks.TakeFlush(); f.Done != nil {
		t.flushing(f)
	}
}

// flushing counts a committed batch that Pebble holds in memory until it
// is on disk against the bound, until then.
func (t *Task) flushing(f state.Flush) {
	t.e.flushing.Add(f.Bytes)
	go func() {
		<-f.Done
		t.e.flushing.Add(-f.Bytes)
		t.e.signalDrained()
	}()
}

// produce sends r in the current transaction, or holds it while the task
// runs on past a barrier whose transaction has not ended (release).
func (t *Task) produce(r *kgo.Record) {
	x := t.exchangeIndex(r)
	if x >= 0 {
		t.stamp(x, r)
	}
	if t.holding {
		t.held = append(t.held, r)
		return
	}
	t.send(r, x, false)
}

// release ends holding: the output held since the barrier goes into the
// transaction that has begun, in order, no other task's chunks between.
func (t *Task) release() {
	if t.holding && len(t.held) > 0 {
		t.e.chunkMu.Lock()
		for _, r := range t.held {
			t.send(r, t.exchangeIndex(r), false)
		}
		t.e.chunkMu.Unlock()
	}
	t.drop()
}

// drop ends holding without the held output: after an abort it goes with
// the rest of what the task did since the last committed checkpoint.
func (t *Task) drop() {
	clear(t.held)
	t.held, t.sealOffs, t.holding = t.held[:0], nil, false
}

func (t *Task) rollback() error {
	if t.xin != nil {
		// What waits was sent before the abort (whose epoch the engine
		// has ended); in the inbox, only messages of the epoch since
		// are taken (takeLocal).
		t.clearWaiting()
		t.xepoch = t.e.xepoch.Load()
	}
	err := t.ks.Rollback()
	t.noteCommitting()
	if err != nil {
		return err
	}
	t.newWatermarks(t.e.cfg.Now())
	if err := t.loadCommitted(); err != nil {
		return err
	}
	if r, ok := t.proc.(Restorer); ok {
		return r.Restore(t)
	}
	return nil
}

// dequeued lowers the queued bytes by n and wakes a poll loop waiting for
// room.
func (e *Engine) dequeued(n int64) {
	e.processed.Add(n)
	e.queued.Add(-n)
	e.signalDrained()
}

// signalDrained wakes a poll loop waiting for room (waitQueued).
func (e *Engine) signalDrained() {
	select {
	case e.drained <- struct{}{}:
	default:
	}
}

// closeNoRun closes a task whose goroutine never started.
func (t *Task) closeNoRun() error {
	t.handle(taskMsg{kind: msgClose})
	return t.closeErr
}

// close stops the task and returns what closing its processor and
// keyspace returned.
func (t *Task) close() error {
	t.in <- taskMsg{kind: msgClose}
	<-t.done
	return t.closeErr
}

// Emit produces r in the current transaction. r.Partition must be set. A
// record over MaxRecordBytes fails the checkpoint (the broker would reject
// it); the Harness returns that error. Use EmitChunks for a record that may
// be larger.
func (t *Task) Emit(r *kgo.Record) {
	t.emitted++
	t.produce(r)
}

// EmitChunks produces r, cut into chunks by Chunks if it exceeds
// MaxRecordBytes, one after another in its partition (no other task's
// chunks come between). The reader puts it back together with a
// Reassembler.
func (t *Task) EmitChunks(r *kgo.Record) error {
	cs, err := Chunks(r, t.e.cfg.MaxRecordBytes)
	if err != nil {
		return err
	}
	t.emitted++
	if len(cs) == 1 {
		t.produce(cs[0])
		return nil
	}
	if !t.holding {
		t.e.chunkMu.Lock()
		defer t.e.chunkMu.Unlock()
	}
	for _, c := range cs {
		t.produce(c)
	}
	return nil
}

// MaxClockSkew is how far an event time may be ahead of its record's
// timestamp (Config.MaxClockSkew).
func (t *Task) MaxClockSkew() time.Duration { return t.e.cfg.MaxClockSkew }

// RecordTime is the timestamp of the record being processed (unix ns), or
// windows.MinTime outside Process or for a record without one.
func (t *Task) RecordTime() int64 { return t.curTS }

// MaxRecordBytes is the largest record (RecordBytes) the task may emit.
func (t *Task) MaxRecordBytes() int { return t.e.cfg.MaxRecordBytes }

// Observe records an event at event time ts on input (a Topology.Inputs
// index) for the watermark. Internal inputs carry their watermark in
// markers; observations on them are ignored. An event time beyond the
// record's timestamp plus MaxClockSkew (outside Process: the largest
// record timestamp seen on input) counts as that bound (Stats.ClampedEvents):
// the operator should have sent it to the late topic or re-stamped it.
func (t *Task) Observe(input int, ts int64) {
	if t.e.topo.Inputs[input].Internal {
		return
	}
	i := t.sourceIndex(input)
	ref := t.curTS
	if ref == windows.MinTime {
		ref = t.recMax[i]
	}
	if ref == windows.MinTime {
		ref = t.recAll
	}
	if bound := addSkew(ref, t.e.cfg.MaxClockSkew); bound != windows.MinTime && ts > bound {
		ts = bound
		t.e.stats.ClampedEvents.Add(1)
	}
	// A newest event read long after it happened (its record's
	// timestamp) is a backlog being written: caught-up idleness must not
	// run the watermark past what may still come behind it.
	newest := ts > t.all.Max(i)
	stale := t.curTS != windows.MinTime && t.curTS-ts > int64(t.e.cfg.OutOfOrderness)
	for _, w := range t.fed {
		w.Observe(i, ts, t.now)
		if newest {
			w.SetStale(i, stale)
		}
	}
}

// Touch records activity without an event time on input.
func (t *Task) Touch(input int) {
	if t.e.topo.Inputs[input].Internal {
		return
	}
	i := t.sourceIndex(input)
	for _, w := range t.fed {
		w.Touch(i, t.now)
	}
}

func (t *Task) sourceIndex(input int) int { return t.e.srcIndex[input] }

// Watermark is the task's current watermark: the one that fires timers,
// over every input but the Aside ones.
func (t *Task) Watermark() int64 { return t.lastWM }

// UpstreamWatermark returns, for an internal input (an index into
// Topology.Inputs), the watermark the task would send on it now: that of
// its sources and of the internal inputs in its From — what may still
// bring the records the task forwards to it. Work that ends on that topic
// may be released at this watermark rather than Watermark, which also
// covers the topic's own markers (and so what a WatermarkHolder holds on
// it). It is MinTime for an input that is not internal.
func (t *Task) UpstreamWatermark(input int) int64 {
	if input < 0 || input >= len(t.e.topo.Inputs) || !t.e.topo.Inputs[input].Internal {
		return windows.MinTime
	}
	k := slices.Index(t.e.internal, t.e.topo.Inputs[input].Topic)
	return t.up[k].w.Current(t.now)
}

// WatermarkAll is the watermark over every input, Aside ones included:
// Watermark for a topology without them, and never ahead of it.
func (t *Task) WatermarkAll() int64 {
	if t.full == nil {
		return t.lastWM
	}
	return min(t.full.Current(t.now), t.lastWM)
}

// maxima is what a checkpoint keeps of every input's maximum (Aside
// inputs' included).
func (t *Task) maxima() []int64 {
	if t.full != nil {
		return t.full.Maxima()
	}
	return t.all.Maxima()
}

// Now is the processing time of the record being processed.
func (t *Task) Now() time.Time { return t.now }
