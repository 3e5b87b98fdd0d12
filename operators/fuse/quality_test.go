package fuse

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/llmmetrics"
)

func TestQualityFigures(t *testing.T) {
	d := &braidpb.Derived{
		Verdicts: []*braidpb.Verdict{
			{Kind: "jailbreak", Decision: "pass", Stage: "input", Score: proto.Float64(0.2)},
			{Kind: "jailbreak", Decision: "flag", Stage: "output", Score: proto.Float64(0.9)},
			{Kind: "hallucination", Decision: "pass", Stage: "output", Score: proto.Float64(0.1)},
			{Kind: "hallucination", Stage: "output", Score: proto.Float64(0.7)}, // no decision: score only
			{Kind: "pii", Decision: "pass", Stage: "output"},
			{Kind: "sensitivity", Stage: "output", Score: proto.Float64(0.35)},
		},
		Quality: &braidpb.Quality{GuardrailChecked: true, GuardrailBypass: true},
	}
	o := alerts.NewTraceObs()
	if quality(&o, d) {
		t.Fatal("reported blocked")
	}
	for fig, want := range map[int]float64{
		alerts.FigJailbreak: 1, alerts.FigJailbreakScore: 0.9,
		alerts.FigHallucination: 0, alerts.FigHallucinationScore: 0.7,
		alerts.FigPII: 0, alerts.FigPIILeak: 0, alerts.FigSensitivity: 0.35,
		alerts.FigToxicity: math.NaN(), alerts.FigToxicityScore: math.NaN(),
		alerts.FigBlocked: 0, alerts.FigGuardrailChecked: 1, alerts.FigGuardrailBypass: 1,
	} {
		if got := o.Values[fig]; got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Errorf("figure %d = %v, want %v", fig, got, want)
		}
	}
	// No verdicts: no quality figure at all.
	o = alerts.NewTraceObs()
	if quality(&o, &braidpb.Derived{}) {
		t.Fatal("blocked without verdicts")
	}
	for fig := alerts.FigGuardrailChecked; fig < alerts.NumTraceFigures; fig++ {
		if fig != alerts.FigSuccess && !math.IsNaN(o.Values[fig]) {
			t.Errorf("figure %d = %v without verdicts", fig, o.Values[fig])
		}
	}
	o = alerts.NewTraceObs()
	if !quality(&o, &braidpb.Derived{Verdicts: []*braidpb.Verdict{{Kind: "toxicity", Decision: "block", Stage: "input"}},
		Quality: &braidpb.Quality{Blocked: true, GuardrailChecked: true}}) || o.Values[alerts.FigToxicity] != 1 || o.Values[alerts.FigGuardrailBypass] != 0 {
		t.Errorf("blocked input: %v", o.Values)
	}
}

// TestTraceIdentityFollowsItsResource: traces of two hosts emitted one
// after the other by one task are each observed where they ran — the
// derived LLM metrics count each host's under its own instance.
func TestTraceIdentityFollowsItsResource(t *testing.T) {
	rec, err := llmmetrics.New(llmmetrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 1, func(c *Config) { c.LLM = rec })
	hostRes := func(host string) *resourcepb.Resource {
		return &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}},
			{Key: "host.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: host}}},
		}}
	}
	hosts := []string{"node-a", "node-b", "node-b", "node-a", "node-c", "node-a"}
	want := map[string]uint64{}
	for i, host := range hosts {
		at := base.Add(time.Duration(i) * 100 * time.Millisecond)
		id := [16]byte{byte(i + 1), 0x77}
		sp := &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "llm_request",
			StartTimeUnixNano: uint64(at.UnixNano()), EndTimeUnixNano: uint64(at.Add(50 * time.Millisecond).UnixNano()),
			Attributes: []*commonpb.KeyValue{{Key: "gen_ai.latency.e2e", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.05}}}}}
		v, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: hostRes(host), ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{sp}}}}}})
		h.feed(inSpans, otlp.AppendTraceIDHex(nil, id), v)
		want[host]++
	}
	// Event time moves past them all.
	later := genTraces(rand.New(rand.NewPCG(3, 4)), 1, base.Add(20*time.Second))[0]
	h.now = h.now.Add(1500 * time.Millisecond)
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, later.id), spansMsg(later.spans...))
	got := map[string]uint64{}
	for _, s := range rec.Snapshot().Series {
		got[s.Instance] += s.Latency[llmmetrics.E2E].Count
	}
	for host, n := range want {
		if got[host] != n {
			t.Errorf("instance %s: %d traces observed, want %d (all: %v)", host, got[host], n, got)
		}
	}
}

// TestAppendMessage: a message appended in place reads back as the
// message, as marshalRepaired writes it; one with invalid UTF-8 reads back
// repaired; an empty one appends nothing.
func TestAppendMessage(t *testing.T) {
	prefix := []byte{0x0a, 0x01, 'x'}
	for _, d := range []*braidpb.Derived{
		{Model: "llama-8b", TtftNanos: 5, RequestIds: []string{"a", "b"}, Layers: []*braidpb.LayerStats{{Key: 3, Count: 2}}},
		{Model: "bad\xffmodel", Operation: "chat"},
	} {
		want, err := marshalRepaired(proto.Clone(d))
		if err != nil {
			t.Fatal(err)
		}
		b, err := appendMessage(slices.Clone(prefix), fDerived, d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, prefix) {
			t.Fatalf("prefix overwritten: %x", b)
		}
		num, typ, n := protowire.ConsumeTag(b[len(prefix):])
		v, m := protowire.ConsumeBytes(b[len(prefix)+n:])
		if num != fDerived || typ != protowire.BytesType || m < 0 || len(prefix)+n+m != len(b) || !bytes.Equal(v, want) {
			t.Fatalf("appended %x, want field %d holding %x", b[len(prefix):], fDerived, want)
		}
	}
	if b, err := appendMessage(slices.Clone(prefix), fDerived, &braidpb.Derived{}); err != nil || !bytes.Equal(b, prefix) {
		t.Fatalf("empty message: %x, %v", b, err)
	}
}
