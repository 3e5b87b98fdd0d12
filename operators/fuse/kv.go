package fuse

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/semconv"
)

// The kvgraph stage runs in the same task (see operators/kvgraph): ingest
// sends every KV-block event log (attribute kv.op), compute-sanitizer line
// and NVRM Xid line to the task that owns hash(host.name) — one host's GPUs
// in one task, so propagation through a GPU's prefix cache is seen by one
// processor — in place or through Config.KVTopic. They are not trace
// members. When an incident names polluted requests, the trace of each gets
// an incident member (kindIncident) through the repartition topic, so its
// FusedTrace carries the incident id and FLAG_POLLUTED.

// isKVLog reports whether a serialized LogRecord is a KV-block event or a
// line of supporting evidence for the kvgraph stage.
func isKVLog(log []byte) bool {
	if _, ok := semconv.LookupValue(log, semconv.LogRecordAttrs, "kv.op"); ok {
		return true
	}
	body := logBodyString(log)
	return bytes.HasPrefix(body, []byte("=========")) || bytes.Contains(body, []byte("NVRM: Xid"))
}

// logBodyString returns LogRecord.body (5) when it is a string value.
func logBodyString(log []byte) (s []byte) {
	fields(log, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) bool {
		if num == 5 && typ == protowire.BytesType {
			fields(v, func(n protowire.Number, t protowire.Type, sv []byte, _ uint64) bool {
				if n == 1 && t == protowire.BytesType {
					s = sv
				}
				return true
			})
			return false
		}
		return true
	})
	return s
}

// routeKV sends a KV log to the kvgraph task of its host.
func (p *processor) routeKV(t *engine.Task, it *otlp.Item, rec *kgo.Record) error {
	p.s.counters.KVLogs.Add(1)
	host, _ := semconv.Lookup(it.Resource, semconv.ResourceAttrs, "host.name")
	q := otlp.HashPartition([]byte(host), p.cfg.Partitions)
	if q == p.partition {
		return p.kv.Add(t, it.Resource, it.Payload, it.Time, kvgraph.Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset})
	}
	w := chunkWriter{}
	w.appendItem(it, otlp.SignalLogs, rec.Topic, rec.Partition, rec.Offset)
	t.Emit(&kgo.Record{Topic: p.cfg.KVTopic, Partition: q, Key: []byte(host), Value: w.buf})
	return nil
}

// processKV hands KV logs routed here to the kvgraph processor.
func (p *processor) processKV(t *engine.Task, rec *kgo.Record) error {
	return readMembers(rec.Value, func(m *member) error {
		_, payload, origin := memberParts(m.body)
		topic, part, off := parseOrigin(origin)
		return p.kv.Add(t, m.resource, payload, m.time, kvgraph.Origin{Topic: topic, Partition: part, Offset: off})
	})
}

// onIncident tags the traces of an incident's polluted requests, each at
// the event time it was polluted (within its request, so the trace is
// revised, not reopened). It runs inside p.kv's calls, on the task's
// goroutine.
func (p *processor) onIncident(inc *braidpb.Incident) {
	t := p.task
	if t == nil {
		return
	}
	for _, v := range inc.Polluted {
		if len(v.TraceId) != 16 {
			continue
		}
		tr := [16]byte(v.TraceId)
		var body []byte
		body = protowire.AppendTag(body, 3, protowire.BytesType)
		body = protowire.AppendString(body, inc.Id)
		w := chunkWriter{}
		w.appendMember(&member{kind: kindIncident, time: int64(v.TimeUnixNano), body: body})
		p.key = otlp.AppendTraceIDHex(p.key[:0], tr)
		q := otlp.HashPartition(p.key, p.cfg.Partitions)
		p.s.counters.IncidentTags.Add(1)
		if q == p.partition {
			if err := p.add(t, tr, w.buf); err != nil {
				p.kvErr = err
			}
			continue
		}
		t.Emit(&kgo.Record{Topic: p.cfg.RepartitionTopic, Partition: q, Key: append([]byte(nil), p.key...), Value: w.buf})
	}
}
