package kvgraph

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

// A request polluted by an incident carries that incident's pollution on:
// whoever shares its content by prefix hash later is polluted through it
// (PROPAGATED), and belongs to that incident, not to whatever incident the
// request's node is part of now (it may be the writer of a fault of its
// own). When that incident has closed, a continuation opens: an incident
// with Continues set to the closed one's id and its root, remembered for
// BlockTTL of event time after the close (as long as a request it polluted
// may still be shared), at most maxClosed of them per task.

// maxClosed bounds the closed incidents a task remembers.
const maxClosed = 1024

// closedInc is what a task remembers of a closed incident.
type closedInc struct {
	id      string
	pattern braidpb.PollutionKind
	root    *braidpb.RootCause
	until   int64 // event time after which it is forgotten
	size    int64
}

var closedKey = []byte{prefix, 'c'}

// remember keeps the root of inc, which closes at watermark wm.
func (p *Processor) remember(inc *incident, wm int64) {
	if inc.merged || len(inc.victims) == 0 || inc.pb.Root == nil {
		return
	}
	root := inc.pb.Root
	if inc.pb.Continues != "" {
		if c := p.closed[inc.pb.Continues]; c != nil {
			root = c.root // not the detail a close appended to it
		}
	}
	p.keepClosed(&closedInc{id: inc.pb.Id, pattern: inc.pb.Pattern, root: proto.CloneOf(root), until: wm + int64(p.cfg.BlockTTL)})
}

func (p *Processor) keepClosed(c *closedInc) {
	if p.closed == nil {
		p.closed = map[string]*closedInc{}
	}
	if old := p.closed[c.id]; old != nil {
		p.forgetClosed(old)
	}
	c.size = int64(200 + 2*len(c.id) + proto.Size(c.root))
	p.closed[c.id] = c
	p.closedList = append(p.closedList, c)
	p.addStateBytes(c.size)
	p.closedChanged = true
	for len(p.closed) > maxClosed {
		p.forgetClosed(p.closedList[0])
	}
}

func (p *Processor) forgetClosed(c *closedInc) {
	if p.closed[c.id] == c {
		delete(p.closed, c.id)
		p.addStateBytes(-c.size)
	}
	for i, x := range p.closedList {
		if x == c {
			p.closedList = append(p.closedList[:i], p.closedList[i+1:]...)
			break
		}
	}
	p.closedChanged = true
}

// expireClosed forgets the closed incidents whose time is up at wm (the
// list is in order of closing, so of until).
func (p *Processor) expireClosed(wm int64) {
	for len(p.closedList) > 0 && p.closedList[0].until <= wm {
		p.forgetClosed(p.closedList[0])
	}
}

// carrier is the open incident of g that carries on the pollution of
// incident id: that incident, or its continuation; nil if none is open.
func (p *Processor) carrier(g *gpu, id string) *incident {
	var cont *incident
	for _, inc := range p.open {
		switch {
		case inc.g != g:
		case inc.pb.Id == id:
			return inc
		case cont == nil && inc.pb.Continues == id:
			cont = inc
		}
	}
	return cont
}

// propagate adds pe, pollution shared by prefix hash from w, to the
// incident that polluted w (or its continuation, opened if need be).
// Its nodes link nothing: the shared block is a prefix, not a fault's, and
// w and the victim are victims.
func (p *Processor) propagate(t *engine.Task, g *gpu, w *request, pe pollution, src, mid, dst string) *incident {
	inc := p.carrier(g, w.incident)
	if inc == nil {
		inc = p.openIncident(g, pe)
		inc.pb.Continues = w.incident
		if c := p.closed[w.incident]; c != nil {
			inc.pb.Root, inc.pb.Pattern = proto.CloneOf(c.root), c.pattern
		}
	}
	p.attach(t, g, inc, pe, src, mid, dst)
	return inc
}

// encodeClosed writes the closed incidents a task remembers (version 1).
func encodeClosed(b []byte, cs []*closedInc) ([]byte, error) {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for _, c := range cs {
		m, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.root)
		if err != nil {
			return nil, fmt.Errorf("kvgraph: encode closed incident: %w", err)
		}
		b = putStr(b, c.id)
		b = binary.AppendVarint(b, int64(c.pattern))
		b = binary.AppendVarint(b, c.until)
		b = putStr(b, string(m))
	}
	return b, nil
}

func decodeClosed(v []byte) ([]*closedInc, error) {
	if len(v) < 1 || v[0] != 1 {
		return nil, errCorrupt
	}
	d := dec{b: v[1:]}
	n := d.uvarint()
	var out []*closedInc
	for i := uint64(0); i < n && !d.err; i++ {
		c := &closedInc{id: d.str(), pattern: braidpb.PollutionKind(d.varint()), until: d.varint(), root: &braidpb.RootCause{}}
		m := d.str()
		if d.err {
			break
		}
		if err := proto.Unmarshal([]byte(m), c.root); err != nil {
			return nil, fmt.Errorf("kvgraph: decode closed incident: %w", err)
		}
		out = append(out, c)
	}
	return out, d.done()
}
