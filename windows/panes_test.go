package windows

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// op is one step of a test stream: a sample, or an Advance to wm.
type op struct {
	advance bool
	wm      int64
	s       sample
}

// got is one reported window.
type got struct {
	key      string
	end      int64
	revision bool
	agg      *Agg
}

func (g got) String() string {
	return fmt.Sprintf("%s@%d rev=%v n=%v", g.key, g.end, g.revision, g.agg.Count)
}

// canonical renders reports byte-exactly, for comparing two runs.
func canonical(rs [][]got) string {
	var sb strings.Builder
	for i, batch := range rs {
		fmt.Fprintf(&sb, "advance %d\n", i)
		for _, g := range batch {
			fmt.Fprintf(&sb, "%s %d %v %x\n", g.key, g.end, g.revision, g.agg.AppendBinary(nil))
		}
	}
	return sb.String()
}

// genStream makes a random stream over keys: event times mostly
// increasing with bounded disorder, some samples far behind (late, or
// within lateness), keys pausing for a while (so windows go empty), and
// watermarks trailing the largest time by the out-of-orderness, now and
// then jumping ahead.
func genStream(r *rand.Rand, slide int64, n int) []op {
	sec := int64(time.Second)
	keys := []string{"a", "b", "c", "model=x,instance=1", "model=y,instance=2"}
	paused := map[string]int64{}
	now := int64(1_700_000_000)*sec + r.Int64N(100*sec)
	if r.IntN(4) == 0 {
		now = -5*slide + r.Int64N(3*slide) // around and before the epoch
	}
	ooo := 5 * sec
	var ops []op
	for len(ops) < n {
		now += r.Int64N(700 * int64(time.Millisecond))
		switch x := r.IntN(100); {
		case x < 6:
			wm := now - ooo
			if r.IntN(6) == 0 {
				wm += r.Int64N(3 * slide)
			}
			ops = append(ops, op{advance: true, wm: wm})
			continue
		case x < 8:
			paused[keys[r.IntN(len(keys))]] = now + r.Int64N(4*slide)
			continue
		}
		k := keys[r.IntN(len(keys))]
		if paused[k] > now {
			continue
		}
		t := now - r.Int64N(ooo)
		if r.IntN(25) == 0 {
			t = now - r.Int64N(3*slide+50*sec) // far behind
		}
		v := math.Exp(math.Log(0.3) + r.NormFloat64())
		if r.IntN(20) == 0 {
			v = float64(r.IntN(3)) // ties, zeros
		}
		id := fmt.Sprintf("trace%02d", r.IntN(30))
		if r.IntN(10) == 0 {
			id = ""
		}
		ops = append(ops, op{s: sample{key: k, t: t, v: v, id: id}})
	}
	return append(ops, op{advance: true, wm: MaxTime})
}

// reference computes windows by brute force from every accepted sample.
type reference struct {
	size, slide, lateness int64
	wm                    int64
	accepted              []sample
	dirty                 []sample // accepted since the last Advance, into windows already passed
}

func (ref *reference) add(s sample) bool {
	last := (floorDiv(s.t, ref.slide)*ref.slide + ref.size) // end of the last window holding s
	if s.t < -maxAbsTime || s.t > maxAbsTime || ref.wm != MinTime && last+ref.lateness <= ref.wm {
		return true
	}
	ref.accepted = append(ref.accepted, s)
	if first := floorDiv(s.t, ref.slide)*ref.slide + ref.slide; ref.wm != MinTime && first <= ref.wm {
		ref.dirty = append(ref.dirty, s)
	}
	return false
}

func (ref *reference) window(key string, end int64) []sample {
	var out []sample
	for _, s := range ref.accepted {
		if s.key == key && s.t >= end-ref.size && s.t < end {
			out = append(out, s)
		}
	}
	return out
}

// ends lists the ends of the windows holding t.
func (ref *reference) ends(t int64) []int64 {
	var out []int64
	for e := floorDiv(t, ref.slide)*ref.slide + ref.slide; e-ref.size <= t; e += ref.slide {
		out = append(out, e)
	}
	return out
}

type refReport struct {
	key      string
	end      int64
	revision bool
}

