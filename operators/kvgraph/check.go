package kvgraph

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/engine"
)

// ErrorPolicy is what the stage does with a log record it cannot take (a
// KV event that breaks the convention): send it to the dead-letter topic,
// skip it, or fail the job.
type ErrorPolicy string

// The error policies (STYLE.md); PolicyDeadLetter is the default.
const (
	PolicyDeadLetter ErrorPolicy = "dead_letter"
	PolicySkip       ErrorPolicy = "skip"
	PolicyFail       ErrorPolicy = "fail"
)

// Bounds of the values a KV event may carry. An event outside them is
// rejected (Config.ErrorPolicy): the detector's state and its records are
// bounded by them.
const (
	// MaxIDBytes bounds gen_ai.request.id, host.name, gpu.uuid and
	// service.instance.id.
	MaxIDBytes = 512
	// MaxBlock bounds kv.block.id (exclusive).
	MaxBlock = 1 << 32
	// MaxLayer bounds kv.layer.index and kv.layer.count (exclusive).
	MaxLayer = 1 << 16
	// MaxPoolBytes bounds kv.write.addr, kv.layer.base and the end of a
	// range (exclusive); MaxRangeBytes bounds kv.write.bytes,
	// kv.layer.size and kv.block.bytes.
	MaxPoolBytes  = 1 << 50
	MaxRangeBytes = 1 << 40
	// MaxEvidenceText is the bytes of a supporting line kept as evidence.
	MaxEvidenceText = 512
)

// EventError is why the stage cannot take a log record. Its reason, as in
// braid.reason, is "kvgraph: " + Cause.
type EventError struct{ Cause string }

func (e *EventError) Error() string { return "kvgraph: " + e.Cause }

func reject(format string, args ...any) *EventError {
	return &EventError{Cause: fmt.Sprintf(format, args...)}
}

// needsRequest: the ops only a request does need gen_ai.request.id. A
// write may come without one (the server process writing, e.g. a
// CUDA-graph capture through the reserved null block); so may zero and
// evict.
func (o Op) needsRequest() bool {
	switch o {
	case OpAlloc, OpRead, OpFree, OpSwapOut, OpSwapIn:
		return true
	}
	return false
}

// Check reports why ev breaks the KV-event convention (INPUTS.md §5), nil
// when the detector can take it.
func (ev *Event) Check() *EventError {
	if ev.Op == OpUnknown {
		return reject("unknown kv.op %q", clip(ev.OpText))
	}
	for _, f := range [...]struct {
		name string
		v    []byte
	}{{"host.name", ev.Host}, {"gpu.uuid", ev.GPUUUID}, {"service.instance.id", ev.Instance}, {"gen_ai.request.id", ev.Request}} {
		if len(f.v) > MaxIDBytes {
			return reject("%s of %d bytes (limit %d)", f.name, len(f.v), MaxIDBytes)
		}
		if !utf8.Valid(f.v) {
			return reject("invalid UTF-8 in %s", f.name)
		}
	}
	if ev.Op == OpSanitizer || ev.Op == OpXid {
		return nil
	}
	switch {
	case ev.notInt != "":
		return reject("%s is not an integer", clip([]byte(ev.notInt)))
	case !ev.hasBlock:
		return reject("kv.block.id missing on %s", ev.Op)
	case ev.Block < 0 || ev.Block >= MaxBlock:
		return reject("kv.block.id %d out of range [0, %d)", ev.Block, int64(MaxBlock))
	case ev.Op.needsRequest() && len(ev.Request) == 0:
		return reject("gen_ai.request.id missing on %s", ev.Op)
	case ev.hasLayer && (ev.Layer < 0 || ev.Layer >= MaxLayer):
		return reject("kv.layer.index %d out of range [0, %d)", ev.Layer, MaxLayer)
	case ev.Layers < 0 || ev.Layers >= MaxLayer:
		return reject("kv.layer.count %d out of range [0, %d)", ev.Layers, MaxLayer)
	case ev.BlockBytes < 0 || ev.BlockBytes > MaxRangeBytes:
		return reject("kv.block.bytes %d out of range [0, %d]", ev.BlockBytes, int64(MaxRangeBytes))
	case ev.hasAddr != ev.hasBytes:
		return reject("kv.write.addr and kv.write.bytes not both present")
	case ev.hasBase != ev.hasSize:
		return reject("kv.layer.base and kv.layer.size not both present")
	}
	if ev.HasRange {
		switch {
		case ev.Addr < 0 || ev.Addr >= MaxPoolBytes:
			return reject("kv.write.addr %d out of range [0, %d)", ev.Addr, int64(MaxPoolBytes))
		case ev.Bytes < 0 || ev.Bytes > MaxRangeBytes:
			return reject("kv.write.bytes %d out of range [0, %d]", ev.Bytes, int64(MaxRangeBytes))
		}
	}
	if ev.hasBase {
		switch {
		case ev.LayerBase < 0 || ev.LayerBase >= MaxPoolBytes:
			return reject("kv.layer.base %d out of range [0, %d)", ev.LayerBase, int64(MaxPoolBytes))
		case ev.LayerSize <= 0 || ev.LayerSize > MaxRangeBytes:
			return reject("kv.layer.size %d out of range (0, %d]", ev.LayerSize, int64(MaxRangeBytes))
		}
	}
	return nil
}

