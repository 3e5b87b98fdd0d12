package fuse

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

// recordSize is what a record takes of the broker's message.max.bytes,
// less the batch framing.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// checkFits fails if any record the harness collected exceeds limit.
func checkFits(t *testing.T, recs []*kgo.Record, limit int) {
	t.Helper()
	for _, r := range recs {
		if n := recordSize(r); n > limit {
			t.Fatalf("%s record of %d bytes, over the limit of %d", r.Topic, n, limit)
		}
	}
}

// traceOn returns a trace id that hashes to partition q of n.
func traceOn(q, n int32, seed byte) [16]byte {
	for i := 0; ; i++ {
		id := [16]byte{seed, byte(i), byte(i >> 8), 1}
		if otlp.HashPartition(otlp.AppendTraceIDHex(nil, id), n) == q {
			return id
		}
	}
}

func bigSpans(id [16]byte, n, pad int, start time.Time) []*tracepb.Span {
	r := rand.New(rand.NewPCG(uint64(id[0]), uint64(n)))
	root := sid(r)
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		spans[i] = &tracepb.Span{TraceId: id[:], SpanId: sid(r), ParentSpanId: root, Name: "llm.decode.layer." + strconv.Itoa(i),
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(start.Add(time.Millisecond).UnixNano())}
		if pad > 0 {
			spans[i].Attributes = []*commonpb.KeyValue{strAttr("pad", strings.Repeat("p", pad))}
		}
	}
	spans[0].SpanId, spans[0].ParentSpanId, spans[0].Name = root, nil, "llm_request"
	return spans
}

