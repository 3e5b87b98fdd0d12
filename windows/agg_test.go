package windows

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// exactQuantile is the sample of rank ⌊q·(n−1)⌋ in ascending order, the
// definition Agg.Quantile approximates.
func exactQuantile(sorted []float64, q float64) float64 {
	return sorted[int(math.Floor(q*float64(len(sorted)-1)))]
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

var testQuantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1}

func TestAggQuantileLognormal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const n = 200_000
	vals := make([]float64, n)
	whole := &Agg{}
	parts := make([]Agg, 16)
	for i := range vals {
		// Latency-like: median 200 ms, long tail (σ = 1.2).
		v := math.Exp(math.Log(0.2) + 1.2*r.NormFloat64())
		vals[i] = v
		whole.Add(int64(i), v, "")
		parts[r.IntN(len(parts))].Add(int64(i), v, "")
	}
	merged := &Agg{}
	for i := range parts {
		merged.Merge(&parts[i])
	}
	slices.Sort(vals)
	worst := 0.0
	for _, q := range testQuantiles {
		want := exactQuantile(vals, q)
		for name, a := range map[string]*Agg{"whole": whole, "merged": merged} {
			got := a.Quantile(q)
			e := relErr(got, want)
			worst = max(worst, e)
			if e > 0.01 {
				t.Errorf("%s: q%v = %v, exact %v: relative error %.4f > 1%%", name, q, got, want, e)
			}
		}
	}
	t.Logf("lognormal latencies, %d samples: max relative quantile error %.5f (%.3f %%) over %d quantiles, bound %.3f %%",
		n, worst, 100*worst, len(testQuantiles), 100*RelativeAccuracy)
	if whole.Quantile(0) != vals[0] || whole.Quantile(1) != vals[n-1] {
		t.Errorf("q0/q1 = %v/%v, want exact %v/%v", whole.Quantile(0), whole.Quantile(1), vals[0], vals[n-1])
	}
}

func TestAggQuantileMixedSigns(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	var vals []float64
	a := &Agg{}
	for i := range 20_000 {
		v := r.NormFloat64() * 100
		if i%10 == 0 {
			v = 0
		}
		vals = append(vals, v)
		a.Add(int64(i), v, "")
	}
	slices.Sort(vals)
	for _, q := range testQuantiles {
		want := exactQuantile(vals, q)
		got := a.Quantile(q)
		if want == 0 && got != 0 || want != 0 && relErr(got, want) > 0.01 {
			t.Errorf("q%v = %v, exact %v", q, got, want)
		}
	}
}

func TestAggEmpty(t *testing.T) {
	var a Agg
	if q := a.Quantile(0.5); !math.IsNaN(q) {
		t.Errorf("empty quantile = %v, want NaN", q)
	}
	if !math.IsNaN(a.Mean()) || a.Growth() != 0 || len(a.Exemplars()) != 0 {
		t.Errorf("empty: mean %v growth %v exemplars %v", a.Mean(), a.Growth(), a.Exemplars())
	}
	a.Add(1, math.NaN(), "x")
	a.Add(1, math.Inf(1), "x")
	if a.Count != 0 {
		t.Errorf("non-finite values counted: %+v", a)
	}
	a.Add(1, 3, "")
	if q := a.Quantile(1.5); !math.IsNaN(q) {
		t.Errorf("quantile 1.5 = %v, want NaN", q)
	}
	a.Reset()
	if a.Count != 0 || !math.IsNaN(a.Quantile(0.5)) {
		t.Errorf("after Reset: %+v q50 %v", a, a.Quantile(0.5))
	}
}

