package fuse

import (
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/otlp/wire"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/resources"
	"github.com/braidlabs/braid/operators/semconv"
)

// resourceSample turns a metric point without an exemplar into a sample of
// its resource's series, buffered until the end of the message; false if
// its name is not in braid's vocabulary or it is a histogram (resource
// series are gauges, counters and info metrics).
func (p *processor) resourceSample(t *engine.Task, it *otlp.Item) bool {
	if it.PointType != otlp.PointGauge && it.PointType != otlp.PointSum {
		return false
	}
	// NumberDataPoint: attributes = 7, as_double = 4, as_int = 6.
	m, ok := semconv.NormalizeMetric(string(it.Name), func(key string) (string, bool) {
		return semconv.Lookup(it.Payload, semconv.NumberDataPointAttrs, key)
	})
	if !ok || m.Kind == semconv.Histogram {
		return false
	}
	v, ok := numberValue(it.Payload)
	if !ok {
		return false
	}
	if m.Scale != 0 && m.Scale != 1 {
		v *= m.Scale
	}
	// The points of one ResourceMetrics share its resource bytes: read
	// its attributes once per resource, not once per point.
	if !sameBytes(it.Resource, p.sampleResOf) {
		p.sampleRes = semconv.AppendAttrs(p.sampleRes[:0], it.Resource, semconv.ResourceAttrs)
		p.sampleResOf = it.Resource
	}
	p.pattrs = semconv.AppendAttrs(p.pattrs[:0], it.Payload, semconv.NumberDataPointAttrs)
	id := semconv.IdentityOf(p.sampleRes, p.pattrs)
	b, seen := p.samples[id]
	if !seen {
		p.sampleIDs = append(p.sampleIDs, id)
		b = resources.AppendIdentity(nil, id)
	} else if len(b) > p.cfg.MaxRecordBytes/2 && len(b)+len(m.Name)+64 > p.room([]byte(id.String()), nil) {
		// One record per identity per message, unless that exceeds the
		// record limit: then the samples so far go now.
		p.emitSamples(t, id, b)
		b = resources.AppendIdentity(nil, id)
	}
	p.samples[id] = resources.AppendSample(b, m.Name, m.Kind == semconv.Counter, resources.Sample{T: it.Time, V: v})
	p.observeSample(t, &id, m.Name, v, it.Time)
	p.s.counters.ResourcePoint.Add(1)
	return true
}

// flushSamples writes the message's samples to the resources topic, one
// record per identity, in the order identities first appeared.
func (p *processor) flushSamples(t *engine.Task) {
	for _, id := range p.sampleIDs {
		p.emitSamples(t, id, p.samples[id])
		delete(p.samples, id)
	}
	p.sampleIDs = p.sampleIDs[:0]
	p.sampleResOf = nil // the message's bytes may be reused
}

func (p *processor) emitSamples(t *engine.Task, id semconv.Identity, b []byte) {
	key := []byte(id.String())
	t.Emit(&kgo.Record{
		Topic:     p.cfg.ResourcesTopic,
		Partition: otlp.HashPartition(key, p.cfg.Partitions),
		Key:       key,
		Value:     b,
	})
}

// sameBytes reports whether a and b are the same slice of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// numberValue reads NumberDataPoint's as_double (4) or as_int (6).
func numberValue(pt []byte) (v float64, ok bool) {
	for len(pt) > 0 {
		num, typ, _, x, rest := wire.Next(pt)
		if rest == nil {
			break
		}
		pt = rest
		switch {
		case num == 4 && typ == protowire.Fixed64Type:
			v, ok = math.Float64frombits(x), true
		case num == 6 && typ == protowire.Fixed64Type:
			v, ok = float64(int64(x)), true
		}
	}
	return v, ok
}
