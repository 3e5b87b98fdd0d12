package fuse

import (
	"regexp"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

// testRequestIDs is a small RequestIDs: gen_ai.request.id on spans, a
// request_id attribute or a vLLM "cmpl-…" id in the body of logs.
type testRequestIDs struct{}

var cmplRe = regexp.MustCompile(`\bcmpl-[0-9a-z]+`)

func (testRequestIDs) FromSpan(b []byte) (string, bool) {
	var s tracepb.Span
	if proto.Unmarshal(b, &s) != nil {
		return "", false
	}
	for _, kv := range s.Attributes {
		if kv.Key == "gen_ai.request.id" {
			return kv.Value.GetStringValue(), true
		}
	}
	return "", false
}

func (testRequestIDs) FromLog(b []byte) (string, bool) {
	var l logspb.LogRecord
	if proto.Unmarshal(b, &l) != nil {
		return "", false
	}
	for _, kv := range l.Attributes {
		if kv.Key == "request_id" {
			return kv.Value.GetStringValue(), true
		}
	}
	if m := cmplRe.FindString(l.Body.GetStringValue()); m != "" {
		return m, true
	}
	return "", false
}

// cluster runs every task of a stage, routing what they send on the
// internal topics to the owning task, as Kafka would.
type cluster struct {
	t  *testing.T
	hs []*harness
}

func newCluster(t *testing.T, partitions int32, mod func(*Config)) *cluster {
	c := &cluster{t: t}
	for p := range partitions {
		c.hs = append(c.hs, newTaskHarness(t, partitions, p, func(cfg *Config) {
			cfg.RequestIDs = testRequestIDs{}
			if mod != nil {
				mod(cfg)
			}
		}))
	}
	return c
}

// feed processes a source message on task p and delivers what follows.
func (c *cluster) feed(p int, input int, key, value []byte) {
	c.t.Helper()
	c.hs[p].feed(input, key, value)
	c.drain()
}

// drain delivers internal records until none is in flight; other outputs
// stay in each harness's sink list.
func (c *cluster) drain() {
	c.t.Helper()
	for moved := true; moved; {
		moved = false
		for _, h := range c.hs {
			var keep, send []int
			_ = keep
			out := h.Out
			h.Out = nil
			for i, r := range out {
				switch r.Topic {
				case "braid.resolve-repartition", "braid.kvgraph-repartition", "braid.fuse-repartition":
					send = append(send, i)
				default:
					h.Out = append(h.Out, r)
				}
			}
			for _, i := range send {
				r := out[i]
				in := inRepart
				switch r.Topic {
				case "braid.resolve-repartition":
					in = inResolve
				case "braid.kvgraph-repartition":
					in = inKV
				}
				dst := c.hs[r.Partition]
				dst.now = maxTime(dst.now, h.now)
				dst.SetNow(dst.now)
				if err := dst.Process(in, r); err != nil {
					c.t.Fatal(err)
				}
				moved = true
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkpoint checkpoints every task (sending watermark markers), moves
// processing time on by step and delivers.
func (c *cluster) checkpoint(step time.Duration) {
	c.t.Helper()
	for _, h := range c.hs {
		h.now = h.now.Add(step)
		h.SetNow(h.now)
		if err := h.Checkpoint(); err != nil {
			c.t.Fatal(err)
		}
	}
	c.drain()
	for _, h := range c.hs {
		if err := h.Advance(); err != nil {
			c.t.Fatal(err)
		}
	}
	c.drain()
}

func (c *cluster) fused() map[string]*braidpb.FusedTrace {
	all := map[string]*braidpb.FusedTrace{}
	for _, h := range c.hs {
		for k, ft := range h.fused() {
			if old := all[k]; old == nil || old.Revision < ft.Revision {
				all[k] = ft
			}
		}
	}
	return all
}

func requestSpan(id [16]byte, rid string, start, end time.Time) *tracepb.Span {
	return &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "llm_request",
		Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
		Attributes: []*commonpb.KeyValue{{Key: "gen_ai.request.id", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: rid}}}}}
}

func engineLog(at time.Time, body string) *logspb.LogRecord {
	return &logspb.LogRecord{TimeUnixNano: uint64(at.UnixNano()),
		Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}}}
}

