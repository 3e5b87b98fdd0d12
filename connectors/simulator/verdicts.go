package simulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Quality and safety verdicts of the realistic fleet (FORMAT.md,
// "Verdicts"): an input guard on every served request, output evaluations
// on those it let through, written as the tools write them (OpenLIT guard
// and evals attributes, NeMo Guardrails rail spans, GenAI evaluation span
// events and log records).

// Defaults of VerdictConfig.
const (
	DefaultHallucinationChecked = 0.5
	DefaultHallucinationFlagged = 0.04
	DefaultPIIChecked           = 0.4
	DefaultPIIFlagged           = 0.02
	DefaultToxicityChecked      = 0.3
	DefaultToxicityFlagged      = 0.03
	DefaultJailbreakRate        = 0.005
	DefaultGuardMissRate        = 0.1
)

// VerdictConfig configures the verdicts (Config.Verdicts). Every field is a
// share in [0, 1]; a zero field takes its default, a negative one means
// none (0).
//
// Every served request (one that is not aborted) is a jailbreak attempt
// with probability JailbreakRate (or its tenant's jump's) and gets an input
// guard verdict; the guard detects an attempt unless it misses it
// (GuardMissRate), and a detected attempt is refused: it gets no output
// evaluation. Every other served request (the output-checked ones) gets an
// output jailbreak evaluation (failed exactly for the attempts the guard
// missed) and a response sensitivity score, and each of the hallucination,
// PII and toxicity checks with its Checked share, flagged with its Flagged
// share of the checked.
type VerdictConfig struct {
	// HallucinationChecked is the share of the output-checked requests
	// checked for hallucination (default 0.5); HallucinationFlagged the
	// share of those checked that fail (default 0.04).
	HallucinationChecked, HallucinationFlagged float64
	// PIIChecked is the share of the output-checked requests checked for
	// PII in the response (default 0.4); PIIFlagged the share of those
	// checked that fail, a PII leak (default 0.02).
	PIIChecked, PIIFlagged float64
	// ToxicityChecked is the share of the output-checked requests checked
	// for toxicity (default 0.3); ToxicityFlagged the share of those
	// checked that fail (default 0.03).
	ToxicityChecked, ToxicityFlagged float64
	// JailbreakRate is the share of served requests that are jailbreak
	// attempts (default 0.005), outside Jumps.
	JailbreakRate float64
	// GuardMissRate is the share of attempts the input guard lets through
	// (default 0.1); the output jailbreak evaluation catches them.
	GuardMissRate float64
	// Jumps change one tenant's attempt rate for a window of event time.
	// Default none.
	Jumps []VerdictJump
}

// VerdictJump sets the jailbreak attempt rate of one tenant's requests
// arriving in a window of event time.
type VerdictJump struct {
	// Tenant is one of the fleet's tenants (the tenant of llm_context_hint
	// and tenant.id): acme, globex, initech, umbrella or hooli.
	Tenant string
	// From and To bound the window [Start+From, Start+To) of arrivals.
	// From ≥ 0, To > From.
	From, To time.Duration
	// JailbreakRate is the share of the tenant's served requests arriving
	// in the window that are attempts, in [0, 1]; where jumps of one
	// tenant overlap, the last one listed holds.
	JailbreakRate float64
}

// Verdict kinds, decisions and stages of VerdictTruth (the convention braid
// reads).
const (
	VerdictHallucination = "hallucination"
	VerdictPII           = "pii"
	VerdictJailbreak     = "jailbreak"
	VerdictToxicity      = "toxicity"
	VerdictSensitivity   = "sensitivity"

	DecisionPass  = "pass"
	DecisionFlag  = "flag"
	DecisionBlock = "block"

	StageInput  = "input"
	StageOutput = "output"
)

// VerdictTruth is one verdict written for a request, as the verdict
// convention reads it from what was written.
type VerdictTruth struct {
	// Kind is hallucination, pii, jailbreak, toxicity or sensitivity.
	Kind string `json:"kind"`
	// Score is the verdict's score in [0, 1], nil when none was written
	// (NeMo rails, a PII check that found nothing).
	Score *float64 `json:"score,omitempty"`
	// Decision is pass, flag or block; empty (unknown) for the sensitivity
	// score, written without a label.
	Decision string `json:"decision,omitempty"`
	// Checker is the checker's name as written: guard.validator,
	// evals.validator, rail.name or gen_ai.evaluation.name.
	Checker string `json:"checker"`
	// Stage is input (the guard) or output (the evaluations).
	Stage string `json:"stage"`
}

// Scopes of the checkers' spans and logs.
var (
	openlitScope   = &commonpb.InstrumentationScope{Name: "openlit.otel.tracing", Version: "1.35.0"}
	nemoScope      = &commonpb.InstrumentationScope{Name: "nemoguardrails", Version: "0.17.0"}
	evaluatorScope = &commonpb.InstrumentationScope{Name: "gen_ai.evaluation", Version: "0.1.0"}
)

const evaluationEvent = "gen_ai.evaluation.result"

func (v *VerdictConfig) ensureDefaults() {
	for _, f := range []struct {
		p   *float64
		def float64
	}{
		{&v.HallucinationChecked, DefaultHallucinationChecked}, {&v.HallucinationFlagged, DefaultHallucinationFlagged},
		{&v.PIIChecked, DefaultPIIChecked}, {&v.PIIFlagged, DefaultPIIFlagged},
		{&v.ToxicityChecked, DefaultToxicityChecked}, {&v.ToxicityFlagged, DefaultToxicityFlagged},
		{&v.JailbreakRate, DefaultJailbreakRate}, {&v.GuardMissRate, DefaultGuardMissRate},
	} {
		switch {
		case *f.p == 0:
			*f.p = f.def
		case *f.p < 0:
			*f.p = 0
		}
	}
}

func (v *VerdictConfig) validate(realistic bool) []error {
	var errs []error
	if !realistic {
		errs = append(errs, errors.New("verdicts need realistic mode"))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"hallucination checked", v.HallucinationChecked}, {"hallucination flagged", v.HallucinationFlagged},
		{"pii checked", v.PIIChecked}, {"pii flagged", v.PIIFlagged},
		{"toxicity checked", v.ToxicityChecked}, {"toxicity flagged", v.ToxicityFlagged},
		{"jailbreak rate", v.JailbreakRate}, {"guard miss rate", v.GuardMissRate},
	} {
		if !(f.v <= 1) { // NaN too
			errs = append(errs, fmt.Errorf("verdicts: %s %v: want at most 1", f.name, f.v))
		}
	}
	for i, j := range v.Jumps {
		if j.From < 0 || j.To <= j.From {
			errs = append(errs, fmt.Errorf("verdict jump %d: window [%v, %v): want 0 ≤ from < to", i, j.From, j.To))
		}
		if !slices.Contains(tenants, j.Tenant) {
			errs = append(errs, fmt.Errorf("verdict jump %d: tenant %q: want one of %v", i, j.Tenant, tenants))
		}
		if !(j.JailbreakRate >= 0 && j.JailbreakRate <= 1) {
			errs = append(errs, fmt.Errorf("verdict jump %d: jailbreak rate %v: want 0..1", i, j.JailbreakRate))
		}
	}
	return errs
}

