package semconv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/operators/braidpb"
)

func strArray(k string, vs ...string) *commonpb.KeyValue {
	arr := &commonpb.ArrayValue{}
	for _, v := range vs {
		arr.Values = append(arr.Values, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}})
	}
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}}
}

func evalEvent(name string, score float64, label string) *tracepb.Span_Event {
	return &tracepb.Span_Event{TimeUnixNano: 5, Name: EventEvaluationResult, Attributes: []*commonpb.KeyValue{
		str("gen_ai.evaluation.name", name), f64("gen_ai.evaluation.score.value", score),
		str("gen_ai.evaluation.score.label", label),
	}}
}

// verdictString renders verdicts as "stage/kind/checker/decision/score/source".
func verdictString(vs []*braidpb.Verdict) string {
	var out []string
	for _, v := range vs {
		score := "-"
		if v.Score != nil {
			score = fmt.Sprint(*v.Score)
		}
		out = append(out, strings.Join([]string{v.Stage, v.Kind, v.Checker, v.Decision, score, v.Source}, "/"))
	}
	return strings.Join(out, " ")
}

// verdictMembers are spans and logs with verdicts of every source (seeds
// of the fuzz test).
func verdictMembers(t testing.TB) [][]byte {
	return [][]byte{
		span(t, "openlit.guard", 1, 2, []*commonpb.KeyValue{str("guard.validator", "prompt_injection"),
			str("guard.verdict", "yes"), f64("guard.score", 0.9), str("tenant.id", "acme")}, child),
		span(t, "evaluate", 8, 9, nil, child, events(evalEvent("jailbreak", 0.91, "fail"), evalEvent("pii", 0.3, "pass"))),
		span(t, "rail", 9, 10, []*commonpb.KeyValue{str("rail.type", "input"), str("rail.name", "check_jailbreak"),
			strArray("rail.decisions", "stop")}, child),
		logRecord(t, 9, "", str("gen_ai.evaluation.name", "toxicity"), str("gen_ai.evaluation.score.label", "fail"),
			str("braid.verdict.kind", "pii"), str("braid.verdict.decision", "bypass"), str("evals.verdict", "yes")),
	}
}

// The real tools' names: an OpenLIT prompt-injection guard that let the
// prompt through, OpenTelemetry evaluation events on the response (one
// failing jailbreak check: a bypass), a NeMo output rail that blocked, a
// Presidio result in a log record, braid's own attributes.
func TestVerdictsFromRealToolNames(t *testing.T) {
	root := span(t, "llm_request", 1, 10, []*commonpb.KeyValue{str("gen_ai.request.model", "m")})
	guard := span(t, "openlit.guard", 1, 2, []*commonpb.KeyValue{
		str("guard.validator", "prompt_injection"), str("guard.classification", "none"),
		str("guard.verdict", "no"), f64("guard.score", 0.12), str("tenant.id", "acme"),
	}, child)
	eval := span(t, "evaluate", 8, 9, nil, child, events(
		evalEvent("hallucination", 0.2, "pass"),
		evalEvent("jailbreak", 0.91, "fail"),
		evalEvent("response_sensitivity", 1.7, ""), // score out of [0,1]: dropped
	))
	rail := span(t, "output rail", 9, 10, []*commonpb.KeyValue{
		str("rail.type", "output"), str("rail.name", "content safety check output"),
		boolean("rail.stop", false), strArray("rail.decisions", "execute content_safety_check", "stop"),
	}, child)
	presidio := logRecord(t, 9, "", str("event.name", EventEvaluationResult),
		str("gen_ai.evaluation.name", "presidio_pii"), str("gen_ai.evaluation.score.label", "FAIL"))
	own := logRecord(t, 9, "", str("braid.verdict.kind", "sensitivity"), str("braid.verdict.score", "0.4"),
		str("braid.verdict.stage", "output"), str("braid.verdict.checker", "sens-v2"))

	var d Deriver
	d.AddSpan(root, nil)
	d.AddSpan(guard, nil)
	d.AddSpan(eval, nil)
	d.AddSpan(rail, nil)
	d.AddLog(presidio, nil)
	d.AddLog(own, nil)
	got := d.Derived()
	want := "input/jailbreak/prompt_injection/pass/0.12/openlit " +
		"output/hallucination/hallucination/pass/0.2/otel " +
		"output/pii/presidio_pii/flag/-/otel " +
		"output/jailbreak/jailbreak/flag/0.91/otel " +
		"output/toxicity/content safety check output/block/-/nemo " +
		"output/sensitivity/response_sensitivity//-/otel " +
		"output/sensitivity/sens-v2//0.4/braid"
	if s := verdictString(got.Verdicts); s != want {
		t.Errorf("verdicts\n got %s\nwant %s", s, want)
	}
	q := got.GetQuality()
	if !q.GetBlocked() || !q.GetGuardrailChecked() || !q.GetGuardrailBypass() || !q.GetPiiLeak() {
		t.Errorf("quality %v: want blocked, checked, bypass, pii leak", q)
	}
	if got.Tenant != "acme" {
		t.Errorf("tenant %q, want acme", got.Tenant)
	}
}

