package kvgraph

import (
	"bytes"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

// Counters are the processor's accounting. Share one between the tasks of
// a stage through Config.Counters to sum them.
type Counters struct {
	Events    atomic.Int64 // KV ops handled
	Evidence  atomic.Int64 // sanitizer and Xid lines handled
	Ignored   atomic.Int64 // log records that are none of these, or lack a block id
	Edges     atomic.Int64 // pollution edges emitted
	Incidents atomic.Int64 // incidents opened
	Revisions atomic.Int64 // incident records emitted (all revisions)
	Closed    atomic.Int64 // incidents closed
	Polluted  atomic.Int64 // requests marked polluted
	Blocks    atomic.Int64 // blocks in state

	Rejected         atomic.Int64 // KV events that break the convention (Config.ErrorPolicy)
	DeadLettered     atomic.Int64 // of those, written to the dead-letter topic
	Unwritable       atomic.Int64 // output records that could not be marshalled (skipped)
	EvidenceDropped  atomic.Int64 // supporting lines dropped: MaxPendingEvidence, MaxIncidentEvidence
	Truncated        atomic.Int64 // incident records that left items out to fit MaxRecordBytes
	KVBufferBytes    atomic.Int64 // bytes of KV events held until the watermark passes them
	EvictedBlocks    atomic.Int64 // blocks forgotten before BlockTTL (MaxStateBytes)
	EvictedRequests  atomic.Int64 // requests forgotten before BlockTTL (MaxStateBytes)
	EvictedIncidents atomic.Int64 // incidents closed before IncidentWindow (MaxStateBytes)
	StateBytes       atomic.Int64 // estimated bytes of in-memory detector state
	Unrelated        atomic.Int64 // supporting lines not attached: an Xid that is no memory fault, a racecheck report, a host-level line naming no GPU braid can place
	Restarts         atomic.Int64 // server restarts seen (service.instance.id of a GPU changed): its pool starts afresh
}

// Processor detects KV-cache pollution for the GPUs routed to one task.
// Its methods are called on the task's goroutine only.
type Processor struct {
	cfg       Config
	partition int32
	c         *Counters

	gpus map[string]*gpu
	open []*incident // open incidents, in creation order
	// pending supporting lines not yet attached to an incident.
	pending        []*pendingEvidence
	pendingChanged bool
	// pci maps "host/bus id" to the GPU uuid, learnt from Xid lines that
	// came with both (not persisted: learnt again).
	pci map[string]string

	timers    timerHeap
	backlog   bool
	nextOrder int64
	wm        int64 // the last watermark given to OnWatermark

	changedBlocks []blockRef
	changedReqs   []reqRef
	changedGPUs   []*gpu
	changedIncs   []*incident
	deleted       [][]byte
	deletedRanges [][]byte // pairs: [lo, hi)

	// Memory (budget.go): estimated bytes of blocks, requests and GPUs, and
	// of open incidents; the blocks and requests an event touched.
	stateBytes    int64
	incBytes      int64
	reported      int64 // the part of Counters.StateBytes that is ours
	touchedBlocks []*block
	touchedReqs   []*request
	dirtyIncs     []*incident

	// closed: incidents closed within BlockTTL whose pollution may still
	// be carried on (carry.go), closedList the same in order of closing.
	closed        map[string]*closedInc
	closedList    []*closedInc
	closedChanged bool

	hits []readHit
	key  []byte
	buf  []byte
	// err is a record that could not be written under the fail policy,
	// returned by the call that met it.
	err error
}

type blockRef struct {
	g *gpu
	b *block
}

type reqRef struct {
	g *gpu
	r *request
}

type pendingEvidence struct {
	host, gpu string // gpu: uuid, "" when the line names none
	index     int64  // gpu index, -1 when the line names none
	pb        *braidpb.Evidence
}

// NewProcessor returns the processor of task partition. cfg gets its
// defaults; call cfg.Validate first.
func NewProcessor(cfg Config, partition int32) *Processor {
	cfg.EnsureDefaults()
	c := cfg.Counters
	if c == nil {
		c = &Counters{}
	}
	return &Processor{cfg: cfg, partition: partition, c: c, gpus: map[string]*gpu{}}
}

// Counters returns the live counters.
func (p *Processor) Counters() *Counters { return p.c }

// Add handles one log record routed to the task: a KV op, a
// compute-sanitizer line or an Xid line (anything else is counted as
// ignored). resource and logRecord are wire bytes, valid during the call.
// ts is the record's event time. It may emit pollution edges; incidents are
// emitted by OnWatermark. A KV event that fails Check goes by
// Config.ErrorPolicy (see Reject). It returns an error only under the fail
// policy. Add checks the bytes it is given: for a decoded otlp.Item that
// the decoder repaired, check its Original bytes first (see Check).
func (p *Processor) Add(t *engine.Task, resource, logRecord []byte, ts int64, origin Origin) error {
	ev, ok := ParseEvent(resource, logRecord, ts, origin)
	if !ok {
		p.c.Ignored.Add(1)
		return nil
	}
	if err := ev.Check(); err != nil {
		return p.Reject(t, resource, logRecord, origin, err)
	}
	p.handle(t, &ev)
	p.account(t)
	return p.takeErr()
}

// takeErr returns (and clears) the error met while writing records under
// the fail policy, or returned by Config.OnIncident.
func (p *Processor) takeErr() error {
	err := p.err
	p.err = nil
	return err
}

// Handle handles one parsed event (see Add). An event that fails Check is
// dropped, counted in Rejected.
func (p *Processor) Handle(t *engine.Task, ev *Event) {
	if ev.Check() != nil {
		p.c.Rejected.Add(1)
		return
	}
	p.handle(t, ev)
	p.account(t)
}

func (p *Processor) handle(t *engine.Task, ev *Event) {
	if ev.Op == OpSanitizer || ev.Op == OpXid {
		p.c.Evidence.Add(1)
		p.supporting(ev)
		return
	}
	if ev.Block < 0 {
		p.c.Ignored.Add(1)
		return
	}
	p.c.Events.Add(1)
	g := p.gpuOf(ev)
	if ev.Layers > 0 && ev.Layers != g.layers {
		g.layers = ev.Layers
		p.markGPU(g)
	}
	if ev.HasLayerRange && ev.LayerSize != g.layerSize {
		g.layerSize = ev.LayerSize
		p.markGPU(g)
	}
	if ev.BlockBytes > 0 && ev.BlockBytes != g.bbAttr {
		g.bbAttr = ev.BlockBytes
		p.markGPU(g)
	}
	b := g.blocks[ev.Block]
	if b == nil {
		b = &block{id: ev.Block}
		g.blocks[ev.Block] = b
		p.c.Blocks.Add(1)
		// On a GPU whose owned blocks were evicted, a block met in
		// mid-life has owners we forgot: see untracked.
		b.untracked = g.lossy && (ev.Op != OpAlloc || ev.HasHash) && ev.Op != OpSwapIn
	}
	if b.untracked && ev.Op == OpAlloc && !ev.HasHash {
		b.untracked = false // a new life (owners taken since stay)
	}
	b.last = max(b.last, ev.Time)
	p.markBlock(g, b)
	p.scheduleBlock(g, b)
	var r *request
	if len(ev.Request) > 0 {
		r = g.reqs[string(ev.Request)]
		if r == nil {
			r = &request{id: string(ev.Request)}
			g.reqs[r.id] = r
		}
		if r.trace == ([16]byte{}) && ev.TraceID != ([16]byte{}) {
			r.trace = ev.TraceID
		}
		r.last = max(r.last, ev.Time)
		p.markReq(g, r)
		p.scheduleReq(g, r)
	}
	switch ev.Op {
	case OpAlloc:
		if r != nil {
			p.alloc(t, g, b, r, ev)
		}
	case OpWrite:
		if r != nil {
			p.write(t, g, b, r, ev)
		} else {
			p.processWrite(g, b, ev)
		}
	case OpRead:
		if r != nil && !b.untracked {
			p.read(t, g, b, r, ev)
		}
	case OpFree:
		if r != nil {
			r.release(b.id)
			if len(r.table) == 0 {
				// Every block given back (preempted, or done): a request
				// that goes on recomputes its KV from its tokens, clean;
				// it stays a victim, but its later writes carry its
				// pollution only if it reads polluted content again.
				r.pollIdx = math.MaxInt32
			}
			if b.owner(r.id) != nil {
				p.notePartial(g, b, r, ev.Time)
			}
			if !b.removeOwner(r.id) && b.lastFreed == r.id && b.doubleFree == "" {
				b.doubleFree, b.doubleFreeAt = r.id, ev.Time
			}
			b.lastFreed = r.id
		}
	case OpZero:
		p.zero(b, ev)
	case OpEvict:
		b.hasHash = false
	case OpSwapOut:
		// The content leaves for host memory and the block is released
		// (a free that may follow is not a second free).
		if r != nil {
			if b.owner(r.id) != nil {
				p.swapOut(t, g, b, r, ev)
			}
			b.removeOwner(r.id)
			r.release(b.id)
		}
	case OpSwapIn:
		if r != nil {
			if b.owner(r.id) == nil {
				p.alloc(t, g, b, r, ev)
			}
			if len(b.owners) > 1 {
				// The swapped-in content overwrites the other owners'.
				p.foreign(t, g, b, r, ev, ev.Layer, -1, -1, spanForeign, braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE)
			}
			if ev.Layer >= 0 {
				b.layer(ev.Layer, true).overwrite(span{lo: -1, hi: -1, writer: r.id, at: ev.Time, origin: ev.Origin})
			} else {
				b.layers = b.layers[:0]
				b.base, b.baseAt, b.baseTaint = r.id, ev.Time, r.taints(b.id)
			}
			// The block now holds what was swapped in: its content hash
			// is the one the op names, if any, not the previous one's.
			b.hash, b.hasHash, b.hashWriter = ev.Hash, ev.HasHash, r.id
		}
	}
}

func (p *Processor) gpuOf(ev *Event) *gpu {
	var key []byte
	switch {
	case len(ev.GPUUUID) > 0:
		key = ev.GPUUUID
	default:
		key = append(append(p.key[:0], ev.Host...), '/')
		if ev.GPUIndex >= 0 {
			key = strconv.AppendInt(append(key, "gpu"...), ev.GPUIndex, 10)
		} else {
			key = append(key, ev.Instance...)
		}
		p.key = key
	}
	g := p.gpus[string(key)]
	if g == nil {
		g = newGPU(string(key), string(ev.Host))
		g.index = ev.GPUIndex
		p.gpus[g.id] = g
		p.addStateBytes(gpuBytes(g))
		p.markGPU(g)
	}
	if len(ev.Instance) > 0 && g.instance != string(ev.Instance) {
		if g.instance != "" {
			p.restart(g)
		}
		g.instance = string(ev.Instance)
		p.markGPU(g)
	}
	return g
}

// restart: the server on g is a new process (its service.instance.id
// changed). The old process's requests are gone without freeing their
// blocks and its pool's content with it: every block starts a new life,
// with no owner and nothing written (the new process's writes, a
// CUDA-graph capture's included, come as its own events). Open incidents
// stay; requests keep their pollution but hold no block.
func (p *Processor) restart(g *gpu) {
	p.c.Restarts.Add(1)
	for _, b := range g.blocks {
		b.owners, b.layers = b.owners[:0], b.layers[:0]
		b.hash, b.hasHash, b.hashWriter = 0, false, ""
		b.base, b.baseAt, b.baseTaint = "", 0, false
		b.lastFreed, b.doubleFree, b.doubleFreeAt = "", "", 0
		b.untracked = false
		p.markBlock(g, b)
	}
	for _, r := range g.reqs {
		if len(r.table) > 0 {
			r.table = r.table[:0]
			p.markReq(g, r)
		}
	}
	g.lossy = false
}

func (p *Processor) zero(b *block, ev *Event) {
	b.hasHash = false
	if ev.Layer < 0 {
		b.layers = b.layers[:0]
		b.base = ""
		return
	}
	// Zeros over what was there, swapped-in content included: a span
	// anyone may read.
	lo, hi := int64(-1), int64(-1)
	if ev.HasRange {
		lo, hi = ev.Addr, ev.Addr+ev.Bytes
	}
	b.layer(ev.Layer, true).overwrite(span{lo: lo, hi: hi, at: ev.Time, kind: spanZero, origin: ev.Origin})
}

// processWrite records a write that no request made (no
// gen_ai.request.id): the server process writing a block — a CUDA-graph
// capture or warm-up pass through the reserved null block, say. Its bytes
// belong to no request, so a request that reads them reads residue whose
// source is the process.
func (p *Processor) processWrite(g *gpu, b *block, ev *Event) {
	if ev.Layer < 0 {
		return
	}
	lo, hi := int64(-1), int64(-1)
	if ev.HasRange {
		lo, hi = ev.Addr, ev.Addr+ev.Bytes
		if lb, ls, ok := layerRange(g, ev, ev.Layer); ok {
			lo, hi = max(lo, lb), min(hi, lb+ls)
			if lo >= hi {
				return
			}
		}
	}
	b.layer(ev.Layer, true).overwrite(span{lo: lo, hi: hi, at: ev.Time, kind: spanProcess, origin: ev.Origin})
	b.hasHash = false
}

// alloc: a block with a live owner allocated again without a matching
// content hash has two live owners (mixed writes will follow).
func (p *Processor) alloc(t *engine.Task, g *gpu, b *block, r *request, ev *Event) {
	if b.owner(r.id) != nil {
		return
	}
	if b.untracked {
		// A prefix hit on a block whose content we forgot: taken as
		// sharing it.
		b.owners = append(b.owners, owner{req: r.id, at: ev.Time, shared: ev.HasHash})
		r.hold(b.id)
		if ev.HasHash && !b.hasHash {
			b.hash, b.hasHash, b.hashWriter = ev.Hash, true, ""
		}
		return
	}
	shared := ev.HasHash && b.hasHash && ev.Hash == b.hash
	if len(b.owners) > 0 && !shared {
		src, at := r.id, ev.Time
		detail := "block " + strconv.FormatInt(b.id, 10) + " allocated to " + r.id + " while owned by " + b.owners[0].req
		if b.doubleFree != "" {
			src, at = b.doubleFree, b.doubleFreeAt
			detail += " after a double free by " + b.doubleFree
		}
		p.pollute(t, g, pollution{kind: braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE, src: src, srcAt: at, block: b.id, layer: -1, ev: ev, srcOrigin: ev.Origin, detail: detail, blockFault: true})
	}
	if len(b.owners) > 0 && !shared {
		b.doubleFree = "" // the doubled free-list entry is used up
	}
	b.owners = append(b.owners, owner{req: r.id, at: ev.Time, shared: shared})
	r.hold(b.id)
}

// layerRange is the byte range of layer l on g: the event's own, else
// l × the layer size.
func layerRange(g *gpu, ev *Event, l int64) (base, size int64, ok bool) {
	if ev.HasLayerRange && l == ev.Layer {
		return ev.LayerBase, ev.LayerSize, true
	}
	if g.layerSize > 0 && l >= 0 {
		return l * g.layerSize, g.layerSize, true
	}
	return 0, 0, false
}

func (p *Processor) write(t *engine.Task, g *gpu, b *block, r *request, ev *Event) {
	if b.untracked && b.owner(r.id) == nil {
		// Owners forgotten: the writer is taken for one.
		b.owners = append(b.owners, owner{req: r.id, at: ev.Time})
		r.hold(b.id)
	}
	lb, ls, ok := layerRange(g, ev, ev.Layer)
	count := g.layers
	if ev.Layers > 0 {
		count = ev.Layers
	}
	if count > 0 && ev.Layer >= count && (!ev.HasRange || !ok) {
		// Beyond the layer count, with no address to say where it went.
		p.outOfBounds(t, g, r, ev, ev.Layer, -1, -1, -1)
		return
	}
	if ev.HasRange && ok && (ev.Addr < lb || ev.Addr+ev.Bytes > lb+ls || (count > 0 && ev.Layer >= count)) {
		lo, hi := ev.Addr, ev.Addr+ev.Bytes
		inLo, inHi := max(lo, lb), min(hi, lb+ls)
		if count > 0 && ev.Layer >= count {
			inLo, inHi = 0, 0
		}
		// The part outside the layer: below it, above it, or both.
		if lo < lb {
			p.outside(t, g, r, ev, lo, min(hi, lb))
		}
		if hi > lb+ls {
			p.outside(t, g, r, ev, max(lo, lb+ls), hi)
		}
		if inLo < inHi {
			p.writeBlock(t, g, b, r, ev, ev.Layer, inLo, inHi)
		}
		return
	}
	if ev.HasRange && ok && ev.Layer >= 0 {
		if bb, exact := g.blockBytes(p.cfg.BlockBytes); exact {
			slot := (ev.Addr - lb) / bb
			if slot != b.id && (ev.Addr+ev.Bytes-1-lb)/bb == slot {
				// Inside the layer but in another block's slot: whoever
				// holds that slot, the writer included, got bytes that
				// are not theirs.
				target := p.blockAt(g, slot, ev.Time)
				p.foreign(t, g, target, r, ev, ev.Layer, ev.Addr, ev.Addr+ev.Bytes, spanMisplaced, braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE)
				return
			}
		} else if b.owner(r.id) != nil {
			g.learnSlot(b.id, ev.Addr-lb, ev.Bytes)
		}
	}
	lo, hi := int64(-1), int64(-1)
	if ev.HasRange {
		lo, hi = ev.Addr, ev.Addr+ev.Bytes
	}
	p.writeBlock(t, g, b, r, ev, ev.Layer, lo, hi)
}

// blockAt returns block id of g, creating it.
func (p *Processor) blockAt(g *gpu, id, at int64) *block {
	b := g.blocks[id]
	if b == nil {
		b = &block{id: id}
		g.blocks[id] = b
		p.c.Blocks.Add(1)
	}
	b.last = max(b.last, at)
	p.markBlock(g, b)
	p.scheduleBlock(g, b)
	return b
}

// outside handles the part [lo, hi) of a write that left its layer.
func (p *Processor) outside(t *engine.Task, g *gpu, r *request, ev *Event, lo, hi int64) {
	ls := g.layerSize
	if ev.HasLayerRange {
		ls = ev.LayerSize
	}
	count := max(g.layers, ev.Layers)
	if ls <= 0 || lo < 0 {
		p.outOfBounds(t, g, r, ev, -1, -1, lo, hi)
		return
	}
	l := lo / ls
	if count > 0 && l >= count {
		p.outOfBounds(t, g, r, ev, l, -1, lo, hi)
		return
	}
	slot := ev.Block
	if bb, _ := g.blockBytes(p.cfg.BlockBytes); bb > 0 {
		slot = (lo - l*ls) / bb
	}
	p.outOfBounds(t, g, r, ev, l, slot, lo, hi)
}

// outOfBounds records a write by r that landed in layer l (-1 unknown),
// block slot (-1 outside the pool), bytes [lo, hi).
func (p *Processor) outOfBounds(t *engine.Task, g *gpu, r *request, ev *Event, l, slot, lo, hi int64) {
	detail := "write by " + r.id + " for layer " + strconv.FormatInt(ev.Layer, 10) + " of block " + strconv.FormatInt(ev.Block, 10)
	if l >= 0 {
		detail += " landed in layer " + strconv.FormatInt(l, 10)
	} else {
		detail += " landed outside the pool"
	}
	inc := p.pollute(t, g, pollution{kind: braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB, src: r.id, srcAt: ev.Time, srcOrigin: ev.Origin,
		block: -1, layer: l, toLayer: true, ev: ev, lo: lo, hi: hi, detail: detail})
	if inc != nil && l >= 0 {
		inc.layer(l).Hits++
		p.markInc(inc)
	}
	if slot < 0 || l < 0 {
		return
	}
	b := p.blockAt(g, slot, ev.Time)
	p.foreign(t, g, b, r, ev, l, lo, hi, spanOOB, braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB)
	if slot == ev.Block && ev.Layer >= 0 && l != ev.Layer && b.owner(r.id) != nil {
		// The write for layer ev.Layer of r's block landed in the same
		// block's slot of layer l (a K/V base or layer mix-up): those
		// bytes are missing from ev.Layer, and r reading that range there
		// reads what it did not write — a victim then, unless it writes
		// the range itself first.
		if lb, lsz, ok := layerRange(g, ev, ev.Layer); ok && lsz > 0 {
			shift := l*lsz - lb
			if mlo, mhi := lo-shift, hi-shift; mlo >= lb && mhi <= lb+lsz {
				b.layer(ev.Layer, true).overwrite(span{lo: mlo, hi: mhi, writer: r.id, at: ev.Time, kind: spanOOB, origin: ev.Origin})
			}
		}
	}
}

// writeBlock records r's write of [lo, hi) of layer l into b.
func (p *Processor) writeBlock(t *engine.Task, g *gpu, b *block, r *request, ev *Event, l, lo, hi int64) {
	sameHash := ev.HasHash && b.hasHash && ev.Hash == b.hash
	o := b.owner(r.id)
	own := o != nil
	if own {
		o.wrote = true
	}
	stray := !own || (len(b.owners) > 1 && !sameHash)
	if stray {
		p.foreign(t, g, b, r, ev, l, lo, hi, spanForeign, braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE)
	} else {
		b.layer(l, true).overwrite(span{lo: lo, hi: hi, writer: r.id, at: ev.Time, kind: spanOwn, taint: r.taints(b.id), origin: ev.Origin})
	}
	if ev.HasHash {
		b.hash, b.hasHash, b.hashWriter = ev.Hash, true, r.id
		if r.wroteHash(ev.Hash) {
			p.markReq(g, r)
		}
	} else if !stray && b.hasHash && r.id != b.hashWriter {
		// An owner's new content: the hash no longer names it. A stray
		// write changes the bytes, not the server's prefix index: the
		// block is still handed out for its hash, and whoever shares it
		// by that hash reads the stray bytes (read).
		b.hasHash = false
	}
}

// foreign records a write by r into b that b's owners did not expect. It
// is the fault's first evidence (an edge without a victim, the incident
// opens now), and its bytes are marked: whoever reads them — another
// owner, a later owner of a block nobody cleaned, or the writer itself
// reading a range its write was not meant for — is a victim then (read).
// An owner that never reads them is not: holding a block is not reading
// what was written into it.
func (p *Processor) foreign(t *engine.Task, g *gpu, b *block, r *request, ev *Event, l, lo, hi int64, kind uint8, pk braidpb.PollutionKind) {
	detail := "write by " + r.id + " into block " + strconv.FormatInt(b.id, 10) + " layer " + strconv.FormatInt(l, 10)
	if len(b.owners) == 0 {
		detail += " after it was freed"
	} else if b.owner(r.id) == nil {
		detail += ", owned by " + b.owners[0].req
	} else {
		detail += ", which has another live owner"
	}
	if pk == braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		// (An out-of-bounds write has its edge already: outOfBounds.)
		e := pollution{kind: pk, src: r.id, srcAt: ev.Time, srcOrigin: ev.Origin, block: b.id, layer: l, ev: ev, lo: lo, hi: hi, detail: detail,
			blockFault: len(b.owners) > 1} // a block with two live owners
		if inc := p.pollute(t, g, e); inc != nil && l >= 0 {
			inc.layer(l).Hits++
		}
	}
	if l < 0 {
		// A block-level op (swap-in): every layer.
		for i := range b.layers {
			b.layers[i].overwrite(span{lo: -1, hi: -1, writer: r.id, at: ev.Time, kind: kind, origin: ev.Origin})
		}
		return
	}
	b.layer(l, true).overwrite(span{lo: lo, hi: hi, writer: r.id, at: ev.Time, kind: kind, origin: ev.Origin})
}

