package fuse

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// revisionsByKey counts the fused records per key and revision.
func (h *harness) revisionsByKey() map[string]map[uint32]int {
	h.t.Helper()
	out := map[string]map[uint32]int{}
	for _, r := range h.out("braid.fused") {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			h.t.Fatal(err)
		}
		if out[string(r.Key)] == nil {
			out[string(r.Key)] = map[uint32]int{}
		}
		out[string(r.Key)][ft.Revision]++
	}
	return out
}

// lateLog is a log record of trace g at event time at.
func lateLog(g *genTrace, at time.Time, body string) *logspb.LogRecord {
	return &logspb.LogRecord{TimeUnixNano: uint64(at.UnixNano()), TraceId: g.id[:], SpanId: g.spans[0].SpanId,
		Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}}}
}

// TestRestoreFlushesOpenTracesWithoutInput: traces open at a crash (or a
// clean stop) are emitted although no input comes at all and the watermark
// never passes them: FlushAfter after their last member, the clock kept
// across the restart — at once when the restart took longer than that.
func TestRestoreFlushesOpenTracesWithoutInput(t *testing.T) {
	const flush = 5 * time.Second
	for _, tc := range []struct {
		name string
		down time.Duration // from the last member to the restart
	}{
		{"slow restart", time.Minute},
		{"quick restart", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, func(c *Config) { c.FlushAfter = flush })
			ts := genTraces(rand.New(rand.NewPCG(81, 82)), 12, base)
			first := h.now // before every trace's last member
			for _, m := range messages(ts) {
				h.feed(m.input, m.key, m.value)
			}
			last := h.now // the last member of all
			// Nothing is due before first+flush, everything at last+flush
			// (or at once, if that is before the restart).
			silent := first.Add(flush).Sub(last.Add(tc.down)) - time.Millisecond
			due := max(last.Add(flush).Sub(last.Add(tc.down)), time.Millisecond)
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if n := len(h.out("braid.fused")); n != 0 {
				t.Fatalf("%d traces emitted before the restart; the test needs them open", n)
			}
			h.now = last.Add(tc.down)
			h.SetNow(h.now)
			if err := h.Restart(); err != nil {
				t.Fatal(err)
			}
			restarted := h.now
			h.MarkCaughtUp() // traffic stopped: the task read its partitions to their end
			if silent > 0 {
				h.SetNow(restarted.Add(silent))
				if err := h.Advance(); err != nil {
					t.Fatal(err)
				}
				if n := len(h.out("braid.fused")); n != 0 {
					t.Fatalf("%d traces emitted %v after the restart, before flush_after since their last member", n, silent)
				}
			}
			h.SetNow(restarted.Add(due))
			if err := h.Advance(); err != nil {
				t.Fatal(err)
			}
			got := h.fused()
			if len(got) != len(ts) {
				t.Fatalf("%d of %d restored traces emitted %v after the restart (flush_after %v after their last member)", len(got), len(ts), due, flush)
			}
			for _, g := range ts {
				ft := got[string(otlp.AppendTraceIDHex(nil, g.id))]
				if ft == nil || len(ft.Spans) != 3 || len(ft.Logs) != 2 || len(ft.Points) != 1 || ft.Revision != 0 {
					t.Fatalf("trace %x after restart: %v", g.id, ft)
				}
			}
		})
	}
}

// closeTrace feeds g's spans, then moves the watermark past g's purge with
// a trace far later in event time, and returns that trace.
func (h *harness) closeTrace(g *genTrace, later time.Time) *genTrace {
	h.t.Helper()
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, g.id), spansMsg(g.spans...))
	o := genTraces(rand.New(rand.NewPCG(uint64(later.UnixNano()), 3)), 1, later)[0]
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, o.id), spansMsg(o.spans...))
	h.now = h.now.Add(1500 * time.Millisecond) // the silent logs and metrics inputs turn idle
	h.SetNow(h.now)
	if err := h.Advance(); err != nil {
		h.t.Fatal(err)
	}
	return o
}

