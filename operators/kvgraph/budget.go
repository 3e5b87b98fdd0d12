package kvgraph

import (
	"container/heap"
	"slices"

	"github.com/braidlabs/braid/engine"
)

// Memory (see the package doc): estimated sizes of blocks, requests, GPUs,
// open incidents and the closed ones remembered (carry.go) — structs,
// strings that are not shared, map entries, timers — kept under
// Config.MaxStateBytes.

const (
	blockFixed   = 240 // struct, map entry, timer
	ownerBytes   = 40
	layerBytes   = 40
	spanBytes    = 88
	requestFixed = 272
	incidentHead = 600
)

func blockBytes(b *block) int64 {
	n := blockFixed + ownerBytes*cap(b.owners) + layerBytes*cap(b.layers)
	for i := range b.layers {
		n += spanBytes * cap(b.layers[i].spans)
	}
	return int64(n)
}

func requestBytes(r *request) int64 {
	return int64(requestFixed + 2*len(r.id) + len(r.incident) + 8*cap(r.table) + 8*cap(r.hashes))
}

func gpuBytes(g *gpu) int64 { return int64(400 + 2*len(g.id) + len(g.host) + len(g.instance)) }

func (p *Processor) addStateBytes(n int64) { p.stateBytes += n }

// report brings Counters.StateBytes up to date.
func (p *Processor) report() {
	n := p.stateBytes + p.incBytes
	p.c.StateBytes.Add(n - p.reported)
	p.reported = n
}

// account updates the sizes of what the last event touched and evicts
// when the state is over MaxStateBytes.
func (p *Processor) account(t *engine.Task) {
	for _, b := range p.touchedBlocks {
		n := blockBytes(b)
		p.addStateBytes(n - b.size)
		b.size = n
	}
	for _, r := range p.touchedReqs {
		n := requestBytes(r)
		p.addStateBytes(n - r.size)
		r.size = n
	}
	clear(p.touchedBlocks)
	clear(p.touchedReqs)
	p.touchedBlocks, p.touchedReqs = p.touchedBlocks[:0], p.touchedReqs[:0]
	if p.cfg.MaxStateBytes > 0 && p.stateBytes+p.incBytes > p.cfg.MaxStateBytes {
		p.evict(t)
	}
	p.report()
}

func (p *Processor) evict(t *engine.Task) {
	limit := p.cfg.MaxStateBytes
	if p.incBytes > limit/2 {
		byAge := slices.Clone(p.open)
		slices.SortFunc(byAge, func(a, b *incident) int {
			if a.pb.LastUnixNano != b.pb.LastUnixNano {
				if a.pb.LastUnixNano < b.pb.LastUnixNano {
					return -1
				}
				return 1
			}
			return int(a.order - b.order)
		})
		for _, inc := range byAge {
			if p.incBytes <= limit/2 {
				break
			}
			inc.pb.Root.Detail += " (closed early: state memory budget)"
			p.c.EvictedIncidents.Add(1)
			p.close(t, inc, p.wm)
		}
	}
	for p.stateBytes+p.incBytes > limit-limit/8 && len(p.timers) > 0 {
		tm := heap.Pop(&p.timers).(timer)
		if tm.b != nil && len(tm.b.owners) > 0 && !tm.g.lossy {
			tm.g.lossy = true
			p.markGPU(tm.g)
		}
		switch p.fire(tm, tm.at) {
		case 'b':
			p.c.EvictedBlocks.Add(1)
		case 'r':
			p.c.EvictedRequests.Add(1)
		}
	}
}

// restoreSizes recomputes the estimates after Restore.
func (p *Processor) restoreSizes() {
	p.stateBytes, p.incBytes = 0, 0
	var n int64
	for _, c := range p.closedList {
		n += c.size
	}
	for _, g := range p.gpus {
		n += gpuBytes(g)
		for _, b := range g.blocks {
			b.size = blockBytes(b)
			n += b.size
		}
		for _, r := range g.reqs {
			r.size = requestBytes(r)
			n += r.size
		}
	}
	p.addStateBytes(n)
	for _, inc := range p.open {
		inc.bytes += incidentHead
		p.incBytes += inc.bytes
		inc.total = &p.incBytes
	}
	p.report()
}
