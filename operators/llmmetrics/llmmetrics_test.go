package llmmetrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/braidlabs/braid/operators/braidpb"
	"google.golang.org/protobuf/proto"
)

func newRecorder(t *testing.T, cfg Config) *Recorder {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func traceID(i int) string { return fmt.Sprintf("%032x", i+1) }

// refBucket is the index of the first bound v does not exceed, by a linear
// scan: the reference for the Recorder's bucketing.
func refBucket(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}

func TestObserveTraceBucketsAndExemplars(t *testing.T) {
	r := newRecorder(t, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	type ref struct {
		counts []uint64
		last   []string // trace id of the latest observation per bucket
		sum    float64
	}
	newRef := func() *ref {
		return &ref{counts: make([]uint64, len(LatencyBuckets)+1), last: make([]string, len(LatencyBuckets)+1)}
	}
	refs := map[string]*ref{}
	const n = 5000
	for i := range n {
		model := []string{"llama", "qwen"}[i%2]
		inst := "vllm-" + strconv.Itoa(i%3)
		// Log-uniform over 1 ms..200 s, plus exact bucket bounds now and then.
		ttft := time.Duration(math.Exp(rng.Float64()*math.Log(2e5)) * float64(time.Millisecond))
		if i%17 == 0 {
			ttft = time.Duration(LatencyBuckets[rng.IntN(len(LatencyBuckets))] * float64(time.Second))
		}
		id := traceID(i)
		r.ObserveTrace(Trace{Model: model, Instance: inst, TraceID: id, TTFT: ttft, Time: int64(i+1) * 1e9})
		k := model + "/" + inst
		if refs[k] == nil {
			refs[k] = newRef()
		}
		v := ttft.Seconds()
		b := refBucket(LatencyBuckets, v)
		refs[k].counts[b]++
		refs[k].last[b] = id
		refs[k].sum += v
	}
	snap := r.Snapshot()
	if len(snap.Series) != 6 {
		t.Fatalf("series: got %d, want 6", len(snap.Series))
	}
	var total uint64
	for _, s := range snap.Series {
		want := refs[s.Model+"/"+s.Instance]
		h := s.Latency[TTFT]
		total += h.Count
		for b := range want.counts {
			if h.Counts[b] != want.counts[b] {
				t.Errorf("%s/%s bucket %d: count %d, want %d", s.Model, s.Instance, b, h.Counts[b], want.counts[b])
			}
			if h.Exemplars[b].TraceID != want.last[b] {
				t.Errorf("%s/%s bucket %d: exemplar %q, want %q", s.Model, s.Instance, b, h.Exemplars[b].TraceID, want.last[b])
			}
			if ex := h.Exemplars[b]; ex.TraceID != "" && refBucket(LatencyBuckets, ex.Value) != b {
				t.Errorf("bucket %d: exemplar value %v lies outside it", b, ex.Value)
			}
		}
		if math.Abs(h.Sum-want.sum) > 1e-9*want.sum {
			t.Errorf("sum %v, want %v", h.Sum, want.sum)
		}
		cum := h.Cumulative()
		if len(cum) > 0 && cum[len(cum)-1]+h.Counts[len(h.Bounds)] != h.Count {
			t.Errorf("cumulative %v plus +Inf %d is not the count %d", cum[len(cum)-1], h.Counts[len(h.Bounds)], h.Count)
		}
		for j := TPOT; j < NumLatencies; j++ {
			if s.Latency[j].Count != 0 {
				t.Errorf("%v observed without input", j)
			}
		}
	}
	if total != n {
		t.Fatalf("observations: %d, want %d", total, n)
	}
}

func TestObserveTraceEveryFigure(t *testing.T) {
	r := newRecorder(t, Config{MaxTokensPerSecond: map[string]float64{"m": 1000}})
	tr := Trace{
		Model: "m", Instance: "i", TraceID: traceID(7),
		TTFT: 300 * time.Millisecond, TPOT: 20 * time.Millisecond, Queue: 5 * time.Millisecond,
		Prefill: 250 * time.Millisecond, Decode: 2 * time.Second, E2E: 2300 * time.Millisecond,
		OutputTokens: 101, BatchSize: 8,
		Layers:        []Layer{{Index: 0, Count: 100, Total: 200 * time.Millisecond}, {Index: 31, Count: 100, Total: 300 * time.Millisecond}},
		CacheHitRatio: 0.75, HasCacheHit: true, Time: 1_700_000_000_000_000_000,
	}
	r.ObserveTrace(tr)
	snap := r.Snapshot()
	s := snap.Series[0]
	for i, want := range []float64{0.3, 0.02, 0.005, 0.25, 2, 2.3} {
		h := s.Latency[i]
		if h.Count != 1 || math.Abs(h.Sum-want) > 1e-12 {
			t.Errorf("%v: count %d sum %v, want 1 and %v", Latency(i), h.Count, h.Sum, want)
		}
		b := refBucket(LatencyBuckets, want)
		if ex := h.Exemplars[b]; ex.TraceID != tr.TraceID || !ex.Time.Equal(time.Unix(0, tr.Time)) {
			t.Errorf("%v: exemplar %+v", Latency(i), ex)
		}
	}
	if h := s.CacheHit; h.Count != 1 || h.Counts[refBucket(RatioBuckets, 0.75)] != 1 {
		t.Errorf("cache hit %+v", h)
	}
	// 101 tokens in 2 s, 8 sequences: 404 tokens/s of a 1000 tokens/s peak.
	if !s.HasEfficiency || math.Abs(s.Efficiency-0.404) > 1e-12 {
		t.Errorf("efficiency %v (%v), want 0.404", s.Efficiency, s.HasEfficiency)
	}
	if len(snap.Layers) != 2 || snap.Layers[0].Layer != "0" || snap.Layers[1].Layer != "31" {
		t.Fatalf("layers %+v", snap.Layers)
	}
	if got := snap.Layers[1].Hist.Sum; math.Abs(got-0.003) > 1e-12 {
		t.Errorf("layer 31 mean %v, want 0.003", got)
	}

	// No peak for the model, or no tokens: no efficiency.
	r.ObserveTrace(Trace{Model: "x", Instance: "i", Decode: time.Second, OutputTokens: 10})
	r.ObserveTrace(Trace{Model: "m", Instance: "j", Decode: time.Second})
	for _, s := range r.Snapshot().Series[1:] {
		if s.HasEfficiency {
			t.Errorf("%s/%s has an efficiency", s.Model, s.Instance)
		}
	}
}

func TestBadInputIgnored(t *testing.T) {
	r := newRecorder(t, Config{})
	r.ObserveTrace(Trace{TTFT: -time.Second, CacheHitRatio: 1.5, HasCacheHit: true,
		Layers: []Layer{{Index: -1, Count: 1, Total: time.Second}, {Index: 2, Count: 0, Total: time.Second}}})
	r.ObserveTrace(Trace{CacheHitRatio: math.NaN(), HasCacheHit: true})
	snap := r.Snapshot()
	if len(snap.Series) != 1 || snap.Series[0].Model != "unknown" || snap.Series[0].Instance != "unknown" {
		t.Fatalf("series %+v", snap.Series)
	}
	if snap.Series[0].Latency[TTFT].Count != 0 || snap.Series[0].CacheHit.Count != 0 || len(snap.Layers) != 0 {
		t.Fatalf("bad input observed: %+v", snap)
	}
}

func TestOverflow(t *testing.T) {
	r := newRecorder(t, Config{MaxSeries: 3})
	for i := range 10 {
		r.ObserveTrace(Trace{Model: "m" + strconv.Itoa(i), Instance: "i", TraceID: traceID(i), TTFT: time.Second,
			Layers:      []Layer{{Index: int64(i), Count: 1, Total: time.Millisecond}},
			InputTokens: 100, TPOT: 10 * time.Millisecond, Verdicts: []Verdict{{Kind: "pii", Decision: "flag"}}})
		r.ObserveIncident("p" + strconv.Itoa(i))
		r.SetKV("gpu"+strconv.Itoa(i), "i", 0.5, 0.1, float64(i))
	}
	// A label set already held keeps its own series.
	r.ObserveTrace(Trace{Model: "m1", Instance: "i", TTFT: time.Second})
	snap := r.Snapshot()
	if len(snap.Series) != 4 {
		t.Fatalf("series: %d, want 3 + other", len(snap.Series))
	}
	counts := map[string]uint64{}
	for _, s := range snap.Series {
		counts[s.Model+"/"+s.Instance] = s.Latency[TTFT].Count
	}
	want := map[string]uint64{"m0/i": 1, "m1/i": 2, "m2/i": 1, "other/other": 7}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	if len(snap.Layers) != 4 || snap.Layers[3].Model != Other || snap.Layers[3].Layer != Other || snap.Layers[3].Hist.Count != 7 {
		t.Errorf("layers %+v", snap.Layers)
	}
	if len(snap.Incidents) != 4 || snap.Incidents[0].Pattern != Other || snap.Incidents[0].Count != 7 {
		t.Errorf("incidents %+v", snap.Incidents)
	}
	if len(snap.KV) != 4 || snap.KV[3].GPU != Other || snap.KV[3].Health != 9 {
		t.Errorf("kv %+v", snap.KV)
	}
	if len(snap.Prompts) != 4 || snap.Prompts[3].Model != Other || snap.Prompts[3].PromptTokens != Other || snap.Prompts[3].TPOT.Count != 7 {
		t.Errorf("prompts %+v", snap.Prompts)
	}
	// m1 observed twice, the second time with no input tokens: one request
	// more, no prompt observation.
	if len(snap.Requests) != 4 || snap.Requests[1].Success != 2 || snap.Requests[3].Model != Other || snap.Requests[3].Tenant != Other || snap.Requests[3].Success != 7 {
		t.Errorf("requests %+v", snap.Requests)
	}
	if len(snap.Verdicts) != 4 || snap.Verdicts[3] != (VerdictCount{Model: Other, Tenant: Other, Kind: Other, Decision: Other, Count: 7, Created: snap.Verdicts[3].Created}) {
		t.Errorf("verdicts %+v", snap.Verdicts)
	}
	if len(snap.Overflow) != 7 {
		t.Errorf("overflow families %+v", snap.Overflow)
	}
	for _, o := range snap.Overflow {
		if o.Count != 7 {
			t.Errorf("overflow %s: %d, want 7", o.Family, o.Count)
		}
	}
}

func TestConcurrent(t *testing.T) {
	r := newRecorder(t, Config{MaxSeries: 50})
	var wg sync.WaitGroup
	const workers, each = 8, 2000
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r.ObserveTrace(Trace{Model: "m" + strconv.Itoa(i%70), Instance: "i" + strconv.Itoa(w),
					TraceID: traceID(w*each + i), TTFT: time.Duration(i) * time.Millisecond,
					Layers: []Layer{{Index: int64(i % 4), Count: 2, Total: time.Millisecond}}})
				if i%10 == 0 {
					r.ObserveIncident("p")
					r.SetKV("g", "i", 0.1, 0.2, 0.3)
				}
				if i%500 == 0 {
					r.Snapshot()
				}
			}
		})
	}
	wg.Wait()
	snap := r.Snapshot()
	var n uint64
	for _, s := range snap.Series {
		n += s.Latency[TTFT].Count
	}
	if want := uint64(workers*each - workers); n != want { // i == 0 has TTFT 0: absent
		t.Errorf("ttft observations %d, want %d", n, want)
	}
	if len(snap.Series) > 51 {
		t.Errorf("series %d exceed MaxSeries+other", len(snap.Series))
	}
	if snap.Incidents[0].Count != workers*each/10 {
		t.Errorf("incidents %d", snap.Incidents[0].Count)
	}
}