// startVerdicts seeds the verdicts' own random source: the rest of the
// output draws from s.rng alone, so it is the same with or without
// verdicts.
func (s *Simulator) startVerdicts() {
	s.vrng = rand.New(rand.NewPCG(uint64(s.cfg.Seed), 0x7665726469637473)) // "verdicts"
}

// attemptRate is the jailbreak attempt rate of tenant's requests arriving
// at a.
func (s *Simulator) attemptRate(tenant string, a uint64) float64 {
	v := s.cfg.Verdicts
	rate := v.JailbreakRate
	for _, j := range v.Jumps {
		if j.Tenant == tenant && s.inWindow(a, j.From, j.To) {
			rate = j.JailbreakRate
		}
	}
	return rate
}

func (s *Simulator) vSpanID() []byte {
	b := make([]byte, 8)
	for {
		binary.LittleEndian.PutUint64(b, s.vrng.Uint64())
		if binary.LittleEndian.Uint64(b) != 0 {
			return b
		}
	}
}

// vBetween is a random time in [lo, hi].
func (s *Simulator) vBetween(lo, hi uint64) uint64 {
	if hi <= lo {
		return lo
	}
	return lo + s.vrng.Uint64N(hi-lo+1)
}

// vScore is a random score in [lo, hi), rounded to 4 decimals.
func (s *Simulator) vScore(lo, hi float64) float64 {
	return round4(lo + (hi-lo)*s.vrng.Float64())
}

func round4(f float64) float64 { return math.Round(f*1e4) / 1e4 }

func ptr(f float64) *float64 { return &f }

