package kvgraph

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

// Keys, all under 'k' in the task's keyspace:
//
//	k b <gpu len> <gpu> <block, 8 bytes BE>   a block
//	k e                                       pending supporting lines
//	k g <gpu>                                 a GPU's pool geometry
//	k i <incident id>                         an open incident (head)
//	k j <id len> <id> <list> <segment, 4 BE>  items of an open incident
//	k r <gpu len> <gpu> <request id>          a request
const prefix = 'k'

func gpuKey(dst []byte, g string) []byte  { return append(append(dst, prefix, 'g'), g...) }
func incKey(dst []byte, id string) []byte { return append(append(dst, prefix, 'i'), id...) }

func blockKey(dst []byte, g string, id int64) []byte {
	dst = binary.AppendUvarint(append(dst, prefix, 'b'), uint64(len(g)))
	return binary.BigEndian.AppendUint64(append(dst, g...), uint64(id))
}

func reqKey(dst []byte, g, id string) []byte {
	dst = binary.AppendUvarint(append(dst, prefix, 'r'), uint64(len(g)))
	return append(append(dst, g...), id...)
}

var evidenceKey = []byte{prefix, 'e'}

// An open incident is its head (the Incident message without its lists,
// its order and counts) and its lists in segments of segItems items, so
// that no state value grows with the incident: with the bounds of Check an
// item is at most ~10 KiB (an edge), a segment well under 1 MB. Items are
// only appended: a checkpoint writes the head and the segments that got
// items.
const segItems = 64

// The lists of an incident.
const (
	listNodes = iota
	listEdgeKeys
	listPolluted
	listEdges
	listEvidence
	incLists
)

func incSegPrefix(dst []byte, id string) []byte {
	dst = binary.AppendUvarint(append(dst, prefix, 'j'), uint64(len(id)))
	return append(dst, id...)
}

func incSegKey(dst []byte, id string, list byte, seg int) []byte {
	return binary.BigEndian.AppendUint32(append(incSegPrefix(dst, id), list), uint32(seg))
}

// incSegRange is the key range of every segment of incident id.
func incSegRange(id string) (lo, hi []byte) {
	lo = incSegPrefix(nil, id)
	hi = append(incSegPrefix(nil, id), 0xff)
	return lo, hi
}

var errCorrupt = errors.New("kvgraph: corrupt state record")

