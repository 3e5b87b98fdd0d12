package simulator

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand"
	"slices"
	"sort"
	"time"
)

// KV simulates the KV-cache block pools of a fleet of GPUs. Requests are
// added in arrival order (Add) and the simulation advances with Step or
// Flush; requests on one GPU overlap in time and share its pool. A KV is not
// safe for concurrent use.
type KV struct {
	cfg       KVConfig
	gpus      []KVGPU
	rng       *rand.Rand
	layerSize int64
	tokBytes  int64
	pools     []*kvsPool

	queue   kvsQueue
	seq     uint64
	now     time.Time // time of the action being run
	horizon time.Time // Step's until so far: Add refuses earlier arrivals
	buf     []KVEvent // emitted, not yet returned

	reqs     []*kvsReq
	pending  []*kvsFault // faults not realised yet
	byID     []*kvsFault // by index in KVConfig.Faults
	realised []*kvsFault
	polluted []KVPolluted
	stats    KVSummary
}

// kvsReq is one request's simulation state.
type kvsReq struct {
	KVRequest
	id        int
	prefix    int // shared-prefix group, -1 none
	key       string
	hashes    []string
	chunks    int // decode chunks of BlockTokens tokens
	next      int // next decode chunk
	generated int
	tokens    int // tokens whose KV is in the pool
	dt        time.Duration
	epoch     int
	state     kvsState
	blocks    []int
	hit       []bool // block obtained as a prefix-cache hit

	interruptAt int // decode chunk before which to preempt or swap, -1 none
	swap        bool

	polluted *KVPolluted
	pollIdx  int // first block index whose KV is polluted
	// hostMarks are the marks foreign to r that its blocks held when it
	// was swapped out: the bytes go to host memory and come back with the
	// swap-in, foreign still.
	hostMarks []kvsHostMark

	// Fault plumbing.
	cancel    *kvsFault // CancelRetry: cancel in the middle of prefill
	skip      int       // CancelRetry's retry: layers [0, skip) of new blocks not written
	baseSwap  *kvsFault // KVBaseSwap: this prefill's writes of one layer go to the next
	swapLayer int
	retryOf   *kvsFault // CancelRetry: the fault whose retry this is
	df        *kvsFault // DoubleFree: free one block twice at finish
	dfBlock   int
}

type kvsState uint8

const (
	kvsWaiting kvsState = iota
	kvsRunning
	kvsPreempted
	kvsSwapped
	kvsDone
)

type kvsBlock struct {
	ref     int       // the allocator's count, as reported in kv.block.ref_cnt
	owners  []*kvsReq // the live owners, as they really are
	hash    string    // registered content hash, "" none
	cached  bool      // ref 0, kept for reuse under hash
	lastUse uint64    // LRU order of cached blocks
	writer  *kvsReq   // last writer of its content
	taint   *kvsFault // its content is polluted by this fault
	carrier string    // request whose polluted state tainted it
	fault   *kvsFault // a fault that gave it a second owner
	inFree  int       // entries in the free stack
	marks   []kvsMark // bytes written where they did not belong, until overwritten
}

// kvsMark is a byte range of one layer of a block slot that a faulty write
// put there (a second owner's write, a stray write). The requests it was
// foreign to — the slot's live owners then, and the writer when it landed
// outside the range it was for — are polluted when they read it, not
// before: holding a block is not reading what was written into it.
type kvsMark struct {
	layer   int   // -1: every layer
	lo, hi  int64 // pool offsets; lo -1: the whole slot
	fault   *kvsFault
	victims []*kvsReq
}

// kvsHostMark is a kvsMark of r's block i carried through a swap, its
// range relative to the layer's slot (lo -1: the whole slot).
type kvsHostMark struct {
	i, layer int
	lo, hi   int64
	fault    *kvsFault
}

type kvsPool struct {
	gpu      int
	blocks   []kvsBlock
	free     []int // stack: the last freed block is reused first
	byHash   map[string]int
	stale    map[string]int // RadixStale: hash still pointing at a freed block
	isPrefix map[string]bool
	live     []*kvsReq
	clock    time.Time
	// instance: service.instance.id after restarts ("" before);
	// restarts counts them; junk: the fault whose null-block writes were
	// not zeroed (NullBlockJunk).
	instance string
	restarts int
	junk     *kvsFault
}