func overlaps(s span, lo, hi int64) bool {
	return lo < 0 || s.lo < 0 || (s.lo < hi && lo < s.hi)
}

// readHit is one source of polluted content found by a read.
type readHit struct {
	writer string
	kind   braidpb.PollutionKind
	at     int64
	layer  int64
	origin Origin
}

// read checks that r reads only what it may: ranges it wrote, the content
// it shares by hash, zeroed or fresh bytes, or what was swapped in for it.
func (p *Processor) read(t *engine.Task, g *gpu, b *block, r *request, ev *Event) {
	o := b.owner(r.id)
	lo, hi := int64(-1), int64(-1)
	if ev.HasRange {
		lo, hi = ev.Addr, ev.Addr+ev.Bytes
	}
	p.hits = p.hits[:0]
	for i := range b.layers {
		ls := &b.layers[i]
		if ev.Layer >= 0 && ls.layer != ev.Layer {
			continue
		}
		for _, s := range ls.spans {
			// A request's own writes are what it may read, except those
			// that landed outside the range they were for, and, in a
			// block it holds by a prefix hit, those not made with the
			// hash it shares (a stray write over the prefix it reads).
			own := s.ownBy(r.id) && (s.kind != spanForeign || o == nil || !o.shared)
			if own && s.taint && r.polluted != 0 && overlaps(s, lo, hi) {
				// Its own content written while it was polluted (a
				// recompute reusing its cached prefix): what it computes
				// from here on is polluted again.
				if i := r.index(b.id); i < r.pollIdx {
					r.pollIdx = i
					p.markReq(g, r)
				}
			}
			if s.kind == spanZero || own || !overlaps(s, lo, hi) {
				continue
			}
			p.classify(g, b, o, s.writer, s.at, s.kind, s.taint, ls.layer, s.origin)
		}
	}
	// Swapped-in content shows where no later write covers it.
	if b.base != "" && b.base != r.id && !p.covered(b, ev.Layer, lo, hi) {
		p.classify(g, b, o, b.base, b.baseAt, spanOwn, b.baseTaint, ev.Layer, Origin{})
	}
	p.reportHits(t, g, b, r, ev, lo, hi)
}