// TestClosedTraceMemberGoesLate: a log that arrives after its trace was
// emitted and purged — within allowed lateness of the watermark, since its
// own event time is late — goes to braid.late with reason "trace already
// closed" and the trace's last revision, before and after a restart; the
// key never gets a second revision 0.
func TestClosedTraceMemberGoesLate(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1 })
	g := genTraces(rand.New(rand.NewPCG(83, 84)), 1, base)[0]
	key := otlp.AppendTraceIDHex(nil, g.id)
	// Watermark ≈ base+28s: past g's last event + 1s idle gap + 10s
	// allowed lateness.
	h.closeTrace(g, base.Add(30*time.Second))
	if h.stage.counters.ClosedTraces.Load() != 1 {
		t.Fatalf("%d tombstones after the purge, want 1", h.stage.counters.ClosedTraces.Load())
	}
	for i, restart := range []bool{false, true} {
		if restart {
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if err := h.Restart(); err != nil {
				t.Fatal(err)
			}
		}
		h.feed(inLogs, key, logsMsg(lateLog(g, base.Add(25*time.Second), "after purge "+strconv.Itoa(i))))
		if err := h.Advance(); err != nil {
			t.Fatal(err)
		}
		late := h.out("braid.late")
		if len(late) != i+1 {
			t.Fatalf("restart %v: %d late records, want %d", restart, len(late), i+1)
		}
		r := late[i]
		if reason, _ := header(r, "braid.reason"); reason != "trace already closed" {
			t.Errorf("braid.reason %q", reason)
		}
		if rev, _ := header(r, "braid.revision"); rev != "0" {
			t.Errorf("braid.revision %q, want 0 (the trace's last revision)", rev)
		}
		if string(r.Key) != string(key) {
			t.Errorf("late key %s, want %s", r.Key, key)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if revs := h.revisionsByKey()[string(key)]; len(revs) != 1 || revs[0] != 1 {
		t.Fatalf("trace revisions %v, want only revision 0 once", revs)
	}
	if n := h.stage.counters.ClosedLate.Load(); n != 2 {
		t.Errorf("ClosedLate %d, want 2", n)
	}
}

// TestClosedTraceIncidentTagCounted: an incident tag for a closed trace is
// counted as a late tag and writes nothing.
func TestClosedTraceIncidentTagCounted(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1 })
	g := genTraces(rand.New(rand.NewPCG(85, 86)), 1, base)[0]
	h.closeTrace(g, base.Add(30*time.Second))
	before := len(h.Out)
	w := chunkWriter{}
	body := protowire.AppendTag(nil, 3, protowire.BytesType)
	body = protowire.AppendString(body, "inc-1")
	w.appendMember(&member{kind: kindIncident, time: base.Add(25 * time.Second).UnixNano(), body: body})
	h.feed(inRepart, otlp.AppendTraceIDHex(nil, g.id), w.buf)
	if len(h.Out) != before {
		t.Fatalf("an incident tag for a closed trace wrote %d records", len(h.Out)-before)
	}
	if h.stage.counters.IncidentTagsLate.Load() != 1 {
		t.Errorf("IncidentTagsLate %d, want 1", h.stage.counters.IncidentTagsLate.Load())
	}
}

// TestClosedRetentionExpires: a tombstone is forgotten ClosedRetention of
// event time after the purge (in memory and in state); a member for the
// trace after that starts it afresh.
func TestClosedRetentionExpires(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1; c.ClosedRetention = 30 * time.Second })
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	trace := func(seed uint64, s int) *genTrace { return genTraces(rand.New(rand.NewPCG(seed, 1)), 1, at(s))[0] }
	g := trace(87, 0)
	key := otlp.AppendTraceIDHex(nil, g.id)
	c := &h.stage.counters
	// Each step moves the watermark to the filler's time less 2s; a trace
	// is purged 11s after its last event, its tombstone expires 30s later.
	h.closeTrace(g, at(30)) // wm 28: g closed (expires at 58)
	if n := c.ClosedTraces.Load(); n != 1 {
		t.Fatalf("%d tombstones at watermark 28s, want 1", n)
	}
	if err := h.Checkpoint(); err != nil { // g's bucket goes to state
		t.Fatal(err)
	}
	h.closeTrace(trace(88, 40), at(50)) // wm 48: the 30s filler closed
	if n := c.ClosedTraces.Load(); n != 2 {
		t.Fatalf("%d tombstones at watermark 48s, want 2", n)
	}
	h.closeTrace(trace(89, 60), at(70)) // wm 68: g's expired; the 40s trace and 50s filler closed
	if n := c.ClosedTraces.Load(); n != 3 {
		t.Fatalf("%d tombstones at watermark 68s, want 3", n)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(); err != nil { // state holds only the live tombstones
		t.Fatal(err)
	}
	if n := c.ClosedTraces.Load(); n != 3 {
		t.Fatalf("%d tombstones restored, want 3", n)
	}
	h.feed(inLogs, key, logsMsg(lateLog(g, at(62), "after expiry")))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.out("braid.late")); n != 0 {
		t.Fatalf("%d late records after the tombstone expired", n)
	}
	if revs := h.revisionsByKey()[string(key)]; revs[0] != 2 {
		t.Fatalf("trace revisions %v: after retention a member starts the trace again", revs)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	keys := 0
	if err := eachKey(h.Task(), prefixClosed, func(k, v []byte) error { keys++; return nil }); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || c.ClosedTraces.Load() != 0 {
		t.Errorf("at the end of input %d tombstones and %d state values remain, want none", c.ClosedTraces.Load(), keys)
	}
	if n := c.ClosedEvicted.Load(); n != 0 {
		t.Errorf("ClosedEvicted %d, want 0 (expiry is not eviction)", n)
	}
}