func (ref *reference) advance(wm int64) []refReport {
	wm = max(wm, ref.wm)
	seen := map[refReport]bool{}
	var out []refReport
	emit := func(r refReport) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	passed := func(e int64) bool { return ref.wm != MinTime && e <= ref.wm }
	final := func(e int64) bool { return ref.wm != MinTime && e+ref.lateness <= ref.wm }
	for _, s := range ref.dirty {
		es := ref.ends(s.t)
		for _, e := range es {
			if passed(e) && !final(e) {
				emit(refReport{s.key, e, true})
			}
		}
		if after := es[len(es)-1] + ref.slide; passed(after) && len(ref.window(s.key, after)) == 0 {
			emit(refReport{s.key, after, true})
		}
	}
	ref.dirty = nil
	// A key's window is reported when it holds data or the one before it
	// does.
	for _, s := range ref.accepted {
		es := ref.ends(s.t)
		for _, e := range append(es, es[len(es)-1]+ref.slide) {
			if passed(e) || e > wm {
				continue
			}
			if len(ref.window(s.key, e)) > 0 || len(ref.window(s.key, e-ref.slide)) > 0 {
				emit(refReport{s.key, e, false})
			}
		}
	}
	slices.SortFunc(out, func(a, b refReport) int {
		if a.end != b.end {
			return int(a.end/ref.slide - b.end/ref.slide)
		}
		return strings.Compare(a.key, b.key)
	})
	ref.wm = wm
	return out
}

// checkAgg compares a reported aggregate with the window's samples.
func checkAgg(t *testing.T, what string, a *Agg, ss []sample, worst *float64) {
	t.Helper()
	if a.Count != float64(len(ss)) {
		t.Fatalf("%s: count %v, want %d", what, a.Count, len(ss))
	}
	if len(ss) == 0 {
		if !math.IsNaN(a.Quantile(0.5)) || a.Sum != 0 {
			t.Fatalf("%s: empty window with sum %v, q50 %v", what, a.Sum, a.Quantile(0.5))
		}
		return
	}
	vals := make([]float64, len(ss))
	sum := 0.0
	first, last := ss[0], ss[0]
	for i, s := range ss {
		vals[i] = s.v
		sum += s.v
		if s.t < first.t || s.t == first.t && s.v < first.v {
			first = s
		}
		if s.t > last.t || s.t == last.t && s.v > last.v {
			last = s
		}
	}
	slices.Sort(vals)
	if math.Abs(a.Sum-sum) > 1e-9*math.Max(1, math.Abs(sum)) {
		t.Fatalf("%s: sum %v, want %v", what, a.Sum, sum)
	}
	if a.Min != vals[0] || a.Max != vals[len(vals)-1] {
		t.Fatalf("%s: min/max %v/%v, want %v/%v", what, a.Min, a.Max, vals[0], vals[len(vals)-1])
	}
	if a.First != first.v || a.FirstT != first.t || a.Last != last.v || a.LastT != last.t {
		t.Fatalf("%s: first %v@%d last %v@%d, want %v@%d %v@%d", what, a.First, a.FirstT, a.Last, a.LastT, first.v, first.t, last.v, last.t)
	}
	if want := refExemplars(ss); !slices.Equal(a.Exemplars(), want) {
		t.Fatalf("%s: exemplars %v, want %v", what, a.Exemplars(), want)
	}
	for _, q := range testQuantiles {
		want := exactQuantile(vals, q)
		got := a.Quantile(q)
		e := relErr(got, want)
		if want == 0 && got != 0 || e > 0.01 {
			t.Fatalf("%s: q%v = %v, exact %v", what, q, got, want)
		}
		*worst = max(*worst, e)
	}
}

var testSpecs = []struct {
	spec     Spec
	lateness time.Duration
}{
	{Spec{Size: 10 * time.Second}, 0},
	{Spec{Size: 10 * time.Second, Slide: 10 * time.Second}, 7 * time.Second},
	{Spec{Size: 30 * time.Second, Slide: 5 * time.Second}, 0},
	{Spec{Size: 20 * time.Second, Slide: 2 * time.Second}, 15 * time.Second},
	{Spec{Size: 9 * time.Second, Slide: 3 * time.Second}, 30 * time.Second},
}

