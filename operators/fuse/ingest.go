package fuse

import (
	"encoding/binary"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
)

// ingest is the stage that reads the source topics. It decodes each OTLP
// message, cuts it into members and sends each to the stage it belongs to:
// KV-block event, sanitizer and Xid logs to the KV-cache stage; logs
// without a trace id that name a request id to the resolve stage; metric
// points without an exemplar to the resources sampler; every other member,
// grouped by trace id, to the fuse stage of its trace's task — in place
// when that is this task (the fast path), else through the repartition
// topic. A span that names a request id also declares it to the resolve
// stage. Its state is the scratch of one message. Used on the task's
// goroutine only.
type ingest struct {
	outputs
	stateless
	s         *Stage
	partition int32
	dec       *otlp.Decoder

	// The trace members of the message being processed, by trace id.
	groups  map[[16]byte]int
	ids     [][16]byte
	writers []chunkWriter
	key     []byte
	scratch []byte

	// declare: spans declare their request ids to the resolve stage; only
	// when some source has logs, the one thing those ids join.
	declare bool

	// The entry points of the stages it routes to.
	kv      kvRoute
	resolve requestRoute
	samples sampleRoute // nil when the resources stage is off
	fuse    func(t *engine.Task, id [16]byte, chunk []byte) error
}

// kvRoute is how ingest hands KV logs to the KV-cache stage (kvStage):
// per message, drop what a failed one left, route each, flush the
// records for other tasks.
type kvRoute interface {
	drop()
	route(t *engine.Task, it *otlp.Item, rec *kgo.Record) error
	flush(t *engine.Task) error
}

// requestRoute is how ingest hands the resolve stage (resolver) the logs
// that name only a request id and the spans' declarations, per message.
type requestRoute interface {
	startMessage()
	waitingLog(rid string, it *otlp.Item, sig otlp.Signal, rec *kgo.Record)
	routeRequest(t *engine.Task, rid string, tag byte, payload []byte) error
	flushMessage(t *engine.Task) error
}

// sampleRoute is how ingest hands metric points without an exemplar to
// the resources sampler (resourceSampler), per message.
type sampleRoute interface {
	sample(t *engine.Task, it *otlp.Item) bool
	flush(t *engine.Task)
}

// process implements stage: one message of source input.
func (in *ingest) process(t *engine.Task, rec *kgo.Record, input int) error {
	src := &in.cfg.Sources[input]
	in.c.Messages.Add(1)
	items, err := in.dec.Decode(src.Signal, src.Encoding, rec.Value)
	if in.s.probing(input) {
		in.s.probeDecode(input, rec.Value, err)
	}
	if err != nil {
		t.Touch(input)
		return in.reject(t, rec, stageIngest, err.Error())
	}
	in.c.Members.Add(int64(len(items)))
	in.c.RepairedUTF8.Add(int64(in.dec.Repaired()))
	recTime, checkSkew := rec.Timestamp.UnixNano(), !rec.Timestamp.IsZero()
	clear(in.groups)
	in.ids = in.ids[:0]
	in.kv.drop()
	in.resolve.startMessage()
	rids := in.cfg.RequestIDs
	for i := range items {
		it := &items[i]
		if size := memberSizeOf(it); size > in.maxMemberBytes() {
			if err := in.tooLarge(t, it, src.Signal, rec, size); err != nil {
				return err
			}
			continue
		}
		if checkSkew && it.Time > satAdd(recTime, int64(in.cfg.MaxClockSkew)) {
			in.c.Future.Add(1)
			if in.cfg.FuturePolicy != FutureRestamp {
				in.future(t, it, src.Signal, rec)
				continue
			}
			it.Time = recTime
		}
		t.Observe(input, it.Time)
		if src.Signal == otlp.SignalLogs && isKVLog(it.Payload) {
			if err := in.kv.route(t, it, rec); err != nil {
				return err
			}
			continue
		}
		if it.TraceID == ([16]byte{}) {
			if src.Signal == otlp.SignalLogs {
				if rids != nil {
					if rid, ok := rids.FromLog(it.Payload); ok && len(rid) <= maxRequestIDBytes {
						in.resolve.waitingLog(rid, it, src.Signal, rec)
						continue
					}
				}
				in.c.UnjoinedLogs.Add(1)
			} else if in.samples == nil || !in.samples.sample(t, it) {
				in.c.UnjoinedPoint.Add(1)
			}
			continue
		}
		if src.Signal == otlp.SignalSpans && rids != nil && in.declare {
			if rid, ok := rids.FromSpan(it.Payload); ok && len(rid) <= maxRequestIDBytes {
				v := append(in.scratch[:0], it.TraceID[:]...)
				v = binary.AppendVarint(v, it.Time)
				in.scratch = v
				if err := in.resolve.routeRequest(t, rid, tagDeclare, v); err != nil {
					return err
				}
			}
		}
		g, ok := in.groups[it.TraceID]
		if !ok {
			g = len(in.ids)
			in.groups[it.TraceID] = g
			in.ids = append(in.ids, it.TraceID)
			if g == len(in.writers) {
				in.writers = append(in.writers, chunkWriter{})
			}
			in.writers[g].reset(in.writers[g].buf[:0])
		}
		in.writers[g].appendItem(it, src.Signal, rec.Topic, rec.Partition, rec.Offset)
	}
	if in.samples != nil {
		in.samples.flush(t)
	}
	if err := in.kv.flush(t); err != nil {
		return err
	}
	if err := in.resolve.flushMessage(t); err != nil {
		return err
	}
	for g, id := range in.ids {
		in.key = otlp.AppendTraceIDHex(in.key[:0], id)
		q := otlp.HashPartition(in.key, in.cfg.Partitions)
		if q == in.partition {
			in.c.Local.Add(1)
			if err := in.fuse(t, id, in.writers[g].buf); err != nil {
				return err
			}
			continue
		}
		in.c.Repartitioned.Add(1)
		if err := in.emitMembers(t, in.cfg.RepartitionTopic, q, append([]byte(nil), in.key...), nil, in.writers[g].buf); err != nil {
			return err
		}
	}
	return nil
}

