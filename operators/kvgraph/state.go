package kvgraph

import (
	"math"
	"strconv"
)

// gpu is the state of one GPU's block pool.
type gpu struct {
	id    string
	host  string
	index int64 // gpu.index, -1 when unknown
	// instance is the service.instance.id of the server whose events
	// came last; a change of it is a restart of the server (a fresh pool).
	instance string
	// layerSize and layers: learnt from kv.layer.size / kv.layer.count.
	layerSize, layers int64
	// bbLo..bbHi bound the bytes of a block slot, inferred from writes
	// (bbHi = MaxInt64 while unknown); bbAttr is kv.block.bytes when given.
	bbLo, bbHi, bbAttr int64
	blocks             map[int64]*block
	reqs               map[string]*request
	// nodes maps the node ids of open incidents to them.
	nodes   map[string]*incident
	changed bool
	// lossy: owned blocks of this GPU were evicted (see block.untracked).
	lossy bool
}

func newGPU(id, host string) *gpu {
	return &gpu{id: id, host: host, index: -1, bbHi: math.MaxInt64, blocks: map[int64]*block{}, reqs: map[string]*request{}, nodes: map[string]*incident{}}
}

// blockBytes is the bytes of one block slot in one layer and whether it is
// known exactly.
func (g *gpu) blockBytes(cfg int64) (int64, bool) {
	switch {
	case g.bbAttr > 0:
		return g.bbAttr, true
	case cfg > 0:
		return cfg, true
	case g.bbHi != math.MaxInt64 && g.bbLo == g.bbHi:
		return g.bbHi, true
	case g.bbHi != math.MaxInt64:
		return g.bbHi, false
	}
	return 0, false
}

// learnSlot narrows the block-slot bounds with a clean write of [off,
// off+n) (offsets in the layer) into block b; a write that contradicts
// them is ignored.
func (g *gpu) learnSlot(b, off, n int64) {
	if b < 0 || off < 0 || n <= 0 {
		return
	}
	lo := (off + n + b) / (b + 1) // ceil((off+n)/(b+1))
	hi := int64(math.MaxInt64)
	if b > 0 {
		hi = off / b
	}
	nlo, nhi := max(g.bbLo, lo), min(g.bbHi, hi)
	if nlo > nhi {
		return
	}
	if nlo != g.bbLo || nhi != g.bbHi {
		g.bbLo, g.bbHi = nlo, nhi
		g.changed = true
	}
}

// owner is a live owner of a block.
type owner struct {
	req string
	at  int64 // alloc time
	// shared: allocated as a prefix-cache hit whose hash matched the
	// block's content hash.
	shared bool
	// wrote: it wrote into the block during this holding (another owner
	// may have overwritten all of it since: swapOut).
	wrote bool
}

// ownBy reports whether s is req's own write: one it made, except what
// landed outside the range it was for (out of bounds, misplaced).
func (s span) ownBy(req string) bool {
	return s.writer == req && s.kind != spanOOB && s.kind != spanMisplaced
}

// Span kinds: who put content there.
const (
	spanOwn       uint8 = iota // written by a live owner of the block
	spanForeign                // written by a request that did not own the block
	spanOOB                    // landed here from outside its layer range
	spanMisplaced              // landed here from another block slot of the layer
	spanZero                   // zeroed (a kv.op zero of a layer or range): anyone may read it
	spanProcess                // written by the server process, not a request (no gen_ai.request.id)
)

// span is a byte range of one layer of a block and who wrote it last.
type span struct {
	lo, hi int64 // pool offsets; lo == hi == -1: the whole layer slot
	writer string
	at     int64
	kind   uint8
	// taint: the writer was polluted when it wrote this, at or after the
	// block-table position it was polluted from.
	taint  bool
	origin Origin
}

type layerSpans struct {
	layer int64
	spans []span
}

// block is the life of one physical block: owners, content and hash.
type block struct {
	id     int64
	owners []owner
	// hash is the content hash (valid when hasHash), set by a write that
	// carries kv.block.hash, by hashWriter.
	hash       uint64
	hasHash    bool
	hashWriter string
	// base is the request whose content was swapped in (all layers, under
	// the spans), "" for none (fresh or zeroed).
	base      string
	baseAt    int64
	baseTaint bool
	layers    []layerSpans
	last      int64 // event time of the last op
	// lastFreed is the request that freed the block last; doubleFree the
	// request that freed it again without owning it (with its time).
	lastFreed    string
	doubleFree   string
	doubleFreeAt int64
	// bookkeeping
	timerAt int64
	changed bool
	size    int64 // estimated bytes (budget.go)
	// untracked: met again after the eviction of owned blocks of its GPU
	// (MaxStateBytes), its owners unknown. Until an alloc without a
	// content hash (a new life) its writers and prefix hits are taken for
	// owners and its reads are not checked: forgetting may miss
	// pollution, not invent it.
	untracked bool
}

