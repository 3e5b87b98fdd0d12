package fuse

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/braidpb"
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
