package semconv

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp/wire"
	"github.com/braidlabs/braid/operators/braidpb"
)

// Verdicts: what quality and safety checkers (guardrails, evaluators) said
// of a request, read from the spans, span events and log records of its
// trace in the names the tools emit.
//
// A verdict is a kind (VerdictKinds), a score in [0, 1] (scores outside are
// dropped), a decision (pass, flag, block, bypass, or unknown), the
// checker's name and the stage it checked (input: the prompt, before the
// model; output: the response; or unknown). Sources:
//
//   - OpenTelemetry GenAI: the event gen_ai.evaluation.result (a span event,
//     or a log record whose event_name or event.name attribute is it; also
//     its attributes on a span): gen_ai.evaluation.name (checker, and the
//     kind from it), gen_ai.evaluation.score.value (score),
//     gen_ai.evaluation.score.label (decision, by VerdictDecision). Stage
//     output.
//   - OpenLIT guards (guard.validator, guard.classification, guard.verdict
//     "yes" = violation → flag, "no" → pass, guard.score), stage input; and
//     OpenLIT evaluations (evals.validator, evals.classification,
//     evals.verdict, evals.score), stage output.
//   - NeMo Guardrails rail spans: rail.name (checker and kind), rail.type
//     (input, output; dialog, retrieval and execution rails are stage
//     unknown), rail.stop true or rail.decisions holding "stop" or
//     "refuse" → block, else pass.
//   - braid's own, for any other tool: braid.verdict.kind,
//     braid.verdict.score, braid.verdict.decision, braid.verdict.checker,
//     braid.verdict.stage.
//
// The kind comes from a name by VerdictKind. Of a trace as a whole
// (braidpb.Quality): blocked when a verdict decided block; guardrail
// checked when a verdict has stage input; a guardrail bypass when a verdict
// decided bypass, or an input check of kind jailbreak, pii or toxicity
// passed the request and an output check of the same kind flagged or
// blocked it (the guardrail let through what a later check of the same
// risk caught); a PII leak when a pii check of
// the response (stage output or unknown) flagged or blocked it.
//
// The tenant of a request is the span attribute tenant.id, tenant_id or
// tenant (the root span's first), else a resource's, else a log record's,
// else the tenant key of a context hint.

// Verdict kinds, stages and decisions as written in braidpb.Verdict.
const (
	KindHallucination = "hallucination"
	KindPII           = "pii"
	KindJailbreak     = "jailbreak"
	KindToxicity      = "toxicity"
	KindSensitivity   = "sensitivity"
	KindOther         = "other"

	StageInput  = "input"
	StageOutput = "output"

	DecisionPass   = "pass"
	DecisionFlag   = "flag"
	DecisionBlock  = "block"
	DecisionBypass = "bypass"
)

// EventEvaluationResult is the OpenTelemetry GenAI evaluation event.
const EventEvaluationResult = "gen_ai.evaluation.result"

// MaxVerdicts bounds the verdicts kept per trace; more are dropped.
const MaxVerdicts = 64

// VerdictKinds are the kinds a verdict may have, in their code order.
var VerdictKinds = []string{"", KindHallucination, KindPII, KindJailbreak, KindToxicity, KindSensitivity, KindOther}

var (
	verdictStages    = []string{"", StageInput, StageOutput}
	verdictDecisions = []string{"", DecisionPass, DecisionFlag, DecisionBlock, DecisionBypass}
	verdictSources   = []string{"", "otel", "openlit", "nemo", "braid"}
)

const (
	vkNone uint8 = iota
	vkHallucination
	vkPII
	vkJailbreak
	vkToxicity
	vkSensitivity
	vkOther
)

const (
	vdUnknown uint8 = iota
	vdPass
	vdFlag
	vdBlock
	vdBypass
)

const (
	vsUnknown uint8 = iota
	vsInput
	vsOutput
)

const (
	srcOTel uint8 = iota + 1
	srcOpenLITGuard
	srcOpenLITEvals
	srcNeMo
	srcBraid
	numSources
)

