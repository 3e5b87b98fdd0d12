package fuse

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

// placeholder is replaced by invalid UTF-8 of the same length after
// marshalling (proto.Marshal refuses invalid strings).
const placeholder = "<BAD>"

func invalidUTF8(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(placeholder), []byte("a\xff\xfeb\xc3"))
}

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// feedRec processes one record with a broker timestamp.
func (h *harness) feedRec(input int, key, value []byte, ts time.Time) error {
	h.now = h.now.Add(10 * time.Millisecond)
	h.SetNow(h.now)
	r := &kgo.Record{Key: key, Value: value, Offset: h.off, Timestamp: ts}
	h.off++
	return h.Process(input, r)
}

// fusedCounts is what each trace was fused with: spans, logs, points.
func fusedCounts(m map[string]*braidpb.FusedTrace) map[string][3]int {
	c := map[string][3]int{}
	for k, ft := range m {
		c[k] = [3]int{len(ft.Spans), len(ft.Logs), len(ft.Points)}
	}
	return c
}

func sameCounts(t *testing.T, got, want map[string][3]int) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("trace %s fused with %v, want %v", k, got[k], w)
		}
	}
}

// goodRun feeds ts and returns what was fused, the reference for a run
// with bad records added.
func goodRun(t *testing.T, ts []*genTrace, mod func(*Config)) map[string][3]int {
	h := newHarness(t, 1, mod)
	for _, m := range messages(ts) {
		h.feed(m.input, m.key, m.value)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	c := fusedCounts(h.fused())
	if len(c) != len(ts) {
		t.Fatalf("reference run fused %d traces, want %d", len(c), len(ts))
	}
	return c
}

func TestHostileInvalidUTF8IsRepairedBeforeAnyMarshal(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(7, 7)), 5, base)
	want := goodRun(t, ts, nil)

	h := newHarness(t, 1, nil)
	bad := genTraces(rand.New(rand.NewPCG(8, 8)), 1, base)[0]
	bad.spans[0].Name = placeholder
	bad.spans[0].Attributes = []*commonpb.KeyValue{strAttr("gen_ai.request.model", placeholder), strAttr("gen_ai.system", "vllm")}
	bad.logs[0].Body.Value = &commonpb.AnyValue_StringValue{StringValue: placeholder}
	for i, m := range messages(append(ts, bad)) {
		if i >= 4*len(ts) {
			m.value = invalidUTF8(m.value)
		}
		h.feed(m.input, m.key, m.value)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	got := h.fused() // every record unmarshals
	sameCounts(t, fusedCounts(got), want)
	ft := got[string(otlp.AppendTraceIDHex(nil, bad.id))]
	if ft == nil {
		t.Fatal("the trace with invalid UTF-8 was not fused")
	}
	if m := ft.GetDerived().GetModel(); !strings.Contains(m, "\uFFFD") {
		t.Errorf("derived request model %q, want U+FFFD in it", m)
	}
	if !strings.Contains(ft.Summary.GetRootSpanName(), "\uFFFD") {
		t.Errorf("root span name %q, want U+FFFD in it", ft.Summary.GetRootSpanName())
	}
	if n := h.stage.Counters().RepairedUTF8.Load(); n < 2 {
		t.Errorf("RepairedUTF8 = %d, want ≥ 2", n)
	}
	if len(h.out("braid.dlq")) != 0 {
		t.Errorf("repaired input went to the DLQ")
	}
}

