package llmmetrics

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/braidlabs/braid/operators/braidpb"
)

// Other is the label value that observations beyond Config.MaxSeries go to.
const Other = "other"

// DefaultMaxSeries is the default of Config.MaxSeries.
const DefaultMaxSeries = 2000

// LatencyBuckets are the upper bounds, in seconds, of the latency
// histograms: 5 ms to 120 s, dense where TPOT (tens of milliseconds) and
// TTFT (hundreds of milliseconds to seconds) fall. Observations above the
// last go to the +Inf bucket.
var LatencyBuckets = []float64{
	0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
	1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120,
}

// ThroughputBuckets are the upper bounds, in output tokens per second, of
// the per-request decode throughput histogram: 1 to 2000, dense over the
// 10 to 200 tokens per second a single sequence decodes at.
var ThroughputBuckets = []float64{
	1, 2, 5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000, 2000,
}

// PromptBuckets are the upper bounds, in input tokens, of the prompt-length
// buckets of the context-length curve: powers of two from 256 to 131072. A
// request with n input tokens falls into the first bound ≥ n (label
// "1024" holds 513 to 1024 tokens, "256" holds 1 to 256); above the last it
// falls into "+Inf". Shared, do not modify.
var PromptBuckets = []int64{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}

// promptLabels are the label values of PromptBuckets, then "+Inf".
var promptLabels = func() []string {
	out := make([]string, 0, len(PromptBuckets)+1)
	for _, b := range PromptBuckets {
		out = append(out, strconv.FormatInt(b, 10))
	}
	return append(out, "+Inf")
}()

// promptBucket is the index into promptLabels of a prompt of n > 0 tokens.
func promptBucket(n int64) int {
	i, _ := slices.BinarySearch(PromptBuckets, n) // first bound >= n
	return i
}

// Request outcomes, the outcome label of the request counters.
const (
	OutcomeSuccess = "success"
	OutcomeError   = "error"
	OutcomeBlocked = "blocked"
)

// RatioBuckets are the upper bounds of the cache-hit ratio histogram.
var RatioBuckets = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1}