// kindWords maps name fragments to kinds, first match wins.
var kindWords = []struct {
	word string
	kind uint8
}{
	{"jailbreak", vkJailbreak}, {"prompt_injection", vkJailbreak}, {"prompt injection", vkJailbreak},
	{"injection", vkJailbreak},
	{"pii", vkPII}, {"sensitive data", vkPII}, {"sensitive_data", vkPII}, {"presidio", vkPII}, {"privacy", vkPII},
	{"hallucinat", vkHallucination}, {"fact", vkHallucination}, {"grounded", vkHallucination},
	{"faithful", vkHallucination}, {"contradict", vkHallucination}, {"nonsens", vkHallucination},
	{"toxic", vkToxicity}, {"content safety", vkToxicity}, {"content_safety", vkToxicity},
	{"moderation", vkToxicity}, {"llama guard", vkToxicity}, {"llama_guard", vkToxicity}, {"harm", vkToxicity},
	{"hate", vkToxicity}, {"threat", vkToxicity}, {"insult", vkToxicity}, {"profan", vkToxicity},
	{"sensitiv", vkSensitivity},
}

// VerdictKind maps a checker's name (an evaluation name, validator,
// classification or rail name) to a kind: hallucination, pii, jailbreak,
// toxicity, sensitivity or other, from the first of these fragments it
// contains (case-insensitive): jailbreak, prompt_injection, prompt
// injection, injection → jailbreak; pii, sensitive data, sensitive_data,
// presidio, privacy → pii; hallucinat, fact, grounded, faithful,
// contradict, nonsens → hallucination; toxic, content safety,
// content_safety, moderation, llama guard, llama_guard, harm, hate, threat,
// insult, profan → toxicity; sensitiv → sensitivity.
func VerdictKind(name string) string { return VerdictKinds[kindOf([]byte(name))] }

func kindOf(name []byte) uint8 {
	if len(name) == 0 {
		return vkNone
	}
	var low [128]byte
	n := copy(low[:], name)
	for i := range n {
		if c := low[i]; c >= 'A' && c <= 'Z' {
			low[i] = c + 'a' - 'A'
		}
	}
	for _, w := range kindWords {
		if bytes.Contains(low[:n], []byte(w.word)) {
			return w.kind
		}
	}
	return vkOther
}

// VerdictDecision maps a label to a decision (case-insensitive): pass,
// passed, safe, no, false, allow, allowed, ok, clean, compliant → pass;
// fail, failed, flag, flagged, yes, true, unsafe, detected, violation →
// flag; block, blocked, stop, deny, denied, refuse, refused → block;
// bypass, bypassed → bypass; anything else is unknown ("").
func VerdictDecision(label string) string { return verdictDecisions[decisionOf([]byte(label))] }

func decisionOf(label []byte) uint8 {
	if len(label) > 16 {
		return vdUnknown
	}
	var low [16]byte
	n := copy(low[:], label)
	for i := range n {
		if c := low[i]; c >= 'A' && c <= 'Z' {
			low[i] = c + 'a' - 'A'
		}
	}
	switch string(low[:n]) {
	case "pass", "passed", "safe", "no", "false", "allow", "allowed", "ok", "clean", "compliant":
		return vdPass
	case "fail", "failed", "flag", "flagged", "yes", "true", "unsafe", "detected", "violation":
		return vdFlag
	case "block", "blocked", "stop", "deny", "denied", "refuse", "refused":
		return vdBlock
	case "bypass", "bypassed":
		return vdBypass
	}
	return vdUnknown
}

func stageOf(s []byte) uint8 {
	switch string(s) {
	case "input", "Input", "INPUT":
		return vsInput
	case "output", "Output", "OUTPUT":
		return vsOutput
	}
	return vsUnknown
}

// verdictRec is one verdict found in the members.
type verdictRec struct {
	kind, decision, stage, source uint8
	hasScore                      bool
	score                         float64
	checker                       bref
}