func newKVSPool(gpu, n int, null bool) *kvsPool {
	p := &kvsPool{gpu: gpu, blocks: make([]kvsBlock, n), byHash: map[string]int{}, stale: map[string]int{}, isPrefix: map[string]bool{}}
	first := 0
	if null {
		first = 1 // block 0 is the null block: never handed out
	}
	for b := first; b < n; b++ { // block n-1 on top: handed out first
		p.free = append(p.free, b)
		p.blocks[b].inFree = 1
	}
	return p
}

type kvsKind uint8

const (
	actPrefill kvsKind = iota // first prefill, or recompute after preemption
	actChunk
	actFinish
	actSwapIn
	actBody
	actRestart
)

type kvsAction struct {
	t     time.Time
	seq   uint64
	kind  kvsKind
	r     *kvsReq
	epoch int
	arg   int
	gpu   int
	body  string
}

type kvsQueue []*kvsAction

func (a *kvsAction) rid() int {
	if a.r == nil {
		return -1
	}
	return a.r.id
}

func (q kvsQueue) Len() int { return len(q) }
func (q kvsQueue) Less(i, j int) bool {
	if !q[i].t.Equal(q[j].t) {
		return q[i].t.Before(q[j].t)
	}
	if ri, rj := q[i].rid(), q[j].rid(); ri != rj { // not the order of Add calls
		return ri < rj
	}
	return q[i].seq < q[j].seq
}
func (q kvsQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *kvsQueue) Push(x any)   { *q = append(*q, x.(*kvsAction)) }
func (q *kvsQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

func (k *KV) schedule(a *kvsAction) {
	k.seq++
	a.seq = k.seq
	if a.r != nil {
		a.epoch = a.r.epoch
		a.gpu = a.r.GPU
	}
	heap.Push(&k.queue, a)
}

// GPUs returns the simulated GPUs.
func (k *KV) GPUs() []KVGPU { return append([]KVGPU(nil), k.gpus...) }

// LayerSize returns the byte size of one layer's region of a pool.
func (k *KV) LayerSize() int64 { return k.layerSize }

// Add enqueues a request. Requests must be added in the order of their
// arrival, and not before the time already stepped to (ErrKVLate).
func (k *KV) Add(in KVRequest) error {
	if in.Arrival.Before(k.horizon) {
		return fmt.Errorf("%w: %s arrives at %s, simulated up to %s", ErrKVLate, in.RequestID, in.Arrival.Format(time.RFC3339Nano), k.horizon.Format(time.RFC3339Nano))
	}
	switch {
	case in.RequestID == "":
		return fmt.Errorf("simulator: kv request without id")
	case in.GPU < 0 || in.GPU >= len(k.gpus):
		return fmt.Errorf("simulator: kv request %s: GPU %d: want 0..%d", in.RequestID, in.GPU, len(k.gpus)-1)
	case !in.Finish.After(in.Arrival):
		return fmt.Errorf("simulator: kv request %s: Finish not after Arrival", in.RequestID)
	case in.PromptTokens < 1 || in.OutputTokens < 0:
		return fmt.Errorf("simulator: kv request %s: PromptTokens %d, OutputTokens %d: want ≥1 and ≥0", in.RequestID, in.PromptTokens, in.OutputTokens)
	case in.Prefix != KVAutoPrefix && (in.Prefix < -1 || in.Prefix >= k.cfg.PrefixGroups):
		return fmt.Errorf("simulator: kv request %s: Prefix %d: want -1..%d or KVAutoPrefix", in.RequestID, in.Prefix, k.cfg.PrefixGroups-1)
	}
	r := k.newReq(in, in.RequestID)
	k.schedule(&kvsAction{t: in.Arrival, kind: actPrefill, r: r})
	return nil
}

func (k *KV) newReq(in KVRequest, key string) *kvsReq {
	bt := k.cfg.BlockTokens
	r := &kvsReq{KVRequest: in, id: len(k.reqs), key: key, interruptAt: -1, prefix: in.Prefix}
	// The request's own draws come from its own generator: the events do
	// not depend on how Add and Step calls interleave.
	h := fnv.New64a()
	h.Write([]byte(in.RequestID))
	rng := rand.New(rand.NewSource(k.cfg.Seed ^ int64(h.Sum64())))
	if r.prefix == KVAutoPrefix {
		r.prefix = -1
		if rng.Float64() < k.cfg.PrefixShare {
			r.prefix = rng.Intn(k.cfg.PrefixGroups)
		}
	}
	if pre := k.prefixBlocks(r.prefix) * bt; r.PromptTokens <= pre {
		r.PromptTokens = pre + 1
	}
	maxTok := k.cfg.BlocksPerGPU / 4 * bt
	if r.PromptTokens+r.OutputTokens > maxTok {
		r.OutputTokens = max(0, maxTok-r.PromptTokens)
		r.PromptTokens = min(r.PromptTokens, maxTok)
	}
	r.chunks = (r.OutputTokens + bt - 1) / bt
	if r.chunks > 0 && rng.Float64() < k.cfg.Pressure {
		r.interruptAt = rng.Intn(r.chunks)
		r.swap = rng.Intn(2) == 0
	}
	r.dt = r.Finish.Sub(r.Arrival) / time.Duration(r.chunks+1)
	k.reqs = append(k.reqs, r)
	k.stats.Requests++
	return r
}

// prefixBlocks is the number of full blocks of a shared-prefix group.
func (k *KV) prefixBlocks(g int) int {
	if g < 0 {
		return 0
	}
	return 4 + (g*3)%5
}

// hash is the chained content hash of the request's full block i.
func (k *KV) hash(r *kvsReq, i int) string {
	for len(r.hashes) <= i {
		j := len(r.hashes)
		parent := ""
		if j > 0 {
			parent = r.hashes[j-1]
		}
		var content string
		if j < k.prefixBlocks(r.prefix) {
			content = fmt.Sprintf("prefix/%d/%d", r.prefix, j)
		} else {
			content = fmt.Sprintf("req/%s/%d", r.key, j)
		}
		h := fnv.New64a()
		h.Write([]byte(parent))
		h.Write([]byte{0})
		h.Write([]byte(content))
		r.hashes = append(r.hashes, fmt.Sprintf("%016x", h.Sum64()))
	}
	return r.hashes[i]
}

// Step runs the simulation up to until (exclusive) and returns the events
// before until, time-ordered (ties: GPU order, then emission order). The
// returned slice is the caller's.
func (k *KV) Step(until time.Time) []KVEvent {
	for len(k.queue) > 0 && k.queue[0].t.Before(until) {
		k.do(heap.Pop(&k.queue).(*kvsAction))
	}
	if until.After(k.horizon) {
		k.horizon = until
	}
	return k.drain(until, false)
}

// Flush runs the simulation to its end and returns the remaining events.
func (k *KV) Flush() []KVEvent {
	for len(k.queue) > 0 {
		k.do(heap.Pop(&k.queue).(*kvsAction))
	}
	return k.drain(time.Time{}, true)
}

func (k *KV) drain(until time.Time, all bool) []KVEvent {
	sort.SliceStable(k.buf, func(i, j int) bool {
		if !k.buf[i].Time.Equal(k.buf[j].Time) {
			return k.buf[i].Time.Before(k.buf[j].Time)
		}
		return k.buf[i].GPU < k.buf[j].GPU
	})
	n := len(k.buf)
	if !all {
		n = sort.Search(len(k.buf), func(i int) bool { return !k.buf[i].Time.Before(until) })
	}
	out := append([]KVEvent(nil), k.buf[:n]...)
	k.buf = append(k.buf[:0], k.buf[n:]...)
	return out
}

func (k *KV) do(a *kvsAction) {
	k.now = a.t
	switch a.kind {
	case actBody:
		k.emitBody(k.pools[a.gpu], a.body)
		return
	case actRestart:
		k.restart(a.gpu)
		return
	}
	r := a.r
	if a.epoch != r.epoch || r.state == kvsDone {
		return
	}
	switch a.kind {
	case actPrefill:
		k.prefill(r)
	case actChunk:
		k.chunk(r, a.arg)
	case actFinish:
		k.finish(r)
	case actSwapIn:
		k.swapIn(r)
	}
}

// nextTime is the time of the next event on the pool: events of one GPU
// are serialised, a microsecond apart at least.
func (k *KV) nextTime(p *kvsPool) time.Time {
	t := k.now
	if !t.After(p.clock) {
		t = p.clock.Add(time.Microsecond)
	}
	return t
}

func (k *KV) emit(p *kvsPool, ev KVEvent) {
	ev.Time = k.nextTime(p)
	p.clock = ev.Time
	ev.GPU = p.gpu
	ev.Instance = p.instance
	if ev.Op != "" {
		ev.LayerCount = k.cfg.Layers
	}
	k.buf = append(k.buf, ev)
	k.stats.Events++
}

func (k *KV) emitBody(p *kvsPool, body string) {
	k.emit(p, KVEvent{Block: -1, RefCnt: -1, Layer: -1, Addr: -1, Bytes: -1, LayerBase: -1, LayerSize: -1, Body: body})
}

// blockOp emits a block-level op (alloc, free, evict, swap_*): all layers.
func (k *KV) blockOp(p *kvsPool, r *kvsReq, op string, b int, hash string) {
	ev := KVEvent{Op: op, Block: b, Hash: hash, RefCnt: p.blocks[b].ref, Layer: -1, Addr: -1, Bytes: -1, LayerBase: -1, LayerSize: -1}
	if r != nil {
		ev.RequestID, ev.TraceID, ev.SpanID = r.RequestID, r.TraceID, r.SpanID
	}
	k.emit(p, ev)
}

// rangeOp emits a write or read of [addr, addr+bytes) on behalf of layer l.
func (k *KV) rangeOp(p *kvsPool, r *kvsReq, op string, b, l int, addr, bytes int64, hash string) {
	k.emit(p, KVEvent{Op: op, Block: b, Hash: hash, RefCnt: -1, Layer: l, Addr: addr, Bytes: bytes,
		LayerBase: int64(l) * k.layerSize, LayerSize: k.layerSize,
		RequestID: r.RequestID, TraceID: r.TraceID, SpanID: r.SpanID})
	switch op {
	case OpWrite:
		k.eachSlot(addr, bytes, func(tl, tb int, lo, hi int64) { p.blocks[tb].unmark(tl, lo, hi) })
	case OpRead:
		k.eachSlot(addr, bytes, func(tl, tb int, lo, hi int64) {
			for _, m := range p.blocks[tb].marks {
				if (m.layer < 0 || m.layer == tl) && (m.lo < 0 || m.lo < hi && lo < m.hi) && slices.Contains(m.victims, r) {
					k.pollute(p, r, m.fault, "direct", "", r.index(tb))
				}
			}
		})
	}
}

// eachSlot calls fn for every block slot in the pool that [addr,
// addr+bytes) touches, with the part of the range inside it.
func (k *KV) eachSlot(addr, bytes int64, fn func(l, b int, lo, hi int64)) {
	end, bb := int64(k.cfg.Layers)*k.layerSize, k.cfg.BlockBytes
	for off := addr; off < addr+bytes && off < end; off = (off/bb + 1) * bb {
		if off < 0 {
			continue
		}
		fn(int(off/k.layerSize), int(off%k.layerSize/bb), off, min(addr+bytes, (off/bb+1)*bb))
	}
}

// mark records that [lo, hi) of layer l (-1 every layer, lo -1 the whole
// slot) of blk now holds bytes foreign to victims.
func (blk *kvsBlock) mark(l int, lo, hi int64, f *kvsFault, victims []*kvsReq) {
	if len(victims) > 0 {
		blk.marks = append(blk.marks, kvsMark{layer: l, lo: lo, hi: hi, fault: f, victims: victims})
	}
}

// unmark drops the marks a write of [lo, hi) in layer l covers whole (a
// partly covered mark stays: some of its bytes remain).
func (blk *kvsBlock) unmark(l int, lo, hi int64) {
	blk.marks = slices.DeleteFunc(blk.marks, func(m kvsMark) bool {
		return m.layer == l && m.lo >= 0 && lo <= m.lo && m.hi <= hi
	})
}

func (k *KV) slot(l, b int) int64 { return int64(l)*k.layerSize + int64(b)*k.cfg.BlockBytes }

func (p *kvsPool) owns(b int, r *kvsReq) bool {
	for _, o := range p.blocks[b].owners {
		if o == r {
			return true
		}
	}
	return false
}

func (p *kvsPool) removeOwner(b int, r *kvsReq) {
	blk := &p.blocks[b]
	for i, o := range blk.owners {
		if o == r {
			blk.owners = append(blk.owners[:i:i], blk.owners[i+1:]...)
			break
		}
	}
	if len(blk.owners) == 0 {
		blk.fault, blk.marks = nil, blk.marks[:0] // no one left to read them
	}
}

func (p *kvsPool) push(b int) {
	p.free = append(p.free, b)
	p.blocks[b].inFree++
}

func (p *kvsPool) removeLive(r *kvsReq) {
	for i, o := range p.live {
		if o == r {
			p.live = append(p.live[:i:i], p.live[i+1:]...)
			return
		}
	}
}

// take hands a block with no content worth keeping to r: the top of the
// free stack, else the least recently used cached block (evicted), else a
// block freed by preempting the latest running request. false: none left.
func (k *KV) take(p *kvsPool, r *kvsReq, canPreempt bool) (int, bool) {
	for {
		var mine []int // entries of blocks r holds (a double free): left for others
		found := -1
		for len(p.free) > 0 {
			b := p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			p.blocks[b].inFree--
			if p.owns(b, r) {
				mine = append(mine, b)
				continue
			}
			found = b
			break
		}
		if found >= 0 && p.blocks[found].cached { // a stale entry (double free) of a cached block
			blk := &p.blocks[found]
			delete(p.byHash, blk.hash)
			blk.hash, blk.cached = "", false
			k.blockOp(p, nil, OpEvict, found, "")
			k.stats.Evictions++
		}
		for i := len(mine) - 1; i >= 0; i-- {
			p.push(mine[i])
		}
		if found >= 0 {
			return found, true
		}
		lru := -1
		for b := range p.blocks {
			if blk := &p.blocks[b]; blk.cached && (lru < 0 || blk.lastUse < p.blocks[lru].lastUse) {
				lru = b
			}
		}
		if lru >= 0 {
			blk := &p.blocks[lru]
			delete(p.byHash, blk.hash)
			blk.hash, blk.cached = "", false
			k.blockOp(p, nil, OpEvict, lru, "")
			k.stats.Evictions++
			return lru, true
		}
		var victim *kvsReq
		for _, o := range p.live {
			if o != r && o.state == kvsRunning && len(o.blocks) > 0 && (victim == nil || o.id > victim.id) {
				victim = o
			}
		}
		if victim == nil || !canPreempt {
			return 0, false
		}
		k.preempt(victim)
	}
}

// allocUpTo gives r the blocks holding tokens [0, n): prefix-cache hits
// (chained from block 0) for full blocks when hits is set, new blocks
// otherwise. It returns the indexes of r's new blocks; false when the pool
// could not serve r, which is then aborted.
func (k *KV) allocUpTo(r *kvsReq, n int, hits bool) ([]int, bool) {
	p := k.pools[r.GPU]
	bt := k.cfg.BlockTokens
	var fresh []int
	for i := len(r.blocks); i*bt < n; i++ {
		if hits && (i+1)*bt <= n && (i == 0 || r.hit[i-1]) {
			h := k.hash(r, i)
			if b, ok := k.radixStale(p, r, h); ok {
				r.blocks, r.hit = append(r.blocks, b), append(r.hit, false)
				fresh = append(fresh, i)
				continue
			}
			if b, ok := p.byHash[h]; ok {
				blk := &p.blocks[b]
				blk.ref++
				blk.owners = append(blk.owners, r)
				blk.cached = false
				r.blocks, r.hit = append(r.blocks, b), append(r.hit, true)
				k.blockOp(p, r, OpAlloc, b, h)
				continue
			}
		}
		b, ok := k.take(p, r, !hits)
		if !ok {
			k.abort(r)
			return nil, false
		}
		blk := &p.blocks[b]
		blk.ref = 1
		if len(blk.owners) == 0 {
			blk.taint, blk.carrier = nil, ""
		}
		blk.owners = append(blk.owners, r)
		r.blocks, r.hit = append(r.blocks, b), append(r.hit, false)
		fresh = append(fresh, i)
		k.blockOp(p, r, OpAlloc, b, "")
	}
	return fresh, true
}

// writeLayers writes r's tokens [from, to) in layers [l0, l1), layer by
// layer as the forward pass does, skipping hit blocks; the write that fills
// a block carries its hash.
func (k *KV) writeLayers(r *kvsReq, from, to, l0, l1 int) {
	p := k.pools[r.GPU]
	bt := k.cfg.BlockTokens
	for l := l0; l < l1; l++ {
		for i := from / bt; i*bt < to; i++ {
			if r.hit[i] {
				continue
			}
			s, e := max(from, i*bt), min(to, (i+1)*bt)
			b := r.blocks[i]
			h := ""
			if e == (i+1)*bt {
				h = k.hash(r, i)
			}
			addr := k.slot(l, b) + int64(s-i*bt)*k.tokBytes
			bytes := int64(e-s) * k.tokBytes
			if r.baseSwap != nil && l == r.swapLayer {
				k.baseSwapWrite(p, r, b, l, addr, bytes, h)
				continue
			}
			k.rangeOp(p, r, OpWrite, b, l, addr, bytes, h)
			k.wrote(p, r, b, i, l, addr, addr+bytes)
		}
	}
	if l1 == k.cfg.Layers {
		for i := from / bt; (i+1)*bt <= to; i++ {
			if r.hit[i] {
				continue
			}
			h := k.hash(r, i)
			if _, dup := p.byHash[h]; !dup && p.blocks[r.blocks[i]].hash == "" { // one hash a block
				p.byHash[h] = r.blocks[i]
				p.blocks[r.blocks[i]].hash = h
				if i < k.prefixBlocks(r.prefix) {
					p.isPrefix[h] = true
				}
			}
		}
	}
}

// wrote records that w wrote [lo, hi) of layer l into block b (l -1: the
// whole block, a swap-in): any other live owner now holds content it did
// not write (a mixed write), polluted when it reads it; a polluted writer
// taints the block.
func (k *KV) wrote(p *kvsPool, w *kvsReq, b, i, l int, lo, hi int64) {
	blk := &p.blocks[b]
	if l < 0 {
		blk.marks = blk.marks[:0]
	}
	var victims []*kvsReq
	for _, o := range blk.owners {
		if o != w && blk.fault != nil {
			victims = append(victims, o)
			if blk.taint == nil {
				blk.taint, blk.carrier = blk.fault, o.RequestID
			}
		}
	}
	blk.mark(l, lo, hi, blk.fault, victims)
	if w.polluted != nil && i >= w.pollIdx && blk.taint == nil {
		blk.taint, blk.carrier = k.faultOf(w), w.RequestID
	}
	blk.writer = w
}

// readBlock reads r's content of its block i in layer l.
func (k *KV) readBlock(r *kvsReq, i, l int) {
	p := k.pools[r.GPU]
	bt := k.cfg.BlockTokens
	e := min(r.tokens, (i+1)*bt)
	if e <= i*bt {
		return
	}
	b := r.blocks[i]
	k.rangeOp(p, r, OpRead, b, l, k.slot(l, b), int64(e-i*bt)*k.tokBytes, "")
	// The last writer of a block with two owners reads its own content.
	if blk := &p.blocks[b]; blk.taint != nil && !(blk.fault != nil && blk.writer == r) {
		// (Polluted already: its KV from here on is polluted again, as
		// after a recompute that hits a tainted cached block.)
		k.pollute(p, r, blk.taint, "propagated", blk.carrier, i)
	}
}

// readAll is the read pass after a prefill: every block in every layer.
func (k *KV) readAll(r *kvsReq) {
	for l := 0; l < k.cfg.Layers; l++ {
		for i := range r.blocks {
			k.readBlock(r, i, l)
		}
	}
}

// admit reports whether r's n blocks fit in p; if not, the action retries
// later: prefills and swap-ins wait for room, only decode preempts. A
// request still waiting at its Finish is given up (aborted: its span, and
// so every op of its, ends there).
func (k *KV) admit(p *kvsPool, r *kvsReq, tokens int, kind kvsKind) bool {
	if !k.now.Before(r.Finish) {
		k.abort(r)
		return false
	}
	n := (tokens + k.cfg.BlockTokens - 1) / k.cfg.BlockTokens
	avail := 0
	for b := range p.blocks {
		if blk := &p.blocks[b]; len(blk.owners) == 0 && (blk.cached || blk.inFree > 0) {
			avail++
		}
	}
	if avail >= n {
		return true
	}
	if next := k.now.Add(50 * time.Millisecond); next.Before(r.Finish) {
		k.schedule(&kvsAction{t: next, kind: kind, r: r})
	} else {
		k.abort(r)
	}
	return false
}

func (k *KV) prefill(r *kvsReq) {
	p := k.pools[r.GPU]
	fresh := r.state == kvsWaiting
	tokens := r.tokens
	if fresh {
		tokens = r.PromptTokens
	}
	if !k.admit(p, r, tokens, actPrefill) {
		return
	}
	if fresh {
		r.tokens = r.PromptTokens
		p.live = append(p.live, r)
		k.beforePrefill(p, r)
	}
	r.state = kvsRunning
	newBlocks, ok := k.allocUpTo(r, r.tokens, true)
	if !ok {
		return
	}
	if fresh {
		k.afterAlloc(p, r, newBlocks)
	}
	from := 0
	for from < len(r.hit)*k.cfg.BlockTokens && r.hit[from/k.cfg.BlockTokens] {
		from += k.cfg.BlockTokens
	}
	if f := r.cancel; f != nil {
		k.cancelPrefill(p, r, f, from)
		return
	}
	if r.skip > 0 {
		k.writeLayers(r, from, r.tokens, r.skip, k.cfg.Layers)
		r.skip = 0
		k.pollute(p, r, r.retryOf, "direct", "", from/k.cfg.BlockTokens)
		// Layers [0, skip) of the blocks it computed hold whatever was
		// there: a prefix hit on one of them (they carry the prompt's
		// hashes) reads that residue too.
		for i := from / k.cfg.BlockTokens; i < len(r.blocks); i++ {
			if blk := &p.blocks[r.blocks[i]]; !r.hit[i] && blk.taint == nil {
				blk.taint, blk.carrier = r.retryOf, r.RequestID
			}
		}
	} else {
		k.writeLayers(r, from, r.tokens, 0, k.cfg.Layers)
	}
	if fresh {
		k.afterWrites(p, r, newBlocks)
	}
	k.readAll(r)
	k.scheduleDecode(r)
}

// scheduleDecode schedules the remaining decode chunks from now, then the
// finish, no later than Finish: a request held up (waiting for room,
// preempted, swapped out) decodes the rest faster, as a server's request
// ends when its span says.
func (k *KV) scheduleDecode(r *kvsReq) {
	dt, left := r.dt, time.Duration(r.chunks-r.next+1)
	if k.now.Add(left * dt).After(r.Finish) {
		dt = max(r.Finish.Sub(k.now), 0) / left
	}
	for j := r.next; j < r.chunks; j++ {
		k.schedule(&kvsAction{t: k.now.Add(time.Duration(j-r.next+1) * dt), kind: actChunk, r: r, arg: j})
	}
	k.schedule(&kvsAction{t: k.now.Add(left * dt), kind: actFinish, r: r})
}

func (k *KV) chunk(r *kvsReq, j int) {
	p := k.pools[r.GPU]
	if j == r.interruptAt {
		r.interruptAt = -1
		if r.swap {
			k.swapOut(r)
		} else {
			k.preempt(r)
		}
		return
	}
	n := min(k.cfg.BlockTokens, r.OutputTokens-r.generated)
	from, to := r.tokens, r.tokens+n
	if _, ok := k.allocUpTo(r, to, false); !ok {
		return
	}
	k.writeLayers(r, from, to, 0, k.cfg.Layers)
	r.tokens, r.generated, r.next = to, r.generated+n, j+1
	k.afterDecodeWrite(p, r)
	// Sampled reads: every block in one layer, the last block in all.
	sampled := j % k.cfg.Layers
	last := len(r.blocks) - 1
	for i := range r.blocks {
		k.readBlock(r, i, sampled)
	}
	for l := 0; l < k.cfg.Layers; l++ {
		if l != sampled {
			k.readBlock(r, last, l)
		}
	}
	if k.cfg.NullBlock && k.rng.Float64() < PaddedShare {
		k.paddedRead(p, r, sampled)
	}
}

// release gives back all of r's blocks with op (free or swap_out).
func (k *KV) release(r *kvsReq, op string) {
	p := k.pools[r.GPU]
	for _, b := range r.blocks {
		k.freeBlock(p, r, b, op)
	}
	r.blocks, r.hit = nil, nil
}

func (k *KV) freeBlock(p *kvsPool, r *kvsReq, b int, op string) {
	blk := &p.blocks[b]
	blk.ref = max(0, blk.ref-1)
	p.removeOwner(b, r)
	if op == OpSwapOut && blk.hash != "" && p.byHash[blk.hash] == b && blk.ref == 0 {
		delete(p.byHash, blk.hash)
		blk.hash = ""
	}
	k.blockOp(p, r, op, b, "")
	if blk.ref > 0 || len(blk.owners) > 0 {
		return
	}
	if blk.hash != "" && p.byHash[blk.hash] == b {
		k.seq++
		blk.cached, blk.lastUse = true, k.seq
		return
	}
	blk.hash = ""
	if blk.inFree == 0 {
		p.push(b)
	}
}

func (k *KV) finish(r *kvsReq) {
	p := k.pools[r.GPU]
	k.release(r, OpFree)
	r.state = kvsDone
	p.removeLive(r)
}

func (k *KV) abort(r *kvsReq) {
	k.release(r, OpFree)
	r.state = kvsDone
	r.epoch++
	k.pools[r.GPU].removeLive(r)
	k.stats.Aborted++
}

// preempt frees all of r's blocks; r recomputes them later.
func (k *KV) preempt(r *kvsReq) {
	p := k.pools[r.GPU]
	k.beforeFree(p, r)
	k.release(r, OpFree)
	// The recompute computes its KV afresh from its tokens: clean, unless
	// it reads polluted content again (readBlock).
	r.pollIdx = math.MaxInt32
	k.afterFree(p, r)
	r.state = kvsPreempted
	r.epoch++
	k.stats.Preemptions++
	k.schedule(&kvsAction{t: k.now.Add(k.pause()), kind: actPrefill, r: r})
}

func (k *KV) pause() time.Duration {
	return 20*time.Millisecond + time.Duration(k.rng.Intn(180))*time.Millisecond
}

// swapOut moves r's blocks to host memory; swapIn brings them back into
// new blocks.
func (k *KV) swapOut(r *kvsReq) {
	p := k.pools[r.GPU]
	r.hostMarks = r.hostMarks[:0]
	for i, b := range r.blocks {
		for _, m := range p.blocks[b].marks {
			if !slices.Contains(m.victims, r) {
				continue
			}
			hm := kvsHostMark{i: i, layer: m.layer, lo: -1, hi: -1, fault: m.fault}
			if m.layer >= 0 && m.lo >= 0 {
				base := k.slot(m.layer, b)
				hm.lo, hm.hi = m.lo-base, m.hi-base
			}
			r.hostMarks = append(r.hostMarks, hm)
		}
	}
	k.release(r, OpSwapOut)
	r.state = kvsSwapped
	r.epoch++
	k.stats.Swaps++
	k.schedule(&kvsAction{t: k.now.Add(k.pause()), kind: actSwapIn, r: r})
}

func (k *KV) swapIn(r *kvsReq) {
	p := k.pools[r.GPU]
	if !k.admit(p, r, r.tokens, actSwapIn) {
		return
	}
	n := (r.tokens + k.cfg.BlockTokens - 1) / k.cfg.BlockTokens
	for i := 0; i < n; i++ {
		b, ok := k.take(p, r, false)
		if !ok {
			k.abort(r)
			return
		}
		blk := &p.blocks[b]
		blk.ref = 1
		if len(blk.owners) == 0 {
			blk.taint, blk.carrier = nil, ""
		}
		blk.owners = append(blk.owners, r)
		r.blocks, r.hit = append(r.blocks, b), append(r.hit, false)
		k.blockOp(p, r, OpSwapIn, b, "")
		k.wrote(p, r, b, i, -1, -1, -1)
		for _, hm := range r.hostMarks {
			if hm.i != i {
				continue
			}
			lo, hi := int64(-1), int64(-1)
			if hm.layer >= 0 && hm.lo >= 0 {
				base := k.slot(hm.layer, b)
				lo, hi = base+hm.lo, base+hm.hi
			}
			blk.mark(hm.layer, lo, hi, hm.fault, []*kvsReq{r})
		}
	}
	r.hostMarks = r.hostMarks[:0]
	r.state = kvsRunning
	k.readAll(r)
	k.scheduleDecode(r)
}