func TestFromDerived(t *testing.T) {
	d := &braidpb.Derived{
		Model: "llama", TtftNanos: 1, TpotNanos: 2, E2ENanos: 3, QueueTimeNanos: 4, PrefillTimeNanos: 5, DecodeTimeNanos: 6,
		InputTokens: 7, OutputTokens: 8, KvCacheHitRatio: proto.Float64(0.5),
		Layers: []*braidpb.LayerStats{{Key: 3, Count: 4, TotalNanos: 40}},
		Tenant: "acme",
		Verdicts: []*braidpb.Verdict{{Kind: "jailbreak", Decision: "pass", Stage: "input", Checker: "self check input", Source: "nemo"},
			{Kind: "pii", Score: proto.Float64(0.9), Decision: "flag", Stage: "output", Checker: "presidio", Source: "openlit"}},
		Quality: &braidpb.Quality{Blocked: true, GuardrailChecked: true, GuardrailBypass: true, PiiLeak: true},
	}
	got := FromDerived(d, "vllm-0", traceID(0), 99)
	want := Trace{Model: "llama", Instance: "vllm-0", TraceID: traceID(0), Time: 99, TTFT: 1, TPOT: 2, E2E: 3, Queue: 4, Prefill: 5, Decode: 6,
		InputTokens: 7, OutputTokens: 8, CacheHitRatio: 0.5, HasCacheHit: true, Layers: []Layer{{Index: 3, Count: 4, Total: 40}},
		Tenant: "acme", Verdicts: []Verdict{{Kind: "jailbreak", Decision: "pass"}, {Kind: "pii", Decision: "flag"}},
		Blocked: true, GuardrailChecked: true, GuardrailBypass: true, PIILeak: true}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got := FromDerived(nil, "i", "t", 1); got.Model != "" || got.Instance != "i" {
		t.Errorf("nil derived: %+v", got)
	}
	if got := FromDerived(&braidpb.Derived{}, "", "", 0); got.HasCacheHit || got.Verdicts != nil || got.Blocked || got.GuardrailChecked || got.Error {
		t.Errorf("absent figures became present: %+v", got)
	}
	for _, q := range []*braidpb.Quality{{Blocked: true}, {GuardrailChecked: true}, {GuardrailBypass: true}, {PiiLeak: true}} {
		got := FromDerived(&braidpb.Derived{Quality: q}, "", "", 0)
		if fmt.Sprint(got.Blocked, got.GuardrailChecked, got.GuardrailBypass, got.PIILeak) !=
			fmt.Sprint(q.Blocked, q.GuardrailChecked, q.GuardrailBypass, q.PiiLeak) {
			t.Errorf("quality %v: trace %+v", q, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{
		{MaxSeries: -1},
		{MaxTokensPerSecond: map[string]float64{"m": 0}},
		{MaxTokensPerSecond: map[string]float64{"m": math.NaN()}},
		{MaxTokensPerSecond: map[string]float64{"m": math.Inf(1)}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// benchLayers is the number of decode layers per trace in BenchmarkObserveTrace.
const benchLayers = 32

// BenchmarkObserveTrace: one trace with every latency, a cache-hit ratio,
// 32 layers, a prompt length, a tenant and two verdicts, from parallel
// goroutines over 6 label sets.
func BenchmarkObserveTrace(b *testing.B) {
	r, err := New(Config{MaxTokensPerSecond: map[string]float64{"m0": 1000}})
	if err != nil {
		b.Fatal(err)
	}
	layers := make([]Layer, benchLayers)
	for i := range layers {
		layers[i] = Layer{Index: int64(i), Count: 100, Total: 50 * time.Millisecond}
	}
	verdicts := []Verdict{{Kind: "jailbreak", Decision: "pass"}, {Kind: "pii", Decision: "flag"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.ObserveTrace(Trace{Model: "m" + strconv.Itoa(i%2), Instance: "i" + strconv.Itoa(i%3), TraceID: "0123456789abcdef0123456789abcdef",
				TTFT: time.Duration(i%5000) * time.Millisecond, TPOT: 20 * time.Millisecond, Queue: time.Millisecond, Prefill: 100 * time.Millisecond,
				Decode: time.Second, E2E: 1200 * time.Millisecond, InputTokens: 2000, OutputTokens: 50, Layers: layers, CacheHitRatio: 0.5, HasCacheHit: true, Time: int64(i),
				Tenant: "t" + strconv.Itoa(i%2), Verdicts: verdicts, GuardrailChecked: true})
		}
	})
}

// refPromptLabel is the prompt bucket label of n input tokens, by a linear
// scan over the powers of two 256..131072: the reference for the
// Recorder's prompt bucketing.
func refPromptLabel(n int64) string {
	for b := int64(256); b <= 131072; b *= 2 {
		if n <= b {
			return strconv.FormatInt(b, 10)
		}
	}
	return "+Inf"
}

func TestPromptBuckets(t *testing.T) {
	for n, want := range map[int64]string{1: "256", 256: "256", 257: "512", 512: "512", 513: "1024", 1024: "1024",
		131072: "131072", 131073: "+Inf", 1 << 40: "+Inf"} {
		if got := promptLabels[promptBucket(n)]; got != want || refPromptLabel(n) != want {
			t.Errorf("%d tokens: bucket %q (reference %q), want %q", n, got, refPromptLabel(n), want)
		}
	}
}

// TestContextLengthCurve: each trace with input tokens adds its TPOT and
// its decode throughput ((output tokens − 1) / decode seconds) to the
// histograms of its (model, prompt bucket); the reference buckets, counts
// and sums come from the fed traces by linear scans.
func TestContextLengthCurve(t *testing.T) {
	r := newRecorder(t, Config{})
	rng := rand.New(rand.NewPCG(3, 4))
	type ref struct {
		tpot, tps       []uint64
		tpotSum, tpsSum float64
	}
	refs := map[string]*ref{}
	const n = 6000
	for i := range n {
		model := []string{"llama", "qwen"}[i%2]
		// Log-uniform over 1..400k tokens, with bounds and bounds+1 now and then.
		in := int64(math.Exp(rng.Float64() * math.Log(4e5)))
		if i%13 == 0 {
			in = int64(256)<<rng.IntN(10) + int64(rng.IntN(2))
		}
		if i%29 == 0 {
			in = 0 // unknown: not on the curve
		}
		out := int64(rng.IntN(2000))
		decode := time.Duration(rng.Int64N(int64(60 * time.Second)))
		var tpot time.Duration
		if out > 1 {
			tpot = decode / time.Duration(out-1)
		}
		if i%31 == 0 {
			decode = 0 // TPOT given without a decode time
			tpot = 15 * time.Millisecond
		}
		r.ObserveTrace(Trace{Model: model, Instance: "i", TraceID: traceID(i), InputTokens: in, OutputTokens: out,
			Decode: decode, TPOT: tpot, Time: int64(i+1) * 1e9})
		if in <= 0 {
			continue
		}
		k := model + "/" + refPromptLabel(in)
		if refs[k] == nil {
			refs[k] = &ref{tpot: make([]uint64, len(LatencyBuckets)+1), tps: make([]uint64, len(ThroughputBuckets)+1)}
		}
		if tpot > 0 {
			refs[k].tpot[refBucket(LatencyBuckets, tpot.Seconds())]++
			refs[k].tpotSum += tpot.Seconds()
		}
		if out > 1 && decode > 0 {
			v := float64(out-1) / decode.Seconds()
			refs[k].tps[refBucket(ThroughputBuckets, v)]++
			refs[k].tpsSum += v
		}
	}
	snap := r.Snapshot()
	if len(snap.Prompts) != len(refs) {
		t.Fatalf("prompt series %d, want %d", len(snap.Prompts), len(refs))
	}
	for i, p := range snap.Prompts {
		want := refs[p.Model+"/"+p.PromptTokens]
		if want == nil {
			t.Fatalf("unexpected series %s/%s", p.Model, p.PromptTokens)
		}
		if fmt.Sprint(p.TPOT.Counts) != fmt.Sprint(want.tpot) || fmt.Sprint(p.Throughput.Counts) != fmt.Sprint(want.tps) {
			t.Errorf("%s/%s: tpot %v tps %v, want %v %v", p.Model, p.PromptTokens, p.TPOT.Counts, p.Throughput.Counts, want.tpot, want.tps)
		}
		if math.Abs(p.TPOT.Sum-want.tpotSum) > 1e-9*want.tpotSum || math.Abs(p.Throughput.Sum-want.tpsSum) > 1e-9*want.tpsSum {
			t.Errorf("%s/%s: sums %v %v, want %v %v", p.Model, p.PromptTokens, p.TPOT.Sum, p.Throughput.Sum, want.tpotSum, want.tpsSum)
		}
		for b, ex := range p.Throughput.Exemplars {
			if ex.TraceID != "" && refBucket(ThroughputBuckets, ex.Value) != b {
				t.Errorf("throughput bucket %d: exemplar value %v lies outside it", b, ex.Value)
			}
		}
		// Sorted by model, then bucket bound.
		if i > 0 {
			q := snap.Prompts[i-1]
			if q.Model > p.Model || q.Model == p.Model && slices.Index(promptLabels, q.PromptTokens) >= slices.Index(promptLabels, p.PromptTokens) {
				t.Errorf("%s/%s before %s/%s", q.Model, q.PromptTokens, p.Model, p.PromptTokens)
			}
		}
	}
	// One trace: 1025 input tokens, 101 output tokens decoded in 2 s:
	// TPOT 20 ms, 50 tokens per second, in bucket 2048.
	r = newRecorder(t, Config{})
	r.ObserveTrace(Trace{Model: "m", InputTokens: 1025, OutputTokens: 101, Decode: 2 * time.Second, TPOT: 20 * time.Millisecond})
	if p := r.Snapshot().Prompts; len(p) != 1 || p[0].PromptTokens != "2048" || p[0].TPOT.Sum != 0.02 || p[0].Throughput.Sum != 50 {
		t.Errorf("prompts %+v", p)
	}
}

// TestQualityCounters: requests by outcome, guardrail figures and verdicts
// per (model, tenant), against counts of the fed traces.
func TestQualityCounters(t *testing.T) {
	r := newRecorder(t, Config{})
	rng := rand.New(rand.NewPCG(5, 6))
	kinds := []string{"pii", "jailbreak", "toxicity", "hallucination", ""}
	decisions := []string{"pass", "flag", "block", "bypass", ""}
	type counts struct{ success, errs, blocked, checked, bypass, pii uint64 }
	wantReq := map[string]*counts{}
	wantVerdicts := map[string]uint64{}
	unk := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	for i := range 3000 {
		model := []string{"llama", "qwen", ""}[i%3]
		tenant := []string{"acme", "globex", ""}[rng.IntN(3)]
		tr := Trace{Model: model, Tenant: tenant, Error: rng.IntN(5) == 0, Blocked: rng.IntN(4) == 0,
			GuardrailChecked: rng.IntN(2) == 0, GuardrailBypass: rng.IntN(7) == 0, PIILeak: rng.IntN(9) == 0}
		for range rng.IntN(4) {
			tr.Verdicts = append(tr.Verdicts, Verdict{Kind: kinds[rng.IntN(len(kinds))], Decision: decisions[rng.IntN(len(decisions))]})
		}
		r.ObserveTrace(tr)
		k := unk(model) + "/" + unk(tenant)
		if wantReq[k] == nil {
			wantReq[k] = &counts{}
		}
		c := wantReq[k]
		switch {
		case tr.Error:
			c.errs++
		case tr.Blocked:
			c.blocked++
		default:
			c.success++
		}
		c.checked += b2u(tr.GuardrailChecked)
		c.bypass += b2u(tr.GuardrailBypass)
		c.pii += b2u(tr.PIILeak)
		for _, v := range tr.Verdicts {
			wantVerdicts[k+"/"+unk(v.Kind)+"/"+unk(v.Decision)]++
		}
	}
	snap := r.Snapshot()
	if len(snap.Requests) != len(wantReq) {
		t.Fatalf("request series %d, want %d", len(snap.Requests), len(wantReq))
	}
	for _, q := range snap.Requests {
		want := wantReq[q.Model+"/"+q.Tenant]
		got := counts{q.Success, q.Error, q.Blocked, q.GuardrailChecked, q.GuardrailBypass, q.PIILeaks}
		if want == nil || got != *want {
			t.Errorf("%s/%s: %+v, want %+v", q.Model, q.Tenant, got, want)
		}
	}
	if len(snap.Verdicts) != len(wantVerdicts) {
		t.Fatalf("verdict series %d, want %d", len(snap.Verdicts), len(wantVerdicts))
	}
	for _, v := range snap.Verdicts {
		if k := v.Model + "/" + v.Tenant + "/" + v.Kind + "/" + v.Decision; v.Count != wantVerdicts[k] {
			t.Errorf("%s: %d, want %d", k, v.Count, wantVerdicts[k])
		}
	}
	// Invalid UTF-8 in a label value is repaired.
	r = newRecorder(t, Config{})
	r.ObserveTrace(Trace{Tenant: "a\xffb", Verdicts: []Verdict{{Kind: "\xfe"}}})
	snap = r.Snapshot()
	if snap.Requests[0].Tenant != "a\uFFFDb" || snap.Verdicts[0].Kind != "\uFFFD" || snap.Verdicts[0].Decision != "unknown" {
		t.Errorf("requests %+v verdicts %+v", snap.Requests, snap.Verdicts)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestObserveTraceAllocs: once its label sets exist, observing a trace
// with every figure, a prompt length, a tenant and verdicts allocates
// nothing.
func TestObserveTraceAllocs(t *testing.T) {
	r := newRecorder(t, Config{MaxTokensPerSecond: map[string]float64{"m": 1000}})
	tr := Trace{Model: "m", Instance: "i", TraceID: traceID(1), TTFT: time.Second, TPOT: 20 * time.Millisecond, Queue: time.Millisecond,
		Prefill: 100 * time.Millisecond, Decode: time.Second, E2E: 2 * time.Second, InputTokens: 3000, OutputTokens: 51,
		Layers: []Layer{{Index: 0, Count: 50, Total: time.Second}}, CacheHitRatio: 0.5, HasCacheHit: true, Time: 1,
		Tenant: "acme", Verdicts: []Verdict{{Kind: "pii", Decision: "flag"}, {Kind: "jailbreak", Decision: "pass"}},
		GuardrailChecked: true, PIILeak: true}
	r.ObserveTrace(tr)
	if n := testing.AllocsPerRun(100, func() { r.ObserveTrace(tr) }); n != 0 {
		t.Errorf("ObserveTrace allocates %v times per trace", n)
	}
}
