package windows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch/store"
)

// ErrCorrupt is returned (wrapped) by the UnmarshalBinary methods for bytes
// that are not an encoding they produce.
var ErrCorrupt = errors.New("windows: corrupt encoding")

// aggVersion is the first byte of an encoded Agg; aggVersionNoSketch that
// of an Agg with NoSketch set, whose sketch stores are empty.
const (
	aggVersion         = 1
	aggVersionNoSketch = 2
)

func appendF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// AppendBinary appends a's encoding to b and returns the extended buffer.
// The encoding is deterministic: equal aggregates encode to equal bytes.
func (a *Agg) AppendBinary(b []byte) []byte {
	if a.NoSketch {
		b = append(b, aggVersionNoSketch)
	} else {
		b = append(b, aggVersion)
	}
	for _, f := range [...]float64{a.Count, a.Sum, a.Min, a.Max, a.First, a.Last} {
		b = appendF64(b, f)
	}
	b = binary.AppendVarint(b, a.FirstT)
	b = binary.AppendVarint(b, a.LastT)
	if a.sketch == nil {
		b = appendF64(b, 0)
		b = append(b, 0, 0)
	} else {
		b = appendF64(b, a.sketch.GetZeroCount())
		b = appendStore(b, a.sketch.GetPositiveValueStore())
		b = appendStore(b, a.sketch.GetNegativeValueStore())
	}
	b = binary.AppendUvarint(b, uint64(len(a.exemplars)))
	for _, e := range a.exemplars {
		b = appendF64(b, e.Value)
		b = binary.AppendVarint(b, e.Time)
		b = binary.AppendUvarint(b, uint64(len(e.ID)))
		b = append(b, e.ID...)
	}
	return b
}

// appendStore writes the non-empty bins in ascending index order: their
// number, the first index, then index deltas, each with its count.
func appendStore(b []byte, s store.Store) []byte {
	n := 0
	s.ForEach(func(int, float64) bool { n++; return false })
	b = binary.AppendUvarint(b, uint64(n))
	prev, first := 0, true
	s.ForEach(func(index int, count float64) bool {
		if first {
			b = binary.AppendVarint(b, int64(index))
			first = false
		} else {
			b = binary.AppendUvarint(b, uint64(index-prev))
		}
		prev = index
		b = appendF64(b, count)
		return false
	})
	return b
}

// MarshalBinary returns a's encoding (encoding.BinaryMarshaler).
func (a *Agg) MarshalBinary() ([]byte, error) { return a.AppendBinary(nil), nil }

// UnmarshalBinary replaces a with the aggregate encoded in b, which must
// hold exactly one encoding from AppendBinary. It never panics: anything
// else is an error wrapping ErrCorrupt, and a is then unchanged.
func (a *Agg) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	var x Agg
	d.agg(&x)
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("windows: decode aggregate: %w", d.err)
	}
	*a = x
	return nil
}

// decoder reads an encoding, remembering the first error; after one every
// read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) f64() float64 {
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must be at most limit and, each element taking
// at least one byte, at most the bytes left.
func (d *decoder) count(limit int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(limit) || v > uint64(len(d.b)) {
		d.fail("length %d out of range", v)
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.count(math.MaxInt32)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// agg decodes one Agg into x (which must be empty) and validates it.
func (d *decoder) agg(x *Agg) {
	v := d.byte()
	if d.err == nil && v != aggVersion && v != aggVersionNoSketch {
		d.fail("aggregate version %d", v)
	}
	x.NoSketch = v == aggVersionNoSketch
	x.Count, x.Sum, x.Min, x.Max, x.First, x.Last = d.f64(), d.f64(), d.f64(), d.f64(), d.f64(), d.f64()
	x.FirstT, x.LastT = d.varint(), d.varint()
	zero := d.f64()
	if d.err != nil {
		return
	}
	for _, f := range [...]float64{x.Count, x.Sum, x.Min, x.Max, x.First, x.Last, zero} {
		if !finite(f) {
			d.fail("non-finite value")
			return
		}
	}
	if x.Count < 0 || zero < 0 {
		d.fail("negative count")
		return
	}
	if x.Count == 0 {
		if x.Sum != 0 || x.Min != 0 || x.Max != 0 || x.First != 0 || x.Last != 0 || x.FirstT != 0 || x.LastT != 0 {
			d.fail("empty aggregate with values")
			return
		}
	} else if x.Min > x.Max || x.FirstT > x.LastT {
		d.fail("minimum above maximum")
		return
	}
	s := newSketch()
	total := zero
	if zero > 0 {
		_ = s.AddWithCount(0, zero)
	}
	for _, st := range []store.Store{s.GetPositiveValueStore(), s.GetNegativeValueStore()} {
		n := d.count(MaxSketchBins)
		idx, lo := 0, 0
		for i := 0; i < n && d.err == nil; i++ {
			if i == 0 {
				v := d.varint()
				if v < int64(minBin) || v > int64(maxBin) {
					d.fail("bin index %d out of range", v)
					return
				}
				idx, lo = int(v), int(v)
			} else {
				delta := d.uvarint()
				if delta == 0 || delta >= MaxSketchBins || idx-lo+int(delta) >= MaxSketchBins || idx+int(delta) > maxBin {
					d.fail("bin index out of range")
					return
				}
				idx += int(delta)
			}
			c := d.f64()
			if d.err == nil && !(c > 0 && finite(c)) {
				d.fail("bad bin count")
				return
			}
			st.AddWithCount(idx, c)
			total += c
		}
	}
	if d.err != nil {
		return
	}
	if x.NoSketch {
		if total != 0 {
			d.fail("aggregate without a sketch holds sketch values")
			return
		}
	} else if total != x.Count {
		d.fail("sketch holds %v values, aggregate %v", total, x.Count)
		return
	}
	if x.Count > 0 && !x.NoSketch {
		x.sketch = s
	}
	n := d.count(TopK)
	if n > 0 {
		x.exemplars = make([]Exemplar, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		e := Exemplar{Value: d.f64(), Time: d.varint(), ID: d.string()}
		if d.err != nil {
			return
		}
		if !finite(e.Value) || e.ID == "" {
			d.fail("bad exemplar")
			return
		}
		if i > 0 {
			prev := x.exemplars[i-1]
			if !exemplarLess(prev, e) || prev.ID == e.ID {
				d.fail("exemplars out of order")
				return
			}
		}
		x.exemplars = append(x.exemplars, e)
	}
	// Distinct IDs, not just adjacent ones.
	for i := range x.exemplars {
		for j := i + 1; j < len(x.exemplars); j++ {
			if x.exemplars[i].ID == x.exemplars[j].ID {
				d.fail("duplicate exemplar ID")
				return
			}
		}
	}
}