// swapOut handles r's swap-out of b: its content, with whatever another
// request wrote into it while r held it (a faulty write, the other owner
// of a block handed out twice), goes to host memory and comes back
// with the swap-in, which reads it all. Those bytes are read then; the
// detector does not carry block content through host memory, so r is
// named for them now.
func (p *Processor) swapOut(t *engine.Task, g *gpu, b *block, r *request, ev *Event) {
	o := b.owner(r.id)
	p.hits = p.hits[:0]
	for i := range b.layers {
		ls := &b.layers[i]
		wrote := o.shared // a prefix hit holds the content it shares
		for _, s := range ls.spans {
			// Its own writes, also those marked foreign for another
			// owner of the block; or, when it wrote into the block, a
			// layer others wrote into while it held it (over what it
			// wrote there: a block handed out twice, its other owner
			// writing every layer after it).
			wrote = wrote || s.ownBy(r.id) && s.kind != spanZero ||
				(o.wrote && s.writer != r.id && s.kind != spanZero && s.at >= o.at)
		}
		if !wrote {
			continue // a layer it holds nothing of: nothing of it is read back
		}
		for _, s := range ls.spans {
			// As a read would take them (read), but only what was
			// written while r held the block: a stray write, another
			// owner's writes into it (a block handed out twice).
			own := s.ownBy(r.id)
			if own || s.kind == spanZero || s.at < o.at {
				continue // its own writes, zeros, what was there before it held the block
			}
			p.classify(g, b, o, s.writer, s.at, s.kind, s.taint, ls.layer, s.origin)
		}
	}
	p.reportHits(t, g, b, r, ev, -1, -1)
}