// memberSizeOf is the size of it's bytes in a member.
func memberSizeOf(it *otlp.Item) int {
	n := len(it.Payload) + len(it.Resource) + len(it.Scope)
	if it.Signal == otlp.SignalMetrics {
		n += len(it.Name) + len(it.MetricDescription) + len(it.MetricUnit)
	}
	return n
}

// tooLarge handles a member that no record could carry: the ingest error
// action, with the member alone (as a one-item OTLP message) as the
// dead-letter copy.
func (in *ingest) tooLarge(t *engine.Task, it *otlp.Item, sig otlp.Signal, rec *kgo.Record, size int) error {
	in.c.TooLarge.Add(1)
	cause := "member of " + strconv.Itoa(size) + " bytes exceeds the record limit of " + strconv.Itoa(in.maxMemberBytes()) + " bytes"
	if dlq, err := in.deadLetter(rec, stageIngest, cause); !dlq {
		return err
	}
	w := chunkWriter{}
	w.appendItem(it, sig, rec.Topic, rec.Partition, rec.Offset)
	return readMembers(w.buf, func(m *member) error {
		in.emitChunked(t, &kgo.Record{
			Topic:     in.cfg.DLQTopic,
			Partition: rec.Partition % in.cfg.DLQPartitions,
			Key:       rec.Key,
			Value:     oneItemMessage(m),
			Headers:   append(originHeaders(stageIngest+": "+cause, rec.Topic, rec.Partition, rec.Offset), kgo.RecordHeader{Key: "braid.signal", Value: []byte(sig.String())}),
		})
		return nil
	})
}

// future sends a member whose event time is too far ahead of its record's
// timestamp to the late topic (FutureLate).
func (in *ingest) future(t *engine.Task, it *otlp.Item, sig otlp.Signal, rec *kgo.Record) {
	in.c.Late.Add(1)
	w := chunkWriter{buf: in.scratch[:0]}
	w.appendItem(it, sig, rec.Topic, rec.Partition, rec.Offset)
	in.scratch = w.buf
	key := rec.Key
	if it.TraceID != ([16]byte{}) {
		key = otlp.AppendTraceIDHex(make([]byte, 0, 32), it.TraceID)
	}
	_ = readMembers(w.buf, func(m *member) error {
		in.sendLate(t, key, m, "future event time")
		return nil
	})
}