// clip is b, at most 64 bytes of it, valid UTF-8, for a reason.
func clip(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return validString(b)
}

// validString is b as a string, invalid UTF-8 repaired (each invalid byte
// sequence → U+FFFD): every string given to a protobuf marshal passes here.
// Valid input is only copied.
func validString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// validStr is validString for a string.
func validStr(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Check parses one OTLP LogRecord and its Resource (wire bytes) as Add
// does and reports why the stage cannot take it; nil for a KV event or
// supporting line it takes and for any other log record (which Add
// ignores). Callers that forward KV events to another task check them
// first, so that a rejected one goes to the dead-letter topic with the
// input record it came from.
//
// The bytes checked must be the record as read: connectors/otlp repairs
// invalid UTF-8 in a decoded item (each invalid sequence → U+FFFD), which
// would hide an invalid identity, so a caller holding an otlp.Item checks
// (and rejects) its Item.Original bytes; they are the item's own bytes
// unless it was repaired.
func Check(resource, logRecord []byte) error {
	ev, ok := ParseEvent(resource, logRecord, 0, Origin{})
	if !ok {
		return nil
	}
	if err := ev.Check(); err != nil {
		return err
	}
	return nil
}

// Reject applies Config.ErrorPolicy to a log record that the stage cannot
// take (cause, from Check): dead_letter writes the log record and its
// resource, as a LogsData of one record, to Config.DLQTopic with headers
// braid.reason ("kvgraph: <cause>"), braid.topic, braid.partition and
// braid.offset (origin); skip counts it; fail returns the error.
func (p *Processor) Reject(t *engine.Task, resource, logRecord []byte, origin Origin, cause error) error {
	p.c.Rejected.Add(1)
	switch p.cfg.ErrorPolicy {
	case PolicyFail:
		return fmt.Errorf("kvgraph: %s:%d@%d: %w", origin.Topic, origin.Partition, origin.Offset, cause)
	case PolicySkip:
		return nil
	}
	reason := cause.Error()
	if ee, ok := cause.(*EventError); ok {
		reason = "kvgraph: " + ee.Cause
	}
	v := logsData(resource, logRecord)
	if p.cfg.MaxRecordBytes > 0 && len(v) > p.cfg.MaxRecordBytes-dlqHeadroom {
		// Too large for the broker: the headers say where it is.
		reason += " (record of " + strconv.Itoa(len(v)) + " bytes not kept)"
		v = nil
	}
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	p.c.DeadLettered.Add(1)
	t.Emit(&kgo.Record{
		Topic:     p.cfg.DLQTopic,
		Partition: max(origin.Partition, 0) % p.cfg.DLQPartitions,
		Value:     v,
		Headers: []kgo.RecordHeader{
			{Key: "braid.reason", Value: []byte(reason)},
			{Key: "braid.topic", Value: []byte(origin.Topic)},
			{Key: "braid.partition", Value: strconv.AppendInt(nil, int64(origin.Partition), 10)},
			{Key: "braid.offset", Value: strconv.AppendInt(nil, origin.Offset, 10)},
		},
	})
	return nil
}

// dlqHeadroom is what a dead-letter record's headers and batch overhead
// may take beyond its value.
const dlqHeadroom = 4096

// logsData is a LogsData of one ResourceLogs (resource) of one ScopeLogs
// of one LogRecord, from their wire bytes.
func logsData(resource, logRecord []byte) []byte {
	var sl []byte
	sl = protowire.AppendTag(sl, 2, protowire.BytesType) // ScopeLogs.log_records
	sl = protowire.AppendBytes(sl, logRecord)
	var rl []byte
	rl = protowire.AppendTag(rl, 1, protowire.BytesType) // ResourceLogs.resource
	rl = protowire.AppendBytes(rl, resource)
	rl = protowire.AppendTag(rl, 2, protowire.BytesType) // ResourceLogs.scope_logs
	rl = protowire.AppendBytes(rl, sl)
	var ld []byte
	ld = protowire.AppendTag(ld, 1, protowire.BytesType) // LogsData.resource_logs
	return protowire.AppendBytes(ld, rl)
}
