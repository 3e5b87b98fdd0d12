package simulator

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The verdict convention, written here from its description and not from
// the simulator's code: what a reader of the decoded records finds.

var kindWords = []struct {
	kind  string
	words []string
}{
	{"jailbreak", []string{"jailbreak", "prompt_injection", "prompt injection", "injection"}},
	{"pii", []string{"pii", "sensitive data", "sensitive_data", "presidio", "privacy"}},
	{"hallucination", []string{"hallucinat", "fact", "grounded", "faithful"}},
	{"toxicity", []string{"toxic", "content safety", "content_safety", "moderation", "llama guard", "llama_guard", "harm"}},
	{"sensitivity", []string{"sensitiv"}},
}

func conventionKind(name string) string {
	name = strings.ToLower(name)
	for _, k := range kindWords {
		for _, w := range k.words {
			if strings.Contains(name, w) {
				return k.kind
			}
		}
	}
	return "other"
}

func conventionDecision(label string) string {
	switch strings.ToLower(label) {
	case "pass", "passed", "safe", "no", "false", "allow", "allowed", "ok", "clean", "compliant":
		return "pass"
	case "fail", "failed", "flag", "flagged", "yes", "true", "unsafe", "detected", "violation":
		return "flag"
	case "block", "blocked", "stop", "deny", "denied", "refuse", "refused":
		return "block"
	case "bypass", "bypassed":
		return "bypass"
	}
	return ""
}

// readVerdict is one verdict a reader finds, with where it was found.
type readVerdict struct {
	VerdictTruth
	at       []uint64 // the record's times
	resource map[string]string
	spanID   string // the span carrying it, or the log's span id
	parent   string // the span's parent
	tenant   string // tenant.id of the span
}

type anyAttrs map[string]*commonpb.AnyValue

func attrsOf(kvs []*commonpb.KeyValue) anyAttrs {
	m := anyAttrs{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func (a anyAttrs) str(k string) string { return a[k].GetStringValue() }

func (a anyAttrs) score(k string) *float64 {
	v, ok := a[k]
	if !ok {
		return nil
	}
	f := v.GetDoubleValue()
	if f < 0 || f > 1 {
		return nil
	}
	return &f
}

func readKind(names ...string) string {
	for _, n := range names {
		if k := conventionKind(n); k != "other" {
			return k
		}
	}
	return "other"
}

// spanVerdicts reads the verdicts of one span: its attributes (OpenLIT
// guards and evals, NeMo rails) and its gen_ai.evaluation.result events.
func spanVerdicts(sp *tracepb.Span, res map[string]string) []readVerdict {
	a := attrsOf(sp.Attributes)
	base := readVerdict{at: []uint64{sp.StartTimeUnixNano, sp.EndTimeUnixNano}, resource: res,
		spanID: hex.EncodeToString(sp.SpanId), parent: hex.EncodeToString(sp.ParentSpanId), tenant: a.str("tenant.id")}
	var out []readVerdict
	yesNo := func(s string) string {
		return map[string]string{"yes": "flag", "no": "pass"}[strings.ToLower(s)]
	}
	if v := a.str("guard.validator"); v != "" {
		r := base
		r.VerdictTruth = VerdictTruth{Kind: readKind(a.str("guard.classification"), v), Score: a.score("guard.score"),
			Decision: yesNo(a.str("guard.verdict")), Checker: v, Stage: "input"}
		out = append(out, r)
	}
	if v := a.str("evals.validator"); v != "" {
		r := base
		r.VerdictTruth = VerdictTruth{Kind: readKind(a.str("evals.classification"), v), Score: a.score("evals.score"),
			Decision: yesNo(a.str("evals.verdict")), Checker: v, Stage: "output"}
		out = append(out, r)
	}
	if n := a.str("rail.name"); n != "" {
		stop := a["rail.stop"].GetBoolValue()
		for _, d := range a["rail.decisions"].GetArrayValue().GetValues() {
			stop = stop || d.GetStringValue() == "stop" || d.GetStringValue() == "refuse"
		}
		r := base
		r.VerdictTruth = VerdictTruth{Kind: readKind(n), Checker: n, Decision: "pass",
			Stage: map[string]string{"input": "input", "output": "output"}[a.str("rail.type")]}
		if stop {
			r.Decision = "block"
		}
		out = append(out, r)
	}
	for _, ev := range sp.Events {
		if ev.Name != "gen_ai.evaluation.result" {
			continue
		}
		r := base
		r.at = []uint64{ev.TimeUnixNano}
		r.VerdictTruth = evaluationVerdict(attrsOf(ev.Attributes))
		out = append(out, r)
	}
	return out
}

func evaluationVerdict(a anyAttrs) VerdictTruth {
	n := a.str("gen_ai.evaluation.name")
	return VerdictTruth{Kind: readKind(n), Checker: n, Score: a.score("gen_ai.evaluation.score.value"),
		Decision: conventionDecision(a.str("gen_ai.evaluation.score.label")), Stage: "output"}
}

// verdictReader collects the verdicts of decoded messages by trace id.
type verdictReader struct {
	byTrace map[string][]readVerdict
	spans   map[string]map[string]bool // trace id -> its span ids
}

func newVerdictReader() *verdictReader {
	return &verdictReader{byTrace: map[string][]readVerdict{}, spans: map[string]map[string]bool{}}
}

func (vr *verdictReader) add(t *testing.T, cfg Config, m Message) {
	t.Helper()
	msg := decodeMessage(t, cfg, m)
	switch x := msg.(type) {
	case *tracepb.TracesData:
		for _, rs := range x.ResourceSpans {
			res := attrMap(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					tid := hex.EncodeToString(sp.TraceId)
					if vr.spans[tid] == nil {
						vr.spans[tid] = map[string]bool{}
					}
					vr.spans[tid][hex.EncodeToString(sp.SpanId)] = true
					vr.byTrace[tid] = append(vr.byTrace[tid], spanVerdicts(sp, res)...)
				}
			}
		}
	case *logspb.LogsData:
		for _, rl := range x.ResourceLogs {
			res := attrMap(rl.Resource.Attributes)
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					a := attrsOf(lr.Attributes)
					if lr.EventName != "gen_ai.evaluation.result" && a.str("event.name") != "gen_ai.evaluation.result" {
						continue
					}
					tid := hex.EncodeToString(lr.TraceId)
					vr.byTrace[tid] = append(vr.byTrace[tid], readVerdict{VerdictTruth: evaluationVerdict(a),
						at: []uint64{lr.TimeUnixNano}, resource: res, spanID: hex.EncodeToString(lr.SpanId)})
				}
			}
		}
	}
}

