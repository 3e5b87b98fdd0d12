package kvref

import "slices"

// memory is an interval map from absolute byte offsets to labels, cut into
// fixed pages (an implementation detail: any page size gives the same
// answers) so that a write or read touches a few short sorted slices.
type memory struct {
	pages map[int64]*page
}

const pageBits = 12

// seg is [lo, hi) holding l.
type seg struct {
	lo, hi int64
	l      *label
}

// page holds the sorted, disjoint segments of one page; adjacent segments
// with the same label are merged.
type page struct {
	segs []seg
}

// set labels [lo, hi) with l.
func (m *memory) set(lo, hi int64, l *label) {
	for p := lo >> pageBits; p <= (hi-1)>>pageBits; p++ {
		a, b := max(lo, p<<pageBits), min(hi, (p+1)<<pageBits)
		pg := m.pages[p]
		if pg == nil {
			pg = &page{}
			m.pages[p] = pg
		}
		pg.set(a, b, l)
	}
}

// walk calls fn with the label of every piece of [lo, hi) in address
// order, nil for a never-written piece.
func (m *memory) walk(lo, hi int64, fn func(*label)) {
	for p := lo >> pageBits; p <= (hi-1)>>pageBits; p++ {
		a, b := max(lo, p<<pageBits), min(hi, (p+1)<<pageBits)
		pg := m.pages[p]
		if pg == nil {
			fn(nil)
			continue
		}
		at := a
		for _, s := range pg.segs[pg.first(a):] {
			if s.lo >= b {
				break
			}
			if s.lo > at {
				fn(nil)
			}
			fn(s.l)
			at = s.hi
		}
		if at < b {
			fn(nil)
		}
	}
}

// first is the index of the first segment ending after a.
func (pg *page) first(a int64) int {
	i, _ := slices.BinarySearchFunc(pg.segs, a, func(s seg, a int64) int {
		if s.hi <= a {
			return -1
		}
		return 1
	})
	return i
}

func (pg *page) set(lo, hi int64, l *label) {
	i := pg.first(lo)
	j := i
	for j < len(pg.segs) && pg.segs[j].lo < hi {
		j++
	}
	repl := make([]seg, 0, 3)
	if i < j && pg.segs[i].lo < lo {
		repl = append(repl, seg{pg.segs[i].lo, lo, pg.segs[i].l})
	}
	repl = append(repl, seg{lo, hi, l})
	if i < j && pg.segs[j-1].hi > hi {
		repl = append(repl, seg{hi, pg.segs[j-1].hi, pg.segs[j-1].l})
	}
	// merge equal neighbours, among the pieces and with the untouched ones
	merged := repl[:1]
	for _, s := range repl[1:] {
		if last := &merged[len(merged)-1]; last.l == s.l {
			last.hi = s.hi
		} else {
			merged = append(merged, s)
		}
	}
	repl = merged
	if i > 0 && pg.segs[i-1].hi == repl[0].lo && pg.segs[i-1].l == repl[0].l {
		i--
		repl[0].lo = pg.segs[i].lo
	}
	if last := &repl[len(repl)-1]; j < len(pg.segs) && pg.segs[j].lo == last.hi && pg.segs[j].l == last.l {
		last.hi = pg.segs[j].hi
		j++
	}
	pg.segs = slices.Replace(pg.segs, i, j, repl...)
}
