package fuse

import (
	"fmt"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/engine"
)

// Nothing in the input may stop the job: a record a stage cannot handle is
// dead-lettered, skipped or fails the job as Config.ErrorPolicy says, and
// every record the stage writes fits Config.MaxRecordBytes.

// Stage names, the prefix of braid.reason.
const (
	stageIngest  = "ingest"
	stageResolve = "resolve"
	stageFuse    = "fuse"
)

// outputs are a task's writes of what a stage cannot pass on — to the
// dead-letter topic (reject) and the late topic (sendLate) — and of
// members within the record limit (emitMembers, emitChunked): the same
// for every stage of the task, reading only the stage's configuration and
// counting in its counters.
type outputs struct {
	cfg *Config
	c   *Counters
}

// policy returns the error action of stage.
func (o *outputs) policy(stage string) OnError {
	switch stage {
	case stageIngest:
		return o.cfg.ErrorPolicy.Ingest
	case stageResolve:
		return o.cfg.ErrorPolicy.Resolve
	default:
		return o.cfg.ErrorPolicy.Fuse
	}
}

// reject applies stage's error action to rec, which the stage cannot
// handle because of cause: the dead-letter copy is rec unchanged (cut into
// chunks if it is too large), with braid.reason "<stage>: <cause>".
func (o *outputs) reject(t *engine.Task, rec *kgo.Record, stage, cause string) error {
	if dlq, err := o.deadLetter(rec, stage, cause); !dlq {
		return err
	}
	o.emitChunked(t, &kgo.Record{
		Topic:     o.cfg.DLQTopic,
		Partition: rec.Partition % o.cfg.DLQPartitions,
		Key:       rec.Key,
		Value:     rec.Value,
		Headers:   originHeaders(stage+": "+cause, rec.Topic, rec.Partition, rec.Offset),
	})
	return nil
}

// deadLetter applies stage's error action to what the stage cannot
// handle in rec because of cause, but for writing the dead-letter copy:
// skip counts it, fail returns the error, and dead_letter counts it and
// reports that the caller writes the copy.
func (o *outputs) deadLetter(rec *kgo.Record, stage, cause string) (bool, error) {
	switch o.policy(stage) {
	case Skip:
		o.c.Skipped.Add(1)
		return false, nil
	case Fail:
		return false, fmt.Errorf("fuse: %s: %s (topic %s, partition %d, offset %d)", stage, cause, rec.Topic, rec.Partition, rec.Offset)
	}
	o.c.DLQ.Add(1)
	return true, nil
}

func originHeaders(reason, topic string, partition int32, offset int64) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "braid.reason", Value: []byte(reason)},
		{Key: "braid.topic", Value: []byte(topic)},
		{Key: "braid.partition", Value: strconv.AppendInt(nil, int64(partition), 10)},
		{Key: "braid.offset", Value: strconv.AppendInt(nil, offset, 10)},
	}
}

// maxKeyBytes bounds the key of a late or dead-letter copy.
const maxKeyBytes = 4096

// maxRequestIDBytes bounds a request id: a longer one is not used for
// joins (the log counts as unjoined), so that resolve records and their
// keys stay small.
const maxRequestIDBytes = 512

// recordOverhead is what a record's value shares the limit with besides
// its key and headers (Kafka's record framing).
const recordOverhead = 64

// room returns how many value bytes a record with key and headers may
// carry.
func (o *outputs) room(key []byte, headers []kgo.RecordHeader) int {
	n := o.cfg.MaxRecordBytes - len(key) - recordOverhead
	for _, h := range headers {
		n -= len(h.Key) + len(h.Value) + 8
	}
	return n
}

// emitChunked emits r, or — when its value does not fit MaxRecordBytes —
// consecutive records with the same key, topic and partition whose values
// concatenate to r's, with headers braid.chunk (0-based index) and
// braid.chunks (count) added. A reader reassembles them in offset order.
func (o *outputs) emitChunked(t *engine.Task, r *kgo.Record) {
	if len(r.Key) > maxKeyBytes {
		// Only an input record's key can be this long: its copy keeps the
		// first maxKeyBytes.
		r.Key = r.Key[:maxKeyBytes]
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "braid.key-truncated", Value: []byte("true")})
	}
	room := max(o.room(r.Key, r.Headers)-64, 1024) // less the chunk headers
	if len(r.Value) <= room {
		t.Emit(r)
		return
	}
	n := (len(r.Value) + room - 1) / room
	o.c.Chunked.Add(1)
	for i := range n {
		v := r.Value[i*room : min((i+1)*room, len(r.Value))]
		h := append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: "braid.chunk", Value: strconv.AppendInt(nil, int64(i), 10)},
			kgo.RecordHeader{Key: "braid.chunks", Value: strconv.AppendInt(nil, int64(n), 10)})
		t.Emit(&kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: v, Headers: h})
	}
}

func (o *outputs) emitMembers(t *engine.Task, topic string, partition int32, key, prefix, chunk []byte) error {
	room := o.room(key, nil) - len(prefix)
	if len(chunk) <= room {
		v := make([]byte, 0, len(prefix)+len(chunk))
		t.Emit(&kgo.Record{Topic: topic, Partition: partition, Key: key, Value: append(append(v, prefix...), chunk...)})
		return nil
	}
	o.c.Split.Add(1)
	w := chunkWriter{buf: append([]byte(nil), prefix...)}
	flush := func() {
		if w.n > 0 {
			t.Emit(&kgo.Record{Topic: topic, Partition: partition, Key: key, Value: w.buf})
		}
		w.reset(append([]byte(nil), prefix...))
	}
	err := readMembers(chunk, func(m *member) error {
		if w.n > 0 && len(w.buf)+memberBound(m) > room+len(prefix) {
			flush()
		}
		w.appendMember(m)
		return nil
	})
	if err != nil {
		return err
	}
	flush()
	return nil
}

// memberBound is the most bytes m takes in a chunk.
func memberBound(m *member) int { return 1 + 10 + 10 + len(m.resource) + 10 + len(m.body) }

// maxMemberBytes is the largest member (body and resource) ingest accepts:
// one must fit a record with its framing and a fused trace part's header.
func (o *outputs) maxMemberBytes() int { return o.cfg.MaxRecordBytes - 1024 }

// satAdd returns a+b, saturated at the int64 range (b ≥ 0).
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// knownTime reports whether watermark wm is a time, not the engine's
// "none yet" (MinInt64) or "end of input" (MaxInt64): output leaves such a
// field unset instead of writing the sentinel.
func knownTime(wm int64) bool { return wm != math.MinInt64 && wm != math.MaxInt64 }

// isLate reports whether event time ts is beyond allowed lateness at
// watermark wm, without overflow at the ends of the time range.
func (o *outputs) isLate(ts, wm int64) bool {
	if wm == math.MinInt64 {
		return false
	}
	return satAdd(ts, int64(o.cfg.AllowedLateness)) < wm
}

// validChunk checks that chunk is a well-formed sequence of members.
func validChunk(chunk []byte) error {
	return readMembers(chunk, func(*member) error { return nil })
}