// reportHits turns the hits of r's read (p.hits) into pollution edges.
func (p *Processor) reportHits(t *engine.Task, g *gpu, b *block, r *request, ev *Event, lo, hi int64) {
	if len(p.hits) == 0 {
		return
	}
	// The latest writer first: it is the one whose content was left
	// behind (older writers' leftovers come with it).
	slices.SortStableFunc(p.hits, func(a, b readHit) int {
		switch {
		case a.at > b.at:
			return -1
		case a.at < b.at:
			return 1
		}
		return 0
	})
	for i, h := range p.hits {
		dup := false
		for _, e := range p.hits[:i] {
			if e.writer == h.writer && e.kind == h.kind {
				dup = true
			}
		}
		if dup {
			continue
		}
		at := h.at
		detail := "read by " + r.id + " of block " + strconv.FormatInt(b.id, 10) + " layer " + strconv.FormatInt(h.layer, 10) + " returned content of " + writerName(h.writer)
		switch h.kind {
		case braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE:
			if h.writer == "" {
				detail += " (written without a request: a CUDA-graph capture or warm-up pass), not zeroed since"
			} else {
				detail += ", not zeroed since it was freed"
			}
			at = ev.Time // the fault shows when the dirty bytes are read
		case braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED:
			detail += ", shared by prefix hash after " + h.writer + " was polluted"
		}
		pe := pollution{kind: h.kind, src: h.writer, srcAt: at, srcOrigin: h.origin, block: b.id, layer: h.layer, victim: r.id, ev: ev, lo: lo, hi: hi, detail: detail}
		if h.kind == braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE && h.writer != r.id {
			// r wrote some layers of this block and reads one it never
			// wrote: it took the rest as computed. A request that freed
			// a block having written just those layers (a prefill
			// cancelled part way) is where that belief came from; else,
			// if r wrote the block's content hash, whoever wrote that
			// same content elsewhere — whatever residue the block held.
			if x, xat := p.partialSource(g, b, r, h.layer, ev.Time); x != "" {
				pe.rootSrc = x
				pe.detail += "; " + r.id + " took layers it never wrote as computed by " + x + ", which freed a block with just those layers written at " + time.Unix(0, xat).UTC().Format("15:04:05.000")
			} else if b.hasHash && b.hashWriter == r.id {
				if x := p.sameContent(g, b.hash, r.id); x != "" {
					pe.rootSrc = x
					pe.detail += "; " + r.id + " took it as computed by " + x + " (same content hash)"
				}
			}
		}
		inc := p.pollute(t, g, pe)
		if inc != nil && h.layer >= 0 {
			inc.layer(h.layer).CorruptedReads++
		}
	}
}