// verdictSource is what one source's attributes said on one member.
type verdictSource struct {
	seen                 bool
	name, label, class   []byte // checker name, decision label, classification
	kind, stage          []byte // braid's explicit kind and stage
	score                float64
	hasScore             bool
	stop, hasStop, block bool // NeMo
}

// verdictScan collects the verdict attributes of one span, span event or
// log record (they alias its bytes).
type verdictScan struct {
	src    [numSources]verdictSource
	tenant []byte
	any    bool // a verdict or tenant attribute was seen
}

// reset clears s; a scan that read nothing is left as it is (clearing it
// per member would cost more than reading most members).
func (s *verdictScan) reset() {
	if s.any {
		*s = verdictScan{}
	}
}

func (v *verdictSource) setScore(val Value) {
	if f, ok := val.Float(); ok && f >= 0 && f <= 1 {
		v.score, v.hasScore = f, true
	} else if val.Type == ValueString {
		if f, ok := parseFloat(val.Bytes); ok && f >= 0 && f <= 1 {
			v.score, v.hasScore = f, true
		}
	}
}

func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 32 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	return f, err == nil && !math.IsNaN(f)
}

// text is a string value's bytes, or the text of a scalar (bools read as
// true/false) in scratch.
func text(v Value) []byte {
	switch v.Type {
	case ValueString:
		return v.Bytes
	case ValueBool:
		if v.Num != 0 {
			return []byte("true")
		}
		return []byte("false")
	}
	return nil
}

// offerTenant keeps t as the tenant if its source ranks higher than the
// one kept, or the same and t is smaller (the result does not depend on
// the order members are added in).
func (d *Deriver) offerTenant(t []byte, rank uint8) {
	t = cut(t, maxCheckerBytes)
	if rank > d.tenantRank || rank == d.tenantRank && bytes.Compare(t, d.str(d.tenant)) < 0 {
		d.tenant, d.tenantRank = d.keep(t), rank
	}
}

func isTenantKey(k []byte) bool {
	switch string(k) {
	case "tenant.id", "tenant_id", "tenant":
		return true
	}
	return false
}

// isVerdictKey is a cheap first test of whether an attribute key may be
// read by verdictScan.attr.
func isVerdictKey(k []byte) bool {
	if len(k) < 6 {
		return false
	}
	switch k[0] {
	case 't':
		return k[1] == 'e' && k[2] == 'n'
	case 'g':
		return k[1] == 'u' || len(k) > 18 && string(k[:18]) == "gen_ai.evaluation."
	case 'e':
		return k[1] == 'v' && k[2] == 'a'
	case 'r':
		return k[1] == 'a' && k[2] == 'i' && k[3] == 'l'
	case 'b':
		return len(k) > 14 && string(k[:14]) == "braid.verdict."
	}
	return false
}

// attr reads one attribute whose key passed isVerdictKey; it reports
// whether the key is a verdict's or a tenant's.
func (s *verdictScan) attr(k []byte, v Value) bool {
	ok := s.attr1(k, v)
	s.any = s.any || ok
	return ok
}

func (s *verdictScan) attr1(k []byte, v Value) bool {
	// src marks source i as seen on this member and returns it.
	src := func(i uint8) *verdictSource {
		o := &s.src[i]
		o.seen = true
		return o
	}
	switch string(k) {
	case "tenant.id", "tenant_id", "tenant":
		if v.Type == ValueString && len(v.Bytes) > 0 && s.tenant == nil {
			s.tenant = v.Bytes
		}
	case "gen_ai.evaluation.name":
		src(srcOTel).name = text(v)
	case "gen_ai.evaluation.score.value":
		src(srcOTel).setScore(v)
	case "gen_ai.evaluation.score.label":
		src(srcOTel).label = text(v)
	case "guard.validator", "guard.classification", "guard.verdict", "guard.score":
		src(srcOpenLITGuard).openLIT(k[len("guard."):], v)
	case "evals.validator", "evals.classification", "evals.verdict", "evals.score":
		src(srcOpenLITEvals).openLIT(k[len("evals."):], v)
	case "rail.name":
		src(srcNeMo).name = text(v)
	case "rail.type":
		src(srcNeMo).stage = text(v)
	case "rail.stop":
		n := src(srcNeMo)
		n.stop, n.hasStop = v.Bool()
	case "rail.decisions":
		n := src(srcNeMo)
		n.block = n.block || decisionsBlock(v)
	case "braid.verdict.kind":
		src(srcBraid).kind = text(v)
	case "braid.verdict.score":
		src(srcBraid).setScore(v)
	case "braid.verdict.decision":
		src(srcBraid).label = text(v)
	case "braid.verdict.checker":
		src(srcBraid).name = text(v)
	case "braid.verdict.stage":
		src(srcBraid).stage = text(v)
	default:
		return false
	}
	return true
}