// conventionFigures computes the per-trace figures from verdicts as the
// convention defines them.
func conventionFigures(vs []VerdictTruth) (checked, bypass, blocked, leak bool) {
	passedIn := map[string]bool{} // kinds an input check passed
	for _, v := range vs {
		if v.Stage == "input" {
			checked = true
			if v.Decision == "pass" {
				passedIn[v.Kind] = true
			}
		}
	}
	for _, v := range vs {
		bad := v.Decision == "flag" || v.Decision == "block"
		blocked = blocked || v.Decision == "block"
		safety := v.Kind == "jailbreak" || v.Kind == "pii" || v.Kind == "toxicity"
		bypass = bypass || v.Decision == "bypass" || bad && safety && v.Stage == "output" && passedIn[v.Kind]
		leak = leak || bad && v.Kind == "pii" && (v.Stage == "output" || v.Stage == "")
	}
	return
}

func verdictKey(v VerdictTruth) string {
	s := "nil"
	if v.Score != nil {
		s = strconv.FormatFloat(*v.Score, 'g', -1, 64)
	}
	return v.Stage + "/" + v.Kind + "/" + v.Checker + "/" + v.Decision + "/" + s
}

func sortedKeys(vs []VerdictTruth) []string {
	var ks []string
	for _, v := range vs {
		ks = append(ks, verdictKey(v))
	}
	slices.Sort(ks)
	return ks
}

// runVerdicts runs cfg for batches then Flush, returning the simulator and
// every message.
func runVerdicts(t *testing.T, cfg Config, batches int) (*Simulator, []Message) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	for range batches {
		msgs = append(msgs, s.Next()...)
	}
	return s, append(msgs, s.Flush()...)
}

