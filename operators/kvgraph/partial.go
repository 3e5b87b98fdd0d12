package kvgraph

import "time"

// Partial computations. A forward pass writes every layer of the blocks it
// computes; a request that frees a block having written only some of its
// layers stopped part way (cancelled mid-prefill). When another request
// later writes the other layers of a block of its own and reads the ones
// it never wrote, it took them as computed — and the request whose partial
// computation it believed is the bug's site, whatever residue its block
// happened to hold. Without a content hash to link the two (the same
// prompt's last, partial block has none), the layers do: the reader wrote
// exactly the layers the freed block lacked.

// partialWindow is how long after its free a partial computation may
// still be taken as computed by a retry.
const partialWindow = 30 * time.Second

// writtenLayers is the range [lo, hi) of layers of b that req wrote itself
// (any part of), whether they are contiguous and not empty, and the bytes
// it wrote of layer lo (-1: the whole slot).
func writtenLayers(b *block, req string) (lo, hi, bytes int64, ok bool) {
	lo, hi = -1, -1
	n := int64(0)
	for i := range b.layers {
		ls := &b.layers[i]
		if ls.layer < 0 {
			continue
		}
		var own int64
		wrote := false
		for _, s := range ls.spans {
			if s.writer == req && s.kind == spanOwn {
				wrote = true
				if s.lo < 0 || own < 0 {
					own = -1
				} else {
					own += s.hi - s.lo
				}
			}
		}
		if !wrote {
			continue
		}
		if lo < 0 || ls.layer < lo {
			lo, bytes = ls.layer, own
		}
		hi = max(hi, ls.layer+1)
		n++
	}
	return lo, hi, bytes, n > 0 && hi-lo == n
}

// notePartial records, as r frees b at time at, the layers r wrote of b if
// they are some but not all of g's layers.
func (p *Processor) notePartial(g *gpu, b *block, r *request, at int64) {
	if g.layers <= 0 {
		return
	}
	lo, hi, bytes, ok := writtenLayers(b, r.id)
	if !ok || (lo == 0 && hi >= g.layers) {
		return
	}
	r.partLo, r.partHi, r.partAt, r.partBytes = lo, hi, at, bytes
	p.markReq(g, r)
}

// partialSource is the request of g whose partial computation r took as
// computed, reading layer l of b at time at, and when it freed it: the one
// that freed, within partialWindow before at, a block with exactly the
// layers r did not write of b, each written as far as r wrote its own (the
// same tokens of the same prompt) unless r wrote whole slots, the latest
// (then the lowest id); "" if none.
func (p *Processor) partialSource(g *gpu, b *block, r *request, l, at int64) (string, int64) {
	if g.layers <= 0 {
		return "", 0
	}
	lo, hi, bytes, ok := writtenLayers(b, r.id)
	if !ok || (l >= lo && l < hi) || (lo > 0 && hi < g.layers) {
		return "", 0 // nothing written of b, l among its layers, or the unwritten ones on both sides
	}
	// A whole block slot written may be any of the cancelled request's
	// full blocks; its record holds the last block it freed, which may
	// be the prompt's partial one.
	bb, exact := g.blockBytes(p.cfg.BlockBytes)
	whole := bytes < 0 || (exact && bytes == bb)
	wantLo, wantHi := int64(0), lo
	if lo == 0 {
		wantLo, wantHi = hi, g.layers
	}
	var best *request
	for _, x := range g.reqs {
		if x == r || x.partAt == 0 || x.partAt > at || at-x.partAt > int64(partialWindow) ||
			x.partLo != wantLo || x.partHi != wantHi || (x.partBytes != bytes && !whole) {
			continue
		}
		if best == nil || x.partAt > best.partAt || (x.partAt == best.partAt && x.id < best.id) {
			best = x
		}
	}
	if best == nil {
		return "", 0
	}
	return best.id, best.partAt
}
