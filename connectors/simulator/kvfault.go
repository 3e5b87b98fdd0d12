package simulator

import (
	"fmt"
	"time"
)

// kvsFault is one configured fault: pending until realised, then part of
// the truth.
type kvsFault struct {
	id    int
	spec  KVFault
	stage int // trigger-specific progress before realisation
	done  bool

	gpu          int
	time         time.Time
	block, layer int
	source       string
	victims      []string // direct
	propagated   []string
	sanitizer    bool
	xid          bool

	a      *kvsReq // OffloadAfterPreempt: the preempted request
	aBlock []int   // its blocks back on the free stack
	owner  *kvsReq // OffloadAfterPreempt: the request that got one of them
	hash   string  // RadixStale: the stale hash
}

// due returns the first pending fault of trigger t at the given stage that
// may be realised on p now.
func (k *KV) due(p *kvsPool, t KVTrigger, stage int) *kvsFault {
	for _, f := range k.pending {
		if f.spec.Trigger != t || f.stage != stage || k.now.Before(f.spec.At) {
			continue
		}
		if f.spec.GPU >= 0 && f.spec.GPU != p.gpu || stage > 0 && f.gpu != p.gpu {
			continue
		}
		return f
	}
	return nil
}

// realise records that f happens now on p: the next event emitted on p is
// its first faulty one.
func (k *KV) realise(p *kvsPool, f *kvsFault, block, layer int, source string) {
	f.done = true
	f.gpu, f.time, f.block, f.layer, f.source = p.gpu, k.nextTime(p), block, layer, source
	for i, g := range k.pending {
		if g == f {
			k.pending = append(k.pending[:i:i], k.pending[i+1:]...)
			break
		}
	}
	k.realised = append(k.realised, f)
}

// pollute marks r as polluted by f, once.
// Its KV is polluted from its block idx on: attention is causal, so the
// blocks it writes from there on are tainted, not the ones before.
func (k *KV) pollute(p *kvsPool, r *kvsReq, f *kvsFault, via, from string, idx int) {
	if r.polluted != nil {
		r.pollIdx = min(r.pollIdx, idx)
		return
	}
	r.pollIdx = idx
	r.polluted = &KVPolluted{
		RequestID: r.RequestID, TraceID: r.TraceID,
		Pattern: f.spec.Trigger.Pattern(), Trigger: f.spec.Trigger,
		RootRequest: f.source, Via: via, From: from, Time: p.clock, Fault: f.id,
	}
	k.polluted = append(k.polluted, *r.polluted)
	if via == "direct" {
		f.victims = append(f.victims, r.RequestID)
	} else {
		f.propagated = append(f.propagated, r.RequestID)
	}
}

// index is the position of block b in r's block table.
func (r *kvsReq) index(b int) int {
	for i, x := range r.blocks {
		if x == b {
			return i
		}
	}
	return 0
}

func (k *KV) faultOf(r *kvsReq) *kvsFault { return k.byID[r.polluted.Fault] }

func (k *KV) newHex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[k.rng.Intn(16)]
	}
	return string(b)
}

// stray emits w's write of [addr, addr+bytes) for layer l on behalf of its
// block b, a write that lands where f sends it. Every live owner of a block
// slot it touches (other than w's own (l, b)) holds content it did not
// write, and is polluted when it reads it; a cached block touched is
// tainted for its future readers. A write past the pool's end is what
// compute-sanitizer reports.
func (k *KV) stray(p *kvsPool, w *kvsReq, b, l int, addr, bytes int64, hash string, f *kvsFault) {
	k.rangeOp(p, w, OpWrite, b, l, addr, bytes, hash)
	end := int64(k.cfg.Layers) * k.layerSize
	bb := k.cfg.BlockBytes
	for off := addr; off < addr+bytes; off = (off/bb + 1) * bb {
		if off >= end {
			k.sanitize(p, f, off)
			break
		}
		tl, tb := int(off/k.layerSize), int(off%k.layerSize/bb)
		blk := &p.blocks[tb]
		var victims []*kvsReq
		for _, o := range blk.owners {
			if o != w || tl != l || tb != b {
				victims = append(victims, o)
				if blk.taint == nil {
					blk.taint, blk.carrier = f, o.RequestID
				}
			}
		}
		blk.mark(tl, off, min(addr+bytes, (off/bb+1)*bb), f, victims)
		if len(blk.owners) == 0 && blk.cached && blk.taint == nil {
			blk.taint, blk.carrier = f, w.RequestID
		}
	}
}