// TestVerdictsMatchDecoded reads the verdicts back from the decoded
// records with the convention and finds exactly the truth's: the same
// verdicts per trace, the same figures, each on a span of the trace under
// the request's server resource, within the request's time span.
func TestVerdictsMatchDecoded(t *testing.T) {
	heavyVerdictTest(t)
	for _, v := range realisticVariants[:3] {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed = 21
			cfg.Verdicts = &VerdictConfig{JailbreakRate: 0.1, GuardMissRate: 0.3}
			s, msgs := runVerdicts(t, cfg, 150)
			d := newRDecoded()
			vr := newVerdictReader()
			for _, m := range msgs {
				d.add(t, s.cfg, m)
				vr.add(t, s.cfg, m)
			}
			tr := s.Truth()
			checkTruth(t, tr, d.decoded, true)
			var counts struct{ attempts, missed, blocked, bypass, leaks, tox, legacyEvals, nemo int }
			for _, id := range tr.TraceIDs {
				tt := tr.Traces[id]
				read := vr.byTrace[id]
				delete(vr.byTrace, id)
				var got []VerdictTruth
				for _, rv := range read {
					got = append(got, rv.VerdictTruth)
					if rv.resource["service.instance.id"] != tt.Instance || rv.resource["host.name"] != tt.Host {
						t.Fatalf("trace %s: verdict %+v under %v, request on %s", id, rv.VerdictTruth, rv.resource, tt.Instance)
					}
					for _, at := range rv.at {
						if at < uint64(tt.Arrival.UnixNano()) || at > uint64(tt.Finish.UnixNano()) {
							t.Fatalf("trace %s: verdict %+v at %d outside [%v, %v]", id, rv.VerdictTruth, at, tt.Arrival, tt.Finish)
						}
					}
					if !vr.spans[id][rv.spanID] {
						t.Fatalf("trace %s: verdict %+v on span %s not of the trace", id, rv.VerdictTruth, rv.spanID)
					}
					if rv.parent != "" && rv.parent != tt.RootSpanID {
						t.Fatalf("trace %s: checker span's parent %s, root %s", id, rv.parent, tt.RootSpanID)
					}
					if rv.Stage == "input" && rv.tenant != tt.Tenant {
						t.Fatalf("trace %s: guard tenant.id %q, tenant %q", id, rv.tenant, tt.Tenant)
					}
					if rv.Checker == "toxicity" {
						counts.tox++
					}
					if rv.Checker == "hallucination" && rv.parent != "" && len(rv.at) == 2 {
						counts.legacyEvals++
					}
					if rv.Checker == "jailbreak detection heuristics" {
						counts.nemo++
					}
				}
				if !slices.Equal(sortedKeys(got), sortedKeys(tt.Verdicts)) {
					t.Fatalf("trace %s: read %v, truth %v", id, sortedKeys(got), sortedKeys(tt.Verdicts))
				}
				checked, bypass, blocked, leak := conventionFigures(got)
				if checked != tt.GuardrailChecked || bypass != tt.GuardrailBypass || blocked != tt.Blocked || leak != tt.PIILeak {
					t.Fatalf("trace %s: read checked/bypass/blocked/leak %v/%v/%v/%v, truth %+v", id, checked, bypass, blocked, leak, tt)
				}
				if !tt.GuardrailChecked {
					t.Fatalf("trace %s: served without an input guard verdict", id)
				}
				// The intent behind the figures.
				var guard, outJB *VerdictTruth
				for i, v := range tt.Verdicts {
					switch {
					case v.Stage == "input":
						guard = &tt.Verdicts[i]
					case v.Kind == "jailbreak":
						outJB = &tt.Verdicts[i]
					}
				}
				detected := guard.Decision != "pass"
				if detected && (!tt.JailbreakAttempt || len(tt.Verdicts) != 1) {
					t.Fatalf("trace %s: guard detected a non-attempt or output checks after it: %+v", id, tt)
				}
				if !detected && (outJB == nil || (outJB.Decision == "flag") != tt.JailbreakAttempt) {
					t.Fatalf("trace %s: output jailbreak check %+v, attempt %v", id, outJB, tt.JailbreakAttempt)
				}
				if tt.JailbreakAttempt {
					counts.attempts++
					if !detected {
						counts.missed++
						if !tt.GuardrailBypass {
							t.Fatalf("trace %s: missed attempt not a bypass", id)
						}
					}
				}
				if tt.Blocked {
					counts.blocked++
					if tt.Service != "sglang" {
						t.Fatalf("trace %s: blocked on %s (only NeMo rails block)", id, tt.Service)
					}
				}
				if tt.GuardrailBypass {
					counts.bypass++
				}
				if tt.PIILeak {
					counts.leaks++
				}
			}
			for id, rvs := range vr.byTrace {
				t.Fatalf("verdicts of trace %s not in the truth: %+v", id, rvs[0].VerdictTruth)
			}
			for _, o := range tr.Orphans {
				if len(o.Verdicts) > 0 || o.JailbreakAttempt || o.GuardrailChecked {
					t.Fatalf("orphan with verdicts: %+v", o)
				}
			}
			t.Logf("%d traces: %+v", len(tr.TraceIDs), counts)
			if counts.attempts == 0 || counts.missed == 0 || counts.blocked == 0 || counts.bypass == 0 ||
				counts.leaks == 0 || counts.tox == 0 || counts.legacyEvals == 0 || counts.nemo == 0 {
				t.Fatalf("a case never happened: %+v", counts)
			}
		})
	}
}