// TestLimitsLargeTraceRepartitionedAndFusedInParts: a 1.2 MB single-trace
// message (inputs may be larger than braid's own records) read by a task
// that does not own the trace becomes several repartition records under
// the limit; the owner fuses every span, in a
// FusedTrace split into parts.
func TestLimitsLargeTraceRepartitionedAndFusedInParts(t *testing.T) {
	const limit = 1_000_000
	mod := func(c *Config) { c.FlushAfter = -1; c.MaxBytes = 4 << 20 }
	h0 := newTaskHarness(t, 2, 0, mod)
	h1 := newTaskHarness(t, 2, 1, mod)
	id := traceOn(1, 2, 0xa1)
	spans := bigSpans(id, 3600, 300, base)
	msg := spansMsg(spans...)
	if len(msg) < 1_200_000 {
		t.Fatalf("message of %d bytes, want ≥ 1.2 MB", len(msg))
	}
	h0.feed(inSpans, otlp.AppendTraceIDHex(nil, id), msg)
	checkFits(t, h0.Out, limit)
	rep := h0.out("braid.fuse-repartition")
	if len(rep) < 2 {
		t.Fatalf("%d repartition records, want the trace cut into several", len(rep))
	}
	if n := h0.stage.Counters().Split.Load(); n != 1 {
		t.Errorf("Split = %d, want 1", n)
	}
	for _, r := range rep {
		h1.now = h1.now.Add(10 * time.Millisecond)
		h1.SetNow(h1.now)
		if err := h1.Process(inRepart, &kgo.Record{Key: r.Key, Value: r.Value}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h1.Finish(); err != nil {
		t.Fatal(err)
	}
	checkFits(t, h1.Out, limit)
	ft := h1.fused()[string(otlp.AppendTraceIDHex(nil, id))]
	if ft == nil || len(ft.Spans) != len(spans) {
		t.Fatalf("trace fused with %v spans, want %d", ft.GetSpans() != nil, len(spans))
	}
	if h1.stage.Counters().Parts.Load() != 1 {
		t.Errorf("Parts = %d, want 1", h1.stage.Counters().Parts.Load())
	}
	for _, s := range ft.Spans {
		if !containsSpan(spans, s.Span) {
			t.Fatal("a span changed on its way through the parts")
		}
	}
}

// TestLimitsHugeMessageAndTrace: a 5 MB message holding a 50,000-span trace
// and three ordinary traces: the big trace is cut by the per-trace caps
// (counted and flagged), the others fuse exactly, every record fits.
func TestLimitsHugeMessageAndTrace(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(9, 9)), 3, base)
	want := goodRun(t, ts, nil)
	h := newHarness(t, 1, nil)
	bigID := [16]byte{0xb1, 0xb2}
	spans := bigSpans(bigID, 50_000, 40, base)
	for _, g := range ts {
		spans = append(spans, g.spans...)
	}
	msg := spansMsg(spans...)
	if len(msg) < 5_000_000 {
		t.Fatalf("message of %d bytes, want ≥ 5 MB", len(msg))
	}
	h.feed(inSpans, nil, msg)
	for _, m := range messages(ts) {
		if m.input != inSpans {
			h.feed(m.input, m.key, m.value)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	got := h.fused()
	sameCounts(t, fusedCounts(got), want)
	big := got[string(otlp.AppendTraceIDHex(nil, bigID))]
	if big == nil || len(big.Spans) > h.stage.cfg.MaxSpans || !hasFlag(big, braidpb.Flag_FLAG_TRUNCATED) || len(big.Spans)+int(big.Summary.GetDroppedSpans()) != 50_000 {
		t.Fatalf("big trace: %d spans, truncated %v, dropped %d", len(big.GetSpans()), hasFlag(big, braidpb.Flag_FLAG_TRUNCATED), big.GetSummary().GetDroppedSpans())
	}
	if n := h.stage.Counters().Truncated.Load(); n != int64(big.Summary.GetDroppedSpans()) {
		t.Errorf("Truncated = %d, want %d", n, big.Summary.GetDroppedSpans())
	}
}

// TestLimitsOversizedCopiesAreChunked: a 3 MB undecodable message goes to
// the DLQ in chunks that reassemble to it; a member larger than any record
// goes to the DLQ alone; the other spans of its message fuse.
func TestLimitsOversizedCopiesAreChunked(t *testing.T) {
	h := newHarness(t, 1, nil)
	junk := bytes.Repeat([]byte{0x0a, 0xff, 0xff, 0xff, 0x7f}, 600_000)
	h.feed(inSpans, []byte("junk"), junk)
	dlq := h.out("braid.dlq")
	if len(dlq) < 3 {
		t.Fatalf("%d DLQ records, want the message in chunks", len(dlq))
	}
	var whole []byte
	for i, r := range dlq {
		if hdr(r, "braid.chunk") != strconv.Itoa(i) || hdr(r, "braid.chunks") != strconv.Itoa(len(dlq)) || string(r.Key) != "junk" || !strings.HasPrefix(hdr(r, "braid.reason"), "ingest: ") {
			t.Fatalf("chunk %d: key %q, headers %v", i, r.Key, r.Headers)
		}
		whole = append(whole, r.Value...)
	}
	if !bytes.Equal(whole, junk) {
		t.Fatal("DLQ chunks do not reassemble to the message")
	}

	g := genTraces(rand.New(rand.NewPCG(10, 10)), 1, base)[0]
	huge := proto.Clone(g.spans[2]).(*tracepb.Span)
	huge.SpanId = []byte{9, 9, 9, 9, 9, 9, 9, 9}
	huge.Attributes = []*commonpb.KeyValue{strAttr("pad", strings.Repeat("h", 1_200_000))}
	h.feed(inSpans, nil, spansMsg(g.spans[0], huge, g.spans[1], g.spans[2]))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	dlq = h.out("braid.dlq")[len(dlq):]
	if len(dlq) < 2 || !strings.Contains(hdr(dlq[0], "braid.reason"), "exceeds the record limit") {
		t.Fatalf("%d DLQ records for the huge member, reason %q", len(dlq), hdr(dlq[0], "braid.reason"))
	}
	var whole2 []byte
	for _, r := range dlq {
		whole2 = append(whole2, r.Value...)
	}
	var td tracepb.TracesData
	if err := proto.Unmarshal(whole2, &td); err != nil || !proto.Equal(td.ResourceSpans[0].ScopeSpans[0].Spans[0], huge) {
		t.Fatalf("the DLQ copy is not the huge span: %v", err)
	}
	if ft := h.fused()[string(otlp.AppendTraceIDHex(nil, g.id))]; ft == nil || len(ft.Spans) != 3 {
		t.Fatalf("the rest of the message was not fused: %v", ft)
	}
	if n := h.stage.Counters().TooLarge.Load(); n != 1 {
		t.Errorf("TooLarge = %d, want 1", n)
	}
}

func ridLogs(rid string, n int, at time.Time, pad int) []*logspb.LogRecord {
	logs := make([]*logspb.LogRecord, n)
	for i := range logs {
		logs[i] = engineLog(at.Add(time.Duration(i)*time.Microsecond), "scheduled "+rid+" step "+strconv.Itoa(i)+" "+strings.Repeat("x", pad))
	}
	return logs
}

// TestLimitsManyLogsForOneRequest: 1,200 logs of 1 KB naming one request id
// that has no span yet are kept in chunks (no state value or record over the
// limit), and all join the trace when its span comes.
func TestLimitsManyLogsForOneRequest(t *testing.T) {
	c := newCluster(t, 2, func(cfg *Config) { cfg.FlushAfter = -1; cfg.MaxBytes = 4 << 20 })
	const rid = "cmpl-1200"
	logs := ridLogs(rid, 1200, base, 1000)
	c.feed(0, inLogs, nil, logsMsg(logs...))
	c.checkpoint(time.Millisecond)
	chunks := 0
	for _, h := range c.hs {
		checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
		for _, r := range h.out("braid.fuse-changelog") {
			if bytes.Contains(r.Key, []byte(rid)) && len(r.Value) > 100_000 {
				chunks++
			}
		}
	}
	if chunks < 2 {
		t.Fatalf("%d waiting-log chunks in the changelog, want the 1.2 MB in several", chunks)
	}
	for _, h := range c.hs { // the waiting logs come back from their chunks
		if err := h.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	id := [16]byte{0xc1, 0xc2}
	c.feed(1, inSpans, otlp.AppendTraceIDHex(nil, id), spansMsg(requestSpan(id, rid, base, base.Add(time.Second))))
	for _, h := range c.hs {
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	c.drain()
	for _, h := range c.hs {
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
		checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	}
	ft := c.fused()[string(otlp.AppendTraceIDHex(nil, id))]
	if ft == nil || len(ft.Logs) != len(logs) {
		t.Fatalf("trace fused with %d logs, want %d", len(ft.GetLogs()), len(logs))
	}
}

// TestLimitsWaitingLogsBudget: 10,000 logs naming one request id that never
// gets a span, under a 1 MB budget: the oldest go to the late topic with
// reason "memory budget", memory and state stay bounded, and every log is
// accounted for once.
func TestLimitsWaitingLogsBudget(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		c.RequestIDs = testRequestIDs{}
		c.MaxWaitingLogBytes = 1 << 20
		c.AllowedLateness = time.Hour
	})
	const rid = "cmpl-never"
	const total = 10_000
	for i := 0; i < total; i += 500 {
		h.feed(inLogs, nil, logsMsg(ridLogs(rid, 500, base.Add(time.Duration(i)*time.Millisecond), 500)...))
		if n := h.stage.Counters().WaitingLogBytes.Load(); n > 1<<20 {
			t.Fatalf("waiting logs hold %d bytes, share %d", n, 1<<20)
		}
		if err := h.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	c := h.stage.Counters()
	if c.WaitingEvicted.Load() == 0 {
		t.Fatal("no waiting log was evicted under the budget")
	}
	late := h.out("braid.late")
	if int64(len(late)) != c.WaitingEvicted.Load() || hdr(late[0], "braid.reason") != "memory budget" {
		t.Fatalf("%d late records (reason %q), WaitingEvicted %d", len(late), hdr(late[0], "braid.reason"), c.WaitingEvicted.Load())
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.out("braid.late")); n != total {
		t.Fatalf("%d logs in the late topic after the end, want all %d", n, total)
	}
}

// TestLimitsOpenTraceBudget: with a 64 KiB share, 400 open traces do not
// fit: the oldest are emitted early and leave memory, members that arrive
// for them later revise them, and in the end every trace is fused with all
// its members, as without the budget.
func TestLimitsOpenTraceBudget(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(11, 11)), 400, base)
	mod := func(c *Config) { c.FlushAfter = -1; c.AllowedLateness = time.Hour }
	want := goodRun(t, ts, mod)
	const budget = 64 << 10
	for _, restart := range []bool{false, true} {
		h := newHarness(t, 1, func(c *Config) { mod(c); c.MaxOpenTraceBytes = budget })
		ms := messages(ts)
		// Every trace's first message, then the rest: the early traces are
		// evicted before their later members come.
		for pass := range 2 {
			for i, m := range ms {
				if (i%4 == 0) != (pass == 0) {
					continue
				}
				h.feed(m.input, m.key, m.value)
				if n := h.stage.Counters().OpenTraceBytes.Load(); !restart && n > budget+budget/4 {
					t.Fatalf("open traces hold %d bytes, share %d", n, budget)
				}
			}
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if restart && pass == 0 {
				if err := h.Restart(); err != nil { // evicted traces come back from state
					t.Fatal(err)
				}
			}
		}
		c := h.stage.Counters()
		if c.Evicted.Load() == 0 {
			t.Fatal("no trace was evicted")
		}
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
		got := fusedCounts(h.fused())
		if len(got) != len(want) {
			t.Fatalf("restart %v: %d traces fused, want %d", restart, len(got), len(want))
		}
		sameCounts(t, got, want)
		if c.Revisions.Load() == 0 {
			t.Error("no evicted trace was revised")
		}
		if n := c.OpenTraces.Load(); !restart && n != 0 {
			t.Errorf("OpenTraces = %d after the end, want 0", n)
		}
	}
}

// TestLimitsNearLimitMember: a span just under the member limit among small
// spans of the same resource: every changelog record and fused part fits.
func TestLimitsNearLimitMember(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxBytes = 4 << 20 })
	g := genTraces(rand.New(rand.NewPCG(12, 12)), 1, base)[0]
	big := proto.Clone(g.spans[1]).(*tracepb.Span)
	big.SpanId = []byte{7, 7, 7, 7, 7, 7, 7, 7}
	big.Attributes = []*commonpb.KeyValue{strAttr("pad", strings.Repeat("n", h.stage.cfg.MaxRecordBytes-2000))}
	small := bigSpans(g.id, 3000, 50, base)
	spans := append([]*tracepb.Span{big}, small...)
	key := otlp.AppendTraceIDHex(nil, g.id)
	h.feed(inSpans, key, spansMsg(spans...))
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	if ft := h.fused()[string(key)]; ft == nil || len(ft.Spans) != len(spans) {
		t.Fatalf("trace fused with %d spans, want %d", len(ft.GetSpans()), len(spans))
	}
	if len(h.out("braid.dlq")) != 0 {
		t.Fatal("a member under the limit went to the DLQ")
	}
}

