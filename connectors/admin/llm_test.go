package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/braidlabs/braid/connectors/alertmanager/amtest"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/operators/llmmetrics"
)

// llmFixture is a registry as a job builds it, every view populated: the
// engine's and the stage's metrics, checkpoint histograms, the Go and
// process collectors, and a Recorder fed with traces whose ids are kept.
type llmFixture struct {
	reg *prometheus.Registry
	rec *llmmetrics.Recorder
	ids map[string]bool // trace ids observed
}

func newLLMFixture(t *testing.T) *llmFixture {
	t.Helper()
	rec, err := llmmetrics.New(llmmetrics.Config{MaxTokensPerSecond: map[string]float64{"llama-3-8b": 5000, "qwen-7b": 4000}})
	if err != nil {
		t.Fatal(err)
	}
	f := &llmFixture{reg: prometheus.NewPedanticRegistry(), rec: rec, ids: map[string]bool{}}
	f.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cps, err := NewCheckpoints(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	cps.Observe(engine.CheckpointInfo{Pause: time.Millisecond, Commit: 2 * time.Millisecond, Committed: true, Tasks: 1})
	eng := &fakeEngine{}
	eng.stats.RecordsIn.Store(1000)
	eng.stats.Checkpoints.Store(1)
	eng.setTasks(engine.TaskStat{Partition: 0, Watermark: time.Now().UnixNano(), StateBytes: 1 << 20})
	// The job's own table, over a fuse stage that derives the LLM metrics.
	st, err := fuse.New(fuse.Config{Partitions: 1, IdleGap: time.Second, AllowedLateness: 10 * time.Second,
		ResourcesTopic: "braid.resources", ResourceIdleness: time.Second, LLM: rec})
	if err != nil {
		t.Fatal(err)
	}
	col, err := NewCollector(CollectorConfig{
		Engine:  eng,
		Metrics: append(StageMetrics(st), EngineMetrics(eng)...),
		Lag:     fakeLag{at: time.Now(), lags: []PartitionLag{{Topic: "otlp_spans", Partition: 0, Records: 3}}},
		LLM:     rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.reg.MustRegister(col)
	// The built-in recording rules' gauges, one series each.
	recorded := NewRecordedCollector(RecordedConfig{})
	f.reg.MustRegister(recorded)
	for _, r := range alerts.DefaultRules() {
		if r.Record == "" {
			continue
		}
		labels := map[string]string{"model": "llama-3-8b", "tenant": "acme"}
		for k, v := range r.Labels {
			labels[k] = v
		}
		recorded.Set(RecordedSample{Record: r.Record, Labels: labels, Value: 0.01, WindowEnd: time.Now().UnixNano(), Window: r.Window})
	}

	now := time.Now().UnixNano()
	for i := range 200 {
		id := fmt.Sprintf("%032x", 0xb7a1d0000+i)
		f.ids[id] = true
		ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
		rec.ObserveTrace(llmmetrics.Trace{
			Model: []string{"llama-3-8b", "qwen-7b"}[i%2], Instance: "vllm-" + strconv.Itoa(i%3), TraceID: id,
			TTFT: ms(20 + float64(i*i%4000)), TPOT: ms(5 + float64(i%90)), Queue: ms(float64(i % 50)),
			Prefill: ms(10 + float64(i%300)), Decode: ms(500 + float64(i*37%20000)), E2E: ms(600 + float64(i*41%30000)),
			InputTokens: int64(100 + i*i*7%20000), OutputTokens: 128, BatchSize: int64(1 + i%16),
			Tenant: []string{"acme", "globex", ""}[i%3], Error: i%11 == 0, Blocked: i%7 == 0, GuardrailChecked: i%2 == 0, PIILeak: i%13 == 0,
			Verdicts:      []llmmetrics.Verdict{{Kind: "pii", Decision: []string{"pass", "flag", ""}[i%3]}},
			Layers:        []llmmetrics.Layer{{Index: int64(i % 4), Count: 127, Total: ms(40)}},
			CacheHitRatio: float64(i%10) / 10, HasCacheHit: true, Time: now - int64(200-i)*int64(time.Millisecond),
		})
	}
	rec.ObserveIncident("KV_WRITE_AFTER_FREE")
	rec.ObserveIncident("KV_WRITE_AFTER_FREE")
	rec.ObserveIncident("CROSS_REQUEST_READ")
	rec.SetKV("GPU-0", "vllm-0", 0.82, 0.12, 0.91)
	rec.SetKV("GPU-1", "vllm-1", 0.40, 0.45, 0.62)
	return f
}

// scrape serves /metrics of a server over the registry, with the given
// Accept header.
func (f *llmFixture) scrape(t *testing.T, accept string) (string, string) {
	t.Helper()
	srv, err := New(Config{Addr: "127.0.0.1:0", Gatherer: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	srv.srv.Handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", rec.Code, rec.Body)
	}
	return rec.Header().Get("Content-Type"), rec.Body.String()
}

const openMetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8"

var exemplarRE = regexp.MustCompile(`^(braid_llm_[a-z0-9_]+_bucket)\{[^}]*le="([^"]+)"[^}]*\} \d+ # \{trace_id="([0-9a-f]{32})"\} ([0-9.e+-]+) ([0-9.e+]+)$`)

// TestLLMMetricsOpenMetricsExemplars: the OpenMetrics exposition carries
// one exemplar per non-empty bucket, each a trace id the Recorder observed,
// with a value inside its bucket; the text exposition carries the same
// series without exemplars.
func TestLLMMetricsOpenMetricsExemplars(t *testing.T) {
	f := newLLMFixture(t)
	ct, body := f.scrape(t, openMetrics)
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", ct)
	}
	exemplars := map[string]int{}
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.Contains(line, " # {") {
			continue
		}
		m := exemplarRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("exemplar line not understood: %q", line)
			continue
		}
		if !f.ids[m[3]] {
			t.Errorf("exemplar trace id %s was never observed", m[3])
		}
		v, _ := strconv.ParseFloat(m[4], 64)
		le, _ := strconv.ParseFloat(m[2], 64)
		if m[2] == "+Inf" {
			le = math.Inf(1)
		}
		if !(v <= le) {
			t.Errorf("%s: exemplar value %v above le=%v", m[1], v, le)
		}
		exemplars[m[1]]++
	}
	for _, name := range []string{"braid_llm_ttft_seconds_bucket", "braid_llm_tpot_seconds_bucket", "braid_llm_queue_seconds_bucket",
		"braid_llm_prefill_seconds_bucket", "braid_llm_decode_seconds_bucket", "braid_llm_e2e_seconds_bucket",
		"braid_llm_layer_decode_seconds_bucket", "braid_llm_cache_hit_ratio_bucket",
		"braid_llm_tpot_by_prompt_seconds_bucket", "braid_llm_decode_tokens_per_second_bucket"} {
		if exemplars[name] == 0 {
			t.Errorf("%s has no exemplars", name)
		}
	}
	for _, want := range []string{
		`braid_pollution_incidents_total{pattern="KV_WRITE_AFTER_FREE"} 2`,
		`braid_pollution_incidents_total{pattern="CROSS_REQUEST_READ"} 1`,
		`braid_kv_utilisation_ratio{gpu="GPU-0",instance="vllm-0"} 0.82`,
		`braid_kv_fragmentation_ratio{gpu="GPU-1",instance="vllm-1"} 0.45`,
		`braid_kv_health_score{gpu="GPU-1",instance="vllm-1"} 0.62`,
		`braid_llm_series_overflow_total{family="series"} 0`,
		"# TYPE braid_llm_ttft_seconds histogram",
		"# TYPE braid_llm_tpot_by_prompt_seconds histogram",
		"# TYPE braid_llm_requests counter",
		`braid_llm_requests_total{model="llama-3-8b",outcome="success",tenant="unknown"}`,
		`braid_llm_verdicts_total{decision="pass",kind="pii",model="qwen-7b",tenant="acme"}`,
		`braid_llm_series_overflow_total{family="verdicts"} 0`,
		`llm_batch_efficiency_ratio{instance="vllm-0",model="llama-3-8b"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("OpenMetrics exposition lacks %q", want)
		}
	}

	_, text := f.scrape(t, "")
	if strings.Contains(text, " # {") {
		t.Errorf("text exposition carries exemplars")
	}
	if !strings.Contains(text, `braid_llm_ttft_seconds_bucket{instance="vllm-0",model="llama-3-8b",le="+Inf"}`) {
		t.Errorf("text exposition lacks the TTFT histogram")
	}
}

// TestLLMMetricsMatchRecorder: the exported histograms are the Recorder's
// (cumulative buckets, count, sum), for every series.
func TestLLMMetricsMatchRecorder(t *testing.T) {
	f := newLLMFixture(t)
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	names := [llmmetrics.NumLatencies]string{"braid_llm_ttft_seconds", "braid_llm_tpot_seconds", "braid_llm_queue_seconds",
		"braid_llm_prefill_seconds", "braid_llm_decode_seconds", "braid_llm_e2e_seconds"}
	snap := f.rec.Snapshot()
	for l, name := range names {
		mf := byName[name]
		if mf == nil {
			t.Fatalf("%s not gathered", name)
		}
		if len(mf.Metric) != len(snap.Series) {
			t.Fatalf("%s: %d series, want %d", name, len(mf.Metric), len(snap.Series))
		}
		for _, m := range mf.Metric {
			lbl := map[string]string{}
			for _, p := range m.Label {
				lbl[p.GetName()] = p.GetValue()
			}
			i := slices.IndexFunc(snap.Series, func(s llmmetrics.Series) bool {
				return s.Model == lbl["model"] && s.Instance == lbl["instance"]
			})
			if i < 0 {
				t.Fatalf("%s: unknown series %v", name, lbl)
			}
			h := snap.Series[i].Latency[l]
			// An independent cumulative count: observations at or below each bound.
			var cum uint64
			got := m.Histogram.Bucket
			for j, b := range h.Bounds {
				cum += h.Counts[j]
				if got[j].GetUpperBound() != b || got[j].GetCumulativeCount() != cum {
					t.Errorf("%s%v bucket %d: le=%v %d, want le=%v %d", name, lbl, j, got[j].GetUpperBound(), got[j].GetCumulativeCount(), b, cum)
				}
			}
			if m.Histogram.GetSampleCount() != h.Count || m.Histogram.GetSampleSum() != h.Sum {
				t.Errorf("%s%v: count/sum %d/%v, want %d/%v", name, lbl, m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum(), h.Count, h.Sum)
			}
		}
	}
	if byName["braid_pollution_incidents_total"].Metric[0].Label[0].GetName() != "pattern" {
		t.Errorf("incidents are not by pattern")
	}
}

// TestLLMCollectorAlone: a Recorder with no peak exports no efficiency, and
// the collector can be registered on its own.
func TestLLMCollectorAlone(t *testing.T) {
	rec, err := llmmetrics.New(llmmetrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec.ObserveTrace(llmmetrics.Trace{Model: "m", Instance: "i", TTFT: time.Second, Decode: time.Second, OutputTokens: 9})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewLLMCollector(rec))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	// No input tokens: no context-length curve; every request is counted.
	if want := "braid_llm_decode_seconds braid_llm_guardrail_bypass_total braid_llm_guardrail_checked_total braid_llm_pii_leaks_total " +
		"braid_llm_requests_total braid_llm_series_overflow_total braid_llm_ttft_seconds"; strings.Join(names, " ") != want {
		t.Errorf("gathered %v, want %s", names, want)
	}
}

// prometheusTool returns the path of the named Prometheus binary, or ends
// the test: it fails in CI (CI set), so that CI never passes by skipping,
// and is skipped elsewhere.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/" + name, name} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	amtest.Unavailable(t, "%s not found (Debian: apt-get install -y prometheus)", name)
	return ""
}

// TestPromtoolCheckMetrics: `promtool check metrics` accepts braid's
// /metrics, LLM metrics populated.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := prometheusTool(t, "promtool")
	f := newLLMFixture(t)
	_, body := f.scrape(t, "")
	if !strings.Contains(body, "braid_llm_ttft_seconds_bucket") || !strings.Contains(body, "braid_kv_health_score") {
		t.Fatal("LLM metrics not populated")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestPrometheusScrapesExemplars runs a real Prometheus with
// deploy/local/prometheus.sh, on a port and data dir of its own, scraping
// an admin server over a populated Recorder, and waits until its HTTP API
// shows braid's TTFT histogram and exemplars carrying observed trace ids.
func TestPrometheusScrapesExemplars(t *testing.T) {
	prometheusTool(t, "prometheus")
	f := newLLMFixture(t)
	srv, err := New(Config{Addr: "127.0.0.1:0", Gatherer: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("admin server: %v", err)
		}
	})

	base := amtest.StartPrometheus(t, srv.Addr().String())
	api := func(path string, q url.Values, v any) error { return amtest.PromAPI(base, path, q, v) }
	type sample struct {
		Metric map[string]string `json:"metric"`
	}
	type exemplarSeries struct {
		SeriesLabels map[string]string `json:"seriesLabels"`
		Exemplars    []struct {
			Labels map[string]string `json:"labels"`
			Value  string            `json:"value"`
		} `json:"exemplars"`
	}
	var series []sample
	var exemplars []exemplarSeries
	deadline := time.Now().Add(60 * time.Second)
	for {
		var qr struct {
			Data struct {
				Result []sample `json:"result"`
			} `json:"data"`
		}
		err := api("/api/v1/query", url.Values{"query": {"braid_llm_ttft_seconds_bucket"}}, &qr)
		series = qr.Data.Result
		if err == nil && len(series) > 0 {
			var er struct {
				Data []exemplarSeries `json:"data"`
			}
			now := time.Now()
			err = api("/api/v1/query_exemplars", url.Values{"query": {"braid_llm_ttft_seconds_bucket"},
				"start": {strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)}, "end": {strconv.FormatInt(now.Add(time.Minute).Unix(), 10)}}, &er)
			exemplars = er.Data
			if err == nil && len(exemplars) > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus shows %d TTFT bucket series and no exemplars after 60s (last error: %v)", len(series), err)
		}
		time.Sleep(200 * time.Millisecond) // polling Prometheus's API, bounded by the deadline
	}

	// Every (model, instance) and bucket bound is a series.
	want := len(f.rec.Snapshot().Series) * (len(llmmetrics.LatencyBuckets) + 1)
	if len(series) != want {
		t.Errorf("Prometheus has %d TTFT bucket series, want %d", len(series), want)
	}
	for _, s := range series {
		// honor_labels: the serving instance, not the target's address.
		if s.Metric["job"] != "braid" || s.Metric["model"] == "" || !strings.HasPrefix(s.Metric["instance"], "vllm-") || s.Metric["le"] == "" {
			t.Errorf("series labels %v", s.Metric)
		}
	}
	n := 0
	for _, d := range exemplars {
		for _, e := range d.Exemplars {
			n++
			if !f.ids[e.Labels["trace_id"]] {
				t.Errorf("exemplar %v of %v: trace_id was never observed", e.Labels, d.SeriesLabels)
			}
		}
	}
	if n == 0 {
		t.Fatal("no exemplars")
	}
	t.Logf("Prometheus: %d TTFT bucket series, %d exemplars over %d series, every trace_id observed", len(series), n, len(exemplars))

	// Every expression of the Grafana dashboard is valid PromQL that
	// Prometheus answers with data from braid (rates need two scrapes); an
	// expression ending in a filter ("> 0", for annotations) must have
	// data without it.
	exprs := dashboardExprs(t)
	filter := regexp.MustCompile(`\s*>\s*0$`)
	var pending []string
	for _, expr := range exprs {
		var qr struct{}
		if err := api("/api/v1/query", url.Values{"query": {expr}}, &qr); err != nil {
			t.Fatalf("dashboard expression %s: %v", expr, err)
		}
		pending = append(pending, filter.ReplaceAllString(expr, ""))
	}
	deadline = time.Now().Add(30 * time.Second)
	for len(pending) > 0 {
		var next []string
		for _, expr := range pending {
			var qr struct {
				Status string `json:"status"`
				Data   struct {
					Result []json.RawMessage `json:"result"`
				} `json:"data"`
			}
			if err := api("/api/v1/query", url.Values{"query": {expr}}, &qr); err != nil {
				t.Fatalf("dashboard expression %s: %v", expr, err)
			}
			if len(qr.Data.Result) == 0 {
				next = append(next, expr)
			}
		}
		pending = next
		if len(pending) > 0 && time.Now().After(deadline) {
			t.Fatalf("dashboard expressions without data after 30s: %q", pending)
		}
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond) // polling Prometheus's API, bounded by the deadline
		}
	}
	t.Logf("Prometheus answers all %d dashboard expressions with data", len(exprs))
}

// scrapeSamples serves /metrics (text exposition) of a registry holding
// only an LLMCollector of rec and returns its samples by series: the line
// before the value, labels as exposed (sorted by name).
func scrapeSamples(t *testing.T, rec *llmmetrics.Recorder) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewLLMCollector(rec))
	f := &llmFixture{reg: reg, rec: rec}
	_, body := f.scrape(t, "")
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("sample not understood: %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// TestLLMQualityCountersExposition: the exposed request, guardrail and
// verdict counters are the counts of the fed traces, computed here from
// the traces (outcome error if the caller said so, else blocked if a
// verdict blocked it, else success; empty tenant and decision "unknown").
func TestLLMQualityCountersExposition(t *testing.T) {
	rec, err := llmmetrics.New(llmmetrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	unk := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	kinds := []string{"pii", "jailbreak", "toxicity", "hallucination"}
	decisions := []string{"pass", "flag", "block", "bypass", ""}
	for i := range 500 {
		tr := llmmetrics.Trace{Model: []string{"llama", "qwen"}[i%2], Tenant: []string{"acme", "globex", ""}[i%5%3],
			Error: i%9 == 0, Blocked: i%4 == 0, GuardrailChecked: i%3 == 0, GuardrailBypass: i%17 == 0, PIILeak: i%19 == 0}
		for j := range i % 3 {
			tr.Verdicts = append(tr.Verdicts, llmmetrics.Verdict{Kind: kinds[(i+j)%len(kinds)], Decision: decisions[(i*7+j)%len(decisions)]})
		}
		rec.ObserveTrace(tr)
		m, tn := tr.Model, unk(tr.Tenant)
		outcome := "success"
		if tr.Error {
			outcome = "error"
		} else if tr.Blocked {
			outcome = "blocked"
		}
		for _, o := range []string{"success", "error", "blocked"} {
			want[fmt.Sprintf(`braid_llm_requests_total{model=%q,outcome=%q,tenant=%q}`, m, o, tn)] += 0 // every outcome is exposed
		}
		want[fmt.Sprintf(`braid_llm_requests_total{model=%q,outcome=%q,tenant=%q}`, m, outcome, tn)]++
		for _, c := range []struct {
			name string
			on   bool
		}{{"braid_llm_guardrail_checked_total", tr.GuardrailChecked}, {"braid_llm_guardrail_bypass_total", tr.GuardrailBypass},
			{"braid_llm_pii_leaks_total", tr.PIILeak}} {
			k := fmt.Sprintf(`%s{model=%q,tenant=%q}`, c.name, m, tn)
			want[k] += 0
			if c.on {
				want[k]++
			}
		}
		for _, v := range tr.Verdicts {
			want[fmt.Sprintf(`braid_llm_verdicts_total{decision=%q,kind=%q,model=%q,tenant=%q}`, unk(v.Decision), v.Kind, m, tn)]++
		}
	}
	got := scrapeSamples(t, rec)
	n := 0
	for k, v := range got {
		if !strings.HasPrefix(k, "braid_llm_requests_total") && !strings.HasPrefix(k, "braid_llm_verdicts_total") &&
			!strings.HasPrefix(k, "braid_llm_guardrail_") && !strings.HasPrefix(k, "braid_llm_pii_leaks_total") {
			continue
		}
		n++
		if w, ok := want[k]; !ok || w != v {
			t.Errorf("%s %v, want %v (known: %v)", k, v, w, ok)
		}
	}
	if n != len(want) {
		t.Errorf("%d counter samples exposed, want %d", n, len(want))
	}
	if got[`braid_llm_requests_total{model="llama",outcome="blocked",tenant="acme"}`] == 0 {
		t.Errorf("no blocked request exposed: the fixture does not exercise the outcomes")
	}
}

// TestLLMContextLengthCurveExported: the TPOT and decode-throughput
// histograms by prompt length hold, per bucket, the traces whose input
// tokens and figures fall into it, computed here by scanning the bounds.
func TestLLMContextLengthCurveExported(t *testing.T) {
	rec, err := llmmetrics.New(llmmetrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// prompt bucket label of n tokens: the smallest power of two >= n
	// among 256..131072, else +Inf.
	promptLabel := func(n int64) string {
		for b := int64(256); b <= 131072; b *= 2 {
			if n <= b {
				return strconv.FormatInt(b, 10)
			}
		}
		return "+Inf"
	}
	type key struct{ name, model, prompt string }
	type ref struct {
		le  []float64
		obs []float64
	}
	want := map[key]*ref{}
	add := func(k key, bounds []float64, v float64) {
		if want[k] == nil {
			want[k] = &ref{le: bounds}
		}
		want[k].obs = append(want[k].obs, v)
	}
	for i := range 400 {
		in := int64(1) << (i % 19) // 1 .. 262144 tokens
		in += int64(i % 3)         // bounds and just above them
		out := int64(2 + i*13%700)
		decode := time.Duration(1+i*7919%5000) * time.Millisecond
		tpot := decode / time.Duration(out-1)
		tr := llmmetrics.Trace{Model: []string{"llama", "qwen"}[i%2], Instance: "i", TraceID: fmt.Sprintf("%032x", i+1),
			InputTokens: in, OutputTokens: out, Decode: decode, TPOT: tpot}
		rec.ObserveTrace(tr)
		add(key{"braid_llm_tpot_by_prompt_seconds", tr.Model, promptLabel(in)}, llmmetrics.LatencyBuckets, tpot.Seconds())
		add(key{"braid_llm_decode_tokens_per_second", tr.Model, promptLabel(in)}, llmmetrics.ThroughputBuckets, float64(out-1)/decode.Seconds())
	}
	got := scrapeSamples(t, rec)
	for k, r := range want {
		var sum float64
		for _, v := range r.obs {
			sum += v
		}
		lbl := fmt.Sprintf(`model=%q,prompt_tokens=%q`, k.model, k.prompt)
		for _, le := range r.le {
			var cum float64
			for _, v := range r.obs {
				if v <= le {
					cum++
				}
			}
			s := fmt.Sprintf(`%s_bucket{%s,le="%s"}`, k.name, lbl, strconv.FormatFloat(le, 'g', -1, 64))
			if g, ok := got[s]; !ok || g != cum {
				t.Errorf("%s %v (exposed: %v), want %v", s, g, ok, cum)
			}
		}
		if s := fmt.Sprintf(`%s_bucket{%s,le="+Inf"}`, k.name, lbl); got[s] != float64(len(r.obs)) {
			t.Errorf("%s %v, want %d", s, got[s], len(r.obs))
		}
		if s := fmt.Sprintf(`%s_count{%s}`, k.name, lbl); got[s] != float64(len(r.obs)) {
			t.Errorf("%s %v, want %d", s, got[s], len(r.obs))
		}
		if s := fmt.Sprintf(`%s_sum{%s}`, k.name, lbl); math.Abs(got[s]-sum) > 1e-9*sum {
			t.Errorf("%s %v, want %v", s, got[s], sum)
		}
	}
	var series int
	for s := range got {
		if strings.HasPrefix(s, "braid_llm_tpot_by_prompt_seconds_count") || strings.HasPrefix(s, "braid_llm_decode_tokens_per_second_count") {
			series++
		}
	}
	// 2 models × 11 prompt buckets × 2 histograms.
	if series != len(want) || len(want) != 44 {
		t.Errorf("%d histograms exposed, %d expected (want 44)", series, len(want))
	}
}

// TestLLMQualityOverflow: beyond MaxSeries label sets, the context-length
// curve, the request counters and the verdict counters go to "other" and
// the overflow counter of each family says how many observations did.
func TestLLMQualityOverflow(t *testing.T) {
	rec, err := llmmetrics.New(llmmetrics.Config{MaxSeries: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		rec.ObserveTrace(llmmetrics.Trace{Model: "m", Tenant: "t" + strconv.Itoa(i), InputTokens: int64(300) << i, TPOT: 10 * time.Millisecond,
			Blocked: true, PIILeak: true, Verdicts: []llmmetrics.Verdict{{Kind: "pii", Decision: "block"}}})
	}
	got := scrapeSamples(t, rec)
	for s, v := range map[string]float64{
		`braid_llm_requests_total{model="m",outcome="blocked",tenant="t0"}`:                    1,
		`braid_llm_requests_total{model="m",outcome="blocked",tenant="t1"}`:                    1,
		`braid_llm_requests_total{model="other",outcome="blocked",tenant="other"}`:             4,
		`braid_llm_requests_total{model="other",outcome="success",tenant="other"}`:             0,
		`braid_llm_pii_leaks_total{model="other",tenant="other"}`:                              4,
		`braid_llm_verdicts_total{decision="block",kind="pii",model="m",tenant="t1"}`:          1,
		`braid_llm_verdicts_total{decision="other",kind="other",model="other",tenant="other"}`: 4,
		`braid_llm_tpot_by_prompt_seconds_count{model="m",prompt_tokens="512"}`:                1,
		`braid_llm_tpot_by_prompt_seconds_count{model="m",prompt_tokens="1024"}`:               1,
		`braid_llm_tpot_by_prompt_seconds_count{model="other",prompt_tokens="other"}`:          4,
		`braid_llm_series_overflow_total{family="prompt"}`:                                     4,
		`braid_llm_series_overflow_total{family="requests"}`:                                   4,
		`braid_llm_series_overflow_total{family="verdicts"}`:                                   4,
		`braid_llm_series_overflow_total{family="series"}`:                                     0,
	} {
		if g, ok := got[s]; !ok || g != v {
			t.Errorf("%s = %v (exposed: %v), want %v", s, g, ok, v)
		}
	}
	if _, ok := got[`braid_llm_requests_total{model="m",outcome="blocked",tenant="t2"}`]; ok {
		t.Errorf("a third tenant has its own series beyond MaxSeries 2")
	}
}