// binomialOK reports whether k successes of n are within 5 standard
// deviations of the share p.
func binomialOK(k, n int, p float64) bool {
	mean := float64(n) * p
	return math.Abs(float64(k)-mean) <= 5*math.Sqrt(mean*(1-p))+1
}

type shares struct {
	served, attempts, detected, missed, outChecked int
	checked, flagged                               map[string]int
	sensitivity                                    []float64
}

func verdictShares(tr Truth, keep func(TraceTruth) bool) shares {
	sh := shares{checked: map[string]int{}, flagged: map[string]int{}}
	for _, id := range tr.TraceIDs {
		tt := tr.Traces[id]
		if !keep(tt) {
			continue
		}
		sh.served++
		detected := false
		for _, v := range tt.Verdicts {
			if v.Stage == "input" {
				detected = v.Decision != "pass"
				continue
			}
			if v.Kind == "sensitivity" {
				sh.sensitivity = append(sh.sensitivity, *v.Score)
				continue
			}
			if v.Kind == "jailbreak" {
				sh.outChecked++
				continue
			}
			sh.checked[v.Kind]++
			if v.Decision == "flag" {
				sh.flagged[v.Kind]++
			}
		}
		if tt.JailbreakAttempt {
			sh.attempts++
			if detected {
				sh.detected++
			} else {
				sh.missed++
			}
		}
	}
	return sh
}

// TestVerdictShares checks that the shares of attempts, misses, checks and
// failures are the configured ones, over many requests.
func TestVerdictShares(t *testing.T) {
	heavyVerdictTest(t)
	for _, vc := range []VerdictConfig{
		{JailbreakRate: 0.05, GuardMissRate: 0.3},                                                    // defaults for the checks
		{HallucinationChecked: 0.9, HallucinationFlagged: 0.2, PIIChecked: -1, ToxicityFlagged: 0.5}, // and for the rates
	} {
		cfg := Config{Realistic: true, Seed: 7, Rate: 150, Hosts: 8, Verdicts: &vc}
		s, _ := runVerdicts(t, cfg, 600)
		want := *s.cfg.Verdicts
		sh := verdictShares(s.Truth(), func(TraceTruth) bool { return true })
		t.Logf("%+v: %d served, %d attempts (%d missed), %d output-checked, checked %v flagged %v",
			vc, sh.served, sh.attempts, sh.missed, sh.outChecked, sh.checked, sh.flagged)
		if sh.served < 10000 {
			t.Fatalf("only %d served requests", sh.served)
		}
		if !binomialOK(sh.attempts, sh.served, want.JailbreakRate) || !binomialOK(sh.missed, sh.attempts, want.GuardMissRate) {
			t.Errorf("attempts %d of %d (want %v), missed %d (want %v)", sh.attempts, sh.served, want.JailbreakRate, sh.missed, want.GuardMissRate)
		}
		if sh.outChecked != sh.served-sh.detected || len(sh.sensitivity) != sh.outChecked {
			t.Errorf("%d output-checked, %d sensitivity scores, want %d", sh.outChecked, len(sh.sensitivity), sh.served-sh.detected)
		}
		for _, k := range []struct {
			kind             string
			checked, flagged float64
		}{
			{"hallucination", want.HallucinationChecked, want.HallucinationFlagged},
			{"pii", want.PIIChecked, want.PIIFlagged},
			{"toxicity", want.ToxicityChecked, want.ToxicityFlagged},
		} {
			if !binomialOK(sh.checked[k.kind], sh.outChecked, k.checked) || !binomialOK(sh.flagged[k.kind], sh.checked[k.kind], k.flagged) {
				t.Errorf("%s: checked %d of %d (want %v), flagged %d (want %v)", k.kind,
					sh.checked[k.kind], sh.outChecked, k.checked, sh.flagged[k.kind], k.flagged)
			}
		}
		var sum, below float64
		for _, x := range sh.sensitivity {
			if x < 0 || x > 1 {
				t.Fatalf("sensitivity %v outside [0, 1]", x)
			}
			sum += x
			if x < 0.125 {
				below++
			}
		}
		// Skewed towards 0: U³ has mean 1/4 and half its mass below 1/8.
		if n := float64(len(sh.sensitivity)); math.Abs(sum/n-0.25) > 0.02 || math.Abs(below/n-0.5) > 0.02 {
			t.Errorf("sensitivity mean %v, share below 1/8 %v", sum/n, below/n)
		}
	}
}