func TestVerdictQualityCases(t *testing.T) {
	guardSpan := func(verdict string) []byte {
		return span(t, "guard", 1, 2, []*commonpb.KeyValue{str("guard.validator", "prompt_injection"), str("guard.verdict", verdict)}, child)
	}
	outSpan := func(name, label string) []byte {
		return span(t, "evaluate", 3, 4, nil, child, events(evalEvent(name, 0.5, label)))
	}
	for _, c := range []struct {
		name                           string
		spans                          [][]byte
		checked, bypass, blocked, leak bool
		none                           bool
	}{
		{name: "no verdicts", spans: nil, none: true},
		{name: "guard passed, output clean", spans: [][]byte{guardSpan("no"), outSpan("jailbreak", "pass")}, checked: true},
		{name: "guard flagged, output caught", spans: [][]byte{guardSpan("yes"), outSpan("jailbreak", "fail")}, checked: true},
		{name: "guard passed, output caught", spans: [][]byte{guardSpan("no"), outSpan("jailbreak", "unsafe")}, checked: true, bypass: true},
		{name: "jailbreak guard passed, toxicity is another risk", spans: [][]byte{guardSpan("no"), outSpan("toxicity", "unsafe")}, checked: true},
		{name: "guard passed, hallucination is no bypass", spans: [][]byte{guardSpan("no"), outSpan("hallucination", "fail")}, checked: true},
		{name: "no guard, output caught", spans: [][]byte{outSpan("jailbreak", "fail")}},
		{name: "pii in the output", spans: [][]byte{outSpan("pii", "detected")}, leak: true},
		{name: "explicit bypass", spans: [][]byte{span(t, "g", 1, 2, []*commonpb.KeyValue{str("braid.verdict.kind", "jailbreak"), str("braid.verdict.decision", "bypass")}, child)}, bypass: true},
		{name: "NeMo input rail stop", spans: [][]byte{span(t, "rail", 1, 2, []*commonpb.KeyValue{str("rail.type", "input"), str("rail.name", "self check input"), boolean("rail.stop", true)}, child)}, checked: true, blocked: true},
	} {
		var d Deriver
		d.AddSpan(span(t, "root", 1, 5, nil), nil)
		for _, s := range c.spans {
			d.AddSpan(s, nil)
		}
		got := d.Derived()
		q := got.Quality
		if c.none {
			if q != nil || len(got.Verdicts) != 0 {
				t.Errorf("%s: verdicts %s, quality %v", c.name, verdictString(got.Verdicts), q)
			}
			continue
		}
		if q.GetGuardrailChecked() != c.checked || q.GetGuardrailBypass() != c.bypass || q.GetBlocked() != c.blocked || q.GetPiiLeak() != c.leak {
			t.Errorf("%s: quality %v (verdicts %s); want checked %v bypass %v blocked %v leak %v",
				c.name, q, verdictString(got.Verdicts), c.checked, c.bypass, c.blocked, c.leak)
		}
	}
}

