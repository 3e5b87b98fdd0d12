package llmmetrics

import (
	"fmt"
	"math"
	"math/rand/v2"
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
			Layers: []Layer{{Index: int64(i), Count: 1, Total: time.Millisecond}}})
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
	}
	got := FromDerived(d, "vllm-0", traceID(0), 99)
	want := Trace{Model: "llama", Instance: "vllm-0", TraceID: traceID(0), Time: 99, TTFT: 1, TPOT: 2, E2E: 3, Queue: 4, Prefill: 5, Decode: 6,
		InputTokens: 7, OutputTokens: 8, CacheHitRatio: 0.5, HasCacheHit: true, Layers: []Layer{{Index: 3, Count: 4, Total: 40}}}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got := FromDerived(nil, "i", "t", 1); got.Model != "" || got.Instance != "i" {
		t.Errorf("nil derived: %+v", got)
	}
	if got := FromDerived(&braidpb.Derived{}, "", "", 0); got.HasCacheHit {
		t.Errorf("absent hit ratio became present")
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

// BenchmarkObserveTrace: one trace with every latency, a cache-hit ratio and
// 32 layers, from parallel goroutines over 6 label sets.
func BenchmarkObserveTrace(b *testing.B) {
	r, err := New(Config{MaxTokensPerSecond: map[string]float64{"m0": 1000}})
	if err != nil {
		b.Fatal(err)
	}
	layers := make([]Layer, benchLayers)
	for i := range layers {
		layers[i] = Layer{Index: int64(i), Count: 100, Total: 50 * time.Millisecond}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.ObserveTrace(Trace{Model: "m" + strconv.Itoa(i%2), Instance: "i" + strconv.Itoa(i%3), TraceID: "0123456789abcdef0123456789abcdef",
				TTFT: time.Duration(i%5000) * time.Millisecond, TPOT: 20 * time.Millisecond, Queue: time.Millisecond, Prefill: 100 * time.Millisecond,
				Decode: time.Second, E2E: 1200 * time.Millisecond, OutputTokens: 50, Layers: layers, CacheHitRatio: 0.5, HasCacheHit: true, Time: int64(i)})
		}
	})
}