// TestClosedTracesBudgetEvictsOldest: at MaxClosedTraceBytes the oldest
// tombstones go first, counted; the newest still send members late.
func TestClosedTracesBudgetEvictsOldest(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1; c.MaxClosedTraceBytes = 3 * closedOverhead })
	var ts []*genTrace
	for i := range 5 {
		g := genTraces(rand.New(rand.NewPCG(93, uint64(i))), 1, base.Add(time.Duration(30*i)*time.Second))[0]
		h.closeTrace(g, base.Add(time.Duration(30*(i+1))*time.Second))
		ts = append(ts, g)
	}
	c := &h.stage.counters
	// Closed: the 5 traces and the 4 fillers before the last.
	if n := c.ClosedTraces.Load(); n != 3 {
		t.Fatalf("%d tombstones, want 3 (the budget)", n)
	}
	if c.ClosedTraceBytes.Load() != 3*closedOverhead {
		t.Errorf("ClosedTraceBytes %d, want %d", c.ClosedTraceBytes.Load(), 3*closedOverhead)
	}
	if n := c.ClosedEvicted.Load(); n != 6 {
		t.Fatalf("ClosedEvicted %d, want 6", n)
	}
	wm := time.Unix(0, h.Watermark())
	newest, oldest := ts[len(ts)-1], ts[0]
	h.feed(inLogs, otlp.AppendTraceIDHex(nil, newest.id), logsMsg(lateLog(newest, wm, "newest")))
	h.feed(inLogs, otlp.AppendTraceIDHex(nil, oldest.id), logsMsg(lateLog(oldest, wm, "oldest")))
	late := h.out("braid.late")
	if len(late) != 1 || string(late[0].Key) != string(otlp.AppendTraceIDHex(nil, newest.id)) {
		t.Fatalf("late records %d; want one, of the newest closed trace", len(late))
	}
}

// TestFusedWatermarkUnsetWithoutWatermark: a trace emitted before any
// watermark exists (flush_after, one input silent) or at the end of input
// carries no watermark_unix_nano field, never 2^63 or MaxInt64.
func TestFusedWatermarkUnsetWithoutWatermark(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = 500 * time.Millisecond })
	ts := genTraces(rand.New(rand.NewPCG(95, 96)), 2, base)
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, ts[0].id), spansMsg(ts[0].spans...))
	h.SetNow(h.now.Add(600 * time.Millisecond)) // before the silent inputs are idle (1s)
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if h.Watermark() != -1<<63 {
		t.Fatalf("watermark %d; the test needs none yet", h.Watermark())
	}
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, ts[1].id), spansMsg(ts[1].spans...))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	recs := h.out("braid.fused")
	if len(recs) != 2 {
		t.Fatalf("%d fused records, want 2 (one flushed without a watermark, one at the end)", len(recs))
	}
	for _, r := range recs {
		for b := r.Value; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatal("fused record does not parse")
			}
			if num == fWatermark {
				t.Errorf("trace %s carries watermark_unix_nano", r.Key)
			}
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			b = b[n+m:]
		}
	}
}