// openLIT reads one of OpenLIT's guard.* or evals.* fields.
func (o *verdictSource) openLIT(field []byte, v Value) {
	switch string(field) {
	case "validator":
		o.name = text(v)
	case "classification":
		o.class = text(v)
	case "verdict":
		o.label = text(v)
	case "score":
		o.setScore(v)
	}
}

// decisionsBlock reports whether a rail.decisions value (an array of
// strings, or one string) holds stop or refuse.
func decisionsBlock(v Value) bool {
	is := func(b []byte) bool {
		return bytes.EqualFold(b, []byte("stop")) || bytes.EqualFold(b, []byte("refuse"))
	}
	switch v.Type {
	case ValueString:
		return is(v.Bytes)
	case ValueArray:
		for b := v.Bytes; len(b) > 0; {
			num, typ, raw, _, rest := wire.Next(b)
			if rest == nil {
				return false
			}
			b = rest
			if num == 1 && typ == protowire.BytesType {
				if e := wire.AnyValue(raw); e.Type == ValueString && is(e.Bytes) {
					return true
				}
			}
		}
	}
	return false
}

// addVerdicts turns what a member's scan found into verdicts; rank orders
// the tenant's sources (higher wins).
func (d *Deriver) addVerdicts(s *verdictScan, rank uint8) {
	if !s.any {
		return
	}
	if s.tenant != nil {
		d.offerTenant(s.tenant, rank)
	}
	for src := srcOTel; src < numSources; src++ {
		o := &s.src[src]
		if !o.seen || len(d.verdicts) >= MaxVerdicts {
			continue
		}
		r := verdictRec{source: src, score: o.score, hasScore: o.hasScore}
		var checker []byte
		switch src {
		case srcOTel:
			if len(o.name) == 0 {
				continue // gen_ai.evaluation.name is required
			}
			checker, r.kind, r.stage = o.name, kindOf(o.name), vsOutput
			r.decision = decisionOf(o.label)
		case srcOpenLITGuard, srcOpenLITEvals:
			checker = o.name
			r.kind = kindOf(o.name)
			if r.kind == vkNone || r.kind == vkOther {
				if k := kindOf(o.class); k != vkNone {
					r.kind = k
				}
			}
			if r.kind == vkNone {
				r.kind = vkOther
			}
			r.decision = decisionOf(o.label)
			r.stage = vsInput
			if src == srcOpenLITEvals {
				r.stage = vsOutput
			}
		case srcNeMo:
			if len(o.name) == 0 {
				continue
			}
			checker, r.kind, r.stage = o.name, kindOf(o.name), stageOf(o.stage)
			r.decision = vdPass
			if o.stop && o.hasStop || o.block {
				r.decision = vdBlock
			}
		case srcBraid:
			checker = o.name
			r.kind = kindOf(o.kind)
			if i := slices.Index(VerdictKinds, string(o.kind)); i > 0 {
				r.kind = uint8(i)
			}
			if r.kind == vkNone {
				r.kind = vkOther
			}
			r.decision, r.stage = decisionOf(o.label), stageOf(o.stage)
		}
		checker = cut(checker, maxCheckerBytes)
		r.checker = d.keep(checker)
		d.verdicts = append(d.verdicts, r)
	}
}

