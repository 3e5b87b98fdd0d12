package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

// Feature is one observation about an incident, in words: the query the
// knowledge base is searched with. Basis says what it was observed from.
type Feature struct {
	Text   string  `json:"text"`
	Basis  string  `json:"basis"`
	Weight float64 `json:"weight,omitempty"` // 0 means 1
}

func (f Feature) weight() float64 {
	if f.Weight == 0 {
		return 1
	}
	return f.Weight
}

// evidenceSlack is how far outside an incident's [first, last] a
// sanitizer or Xid line on its GPU still counts as its evidence.
const evidenceSlack = 5 * time.Second

// observation is what features are computed from.
type observation struct {
	inc *braidpb.Incident
	// layers is the model's layer count (kv.layer.count of the re-read
	// records, else the layers of the GPU's traces), 0 when unknown.
	layers int
	// rootPreempted: the root request's fused trace shows a preemption.
	rootPreempted bool
	// root is the root's input record, re-read (nil when not).
	root *Reread
}

// observe derives the incident's features from its edges, layer counts,
// supporting lines and re-read root record. Each names what it saw, in the
// convention's terms, never a conclusion about the trigger.
func observe(o observation) []Feature {
	inc := o.inc
	var fs []Feature
	add := func(w float64, basis, format string, args ...any) {
		fs = append(fs, Feature{Text: fmt.Sprintf(format, args...), Basis: basis, Weight: w})
	}
	root := inc.GetRoot()
	switch inc.Pattern {
	case braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE:
		add(1, "pattern", "dirty residue: a request read content it did not write")
	case braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE:
		add(1, "pattern", "mixed write: one request wrote into a block another request owns")
	case braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB:
		add(1, "pattern", "layer out of bounds: a write outside its layer's range")
	}
	var residue, doubleFree, allocOwned, foreign, afterFree, landed, outside int
	foreignBlocks, foreignOwners := map[int64]bool{}, map[string]bool{}
	for _, e := range inc.Edges {
		d := e.Detail
		switch {
		case e.Kind == braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE:
			residue++
		case strings.Contains(d, "after a double free"):
			doubleFree++
		case strings.Contains(d, " allocated to ") && strings.Contains(d, " while owned by "):
			allocOwned++
		case strings.Contains(d, " landed outside the pool"):
			outside++
			landed++
		case strings.Contains(d, " landed in layer "):
			landed++
		case strings.HasPrefix(d, "write by ") && strings.Contains(d, " into block "):
			foreign++
			if strings.Contains(d, "after it was freed") {
				afterFree++
			}
			if e.Kind == braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB {
				foreignBlocks[e.Block] = true
				if _, owner, ok := strings.Cut(d, ", owned by "); ok {
					foreignOwners[owner] = true
				}
			}
		}
	}
	hitLayers, readLayers := 0, 0
	maxLayer := int32(-1)
	for _, l := range inc.Layers {
		if l.Hits > 0 {
			hitLayers++
		}
		if l.CorruptedReads > 0 {
			readLayers++
		}
		maxLayer = max(maxLayer, l.Layer)
	}
	nl := o.layers
	// The root's op in its re-read record: the root request's op at the
	// root's time, else its first alloc or write there.
	var rootEv *kvgraph.Event
	if o.root != nil && root != nil {
		for i := range o.root.Events {
			ev := &o.root.Events[i]
			if string(ev.Request) != root.RequestId {
				continue
			}
			if ev.Time == int64(root.TimeUnixNano) {
				rootEv = ev
				break
			}
			if rootEv == nil && (ev.Op == kvgraph.OpAlloc || ev.Op == kvgraph.OpWrite) {
				rootEv = ev
			}
		}
	}
	// A write for one block that landed in another block's slot.
	if rootEv != nil && rootEv.Op == kvgraph.OpWrite && root.Block >= 0 && rootEv.Block >= 0 && rootEv.Block != root.Block {
		add(2, "root record", "the write was for block %d but landed in block %d, another block of the same layer", rootEv.Block, root.Block)
		if root.Block == 2*rootEv.Block {
			add(1.5, "root record", "the write landed at twice its block's offset: a wrong stride")
		}
	}
	rootSelf := root != nil && len(inc.Polluted) > 0
	others := 0
	for _, v := range inc.Polluted {
		if v.RequestId != root.GetRequestId() {
			rootSelf = false
			others++
		}
	}
	switch inc.Pattern {
	case braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE:
		if residue > 0 {
			add(0.5, "edges", "read of a freed block another request wrote: content of the previous owner, not zeroed since it was freed")
		}
		switch {
		case nl > 0 && readLayers >= nl:
			add(3, "layer counts", "residue read in every layer of the block (all %d layers)", nl)
		case nl > 0 && readLayers > 0:
			add(3, "layer counts", "residue read in part of the layers only (%d of %d): some layers never written, skipped as if computed", readLayers, nl)
		}
	case braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE:
		if doubleFree > 0 {
			add(2, "edges", "double free: a block freed twice, handed out to two live owners")
		} else if allocOwned > 0 {
			add(1, "edges", "block allocated while another request owns it")
			if rootEv != nil && rootEv.Op == kvgraph.OpAlloc && rootEv.HasHash {
				add(2, "root record", "prefix hit: allocation with a prefix hash the block no longer holds (stale prefix entry, hash mismatch)")
			}
		}
		if foreign > 0 && allocOwned == 0 && doubleFree == 0 {
			add(1, "edges", "foreign write: a request that is not the owner wrote into a block another request owns")
			if afterFree > 0 {
				add(1, "edges", "write after free: the writer had freed the block")
			}
			if nl > 0 && hitLayers >= nl {
				add(1.5, "layer counts", "foreign writes in every layer of one whole block")
			}
			if o.rootPreempted {
				add(1.5, "root trace", "the writer was preempted before its write (preemption)")
			}
		}
	case braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB:
		if landed > 0 {
			add(1, "edges", "a write for one layer landed in the next layer")
		}
		if outside > 0 || nl > 0 && int(maxLayer) >= nl {
			add(1.5, "edges", "a write landed outside the pool, past the end of the last layer")
		}
		if rootEv != nil && rootEv.Op == kvgraph.OpWrite && rootEv.HasRange && rootEv.HasLayerRange {
			end := rootEv.LayerBase + rootEv.LayerSize
			if rootEv.Addr < end && rootEv.Addr+rootEv.Bytes > end {
				add(1.5, "root record", "the write straddles the end of its layer: it starts in the layer's last slot and runs into the next layer")
			} else if rootEv.Addr >= end {
				add(0.5, "root record", "the write starts beyond its layer, wholly inside another layer")
				// Where in the layers it went, in blocks of the record's
				// in-range ops: its own slot one layer on (the next layer's
				// base), or twice its offset (a stride).
				if bb := blockBytes(o.root.Events); bb > 0 && rootEv.Block > 0 {
					off, own := rootEv.Addr-rootEv.LayerBase, rootEv.Block*bb
					switch {
					case abs(off-rootEv.LayerSize-own) < bb:
						add(3.5, "root record", "the write went to its own block's slot one layer on: the next layer's base address")
					case abs(off-2*own) < bb:
						add(3.5, "root record", "the write landed at twice its block's offset: a wrong stride")
					}
				}
			}
		}
		if nl > 0 && hitLayers >= nl {
			add(1, "layer counts", "out-of-bounds writes in every layer")
		}
		delete(foreignOwners, root.GetRequestId())
		if len(foreignBlocks) >= 3 && len(foreignOwners) > 0 {
			add(3, "edges", "writes into many other requests' blocks of the same layer, owned by other requests (%d blocks, %d named owners)", len(foreignBlocks), len(foreignOwners))
		}
		if rootSelf {
			add(3, "victims", "the writer is its own victim: it read the layer it never wrote, its own blocks")
		} else if others > 0 {
			add(2.5, "victims", "the out-of-bounds writes polluted %d other requests, owners of the blocks they landed in", others)
		}
	}
	var san, xid bool
	if inc.FirstUnixNano > 0 {
		from, to := int64(inc.FirstUnixNano)-int64(evidenceSlack), int64(inc.LastUnixNano)+int64(evidenceSlack)
		for _, e := range inc.Evidence {
			if t := int64(e.TimeUnixNano); t < from || t > to {
				continue
			}
			if e.Kind == "xid" {
				xid = true
			} else {
				san = true
			}
		}
	}
	if san {
		add(1, "supporting lines", "compute-sanitizer: invalid __global__ write, address out of bounds")
	}
	if xid {
		add(1, "supporting lines", "NVRM Xid 13 on the GPU")
	}
	if !san && !xid {
		add(0.5, "supporting lines", "no sanitizer line and no Xid: silent")
	}
	prop := 0
	for _, v := range inc.Polluted {
		if v.Via == braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED {
			prop++
		}
	}
	if prop > 0 {
		add(0.5, "victims", "%d victims through prefix-cache propagation (shared prefix)", prop)
	}
	return fs
}

// blockBytes estimates a block's size in the pool from ops that stayed in
// their layer: (addr - layer base) / block is a block's size plus the
// token offset over the block number, so the smallest over blocks 4 and
// up is within a quarter block. 0 when no op tells.
func blockBytes(evs []kvgraph.Event) int64 {
	var bb int64
	for _, ev := range evs {
		if !ev.HasRange || !ev.HasLayerRange || ev.Block < 4 || ev.Addr < ev.LayerBase || ev.Addr >= ev.LayerBase+ev.LayerSize {
			continue
		}
		if c := (ev.Addr - ev.LayerBase) / ev.Block; bb == 0 || c < bb {
			bb = c
		}
	}
	return bb
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