// Config configures a Recorder.
type Config struct {
	// MaxSeries bounds the label sets of each family (latency per model and
	// instance, layer decode time per model and layer, incidents per
	// pattern, KV gauges per GPU and instance, the context-length curve
	// per model and prompt bucket, request counters per model and tenant,
	// verdict counters per model, tenant, kind and decision). Beyond it, observations go
	// to the "other" label set and are counted as overflow. Default 2000;
	// negative is invalid.
	MaxSeries int `yaml:"max_series"`
	// MaxTokensPerSecond is the theoretical peak decode throughput of each
	// model, in output tokens per second summed over a full batch, on the
	// hardware it serves on. It is the denominator of
	// llm_batch_efficiency_ratio; a model absent from the map has no
	// efficiency figure. Default: empty (no efficiency exported). Values
	// must be positive.
	MaxTokensPerSecond map[string]float64 `yaml:"max_tokens_per_second"`
	// Now is the clock for the creation time of series and for exemplars
	// of traces without an event time. Default time.Now.
	Now func() time.Time `yaml:"-"`
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxSeries == 0 {
		c.MaxSeries = DefaultMaxSeries
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxSeries < 0 {
		errs = append(errs, fmt.Errorf("llmmetrics: Config.MaxSeries %d is negative", c.MaxSeries))
	}
	for _, m := range slices.Sorted(maps.Keys(c.MaxTokensPerSecond)) {
		if v := c.MaxTokensPerSecond[m]; !(v > 0) || math.IsInf(v, 1) {
			errs = append(errs, fmt.Errorf("llmmetrics: Config.MaxTokensPerSecond[%q] %v is not a positive number", m, v))
		}
	}
	return errors.Join(errs...)
}

// Layer is the decode time of one layer in one request: Count decode-layer
// spans of layer Index took Total together.
type Layer struct {
	Index int64
	Count int64
	Total time.Duration
}

// Trace is what one emitted trace contributes. A zero duration is absent
// (not observed).
type Trace struct {
	Model, Instance string
	// TraceID is the trace id in 32 lower-case hex digits; it is the
	// exemplar of every bucket the trace falls into. Empty: no exemplar.
	TraceID string
	// Time to first token, time per output token, queue, prefill, decode
	// and end-to-end latency.
	TTFT, TPOT, Queue, Prefill, Decode, E2E time.Duration
	InputTokens, OutputTokens               int64
	// BatchSize is the number of sequences decoded together; 0 when
	// unknown, which counts as 1 in the batch efficiency.
	BatchSize int64
	// Layers is the per-layer decode time.
	Layers []Layer
	// CacheHitRatio is the KV-cache hit ratio, in [0, 1]; only when
	// HasCacheHit.
	CacheHitRatio float64
	HasCacheHit   bool
	// Time is the trace's event time, unix nanoseconds: the exemplars'
	// timestamp. 0: the Recorder's clock at observation.
	Time int64
	// Tenant is the tenant the request was served for; empty: "unknown".
	Tenant string
	// Error: the request failed (a span of the trace has status ERROR).
	// Set by the caller: FromDerived cannot know it.
	Error bool
	// Verdicts are the quality and safety checkers' verdicts on the
	// request.
	Verdicts []Verdict
	// Blocked: a verdict decided block. GuardrailChecked: a verdict checked
	// the prompt. GuardrailBypass: the request got through a guardrail it
	// should not have. PIILeak: a pii check of the response flagged it.
	// See braidpb.Quality.
	Blocked, GuardrailChecked, GuardrailBypass, PIILeak bool
}

// Verdict is one checker's judgement of a request: Kind (hallucination,
// pii, jailbreak, toxicity, sensitivity, other) and Decision (pass, flag,
// block, bypass; empty when unknown).
type Verdict struct {
	Kind, Decision string
}

// FromDerived builds the Trace of an emitted record from its derived
// figures. instance is the serving instance (empty when unknown), traceID
// the trace id in hex, t the event time in unix nanoseconds. A nil d gives
// a Trace with no figures.
func FromDerived(d *braidpb.Derived, instance, traceID string, t int64) Trace {
	tr := Trace{Instance: instance, TraceID: traceID, Time: t}
	if d == nil {
		return tr
	}
	tr.Model = d.GetModel()
	tr.TTFT = time.Duration(d.GetTtftNanos())
	tr.TPOT = time.Duration(d.GetTpotNanos())
	tr.Queue = time.Duration(d.GetQueueTimeNanos())
	tr.Prefill = time.Duration(d.GetPrefillTimeNanos())
	tr.Decode = time.Duration(d.GetDecodeTimeNanos())
	tr.E2E = time.Duration(d.GetE2ENanos())
	tr.InputTokens = d.GetInputTokens()
	tr.OutputTokens = d.GetOutputTokens()
	if d.KvCacheHitRatio != nil {
		tr.CacheHitRatio, tr.HasCacheHit = d.GetKvCacheHitRatio(), true
	}
	if ls := d.GetLayers(); len(ls) > 0 {
		tr.Layers = make([]Layer, 0, len(ls))
		for _, l := range ls {
			tr.Layers = append(tr.Layers, Layer{Index: l.GetKey(), Count: l.GetCount(), Total: time.Duration(l.GetTotalNanos())})
		}
	}
	tr.Tenant = d.GetTenant()
	if vs := d.GetVerdicts(); len(vs) > 0 {
		tr.Verdicts = make([]Verdict, len(vs))
		for i, v := range vs {
			tr.Verdicts[i] = Verdict{Kind: v.GetKind(), Decision: v.GetDecision()}
		}
	}
	q := d.GetQuality()
	tr.Blocked, tr.GuardrailChecked, tr.GuardrailBypass, tr.PIILeak = q.GetBlocked(), q.GetGuardrailChecked(), q.GetGuardrailBypass(), q.GetPiiLeak()
	return tr
}

// Latency names one of the latency histograms.
type Latency int

// The latency histograms, in the order of Series.Latency.
const (
	TTFT Latency = iota
	TPOT
	Queue
	Prefill
	Decode
	E2E
	NumLatencies
)

var latencyNames = [NumLatencies]string{"ttft", "tpot", "queue", "prefill", "decode", "e2e"}

// String is the lower-case short name: "ttft", "tpot", "queue", "prefill",
// "decode", "e2e".
func (l Latency) String() string {
	if l < 0 || l >= NumLatencies {
		return "latency(" + strconv.Itoa(int(l)) + ")"
	}
	return latencyNames[l]
}

// Exemplar is the latest observation of a bucket. A zero TraceID means none.
type Exemplar struct {
	TraceID string
	Value   float64
	Time    time.Time
}

// Histogram is a snapshot of a cumulative histogram.
type Histogram struct {
	// Bounds are the buckets' upper bounds (without +Inf); shared, do not
	// modify.
	Bounds []float64
	// Counts holds the observations per bucket, not cumulative:
	// Counts[i] for (Bounds[i-1], Bounds[i]], Counts[len(Bounds)] above
	// the last bound.
	Counts []uint64
	Count  uint64
	Sum    float64
	// Exemplars holds the latest exemplar per bucket, like Counts.
	Exemplars []Exemplar
	// Created is when the series was first observed.
	Created time.Time
}

// Cumulative returns the cumulative count of each bound in Bounds, as
// Prometheus exposes them (the +Inf bucket is Count).
func (h Histogram) Cumulative() []uint64 {
	out := make([]uint64, len(h.Bounds))
	var c uint64
	for i := range h.Bounds {
		c += h.Counts[i]
		out[i] = c
	}
	return out
}

// Series is the snapshot of one (model, instance).
type Series struct {
	Model, Instance string
	// Latency holds the latency histograms in seconds; a histogram with
	// Count 0 was never observed.
	Latency [NumLatencies]Histogram
	// CacheHit is the histogram of KV-cache hit ratios.
	CacheHit Histogram
	// Efficiency is the batch efficiency of the latest trace that had one
	// (output tokens per second times batch size over the model's
	// Config.MaxTokensPerSecond); only when HasEfficiency.
	Efficiency    float64
	HasEfficiency bool
}

// LayerSeries is the decode-time histogram of one (model, layer): one
// observation per request and layer, the mean duration of its decode-layer
// spans, in seconds. Layer is the decimal layer index or "other".
type LayerSeries struct {
	Model, Layer string
	Hist         Histogram
}

// Incidents counts pollution incidents of one pattern.
type Incidents struct {
	Pattern string
	Count   uint64
	Created time.Time
}

// KV holds the KV-cache gauges of one (gpu, instance), as last set.
type KV struct {
	GPU, Instance                      string
	Utilisation, Fragmentation, Health float64
}

// PromptSeries is the context-length curve of one (model, prompt bucket):
// the histograms of TPOT, in seconds, and of decode throughput, in output
// tokens per second of decode time ((output tokens − 1) / decode time, the
// inverse of TPOT as the semconv Deriver defines it), of the requests whose
// input tokens fall into the bucket. PromptTokens is the bucket's upper
// bound (see PromptBuckets), "+Inf" or "other".
type PromptSeries struct {
	Model, PromptTokens string
	TPOT, Throughput    Histogram
}

// Requests counts the requests of one (model, tenant) by outcome (Error:
// the caller said it failed; Blocked: a verdict blocked it and it did not
// fail; Success: the others), and those a guardrail checked, that
// bypassed a guardrail and that leaked PII.
type Requests struct {
	Model, Tenant                               string
	Success, Error, Blocked                     uint64
	GuardrailChecked, GuardrailBypass, PIILeaks uint64
	Created                                     time.Time
}

// VerdictCount counts the verdicts of one (model, tenant, kind,
// decision); an empty decision is "unknown".
type VerdictCount struct {
	Model, Tenant, Kind, Decision string
	Count                         uint64
	Created                       time.Time
}

// Overflow counts observations sent to the "other" label set of a family
// because it held Config.MaxSeries label sets: family is "series" (latency,
// cache hit, efficiency), "layers", "incidents", "kv", "prompt" (the
// context-length curve), "requests" (request and guardrail counters) or
// "verdicts".
type Overflow struct {
	Family string
	Count  uint64
}

// Snapshot is a copy of everything a Recorder holds, each list sorted by its
// labels (Prompts by model, then bucket in increasing order, "other" last).
type Snapshot struct {
	Series    []Series
	Layers    []LayerSeries
	Incidents []Incidents
	KV        []KV
	Prompts   []PromptSeries
	Requests  []Requests
	Verdicts  []VerdictCount
	Overflow  []Overflow
}

// hist is a histogram being filled. REQUIRES: the owner's mutex held.
type hist struct {
	bounds    []float64
	counts    []uint64
	exemplars []Exemplar
	count     uint64
	sum       float64
}

func newHist(bounds []float64) hist {
	return hist{bounds: bounds, counts: make([]uint64, len(bounds)+1), exemplars: make([]Exemplar, len(bounds)+1)}
}

func (h *hist) observe(v float64, traceID string, t time.Time) {
	i, _ := slices.BinarySearch(h.bounds, v) // first bound >= v: le semantics
	h.counts[i]++
	h.count++
	h.sum += v
	if traceID != "" {
		h.exemplars[i] = Exemplar{TraceID: traceID, Value: v, Time: t}
	}
}

func (h *hist) snapshot(created time.Time) Histogram {
	return Histogram{Bounds: h.bounds, Counts: slices.Clone(h.counts), Count: h.count, Sum: h.sum,
		Exemplars: slices.Clone(h.exemplars), Created: created}
}

type seriesKey struct{ a, b string }

type series struct {
	mu            sync.Mutex
	created       time.Time
	latency       [NumLatencies]hist
	cacheHit      hist
	efficiency    float64
	hasEfficiency bool
}

// layerGroup holds the layer histograms of one model.
type layerGroup struct {
	mu     sync.Mutex
	layers map[int64]*layerHist // REQUIRES: mu held; key otherLayer for overflow
}

type layerHist struct {
	created time.Time
	h       hist
}

// otherLayer is the layer index of the "other" layer series.
const otherLayer = -1

type incidents struct {
	created time.Time
	n       uint64
}

// promptKey is a model and an index into promptLabels; otherPrompt for
// the "other" bucket.
type promptKey struct {
	model  string
	bucket int
}

const otherPrompt = -1

var otherPromptKey = promptKey{Other, otherPrompt}

type promptSeries struct {
	mu         sync.Mutex
	created    time.Time
	tpot       hist
	throughput hist
}

// requests holds the request counters of one (model, tenant).
type requests struct {
	created                                     time.Time
	outcome                                     [3]atomic.Uint64 // success, error, blocked
	guardrailChecked, guardrailBypass, piiLeaks atomic.Uint64
}

type verdictKey struct{ model, tenant, kind, decision string }

var otherVerdictKey = verdictKey{Other, Other, Other, Other}

type counter struct {
	created time.Time
	n       atomic.Uint64
}

// family is a label-set map bounded by maxSeries. REQUIRES: the Recorder's
// mu held for its methods.
type family[K comparable, V any] struct {
	m        map[K]V
	overflow uint64
}

// Recorder keeps the figures. Create with New; all methods are safe for
// concurrent use.
type Recorder struct {
	cfg Config

	layerSeries   atomic.Int64  // (model, layer) series held, "other" excluded
	layerOverflow atomic.Uint64 // layer observations sent to ("other", "other")

	mu struct {
		sync.RWMutex
		series    family[seriesKey, *series]
		layers    map[string]*layerGroup // by model
		incidents family[seriesKey, *incidents]
		kv        family[seriesKey, KV]
		prompt    family[promptKey, *promptSeries]
		requests  family[seriesKey, *requests]
		verdicts  family[verdictKey, *counter]
	}
}

// New validates cfg and returns an empty Recorder.
func New(cfg Config) (*Recorder, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxTokensPerSecond = maps.Clone(cfg.MaxTokensPerSecond)
	r := &Recorder{cfg: cfg}
	r.mu.series.m = map[seriesKey]*series{}
	r.mu.layers = map[string]*layerGroup{}
	r.mu.incidents.m = map[seriesKey]*incidents{}
	r.mu.kv.m = map[seriesKey]KV{}
	r.mu.prompt.m = map[promptKey]*promptSeries{}
	r.mu.requests.m = map[seriesKey]*requests{}
	r.mu.verdicts.m = map[verdictKey]*counter{}
	return r, nil
}

var otherKey = seriesKey{Other, Other}

// slot returns the key to use for k in f: k itself if present or if there
// is room, else other (counting the overflow). The bool is whether the
// caller must create the entry. The other label set may exceed max by one.
// REQUIRES: r.mu held for writing.
func slot[K comparable, V any](f *family[K, V], k, other K, max int) (K, bool) {
	if _, ok := f.m[k]; ok {
		return k, false
	}
	if len(f.m) >= max && k != other {
		f.overflow++
		_, ok := f.m[other]
		return other, !ok
	}
	return k, true
}

func (r *Recorder) series(model, instance string) *series {
	k := seriesKey{model, instance}
	r.mu.RLock()
	s, ok := r.mu.series.m[k]
	r.mu.RUnlock()
	if ok {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k, create := slot(&r.mu.series, k, otherKey, r.cfg.MaxSeries)
	if !create {
		return r.mu.series.m[k]
	}
	s = &series{created: r.cfg.Now(), cacheHit: newHist(RatioBuckets)}
	for i := range s.latency {
		s.latency[i] = newHist(LatencyBuckets)
	}
	r.mu.series.m[k] = s
	return s
}

// lookup returns the entry of k in f, made by mk if new; beyond
// Config.MaxSeries label sets, the entry of other (counting the overflow).
// f is one of r.mu's families.
func lookup[K comparable, V any](r *Recorder, f *family[K, V], k, other K, mk func(created time.Time) V) V {
	r.mu.RLock()
	v, ok := f.m[k]
	r.mu.RUnlock()
	if ok {
		return v
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k, create := slot(f, k, other, r.cfg.MaxSeries)
	if !create {
		return f.m[k]
	}
	v = mk(r.cfg.Now())
	f.m[k] = v
	return v
}

func newPromptSeries(created time.Time) *promptSeries {
	return &promptSeries{created: created, tpot: newHist(LatencyBuckets), throughput: newHist(ThroughputBuckets)}
}

func newRequests(created time.Time) *requests { return &requests{created: created} }

func newCounter(created time.Time) *counter { return &counter{created: created} }

// observePrompt adds the trace's TPOT and decode throughput to the
// context-length curve of its model and prompt bucket; without input
// tokens, or without either figure, nothing.
func (r *Recorder) observePrompt(model string, t *Trace, at time.Time) {
	var tps float64
	hasTPS := t.OutputTokens > 1 && t.Decode > 0
	if hasTPS {
		tps = float64(t.OutputTokens-1) / t.Decode.Seconds()
	}
	if t.InputTokens <= 0 || (t.TPOT <= 0 && !hasTPS) {
		return
	}
	p := lookup(r, &r.mu.prompt, promptKey{model, promptBucket(t.InputTokens)}, otherPromptKey, newPromptSeries)
	p.mu.Lock()
	if t.TPOT > 0 {
		p.tpot.observe(t.TPOT.Seconds(), t.TraceID, at)
	}
	if hasTPS {
		p.throughput.observe(tps, t.TraceID, at)
	}
	p.mu.Unlock()
}

// observeQuality counts the request by outcome, its guardrail figures and
// its verdicts.
func (r *Recorder) observeQuality(model string, t *Trace) {
	tenant := label(t.Tenant)
	q := lookup(r, &r.mu.requests, seriesKey{model, tenant}, otherKey, newRequests)
	switch {
	case t.Error:
		q.outcome[1].Add(1)
	case t.Blocked:
		q.outcome[2].Add(1)
	default:
		q.outcome[0].Add(1)
	}
	if t.GuardrailChecked {
		q.guardrailChecked.Add(1)
	}
	if t.GuardrailBypass {
		q.guardrailBypass.Add(1)
	}
	if t.PIILeak {
		q.piiLeaks.Add(1)
	}
	for _, v := range t.Verdicts {
		c := lookup(r, &r.mu.verdicts, verdictKey{model, tenant, label(v.Kind), label(v.Decision)}, otherVerdictKey, newCounter)
		c.n.Add(1)
	}
}

// label is s as a label value: "unknown" when empty, invalid UTF-8
// replaced (an exporter rejects it).
func label(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return orUnknown(s)
}

// layerGroup returns the layer group of model; beyond Config.MaxSeries
// models, the group of "other".
func (r *Recorder) layerGroup(model string) *layerGroup {
	r.mu.RLock()
	g, ok := r.mu.layers[model]
	r.mu.RUnlock()
	if ok {
		return g
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.mu.layers[model]; ok {
		return g
	}
	if len(r.mu.layers) >= r.cfg.MaxSeries && model != Other {
		model = Other
		if g, ok := r.mu.layers[model]; ok {
			return g
		}
	}
	g = &layerGroup{layers: map[int64]*layerHist{}}
	r.mu.layers[model] = g
	return g
}

// observeLayers adds the per-layer decode times of one trace: one lock for
// the model's layers; layers beyond Config.MaxSeries go to ("other",
// "other").
func (r *Recorder) observeLayers(model string, layers []Layer, traceID string, at time.Time) {
	var over []float64
	g := r.layerGroup(model)
	g.mu.Lock()
	for _, l := range layers {
		if l.Count <= 0 || l.Total <= 0 || l.Index < 0 {
			continue
		}
		v := l.Total.Seconds() / float64(l.Count)
		lh, ok := g.layers[l.Index]
		if !ok {
			if r.layerSeries.Add(1) > int64(r.cfg.MaxSeries) {
				r.layerSeries.Add(-1)
				r.layerOverflow.Add(1)
				over = append(over, v)
				continue
			}
			lh = &layerHist{created: r.cfg.Now(), h: newHist(LatencyBuckets)}
			g.layers[l.Index] = lh
		}
		lh.h.observe(v, traceID, at)
	}
	g.mu.Unlock()
	if len(over) == 0 {
		return
	}
	og := r.layerGroup(Other)
	og.mu.Lock()
	lh, ok := og.layers[otherLayer]
	if !ok {
		lh = &layerHist{created: r.cfg.Now(), h: newHist(LatencyBuckets)}
		og.layers[otherLayer] = lh
	}
	for _, v := range over {
		lh.h.observe(v, traceID, at)
	}
	og.mu.Unlock()
}

// ObserveTrace adds the figures of one trace to the histograms of its
// (model, instance), to the context-length curve of its (model, prompt
// bucket) when it has input tokens, and counts it, its guardrail figures
// and its verdicts under its (model, tenant); an empty model, instance or
// tenant is recorded as "unknown", as is an empty verdict kind or
// decision. Negative durations and ratios outside [0, 1] (bad input) are
// ignored.
func (r *Recorder) ObserveTrace(t Trace) {
	model, instance := orUnknown(t.Model), orUnknown(t.Instance)
	at := time.Unix(0, t.Time)
	if t.Time == 0 {
		at = r.cfg.Now()
	}
	s := r.series(model, instance)
	s.mu.Lock()
	for i, d := range [NumLatencies]time.Duration{t.TTFT, t.TPOT, t.Queue, t.Prefill, t.Decode, t.E2E} {
		if d > 0 {
			s.latency[i].observe(d.Seconds(), t.TraceID, at)
		}
	}
	if t.HasCacheHit && t.CacheHitRatio >= 0 && t.CacheHitRatio <= 1 {
		s.cacheHit.observe(t.CacheHitRatio, t.TraceID, at)
	}
	if e, ok := r.efficiency(t); ok {
		s.efficiency, s.hasEfficiency = e, true
	}
	s.mu.Unlock()

	if len(t.Layers) > 0 {
		r.observeLayers(model, t.Layers, t.TraceID, at)
	}
	r.observePrompt(model, &t, at)
	r.observeQuality(model, &t)
}

// efficiency is output tokens per second of decode (decode time, else e2e
// minus TTFT) times the batch size (unknown: 1), over the model's
// theoretical peak.
func (r *Recorder) efficiency(t Trace) (float64, bool) {
	peak, ok := r.cfg.MaxTokensPerSecond[t.Model]
	if !ok || t.OutputTokens <= 0 {
		return 0, false
	}
	d := t.Decode
	if d <= 0 && t.E2E > t.TTFT && t.TTFT > 0 {
		d = t.E2E - t.TTFT
	}
	if d <= 0 {
		return 0, false
	}
	batch := max(t.BatchSize, 1)
	return float64(t.OutputTokens) / d.Seconds() * float64(batch) / peak, true
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// ObserveIncident counts one pollution incident of the given pattern (empty:
// "unknown").
func (r *Recorder) ObserveIncident(pattern string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, create := slot(&r.mu.incidents, seriesKey{orUnknown(pattern), ""}, seriesKey{Other, ""}, r.cfg.MaxSeries)
	if create {
		r.mu.incidents.m[k] = &incidents{created: r.cfg.Now()}
	}
	r.mu.incidents.m[k].n++
}

// SetKV sets the KV-cache gauges of one (gpu, instance): utilisation and
// fragmentation as ratios in [0, 1], health as a score in [0, 1] (1
// healthy).
func (r *Recorder) SetKV(gpu, instance string, utilisation, fragmentation, health float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, _ := slot(&r.mu.kv, seriesKey{orUnknown(gpu), orUnknown(instance)}, otherKey, r.cfg.MaxSeries)
	r.mu.kv.m[k] = KV{GPU: k.a, Instance: k.b, Utilisation: utilisation, Fragmentation: fragmentation, Health: health}
}

// KVFigure names one of the KV-cache gauges.
type KVFigure int

// KV-cache gauges.
const (
	KVUtilisation KVFigure = iota
	KVFragmentation
	KVHealth
)

// SetKVFigure sets one KV-cache gauge of (gpu, instance), leaving the
// others as they are; a gauge never set is NaN and not exported.
func (r *Recorder) SetKVFigure(gpu, instance string, f KVFigure, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, _ := slot(&r.mu.kv, seriesKey{orUnknown(gpu), orUnknown(instance)}, otherKey, r.cfg.MaxSeries)
	kv, ok := r.mu.kv.m[k]
	if !ok {
		kv = KV{GPU: k.a, Instance: k.b, Utilisation: math.NaN(), Fragmentation: math.NaN(), Health: math.NaN()}
	}
	switch f {
	case KVUtilisation:
		kv.Utilisation = v
	case KVFragmentation:
		kv.Fragmentation = v
	case KVHealth:
		kv.Health = v
	}
	r.mu.kv.m[k] = kv
}

// HasEfficiency reports whether the Recorder has a theoretical peak for any
// model, that is whether it can produce efficiency figures.
func (r *Recorder) HasEfficiency() bool { return len(r.cfg.MaxTokensPerSecond) > 0 }

// Snapshot copies the current figures, sorted by their labels (layers in
// numeric order, "other" last). Each histogram is consistent in itself
// (buckets, count, sum and exemplars of the same observations); a trace
// observed during the call may be in its (model, instance) histograms and
// not yet in its layer histograms.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.RLock()
	keys := slices.SortedFunc(maps.Keys(r.mu.series.m), cmpKey)
	ss := make([]*series, len(keys))
	for i, k := range keys {
		ss[i] = r.mu.series.m[k]
	}
	models := slices.Sorted(maps.Keys(r.mu.layers))
	groups := make([]*layerGroup, len(models))
	for i, m := range models {
		groups[i] = r.mu.layers[m]
	}
	var snap Snapshot
	for _, k := range slices.SortedFunc(maps.Keys(r.mu.incidents.m), cmpKey) {
		in := r.mu.incidents.m[k]
		snap.Incidents = append(snap.Incidents, Incidents{Pattern: k.a, Count: in.n, Created: in.created})
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.mu.kv.m), cmpKey) {
		snap.KV = append(snap.KV, r.mu.kv.m[k])
	}
	pkeys := slices.SortedFunc(maps.Keys(r.mu.prompt.m), func(x, y promptKey) int {
		if c := cmp.Compare(x.model, y.model); c != 0 {
			return c
		}
		return cmp.Compare(uint(x.bucket), uint(y.bucket)) // otherPrompt (-1) is the largest
	})
	ps := make([]*promptSeries, len(pkeys))
	for i, k := range pkeys {
		ps[i] = r.mu.prompt.m[k]
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.mu.requests.m), cmpKey) {
		q := r.mu.requests.m[k]
		snap.Requests = append(snap.Requests, Requests{Model: k.a, Tenant: k.b,
			Success: q.outcome[0].Load(), Error: q.outcome[1].Load(), Blocked: q.outcome[2].Load(),
			GuardrailChecked: q.guardrailChecked.Load(), GuardrailBypass: q.guardrailBypass.Load(), PIILeaks: q.piiLeaks.Load(),
			Created: q.created})
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.mu.verdicts.m), func(x, y verdictKey) int {
		return cmp.Or(cmp.Compare(x.model, y.model), cmp.Compare(x.tenant, y.tenant), cmp.Compare(x.kind, y.kind), cmp.Compare(x.decision, y.decision))
	}) {
		c := r.mu.verdicts.m[k]
		snap.Verdicts = append(snap.Verdicts, VerdictCount{Model: k.model, Tenant: k.tenant, Kind: k.kind, Decision: k.decision,
			Count: c.n.Load(), Created: c.created})
	}
	snap.Overflow = []Overflow{
		{"series", r.mu.series.overflow}, {"layers", r.layerOverflow.Load()},
		{"incidents", r.mu.incidents.overflow}, {"kv", r.mu.kv.overflow},
		{"prompt", r.mu.prompt.overflow}, {"requests", r.mu.requests.overflow}, {"verdicts", r.mu.verdicts.overflow},
	}
	r.mu.RUnlock()

	snap.Series = make([]Series, len(keys))
	for i, s := range ss {
		out := &snap.Series[i]
		out.Model, out.Instance = keys[i].a, keys[i].b
		s.mu.Lock()
		for j := range s.latency {
			out.Latency[j] = s.latency[j].snapshot(s.created)
		}
		out.CacheHit = s.cacheHit.snapshot(s.created)
		out.Efficiency, out.HasEfficiency = s.efficiency, s.hasEfficiency
		s.mu.Unlock()
	}
	snap.Prompts = make([]PromptSeries, len(pkeys))
	for i, p := range ps {
		out := &snap.Prompts[i]
		out.Model, out.PromptTokens = pkeys[i].model, Other
		if b := pkeys[i].bucket; b != otherPrompt {
			out.PromptTokens = promptLabels[b]
		}
		p.mu.Lock()
		out.TPOT, out.Throughput = p.tpot.snapshot(p.created), p.throughput.snapshot(p.created)
		p.mu.Unlock()
	}
	for i, g := range groups {
		g.mu.Lock()
		// Layers in numeric order, "other" last.
		for _, idx := range slices.SortedFunc(maps.Keys(g.layers), func(x, y int64) int {
			return cmp.Compare(uint64(x), uint64(y)) // otherLayer (-1) is the largest
		}) {
			lh := g.layers[idx]
			name := Other
			if idx != otherLayer {
				name = strconv.FormatInt(idx, 10)
			}
			snap.Layers = append(snap.Layers, LayerSeries{Model: models[i], Layer: name, Hist: lh.h.snapshot(lh.created)})
		}
		g.mu.Unlock()
	}
	return snap
}

func cmpKey(x, y seriesKey) int {
	if c := cmp.Compare(x.a, y.a); c != 0 {
		return c
	}
	return cmp.Compare(x.b, y.b)
}