func TestTenantSources(t *testing.T) {
	hint := logRecord(t, 1, "", str(AttrContextHint, "model=m;tenant=fromhint"))
	for _, c := range []struct {
		name string
		add  func(d *Deriver)
		want string
	}{
		{"hint only", func(d *Deriver) { d.AddLog(hint, nil) }, "fromhint"},
		{"resource over hint", func(d *Deriver) {
			d.AddLog(hint, nil)
			d.AddSpan(span(t, "root", 1, 2, nil), resource(t, str("tenant.id", "res")))
		}, "res"},
		{"root span over child span and resource", func(d *Deriver) {
			d.AddSpan(span(t, "c", 1, 2, []*commonpb.KeyValue{str("tenant", "kid")}, child), resource(t, str("tenant_id", "res")))
			d.AddSpan(span(t, "root", 1, 2, []*commonpb.KeyValue{str("tenant.id", "rootten")}), nil)
		}, "rootten"},
		{"log attribute", func(d *Deriver) { d.AddLog(logRecord(t, 1, "", str("tenant_id", "logten")), nil) }, "logten"},
		{"none", func(d *Deriver) { d.AddSpan(span(t, "root", 1, 2, nil), nil) }, ""},
	} {
		var d Deriver
		c.add(&d)
		if got := d.Derived().Tenant; got != c.want {
			t.Errorf("%s: tenant %q, want %q", c.name, got, c.want)
		}
	}
}

// The verdicts and the tenant do not depend on the order of the members.
func TestVerdictsOrderIndependent(t *testing.T) {
	var ms []member
	for i, k := range []string{"hallucination", "pii", "jailbreak", "toxicity", "sensitivity"} {
		ms = append(ms, member{span: span(t, fmt.Sprintf("e%d", i), 1, 2, []*commonpb.KeyValue{str("tenant", fmt.Sprint("t", i%2))}, child,
			events(evalEvent(k, float64(i)/10, []string{"pass", "fail"}[i%2])))})
	}
	ms = append(ms, member{log: logRecord(t, 1, "", str("guard.validator", "prompt_injection"), str("guard.verdict", "no"))})
	var d Deriver
	add(&d, ms)
	want := protoText(d.Derived())
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		d.Reset()
		add(&d, ms)
		if got := protoText(d.Derived()); got != want {
			t.Fatalf("order changed the derived figures:\n%s\nwant\n%s", got, want)
		}
	}
}

func TestVerdictKindAndDecision(t *testing.T) {
	for name, want := range map[string]string{
		"check_jailbreak": KindJailbreak, "prompt_injection": KindJailbreak, "Presidio PII": KindPII,
		"detect sensitive data on output": KindPII, "self check facts": KindHallucination,
		"Groundedness": KindHallucination, "llama guard check input": KindToxicity, "ToxicityDetector": KindToxicity,
		"response_sensitivity": KindSensitivity, "Relevance": KindOther, "": "",
	} {
		if got := VerdictKind(name); got != want {
			t.Errorf("VerdictKind(%q) = %q, want %q", name, got, want)
		}
	}
	for label, want := range map[string]string{
		"PASS": DecisionPass, "no": DecisionPass, "yes": DecisionFlag, "unsafe": DecisionFlag,
		"Blocked": DecisionBlock, "bypassed": DecisionBypass, "4": "", "": "", strings.Repeat("x", 40): "",
	} {
		if got := VerdictDecision(label); got != want {
			t.Errorf("VerdictDecision(%q) = %q, want %q", label, got, want)
		}
	}
}

// A trace cannot make the verdicts grow without bound.
func TestVerdictsBounded(t *testing.T) {
	var d Deriver
	for i := range 3 * MaxVerdicts {
		d.AddSpan(span(t, "e", 1, 2, nil, child, events(evalEvent(fmt.Sprint("check", i), 0.5, "pass"))), nil)
	}
	if n := len(d.Derived().Verdicts); n != MaxVerdicts {
		t.Fatalf("%d verdicts, want %d", n, MaxVerdicts)
	}
	if !slices.ContainsFunc(d.Derived().Verdicts, func(v *braidpb.Verdict) bool { return v.Checker == "check0" }) {
		t.Fatal("the first verdicts were not kept")
	}
}

// A long name is cut at a rune boundary: the fused record stays valid
// UTF-8.
func TestVerdictNamesCutAtRunes(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	var d Deriver
	d.AddSpan(span(t, "e", 1, 2, []*commonpb.KeyValue{str("tenant.id", long)}, child, events(evalEvent(long, 0.5, "pass"))), nil)
	got := d.Derived()
	if !utf8.ValidString(got.Tenant) || len(got.Tenant) != 128 || !strings.HasPrefix(long, got.Tenant) {
		t.Errorf("tenant %q", got.Tenant)
	}
	if c := got.Verdicts[0].Checker; !utf8.ValidString(c) || len(c) != 128 {
		t.Errorf("checker %q (%d bytes)", c, len(c))
	}
}
