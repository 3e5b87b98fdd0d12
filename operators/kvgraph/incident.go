package kvgraph

import (
	"encoding/hex"
	"hash/fnv"
	"strconv"

	"github.com/braidlabs/braid/operators/braidpb"
)

// incident is one open (or just closed) incident of a GPU.
type incident struct {
	pb *braidpb.Incident
	g  *gpu
	// nodes: every node id of its edges; edgeKeys: edges already in pb
	// (source|target|kind), so that repeated evidence does not repeat them.
	nodes    []string
	edgeKeys map[string]struct{}
	// keyList is edgeKeys in the order they came (persisted in segments).
	keyList []string
	// persisted: items of each list (see incList) in state.
	persisted [incLists]int
	// notified: polluted requests handed to Config.OnIncident.
	notified int
	victims  map[string]struct{}
	layers   map[int64]*braidpb.LayerCount
	dirty    bool
	closed   bool
	changed  bool
	// merged: closed because it merged into another incident.
	merged bool
	// order is the creation order among the processor's incidents.
	order int64
	// bytes is its estimated memory, also added to *total (the
	// processor's incBytes) while it is open.
	bytes int64
	total *int64
}

// grow adds n bytes to inc's estimated memory.
func (inc *incident) grow(n int64) {
	inc.bytes += n
	if inc.total != nil {
		*inc.total += n
	}
}

func (inc *incident) addVictim(v *braidpb.PollutedRequest) {
	inc.pb.Polluted = append(inc.pb.Polluted, v)
	inc.grow(int64(len(v.RequestId)+len(v.From)) + 160)
}

func (inc *incident) addEdge(e *braidpb.PollutionEdge) {
	inc.pb.Edges = append(inc.pb.Edges, e)
	inc.grow(int64(len(e.Source)+len(e.Target)+len(e.Host)+len(e.Gpu)+len(e.SourceRequest)+len(e.TargetRequest)+len(e.IncidentId)+len(e.Detail)) + 80*int64(len(e.Evidence)) + 320)
}

// incidentID is a hash of the GPU and the root edge: the same input gives
// the same id.
func incidentID(g *gpu, kind braidpb.PollutionKind, src string, blk, layer int64, at int64) string {
	h := fnv.New64a()
	h.Write([]byte(g.id))
	h.Write([]byte{0, byte(kind), 0})
	h.Write([]byte(src))
	var b [8 * 3]byte
	for i, v := range []int64{blk, layer, at} {
		for j := 0; j < 8; j++ {
			b[i*8+j] = byte(uint64(v) >> (8 * j))
		}
	}
	h.Write(b[:])
	return "inc-" + hex.EncodeToString(h.Sum(nil))
}

func (inc *incident) addNode(n string) {
	if _, ok := inc.g.nodes[n]; ok && inc.g.nodes[n] == inc {
		return
	}
	inc.g.nodes[n] = inc
	inc.nodes = append(inc.nodes, n)
	inc.grow(int64(len(n)) + 96)
}

// addEdgeKey records edge key k; false if it was known.
func (inc *incident) addEdgeKey(k string) bool {
	if _, ok := inc.edgeKeys[k]; ok {
		return false
	}
	inc.edgeKeys[k] = struct{}{}
	inc.keyList = append(inc.keyList, k)
	inc.grow(int64(len(k)) + 80)
	return true
}

func (inc *incident) layer(l int64) *braidpb.LayerCount {
	lc := inc.layers[l]
	if lc == nil && len(inc.layers) >= maxIncidentLayers {
		inc.pb.LayersDropped++
		return &braidpb.LayerCount{Layer: int32(l)} // tallied nowhere
	}
	if lc == nil {
		lc = &braidpb.LayerCount{Layer: int32(l)}
		inc.layers[l] = lc
		inc.pb.Layers = append(inc.pb.Layers, lc)
	}
	return lc
}

func edgeKey(e *braidpb.PollutionEdge) string {
	return e.Source + "|" + e.Target + "|" + strconv.Itoa(int(e.Kind))
}

// KindName is the short name of a pollution kind (dirty_residue,
// mixed_write, layer_oob, propagated).
func KindName(k braidpb.PollutionKind) string {
	switch k {
	case braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE:
		return "dirty_residue"
	case braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE:
		return "mixed_write"
	case braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB:
		return "layer_oob"
	case braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED:
		return "propagated"
	}
	return "unspecified"
}