// PrepareCheckpoint writes what changed since the last checkpoint under
// prefix 'k' of t.State.
func (p *Processor) PrepareCheckpoint(t *engine.Task) error {
	for _, k := range p.deleted {
		if err := t.State.Delete(k); err != nil {
			return fmt.Errorf("kvgraph: delete state: %w", err)
		}
	}
	clear(p.deleted)
	p.deleted = p.deleted[:0]
	for i := 0; i+1 < len(p.deletedRanges); i += 2 {
		if err := t.State.DeleteRange(p.deletedRanges[i], p.deletedRanges[i+1]); err != nil {
			return fmt.Errorf("kvgraph: delete state: %w", err)
		}
	}
	clear(p.deletedRanges)
	p.deletedRanges = p.deletedRanges[:0]
	for _, g := range p.changedGPUs {
		g.changed = false
		if p.gpus[g.id] != g {
			continue
		}
		p.buf = encodeGPU(p.buf[:0], g)
		if err := t.State.Set(gpuKey(p.key[:0], g.id), p.buf); err != nil {
			return fmt.Errorf("kvgraph: write gpu: %w", err)
		}
	}
	p.changedGPUs = p.changedGPUs[:0]
	for _, br := range p.changedBlocks {
		br.b.changed = false
		if p.gpus[br.g.id] != br.g || br.g.blocks[br.b.id] != br.b {
			continue
		}
		p.buf = encodeBlock(p.buf[:0], br.b)
		if err := t.State.Set(blockKey(p.key[:0], br.g.id, br.b.id), p.buf); err != nil {
			return fmt.Errorf("kvgraph: write block: %w", err)
		}
	}
	clear(p.changedBlocks)
	p.changedBlocks = p.changedBlocks[:0]
	for _, rr := range p.changedReqs {
		rr.r.changed = false
		if p.gpus[rr.g.id] != rr.g || rr.g.reqs[rr.r.id] != rr.r {
			continue
		}
		p.buf = encodeReq(p.buf[:0], rr.r)
		if err := t.State.Set(reqKey(p.key[:0], rr.g.id, rr.r.id), p.buf); err != nil {
			return fmt.Errorf("kvgraph: write request: %w", err)
		}
	}
	clear(p.changedReqs)
	p.changedReqs = p.changedReqs[:0]
	for _, inc := range p.changedIncs {
		inc.changed = false
		if inc.closed {
			continue
		}
		if err := p.writeIncident(t, inc); err != nil {
			return err
		}
	}
	clear(p.changedIncs)
	p.changedIncs = p.changedIncs[:0]
	if p.pendingChanged {
		p.pendingChanged = false
		b, err := encodePending(p.buf[:0], p.pending)
		for err == nil && len(b) > p.cfg.MaxRecordBytes-incidentHeadroom && len(p.pending) > 0 {
			// One state value: the oldest lines go until it fits.
			drop := max(1, len(p.pending)/8)
			p.c.EvidenceDropped.Add(int64(drop))
			clear(p.pending[:drop])
			p.pending = p.pending[drop:]
			b, err = encodePending(p.buf[:0], p.pending)
		}
		if err != nil {
			return err
		}
		p.buf = b
		if err := t.State.Set(evidenceKey, p.buf); err != nil {
			return fmt.Errorf("kvgraph: write evidence: %w", err)
		}
	}
	if p.closedChanged {
		b, err := encodeClosed(p.buf[:0], p.closedList)
		for err == nil && len(b) > p.cfg.MaxRecordBytes-incidentHeadroom && len(p.closedList) > 0 {
			// One state value: the oldest go until it fits.
			for range max(1, len(p.closedList)/8) {
				p.forgetClosed(p.closedList[0])
			}
			b, err = encodeClosed(p.buf[:0], p.closedList)
		}
		if err != nil {
			return err
		}
		p.buf = b
		p.closedChanged = false // forgetClosed above sets it
		if err := t.State.Set(closedKey, p.buf); err != nil {
			return fmt.Errorf("kvgraph: write closed incidents: %w", err)
		}
	}
	return nil
}