// run feeds ops to a Panes, restoring it from its own encoding before the
// ops at which restore returns true, and returns the late flags and
// reports per Advance.
func run(t *testing.T, spec Spec, lateness time.Duration, ops []op, restore func(i int) bool) ([]bool, [][]got, *Panes) {
	t.Helper()
	p, err := NewPanes(spec, lateness)
	if err != nil {
		t.Fatal(err)
	}
	var lates []bool
	var reports [][]got
	for i, o := range ops {
		if restore != nil && restore(i) {
			enc := p.AppendBinary(nil)
			q, err := NewPanes(spec, lateness)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.UnmarshalBinary(enc); err != nil {
				t.Fatalf("op %d: restore: %v", i, err)
			}
			if !bytes.Equal(q.AppendBinary(nil), enc) {
				t.Fatalf("op %d: restored panes re-encode differently", i)
			}
			p = q
		}
		if !o.advance {
			lates = append(lates, p.Add(o.s.key, o.s.t, o.s.v, o.s.id))
			continue
		}
		var batch []got
		p.Advance(o.wm, func(key string, end int64, agg *Agg, revision bool) {
			batch = append(batch, got{key, end, revision, agg.Clone()})
		})
		reports = append(reports, batch)
	}
	return lates, reports, p
}

func TestPanesAgainstReference(t *testing.T) {
	worst := 0.0
	windows := 0
	for _, tc := range testSpecs {
		for seed := range uint64(5) {
			name := fmt.Sprintf("size=%v/slide=%v/lateness=%v/seed=%d", tc.spec.Size, tc.spec.slide(), tc.lateness, seed)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 99))
				ops := genStream(r, int64(tc.spec.slide()), 2500)
				lates, reports, p := run(t, tc.spec, tc.lateness, ops, nil)
				ref := &reference{size: int64(tc.spec.Size), slide: int64(tc.spec.slide()), lateness: int64(tc.lateness), wm: MinTime}
				li, ai, nLate, nRev := 0, 0, 0, 0
				for _, o := range ops {
					if !o.advance {
						if want := ref.add(o.s); lates[li] != want {
							t.Fatalf("sample %d %+v: late %v, want %v", li, o.s, lates[li], want)
						}
						if lates[li] {
							nLate++
						}
						li++
						continue
					}
					want := ref.advance(o.wm)
					batch := reports[ai]
					if len(batch) != len(want) {
						t.Fatalf("advance %d to %d: %d reports %v, want %d %v", ai, o.wm, len(batch), batch, len(want), want)
					}
					for i, w := range want {
						g := batch[i]
						if g.key != w.key || g.end != w.end || g.revision != w.revision {
							t.Fatalf("advance %d report %d: %v, want %+v", ai, i, g, w)
						}
						if g.revision {
							nRev++
						}
						checkAgg(t, g.String(), g.agg, ref.window(w.key, w.end), &worst)
						windows++
					}
					ai++
				}
				if p.Len() != 0 || p.Keys() != 0 {
					t.Errorf("after the final watermark: %d panes, %d keys left", p.Len(), p.Keys())
				}
				if nLate == 0 || nRev == 0 && tc.lateness > 0 {
					t.Errorf("stream exercised %d late samples, %d revisions", nLate, nRev)
				}
			})
		}
	}
	t.Logf("%d windows checked; max relative quantile error %.5f", windows, worst)
}

func TestPanesRestoreMidStream(t *testing.T) {
	for _, tc := range testSpecs {
		for seed := range uint64(3) {
			r := rand.New(rand.NewPCG(seed, 42))
			ops := genStream(r, int64(tc.spec.slide()), 2000)
			lates, reports, p := run(t, tc.spec, tc.lateness, ops, nil)
			every := 1 + r.IntN(150)
			lates2, reports2, p2 := run(t, tc.spec, tc.lateness, ops, func(i int) bool { return i%every == 0 })
			if !slices.Equal(lates, lates2) {
				t.Fatalf("%+v seed %d: late flags differ after restores", tc, seed)
			}
			if a, b := canonical(reports), canonical(reports2); a != b {
				t.Fatalf("%+v seed %d: reports differ after restores every %d ops", tc, seed, every)
			}
			if !bytes.Equal(p.AppendBinary(nil), p2.AppendBinary(nil)) {
				t.Fatalf("%+v seed %d: final states differ", tc, seed)
			}
		}
	}
}