// TestClosedOverheadCoversTheHeap measures what a tombstone takes on the
// heap (map and queue, at their growth) against closedOverhead.
func TestClosedOverheadCoversTheHeap(t *testing.T) {
	const n = 200_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := &fuser{closed: map[[16]byte]uint32{}}
	for i := range n {
		id := [16]byte{byte(i), byte(i >> 8), byte(i >> 16), 7}
		p.closed[id] = uint32(i)
		p.closedQ = append(p.closedQ, closedEntry{at: int64(i), id: id})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("a tombstone takes %.1f bytes of heap (closedOverhead %d)", per, closedOverhead)
	if per > closedOverhead {
		t.Errorf("a tombstone takes %.1f bytes, more than closedOverhead %d", per, closedOverhead)
	}
	runtime.KeepAlive(p)
}

// TestClosedTracesManyBucketsSurviveRestart: the tombstones of one
// checkpoint beyond what one state value holds are cut into several; all
// come back after a restart, and their values are gone once they expire.
func TestClosedTracesManyBucketsSurviveRestart(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1; c.MaxRecordBytes = minRecordBytes })
	ts := genTraces(rand.New(rand.NewPCG(97, 98)), 1200, base) // over 120s of event time
	for _, g := range ts {
		h.feed(inSpans, otlp.AppendTraceIDHex(nil, g.id), spansMsg(g.spans...))
	}
	// A trace far later: every trace is purged in one watermark step.
	o := genTraces(rand.New(rand.NewPCG(99, 100)), 1, base.Add(200*time.Second))[0]
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, o.id), spansMsg(o.spans...))
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.out("braid.late")); n != 0 {
		t.Fatalf("%d late records before the test's own", n)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	values := func() int {
		n := 0
		if err := eachKey(h.Task(), prefixClosed, func(k, v []byte) error {
			if len(v) > h.stage.cfg.MaxRecordBytes/4 {
				t.Errorf("a closed-traces value of %d bytes, over a chunk", len(v))
			}
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	per := (minRecordBytes / 4) / closedEntryBytes
	if n, want := values(), (1200+per-1)/per; n != want {
		t.Fatalf("%d closed-traces values for 1200 tombstones, want %d", n, want)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := h.stage.counters.ClosedTraces.Load(); n != 1200 {
		t.Fatalf("%d tombstones restored, want 1200", n)
	}
	g := ts[600]
	h.feed(inLogs, otlp.AppendTraceIDHex(nil, g.id), logsMsg(lateLog(g, time.Unix(0, h.Watermark()), "after restart")))
	if late := h.out("braid.late"); len(late) != 1 {
		t.Fatalf("%d late records, want 1", len(late))
	} else if reason, _ := header(late[0], "braid.reason"); reason != reasonClosed {
		t.Fatalf("late reason %q", reason)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := values(); n != 0 {
		t.Fatalf("%d closed-traces values after every tombstone expired", n)
	}
}

// TestIdleFlushWaitsWhileBehind: a task that receives nothing for
// flush_after while it is behind its input (not caught up: a backlog, the
// poll loop held by the memory budget) is stalled, not idle — its traces
// stay open for event time to close them once; caught up, it flushes them.
func TestIdleFlushWaitsWhileBehind(t *testing.T) {
	const flush = 5 * time.Second
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = flush })
	ts := genTraces(rand.New(rand.NewPCG(83, 84)), 12, base)
	for _, m := range messages(ts) {
		h.feed(m.input, m.key, m.value)
	}
	for _, d := range []time.Duration{flush, 10 * flush, 100 * flush} {
		h.SetNow(h.now.Add(d))
		if err := h.Advance(); err != nil {
			t.Fatal(err)
		}
		if n := len(h.out("braid.fused")); n != 0 {
			t.Fatalf("%d traces emitted %v after the last input while the task is behind", n, d)
		}
	}
	if n := h.stage.Counters().IdleFlushed.Load(); n != 0 {
		t.Fatalf("IdleFlushed %d while behind", n)
	}
	h.MarkCaughtUp()
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if got := h.fused(); len(got) != len(ts) {
		t.Fatalf("%d of %d traces flushed once caught up", len(got), len(ts))
	}
	if n := h.stage.Counters().IdleFlushed.Load(); n != int64(len(ts)) {
		t.Fatalf("IdleFlushed %d, want %d", n, len(ts))
	}
}

// TestIdleFlushIsSliced: the processing-time flush emits at most a slice of
// traces per call and reports a backlog, so that a checkpoint barrier
// waits for one slice, not for every idle trace; the engine's calls that
// follow emit the rest, each trace once.
func TestIdleFlushIsSliced(t *testing.T) {
	const flush = 5 * time.Second
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = flush })
	n := 2*timerSlice + 100
	// Traces at one moment of event time: none closes by the watermark.
	for i := range n {
		var id [16]byte
		id[0], id[1], id[2] = 0xfa, byte(i>>8), byte(i)
		h.feed(inSpans, nil, spansMsg(requestSpan(id, "r", base, base.Add(time.Millisecond))))
	}
	h.MarkCaughtUp()
	h.SetNow(h.now.Add(2 * flush))
	if err := h.Step(); err != nil {
		t.Fatal(err)
	}
	if got := h.stage.Counters().IdleFlushed.Load(); got != timerSlice {
		t.Fatalf("one call flushed %d traces, want a slice of %d", got, timerSlice)
	}
	if err := h.Advance(); err != nil { // goes on while the task reports a backlog
		t.Fatal(err)
	}
	if got := h.fused(); len(got) != n {
		t.Fatalf("%d of %d traces flushed", len(got), n)
	}
	if got := h.stage.Counters().IdleFlushed.Load(); got != int64(n) {
		t.Fatalf("IdleFlushed %d, want %d (each trace once)", got, n)
	}
}