// TestLimitsJSONPartsFit: with JSON output, the parts of a large trace fit
// the limit as JSON and merge to the whole trace.
func TestLimitsJSONPartsFit(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.JSON = true; c.MaxBytes = 4 << 20; c.MaxRecordBytes = 256 << 10 })
	id := [16]byte{0xd1}
	spans := bigSpans(id, 3000, 200, base)
	h.feed(inSpans, nil, spansMsg(spans...))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
	var whole braidpb.FusedTrace
	recs := h.out("braid.fused")
	if len(recs) < 2 {
		t.Fatalf("%d fused records, want parts", len(recs))
	}
	for i, r := range recs {
		var part braidpb.FusedTrace
		if err := protojson.Unmarshal(r.Value, &part); err != nil {
			t.Fatal(err)
		}
		if int(part.Part) != i || int(part.Parts) != len(recs) {
			t.Fatalf("record %d is part %d of %d", i, part.Part, part.Parts)
		}
		proto.Merge(&whole, &part)
	}
	if len(whole.Spans) != len(spans) {
		t.Fatalf("parts merge to %d spans, want %d", len(whole.Spans), len(spans))
	}
	// The derived figures of 3,000 layers are one field larger than a
	// part may be in JSON: left out, counted.
	if whole.Derived != nil || h.stage.Counters().DerivedDropped.Load() != 1 {
		t.Fatalf("derived %v, DerivedDropped %d", whole.Derived != nil, h.stage.Counters().DerivedDropped.Load())
	}
}

