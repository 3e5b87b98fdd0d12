package job

import (
	"bytes"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/alertmanager/amtest"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// The quality run: a realistic fleet whose guardrails and evaluators report
// verdicts, with one tenant's jailbreak attempts jumping for three minutes.
const (
	qualitySpan      = 12 * time.Minute
	qualityJumpFrom  = 3 * time.Minute
	qualityJumpTo    = 6 * time.Minute // its bypass alert resolves about 4 minutes later, well before the input ends
	qualityJumper    = "umbrella"
	qualityRateError = 0.005 // the sketches' relative accuracy
)

// TestIntegrationQualitySignals runs the job on the real broker over a
// realistic fleet whose guardrails (OpenLIT, NeMo Guardrails) and
// evaluators (OpenTelemetry evaluation events and logs) report verdicts,
// with a real Alertmanager: the recorded rates per model and tenant on
// /metrics equal the simulator's truth over the window each one reports;
// the guardrail bypass alert fires once for the tenant whose jailbreak
// attempts jumped, during the jump, resolves after it, and fires for no
// other tenant; every fused trace carries the verdicts its checkers
// emitted.
func TestIntegrationQualitySignals(t *testing.T) {
	t.Parallel() // mostly waiting on the paced producer, as the alerts runs
	hook := amtest.NewWebhook(t)
	am := amtest.Start(t, hook.URL()+"/hook")
	brokers := kafkatest.Brokers(t)
	outs := kafkatest.NewTopics(t, brokers, 4, "braid.alerts")
	tj := startJobWith(t, simulator.EncodingProto, 4, func(c *Config) {
		c.Outputs.Alerts = outs[0]
		c.Alerts.Alertmanager.URLs = []string{am}
		c.Admin.Addr = "127.0.0.1:0"
		c.EventTime.Idleness = 30 * time.Second
	})
	start := time.Now().Add(-qualitySpan).Truncate(time.Minute)
	cfg := simulator.Config{Seed: 21, Realistic: true, Hosts: 1, RequestsPerBatch: 4, BatchInterval: time.Second,
		Start: start, Topics: tj.simTopics(),
		Verdicts: &simulator.VerdictConfig{Jumps: []simulator.VerdictJump{
			{Tenant: qualityJumper, From: qualityJumpFrom, To: qualityJumpTo, JailbreakRate: 0.8},
		}}}
	sim, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var batches [][]simulator.Message
	for range int(qualitySpan / cfg.BatchInterval) {
		batches = append(batches, sim.Next())
	}
	batches = append(batches, sim.Flush())
	alertsR := tj.reader(outs[0])
	fused := tj.reader(tj.cfg.Outputs.Fused)
	// Ten times real time, as the alerts runs.
	next := time.Now()
	for _, b := range batches {
		for time.Now().Before(next) {
			time.Sleep(time.Until(next)) // the producer's pace, not synchronisation
		}
		tj.produce(b)
		next = next.Add(100 * time.Millisecond)
	}
	truth := sim.Truth()

	// The bypass alert fires for the jumper and resolves after the jump.
	deadline := time.Now().Add(4 * time.Minute)
	for len(hook.Notified("BraidGuardrailBypass", "resolved")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no resolved bypass alert within 4 minutes; notified firing %v%s", names(hook.Notified("", "firing")), alertsR.describe())
		}
		alertsR.poll() // paces the polling of the webhook, bounded by the deadline
	}
	for _, a := range append(hook.Notified("BraidGuardrailBypass", "firing"), hook.Notified("BraidGuardrailBypass", "resolved")...) {
		if a.Labels["tenant"] != qualityJumper {
			t.Errorf("bypass alert for tenant %q (%v), not the jumper %s", a.Labels["tenant"], a.Labels, qualityJumper)
		}
	}
	models := map[string]bool{}
	for _, a := range hook.Notified("BraidGuardrailBypass", "firing") {
		if models[a.Labels["model"]] {
			t.Errorf("bypass alert fired twice for model %s", a.Labels["model"])
		}
		models[a.Labels["model"]] = true
		if a.Labels["severity"] != "critical" {
			t.Errorf("bypass alert labels %v", a.Labels)
		}
	}
	// Its exemplars are requests that got through the guardrail.
	for _, a := range hook.Notified("BraidGuardrailBypass", "firing") {
		ids := strings.Split(a.Annotations["trace_ids"], ",")
		for _, id := range ids {
			if tt, ok := truth.Traces[id]; !ok || !tt.GuardrailBypass || tt.Tenant != qualityJumper {
				t.Errorf("bypass alert names trace %q, not a bypass of %s", id, qualityJumper)
			}
		}
	}
	// In braid.alerts: one episode per group, fired inside the jump.
	alertsR.poll()
	for _, a := range alertsOf(t, alertsR.recs) {
		if a.Rule != "BraidGuardrailBypass" {
			continue
		}
		if a.Episode != 1 {
			t.Errorf("bypass alert %v episode %d, want one episode", a.Group, a.Episode)
		}
		if a.State == braidpb.AlertState_ALERT_STATE_FIRING {
			at := time.Duration(int64(a.WindowEndUnixNano) - start.UnixNano())
			if at <= qualityJumpFrom || at > qualityJumpTo+time.Minute {
				t.Errorf("bypass alert %v fired at %v, outside the jump [%v, %v)", a.Group, at, qualityJumpFrom, qualityJumpTo)
			}
		}
	}

	// Every fused trace carries the verdicts its checkers emitted.
	fused.until(t, time.Minute, func(recs []*kgo.Record) bool { return complete(truth, latest(t, recs)) })
	got := latest(t, fused.recs)
	checked := 0
	for id, tt := range truth.Traces {
		ft := got[id]
		if ft == nil || len(tt.Verdicts) == 0 {
			continue
		}
		checked++
		if g, w := fusedVerdicts(ft.GetDerived()), truthVerdicts(tt.Verdicts); g != w {
			t.Errorf("trace %s: verdicts\n got %s\nwant %s", id, g, w)
		}
		if g := ft.GetDerived().GetTenant(); g != tt.Tenant {
			t.Errorf("trace %s: tenant %q, want %q", id, g, tt.Tenant)
		}
		q := ft.GetDerived().GetQuality()
		if q.GetGuardrailBypass() != tt.GuardrailBypass || q.GetBlocked() != tt.Blocked || q.GetPiiLeak() != tt.PIILeak {
			t.Errorf("trace %s: quality %v, want bypass %v blocked %v leak %v", id, q, tt.GuardrailBypass, tt.Blocked, tt.PIILeak)
		}
	}
	if checked < len(truth.Traces)/2 {
		t.Fatalf("only %d of %d traces had verdicts to check", checked, len(truth.Traces))
	}

	// The recorded rates on /metrics against the truth of the window each
	// series reports.
	fams := scrapeFamilies(t, "http://"+tj.job.AdminAddr()+"/metrics")
	ends := map[string]float64{}
	for _, m := range fams["braid_recorded_window_end_timestamp_seconds"].GetMetric() {
		ends[labelValue(m.GetLabel(), "record")+"|"+labelKey(m.GetLabel(), "record")] = m.GetGauge().GetValue()
	}
	slack := time.Duration(scrape(t, "http://"+tj.job.AdminAddr())["braid_alerts_shift_max_seconds"] * 1e9)
	t.Logf("traces observed up to %v after their end", slack)
	compared := 0
	for _, rec := range []string{"braid_llm_success_ratio", "braid_llm_hallucination_ratio", "braid_llm_pii_leaks",
		"braid_llm_jailbreak_ratio", "braid_llm_jailbreak_confidence", "braid_llm_guardrail_bypass_ratio",
		"braid_llm_toxicity_ratio", "braid_llm_response_sensitivity_p50", "braid_llm_response_sensitivity_p90", "braid_llm_response_sensitivity_p99"} {
		ms := fams[rec].GetMetric()
		if len(ms) == 0 {
			t.Errorf("/metrics has no %s", rec)
			continue
		}
		for _, m := range ms {
			model, tenant := labelValue(m.GetLabel(), "model"), labelValue(m.GetLabel(), "tenant")
			endS, ok := ends[rec+"|"+labelKey(m.GetLabel(), "")]
			if !ok {
				t.Errorf("%s{%s,%s}: no window end", rec, model, tenant)
				continue
			}
			end := time.Unix(0, int64(endS*1e9))
			v := m.GetGauge().GetValue()
			in := func(slack time.Duration) (bool, float64, float64) {
				lo, hi := truthBounds(truth, rec, model, tenant, end.Add(-5*time.Minute), end, slack)
				return v >= lo*(1-qualityRateError)-1e-9 && v <= hi*(1+qualityRateError)+1e-9, lo, hi
			}
			// A trace emitted after the watermark passed its end is observed
			// later, by at most what braid reports.
			if ok, lo, hi := in(slack); !ok {
				need := "none up to 2m"
				for s := slack + 5*time.Second; s <= 2*time.Minute; s += 5 * time.Second {
					if ok, _, _ := in(s); ok {
						need = s.String()
						break
					}
				}
				t.Errorf("%s{model=%q,tenant=%q} = %v over the window ending %v, truth in [%v, %v]; slack needed %s", rec, model, tenant, v, end.Sub(start), lo, hi, need)
			}
			compared++
		}
	}
	// Compliance drift: the rate over the rule's 5 minutes less the rate
	// over the trailing week (here: everything since the start).
	drifts := fams["braid_llm_compliance_drift"].GetMetric()
	if len(drifts) == 0 {
		t.Error("/metrics has no braid_llm_compliance_drift")
	}
	for _, m := range drifts {
		model, tenant, kind := labelValue(m.GetLabel(), "model"), labelValue(m.GetLabel(), "tenant"), labelValue(m.GetLabel(), "kind")
		endS, ok := ends["braid_llm_compliance_drift|"+labelKey(m.GetLabel(), "")]
		if !ok {
			t.Errorf("drift{%s,%s,%s}: no window end", model, tenant, kind)
			continue
		}
		end := time.Unix(0, int64(endS*1e9))
		rec := "braid_llm_" + kind + "_ratio"
		nowLo, nowHi := truthBounds(truth, rec, model, tenant, end.Add(-5*time.Minute), end, slack)
		weekLo, weekHi := truthBounds(truth, rec, model, tenant, start.Add(-time.Hour), end, slack)
		if v := m.GetGauge().GetValue(); v < nowLo-weekHi-1e-9 || v > nowHi-weekLo+1e-9 {
			t.Errorf("braid_llm_compliance_drift{model=%q,tenant=%q,kind=%q} = %v, truth in [%v, %v] (5m [%v, %v], week [%v, %v])",
				model, tenant, kind, v, nowLo-weekHi, nowHi-weekLo, nowLo, nowHi, weekLo, weekHi)
		}
		compared++
	}
	t.Logf("%d traces' verdicts checked; %d recorded series compared with the truth; bypass alert fired for models %v", checked, compared, models)
}