func (p *Processor) classify(g *gpu, b *block, o *owner, writer string, at int64, kind uint8, tainted bool, layer int64, origin Origin) {
	// What a prefix hit shares is the content its hash names: what the
	// hash's writer wrote. Bytes another request left in a layer that
	// writer never wrote (a retry that took a cancelled prefill as
	// computed, then wrote the block's hash) are residue to the sharer too.
	if o != nil && o.shared && at <= o.at && kind == spanOwn && (b.hashWriter == "" || writer == b.hashWriter) {
		if tainted {
			p.hits = append(p.hits, readHit{writer, braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED, at, layer, origin})
		}
		return
	}
	pk := braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE
	switch {
	case kind == spanProcess:
		// Left by the server process (no request wrote it).
	case kind == spanOOB:
		pk = braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB
	case kind == spanForeign || kind == spanMisplaced || b.owner(writer) != nil:
		pk = braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE
	}
	p.hits = append(p.hits, readHit{writer, pk, at, layer, origin})
}

// sameContent is the request of g, other than req, that wrote content
// hash h (the one active last, then the lowest id), "" if none.
func (p *Processor) sameContent(g *gpu, h uint64, req string) string {
	var best *request
	for _, r := range g.reqs {
		if r.id == req || !r.hasHash(h) {
			continue
		}
		if best == nil || r.last > best.last || (r.last == best.last && r.id < best.id) {
			best = r
		}
	}
	if best == nil {
		return ""
	}
	return best.id
}

// covered reports whether spans cover [lo, hi) of layer l (anything
// written in l when lo < 0).
func (p *Processor) covered(b *block, l, lo, hi int64) bool {
	for i := range b.layers {
		ls := &b.layers[i]
		if l >= 0 && ls.layer != l {
			continue
		}
		var n int64
		for _, s := range ls.spans {
			if s.lo < 0 || lo < 0 {
				return true
			}
			n += max(0, min(s.hi, hi)-max(s.lo, lo))
		}
		if lo >= 0 && n >= hi-lo {
			return true
		}
	}
	return false
}

// pollution describes one detected flow of polluted content.
type pollution struct {
	kind      braidpb.PollutionKind
	src       string // request whose write (or content) is the source
	rootSrc   string // the fault's source when not src
	srcAt     int64  // time of the fault
	srcOrigin Origin
	block     int64 // -1 none
	layer     int64 // -1 unknown
	toLayer   bool  // the edge goes to the layer node, not the block
	// blockFault: the fault is the block's (handed out to two live
	// owners), not only its writer's: the block links.
	blockFault bool
	victim     string
	ev         *Event // the op that exposed it
	lo, hi     int64
	detail     string
}

// pollute adds the edges of pe to the GPU's incident (opening, or merging
// incidents) and marks its victim polluted. It returns the incident.
func (p *Processor) pollute(t *engine.Task, g *gpu, pe pollution) *incident {
	src := reqNode(g, pe.src)
	var mid string
	switch {
	case pe.toLayer:
		mid = layerNode(g, pe.layer)
	case pe.block >= 0:
		mid = blkNode(g, pe.block)
	}
	var dst string
	if pe.victim != "" {
		dst = reqNode(g, pe.victim)
	}
	// The incidents these nodes belong to; the one with the earliest root
	// absorbs the others. What links:
	//   - the request whose bytes (or write) the edge is about: a fault's
	//     writer, or the last writer of residue; and the fault's source
	//     where it is another (a cancelled prefill a retry took as
	//     computed, pollution.rootSrc);
	//   - a block whose fault it is: handed out to two live owners, or
	//     read as residue; a read of another owner's bytes goes through
	//     such a block too. Not a block another fault's write landed in
	//     (a write into another request's block or slot, out of its
	//     layer): a read of those bytes is that writer's fault, a later
	//     read of other bytes there is not;
	//   - a victim only where it reads residue and is the writer of a
	//     fault itself (a write for one layer that landed in the next
	//     leaves the range it was for unwritten: reading it is that
	//     fault's doing); else two faults that meet in a request (a victim
	//     of one, the writer or a victim of the other) are two incidents;
	//   - not a layer node: every request on the GPU has every layer, so
	//     two faults whose writes land in one layer are two incidents
	//     unless a request or block joins them.
	// Content shared by prefix hash carries the pollution of the incident
	// that polluted its writer (carry.go).
	if pe.kind == braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED {
		if w := g.reqs[pe.src]; w != nil && w.polluted != 0 && w.incident != "" {
			return p.propagate(t, g, w, pe, src, mid, dst)
		}
	}
	links := [4]string{src}
	if pe.rootSrc != "" {
		links[3] = reqNode(g, pe.rootSrc) // the fault's source, whoever left the residue
	}
	residue := pe.kind == braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE && pe.victim != ""
	block := mid != "" && !pe.toLayer
	keepMid := block && (pe.blockFault || residue)
	if keepMid || block && pe.victim != "" && pe.kind == braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		links[1] = mid
	}
	if residue && g.nodes[dst] != nil {
		links[2] = dst // its node is a writer's: victims are not added
	}
	var inc *incident
	for _, n := range links {
		if o := g.nodes[n]; n != "" && o != nil && o != inc {
			if inc == nil {
				inc = o
			} else {
				inc = p.merge(t, inc, o)
			}
		}
	}
	if pe.kind == braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED && inc == nil {
		if w := g.reqs[pe.src]; w == nil || w.polluted == 0 {
			return nil
		}
	}
	if inc == nil {
		inc = p.openIncident(g, pe)
	} else if pe.srcAt < int64(inc.pb.Root.TimeUnixNano) && pe.kind != braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED {
		inc.pb.Root = p.rootOf(g, pe)
		inc.pb.Pattern = pe.kind
	}
	for i, n := range links {
		if n != "" && (i != 1 || keepMid) {
			inc.addNode(n)
		}
	}
	p.attach(t, g, inc, pe, src, mid, dst)
	return inc
}