// TestKeptMembers: the members a checkpoint writes stay in memory for
// the trace's first emission while the open-traces share has room for
// them, and leave it, the latest first, when it fills (the emission reads
// them back from state). The traces fused are the same either way, and
// the same as a run without checkpoints fuses from memory alone; across
// a restart too, which reads every chunk back.
func TestKeptMembers(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(21, 21)), 300, base)
	ms := messages(ts)
	// run feeds ms, a checkpoint after each message if asked, and
	// returns what was fused and the most the open traces held.
	run := func(share int64, checkpoints bool, restartAt int) (map[string]*braidpb.FusedTrace, *Counters, int64) {
		h := newHarness(t, 1, func(c *Config) {
			c.FlushAfter = -1
			if share > 0 {
				c.MaxOpenTraceBytes = share
			}
		})
		peak := int64(0)
		for i, m := range ms {
			h.feed(m.input, m.key, m.value)
			peak = max(peak, h.stage.counters.OpenTraceBytes.Load())
			if checkpoints {
				if err := h.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			if i == restartAt {
				if err := h.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
		return h.fused(), &h.stage.counters, peak
	}
	want, wc, _ := run(0, false, -1)
	if len(want) != len(ts) || wc.ChunkReads.Load() != 0 {
		t.Fatalf("reference run: %d traces fused of %d, %d chunk reads", len(want), len(ts), wc.ChunkReads.Load())
	}
	_, _, peak := run(0, true, -1) // what kept members take at most
	for _, tc := range []struct {
		name      string
		share     int64
		restartAt int
		reads     bool // some emission reads chunks back
	}{
		{"kept", 0, -1, false},
		{"share full", peak * 3 / 4, -1, true},
		{"restart", 0, len(ms) / 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, c, _ := run(tc.share, true, tc.restartAt)
			t.Logf("share %d (kept members' peak %d): %d fused, %d chunk reads, %d spills, %d evicted", tc.share, peak, c.Fused.Load(), c.ChunkReads.Load(), c.Spills.Load(), c.Evicted.Load())
			if len(got) != len(want) {
				t.Fatalf("%d traces fused, want %d", len(got), len(want))
			}
			for k, w := range want {
				if !proto.Equal(got[k], w) {
					t.Fatalf("trace %s differs from the run without checkpoints", k)
				}
			}
			if reads := c.ChunkReads.Load() > 0; reads != tc.reads || c.Revisions.Load() != 0 {
				t.Errorf("%d chunk reads, %d revisions; want reads %v and no revision", c.ChunkReads.Load(), c.Revisions.Load(), tc.reads)
			}
			if c.Spills.Load() != 0 || c.Evicted.Load() != 0 {
				t.Errorf("%d spills, %d evicted: dropping kept members should have made room", c.Spills.Load(), c.Evicted.Load())
			}
		})
	}
}