// Restore reloads the processor from t.State (prefix 'k'), dropping
// whatever it held in memory.
func (p *Processor) Restore(t *engine.Task) error {
	for _, g := range p.gpus {
		p.c.Blocks.Add(-int64(len(g.blocks)))
	}
	p.gpus = map[string]*gpu{}
	p.open = nil
	p.pending = nil
	p.pendingChanged = false
	p.closed, p.closedList, p.closedChanged = nil, nil, false
	p.timers = p.timers[:0]
	p.backlog = false
	p.changedBlocks, p.changedReqs, p.changedGPUs, p.changedIncs = p.changedBlocks[:0], p.changedReqs[:0], p.changedGPUs[:0], p.changedIncs[:0]
	p.deleted, p.deletedRanges, p.dirtyIncs = p.deleted[:0], p.deletedRanges[:0], p.dirtyIncs[:0]
	p.touchedBlocks, p.touchedReqs = p.touchedBlocks[:0], p.touchedReqs[:0]
	p.wm = t.Watermark()

	if err := p.iter(t, 'g', func(k, v []byte) error {
		g := newGPU(string(k[2:]), "")
		p.gpus[g.id] = g
		return decodeGPU(v, g)
	}); err != nil {
		return err
	}
	gpuOf := func(k []byte) (*gpu, []byte, error) {
		n, m := binary.Uvarint(k[2:])
		if m <= 0 || uint64(len(k)-2-m) < n {
			return nil, nil, errCorrupt
		}
		rest := k[2+m:]
		g := p.gpus[string(rest[:n])]
		if g == nil {
			return nil, nil, fmt.Errorf("kvgraph: state of unknown gpu %q", rest[:n])
		}
		return g, rest[n:], nil
	}
	if err := p.iter(t, 'b', func(k, v []byte) error {
		g, rest, err := gpuOf(k)
		if err != nil {
			return err
		}
		if len(rest) != 8 {
			return errCorrupt
		}
		b := &block{id: int64(binary.BigEndian.Uint64(rest))}
		if err := decodeBlock(v, b); err != nil {
			return err
		}
		g.blocks[b.id] = b
		p.c.Blocks.Add(1)
		p.scheduleBlock(g, b)
		return nil
	}); err != nil {
		return err
	}
	if err := p.iter(t, 'r', func(k, v []byte) error {
		g, rest, err := gpuOf(k)
		if err != nil {
			return err
		}
		r := &request{id: string(rest)}
		if err := decodeReq(v, r); err != nil {
			return err
		}
		g.reqs[r.id] = r
		p.scheduleReq(g, r)
		return nil
	}); err != nil {
		return err
	}
	incs := map[string]*incident{}
	var want map[*incident][incLists]int
	if err := p.iter(t, 'i', func(k, v []byte) error {
		inc, counts, err := decodeIncident(v, p.gpus)
		if err != nil {
			return err
		}
		p.open = append(p.open, inc)
		incs[inc.pb.Id] = inc
		if counts != nil {
			if want == nil {
				want = map[*incident][incLists]int{}
			}
			want[inc] = *counts
		}
		if inc.dirty {
			p.dirtyIncs = append(p.dirtyIncs, inc)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := p.iter(t, 'j', func(k, v []byte) error {
		n, m := binary.Uvarint(k[2:])
		if m <= 0 || uint64(len(k)-2-m) != n+5 {
			return errCorrupt
		}
		inc := incs[string(k[2+m:2+m+int(n)])]
		if inc == nil {
			return nil // of an incident closed without its segments deleted: none
		}
		return decodeSegment(v, inc, k[2+m+int(n)])
	}); err != nil {
		return err
	}
	for inc, counts := range want {
		got := inc.counts()
		if got != counts {
			return fmt.Errorf("kvgraph: incident %s: state holds %v items, its head says %v: %w", inc.pb.Id, got, counts, errCorrupt)
		}
		inc.persisted = got
		for _, v := range inc.pb.Polluted {
			inc.victims[v.RequestId] = struct{}{}
		}
	}
	slices.SortFunc(p.open, func(a, b *incident) int {
		if a.order != b.order {
			return int(a.order - b.order)
		}
		return 0
	})
	for _, inc := range p.open {
		if inc.order >= p.nextOrder {
			p.nextOrder = inc.order + 1
		}
	}
	v, ok, err := t.State.Get(nil, closedKey)
	if err != nil {
		return err
	}
	if ok {
		cs, err := decodeClosed(v)
		if err != nil {
			return err
		}
		for _, c := range cs {
			p.keepClosed(c)
		}
		p.closedChanged = false
	}
	p.restoreSizes()
	v, ok, err = t.State.Get(nil, evidenceKey)
	if err != nil {
		return err
	}
	if ok {
		if p.pending, err = decodePending(v); err != nil {
			return err
		}
	}
	return nil
}

func (p *Processor) iter(t *engine.Task, kind byte, f func(k, v []byte) error) error {
	it, err := t.State.Iter([]byte{prefix, kind}, []byte{prefix, kind + 1})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := f(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// enc/dec: varints and length-prefixed strings.

func putStr(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }

type dec struct {
	b   []byte
	err bool
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string {
	n := d.uvarint()
	if d.err || uint64(len(d.b)) < n {
		d.err = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) raw(n int) []byte {
	if d.err || len(d.b) < n {
		d.err = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) done() error {
	if d.err {
		return errCorrupt
	}
	return nil
}

func encodeGPU(b []byte, g *gpu) []byte {
	b = append(b, 1)
	b = putStr(b, g.host)
	for _, v := range []int64{g.index, g.layerSize, g.layers, g.bbLo, g.bbHi, g.bbAttr} {
		b = binary.AppendVarint(b, v)
	}
	b = append(b, boolByte(g.lossy)) // absent in records of older versions
	return putStr(b, g.instance)     // absent in records of older versions
}

func decodeGPU(v []byte, g *gpu) error {
	if len(v) < 1 || v[0] != 1 {
		return errCorrupt
	}
	d := dec{b: v[1:]}
	g.host = d.str()
	for _, p := range []*int64{&g.index, &g.layerSize, &g.layers, &g.bbLo, &g.bbHi, &g.bbAttr} {
		*p = d.varint()
	}
	if g.bbHi == 0 {
		g.bbHi = math.MaxInt64
	}
	if x := d.b; !d.err && len(x) > 0 {
		g.lossy = x[0] == 1
		d.b = x[1:]
		if len(d.b) > 0 {
			g.instance = d.str()
		}
	}
	return d.done()
}

func encodeBlock(b []byte, bl *block) []byte {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(bl.owners)))
	for _, o := range bl.owners {
		b = putStr(b, o.req)
		b = binary.AppendVarint(b, o.at)
		b = append(b, boolByte(o.shared)|boolByte(o.wrote)<<1)
	}
	b = binary.BigEndian.AppendUint64(b, bl.hash)
	b = append(b, boolByte(bl.hasHash))
	b = putStr(b, bl.hashWriter)
	b = putStr(b, bl.base)
	b = binary.AppendVarint(b, bl.baseAt)
	b = append(b, boolByte(bl.baseTaint))
	b = binary.AppendVarint(b, bl.last)
	b = putStr(b, bl.lastFreed)
	b = putStr(b, bl.doubleFree)
	b = binary.AppendVarint(b, bl.doubleFreeAt)
	b = binary.AppendUvarint(b, uint64(len(bl.layers)))
	for _, ls := range bl.layers {
		b = binary.AppendVarint(b, ls.layer)
		b = binary.AppendUvarint(b, uint64(len(ls.spans)))
		for _, s := range ls.spans {
			b = binary.AppendVarint(b, s.lo)
			b = binary.AppendVarint(b, s.hi)
			b = putStr(b, s.writer)
			b = binary.AppendVarint(b, s.at)
			b = append(b, s.kind, boolByte(s.taint))
			b = putStr(b, s.origin.Topic)
			b = binary.AppendVarint(b, int64(s.origin.Partition))
			b = binary.AppendVarint(b, s.origin.Offset)
		}
	}
	return append(b, boolByte(bl.untracked)) // absent in records of older versions
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func decodeBlock(v []byte, bl *block) error {
	if len(v) < 1 || v[0] != 1 {
		return errCorrupt
	}
	d := dec{b: v[1:]}
	n := d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		o := owner{req: d.str(), at: d.varint()}
		if x := d.raw(1); x != nil {
			o.shared, o.wrote = x[0]&1 != 0, x[0]&2 != 0
		}
		bl.owners = append(bl.owners, o)
	}
	if h := d.raw(8); h != nil {
		bl.hash = binary.BigEndian.Uint64(h)
	}
	if x := d.raw(1); x != nil {
		bl.hasHash = x[0] == 1
	}
	bl.hashWriter = d.str()
	bl.base = d.str()
	bl.baseAt = d.varint()
	if x := d.raw(1); x != nil {
		bl.baseTaint = x[0] == 1
	}
	bl.last = d.varint()
	bl.lastFreed = d.str()
	bl.doubleFree = d.str()
	bl.doubleFreeAt = d.varint()
	nl := d.uvarint()
	for i := uint64(0); i < nl && !d.err; i++ {
		ls := layerSpans{layer: d.varint()}
		ns := d.uvarint()
		for j := uint64(0); j < ns && !d.err; j++ {
			s := span{lo: d.varint(), hi: d.varint(), writer: d.str(), at: d.varint()}
			if x := d.raw(2); x != nil {
				s.kind, s.taint = x[0], x[1] == 1
			}
			s.origin.Topic = d.str()
			s.origin.Partition = int32(d.varint())
			s.origin.Offset = d.varint()
			ls.spans = append(ls.spans, s)
		}
		bl.layers = append(bl.layers, ls)
	}
	if x := d.b; !d.err && len(x) > 0 {
		bl.untracked = x[0] == 1
	}
	return d.done()
}

func encodeReq(b []byte, r *request) []byte {
	b = append(b, 1)
	b = append(b, r.trace[:]...)
	b = binary.AppendVarint(b, r.polluted)
	b = append(b, r.via)
	b = putStr(b, r.incident)
	b = binary.AppendVarint(b, r.last)
	b = binary.AppendVarint(b, int64(r.pollIdx))
	b = binary.AppendUvarint(b, uint64(len(r.table)))
	for _, x := range r.table {
		b = binary.AppendVarint(b, x)
	}
	b = binary.AppendUvarint(b, uint64(len(r.hashes)))
	for _, x := range r.hashes {
		b = binary.BigEndian.AppendUint64(b, x)
	}
	if r.partAt != 0 { // optional: state written before it has none
		b = binary.AppendVarint(b, r.partAt)
		b = binary.AppendVarint(b, r.partLo)
		b = binary.AppendVarint(b, r.partHi)
		b = binary.AppendVarint(b, r.partBytes)
	}
	return b
}

func decodeReq(v []byte, r *request) error {
	if len(v) < 1 || v[0] != 1 {
		return errCorrupt
	}
	d := dec{b: v[1:]}
	copy(r.trace[:], d.raw(16))
	r.polluted = d.varint()
	if x := d.raw(1); x != nil {
		r.via = x[0]
	}
	r.incident = d.str()
	r.last = d.varint()
	r.pollIdx = int(d.varint())
	n := d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		r.table = append(r.table, d.varint())
	}
	n = d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		if x := d.raw(8); x != nil {
			r.hashes = append(r.hashes, binary.BigEndian.Uint64(x))
		}
	}
	if !d.err && len(d.b) > 0 {
		r.partAt, r.partLo, r.partHi, r.partBytes = d.varint(), d.varint(), d.varint(), d.varint()
	}
	return d.done()
}

// counts is the length of each of inc's lists.
func (inc *incident) counts() [incLists]int {
	return [incLists]int{len(inc.nodes), len(inc.keyList), len(inc.pb.Polluted), len(inc.pb.Edges), len(inc.pb.Evidence)}
}

// writeIncident writes inc's head and the segments of its lists that got
// items since the last checkpoint.
func (p *Processor) writeIncident(t *engine.Task, inc *incident) error {
	counts := inc.counts()
	b, err := encodeIncidentHead(p.buf[:0], inc, counts)
	if err != nil {
		return err
	}
	p.buf = b
	if err := t.State.Set(incKey(p.key[:0], inc.pb.Id), p.buf); err != nil {
		return fmt.Errorf("kvgraph: write incident: %w", err)
	}
	for l := range incLists {
		for seg := inc.persisted[l] / segItems; seg*segItems < counts[l]; seg++ {
			b, err := encodeSegment(p.buf[:0], inc, l, seg*segItems, min(counts[l], (seg+1)*segItems))
			if err != nil {
				return err
			}
			p.buf = b
			if err := t.State.Set(incSegKey(p.key[:0], inc.pb.Id, byte(l), seg), p.buf); err != nil {
				return fmt.Errorf("kvgraph: write incident: %w", err)
			}
		}
		inc.persisted[l] = counts[l]
	}
	return nil
}

// An incident's head (version 2): its Incident message without the
// polluted requests, edges and evidence (revision = the next one to emit),
// its creation order and dirty flag, the length of each list and how many
// polluted requests OnIncident was given.
func encodeIncidentHead(b []byte, inc *incident, counts [incLists]int) ([]byte, error) {
	b = append(b, 2)
	pb := inc.pb
	polluted, edges, evidence := pb.Polluted, pb.Edges, pb.Evidence
	pb.Polluted, pb.Edges, pb.Evidence = nil, nil, nil
	m, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	pb.Polluted, pb.Edges, pb.Evidence = polluted, edges, evidence
	if err != nil {
		return nil, fmt.Errorf("kvgraph: encode incident: %w", err)
	}
	b = putStr(b, string(m))
	b = binary.AppendVarint(b, inc.order)
	b = append(b, boolByte(inc.dirty))
	for _, n := range counts {
		b = binary.AppendUvarint(b, uint64(n))
	}
	return binary.AppendUvarint(b, uint64(inc.notified)), nil
}

// encodeSegment writes items [from, to) of list l of inc.
func encodeSegment(b []byte, inc *incident, l, from, to int) ([]byte, error) {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(to-from))
	for i := from; i < to; i++ {
		var m proto.Message
		switch l {
		case listNodes:
			b = putStr(b, inc.nodes[i])
			continue
		case listEdgeKeys:
			b = putStr(b, inc.keyList[i])
			continue
		case listPolluted:
			m = inc.pb.Polluted[i]
		case listEdges:
			m = inc.pb.Edges[i]
		case listEvidence:
			m = inc.pb.Evidence[i]
		}
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("kvgraph: encode incident: %w", err)
		}
		b = putStr(b, string(v))
	}
	return b, nil
}

// decodeSegment appends the items of a segment of list l to inc.
func decodeSegment(v []byte, inc *incident, l byte) error {
	if len(v) < 1 || v[0] != 1 || l >= incLists {
		return errCorrupt
	}
	d := dec{b: v[1:]}
	n := d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		s := d.str()
		if d.err {
			break
		}
		var err error
		switch l {
		case listNodes:
			inc.addNode(s)
		case listEdgeKeys:
			inc.addEdgeKey(s)
		case listPolluted:
			x := &braidpb.PollutedRequest{}
			err = proto.Unmarshal([]byte(s), x)
			inc.addVictim(x)
		case listEdges:
			x := &braidpb.PollutionEdge{}
			err = proto.Unmarshal([]byte(s), x)
			inc.addEdge(x)
		case listEvidence:
			x := &braidpb.Evidence{}
			err = proto.Unmarshal([]byte(s), x)
			inc.pb.Evidence = append(inc.pb.Evidence, x)
			inc.grow(int64(len(x.Text)) + 200)
		}
		if err != nil {
			return fmt.Errorf("kvgraph: decode incident: %w", err)
		}
	}
	return d.done()
}

// decodeIncident reads an incident's head; counts is the length of its
// lists, nil for a version 1 record (the whole incident in one value, as
// written before segments).
func decodeIncident(v []byte, gpus map[string]*gpu) (*incident, *[incLists]int, error) {
	if len(v) < 1 || (v[0] != 1 && v[0] != 2) {
		return nil, nil, errCorrupt
	}
	version := v[0]
	d := dec{b: v[1:]}
	m := d.str()
	pb := &braidpb.Incident{}
	if d.err {
		return nil, nil, errCorrupt
	}
	if err := proto.Unmarshal([]byte(m), pb); err != nil {
		return nil, nil, fmt.Errorf("kvgraph: decode incident: %w", err)
	}
	g := gpus[pb.Gpu]
	if g == nil {
		g = newGPU(pb.Gpu, pb.Host)
		gpus[g.id] = g
	}
	inc := &incident{pb: pb, g: g, edgeKeys: map[string]struct{}{}, victims: map[string]struct{}{}, layers: map[int64]*braidpb.LayerCount{}}
	inc.order = d.varint()
	if x := d.raw(1); x != nil {
		inc.dirty = x[0] == 1
	}
	for _, lc := range pb.Layers {
		inc.layers[int64(lc.Layer)] = lc
	}
	if version == 2 {
		var counts [incLists]int
		for l := range counts {
			counts[l] = int(d.uvarint())
		}
		inc.notified = int(d.uvarint())
		return inc, &counts, d.done()
	}
	n := d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		inc.addNode(d.str())
	}
	n = d.uvarint()
	for i := uint64(0); i < n && !d.err; i++ {
		inc.addEdgeKey(d.str())
	}
	for _, v := range pb.Polluted {
		inc.victims[v.RequestId] = struct{}{}
	}
	return inc, nil, d.done()
}

func encodePending(b []byte, ps []*pendingEvidence) ([]byte, error) {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, pe := range ps {
		m, err := proto.MarshalOptions{Deterministic: true}.Marshal(pe.pb)
		if err != nil {
			return nil, fmt.Errorf("kvgraph: encode evidence: %w", err)
		}
		b = putStr(b, pe.host)
		b = putStr(b, pe.gpu)
		b = binary.AppendVarint(b, pe.index)
		b = putStr(b, string(m))
	}
	return b, nil
}

func decodePending(v []byte) ([]*pendingEvidence, error) {
	if len(v) < 1 || v[0] != 1 {
		return nil, errCorrupt
	}
	d := dec{b: v[1:]}
	n := d.uvarint()
	var out []*pendingEvidence
	for i := uint64(0); i < n && !d.err; i++ {
		pe := &pendingEvidence{host: d.str(), gpu: d.str(), index: d.varint(), pb: &braidpb.Evidence{}}
		m := d.str()
		if d.err {
			break
		}
		if err := proto.Unmarshal([]byte(m), pe.pb); err != nil {
			return nil, fmt.Errorf("kvgraph: decode evidence: %w", err)
		}
		out = append(out, pe)
	}
	return out, d.done()
}
