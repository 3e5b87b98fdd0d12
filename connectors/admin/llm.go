package admin

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/operators/llmmetrics"
)

// The LLM metrics exported from an llmmetrics.Recorder.
var (
	descLatency = [llmmetrics.NumLatencies]*prometheus.Desc{
		llmmetrics.TTFT: desc("braid_llm_ttft_seconds",
			"Time to first token of the requests fused, seconds; exemplars carry the trace_id.", "model", "instance"),
		llmmetrics.TPOT: desc("braid_llm_tpot_seconds",
			"Time per output token after the first (decode time / (output tokens - 1)), seconds; exemplars carry the trace_id.", "model", "instance"),
		llmmetrics.Queue: desc("braid_llm_queue_seconds",
			"Time the requests waited in the serving engine's queue, seconds; exemplars carry the trace_id.", "model", "instance"),
		llmmetrics.Prefill: desc("braid_llm_prefill_seconds",
			"Prefill time of the requests, seconds; exemplars carry the trace_id.", "model", "instance"),
		llmmetrics.Decode: desc("braid_llm_decode_seconds",
			"Decode time of the requests, seconds; exemplars carry the trace_id.", "model", "instance"),
		llmmetrics.E2E: desc("braid_llm_e2e_seconds",
			"End-to-end latency of the requests, seconds; exemplars carry the trace_id.", "model", "instance"),
	}
	descLayerDecode = desc("braid_llm_layer_decode_seconds",
		"Mean duration of a request's decode-layer spans of one layer, seconds, one observation per request and layer; exemplars carry the trace_id.",
		"model", "layer")
	descCacheHit = desc("braid_llm_cache_hit_ratio",
		"KV-cache hit ratio of the requests (mean over their detail spans), 0 to 1; exemplars carry the trace_id.", "model", "instance")
	descEfficiency = desc("llm_batch_efficiency_ratio",
		"Batch efficiency of the latest request with one: output tokens per second of decode times the batch size, "+
			"over the model's configured theoretical peak tokens per second.", "model", "instance")
	descKVUtilisation = desc("braid_kv_utilisation_ratio",
		"KV-cache utilisation, 0 to 1, as last reported.", "gpu", "instance")
	descKVFragmentation = desc("braid_kv_fragmentation_ratio",
		"KV-cache fragmentation, 0 to 1, as last reported.", "gpu", "instance")
	descKVHealth = desc("braid_kv_health_score",
		"KV-cache health score, 0 (unhealthy) to 1 (healthy), as last reported.", "gpu", "instance")
	descIncidentsByPattern = desc("braid_pollution_incidents_total",
		"KV-cache pollution incidents opened (root causes found), by the root's pattern.", "pattern")
	descTPOTByPrompt = desc("braid_llm_tpot_by_prompt_seconds",
		"Time per output token after the first (decode time / (output tokens - 1)) by prompt length, seconds; prompt_tokens is the upper bound "+
			"of the request's input tokens (powers of two 256 to 131072, or +Inf); exemplars carry the trace_id.", "model", "prompt_tokens")
	descDecodeThroughput = desc("braid_llm_decode_tokens_per_second",
		"Decode throughput of the requests by prompt length, (output tokens - 1) per second of decode time; prompt_tokens is the upper bound "+
			"of the request's input tokens (powers of two 256 to 131072, or +Inf); exemplars carry the trace_id.", "model", "prompt_tokens")
	descRequests = desc("braid_llm_requests_total",
		"Requests fused, by outcome: error (a span has status ERROR), blocked (a checker blocked it, no error), success (the others).",
		"model", "tenant", "outcome")
	descVerdicts = desc("braid_llm_verdicts_total",
		"Verdicts of quality and safety checkers on the requests fused, by kind and decision (pass, flag, block, bypass, unknown).",
		"model", "tenant", "kind", "decision")
	descGuardrailChecked = desc("braid_llm_guardrail_checked_total",
		"Requests fused whose prompt a guardrail checked (a verdict of stage input).", "model", "tenant")
	descGuardrailBypass = desc("braid_llm_guardrail_bypass_total",
		"Requests fused that got through a guardrail they should not have (a bypass verdict, or an input check passed what an output check flagged).",
		"model", "tenant")
	descPIILeaks = desc("braid_llm_pii_leaks_total",
		"Requests fused whose response a pii check flagged or blocked.", "model", "tenant")
	descLLMOverflow = desc("braid_llm_series_overflow_total",
		`Observations recorded under the label set "other" because their family already held its maximum number of label sets.`,
		"family")
)

// LLMCollector is a prometheus.Collector that exports an
// llmmetrics.Recorder at every scrape: latency, layer decode time and
// cache-hit histograms with the latest exemplar of each bucket (label
// trace_id), the context-length curve (TPOT and decode throughput by
// prompt length), batch efficiency, KV-cache gauges, incidents by pattern,
// requests by outcome, guardrail and verdict counters by tenant, and the
// Recorder's overflow counters. Every (model, tenant) seen exports all
// three outcomes and the guardrail counters, zero included, so that ratios
// of their rates have a denominator. Exemplars appear in the OpenMetrics
// exposition, which the admin server serves when asked for it. Safe for
// concurrent scrapes.
//
// It exports braid_pollution_incidents_total by pattern, so it must not be
// registered next to a Collector that exports the stage's unlabelled count:
// set CollectorConfig.LLM instead, which makes the Collector export both.
type LLMCollector struct {
	rec *llmmetrics.Recorder
}

