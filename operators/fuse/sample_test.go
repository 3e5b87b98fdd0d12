package fuse

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/sampling"
)

// sampledOut decodes the sampled topics: per trace key, the span names and
// log bodies written, in order, and each span's tracestate and reason.
func (h *harness) sampledOut() (spans, logs map[string][]string, state map[string]string) {
	h.t.Helper()
	spans, logs, state = map[string][]string{}, map[string][]string{}, map[string]string{}
	for _, r := range h.out("braid.sampled.spans") {
		var td tracepb.TracesData
		if err := proto.Unmarshal(r.Value, &td); err != nil {
			h.t.Fatalf("sampled spans record does not decode: %v", err)
		}
		for _, rs := range td.ResourceSpans {
			if rs.Resource == nil || len(rs.Resource.Attributes) == 0 {
				h.t.Fatalf("sampled spans without their resource")
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if id := [16]byte(s.TraceId); string(otlp.AppendTraceIDHex(nil, id)) != string(r.Key) {
						h.t.Fatalf("span of trace %x under key %s", s.TraceId, r.Key)
					}
					reason := ""
					for _, a := range s.Attributes {
						if a.Key == sampling.AttrReason {
							reason = a.Value.GetStringValue()
						}
					}
					spans[string(r.Key)] = append(spans[string(r.Key)], s.Name)
					state[string(r.Key)+"/"+s.Name] = s.TraceState + " " + reason
				}
			}
		}
	}
	for _, r := range h.out("braid.sampled.logs") {
		var ld logspb.LogsData
		if err := proto.Unmarshal(r.Value, &ld); err != nil {
			h.t.Fatalf("sampled logs record does not decode: %v", err)
		}
		for _, rl := range ld.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					logs[string(r.Key)] = append(logs[string(r.Key)], l.Body.GetStringValue())
				}
			}
		}
	}
	return spans, logs, state
}

// TestSampling: rules keep error traces whatever the rate, a tenant's rate
// keeps its traces, a trace dropped at first is kept whole when a late
// member brings it under a rule, and a kept trace's later members are
// written once — also across a restart.
func TestSampling(t *testing.T) {
	zero, one := 0.0, 1.0
	st, err := sampling.New(sampling.Config{Enabled: true, Policy: sampling.Policy{Rate: &zero},
		Tenants: map[string]sampling.Policy{"gold": {Rate: &one}}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 1, func(c *Config) { c.Sampling = st })
	ts := genTraces(rand.New(rand.NewPCG(5, 6)), 20, base)
	ts[0].spans[1].Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
	ts[1].spans[0].Attributes = append(ts[1].spans[0].Attributes, strAttr("tenant.id", "gold"))
	ts[1].spans[0].TraceState = "congo=t61rcWkgMzE,ot=p:8;th:c"
	for _, m := range messages(ts) {
		h.feed(m.input, m.key, m.value)
	}
	later := genTraces(rand.New(rand.NewPCG(7, 8)), 1, base.Add(5*time.Second))[0]
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, later.id), spansMsg(later.spans...))
	h.now = h.now.Add(1500 * time.Millisecond) // logs and metrics turn idle
	h.SetNow(h.now)
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.fused()); n != len(ts) {
		t.Fatalf("%d traces emitted, want %d", n, len(ts))
	}
	key := func(i int) string { return string(otlp.AppendTraceIDHex(nil, ts[i].id)) }
	spans, logs, state := h.sampledOut()
	if len(spans) != 2 || len(spans[key(0)]) != 3 || len(spans[key(1)]) != 3 || len(logs[key(0)]) != 2 || len(logs[key(1)]) != 2 {
		t.Fatalf("sampled spans %v, logs %v; want traces 0 (error) and 1 (tenant gold) whole", spans, logs)
	}
	if s := state[key(0)+"/llm_request"]; !strings.HasPrefix(s, "ot=th:0;rv:") || !strings.HasSuffix(s, " error") {
		t.Errorf("error trace's root span: tracestate and reason %q", s)
	}
	// Rate 1: threshold 0; the ot member is braid's, first, with the other
	// vendor's member kept and the upstream p kept, th replaced.
	if s := state[key(1)+"/llm_request"]; !strings.HasPrefix(s, "ot=th:0;rv:") || !strings.Contains(s, ";p:8,congo=t61rcWkgMzE ") || !strings.HasSuffix(s, " rate") {
		t.Errorf("gold trace's root span: tracestate and reason %q", s)
	}
	fused := h.fused()
	if d := fused[key(0)].Sampling; !d.GetKept() || d.Reason != "error" || d.Rate != 0 || d.Threshold != "0" {
		t.Errorf("error trace's fused sampling = %v", d)
	}
	if d := fused[key(2)].Sampling; d == nil || d.Kept || d.Reason != "" {
		t.Errorf("dropped trace's fused sampling = %v", d)
	}

	// A late error span brings trace 2 under the error rule: all of it is
	// written. A late log of trace 1 is written alone.
	errSpan := &tracepb.Span{TraceId: ts[2].id[:], SpanId: sid(rand.New(rand.NewPCG(9, 9))), ParentSpanId: ts[2].spans[0].SpanId,
		Name: "late.error", StartTimeUnixNano: ts[2].spans[0].StartTimeUnixNano, EndTimeUnixNano: ts[2].spans[0].EndTimeUnixNano + 1,
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}}
	h.feed(inSpans, []byte(key(2)), spansMsg(errSpan))
	lateLog := func(body string) []byte {
		return logsMsg(&logspb.LogRecord{TimeUnixNano: ts[1].spans[0].StartTimeUnixNano + 5, TraceId: ts[1].id[:],
			Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}}})
	}
	h.feed(inLogs, []byte(key(1)), lateLog("late 1"))
	h.now = h.now.Add(1500 * time.Millisecond)
	h.SetNow(h.now)
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	spans, logs, _ = h.sampledOut()
	if len(spans[key(2)]) != 4 || len(logs[key(2)]) != 2 {
		t.Errorf("trace 2 after its late error: %v spans, %v logs; want all 4 and 2", spans[key(2)], logs[key(2)])
	}
	if len(spans[key(1)]) != 3 || strings.Join(logs[key(1)], ",") != "log 0,log 1,late 1" {
		t.Errorf("trace 1 after a late log: spans %v, logs %v; want its 3 spans once and the late log once", spans[key(1)], logs[key(1)])
	}
	if c := st.Counts(); len(c.Tenants) != 2 {
		t.Errorf("counts %+v", c)
	} else if d := c.Tenants[0]; d.Tenant != "" || d.Seen != 19 || d.Dropped != 18 || d.Revised != 1 || d.Kept["error"] != 2 {
		t.Errorf("default tenant counts %+v", d)
	} else if g := c.Tenants[1]; g.Tenant != "gold" || g.Seen != 1 || g.Kept["rate"] != 1 {
		t.Errorf("gold counts %+v", g)
	}

	// After a restart from a checkpoint, what was written stays written.
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	h.feed(inLogs, []byte(key(1)), lateLog("late 2"))
	h.now = h.now.Add(1500 * time.Millisecond)
	h.SetNow(h.now)
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if _, logs, _ = h.sampledOut(); strings.Join(logs[key(1)], ",") != "log 0,log 1,late 1,late 2" {
		t.Errorf("trace 1 after a restart and a late log: logs %v", logs[key(1)])
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	spans, _, _ = h.sampledOut()
	if len(spans) != 3 {
		t.Errorf("sampled traces at the end: %d, want 3", len(spans))
	}
}