// TestPanesAdvanceGrouping: how often the watermark advances does not
// change what is reported, only how reports are batched.
func TestPanesAdvanceGrouping(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	spec := Spec{Size: 20 * time.Second, Slide: 5 * time.Second}
	ops := genStream(r, int64(spec.Slide), 3000)
	// The same samples, a quarter of the watermarks.
	var inOrder, sparse []op
	for _, o := range ops {
		if o.advance {
			inOrder = append(inOrder, o)
			if r.IntN(4) == 0 {
				sparse = append(sparse, o)
			}
			continue
		}
		inOrder = append(inOrder, o)
		sparse = append(sparse, o)
	}
	sparse = append(sparse, inOrder[len(inOrder)-1])
	flat := func(rs [][]got) []string {
		var out []string
		for _, b := range rs {
			for _, g := range b {
				out = append(out, fmt.Sprintf("%s %d %x", g.key, g.end, g.agg.AppendBinary(nil)))
			}
		}
		return out
	}
	// Lateness as large as the stream: nothing is late, revisions repeat
	// windows; compare the last report of each window.
	last := func(rs [][]got) map[string]string {
		m := map[string]string{}
		for _, b := range rs {
			for _, g := range b {
				m[fmt.Sprintf("%s %d", g.key, g.end)] = fmt.Sprintf("%x", g.agg.AppendBinary(nil))
			}
		}
		return m
	}
	_, a, _ := run(t, spec, time.Hour, inOrder, nil)
	_, b, _ := run(t, spec, time.Hour, sparse, nil)
	la, lb := last(a), last(b)
	if len(la) != len(lb) {
		t.Fatalf("%d windows vs %d with sparser watermarks", len(la), len(lb))
	}
	for k, v := range la {
		if lb[k] != v {
			t.Fatalf("window %s differs with sparser watermarks", k)
		}
	}
	if len(flat(a)) < len(la) {
		t.Fatal("fewer reports than windows")
	}
}

func TestPanesEmptyWindowThenForgotten(t *testing.T) {
	sec := int64(time.Second)
	p, err := NewPanes(Spec{Size: 10 * time.Second}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Add("k", 5*sec, 1, "t1")
	p.Add("k", 25*sec, 2, "t2")
	var out []string
	fn := func(key string, end int64, a *Agg, rev bool) {
		out = append(out, fmt.Sprintf("%s end=%ds n=%v rev=%v", key, end/sec, a.Count, rev))
	}
	p.Advance(1000*sec, fn)
	want := []string{
		"k end=10s n=1 rev=false",
		"k end=20s n=0 rev=false", // the data left the window
		"k end=30s n=1 rev=false",
		"k end=40s n=0 rev=false",
	}
	if !slices.Equal(out, want) {
		t.Fatalf("reports %q, want %q", out, want)
	}
	if p.Keys() != 0 || p.Len() != 0 {
		t.Errorf("key not forgotten: %d keys %d panes", p.Keys(), p.Len())
	}
}

func TestPanesLateAndRevision(t *testing.T) {
	sec := int64(time.Second)
	p, err := NewPanes(Spec{Size: 10 * time.Second, Slide: 5 * time.Second}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fn := func(key string, end int64, a *Agg, rev bool) {
		out = append(out, fmt.Sprintf("%s end=%ds n=%v rev=%v", key, end/sec, a.Count, rev))
	}
	p.Add("k", 12*sec, 1, "")
	p.Advance(20*sec, fn) // windows 15 and 20 hold it; 25 would be empty
	// Pane [5, 10): last window ends 15, +5 s lateness = 20 ≤ 20: late.
	if !p.Add("k", 7*sec, 1, "") {
		t.Error("sample behind the lateness accepted")
	}
	// Pane [10, 15): last window ends 20, +5 = 25 > 20: accepted, and
	// window 20 is revised; window 15 is final (15 + 5 ≤ 20).
	if p.Add("k", 11*sec, 3, "") {
		t.Error("sample within the lateness dropped")
	}
	p.Advance(20*sec, fn)
	p.Advance(30*sec, fn)
	want := []string{
		"k end=15s n=1 rev=false", "k end=20s n=1 rev=false",
		"k end=20s n=2 rev=true",
		"k end=25s n=0 rev=false", // the empty window after the data
	}
	if !slices.Equal(out, want) {
		t.Fatalf("reports\n%q\nwant\n%q", out, want)
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		ok   bool
	}{
		{Spec{Size: time.Minute}, true},
		{Spec{Size: time.Minute, Slide: time.Minute}, true},
		{Spec{Size: time.Minute, Slide: time.Second}, true},
		{Spec{Size: 2 * time.Minute, Slide: time.Second}, true},
		{Spec{Size: 121 * time.Second, Slide: time.Second}, false},
		{Spec{Size: time.Minute, Slide: 7 * time.Second}, false},
		{Spec{Size: time.Minute, Slide: 2 * time.Minute}, false},
		{Spec{}, false},
		{Spec{Size: -time.Second}, false},
		{Spec{Size: time.Minute, Slide: -time.Second}, false},
		{Spec{Size: MaxWindowSize + 1}, false},
	} {
		if err := tc.spec.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tc.spec, err, tc.ok)
		}
	}
	err := Spec{Size: -1, Slide: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "size") || !strings.Contains(err.Error(), "slide") {
		t.Errorf("every problem at once: %v", err)
	}
	if _, err := NewPanes(Spec{Size: time.Minute}, -time.Second); err == nil {
		t.Error("negative lateness accepted")
	}
}