// NewLLMCollector returns a collector of rec, which must not be nil.
func NewLLMCollector(rec *llmmetrics.Recorder) *LLMCollector { return &LLMCollector{rec: rec} }

// Describe sends the descriptors of every metric the collector may export.
func (c *LLMCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descLatency {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descLayerDecode, descCacheHit, descKVUtilisation, descKVFragmentation,
		descKVHealth, descIncidentsByPattern, descTPOTByPrompt, descDecodeThroughput, descRequests, descVerdicts,
		descGuardrailChecked, descGuardrailBypass, descPIILeaks, descLLMOverflow} {
		ch <- d
	}
	if c.rec.HasEfficiency() {
		ch <- descEfficiency
	}
}

// Collect sends the Recorder's current figures.
func (c *LLMCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.rec.Snapshot()
	for i := range snap.Series {
		s := &snap.Series[i]
		for l, h := range s.Latency {
			if h.Count > 0 {
				ch <- histogram(descLatency[l], h, s.Model, s.Instance)
			}
		}
		if s.CacheHit.Count > 0 {
			ch <- histogram(descCacheHit, s.CacheHit, s.Model, s.Instance)
		}
		if s.HasEfficiency {
			ch <- prometheus.MustNewConstMetric(descEfficiency, prometheus.GaugeValue, s.Efficiency, s.Model, s.Instance)
		}
	}
	for _, l := range snap.Layers {
		ch <- histogram(descLayerDecode, l.Hist, l.Model, l.Layer)
	}
	for _, kv := range snap.KV {
		for _, g := range []struct {
			d *prometheus.Desc
			v float64
		}{{descKVUtilisation, kv.Utilisation}, {descKVFragmentation, kv.Fragmentation}, {descKVHealth, kv.Health}} {
			if !math.IsNaN(g.v) { // never set (SetKVFigure)
				ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v, kv.GPU, kv.Instance)
			}
		}
	}
	for _, in := range snap.Incidents {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(descIncidentsByPattern, prometheus.CounterValue,
			float64(in.Count), in.Created, in.Pattern)
	}
	for _, p := range snap.Prompts {
		if p.TPOT.Count > 0 {
			ch <- histogram(descTPOTByPrompt, p.TPOT, p.Model, p.PromptTokens)
		}
		if p.Throughput.Count > 0 {
			ch <- histogram(descDecodeThroughput, p.Throughput, p.Model, p.PromptTokens)
		}
	}
	for _, q := range snap.Requests {
		for _, c := range []struct {
			d      *prometheus.Desc
			n      uint64
			labels []string
		}{
			{descRequests, q.Success, []string{q.Model, q.Tenant, llmmetrics.OutcomeSuccess}},
			{descRequests, q.Error, []string{q.Model, q.Tenant, llmmetrics.OutcomeError}},
			{descRequests, q.Blocked, []string{q.Model, q.Tenant, llmmetrics.OutcomeBlocked}},
			{descGuardrailChecked, q.GuardrailChecked, []string{q.Model, q.Tenant}},
			{descGuardrailBypass, q.GuardrailBypass, []string{q.Model, q.Tenant}},
			{descPIILeaks, q.PIILeaks, []string{q.Model, q.Tenant}},
		} {
			ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(c.d, prometheus.CounterValue, float64(c.n), q.Created, c.labels...)
		}
	}
	for _, v := range snap.Verdicts {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(descVerdicts, prometheus.CounterValue, float64(v.Count), v.Created,
			v.Model, v.Tenant, v.Kind, v.Decision)
	}
	for _, o := range snap.Overflow {
		ch <- prometheus.MustNewConstMetric(descLLMOverflow, prometheus.CounterValue, float64(o.Count), o.Family)
	}
}

// histogram is h as a constant Prometheus histogram with its exemplars.
// A Recorder's histogram has fixed bounds and counts that only grow, and
// its label values are label values of the Recorder (never from a
// descriptor's mismatch), so the Must constructors cannot fail.
func histogram(d *prometheus.Desc, h llmmetrics.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, c := range h.Cumulative() {
		buckets[h.Bounds[i]] = c
	}
	m := prometheus.MustNewConstHistogramWithCreatedTimestamp(d, h.Count, h.Sum, buckets, h.Created, labels...)
	var ex []prometheus.Exemplar
	for _, e := range h.Exemplars {
		if e.TraceID != "" && validTraceID(e.TraceID) {
			ex = append(ex, prometheus.Exemplar{Value: e.Value, Labels: prometheus.Labels{"trace_id": e.TraceID}, Timestamp: e.Time})
		}
	}
	if len(ex) == 0 {
		return m
	}
	wm, err := prometheus.NewMetricWithExemplars(m, ex...)
	if err != nil {
		return m
	}
	return wm
}

// validTraceID reports whether id fits an exemplar label: at most 64 bytes
// of valid UTF-8 printable ASCII (a trace id is 32 hex digits), leaving room
// under OpenMetrics's 128-rune limit for the label set.
func validTraceID(id string) bool {
	if len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