// maxCheckerBytes bounds a checker's name and a tenant.
const maxCheckerBytes = 128

// cut shortens b to at most n bytes, at the start of a rune (a valid
// UTF-8 string stays valid).
func cut(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n]
}

// spanVerdictEvent reads the verdict attributes of a span event (its
// attributes are field 3).
func (d *Deriver) spanVerdictEvent(ev []byte) {
	s := &d.vscan
	s.reset()
	for b := ev; len(b) > 0; {
		num, typ, raw, _, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		if num == SpanEventAttrs && typ == protowire.BytesType {
			if k, v, _ := wire.KeyValue(raw); isVerdictKey(k) {
				s.attr(k, wire.AnyValue(v))
			}
		}
	}
	d.addVerdicts(s, tenantEvent)
}

// Ranks of the tenant's sources (higher wins; 0: none yet). A context
// hint's tenant is read only when no attribute names one.
const (
	tenantLog uint8 = iota + 1
	tenantResource
	tenantEvent
	tenantSpan
	tenantRootSpan
)

// appendVerdicts fills the verdicts, the quality summary and the tenant of
// out.
func (d *Deriver) appendVerdicts(out *braidpb.Derived) {
	if d.tenantRank > 0 {
		out.Tenant = string(d.str(d.tenant))
	} else {
		for _, h := range out.Hints {
			if h.Key == "tenant" {
				out.Tenant = h.Value
				break
			}
		}
	}
	if len(d.verdicts) == 0 {
		return
	}
	vs := slices.Clone(d.verdicts)
	slices.SortFunc(vs, func(a, b verdictRec) int {
		return cmp.Or(cmp.Compare(a.stage, b.stage), cmp.Compare(a.kind, b.kind),
			bytes.Compare(d.str(a.checker), d.str(b.checker)), cmp.Compare(a.source, b.source),
			cmp.Compare(a.decision, b.decision), cmp.Compare(a.score, b.score), boolCmp(a.hasScore, b.hasScore))
	})
	vs = slices.CompactFunc(vs, func(a, b verdictRec) bool {
		return a.stage == b.stage && a.kind == b.kind && a.source == b.source && a.decision == b.decision &&
			a.hasScore == b.hasScore && a.score == b.score && bytes.Equal(d.str(a.checker), d.str(b.checker))
	})
	q := &braidpb.Quality{}
	var inputPass, outputCaught uint8 // bit per kind
	out.Verdicts = make([]*braidpb.Verdict, len(vs))
	for i, r := range vs {
		v := &braidpb.Verdict{
			Kind: VerdictKinds[r.kind], Decision: verdictDecisions[r.decision], Checker: string(d.str(r.checker)),
			Stage: verdictStages[r.stage], Source: verdictSources[sourceName(r.source)],
		}
		if r.hasScore {
			v.Score = proto.Float64(r.score)
		}
		out.Verdicts[i] = v
		flagged := r.decision == vdFlag || r.decision == vdBlock
		q.Blocked = q.Blocked || r.decision == vdBlock
		q.GuardrailBypass = q.GuardrailBypass || r.decision == vdBypass
		safety := r.kind == vkJailbreak || r.kind == vkPII || r.kind == vkToxicity
		if r.stage == vsInput {
			q.GuardrailChecked = true
			if safety && r.decision == vdPass {
				inputPass |= 1 << r.kind
			}
		}
		if r.stage == vsOutput && flagged && safety {
			outputCaught |= 1 << r.kind
		}
		if r.kind == vkPII && r.stage != vsInput && flagged {
			q.PiiLeak = true
		}
	}
	q.GuardrailBypass = q.GuardrailBypass || inputPass&outputCaught != 0
	out.Quality = q
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// sourceName is the index in verdictSources of a source code.
func sourceName(src uint8) int {
	switch src {
	case srcOTel:
		return 1
	case srcOpenLITGuard, srcOpenLITEvals:
		return 2
	case srcNeMo:
		return 3
	case srcBraid:
		return 4
	}
	return 0
}
