package windows

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"
)

// Panes aggregates samples of many group keys into event-time windows
// (Spec) and reports each window once the watermark has passed its end.
//
// Samples go into panes of length Slide, [k·Slide, (k+1)·Slide); a window
// is reported by merging its Size/Slide panes, so each sample is added to
// one Agg however many windows it belongs to.
//
// Which windows are reported, per key: every window holding data, and the
// first window after one holding data that holds none (Count 0) — the
// moment a key's data has left the window, so that an alert on it can
// resolve. Further empty windows are not reported: a key that stops
// sending is reported empty once and then forgotten. The same input gives
// the same reports whatever the order of its samples within the
// out-of-orderness, and whatever the watermarks passed to Advance in
// between, except for how late samples are grouped into revisions.
//
// Late data: a sample is late, and dropped, when the last window its pane
// belongs to ends at or before the watermark last passed to Advance minus
// the allowed lateness. A sample that is not late but belongs to windows
// already reported makes the next Advance report those windows again
// (revision), with everything their panes hold by then.
//
// Memory is bounded by the samples within the last Size+Slide+allowed
// lateness of event time behind the watermark (see Advance for when panes
// are dropped); per pane, one Agg, itself bounded.
// Bytes and Len report it. Panes is not safe for concurrent use.
type Panes struct {
	spec     Spec
	slide    int64 // ns
	n        int64 // panes per window
	lateness int64 // ns
	wm       int64 // largest watermark passed to Advance; MinTime before
	keys     map[string]*keyPanes
	dirty    []string // keys holding a dirty pane, in no order
	panes    int
	scratch  Agg
	items    []report
}

type keyPanes struct {
	panes []pane // ascending idx
	dirty bool   // a pane is dirty; the key is in Panes.dirty
}

type pane struct {
	idx int64 // the pane is [idx·slide, (idx+1)·slide)
	// dirty: data arrived since the last Advance and a window holding
	// the pane has been reported already.
	dirty bool
	agg   Agg
}

// report is one window to report; end is in panes (end·slide ns).
type report struct {
	end      int64
	key      string
	kp       *keyPanes
	revision bool
}

// ErrConfigMismatch is returned (wrapped) by Panes.UnmarshalBinary when the
// encoding was made with another Spec or allowed lateness.
var ErrConfigMismatch = errors.New("windows: checkpoint of different windows")

// NewPanes returns empty panes for windows spec with the allowed lateness
// (0 or more, at most MaxWindowSize): how long after the watermark passed
// a window's end samples for it are still accepted, and the window
// reported again.
func NewPanes(spec Spec, allowedLateness time.Duration) (*Panes, error) {
	err := spec.Validate()
	if allowedLateness < 0 || allowedLateness > MaxWindowSize {
		err = errors.Join(err, fmt.Errorf("windows: allowed lateness %v: must be in [0, %v]", allowedLateness, MaxWindowSize))
	}
	if err != nil {
		return nil, err
	}
	p := &Panes{}
	p.init(spec, allowedLateness)
	return p, nil
}

func (p *Panes) init(spec Spec, lateness time.Duration) {
	p.spec = Spec{Size: spec.Size, Slide: spec.slide()}
	p.slide = int64(spec.slide())
	p.n = int64(spec.Size) / p.slide
	p.lateness = int64(lateness)
	p.wm = MinTime
	p.keys = make(map[string]*keyPanes)
}

// Spec returns the windows' spec, with Slide set.
func (p *Panes) Spec() Spec { return p.spec }

// Watermark returns the largest watermark passed to Advance, MinTime
// before the first.
func (p *Panes) Watermark() int64 { return p.wm }