func TestAggFirstLastGrowth(t *testing.T) {
	var a Agg
	sec := int64(1e9)
	a.Add(10*sec, 100, "")
	a.Add(5*sec, 40, "") // out of order: the new first
	a.Add(65*sec, 160, "")
	a.Add(65*sec, 150, "") // same time: the larger value is last
	a.Add(5*sec, 50, "")   // same time: the smaller value is first
	if a.First != 40 || a.FirstT != 5*sec || a.Last != 160 || a.LastT != 65*sec {
		t.Fatalf("first %v@%d last %v@%d", a.First, a.FirstT, a.Last, a.LastT)
	}
	if g := a.Growth(); g != 2 { // (160-40)/60 s
		t.Errorf("growth = %v /s, want 2", g)
	}
	if a.Min != 40 || a.Max != 160 || a.Count != 5 || a.Sum != 500 || a.Mean() != 100 {
		t.Errorf("min %v max %v count %v sum %v", a.Min, a.Max, a.Count, a.Sum)
	}
	var b Agg
	b.Add(7*sec, 1, "")
	b.Add(7*sec, 2, "")
	if b.Growth() != 0 {
		t.Errorf("growth over one instant = %v, want 0", b.Growth())
	}
}

// sample is one raw input of the reference models.
type sample struct {
	key string
	t   int64
	v   float64
	id  string
}

// refExemplars computes the kept exemplars directly: each ID's best
// sample (largest value, then earliest), the TopK best IDs.
func refExemplars(samples []sample) []Exemplar {
	best := map[string]Exemplar{}
	for _, s := range samples {
		if s.id == "" || math.IsNaN(s.v) || math.IsInf(s.v, 0) {
			continue
		}
		e := Exemplar{Value: s.v, ID: s.id, Time: s.t}
		if b, ok := best[s.id]; !ok || e.Value > b.Value || e.Value == b.Value && e.Time < b.Time {
			best[s.id] = e
		}
	}
	out := make([]Exemplar, 0, len(best))
	for _, e := range best {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Value != b.Value {
			return a.Value > b.Value
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Time < b.Time
	})
	if len(out) > TopK {
		out = out[:TopK]
	}
	return out
}

func TestAggExemplars(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var ss []sample
		var a Agg
		for range r.IntN(40) {
			s := sample{t: r.Int64N(100), v: float64(r.IntN(10)), id: fmt.Sprintf("id%d", r.IntN(12))}
			if r.IntN(8) == 0 {
				s.id = ""
			}
			ss = append(ss, s)
			a.Add(s.t, s.v, s.id)
		}
		if got, want := a.Exemplars(), refExemplars(ss); !slices.Equal(got, want) {
			t.Fatalf("round %d: exemplars %v, want %v", round, got, want)
		}
	}
}

// randomAgg fills an Agg with values that are multiples of 1/8, so that
// sums are exact whatever the order.
func randomAgg(r *rand.Rand, n int) *Agg {
	a := &Agg{}
	for range n {
		v := float64(r.IntN(80000)-1000) / 8
		a.Add(r.Int64N(1e12), v, fmt.Sprintf("t%d", r.IntN(20)))
	}
	return a
}

func TestAggMergeAssociative(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for round := range 100 {
		a, b, c := randomAgg(r, r.IntN(50)), randomAgg(r, r.IntN(50)), randomAgg(r, r.IntN(50))
		left := a.Clone()
		left.Merge(b)
		left.Merge(c)
		bc := b.Clone()
		bc.Merge(c)
		right := a.Clone()
		right.Merge(bc)
		rev := c.Clone()
		rev.Merge(b)
		rev.Merge(a)
		l, rr, v := left.AppendBinary(nil), right.AppendBinary(nil), rev.AppendBinary(nil)
		if !bytes.Equal(l, rr) || !bytes.Equal(l, v) {
			t.Fatalf("round %d: (a+b)+c, a+(b+c) and c+b+a differ:\n%+v\n%+v\n%+v", round, left, right, rev)
		}
		for _, q := range testQuantiles {
			if x, y := left.Quantile(q), right.Quantile(q); !(x == y || math.IsNaN(x) && math.IsNaN(y)) {
				t.Fatalf("round %d: q%v %v vs %v", round, q, x, y)
			}
		}
	}
}

func TestAggBinaryRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 50 {
		a := randomAgg(r, r.IntN(300))
		enc := a.AppendBinary(nil)
		var b Agg
		if err := b.UnmarshalBinary(enc); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(b.AppendBinary(nil), enc) {
			t.Fatalf("round %d: re-encoding differs", round)
		}
		for _, q := range testQuantiles {
			if x, y := a.Quantile(q), b.Quantile(q); !(x == y || math.IsNaN(x) && math.IsNaN(y)) {
				t.Fatalf("round %d: q%v %v vs %v", round, q, x, y)
			}
		}
		if !slices.Equal(a.Exemplars(), b.Exemplars()) {
			t.Fatalf("round %d: exemplars differ", round)
		}
	}
	var a Agg
	a.Add(1, 2, "x")
	enc := a.AppendBinary(nil)
	for i := range len(enc) {
		if err := new(Agg).UnmarshalBinary(enc[:i]); err == nil {
			t.Errorf("truncated at %d: no error", i)
		}
	}
	if err := new(Agg).UnmarshalBinary(append(enc, 0)); err == nil {
		t.Error("trailing byte: no error")
	}
}

func TestAggBytesBounded(t *testing.T) {
	var a Agg
	small := 0
	r := rand.New(rand.NewPCG(8, 8))
	for i := range 100_000 {
		// Values over the whole float64 range: the sketch collapses.
		v := math.Exp(r.Float64()*1400 - 700)
		if i%2 == 0 {
			v = -v
		}
		a.Add(int64(i), v, fmt.Sprint(i))
	}
	var s Agg
	for i := range 11 {
		s.Add(int64(i), 0.1+float64(i)/100, fmt.Sprint(i))
	}
	small = s.Bytes()
	limit := 2*8*MaxSketchBins + 2048
	if b := a.Bytes(); b > limit || small > 4096 {
		t.Errorf("Bytes: %d for 11 close values, %d for 100000 over the float64 range; want ≤ 4096 and ≤ %d", small, b, limit)
	}
	enc := a.AppendBinary(nil)
	var b Agg
	if err := b.UnmarshalBinary(enc); err != nil {
		t.Fatalf("collapsed sketch: %v", err)
	}
	if !bytes.Equal(b.AppendBinary(nil), enc) {
		t.Error("collapsed sketch: re-encoding differs")
	}
}

func FuzzAggUnmarshalBinary(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{0, 1, 3, 40} {
		f.Add(randomAgg(r, n).AppendBinary(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Agg
		if err := a.UnmarshalBinary(b); err != nil {
			return
		}
		enc := a.AppendBinary(nil)
		var c Agg
		if err := c.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decoding a decoded aggregate: %v", err)
		}
		if !bytes.Equal(c.AppendBinary(nil), enc) {
			t.Fatal("re-encoding differs")
		}
		for _, q := range testQuantiles {
			a.Quantile(q)
		}
		a.Growth()
		a.Bytes()
		a.Merge(&c)
		a.Add(1, 1, "x")
	})
}

// TestAggNoSketch: an aggregate without a sketch keeps everything but
// quantiles, encodes and decodes as such, and merges with one that has a
// sketch without growing one.
func TestAggNoSketch(t *testing.T) {
	var plain, full Agg
	plain.NoSketch = true
	for i := range 100 {
		plain.Add(int64(i), float64(i), fmt.Sprintf("id-%d", i))
		full.Add(int64(i), float64(i), "")
	}
	if !math.IsNaN(plain.Quantile(0.5)) || plain.Count != 100 || plain.Sum != full.Sum || plain.Growth() != full.Growth() || len(plain.Exemplars()) != TopK {
		t.Fatalf("plain %+v", plain)
	}
	plain.Merge(&full)
	if plain.sketch != nil || plain.Count != 200 {
		t.Fatalf("merge grew a sketch or lost counts: %+v", plain)
	}
	var back Agg
	if err := back.UnmarshalBinary(plain.AppendBinary(nil)); err != nil {
		t.Fatal(err)
	}
	if !back.NoSketch || back.Count != 200 || back.Sum != plain.Sum || !bytes.Equal(back.AppendBinary(nil), plain.AppendBinary(nil)) {
		t.Fatalf("round trip %+v", back)
	}
	if plain.Bytes() >= full.Bytes() {
		t.Errorf("plain %d bytes, with sketch %d", plain.Bytes(), full.Bytes())
	}
}