func TestHostileErrorPolicyPerStage(t *testing.T) {
	validKey := otlp.AppendTraceIDHex(nil, [16]byte{1, 2, 3})
	bad := []struct {
		input      int
		key, value []byte
		stage      string
	}{
		{inSpans, []byte("k"), []byte{0x0a, 0x7f, 1}, "ingest: "},
		{inRepart, validKey, []byte{9, 9, 9}, "fuse: "},
		{inRepart, []byte("not a trace id"), []byte{1}, "fuse: "},
		{inResolve, []byte("rid"), []byte("Xjunk"), "resolve: "},
		{inResolve, []byte("rid"), []byte("D1"), "resolve: "},
		{inResolve, []byte("rid"), []byte("L\x07"), "resolve: "},
	}
	ts := genTraces(rand.New(rand.NewPCG(3, 3)), 3, base)
	want := goodRun(t, ts, nil)
	for _, policy := range []OnError{DeadLetter, Skip, Fail} {
		t.Run(string(policy), func(t *testing.T) {
			h := newHarness(t, 1, func(c *Config) {
				c.RequestIDs = testRequestIDs{}
				c.ErrorPolicy = ErrorPolicy{Ingest: policy, Resolve: policy, Fuse: policy}
			})
			for _, b := range bad {
				err := h.Process(b.input, &kgo.Record{Key: b.key, Value: b.value, Offset: h.off})
				h.off++
				if policy == Fail {
					if err == nil || !strings.Contains(err.Error(), b.stage) {
						t.Fatalf("%s record: err %v, want the job to fail naming the stage", b.stage, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range messages(ts) {
				h.feed(m.input, m.key, m.value)
			}
			if err := h.Finish(); err != nil {
				t.Fatal(err)
			}
			sameCounts(t, fusedCounts(h.fused()), want)
			dlq := h.out("braid.dlq")
			c := h.stage.Counters()
			if policy == Skip {
				if len(dlq) != 0 || c.Skipped.Load() != int64(len(bad)) {
					t.Fatalf("skip: %d DLQ records, Skipped %d; want 0, %d", len(dlq), c.Skipped.Load(), len(bad))
				}
				return
			}
			if len(dlq) != len(bad) || c.DLQ.Load() != int64(len(bad)) {
				t.Fatalf("%d DLQ records (counted %d), want %d", len(dlq), c.DLQ.Load(), len(bad))
			}
			for i, r := range dlq {
				if !strings.HasPrefix(hdr(r, "braid.reason"), bad[i].stage) || !bytes.Equal(r.Value, bad[i].value) || hdr(r, "braid.offset") == "" || hdr(r, "braid.topic") == "" {
					t.Errorf("DLQ record %d: reason %q, value %q, headers %v", i, hdr(r, "braid.reason"), r.Value, r.Headers)
				}
			}
		})
	}
}

func TestHostileFutureEventTime(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(4, 4)), 3, base)
	want := goodRun(t, ts, nil)
	recTime := base.Add(time.Second)
	future := genTraces(rand.New(rand.NewPCG(5, 5)), 1, base.Add(365*24*time.Hour))[0]
	for _, policy := range []FuturePolicy{FutureLate, FutureRestamp} {
		t.Run(string(policy), func(t *testing.T) {
			h := newHarness(t, 1, func(c *Config) { c.FuturePolicy = policy })
			key := otlp.AppendTraceIDHex(nil, future.id)
			if err := h.feedRec(inSpans, key, spansMsg(future.spans...), recTime); err != nil {
				t.Fatal(err)
			}
			// A lull: every input idle, the watermark may move to what
			// was observed.
			h.now = h.now.Add(time.Minute)
			h.SetNow(h.now)
			if err := h.Advance(); err != nil {
				t.Fatal(err)
			}
			if wm := h.Watermark(); wm > recTime.Add(time.Minute).UnixNano() {
				t.Fatalf("watermark %v moved with a future event time", time.Unix(0, wm).UTC())
			}
			for _, m := range messages(ts) {
				if err := h.feedRec(m.input, m.key, m.value, time.Unix(0, m.time)); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Finish(); err != nil {
				t.Fatal(err)
			}
			got := fusedCounts(h.fused())
			sameCounts(t, got, want)
			late := h.out("braid.late")
			if policy == FutureLate {
				if len(late) != 3 || hdr(late[0], "braid.reason") != "future event time" {
					t.Fatalf("%d late records (reason %q), want the 3 future spans", len(late), hdr(late[0], "braid.reason"))
				}
				if _, ok := got[string(key)]; ok {
					t.Fatal("the future trace was fused")
				}
			} else {
				if len(late) != 0 {
					t.Fatalf("%d late records, want 0", len(late))
				}
				if got[string(key)] != [3]int{3, 0, 0} {
					t.Fatalf("re-stamped trace fused with %v", got[string(key)])
				}
			}
			if n := h.stage.Counters().Future.Load(); n != 3 {
				t.Errorf("Future = %d, want 3", n)
			}
		})
	}
}

func TestHostileExtremeTimes(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(6, 6)), 3, base)
	want := goodRun(t, ts, nil)
	h := newHarness(t, 1, nil)
	recTime := base
	for i, end := range []uint64{0, 1, uint64(math.MaxInt64), math.MaxUint64, uint64(math.MaxInt64) + 1} {
		id := [16]byte{0xee, byte(i + 1)}
		sp := &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "x", StartTimeUnixNano: end, EndTimeUnixNano: end}
		if err := h.feedRec(inSpans, otlp.AppendTraceIDHex(nil, id), spansMsg(sp), recTime); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range messages(ts) {
		if err := h.feedRec(m.input, m.key, m.value, time.Unix(0, m.time)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, fusedCounts(h.fused()), want)
	// Without broker timestamps (no clock to check against) the far ends
	// of the range must not wrap either.
	h2 := newHarness(t, 1, nil)
	for i, end := range []uint64{uint64(math.MaxInt64), 0, math.MaxUint64} {
		id := [16]byte{0xef, byte(i + 1)}
		sp := &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "x", StartTimeUnixNano: 1, EndTimeUnixNano: end}
		h2.feed(inSpans, otlp.AppendTraceIDHex(nil, id), spansMsg(sp))
	}
	if err := h2.Finish(); err != nil {
		t.Fatal(err)
	}
	h2.fused()
}

func TestHostileLongKeysAndRequestIDs(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.RequestIDs = testRequestIDs{} })
	long := strings.Repeat("r", 2000)
	l := engineLog(base, "x")
	l.Attributes = []*commonpb.KeyValue{strAttr("request_id", long)}
	h.feed(inLogs, nil, logsMsg(l))
	if n := h.stage.Counters().UnjoinedLogs.Load(); n != 1 {
		t.Fatalf("UnjoinedLogs = %d, want the log with a 2 KB request id unjoined", n)
	}
	key := bytes.Repeat([]byte("k"), 200_000)
	h.feed(inSpans, key, []byte{0x0a, 0x7f})
	dlq := h.out("braid.dlq")
	if len(dlq) != 1 || len(dlq[0].Key) != maxKeyBytes || hdr(dlq[0], "braid.key-truncated") != "true" {
		t.Fatalf("%d DLQ records, key of %d bytes", len(dlq), len(dlq[0].Key))
	}
	checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
}