// TestResolveJoinsLogsByRequestID: logs without a trace id land in the
// trace that a span declared for their request id, whether the span or the
// log arrives first, on whichever tasks the trace id and the request id
// hash to.
func TestResolveJoinsLogsByRequestID(t *testing.T) {
	for _, partitions := range []int32{1, 3} {
		for _, spanFirst := range []bool{false, true} {
			c := newCluster(t, partitions, nil)
			type req struct {
				id  [16]byte
				rid string
			}
			var reqs []req
			for i := range 12 {
				var id [16]byte
				id[0], id[15] = byte(i+1), 0x5a
				reqs = append(reqs, req{id, "cmpl-" + strings.Repeat(string(rune('a'+i)), 6)})
			}
			t0 := base
			feedLogs := func() {
				for i, r := range reqs {
					at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
					msg := logsMsg(engineLog(at, "Added request "+r.rid+"."), engineLog(at.Add(time.Millisecond), "Finished request "+r.rid))
					c.feed(i%int(partitions), inLogs, nil, msg)
				}
			}
			feedSpans := func() {
				for i, r := range reqs {
					at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
					c.feed((i+1)%int(partitions), inSpans, nil, spansMsg(requestSpan(r.id, r.rid, at, at.Add(2*time.Millisecond))))
				}
			}
			if spanFirst {
				feedSpans()
				c.checkpoint(600 * time.Millisecond)
				feedLogs()
			} else {
				feedLogs()
				c.checkpoint(600 * time.Millisecond)
				feedSpans()
			}
			// Traffic goes on (event time passes) on every partition.
			for k := 1; k <= 8; k++ {
				at := t0.Add(time.Duration(k) * 2 * time.Second)
				for p := range partitions {
					var id [16]byte
					id[0], id[1], id[2] = 0xee, byte(k), byte(p)
					c.feed(int(p), inSpans, nil, spansMsg(requestSpan(id, "cmpl-z"+string(rune('a'+k))+string(rune('a'+p)), at, at)))
				}
				c.checkpoint(600 * time.Millisecond)
			}
			fused := c.fused()
			for _, r := range reqs {
				key := string(otlp.AppendTraceIDHex(nil, r.id))
				ft := fused[key]
				if ft == nil {
					t.Fatalf("P=%d spanFirst=%v: trace of %s not emitted", partitions, spanFirst, r.rid)
				}
				if len(ft.Logs) != 2 || ft.Revision != 0 {
					t.Errorf("P=%d spanFirst=%v: %s: %d logs, revision %d; want 2 logs in revision 0", partitions, spanFirst, r.rid, len(ft.Logs), ft.Revision)
				}
				for _, l := range ft.Logs {
					if !strings.Contains(l.Log.Body.GetStringValue(), r.rid) {
						t.Errorf("%s got log %q", r.rid, l.Log.Body.GetStringValue())
					}
				}
				if ids := ft.GetDerived().GetRequestIds(); len(ids) != 1 || ids[0] != r.rid {
					t.Errorf("%s: derived request ids %v", r.rid, ids)
				}
				if !hasFlag(ft, braidpb.Flag_FLAG_RESOLVED_BY_REQUEST_ID) {
					t.Errorf("%s: FLAG_RESOLVED_BY_REQUEST_ID missing", r.rid)
				}
			}
			var resolved, unresolved int64
			for _, h := range c.hs {
				resolved += h.stage.Counters().Resolved.Load()
				unresolved += h.stage.Counters().Unresolved.Load()
			}
			if resolved != int64(2*len(reqs)) || unresolved != 0 {
				t.Errorf("P=%d spanFirst=%v: resolved %d unresolved %d, want %d and 0", partitions, spanFirst, resolved, unresolved, 2*len(reqs))
			}
		}
	}
}

// TestResolveUnresolvedLogsAreFlagged: a log whose request never gets a
// span goes to the late topic with its reason once allowed lateness has
// passed — and not before; a checkpoint, abort and restart in between lose
// nothing.
func TestResolveUnresolvedLogsAreFlagged(t *testing.T) {
	c := newCluster(t, 1, nil)
	h := c.hs[0]
	c.feed(0, inLogs, nil, logsMsg(engineLog(base, "Aborted request cmpl-orphan1")))
	c.checkpoint(600 * time.Millisecond)
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	c.feed(0, inSpans, nil, spansMsg(requestSpan([16]byte{9}, "cmpl-other", base.Add(5*time.Second), base.Add(5*time.Second))))
	c.checkpoint(600 * time.Millisecond)
	if n := len(h.out("braid.late")); n != 0 {
		t.Fatalf("%d late records before allowed lateness passed", n)
	}
	// Allowed lateness is 10s, out-of-orderness 2s.
	c.feed(0, inSpans, nil, spansMsg(requestSpan([16]byte{8}, "cmpl-third", base.Add(13*time.Second), base.Add(13*time.Second))))
	c.checkpoint(600 * time.Millisecond) // markers of this checkpoint carry the new watermark
	c.checkpoint(600 * time.Millisecond)
	late := h.out("braid.late")
	if len(late) != 1 {
		t.Fatalf("%d late records, want the orphan log", len(late))
	}
	if r := hdr(late[0], "braid.reason"); !strings.Contains(r, "unresolved request id cmpl-orphan1") || string(late[0].Key) != "cmpl-orphan1" {
		t.Errorf("late record key %q reason %q", late[0].Key, r)
	}
	var ld logspb.LogsData
	if err := proto.Unmarshal(late[0].Value, &ld); err != nil || ld.ResourceLogs[0].ScopeLogs[0].LogRecords[0].Body.GetStringValue() != "Aborted request cmpl-orphan1" {
		t.Errorf("late value is not the original log: %v", err)
	}
	if u := h.stage.Counters().Unresolved.Load(); u != 1 {
		t.Errorf("Unresolved = %d, want 1", u)
	}
}

// TestSpansDeclareOnlyWithLogs: a span's request id is declared to the
// resolve stage only when some source reads logs, the one thing the
// declaration joins.
func TestSpansDeclareOnlyWithLogs(t *testing.T) {
	for _, withLogs := range []bool{true, false} {
		h := newHarness(t, 2, func(cfg *Config) {
			cfg.RequestIDs = testRequestIDs{}
			if !withLogs {
				cfg.Sources = []Source{{Topic: "otlp_spans", Signal: otlp.SignalSpans, Encoding: otlp.EncodingProto}}
			}
		})
		for i := range 8 {
			id := [16]byte{byte(i + 1)}
			h.feed(inSpans, nil, spansMsg(requestSpan(id, "cmpl-"+strings.Repeat(string(rune('a'+i)), 6), base, base.Add(time.Millisecond))))
		}
		// A declaration is handled in place (its request id's task is
		// this one) or sent to the other task.
		declared := h.stage.Counters().Declared.Load() + int64(len(h.out("braid.resolve-repartition")))
		if withLogs && declared == 0 {
			t.Error("with a logs source: no request id declared")
		}
		if !withLogs && declared != 0 {
			t.Errorf("without a logs source: %d declarations", declared)
		}
	}
}