// sanitize emits compute-sanitizer's report of an invalid write at pool
// offset off, once per fault.
func (k *KV) sanitize(p *kvsPool, f *kvsFault, off int64) {
	if f.sanitizer {
		return
	}
	f.sanitizer = true
	base := int64(0x7f0000000000) + int64(p.gpu)<<32
	size := int64(k.cfg.Layers) * k.layerSize
	for _, line := range []string{
		"========= Invalid __global__ write of size 16 bytes",
		"=========     at 0x1b70 in void vllm::reshape_and_cache_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(const T1 *, const T1 *, T2 *, T2 *, const long *, int, int, int, int, int, int, const float *, const float *)",
		fmt.Sprintf("=========     by thread (%d,0,0) in block (%d,0,0)", k.rng.Intn(128), k.rng.Intn(64)),
		fmt.Sprintf("=========     Address 0x%x is out of bounds", base+off),
		fmt.Sprintf("=========     and is %d bytes after the nearest allocation at 0x%x of size %d bytes", off-size+1, base, size),
	} {
		k.emitBody(p, line)
	}
}

// xid schedules the kernel's Xid 13 line a few seconds after f.
func (k *KV) xid(p *kvsPool, f *kvsFault) {
	f.xid = true
	bus := []int{0x3b, 0x5e, 0x86, 0xaf, 0x18, 0x41, 0x9a, 0xd8}[p.gpu%8]
	body := fmt.Sprintf("NVRM: Xid (PCI:0000:%02x:00): 13, pid=%d, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address", bus, 2000+k.rng.Intn(60000))
	t := p.clock.Add(2*time.Second + time.Duration(k.rng.Intn(3000))*time.Millisecond)
	k.schedule(&kvsAction{t: t, kind: actBody, gpu: p.gpu, body: body})
}

// beforePrefill arms the faults that act on a fresh prefill of r.
func (k *KV) beforePrefill(p *kvsPool, r *kvsReq) {
	if r.key != r.RequestID { // a retry: its fault is already decided
		return
	}
	if f := k.due(p, RadixStale, 0); f != nil {
		k.radixEvict(p, f)
	}
	if f := k.due(p, OffloadAfterPreempt, 0); f != nil {
		var a *kvsReq
		for _, o := range p.live {
			if o != r && o.state == kvsRunning && (a == nil || o.id > a.id) && len(k.unhashed(p, o)) > 0 {
				a = o
			}
		}
		if a != nil {
			f.stage, f.gpu, f.a, f.aBlock = 1, p.gpu, a, k.unhashed(p, a)
			k.preempt(a) // the async offload of a is still running
		}
	}
	if f := k.due(p, CancelRetry, 0); f != nil {
		f.stage, f.gpu = 1, p.gpu
		r.cancel = f
		return
	}
	if f := k.due(p, KVBaseSwap, 0); f != nil {
		f.stage, f.gpu = 1, p.gpu
		r.baseSwap = f
		r.swapLayer = k.rng.Intn(k.cfg.Layers - 1)
		if k.rng.Intn(4) == 0 {
			r.swapLayer = k.cfg.Layers - 1 // the next layer's base is past the pool
		}
	}
}

// unhashed lists r's own blocks without a content hash: on free they go
// back to the free stack, not to the cache.
func (k *KV) unhashed(p *kvsPool, r *kvsReq) []int {
	var out []int
	for i, b := range r.blocks {
		if !r.hit[i] && p.blocks[b].hash == "" && len(p.blocks[b].owners) == 1 {
			out = append(out, b)
		}
	}
	return out
}