func TestPanesUnmarshalConfig(t *testing.T) {
	p, _ := NewPanes(Spec{Size: time.Minute, Slide: 10 * time.Second}, time.Second)
	p.Add("k", 1, 1, "x")
	enc := p.AppendBinary(nil)
	q, _ := NewPanes(Spec{Size: time.Minute}, time.Second)
	if err := q.UnmarshalBinary(enc); !errors.Is(err, ErrConfigMismatch) {
		t.Errorf("other spec: %v, want ErrConfigMismatch", err)
	}
	var z Panes
	if err := z.UnmarshalBinary(enc); err != nil || z.Spec() != p.Spec() || z.Len() != 1 {
		t.Errorf("zero Panes: %v, spec %+v, %d panes", err, z.Spec(), z.Len())
	}
	for i := range len(enc) {
		if err := z.UnmarshalBinary(enc[:i]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated at %d: %v, want ErrCorrupt", i, err)
		}
	}
	if z.Len() != 1 {
		t.Error("failed unmarshal changed the panes")
	}
}

func FuzzPanesUnmarshalBinary(f *testing.F) {
	for _, tc := range testSpecs[:3] {
		r := rand.New(rand.NewPCG(1, 2))
		ops := genStream(r, int64(tc.spec.slide()), 60)
		p, _ := NewPanes(tc.spec, tc.lateness)
		for _, o := range ops[:len(ops)-1] {
			if o.advance {
				p.Advance(o.wm, func(string, int64, *Agg, bool) {})
			} else {
				p.Add(o.s.key, o.s.t, o.s.v, o.s.id)
			}
		}
		f.Add(p.AppendBinary(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Panes
		if err := p.UnmarshalBinary(b); err != nil {
			return
		}
		enc := p.AppendBinary(nil)
		var q Panes
		if err := q.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decoding decoded panes: %v", err)
		}
		if !bytes.Equal(q.AppendBinary(nil), enc) {
			t.Fatal("re-encoding differs")
		}
		p.Bytes()
		p.Add("k", p.Watermark()/2, 1, "x")
		n := 0
		p.Advance(p.Watermark()/2+int64(time.Hour), func(string, int64, *Agg, bool) { n++ })
		p.Advance(MaxTime, func(string, int64, *Agg, bool) { n++ })
		if p.Len() != 0 {
			t.Fatalf("%d panes left after MaxTime", p.Len())
		}
	})
}
