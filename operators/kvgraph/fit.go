package kvgraph

import (
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

// incidentHeadroom is what an incident record's key, headers and batch
// overhead may take beyond its value, bytes.
const incidentHeadroom = 4096

// maxIncidentLayers caps the layer tallies of one incident (writes that
// leave the pool name layers beyond its count); more are counted in
// layers_dropped.
const maxIncidentLayers = 1024

// emitIncident writes the incident's next revision.
func (p *Processor) emitIncident(t *engine.Task, inc *incident, wm int64) {
	inc.dirty = false
	inc.pb.WatermarkUnixNano = 0 // unset while there is no watermark (MinInt64) or at the end of input (MaxInt64)
	if wm != math.MinInt64 && wm != math.MaxInt64 {
		inc.pb.WatermarkUnixNano = uint64(wm)
	}
	p.c.Revisions.Add(1)
	pb := inc.pb
	if p.cfg.Context != nil && inc.g != nil {
		pb.Resources = p.cfg.Context(inc.g.host, inc.g.id, inc.g.index, inc.g.instance, int64(pb.FirstUnixNano), int64(pb.LastUnixNano))
	}
	// The record holds what fits; the incident keeps all of it.
	polluted, edges, evidence, layers := pb.Polluted, pb.Edges, pb.Evidence, pb.Layers
	pd, ed, vd, ld := pb.PollutedDropped, pb.EdgesDropped, pb.EvidenceDropped, pb.LayersDropped
	p.fit(pb, p.cfg.MaxRecordBytes-incidentHeadroom)
	v, err := p.marshal(pb, "incident")
	pb.Polluted, pb.Edges, pb.Evidence, pb.Layers = polluted, edges, evidence, layers
	pb.PollutedDropped, pb.EdgesDropped, pb.EvidenceDropped, pb.LayersDropped = pd, ed, vd, ld
	pb.Resources = nil
	if err == nil {
		key := []byte(pb.Id)
		t.Emit(&kgo.Record{Topic: p.cfg.IncidentsTopic, Partition: otlp.HashPartition(key, p.cfg.Partitions), Key: key, Value: v})
	}
	if p.cfg.OnIncident != nil && (inc.notified < len(pb.Polluted) || pb.Revision == 0) {
		// Each polluted request once: a trace is tagged once per
		// incident, not once per revision. pb is the revision just
		// written (revision 0: the incident is new, given even before
		// it has a victim — it opens at the faulty write — so that
		// alerts and counts see every incident).
		all := pb.Polluted
		pb.Polluted = all[inc.notified:]
		if err := p.cfg.OnIncident(t, pb); err != nil && p.err == nil {
			p.err = err // returned by the Add or OnWatermark that emitted it
		}
		pb.Polluted = all
		inc.notified = len(all)
	}
	pb.Revision++
	p.markInc(inc)
}

// fit shortens pb's lists (polluted requests, edges, supporting lines,
// layers: the first of each stay) and its resource series until its
// serialized size is at most budget, adding what it left out to the
// *_dropped counts.
func (p *Processor) fit(pb *braidpb.Incident, budget int) {
	if proto.Size(pb) <= budget {
		return
	}
	p.c.Truncated.Add(1)
	polluted, edges, evidence, layers := pb.Polluted, pb.Edges, pb.Evidence, pb.Layers
	pb.Polluted, pb.Edges, pb.Evidence, pb.Layers = nil, nil, nil, nil
	// The resource context takes at most a quarter.
	if rc := pb.Resources; rc != nil && proto.Size(rc) > budget/4 {
		n, room := 0, budget/4
		for _, s := range rc.Series {
			sz := itemSize(s)
			if sz > room {
				break
			}
			room -= sz
			n++
		}
		pb.Resources = &braidpb.ResourceContext{Series: rc.Series[:n]}
	}
	room := budget - proto.Size(pb) - 4*(2+protowire.SizeVarint(1<<32)) // the dropped counts
	// Each list gets its share first, then what the others left.
	shares := [4]int{room * 4 / 10, room * 4 / 10, room / 10, room / 10}
	var kept [4]int
	size := func(list, i int) int {
		switch list {
		case 0:
			return itemSize(polluted[i])
		case 1:
			return itemSize(edges[i])
		case 2:
			return itemSize(evidence[i])
		}
		return itemSize(layers[i])
	}
	lens := [4]int{len(polluted), len(edges), len(evidence), len(layers)}
	for pass := 0; pass < 2; pass++ {
		for l := range lens {
			limit := shares[l]
			if pass == 1 {
				limit = room
			}
			for kept[l] < lens[l] {
				sz := size(l, kept[l])
				if sz > limit {
					break
				}
				limit -= sz
				room -= sz
				kept[l]++
			}
		}
	}
	pb.Polluted, pb.Edges, pb.Evidence, pb.Layers = polluted[:kept[0]], edges[:kept[1]], evidence[:kept[2]], layers[:kept[3]]
	pb.PollutedDropped += uint32(lens[0] - kept[0])
	pb.EdgesDropped += uint32(lens[1] - kept[1])
	pb.EvidenceDropped += uint32(lens[2] - kept[2])
	pb.LayersDropped += uint32(lens[3] - kept[3])
}

// itemSize is the bytes m takes as an element of a repeated field (< 16).
func itemSize(m proto.Message) int {
	n := proto.Size(m)
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// addEvidence attaches a supporting line to inc, up to
// MaxIncidentEvidence.
func (p *Processor) addEvidence(inc *incident, ev *braidpb.Evidence) {
	if len(inc.pb.Evidence) >= p.cfg.MaxIncidentEvidence {
		inc.pb.EvidenceDropped++
		p.c.EvidenceDropped.Add(1)
		return
	}
	inc.pb.Evidence = append(inc.pb.Evidence, ev)
	inc.grow(int64(len(ev.Text)) + 200)
}