// Add adds a sample of group key at event time t (unix ns) with value v
// and exemplar ID id (may be empty), and reports whether it was late and
// dropped (see Panes). Event times beyond ±2⁶² ns (years 1823 and 2116) are
// dropped as late too. A non-finite v is ignored (not late, not counted).
func (p *Panes) Add(key string, t int64, v float64, id string) (late bool) {
	if t < -maxAbsTime || t > maxAbsTime {
		return true
	}
	q := floorDiv(t, p.slide)
	if (q+p.n)*p.slide+p.lateness <= p.wm {
		return true
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	kp := p.keys[key]
	if kp == nil {
		kp = &keyPanes{}
		p.keys[key] = kp
	}
	// Panes are mostly appended: search from the end.
	i := len(kp.panes)
	for i > 0 && kp.panes[i-1].idx > q {
		i--
	}
	if i == 0 || kp.panes[i-1].idx != q {
		kp.panes = slices.Insert(kp.panes, i, pane{idx: q})
		p.panes++
	} else {
		i--
	}
	pn := &kp.panes[i]
	pn.agg.Add(t, v, id)
	if q+1 <= floorDiv(p.wm, p.slide) {
		pn.dirty = true
		if !kp.dirty {
			kp.dirty = true
			p.dirty = append(p.dirty, key)
		}
	}
	return false
}

// Advance moves the watermark to wm (a smaller wm than before is taken as
// the previous one) and calls fn for every window to report (see Panes):
// first the revisions of windows reported before whose panes received data
// since (only windows whose end plus the allowed lateness is still after
// the previous watermark: older ones are final, even when a sample for a
// later window of the same pane is accepted), then every window with end ≤ wm not reported yet; all in order of
// end, then key. end is the window's end (unix ns; the window is
// [end−Size, end)); revision is true for a window whose end an earlier
// Advance had passed already: the report replaces what was reported for
// that end and key then (or adds it, if the window was empty and not
// reported). A revision of a window that now holds no data (the empty
// window after a key's late data) has Count 0 and may repeat an empty
// report.
//
// agg is valid only during fn, which must not modify or retain it (Clone
// keeps a copy) and must not call p's methods.
//
// Then panes that can no longer change any window to report are dropped:
// those whose last window's end plus Slide (the empty window after it)
// plus the allowed lateness is at or before wm; a key left without panes is
// forgotten.
func (p *Panes) Advance(wm int64, fn func(key string, end int64, agg *Agg, revision bool)) {
	wm = max(wm, p.wm)
	oldR, newR := floorDiv(p.wm, p.slide), floorDiv(wm, p.slide)
	// final: the last window end (in panes) that no sample may revise any
	// more: end + lateness ≤ the previous watermark.
	final := floorDiv(MinTime, p.slide)
	if p.wm >= MinTime+p.lateness {
		final = floorDiv(p.wm-p.lateness, p.slide)
	}
	items := p.items[:0]
	for _, key := range p.dirty {
		kp := p.keys[key]
		start := len(items)
		for i := range kp.panes {
			pn := &kp.panes[i]
			if !pn.dirty {
				continue
			}
			pn.dirty = false
			// Windows whose end plus the lateness is behind the
			// watermark are final (their oldest panes may be gone).
			for e := max(pn.idx+1, final+1); e <= min(pn.idx+p.n, oldR); e++ {
				items = append(items, report{end: e, key: key, kp: kp, revision: true})
			}
			if e := pn.idx + p.n + 1; e > final && e <= oldR && kp.empty(e, p.n) {
				items = append(items, report{end: e, key: key, kp: kp, revision: true})
			}
		}
		kp.dirty = false
		mine := items[start:]
		slices.SortFunc(mine, func(a, b report) int { return cmp.Compare(a.end, b.end) })
		mine = slices.CompactFunc(mine, func(a, b report) bool { return a.end == b.end })
		items = items[:start+len(mine)]
	}
	p.dirty = p.dirty[:0]
	if newR > oldR {
		for key, kp := range p.keys {
			// Every window holding pane q, and the one after: ends
			// q+1 … q+n+1, merged over the ascending panes.
			last := oldR
			for _, pn := range kp.panes {
				hi := min(pn.idx+p.n+1, newR)
				for e := max(pn.idx+1, last+1); e <= hi; e++ {
					items = append(items, report{end: e, key: key, kp: kp})
				}
				last = max(last, hi)
			}
		}
	}
	slices.SortFunc(items, func(a, b report) int {
		if c := cmp.Compare(a.end, b.end); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	for i := range items {
		it := &items[i]
		p.scratch.Reset()
		it.kp.mergeInto(&p.scratch, it.end-p.n, it.end-1)
		fn(it.key, it.end*p.slide, &p.scratch, it.revision)
		*it = report{}
	}
	p.items = items[:0]
	p.wm = wm
	p.drop()
}

// drop removes the panes whose last window, the empty window after it and
// their lateness are all behind the watermark.
func (p *Panes) drop() {
	for key, kp := range p.keys {
		k := 0
		for k < len(kp.panes) && (kp.panes[k].idx+p.n+1)*p.slide+p.lateness <= p.wm {
			k++
		}
		if k == 0 {
			continue
		}
		p.panes -= k
		if k == len(kp.panes) {
			delete(p.keys, key)
			continue
		}
		// A dirty pane cannot be dropped here: Advance cleared the marks.
		kp.panes = slices.Delete(kp.panes, 0, k)
	}
}

// empty reports whether the window ending at pane end holds no pane.
func (kp *keyPanes) empty(end, n int64) bool {
	i, _ := slices.BinarySearchFunc(kp.panes, end-n, func(pn pane, idx int64) int { return cmp.Compare(pn.idx, idx) })
	return i == len(kp.panes) || kp.panes[i].idx > end-1
}

// mergeInto merges the panes with lo ≤ idx ≤ hi into a.
func (kp *keyPanes) mergeInto(a *Agg, lo, hi int64) {
	i, _ := slices.BinarySearchFunc(kp.panes, lo, func(pn pane, idx int64) int { return cmp.Compare(pn.idx, idx) })
	for ; i < len(kp.panes) && kp.panes[i].idx <= hi; i++ {
		a.Merge(&kp.panes[i].agg)
	}
}

// Len returns the number of panes held, over all keys.
func (p *Panes) Len() int { return p.panes }

// Keys returns the number of group keys held.
func (p *Panes) Keys() int { return len(p.keys) }

// Bytes returns an approximation of the memory p holds, in bytes.
func (p *Panes) Bytes() int {
	n := int(unsafe.Sizeof(*p)) + p.scratch.Bytes() + cap(p.items)*int(unsafe.Sizeof(report{}))
	for key, kp := range p.keys {
		// map entry, key, keyPanes, pane slice
		n += 48 + len(key) + int(unsafe.Sizeof(*kp)) + cap(kp.panes)*int(unsafe.Sizeof(pane{}))
		for i := range kp.panes {
			n += kp.panes[i].agg.Bytes() - int(unsafe.Sizeof(Agg{}))
		}
	}
	return n + cap(p.dirty)*16
}

// minAggBytes is the length of the shortest Agg encoding.
const minAggBytes = 1 + 6*8 + 2 + 8 + 3

// panesVersion is the first byte of encoded Panes.
const panesVersion = 1

// AppendBinary appends p's encoding to b and returns the extended buffer:
// its configuration, watermark (so a restored Panes neither repeats nor
// skips a window) and every pane with its pending revision mark, keys in
// ascending order. Equal states encode to equal bytes.
func (p *Panes) AppendBinary(b []byte) []byte {
	b = append(b, panesVersion)
	b = binary.AppendUvarint(b, uint64(p.spec.Size))
	b = binary.AppendUvarint(b, uint64(p.slide))
	b = binary.AppendUvarint(b, uint64(p.lateness))
	b = binary.AppendVarint(b, p.wm)
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		kp := p.keys[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(kp.panes)))
		for i := range kp.panes {
			pn := &kp.panes[i]
			if i == 0 {
				b = binary.AppendVarint(b, pn.idx)
			} else {
				b = binary.AppendUvarint(b, uint64(pn.idx-kp.panes[i-1].idx))
			}
			if pn.dirty {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
			b = pn.agg.AppendBinary(b)
		}
	}
	return b
}

// MarshalBinary returns p's encoding (encoding.BinaryMarshaler).
func (p *Panes) MarshalBinary() ([]byte, error) { return p.AppendBinary(nil), nil }

// UnmarshalBinary replaces p's state with the one encoded in b by
// AppendBinary. A Panes from NewPanes requires the same Spec and allowed
// lateness (else an error wrapping ErrConfigMismatch); a zero Panes takes
// them from b. It never panics: bytes that are not such an encoding give an
// error wrapping ErrCorrupt. On error p is unchanged.
func (p *Panes) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != panesVersion {
		d.fail("panes version %d", v)
	}
	size, slide, lateness, wm := d.uvarint(), d.uvarint(), d.uvarint(), d.varint()
	if d.err != nil {
		return fmt.Errorf("windows: decode panes: %w", d.err)
	}
	if size > uint64(MaxWindowSize) || slide > size || lateness > uint64(MaxWindowSize) {
		d.fail("configuration out of range")
		return fmt.Errorf("windows: decode panes: %w", d.err)
	}
	spec := Spec{Size: time.Duration(size), Slide: time.Duration(slide)}
	if err := spec.Validate(); err != nil || slide == 0 {
		d.fail("configuration: %v", err)
		return fmt.Errorf("windows: decode panes: %w", d.err)
	}
	if p.keys != nil && (spec != p.spec || time.Duration(lateness) != time.Duration(p.lateness)) {
		return fmt.Errorf("windows: restore panes of %+v with lateness %v into %+v with lateness %v: %w",
			spec, time.Duration(lateness), p.spec, time.Duration(p.lateness), ErrConfigMismatch)
	}
	var x Panes
	x.init(spec, time.Duration(lateness))
	x.wm = wm
	loIdx, hiIdx := floorDiv(-maxAbsTime, x.slide), floorDiv(maxAbsTime, x.slide)
	nk := d.count(math.MaxInt)
	prevKey := ""
	for i := 0; i < nk && d.err == nil; i++ {
		key := d.string()
		if d.err != nil {
			break
		}
		if i > 0 && key <= prevKey {
			d.fail("keys out of order")
			break
		}
		prevKey = key
		np := d.count(math.MaxInt)
		if d.err == nil && np == 0 {
			d.fail("key without panes")
		}
		kp := &keyPanes{panes: make([]pane, 0, min(np, len(d.b)/minAggBytes+1))}
		for j := 0; j < np && d.err == nil; j++ {
			var idx int64
			if j == 0 {
				idx = d.varint()
			} else {
				delta := d.uvarint()
				prev := kp.panes[j-1].idx
				if d.err == nil && (delta == 0 || delta > uint64(hiIdx-prev)) {
					d.fail("pane out of order")
				}
				idx = prev + int64(delta)
			}
			dirty := d.byte()
			if d.err != nil {
				break
			}
			if idx < loIdx || idx > hiIdx || dirty > 1 {
				d.fail("bad pane")
				break
			}
			kp.panes = append(kp.panes, pane{idx: idx, dirty: dirty == 1})
			pn := &kp.panes[j]
			d.agg(&pn.agg)
			if d.err == nil && pn.agg.Count == 0 {
				d.fail("empty pane")
			}
			if pn.dirty {
				if !kp.dirty {
					kp.dirty = true
					x.dirty = append(x.dirty, key)
				}
			}
		}
		x.keys[key] = kp
		x.panes += len(kp.panes)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("windows: decode panes: %w", d.err)
	}
	*p = x
	return nil
}