// attach adds the edges of pe to inc and marks its victim polluted.
func (p *Processor) attach(t *engine.Task, g *gpu, inc *incident, pe pollution, src, mid, dst string) {
	if pe.rootSrc != "" && mid != "" {
		p.edge(t, g, inc, pe, reqNode(g, pe.rootSrc), mid) // its node joined inc in pollute
	}
	if mid != "" {
		p.edge(t, g, inc, pe, src, mid)
		if dst != "" {
			p.edge(t, g, inc, pe, mid, dst)
		}
	} else if dst != "" {
		p.edge(t, g, inc, pe, src, dst)
	}
	if pe.victim != "" {
		p.markPolluted(g, inc, pe)
	}
	at := pe.ev.Time
	inc.pb.FirstUnixNano = min(inc.pb.FirstUnixNano, uint64(at))
	inc.pb.LastUnixNano = max(inc.pb.LastUnixNano, uint64(at))
	p.markInc(inc)
	p.dirty(inc)
}

func (p *Processor) rootOf(g *gpu, pe pollution) *braidpb.RootCause {
	src := pe.src
	if pe.rootSrc != "" {
		src = pe.rootSrc
	}
	rc := &braidpb.RootCause{Node: reqNode(g, src), Kind: pe.kind, RequestId: src, Block: pe.block, Layer: int32(pe.layer),
		TimeUnixNano: uint64(pe.srcAt), Detail: pe.detail}
	if w := g.reqs[src]; w != nil && w.trace != ([16]byte{}) {
		rc.TraceId = append([]byte(nil), w.trace[:]...)
	}
	if pe.srcOrigin.Topic != "" {
		rc.Origin = &braidpb.Origin{Topic: pe.srcOrigin.Topic, Partition: pe.srcOrigin.Partition, Offset: pe.srcOrigin.Offset}
	}
	return rc
}

func (p *Processor) openIncident(g *gpu, pe pollution) *incident {
	src := pe.src
	if pe.rootSrc != "" {
		src = pe.rootSrc
	}
	id := incidentID(g, pe.kind, src, pe.block, pe.layer, pe.srcAt)
	inc := &incident{
		pb: &braidpb.Incident{Id: id, State: braidpb.IncidentState_INCIDENT_STATE_OPEN, Host: g.host, Gpu: g.id, Pattern: pe.kind,
			Root: p.rootOf(g, pe), FirstUnixNano: uint64(pe.ev.Time), LastUnixNano: uint64(pe.ev.Time)},
		g:        g,
		total:    &p.incBytes,
		edgeKeys: map[string]struct{}{},
		victims:  map[string]struct{}{},
		layers:   map[int64]*braidpb.LayerCount{},
	}
	inc.order = p.nextOrder
	inc.grow(incidentHead)
	p.nextOrder++
	p.open = append(p.open, inc)
	p.c.Incidents.Add(1)
	p.attachPending(inc)
	return inc
}

// merge folds the later-rooted of a and b into the other and returns the
// survivor; the absorbed one closes.
func (p *Processor) merge(t *engine.Task, a, b *incident) *incident {
	if rootBefore(b, a) {
		a, b = b, a
	}
	for _, n := range b.nodes {
		a.addNode(n)
	}
	for _, e := range b.pb.Edges {
		if a.addEdgeKey(edgeKey(e)) {
			a.addEdge(e)
		}
	}
	for _, v := range b.pb.Polluted {
		if _, ok := a.victims[v.RequestId]; !ok {
			a.victims[v.RequestId] = struct{}{}
			a.addVictim(v)
		}
		if r := a.g.reqs[v.RequestId]; r != nil && r.incident == b.pb.Id {
			r.incident = a.pb.Id
			p.markReq(a.g, r)
		}
	}
	for _, lc := range b.pb.Layers {
		x := a.layer(int64(lc.Layer))
		x.Hits += lc.Hits
		x.CorruptedReads += lc.CorruptedReads
	}
	for _, ev := range b.pb.Evidence {
		p.addEvidence(a, ev)
	}
	a.pb.EvidenceDropped += b.pb.EvidenceDropped
	a.pb.LayersDropped += b.pb.LayersDropped
	a.pb.FirstUnixNano = min(a.pb.FirstUnixNano, b.pb.FirstUnixNano)
	a.pb.LastUnixNano = max(a.pb.LastUnixNano, b.pb.LastUnixNano)
	p.markInc(a)
	p.dirty(a)
	b.merged = true
	b.nodes = nil
	p.close(t, b, p.wm)
	return a
}

func rootBefore(a, b *incident) bool {
	if a.pb.Root.TimeUnixNano != b.pb.Root.TimeUnixNano {
		return a.pb.Root.TimeUnixNano < b.pb.Root.TimeUnixNano
	}
	return a.pb.Id < b.pb.Id
}

func (p *Processor) edge(t *engine.Task, g *gpu, inc *incident, pe pollution, from, to string) {
	e := &braidpb.PollutionEdge{Source: from, Target: to, Kind: pe.kind, TimeUnixNano: uint64(pe.ev.Time), Host: g.host, Gpu: g.id,
		Block: pe.block, Layer: int32(pe.layer), SourceRequest: pe.src, TargetRequest: pe.victim, IncidentId: inc.pb.Id, Detail: pe.detail}
	k := edgeKey(e)
	if !inc.addEdgeKey(k) {
		return
	}
	if pe.lo >= 0 {
		e.Addr, e.Bytes = pe.lo, pe.hi-pe.lo
	}
	if w := g.reqs[pe.src]; w != nil && w.trace != ([16]byte{}) {
		e.SourceTraceId = append([]byte(nil), w.trace[:]...)
	}
	if pe.victim != "" {
		if v := g.reqs[pe.victim]; v != nil && v.trace != ([16]byte{}) {
			e.TargetTraceId = append([]byte(nil), v.trace[:]...)
		}
	}
	if pe.srcOrigin.Topic != "" && pe.srcOrigin != pe.ev.Origin {
		e.Evidence = append(e.Evidence, &braidpb.Origin{Topic: pe.srcOrigin.Topic, Partition: pe.srcOrigin.Partition, Offset: pe.srcOrigin.Offset})
	}
	if pe.ev.Origin.Topic != "" {
		e.Evidence = append(e.Evidence, &braidpb.Origin{Topic: pe.ev.Origin.Topic, Partition: pe.ev.Origin.Partition, Offset: pe.ev.Origin.Offset})
	}
	if len(inc.pb.Edges) < p.cfg.MaxIncidentEdges {
		inc.addEdge(e)
	} else {
		inc.pb.EdgesDropped++
	}
	p.c.Edges.Add(1)
	v, err := p.marshal(e, "pollution edge")
	if err != nil {
		return
	}
	key := []byte(from)
	t.Emit(&kgo.Record{Topic: p.cfg.PollutionTopic, Partition: otlp.HashPartition(key, p.cfg.Partitions), Key: key, Value: v})
}