func (b *block) owner(req string) *owner {
	for i := range b.owners {
		if b.owners[i].req == req {
			return &b.owners[i]
		}
	}
	return nil
}

func (b *block) removeOwner(req string) bool {
	for i := range b.owners {
		if b.owners[i].req == req {
			b.owners = append(b.owners[:i], b.owners[i+1:]...)
			return true
		}
	}
	return false
}

func (b *block) layer(l int64, create bool) *layerSpans {
	for i := range b.layers {
		if b.layers[i].layer == l {
			return &b.layers[i]
		}
	}
	if !create {
		return nil
	}
	b.layers = append(b.layers, layerSpans{layer: l})
	return &b.layers[len(b.layers)-1]
}

// overwrite records that writer wrote [lo, hi) (or the whole slot when lo
// < 0) of a layer.
func (ls *layerSpans) overwrite(s span) {
	if s.lo < 0 {
		ls.spans = append(ls.spans[:0], s)
		return
	}
	ls.clear(s.lo, s.hi)
	// Merge with an adjacent span of the same writer and kind.
	for i := range ls.spans {
		o := &ls.spans[i]
		if o.writer == s.writer && o.kind == s.kind && o.lo >= 0 && (o.hi == s.lo || o.lo == s.hi) {
			o.lo, o.hi = min(o.lo, s.lo), max(o.hi, s.hi)
			o.at = max(o.at, s.at)
			return
		}
	}
	ls.spans = append(ls.spans, s)
}

// clear removes [lo, hi) from the layer's spans (lo < 0: everything).
func (ls *layerSpans) clear(lo, hi int64) {
	if lo < 0 {
		ls.spans = ls.spans[:0]
		return
	}
	out := ls.spans[:0]
	var extra []span
	for _, o := range ls.spans {
		if o.lo < 0 {
			// A whole-slot span of unknown extent: a ranged write over
			// it leaves it in place for the rest of the slot.
			out = append(out, o)
			continue
		}
		if o.hi <= lo || o.lo >= hi {
			out = append(out, o)
			continue
		}
		if o.lo < lo {
			a := o
			a.hi = lo
			out = append(out, a)
		}
		if o.hi > hi {
			a := o
			a.lo = hi
			extra = append(extra, a)
		}
	}
	ls.spans = append(out, extra...)
}

// request is what the GPU knows of one request.
type request struct {
	id    string
	trace [16]byte
	// polluted is the event time it was first polluted (0: never);
	// pollIdx the first position of its block table whose KV is polluted
	// (attention is causal: blocks it writes from there on carry it).
	polluted int64
	pollIdx  int
	via      uint8 // 1 direct, 2 propagated
	incident string
	// table is the blocks it holds, in the order it got them.
	table []int64
	// hashes are the content hashes it wrote (the first maxHashes).
	hashes []uint64
	// partLo..partHi are the layers it had written, and only those, of
	// the last block it freed with some layers unwritten, at partAt (0:
	// none), partBytes of each (-1: whole slots): a forward pass stopped
	// part way (partial.go).
	partLo, partHi, partAt, partBytes int64
	last                              int64
	timerAt                           int64
	changed                           bool
	size                              int64 // estimated bytes (budget.go)
}

// reqNode is the node of a request; of the server process for "" (writes
// without a request).
func reqNode(g *gpu, req string) string {
	if req == "" {
		return "proc:" + g.id + "/" + g.instance
	}
	return "req:" + g.id + "/" + req
}

// writerName names a writer in details.
func writerName(req string) string {
	if req == "" {
		return "the server process"
	}
	return req
}
func blkNode(g *gpu, b int64) string   { return "blk:" + g.id + "/" + strconv.FormatInt(b, 10) }
func layerNode(g *gpu, l int64) string { return "layer:" + g.id + "/" + strconv.FormatInt(l, 10) }

// index is b's position in r's block table (0 when absent).
func (r *request) index(b int64) int {
	for i, x := range r.table {
		if x == b {
			return i
		}
	}
	return 0
}

func (r *request) hold(b int64) {
	for _, x := range r.table {
		if x == b {
			return
		}
	}
	r.table = append(r.table, b)
}

func (r *request) release(b int64) {
	for i, x := range r.table {
		if x == b {
			r.table = append(r.table[:i], r.table[i+1:]...)
			return
		}
	}
}

// taints reports whether r's write into block b now carries its pollution.
func (r *request) taints(b int64) bool {
	return r != nil && r.polluted != 0 && r.index(b) >= r.pollIdx
}

// maxHashes bounds the content hashes remembered per request.
const maxHashes = 64

func (r *request) wroteHash(h uint64) bool {
	for _, x := range r.hashes {
		if x == h {
			return false
		}
	}
	if len(r.hashes) >= maxHashes {
		return false
	}
	r.hashes = append(r.hashes, h)
	return true
}

func (r *request) hasHash(h uint64) bool {
	for _, x := range r.hashes {
		if x == h {
			return true
		}
	}
	return false
}