// addVerdicts draws r's verdicts from the verdicts' random source, writes
// the checkers' spans (after the root in r.spans: a split trace's first
// part is unchanged, and they are written after the server's spans, in a
// scope block of their own) and log records (r.verdictLogs), and sets the
// verdict truth.
func (s *Simulator) addVerdicts(r *request) {
	v, in, tt := s.cfg.Verdicts, r.inst, r.truth
	attempt := s.vrng.Float64() < s.attemptRate(r.tenant, r.arrival)
	missed := attempt && s.vrng.Float64() < v.GuardMissRate
	detected := attempt && !missed
	tt.JailbreakAttempt = attempt
	r.checkers = map[*tracepb.Span]*commonpb.InstrumentationScope{}
	child := func(name string, start, end uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
		return &tracepb.Span{
			TraceId: r.traceID, SpanId: s.vSpanID(), ParentSpanId: r.rootSpan,
			Flags: 0x101, Name: name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: start, EndTimeUnixNano: end,
			Attributes: attrs, Status: &tracepb.Status{},
		}
	}

	// The input guard: a few milliseconds from the arrival.
	guardEnd := min(r.end, r.arrival+1_000_000+s.vrng.Uint64N(14_000_000))
	var guard *tracepb.Span
	if in.sglang {
		decision := "allow"
		if detected {
			decision = "stop"
		}
		guard = child("input rail jailbreak detection heuristics", r.arrival, guardEnd,
			kvStr("rail.type", "input"), kvStr("rail.name", "jailbreak detection heuristics"),
			kvBool("rail.stop", detected), kvStrs("rail.decisions", decision), kvStr("tenant.id", r.tenant))
		r.checkers[guard] = nemoScope
		tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictJailbreak, Checker: "jailbreak detection heuristics",
			Stage: StageInput, Decision: map[bool]string{true: DecisionBlock, false: DecisionPass}[detected]})
	} else {
		score := s.vScore(0, 0.3)
		switch {
		case detected:
			score = s.vScore(0.7, 1)
		case missed:
			score = s.vScore(0.3, 0.5)
		}
		class, verdict := "none", "no"
		if detected {
			class, verdict = "jailbreak", "yes"
		}
		guard = child("guard prompt_injection", r.arrival, guardEnd,
			kvStr("guard.validator", "prompt_injection"), kvStr("guard.classification", class),
			kvStr("guard.verdict", verdict), kvDouble("guard.score", score), kvStr("tenant.id", r.tenant))
		r.checkers[guard] = openlitScope
		tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictJailbreak, Score: ptr(score), Checker: "prompt_injection",
			Stage: StageInput, Decision: map[bool]string{true: DecisionFlag, false: DecisionPass}[detected]})
	}
	spans := []*tracepb.Span{guard}
	var eval *tracepb.Span

	if !detected {
		// The output evaluations: in the last few milliseconds of the
		// request, after the guard.
		evStart := max(guardEnd, r.end-min(r.end-r.arrival, 2_000_000+s.vrng.Uint64N(38_000_000)))
		eval = child("evaluate", evStart, r.end)
		r.checkers[eval] = evaluatorScope
		draw := func(checked, flagged float64) (bool, bool) {
			c := s.vrng.Float64() < checked
			f := s.vrng.Float64() < flagged
			return c, c && f
		}
		hChecked, hFlagged := draw(v.HallucinationChecked, v.HallucinationFlagged)
		pChecked, pFlagged := draw(v.PIIChecked, v.PIIFlagged)
		tChecked, tFlagged := draw(v.ToxicityChecked, v.ToxicityFlagged)
		result := func(name string, score *float64, label string) {
			attrs := []*commonpb.KeyValue{kvStr("gen_ai.evaluation.name", name)}
			if score != nil {
				attrs = append(attrs, kvDouble("gen_ai.evaluation.score.value", *score))
			}
			if label != "" {
				attrs = append(attrs, kvStr("gen_ai.evaluation.score.label", label))
			}
			eval.Events = append(eval.Events, &tracepb.Span_Event{
				TimeUnixNano: s.vBetween(evStart, r.end), Name: evaluationEvent, Attributes: attrs,
			})
		}
		pf := func(flag bool) (string, string) {
			if flag {
				return "fail", DecisionFlag
			}
			return "pass", DecisionPass
		}
		if hChecked {
			score := s.vScore(0, 0.5)
			if hFlagged {
				score = s.vScore(0.5, 1)
			}
			label, decision := pf(hFlagged)
			if in.flavour == flavourVLLMLegacy {
				// OpenLIT's hallucination detector, as attributes of a
				// span of its own.
				class, verdict := "none", "no"
				if hFlagged {
					class, verdict = "factual_inaccuracy", "yes"
				}
				sp := child("evals hallucination", evStart, r.end,
					kvStr("evals.validator", "hallucination"), kvStr("evals.classification", class),
					kvStr("evals.verdict", verdict), kvDouble("evals.score", score))
				r.checkers[sp] = openlitScope
				spans = append(spans, sp)
			} else {
				result("hallucination", ptr(score), label)
			}
			tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictHallucination, Score: ptr(score), Decision: decision,
				Checker: "hallucination", Stage: StageOutput})
		}
		if pChecked {
			// Presidio: a confidence when it finds an entity, none when
			// the response is clean.
			var score *float64
			if pFlagged {
				score = ptr(s.vScore(0.6, 1))
			}
			label, decision := pf(pFlagged)
			result("presidio_pii", score, label)
			tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictPII, Score: score, Decision: decision,
				Checker: "presidio_pii", Stage: StageOutput})
		}
		jScore := s.vScore(0, 0.2)
		if missed {
			jScore = s.vScore(0.8, 1)
		}
		label, decision := pf(missed)
		result("jailbreak", ptr(jScore), label)
		tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictJailbreak, Score: ptr(jScore), Decision: decision,
			Checker: "jailbreak", Stage: StageOutput})
		sens := round4(math.Pow(s.vrng.Float64(), 3)) // skewed towards 0
		result("response_sensitivity", ptr(sens), "")
		tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictSensitivity, Score: ptr(sens),
			Checker: "response_sensitivity", Stage: StageOutput})
		if tChecked {
			score := s.vScore(0, 0.4)
			if tFlagged {
				score = s.vScore(0.6, 1)
			}
			label, decision := pf(tFlagged)
			at := s.vBetween(evStart, r.end)
			lr := &logspb.LogRecord{
				TimeUnixNano: at, ObservedTimeUnixNano: at,
				SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
				Attributes: []*commonpb.KeyValue{kvStr("gen_ai.evaluation.name", "toxicity"),
					kvDouble("gen_ai.evaluation.score.value", score), kvStr("gen_ai.evaluation.score.label", label)},
				Flags:   1,
				TraceId: r.traceID, SpanId: eval.SpanId,
			}
			if in.sglang {
				// An SDK before LogRecord.event_name: the attribute.
				lr.Attributes = append(lr.Attributes, kvStr("event.name", evaluationEvent))
			} else {
				lr.EventName = evaluationEvent
			}
			r.verdictLogs = append(r.verdictLogs, lr)
			tt.Verdicts = append(tt.Verdicts, VerdictTruth{Kind: VerdictToxicity, Score: ptr(score), Decision: decision,
				Checker: "toxicity", Stage: StageOutput})
		}
	}
	if eval != nil {
		// After the OpenLIT evals span, in the order of the scope blocks.
		spans = append(spans, eval)
	}
	r.spans = append(r.spans, spans...)
	readVerdicts(tt)
}