func (p *Processor) markPolluted(g *gpu, inc *incident, pe pollution) {
	v := g.reqs[pe.victim]
	if v == nil {
		return
	}
	via := braidpb.PollutionVia_POLLUTION_VIA_DIRECT
	if pe.kind == braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED {
		via = braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED
	}
	idx := 0
	if pe.block >= 0 {
		idx = v.index(pe.block)
		if !slices.Contains(v.table, pe.block) && len(v.table) > 0 {
			// Read through a block it does not hold (padding through the
			// null block): its KV is polluted from where it is now, not
			// from its first block.
			idx = len(v.table) - 1
		}
	}
	if v.polluted == 0 {
		v.polluted, v.pollIdx, v.via, v.incident = pe.ev.Time, idx, uint8(via), inc.pb.Id
		p.c.Polluted.Add(1)
	} else {
		v.pollIdx = min(v.pollIdx, idx)
	}
	p.markReq(g, v)
	if _, ok := inc.victims[v.id]; ok {
		return
	}
	inc.victims[v.id] = struct{}{}
	pr := &braidpb.PollutedRequest{RequestId: v.id, Via: via, TimeUnixNano: uint64(pe.ev.Time), From: reqNode(g, pe.src)}
	if v.trace != ([16]byte{}) {
		pr.TraceId = append([]byte(nil), v.trace[:]...)
	}
	inc.addVictim(pr)
}

// marshal serializes an output record. Strings from input are valid UTF-8
// by then (Check, validString), so an error is not expected: it is counted
// in Unwritable and the record is not written; under the fail policy the
// call that met it returns it.
func (p *Processor) marshal(m proto.Message, what string) ([]byte, error) {
	var b []byte
	var err error
	if p.cfg.JSON {
		b, err = protojson.Marshal(m)
	} else {
		b, err = proto.MarshalOptions{Deterministic: true}.Marshal(m)
	}
	if err != nil {
		p.c.Unwritable.Add(1)
		err = fmt.Errorf("kvgraph: marshal %s: %w", what, err)
		if p.cfg.ErrorPolicy == PolicyFail && p.err == nil {
			p.err = err
		}
		return nil, err
	}
	return b, nil
}

// supporting handles a sanitizer or Xid line: it attaches to the open
// incidents of its GPU (or, without one, of its host) within the incident
// window, or waits for one to open.
func (p *Processor) supporting(ev *Event) {
	kind := "sanitizer"
	if ev.Op == OpXid {
		kind = "xid"
	}
	if !relevantLine(ev) {
		p.c.Unrelated.Add(1)
		return
	}
	text := ev.Body
	if len(text) > MaxEvidenceText {
		n := MaxEvidenceText
		for n > MaxEvidenceText-utf8.UTFMax && !utf8.RuneStart(text[n]) {
			n-- // do not cut a character
		}
		text = text[:n]
	}
	pe := &pendingEvidence{host: string(ev.Host), pb: &braidpb.Evidence{Kind: kind, TimeUnixNano: uint64(ev.Time), Text: validString(text)}}
	if ev.Origin.Topic != "" {
		pe.pb.Origin = &braidpb.Origin{Topic: ev.Origin.Topic, Partition: ev.Origin.Partition, Offset: ev.Origin.Offset}
	}
	pe.gpu, pe.index = string(ev.GPUUUID), ev.GPUIndex
	if !p.placeLine(ev, pe) {
		p.c.Unrelated.Add(1)
		return
	}
	attached := false
	for _, inc := range p.open {
		if p.matches(inc, pe) {
			p.addEvidence(inc, pe.pb)
			p.markInc(inc)
			p.dirty(inc)
			attached = true
		}
	}
	if !attached {
		if len(p.pending) >= p.cfg.MaxPendingEvidence && len(p.pending) > 0 {
			p.c.EvidenceDropped.Add(1) // the oldest goes
			p.pending[0] = nil
			p.pending = p.pending[1:]
		}
		p.pending = append(p.pending, pe)
		p.pendingChanged = true
	}
}

// relevantLine: an Xid that says the GPU faulted on memory (13 graphics
// engine exception, 31 MMU fault, 43 channel stopped after a fault) or a
// compute-sanitizer memcheck line may be evidence of KV-cache pollution;
// other Xids (63 row remapping, 48 ECC, 79 fallen off the bus, …) and
// racecheck reports (shared-memory hazards inside one kernel) are not.
func relevantLine(ev *Event) bool {
	if ev.Op == OpXid {
		switch ev.Xid {
		case 13, 31, 43:
			return true
		}
		return false
	}
	return !bytes.Contains(ev.Body, []byte("Race reported")) && !bytes.Contains(ev.Body, []byte("racecheck"))
}

// placeLine finds the GPU of a supporting line that names none on its
// resource (a kernel line from the host's log): the GPU whose PCI bus id
// the line names, learnt from lines that came with both; else the host's
// only GPU. A line carrying both teaches the mapping. It reports false for
// a line braid cannot place on a host with several GPUs.
func (p *Processor) placeLine(ev *Event, pe *pendingEvidence) bool {
	pci := xidPCI(ev.Body)
	if pe.gpu != "" {
		if pci != "" && len(p.pci) < maxPCI {
			if p.pci == nil {
				p.pci = map[string]string{}
			}
			p.pci[pe.host+"/"+pci] = pe.gpu
		}
		return true
	}
	if pe.index >= 0 {
		return true
	}
	if id, ok := p.pci[pe.host+"/"+pci]; ok && pci != "" {
		pe.gpu = id
		return true
	}
	var only *gpu
	n := 0
	for _, g := range p.gpus {
		if g.host == pe.host {
			only = g
			n++
		}
	}
	switch {
	case n == 0:
		return true // no GPU of the host known yet: matched by host
	case n == 1 && pci == "":
		pe.gpu, pe.index = only.id, only.index
		return true
	case n == 1:
		// One GPU known; the bus id may be another's that sends no KV
		// events: only a GPU the bus id was not learnt for takes it.
		for _, id := range p.pci {
			if id == only.id {
				return false
			}
		}
		pe.gpu, pe.index = only.id, only.index
		return true
	}
	return false
}

// maxPCI bounds the PCI bus ids learnt (host/bus → GPU uuid).
const maxPCI = 1 << 14

// xidPCI is the bus id of "NVRM: Xid (PCI:0000:3b:00): …", "" if none.
func xidPCI(b []byte) string {
	i := bytes.Index(b, []byte("(PCI:"))
	if i < 0 {
		return ""
	}
	rest := b[i+5:]
	j := bytes.IndexByte(rest, ')')
	if j <= 0 || j > 32 {
		return ""
	}
	return strings.ToLower(string(rest[:j]))
}

func (p *Processor) matches(inc *incident, pe *pendingEvidence) bool {
	if inc.pb.Host != pe.host || (pe.gpu != "" && pe.gpu != inc.pb.Gpu) || (pe.gpu == "" && pe.index >= 0 && pe.index != inc.g.index) {
		return false
	}
	if pe.pb.Kind == "sanitizer" && inc.pb.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB {
		// memcheck sees accesses outside every allocation: writes that
		// left their layer or the pool, not content mixed up inside it.
		return false
	}
	w := uint64(p.cfg.IncidentWindow)
	t := pe.pb.TimeUnixNano
	return t+w >= inc.pb.FirstUnixNano && t <= inc.pb.LastUnixNano+w
}