// TestVerdictJump checks that a jump raises its tenant's attempt and bypass
// shares in its window, and nobody else's.
func TestVerdictJump(t *testing.T) {
	heavyVerdictTest(t)
	jump := VerdictJump{Tenant: "globex", From: 40 * time.Second, To: 80 * time.Second, JailbreakRate: 0.4}
	cfg := Config{Realistic: true, Seed: 3, Rate: 150, Hosts: 8, Verdicts: &VerdictConfig{Jumps: []VerdictJump{jump}}}
	s, _ := runVerdicts(t, cfg, 600) // 120 s
	tr := s.Truth()
	in := func(tt TraceTruth) bool {
		d := tt.Arrival.Sub(s.cfg.Start)
		return d >= jump.From && d < jump.To
	}
	bypass := func(keep func(TraceTruth) bool) (n, k int) {
		for _, tt := range tr.Traces {
			if keep(tt) {
				n++
				if tt.GuardrailBypass {
					k++
				}
			}
		}
		return n, k
	}
	cases := []struct {
		name string
		keep func(TraceTruth) bool
		rate float64
	}{
		{"globex in the window", func(tt TraceTruth) bool { return tt.Tenant == "globex" && in(tt) }, 0.4},
		{"globex outside", func(tt TraceTruth) bool { return tt.Tenant == "globex" && !in(tt) }, DefaultJailbreakRate},
		{"others in the window", func(tt TraceTruth) bool { return tt.Tenant != "globex" && in(tt) }, DefaultJailbreakRate},
	}
	var bypassShare []float64
	for _, c := range cases {
		sh := verdictShares(tr, c.keep)
		n, k := bypass(c.keep)
		t.Logf("%s: %d served, %d attempts, %d missed, %d bypasses", c.name, sh.served, sh.attempts, sh.missed, k)
		if sh.served < 1000 || !binomialOK(sh.attempts, sh.served, c.rate) {
			t.Errorf("%s: %d attempts of %d, want share %v", c.name, sh.attempts, sh.served, c.rate)
		}
		bypassShare = append(bypassShare, float64(k)/float64(n))
	}
	// In the window a tenth of the globex attempts (4% of its requests)
	// pass the guard; elsewhere 0.05% of the requests are missed attempts.
	if !(bypassShare[0] > 0.025 && bypassShare[1] < 0.005 && bypassShare[2] < 0.005) {
		t.Errorf("bypass shares %v: want the jump's well above the others", bypassShare)
	}
}