// afterAlloc: RecycledNotZeroed reads a recycled block before writing it;
// OffloadAfterPreempt notes which of the preempted request's blocks r got.
func (k *KV) afterAlloc(p *kvsPool, r *kvsReq, fresh []int) {
	if r.key != r.RequestID {
		return
	}
	if f := k.due(p, RecycledNotZeroed, 0); f != nil {
		for _, i := range fresh {
			b := r.blocks[i]
			blk := &p.blocks[b]
			if blk.writer == nil || blk.writer == r || len(blk.owners) != 1 {
				continue
			}
			k.realise(p, f, b, 0, blk.writer.RequestID)
			for l := 0; l < k.cfg.Layers; l++ {
				k.rangeOp(p, r, OpRead, b, l, k.slot(l, b), k.cfg.BlockBytes, "")
			}
			k.pollute(p, r, f, "direct", "", i)
			break
		}
	}
	if f := k.due(p, OffloadAfterPreempt, 1); f != nil {
		f.stage = 0
		for _, i := range fresh {
			for _, b := range f.aBlock {
				if r.blocks[i] == b && f.stage == 0 {
					f.stage, f.owner, f.block = 2, r, b
				}
			}
		}
	}
}

// afterWrites: the preempted request's offload writes into r's block;
// WrongStride's second copy lands in the wrong place; KVBaseSwap's
// consequences.
func (k *KV) afterWrites(p *kvsPool, r *kvsReq, fresh []int) {
	if f := k.due(p, OffloadAfterPreempt, 2); f != nil && f.owner == r {
		b := f.block
		k.realise(p, f, b, -1, f.a.RequestID)
		for l := 0; l < k.cfg.Layers; l++ {
			k.stray(p, f.a, b, l, k.slot(l, b), k.cfg.BlockBytes, "", f)
		}
	}
	if f := k.due(p, WrongStride, 0); f != nil && r.key == r.RequestID {
		first := -1
		for _, i := range fresh {
			if b := r.blocks[i]; 2*b >= k.cfg.BlocksPerGPU && first < 0 {
				first = b
			}
		}
		if first >= 0 {
			l := k.rng.Intn(k.cfg.Layers - 1)
			k.realise(p, f, first, l, r.RequestID)
			for _, i := range fresh {
				b := r.blocks[i]
				k.stray(p, r, b, l, int64(l)*k.layerSize+2*int64(b)*k.cfg.BlockBytes, k.cfg.BlockBytes, "", f)
			}
			if k.rng.Intn(2) == 0 {
				k.xid(p, f)
			}
		}
	}
	if f := r.baseSwap; f != nil {
		r.baseSwap = nil
		if f.done && (f.sanitizer || k.rng.Intn(2) == 0) {
			k.xid(p, f)
		}
	}
}

// baseSwapWrite is a write of layer l made with the next layer's base.
func (k *KV) baseSwapWrite(p *kvsPool, r *kvsReq, b, l int, addr, bytes int64, hash string) {
	f := r.baseSwap
	if !f.done {
		k.realise(p, f, b, l, r.RequestID)
	}
	k.stray(p, r, b, l, addr+k.layerSize, bytes, hash, f)
	if blk := &p.blocks[b]; blk.taint == nil { // its layer l is never written
		blk.taint, blk.carrier = f, r.RequestID
	}
	k.pollute(p, r, f, "direct", "", r.index(b))
}

// afterDecodeWrite: a padded batch slot of -1 maps to the last slot of the
// last block, and its 2-token store runs past the layer's end.
func (k *KV) afterDecodeWrite(p *kvsPool, r *kvsReq) {
	f := k.due(p, PaddingSlotMinus1, 0)
	if f == nil {
		return
	}
	last := k.cfg.BlocksPerGPU - 1
	other := false
	for _, o := range p.blocks[last].owners {
		other = other || o != r
	}
	if !other {
		return
	}
	k.realise(p, f, last, 0, r.RequestID)
	for l := 0; l < k.cfg.Layers; l++ {
		addr := k.slot(l, last) + int64(k.cfg.BlockTokens-1)*k.tokBytes
		k.stray(p, r, last, l, addr, 2*k.tokBytes, "", f)
	}
	k.xid(p, f)
}

