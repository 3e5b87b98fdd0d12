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

// resourceSampler is the resources stage's ingest side in a task: metric
// points without an exemplar become samples of their resource's series,
// written to the resources topic once per identity per message (the
// resources table of every instance reads them). Used on the task's
// goroutine only.
type resourceSampler struct {
	outputs
	stateless
	// observe hands each sample on: to the derived LLM metrics and the
	// alerts stage.
	observe func(t *engine.Task, id *semconv.Identity, name string, v float64, at int64)

	samples map[semconv.Identity][]byte // the message's samples per identity
	ids     []semconv.Identity          // in the order they first appeared
	res     []semconv.KV                // attributes of resOf
	resOf   []byte                      // the resource last read, this message
	pattrs  []semconv.KV
}

// sample turns a metric point without an exemplar into a sample of
// its resource's series, buffered until the end of the message; false if
// its name is not in braid's vocabulary or it is a histogram (resource
// series are gauges, counters and info metrics).
func (r *resourceSampler) sample(t *engine.Task, it *otlp.Item) bool {
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
	if !sameBytes(it.Resource, r.resOf) {
		r.res = semconv.AppendAttrs(r.res[:0], it.Resource, semconv.ResourceAttrs)
		r.resOf = it.Resource
	}
	r.pattrs = semconv.AppendIdentityAttrs(r.pattrs[:0], it.Payload, semconv.NumberDataPointAttrs)
	id := semconv.IdentityOf(r.res, r.pattrs)
	b, seen := r.samples[id]
	if !seen {
		r.ids = append(r.ids, id)
		b = resources.AppendIdentity(nil, id)
	} else if len(b) > r.cfg.MaxRecordBytes/2 && len(b)+len(m.Name)+64 > r.room([]byte(id.String()), nil) {
		// One record per identity per message, unless that exceeds the
		// record limit: then the samples so far go now.
		r.emit(t, id, b)
		b = resources.AppendIdentity(nil, id)
	}
	r.samples[id] = resources.AppendSample(b, m.Name, m.Kind == semconv.Counter, resources.Sample{T: it.Time, V: v})
	r.observe(t, &id, m.Name, v, it.Time)
	r.c.ResourcePoint.Add(1)
	return true
}

// flush writes the message's samples to the resources topic, one
// record per identity, in the order identities first appeared.
func (r *resourceSampler) flush(t *engine.Task) {
	for _, id := range r.ids {
		r.emit(t, id, r.samples[id])
		delete(r.samples, id)
	}
	r.ids = r.ids[:0]
	r.resOf = nil // the message's bytes may be reused
}

func (r *resourceSampler) emit(t *engine.Task, id semconv.Identity, b []byte) {
	key := []byte(id.String())
	t.Emit(&kgo.Record{
		Topic:     r.cfg.ResourcesTopic,
		Partition: otlp.HashPartition(key, r.cfg.Partitions),
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