// stripVerdicts decodes m and removes the verdicts' members: spans with
// guard., evals. or rail. attributes or gen_ai.evaluation.result events,
// evaluation log records, and the blocks they leave empty. It returns nil
// when nothing is left.
func stripVerdicts(t *testing.T, cfg Config, m Message) proto.Message {
	t.Helper()
	msg := decodeMessage(t, cfg, m)
	switch x := msg.(type) {
	case *tracepb.TracesData:
		x.ResourceSpans = slices.DeleteFunc(x.ResourceSpans, func(rs *tracepb.ResourceSpans) bool {
			rs.ScopeSpans = slices.DeleteFunc(rs.ScopeSpans, func(ss *tracepb.ScopeSpans) bool {
				ss.Spans = slices.DeleteFunc(ss.Spans, func(sp *tracepb.Span) bool {
					return len(spanVerdicts(sp, nil)) > 0
				})
				return len(ss.Spans) == 0
			})
			return len(rs.ScopeSpans) == 0
		})
		if len(x.ResourceSpans) == 0 {
			return nil
		}
	case *logspb.LogsData:
		x.ResourceLogs = slices.DeleteFunc(x.ResourceLogs, func(rl *logspb.ResourceLogs) bool {
			rl.ScopeLogs = slices.DeleteFunc(rl.ScopeLogs, func(sl *logspb.ScopeLogs) bool {
				sl.LogRecords = slices.DeleteFunc(sl.LogRecords, func(lr *logspb.LogRecord) bool {
					return lr.EventName == "gen_ai.evaluation.result" || attrsOf(lr.Attributes).str("event.name") == "gen_ai.evaluation.result"
				})
				return len(sl.LogRecords) == 0
			})
			return len(rl.ScopeLogs) == 0
		})
		if len(x.ResourceLogs) == 0 {
			return nil
		}
	}
	return msg
}

// TestVerdictsLeaveTheRestAlone checks that turning verdicts on adds the
// verdicts' members and changes nothing else: with them removed, the
// messages decode to what the same seed gives without verdicts (metrics
// byte for byte), and the request truth is the same but for the span and
// log counts.
func TestVerdictsLeaveTheRestAlone(t *testing.T) {
	heavyVerdictTest(t)
	variants := append(slices.Clone(realisticVariants), struct {
		name string
		cfg  Config
	}{"kv-no-request-logs", Config{Realistic: true, Rate: 20, Hosts: 1, KVEvents: true, LogsPerRequest: -1, Keying: Unkeyed}},
		struct {
			name string
			cfg  Config
		}{"kv-keyed-no-request-logs", Config{Realistic: true, Rate: 20, Hosts: 1, KVEvents: true, LogsPerRequest: -1}})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed = 11
			plain, pm := runVerdicts(t, cfg, 80)
			cfg.Verdicts = &VerdictConfig{JailbreakRate: 0.2, GuardMissRate: 0.5, ToxicityChecked: 0.8}
			withV, vm := runVerdicts(t, cfg, 80)
			var kept []Message
			var stripped []proto.Message
			for _, m := range vm {
				if x := stripVerdicts(t, withV.cfg, m); x != nil {
					kept = append(kept, m)
					stripped = append(stripped, x)
				}
			}
			if len(kept) != len(pm) {
				t.Fatalf("%d messages left of %d, %d without verdicts", len(kept), len(vm), len(pm))
			}
			added := len(vm) - len(pm)
			for i, m := range pm {
				if kept[i].Topic != m.Topic || !bytes.Equal(kept[i].Key, m.Key) {
					t.Fatalf("message %d: %s %q, without verdicts %s %q", i, kept[i].Topic, kept[i].Key, m.Topic, m.Key)
				}
				if m.Topic == plain.cfg.Topics.Metrics && !bytes.Equal(kept[i].Value, m.Value) {
					t.Fatalf("metrics message %d differs", i)
				}
				if want := stripVerdicts(t, plain.cfg, m); !proto.Equal(stripped[i], want) {
					t.Fatalf("message %d (%s) differs once the verdicts are removed", i, m.Topic)
				}
			}
			pt, vt := plain.Truth(), withV.Truth()
			if !slices.Equal(pt.TraceIDs, vt.TraceIDs) || len(pt.Orphans) != len(vt.Orphans) {
				t.Fatal("different requests")
			}
			n := 0
			for _, id := range pt.TraceIDs {
				a, b := pt.Traces[id], vt.Traces[id]
				if len(b.Verdicts) > 0 {
					n++
				}
				b.Verdicts, b.JailbreakAttempt, b.GuardrailChecked, b.GuardrailBypass, b.Blocked, b.PIILeak = nil, false, false, false, false, false
				b.SpanIDs = slices.DeleteFunc(b.SpanIDs, func(s string) bool { return !slices.Contains(a.SpanIDs, s) })
				b.Spans, b.PendingSpans, b.Logs = a.Spans, a.PendingSpans, a.Logs
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("trace %s: truth %+v, with verdicts %+v", id, a, b)
				}
			}
			if n == 0 {
				t.Fatal("no verdicts written")
			}
			t.Logf("%d messages, %d more with verdicts; %d traces with verdicts", len(pm), added, n)
		})
	}
}