// fusedVerdicts renders a fused trace's verdicts, sorted.
func fusedVerdicts(d *braidpb.Derived) string {
	var out []string
	for _, v := range d.GetVerdicts() {
		out = append(out, verdictLine(v.Kind, v.Decision, v.Stage, v.Checker, v.Score))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func truthVerdicts(vs []simulator.VerdictTruth) string {
	var out []string
	for _, v := range vs {
		out = append(out, verdictLine(v.Kind, v.Decision, v.Stage, v.Checker, v.Score))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func verdictLine(kind, decision, stage, checker string, score *float64) string {
	s := "-"
	if score != nil {
		s = strconv.FormatFloat(*score, 'g', 6, 64)
	}
	return strings.Join([]string{stage, kind, checker, decision, s}, "/")
}

// qualityFigures are a request's figures as the rules read them, worked
// out from the simulator's truth: flagged (1) or passed (0) per kind,
// absent (NaN) without a decided check; the highest score per kind.
type qualityFigures struct {
	success, bypass, checked, leak float64
	flag, score                    map[string]float64
}

func figuresOf(tt simulator.TraceTruth) qualityFigures {
	f := qualityFigures{success: b2f(!tt.Error && !tt.Blocked), bypass: math.NaN(), checked: math.NaN(), leak: math.NaN(),
		flag: map[string]float64{}, score: map[string]float64{}}
	for _, v := range tt.Verdicts {
		if v.Decision != "" {
			hit := b2f(v.Decision == "flag" || v.Decision == "block")
			if old, ok := f.flag[v.Kind]; !ok || hit > old {
				f.flag[v.Kind] = hit
			}
		}
		if v.Score != nil {
			if old, ok := f.score[v.Kind]; !ok || *v.Score > old {
				f.score[v.Kind] = *v.Score
			}
		}
	}
	if tt.GuardrailChecked || tt.GuardrailBypass {
		f.checked, f.bypass = 1, b2f(tt.GuardrailBypass)
	}
	if _, ok := f.flag["pii"]; ok {
		f.leak = b2f(tt.PIILeak)
	}
	return f
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// truthBounds returns the range a recorded figure of (model, tenant) over
// [from, to) must lie in. braid observes a trace at its last member's
// event time, or later when its emission waited (the task's watermark less
// the stage's delay, up to slack later): the requests ending in
// [from, to−slack) are certainly in the window, those ending in
// [from−slack, from) or [to−slack, to) may or may not be, later ones are
// not.
func truthBounds(truth simulator.Truth, rec, model, tenant string, from, to time.Time, slack time.Duration) (lo, hi float64) {
	quantile := ""
	if q, ok := strings.CutPrefix(rec, "braid_llm_response_sensitivity_p"); ok {
		rec, quantile = "braid_llm_response_sensitivity", "0."+q
	}
	type val struct{ num, den float64 }
	var sure, edge []val
	var sureVals, edgeVals []float64
	for _, tt := range truth.Traces {
		if tt.Model != model || tt.Tenant != tenant || tt.Finish.Before(from.Add(-slack)) || !tt.Finish.Before(to) {
			continue
		}
		inside := !tt.Finish.Before(from) && tt.Finish.Before(to.Add(-slack))
		f := figuresOf(tt)
		var v val
		switch rec {
		case "braid_llm_success_ratio":
			v = val{f.success, 1}
		case "braid_llm_hallucination_ratio", "braid_llm_jailbreak_ratio", "braid_llm_toxicity_ratio", "braid_llm_pii_ratio":
			kind := strings.TrimSuffix(strings.TrimPrefix(rec, "braid_llm_"), "_ratio")
			x, ok := f.flag[kind]
			if !ok {
				continue
			}
			v = val{x, 1}
		case "braid_llm_pii_leaks":
			if math.IsNaN(f.leak) {
				continue
			}
			v = val{f.leak, 0}
		case "braid_llm_jailbreak_confidence":
			x, ok := f.score["jailbreak"]
			if !ok {
				continue
			}
			v = val{x, 1}
		case "braid_llm_guardrail_bypass_ratio":
			if math.IsNaN(f.checked) {
				continue
			}
			v = val{f.bypass, f.checked}
		case "braid_llm_response_sensitivity":
			x, ok := f.score["sensitivity"]
			if !ok {
				continue
			}
			if inside {
				sureVals = append(sureVals, x)
			} else {
				edgeVals = append(edgeVals, x)
			}
			continue
		}
		if inside {
			sure = append(sure, v)
		} else {
			edge = append(edge, v)
		}
	}
	if rec == "braid_llm_response_sensitivity" {
		q, _ := strconv.ParseFloat(quantile, 64)
		return quantileBounds(sureVals, len(edgeVals), q)
	}
	var num, den float64
	for _, v := range sure {
		num, den = num+v.num, den+v.den
	}
	if rec == "braid_llm_pii_leaks" {
		hi = num
		for _, v := range edge {
			hi += v.num
		}
		return num, hi
	}
	// A mean is lowest with the edge requests below it taken in, smallest
	// first, highest with those above it, largest first (each weighs one).
	nums := make([]float64, 0, len(edge))
	for _, v := range edge {
		nums = append(nums, v.num)
	}
	slices.Sort(nums)
	lnum, lden := num, den
	for _, x := range nums {
		if lden > 0 && x >= lnum/lden {
			break
		}
		lnum, lden = lnum+x, lden+1
	}
	hnum, hden := num, den
	for i := len(nums) - 1; i >= 0; i-- {
		if hden > 0 && nums[i] <= hnum/hden {
			break
		}
		hnum, hden = hnum+nums[i], hden+1
	}
	lo, hi = math.NaN(), math.NaN()
	if lden > 0 {
		lo = lnum / lden
	}
	if hden > 0 {
		hi = hnum / hden
	}
	return lo, hi
}

// quantileBounds: the q-quantile of the sure values plus up to k unknown
// ones lies between the sure values k ranks below and k ranks above.
func quantileBounds(sure []float64, k int, q float64) (lo, hi float64) {
	if len(sure) == 0 {
		return math.Inf(-1), math.Inf(1)
	}
	slices.Sort(sure)
	r := int(math.Ceil(q*float64(len(sure)))) - 1
	at := func(i int) float64 { return sure[max(0, min(len(sure)-1, i))] }
	return at(r - k - 1), at(r + k + 1)
}

// scrapeFamilies reads /metrics as metric families.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

// labelValue is the value of label name.
func labelValue(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// labelKey renders the labels but skip as "k=v,…" (sorted).
func labelKey(ls []*dto.LabelPair, skip string) string {
	var out []string
	for _, l := range ls {
		if l.GetName() != skip {
			out = append(out, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