// beforeFree/afterFree: DoubleFree, in the preemption path, frees one of
// r's blocks twice; the block lands twice on the free stack, so two
// requests will own it (r itself, when it resumes, or the next one).
func (k *KV) beforeFree(p *kvsPool, r *kvsReq) {
	f := k.due(p, DoubleFree, 0)
	if f == nil {
		return
	}
	if u := k.unhashed(p, r); len(u) > 0 && p.blocks[u[len(u)-1]].ref == 1 {
		f.stage, f.gpu = 1, p.gpu
		r.df, r.dfBlock = f, u[len(u)-1]
	}
}

func (k *KV) afterFree(p *kvsPool, r *kvsReq) {
	f := r.df
	if f == nil {
		return
	}
	r.df = nil
	b := r.dfBlock
	k.realise(p, f, b, -1, r.RequestID)
	k.blockOp(p, r, OpFree, b, "")
	p.push(b)
	p.blocks[b].fault = f
}

// radixEvict evicts a cached prefix block while the radix tree keeps
// pointing at it.
func (k *KV) radixEvict(p *kvsPool, f *kvsFault) {
	for b := range p.blocks {
		blk := &p.blocks[b]
		if !blk.cached || !p.isPrefix[blk.hash] {
			continue
		}
		h := blk.hash
		delete(p.byHash, h)
		blk.hash, blk.cached = "", false
		k.blockOp(p, nil, OpEvict, b, "")
		k.stats.Evictions++
		p.push(b)
		p.stale[h] = b
		f.stage, f.gpu, f.block, f.hash = 1, p.gpu, b, h
		return
	}
}

// radixStale serves r's full block of hash h from a stale radix entry: the
// page now belongs to another request, and r writes into it.
func (k *KV) radixStale(p *kvsPool, r *kvsReq, h string) (int, bool) {
	b, ok := p.stale[h]
	if !ok {
		return 0, false
	}
	delete(p.stale, h)
	var f *kvsFault
	for _, g := range k.pending {
		if g.spec.Trigger == RadixStale && g.stage == 1 && g.hash == h && g.gpu == p.gpu {
			f = g
		}
	}
	blk := &p.blocks[b]
	if f == nil {
		return 0, false
	}
	if len(blk.owners) == 0 || p.owns(b, r) {
		f.stage = 0 // the page is still free: the stale pointer does no harm yet
		return 0, false
	}
	k.realise(p, f, b, -1, r.RequestID)
	blk.ref++
	blk.owners = append(blk.owners, r)
	blk.fault = f
	k.blockOp(p, r, OpAlloc, b, h)
	return b, true
}

// cancelPrefill: the client cancels r in the middle of its prefill (layers
// [0, L/2) written); its blocks are freed, unhashed. The retry, a new
// request with the same prompt, believes those layers computed: it reads
// them without writing them and without a hash match.
func (k *KV) cancelPrefill(p *kvsPool, r *kvsReq, f *kvsFault, from int) {
	lc := max(1, k.cfg.Layers/2)
	k.writeLayers(r, from, r.tokens, 0, lc)
	k.realise(p, f, r.blocks[from/k.cfg.BlockTokens], 0, r.RequestID)
	k.release(r, OpFree)
	r.state = kvsDone
	r.epoch++
	p.removeLive(r)
	delay := 100*time.Millisecond + time.Duration(k.rng.Intn(300))*time.Millisecond
	in := r.KVRequest
	in.RequestID = "cmpl-" + k.newHex(32)
	in.TraceID, in.SpanID = k.newHex(32), k.newHex(16)
	in.Arrival, in.Finish = k.now.Add(delay), r.Finish.Add(delay)
	in.Prefix = r.prefix
	rr := k.newReq(in, r.key)
	rr.PromptTokens, rr.OutputTokens = r.PromptTokens, r.OutputTokens
	rr.chunks, rr.interruptAt = r.chunks, -1
	rr.skip, rr.cancel = lc, nil
	rr.retryOf = f
	k.schedule(&kvsAction{t: in.Arrival, kind: actPrefill, r: rr})
}
