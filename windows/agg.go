package windows

import (
	"math"
	"slices"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

const (
	// RelativeAccuracy is the relative accuracy of Agg's quantiles: a
	// returned quantile is within ±0.5 % of the exact one (as long as the
	// values of one Agg span less than MaxSketchBins bins, a factor of
	// about 8·10⁸ between the smallest and the largest magnitude).
	RelativeAccuracy = 0.005
	// MaxSketchBins bounds each of the sketch's two stores (positive and
	// negative values) to this many bins of 8 bytes. Beyond it the bins of
	// the smallest magnitudes are collapsed into one, losing accuracy on
	// those quantiles only.
	MaxSketchBins = 2048
	// TopK is how many exemplars an Agg keeps: those of the largest values,
	// one per ID.
	TopK = 5
)

// sketchMapping is shared by every sketch: it is immutable, and merging
// requires equal mappings.
var sketchMapping = func() *mapping.LogarithmicMapping {
	m, err := mapping.NewLogarithmicMapping(RelativeAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in (0, 1)
	}
	return m
}()

// minBin and maxBin are the bin indices the mapping produces for the
// indexable values; a decoded bin outside them is corrupt.
var (
	minBin = sketchMapping.Index(sketchMapping.MinIndexableValue()) - 1
	maxBin = sketchMapping.Index(sketchMapping.MaxIndexableValue()) + 1
)

func newSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(sketchMapping,
		store.NewCollapsingLowestDenseStore(MaxSketchBins),
		store.NewCollapsingLowestDenseStore(MaxSketchBins))
}

// Exemplar is one sample kept for its large value, with the ID of what it
// came from (a trace ID, an incident ID) and its event time, unix ns.
type Exemplar struct {
	Value float64
	ID    string
	Time  int64
}

// exemplarLess orders exemplars best first: larger value, then smaller ID,
// then earlier time. It is a total order, so the kept set never depends on
// the order samples arrive or aggregates merge in.
func exemplarLess(a, b Exemplar) bool {
	if a.Value != b.Value {
		return a.Value > b.Value
	}
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	return a.Time < b.Time
}

// Agg aggregates samples (event time, value, ID): count, sum, minimum,
// maximum, the first and the last sample by event time, a DDSketch for
// quantiles (RelativeAccuracy) and the TopK exemplars with the largest
// values.
//
// Everything in it is independent of the order in which samples are added
// and aggregates merged (sums up to floating-point rounding), so a window
// computed from panes in any grouping is the same. Memory is bounded: two
// sketch stores of at most MaxSketchBins bins and TopK exemplars.
//
// Non-finite values (NaN, ±Inf) are ignored. Min, Max, First, FirstT, Last
// and LastT are zero while Count is 0. The zero Agg is empty and ready to
// use; an Agg is not safe for concurrent use.
type Agg struct {
	Count float64
	Sum   float64
	Min   float64
	Max   float64
	// First is the value of the sample with the smallest event time FirstT
	// (unix ns); among samples at that time, the smallest value.
	First  float64
	FirstT int64
	// Last is the value of the sample with the largest event time LastT
	// (unix ns); among samples at that time, the largest value.
	Last  float64
	LastT int64
	// NoSketch: keep no quantile sketch (Quantile is NaN), for figures
	// that are only counted, summed or differenced — a sketch is the
	// largest part of an Agg. Set it before the first Add or Merge.
	NoSketch bool

	sketch    *ddsketch.DDSketch // nil until the first value
	exemplars []Exemplar         // best first (exemplarLess), distinct IDs, at most TopK
}

// Add adds a sample at event time t (unix ns) with value v. A non-empty id
// makes the sample a candidate exemplar; an ID already kept keeps its best
// sample only.
func (a *Agg) Add(t int64, v float64, id string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if a.Count == 0 {
		a.Min, a.Max = v, v
		a.First, a.FirstT = v, t
		a.Last, a.LastT = v, t
	} else {
		a.Min = min(a.Min, v)
		a.Max = max(a.Max, v)
		if t < a.FirstT || (t == a.FirstT && v < a.First) {
			a.First, a.FirstT = v, t
		}
		if t > a.LastT || (t == a.LastT && v > a.Last) {
			a.Last, a.LastT = v, t
		}
	}
	a.Count++
	a.Sum += v
	if a.NoSketch {
		if id != "" {
			a.offer(Exemplar{Value: v, ID: id, Time: t})
		}
		return
	}
	if a.sketch == nil {
		a.sketch = newSketch()
	}
	// Finite values beyond the mapping's range (within a factor of 2 of
	// MaxFloat64) go to its last bin.
	lim := sketchMapping.MaxIndexableValue()
	_ = a.sketch.Add(min(max(v, -lim), lim)) // cannot fail: finite, in range
	if id != "" {
		a.offer(Exemplar{Value: v, ID: id, Time: t})
	}
}

