package kvref

import (
	"cmp"
	"slices"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// Via values of Pollution.
const (
	Direct     = "direct"
	Propagated = "propagated"
)

// MaxReads is how many foreign reads Reads keeps; later ones are counted.
const MaxReads = 1 << 20

// Pollution is one read that returned foreign or tainted content.
type Pollution struct {
	Request string
	GPU     int
	Time    time.Time
	Via     string // Direct or Propagated
	From    string // writer of the foreign/tainted bytes; "" = a write with no request (the process)
	Block   int
	Layer   int
}

// Model replays KV events of any number of GPUs, in event-time order per
// GPU. The zero value is not usable; call New.
type Model struct {
	gpus     map[int]*gpuState
	polluted map[string]Pollution
	reads    []Pollution
	total    int
}

// New returns an empty model.
func New() *Model {
	return &Model{gpus: map[int]*gpuState{}, polluted: map[string]Pollution{}}
}

// Polluted returns every request that read foreign content, directly or
// propagated: its first direct read if any, else its first propagated one.
// The map is the model's own; do not modify it.
func (m *Model) Polluted() map[string]Pollution { return m.polluted }

// Reads returns the foreign (or tainted) reads found, in order, at most
// MaxReads of them, and how many there were in all.
func (m *Model) Reads() ([]Pollution, int) { return m.reads, m.total }

// Restart forgets a GPU's pool and requests: a new server process.
func (m *Model) Restart(gpu int) { delete(m.gpus, gpu) }

// Tenure kinds.
const (
	own  = iota // alloc without a hash
	hit         // alloc with a hash: shares the content of that hash
	swap        // swap_in: the request's own saved content
)

// tenure is one holding of a block by a request.
type tenure struct {
	req   string
	block int
	kind  int
	hit   string // the hash a hit shares
	hash  string // the hash its content carries: the last a write of it marked
	// extent: per layer, the ranges the holder read in the block during
	// the tenure (reads address the block's own slot; writes may stray):
	// the part of the saved content that is its KV, judged at swap_out
	extent map[int][][2]int64
}

// note adds [lo, hi) of layer to the tenure's extent.
func (t *tenure) note(layer int, lo, hi int64) {
	if t.extent == nil {
		t.extent = map[int][][2]int64{}
	}
	rs := append(t.extent[layer], [2]int64{lo, hi})
	slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	out := rs[:1]
	for _, r := range rs[1:] {
		if last := &out[len(out)-1]; r[0] <= last[1] {
			last[1] = max(last[1], r[1])
		} else {
			out = append(out, r)
		}
	}
	t.extent[layer] = out
}

// verdict is what a reader finds in a range: foreign bytes (from their
// writer), else tainted ones (from their writer).
type verdict struct {
	foreign, tainted       bool
	foreignFrom, taintFrom string
	self                   bool // (not own) it met its own tainted bytes
}

func (v *verdict) add(o verdict) {
	if o.foreign && !v.foreign {
		v.foreign, v.foreignFrom = true, o.foreignFrom
	}
	if o.tainted && !v.tainted {
		v.tainted, v.taintFrom = true, o.taintFrom
	}
}

// saved is a swapped-out block: per layer, what its holder found in the
// content it saved (only the layers that were not clean).
type saved map[int]verdict

// label is what a write put in a byte range.
type label struct {
	zero   bool // a ranged zero: zeros
	writer string
	block  int
	layer  int
	ten    *tenure // the writer's tenure of block at the time; nil if none
	taint  bool    // written by a polluted computation
	seq    uint64  // when (the GPU's op count)
}

// reset is a block-level replacement of a block's content: zeros, or a
// swap_in's content (ten).
type reset struct {
	seq   uint64
	ten   *tenure // nil: zeros
	taint bool
	bad   saved // of swapped-in content: the layers that were saved foreign or tainted
}

type blockState struct {
	full  *reset         // last zero or swap_in of the whole block
	layer map[int]*reset // last zero of one layer
}

type request struct {
	id       string
	hold     map[int]*tenure
	table    []int // blocks in the order acquired
	polluted bool
	from     int // once polluted: taint writes at table positions ≥ from
	genFrom  int // once polluted: the position of the tokens it generated since
	direct   bool
	swapped  []saved // swapped-out blocks, in order, for the swap_ins to come
}

func (r *request) pos(b int) int { return slices.Index(r.table, b) }

func (r *request) drop(b int) {
	if _, ok := r.hold[b]; !ok {
		return
	}
	r.hold[b].extent = nil
	delete(r.hold, b)
	if i := r.pos(b); i >= 0 {
		r.table = slices.Delete(r.table, i, i+1)
	}
}

func (r *request) acquire(b int, t *tenure) {
	r.drop(b)
	r.hold[b] = t
	r.table = append(r.table, b)
}

// tainted reports whether a write of r into block b now is tainted.
func (r *request) tainted(b int) bool {
	if !r.polluted {
		return false
	}
	p := r.pos(b)
	return p < 0 || p >= r.from
}

type labelKey struct {
	writer       string
	ten          *tenure
	block, layer int
	taint        bool
}

type gpuState struct {
	seq    uint64
	mem    memory
	blocks map[int]*blockState
	reqs   map[string]*request
	// labels lets consecutive writes of one tenure, block and layer share a
	// label (so their ranges merge); emptied at every reset, since a label
	// must not be older than a reset it is written after.
	labels map[labelKey]*label
}

func (m *Model) gpu(i int) *gpuState {
	g := m.gpus[i]
	if g == nil {
		g = &gpuState{mem: memory{pages: map[int64]*page{}}, blocks: map[int]*blockState{}, reqs: map[string]*request{}, labels: map[labelKey]*label{}}
		m.gpus[i] = g
	}
	return g
}

func (g *gpuState) req(id string) *request {
	r := g.reqs[id]
	if r == nil {
		r = &request{id: id, hold: map[int]*tenure{}}
		g.reqs[id] = r
	}
	return r
}

func (g *gpuState) block(b int) *blockState {
	s := g.blocks[b]
	if s == nil {
		s = &blockState{layer: map[int]*reset{}}
		g.blocks[b] = s
	}
	return s
}

// Apply takes one event; Op "" (a log line that is not a KV op) is ignored.
func (m *Model) Apply(ev simulator.KVEvent) {
	if ev.Op == "" {
		return
	}
	g := m.gpu(ev.GPU)
	g.seq++
	switch ev.Op {
	case simulator.OpAlloc:
		if ev.RequestID == "" || ev.Block < 0 {
			return
		}
		t := &tenure{req: ev.RequestID, block: ev.Block, kind: own}
		if ev.Hash != "" {
			t.kind, t.hit = hit, ev.Hash
		}
		g.req(ev.RequestID).acquire(ev.Block, t)
	case simulator.OpFree:
		if r := g.reqs[ev.RequestID]; r != nil && ev.RequestID != "" && r.hold[ev.Block] != nil {
			r.drop(ev.Block)
			if len(r.hold) == 0 && r.polluted {
				// all its KV discarded (finished, or a recompute
				// preemption): what it recomputes from its tokens is clean
				// up to those it generated once polluted
				r.from = r.genFrom
			}
		}
	case simulator.OpSwapOut:
		// the content saved is what the block holds now: judge the
		// holder's extent of it as the holder would read it
		if r := g.reqs[ev.RequestID]; r != nil && ev.RequestID != "" && r.hold[ev.Block] != nil {
			t := r.hold[ev.Block]
			sv := saved{}
			if rs := g.resetOf(ev.Block, -1); rs != nil && rs.ten == t {
				for l, v := range rs.bad {
					if g.resetOf(ev.Block, l) == rs {
						sv[l] = v
					}
				}
			}
			for l, rngs := range t.extent {
				v := sv[l]
				for _, rg := range rngs {
					v.add(g.judge(r, t, ev.Block, l, rg[0], rg[1], true))
				}
				if v.foreign || v.tainted {
					sv[l] = v
				}
			}
			r.swapped = append(r.swapped, sv)
			r.drop(ev.Block)
		}
	case simulator.OpEvict:
		// drops a cache entry; live holders keep their tenure
	case simulator.OpSwapIn:
		if ev.RequestID == "" || ev.Block < 0 {
			return
		}
		r := g.req(ev.RequestID)
		t := &tenure{req: ev.RequestID, block: ev.Block, kind: swap, hash: ev.Hash}
		r.acquire(ev.Block, t)
		rs := &reset{seq: g.seq, ten: t, taint: r.tainted(ev.Block)}
		if len(r.swapped) > 0 {
			rs.bad, r.swapped = r.swapped[0], r.swapped[1:]
		}
		g.block(ev.Block).full = rs
		clear(g.labels)
	case simulator.OpZero:
		switch {
		case ev.Addr >= 0 && ev.Bytes > 0:
			g.mem.set(ev.Addr, ev.Addr+ev.Bytes, &label{zero: true, block: ev.Block, layer: ev.Layer, seq: g.seq})
		case ev.Block < 0:
		case ev.Layer >= 0:
			g.block(ev.Block).layer[ev.Layer] = &reset{seq: g.seq}
			clear(g.labels)
		default:
			g.block(ev.Block).full = &reset{seq: g.seq}
			clear(g.labels)
		}
	case simulator.OpWrite:
		if ev.Addr < 0 || ev.Bytes <= 0 {
			return
		}
		k := labelKey{writer: ev.RequestID, block: ev.Block, layer: ev.Layer}
		if ev.RequestID != "" {
			r := g.req(ev.RequestID)
			k.ten = r.hold[ev.Block]
			k.taint = r.tainted(ev.Block)
			if k.ten != nil && ev.Hash != "" {
				k.ten.hash = ev.Hash
			}
		}
		l := g.labels[k]
		if l == nil {
			if len(g.labels) > 1<<16 {
				clear(g.labels)
			}
			l = &label{writer: k.writer, block: k.block, layer: k.layer, ten: k.ten, taint: k.taint, seq: g.seq}
			g.labels[k] = l
		}
		g.mem.set(ev.Addr, ev.Addr+ev.Bytes, l)
	case simulator.OpRead:
		if ev.RequestID == "" || ev.Addr < 0 || ev.Bytes <= 0 {
			return
		}
		m.read(g, ev)
	}
}

// resetOf is the latest reset of block b that covers layer (-1: the
// whole-block one only), nil if none.
func (g *gpuState) resetOf(b, layer int) *reset {
	s := g.blocks[b]
	if s == nil {
		return nil
	}
	rs := s.full
	if layer < 0 {
		return rs
	}
	if z := s.layer[layer]; z != nil && (rs == nil || z.seq > rs.seq) {
		rs = z
	}
	return rs
}

// judge says what r, holding block b through cur (nil: not held), finds
// reading [lo, hi) of block b, layer layer: foreign bytes, tainted bytes.
// own: count r's own tainted bytes too (for what it saves).
func (g *gpuState) judge(r *request, cur *tenure, b, layer int, lo, hi int64, own bool) verdict {
	rs := g.resetOf(b, layer)
	var v verdict
	g.mem.walk(lo, hi, func(l *label) {
		if v.foreign {
			return
		}
		var ok, taint bool
		var writer string
		switch {
		case rs != nil && (l == nil || l.seq < rs.seq):
			// the reset's content
			if rs.ten == nil {
				return // zeros
			}
			writer, taint = rs.ten.req, rs.taint
			ok = cur == rs.ten || (cur != nil && cur.kind == hit && rs.ten.hash == cur.hit)
			if bad, isBad := rs.bad[layer]; ok && isBad {
				if !own && bad.tainted && bad.taintFrom == r.id {
					bad.tainted, v.self = false, true
				}
				v.add(bad)
				return
			}
		case l == nil || l.zero:
			return // fresh memory, or zeros
		default:
			writer, taint = l.writer, l.taint
			same := l.block == b && l.layer == layer && l.ten != nil
			// a hit shares content by hash: its holder's own writes count
			// only as far as they carry that hash
			ok = same && (l.ten == cur && cur.kind != hit ||
				cur != nil && cur.kind == hit && l.ten.hash == cur.hit)
		}
		switch {
		case !ok:
			v.add(verdict{foreign: true, foreignFrom: writer})
		case taint && (own || writer != r.id):
			v.add(verdict{tainted: true, taintFrom: writer})
		case taint:
			v.self = true
		}
	})
	return v
}

// read judges a read byte by byte.
func (m *Model) read(g *gpuState, ev simulator.KVEvent) {
	r := g.req(ev.RequestID)
	cur := r.hold[ev.Block]
	if cur != nil {
		cur.note(ev.Layer, ev.Addr, ev.Addr+ev.Bytes)
	}
	v := g.judge(r, cur, ev.Block, ev.Layer, ev.Addr, ev.Addr+ev.Bytes, false)
	// what it computes from now on attends to what it read: its blocks
	// from this one's position on
	pos := max(r.pos(ev.Block), 0)
	if v.self && r.polluted {
		// its own tainted bytes (from before a recompute): nothing new,
		// but what it writes from here on is tainted again
		r.from = min(r.from, pos)
	}
	if !v.foreign && !v.tainted {
		return
	}
	p := Pollution{Request: r.id, GPU: ev.GPU, Time: ev.Time, Via: Direct, From: v.foreignFrom, Block: ev.Block, Layer: ev.Layer}
	if !v.foreign {
		p.Via, p.From = Propagated, v.taintFrom
	}
	m.total++
	if len(m.reads) < MaxReads {
		m.reads = append(m.reads, p)
	}
	gen := max(len(r.table)-1, 0)
	if !r.polluted {
		r.from, r.genFrom = pos, gen
	}
	r.from, r.genFrom = min(r.from, pos), min(r.genFrom, gen)
	r.polluted = true
	if _, seen := m.polluted[r.id]; !seen || v.foreign && !r.direct {
		m.polluted[r.id] = p
	}
	r.direct = r.direct || v.foreign
}
