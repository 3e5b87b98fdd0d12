package simulator

import "fmt"

// restart restarts the server of GPU g (KVConfig.Restarts): its requests
// die holding their blocks — no free, no further event —, the pool starts
// empty under a new instance id, and with NullBlock the CUDA-graph capture
// writes the null block in every layer without a request; the server then
// zeroes it, unless a NullBlockJunk fault is due.
func (k *KV) restart(g int) {
	p := k.pools[g]
	for _, r := range p.live {
		r.state = kvsDone
		r.epoch++
		r.blocks, r.hit = nil, nil
	}
	fresh := newKVSPool(g, k.cfg.BlocksPerGPU, k.cfg.NullBlock)
	fresh.clock, fresh.restarts = p.clock, p.restarts+1
	fresh.instance = fmt.Sprintf("%s-r%d", k.gpus[g].Instance, fresh.restarts)
	k.pools[g] = fresh
	p = fresh
	k.stats.Restarts++
	if !k.cfg.NullBlock {
		return
	}
	for l := 0; l < k.cfg.Layers; l++ {
		k.emit(p, KVEvent{Op: OpWrite, Block: 0, RefCnt: -1, Layer: l, Addr: k.slot(l, 0), Bytes: k.cfg.BlockBytes,
			LayerBase: int64(l) * k.layerSize, LayerSize: k.layerSize})
	}
	if f := k.due(p, NullBlockJunk, 0); f != nil {
		k.realise(p, f, 0, -1, "")
		p.junk = f
		return
	}
	k.emit(p, KVEvent{Op: OpZero, Block: 0, RefCnt: -1, Layer: -1, Addr: -1, Bytes: -1, LayerBase: -1, LayerSize: -1})
}

// paddedRead is a padded decode step of r reading the null block in layer
// l; after a capture left junk there it returns it.
func (k *KV) paddedRead(p *kvsPool, r *kvsReq, l int) {
	k.rangeOp(p, r, OpRead, 0, l, k.slot(l, 0), k.cfg.BlockBytes, "")
	if p.junk != nil && r.polluted == nil {
		k.pollute(p, r, p.junk, "direct", "", max(0, len(r.blocks)-1))
	}
}