// offer considers e for the exemplars.
func (a *Agg) offer(e Exemplar) {
	for i, x := range a.exemplars {
		if x.ID == e.ID {
			if !exemplarLess(e, x) {
				return
			}
			a.exemplars = slices.Delete(a.exemplars, i, i+1)
			break
		}
	}
	if len(a.exemplars) == TopK && !exemplarLess(e, a.exemplars[TopK-1]) {
		return
	}
	i, _ := slices.BinarySearchFunc(a.exemplars, e, func(x, e Exemplar) int {
		if exemplarLess(x, e) {
			return -1
		}
		if exemplarLess(e, x) {
			return 1
		}
		return 0
	})
	if len(a.exemplars) == TopK {
		a.exemplars = a.exemplars[:TopK-1]
	}
	a.exemplars = slices.Insert(a.exemplars, i, e)
}

// Merge adds everything o aggregated to a. o is not modified; a and o may
// not be the same Agg.
func (a *Agg) Merge(o *Agg) {
	if o.Count == 0 {
		return
	}
	if a.Count == 0 {
		a.Min, a.Max = o.Min, o.Max
		a.First, a.FirstT = o.First, o.FirstT
		a.Last, a.LastT = o.Last, o.LastT
	} else {
		a.Min = min(a.Min, o.Min)
		a.Max = max(a.Max, o.Max)
		if o.FirstT < a.FirstT || (o.FirstT == a.FirstT && o.First < a.First) {
			a.First, a.FirstT = o.First, o.FirstT
		}
		if o.LastT > a.LastT || (o.LastT == a.LastT && o.Last > a.Last) {
			a.Last, a.LastT = o.Last, o.LastT
		}
	}
	a.Count += o.Count
	a.Sum += o.Sum
	if o.sketch != nil && !a.NoSketch {
		if a.sketch == nil {
			a.sketch = newSketch()
		}
		_ = a.sketch.MergeWith(o.sketch) // cannot fail: one mapping
	}
	for _, e := range o.exemplars {
		a.offer(e)
	}
}

// Reset empties a, keeping its sketch's memory for reuse.
func (a *Agg) Reset() {
	s := a.sketch
	ex := a.exemplars[:0]
	*a = Agg{NoSketch: a.NoSketch}
	if s != nil {
		s.Clear()
		a.sketch = s
	}
	a.exemplars = ex
}

// Clone returns a deep copy of a.
func (a *Agg) Clone() *Agg {
	c := *a
	if a.sketch != nil {
		c.sketch = a.sketch.Copy()
	}
	c.exemplars = slices.Clone(a.exemplars)
	return &c
}

// Mean returns Sum/Count, NaN when empty.
func (a *Agg) Mean() float64 {
	if a.Count == 0 {
		return math.NaN()
	}
	return a.Sum / a.Count
}

// Quantile returns the value at quantile q in [0, 1] (0.99 for p99): the
// sample of rank ⌊q·(Count−1)⌋ in ascending order, within RelativeAccuracy,
// clamped to [Min, Max]; quantiles 0 and 1 are Min and Max exactly. It returns NaN when a is
// empty or q is outside [0, 1] (or NaN), so that a threshold comparison
// on an empty window is false.
func (a *Agg) Quantile(q float64) float64 {
	if a.Count == 0 || a.sketch == nil || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	switch q {
	case 0:
		return a.Min
	case 1:
		return a.Max
	}
	v, err := a.sketch.GetValueAtQuantile(q)
	if err != nil {
		return math.NaN()
	}
	return min(max(v, a.Min), a.Max)
}

// Growth returns how fast the value grew between the first and the last
// sample, in value units per second of event time:
// (Last−First)/(LastT−FirstT). It is 0 when a holds fewer than two
// distinct event times. For a counter or a queue depth sampled into a
// window, 60·Growth() is the growth per minute.
func (a *Agg) Growth() float64 {
	if a.Count < 2 || a.LastT <= a.FirstT {
		return 0
	}
	return (a.Last - a.First) / (float64(a.LastT-a.FirstT) / 1e9)
}

// Exemplars returns a copy of the kept exemplars, best first: largest
// value, then smallest ID, then earliest time. At most TopK, distinct IDs.
func (a *Agg) Exemplars() []Exemplar { return slices.Clone(a.exemplars) }

// Bytes returns an approximation of the memory a holds, in bytes.
func (a *Agg) Bytes() int {
	n := int(unsafe.Sizeof(*a))
	if a.sketch != nil {
		n += sketchOverhead
		for _, st := range []store.Store{a.sketch.GetPositiveValueStore(), a.sketch.GetNegativeValueStore()} {
			if !st.IsEmpty() {
				lo, _ := st.MinIndex()
				hi, _ := st.MaxIndex()
				// The dense store allocates the span plus some headroom.
				n += 8 * min(hi-lo+1+64, MaxSketchBins)
			}
		}
	}
	n += cap(a.exemplars) * int(unsafe.Sizeof(Exemplar{}))
	for _, e := range a.exemplars {
		n += len(e.ID)
	}
	return n
}

// sketchOverhead approximates a sketch's fixed memory: the DDSketch and
// two store headers.
const sketchOverhead = 48 + 2*80