// readVerdicts sets the per-trace booleans of tt from its verdicts, as the
// verdict convention defines them: a bypass is an input verdict that
// passed the request and an output verdict of the same kind (jailbreak,
// pii or toxicity) that flagged or blocked it.
func readVerdicts(tt *TraceTruth) {
	inputPass := map[string]bool{}
	for _, v := range tt.Verdicts {
		if v.Stage == StageInput {
			tt.GuardrailChecked = true
			if v.Decision == DecisionPass {
				inputPass[v.Kind] = true
			}
		}
	}
	for _, v := range tt.Verdicts {
		bad := v.Decision == DecisionFlag || v.Decision == DecisionBlock
		if v.Decision == DecisionBlock {
			tt.Blocked = true
		}
		safety := v.Kind == VerdictJailbreak || v.Kind == VerdictPII || v.Kind == VerdictToxicity
		if bad && safety && v.Stage == StageOutput && inputPass[v.Kind] {
			tt.GuardrailBypass = true
		}
		if bad && v.Kind == VerdictPII && v.Stage != StageInput {
			tt.PIILeak = true
		}
	}
}

// addSpans appends spans of r to rs: its checkers' spans in a scope block
// of their scope, the others in the first (the server's).
func addSpans(rs *tracepb.ResourceSpans, r *request, spans []*tracepb.Span) {
	for _, sp := range spans {
		scope := r.checkers[sp]
		if scope == nil {
			rs.ScopeSpans[0].Spans = append(rs.ScopeSpans[0].Spans, sp)
			continue
		}
		var ss *tracepb.ScopeSpans
		for _, x := range rs.ScopeSpans[1:] {
			if x.Scope == scope {
				ss = x
			}
		}
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: scope, SchemaUrl: schemaURL}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, sp)
	}
}

func kvStrs(k string, vs ...string) *commonpb.KeyValue {
	arr := &commonpb.ArrayValue{}
	for _, v := range vs {
		arr.Values = append(arr.Values, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}})
	}
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}}
}