func (p *Processor) attachPending(inc *incident) {
	out := p.pending[:0]
	for _, pe := range p.pending {
		if p.matches(inc, pe) {
			p.addEvidence(inc, pe.pb)
			p.pendingChanged = true
			continue
		}
		out = append(out, pe)
	}
	clear(p.pending[len(out):])
	p.pending = out
}

func (p *Processor) dirty(inc *incident) {
	if !inc.dirty {
		inc.dirty = true
		p.dirtyIncs = append(p.dirtyIncs, inc)
	}
}

// close emits the final revision of inc and forgets it.
func (p *Processor) close(t *engine.Task, inc *incident, wm int64) {
	inc.closed = true
	inc.pb.State = braidpb.IncidentState_INCIDENT_STATE_CLOSED
	if inc.merged {
		inc.pb.Root.Detail += " (merged into another incident)"
	}
	p.emitIncident(t, inc, wm)
	p.remember(inc, wm)
	for n, o := range inc.g.nodes {
		if o == inc {
			delete(inc.g.nodes, n)
		}
	}
	p.open = slices.DeleteFunc(p.open, func(x *incident) bool { return x == inc })
	p.incBytes -= inc.bytes
	inc.total = nil
	p.deleted = append(p.deleted, incKey(nil, inc.pb.Id))
	lo, hi := incSegRange(inc.pb.Id)
	p.deletedRanges = append(p.deletedRanges, lo, hi)
	p.c.Closed.Add(1)
}

// timerSlice bounds the expiries of one OnWatermark call.
const timerSlice = 512

// Backlog implements engine.Backlogger.
func (p *Processor) Backlog() bool { return p.backlog }

// OnWatermark emits the incidents that changed, closes those that did not
// grow for IncidentWindow, drops supporting lines too old to attach, and
// forgets blocks and requests idle for BlockTTL — at most timerSlice of
// those per call (Backlog reports more).
func (p *Processor) OnWatermark(t *engine.Task, wm int64) error {
	p.wm = wm
	for _, inc := range p.dirtyIncs {
		if inc.dirty && !inc.closed {
			p.emitIncident(t, inc, wm)
		}
	}
	clear(p.dirtyIncs)
	p.dirtyIncs = p.dirtyIncs[:0]
	w := int64(p.cfg.IncidentWindow)
	var due []*incident
	for _, inc := range p.open {
		if int64(inc.pb.LastUnixNano)+w <= wm {
			due = append(due, inc)
		}
	}
	slices.SortFunc(due, func(a, b *incident) int {
		if a.pb.LastUnixNano != b.pb.LastUnixNano {
			return int(int64(a.pb.LastUnixNano) - int64(b.pb.LastUnixNano))
		}
		if a.pb.Id < b.pb.Id {
			return -1
		}
		return 1
	})
	for _, inc := range due {
		p.close(t, inc, wm)
	}
	n := len(p.pending)
	p.pending = slices.DeleteFunc(p.pending, func(pe *pendingEvidence) bool { return int64(pe.pb.TimeUnixNano)+w <= wm })
	if len(p.pending) != n {
		p.pendingChanged = true
	}
	err := p.expire(wm)
	p.expireClosed(wm)
	p.report()
	if err == nil {
		err = p.takeErr()
	}
	return err
}

func (p *Processor) expire(wm int64) error {
	p.backlog = false
	for fired := 0; len(p.timers) > 0 && p.timers[0].at <= wm; fired++ {
		if fired == timerSlice {
			p.backlog = true
			return nil
		}
		p.fire(heap.Pop(&p.timers).(timer), wm)
	}
	return nil
}

// fire handles a timer popped at event time wm: its block or request is
// forgotten when idle for BlockTTL by then, else rescheduled. It reports
// what it forgot: 'b', 'r' or 0.
func (p *Processor) fire(tm timer, wm int64) byte {
	ttl := int64(p.cfg.BlockTTL)
	g := tm.g
	var what byte
	if tm.b != nil {
		b := tm.b
		if g.blocks[b.id] != b || b.timerAt != tm.at {
			return 0
		}
		b.timerAt = 0
		if b.last+ttl > wm {
			p.scheduleBlock(g, b)
			return 0
		}
		delete(g.blocks, b.id)
		p.c.Blocks.Add(-1)
		p.addStateBytes(-b.size)
		p.deleted = append(p.deleted, blockKey(nil, g.id, b.id))
		what = 'b'
	} else {
		r := tm.r
		if g.reqs[r.id] != r || r.timerAt != tm.at {
			return 0
		}
		r.timerAt = 0
		if r.last+ttl > wm {
			p.scheduleReq(g, r)
			return 0
		}
		delete(g.reqs, r.id)
		p.addStateBytes(-r.size)
		p.deleted = append(p.deleted, reqKey(nil, g.id, r.id))
		what = 'r'
	}
	if len(g.blocks) == 0 && len(g.reqs) == 0 && len(g.nodes) == 0 && p.gpus[g.id] == g {
		delete(p.gpus, g.id)
		p.addStateBytes(-gpuBytes(g))
		p.deleted = append(p.deleted, gpuKey(nil, g.id))
	}
	return what
}

func (p *Processor) scheduleBlock(g *gpu, b *block) {
	if b.timerAt != 0 {
		return // fires, then reschedules
	}
	b.timerAt = b.last + int64(p.cfg.BlockTTL)
	heap.Push(&p.timers, timer{at: b.timerAt, g: g, b: b})
}

func (p *Processor) scheduleReq(g *gpu, r *request) {
	if r.timerAt != 0 {
		return
	}
	r.timerAt = r.last + int64(p.cfg.BlockTTL)
	heap.Push(&p.timers, timer{at: r.timerAt, g: g, r: r})
}

func (p *Processor) markBlock(g *gpu, b *block) {
	p.touchedBlocks = append(p.touchedBlocks, b)
	if !b.changed {
		b.changed = true
		p.changedBlocks = append(p.changedBlocks, blockRef{g, b})
	}
}

func (p *Processor) markReq(g *gpu, r *request) {
	p.touchedReqs = append(p.touchedReqs, r)
	if !r.changed {
		r.changed = true
		p.changedReqs = append(p.changedReqs, reqRef{g, r})
	}
}

func (p *Processor) markGPU(g *gpu) {
	if !g.changed {
		g.changed = true
		p.changedGPUs = append(p.changedGPUs, g)
	}
}

func (p *Processor) markInc(inc *incident) {
	if !inc.changed {
		inc.changed = true
		p.changedIncs = append(p.changedIncs, inc)
	}
}

type timer struct {
	at int64
	g  *gpu
	b  *block
	r  *request
}

// timerHeap orders expiries by time, GPU, then block or request, so that
// expiry order is deterministic.
type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.g.id != b.g.id {
		return a.g.id < b.g.id
	}
	if (a.b != nil) != (b.b != nil) {
		return a.b != nil
	}
	if a.b != nil {
		return a.b.id < b.b.id
	}
	return a.r.id < b.r.id
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return x
}