// TestVerdictTruthFile checks that the truth file carries the verdicts and
// figures, and reads back to the truth.
func TestVerdictTruthFile(t *testing.T) {
	cfg := Config{Realistic: true, Seed: 5, Verdicts: &VerdictConfig{JailbreakRate: 0.3}}
	s, _ := runVerdicts(t, cfg, 60)
	var buf bytes.Buffer
	if err := s.WriteTruth(&buf); err != nil {
		t.Fatal(err)
	}
	tr := s.Truth()
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<24)
	i, withScore, without := 0, 0, 0
	for sc.Scan() {
		var l TruthLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Type != "request" || l.Orphan {
			continue
		}
		tt := tr.Traces[tr.TraceIDs[i]]
		i++
		if !reflect.DeepEqual(l.Verdicts, tt.Verdicts) || l.JailbreakAttempt != tt.JailbreakAttempt ||
			l.GuardrailChecked != tt.GuardrailChecked || l.GuardrailBypass != tt.GuardrailBypass ||
			l.Blocked != tt.Blocked || l.PIILeak != tt.PIILeak {
			t.Fatalf("line %s: %+v, truth %+v", sc.Text(), l, tt)
		}
		for _, v := range l.Verdicts {
			if v.Score == nil {
				without++
			} else {
				withScore++
			}
		}
		if !bytes.Contains(sc.Bytes(), []byte(`"guardrail_checked":true`)) || !bytes.Contains(sc.Bytes(), []byte(`"verdicts":[{"kind":"jailbreak"`)) {
			t.Fatalf("line without its verdicts: %s", sc.Text())
		}
	}
	if i != len(tr.TraceIDs) || withScore == 0 || without == 0 {
		t.Fatalf("%d request lines of %d traces; %d verdicts with a score, %d without", i, len(tr.TraceIDs), withScore, without)
	}
}

func TestVerdictConfig(t *testing.T) {
	for _, bad := range []Config{
		{Verdicts: &VerdictConfig{}}, // needs realistic
		{Realistic: true, Verdicts: &VerdictConfig{JailbreakRate: 1.5}},
		{Realistic: true, Verdicts: &VerdictConfig{PIIFlagged: math.NaN()}},
		{Realistic: true, Verdicts: &VerdictConfig{Jumps: []VerdictJump{{Tenant: "nobody", To: time.Second, JailbreakRate: 0.5}}}},
		{Realistic: true, Verdicts: &VerdictConfig{Jumps: []VerdictJump{{Tenant: "acme", From: time.Second, To: time.Second}}}},
		{Realistic: true, Verdicts: &VerdictConfig{Jumps: []VerdictJump{{Tenant: "acme", To: time.Second, JailbreakRate: -0.1}}}},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v): no error", *bad.Verdicts)
		}
	}
	vc := &VerdictConfig{PIIChecked: -1, Jumps: []VerdictJump{{Tenant: "acme", To: time.Second}}}
	c := Config{Realistic: true, Verdicts: vc}
	c.EnsureDefaults()
	want := VerdictConfig{HallucinationChecked: 0.5, HallucinationFlagged: 0.04, PIIChecked: 0, PIIFlagged: 0.02,
		ToxicityChecked: 0.3, ToxicityFlagged: 0.03, JailbreakRate: 0.005, GuardMissRate: 0.1, Jumps: vc.Jumps}
	if !reflect.DeepEqual(*c.Verdicts, want) {
		t.Fatalf("defaults %+v, want %+v", *c.Verdicts, want)
	}
	if vc.HallucinationChecked != 0 || vc.PIIChecked != -1 {
		t.Fatalf("EnsureDefaults changed the caller's VerdictConfig: %+v", *vc)
	}
}

// heavyVerdictTest skips a statistical verdict test under the race
// detector: it generates tens of thousands of requests in one goroutine,
// which the detector slows several times over and has nothing to check in;
// make test runs these tests again without it.
func heavyVerdictTest(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("generation is single-goroutine and the race detector makes it several times slower: make test runs it without -race")
	}
}
