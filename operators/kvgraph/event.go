package kvgraph

import (
	"bytes"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	// Named so: the tests have a helper called wire.
	otlpwire "github.com/braidlabs/braid/connectors/otlp/wire"
)

// Op is what a KV event reports.
type Op uint8

// The ops of the KV-block convention, and the two kinds of supporting log
// lines.
const (
	OpNone Op = iota
	OpAlloc
	OpWrite
	OpRead
	OpFree
	OpZero
	OpEvict
	OpSwapOut
	OpSwapIn
	OpSanitizer // a compute-sanitizer report line
	OpXid       // an NVRM Xid line
	OpUnknown   // a kv.op that is none of the convention's (rejected by Check)
)

var opNames = [...]string{"none", "alloc", "write", "read", "free", "zero", "evict", "swap_out", "swap_in", "sanitizer", "xid", "unknown"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Origin is the input record an event was read from: evidence.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Event is one parsed KV op or supporting line. Its byte slices alias the
// buffers given to ParseEvent and are valid only as long as they are.
type Event struct {
	Op   Op
	Time int64 // event time, unix ns
	// Where: resource host.name, gpu.uuid (or gpu.index), service.instance.id.
	Host, GPUUUID, Instance []byte
	GPUIndex                int64 // -1 when absent
	// Request is gen_ai.request.id; TraceID/SpanID the record's ids (zero
	// when unknown).
	Request []byte
	TraceID [16]byte
	SpanID  [8]byte
	Block   int64 // kv.block.id, -1 when absent
	// Hash is kv.block.hash (HasHash when present).
	Hash    uint64
	HasHash bool
	RefCnt  int64 // kv.block.ref_cnt, -1 when absent
	Layer   int64 // kv.layer.index, -1 when absent
	Layers  int64 // kv.layer.count, 0 when absent
	// Addr/Bytes: kv.write.addr/kv.write.bytes (HasRange when both present).
	Addr, Bytes int64
	HasRange    bool
	// LayerBase/LayerSize: kv.layer.base/kv.layer.size (HasLayerRange).
	LayerBase, LayerSize int64
	HasLayerRange        bool
	// BlockBytes is kv.block.bytes, 0 when absent (an optional extension).
	BlockBytes int64
	// Body is the log body for sanitizer and Xid lines.
	Body []byte
	// Xid is the Xid number of an OpXid line.
	Xid int64
	// Kernel is the kernel named by a sanitizer report (may be empty).
	Kernel []byte
	Origin Origin
	// OpText is kv.op as sent (for an OpUnknown's reason).
	OpText []byte
	// What Check needs: which attributes were present, and the first one
	// that is not an integer.
	hasBlock, hasLayer, hasAddr, hasBytes, hasBase, hasSize bool
	notInt                                                  string
}

// ParseEvent reads one OTLP LogRecord (wire bytes) and its Resource (wire
// bytes) as a KV event, a compute-sanitizer line or an Xid line; ok is false
// for any other log record or malformed bytes. ts is the record's event
// time. It does not allocate; the event's slices alias resource and
// logRecord.
func ParseEvent(resource, logRecord []byte, ts int64, origin Origin) (ev Event, ok bool) {
	ev = Event{Time: ts, GPUIndex: -1, Block: -1, RefCnt: -1, Layer: -1, Origin: origin}
	var addrOK, bytesOK, baseOK, sizeOK bool
	for b := logRecord; len(b) > 0; {
		num, typ, v, _, rest := otlpwire.Next(b)
		if rest == nil {
			return ev, false
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 5: // body
			ev.Body = anyString(v)
		case 6: // attributes
			k, val := keyValue(v)
			num := func(dst *int64) bool {
				x, ok := anyInt(val)
				if ok {
					*dst = x
				} else if ev.notInt == "" {
					ev.notInt = string(k)
				}
				return ok
			}
			switch string(k) {
			case "kv.op":
				ev.OpText = anyString(val)
				if ev.Op = parseOp(ev.OpText); ev.Op == OpNone {
					ev.Op = OpUnknown
				}
			case "kv.block.id":
				ev.hasBlock = num(&ev.Block)
			case "kv.block.hash":
				ev.Hash, ev.HasHash = anyHash(val)
			case "kv.block.ref_cnt":
				num(&ev.RefCnt)
			case "kv.layer.index":
				ev.hasLayer = num(&ev.Layer)
			case "kv.layer.count":
				num(&ev.Layers)
			case "kv.write.addr":
				addrOK = num(&ev.Addr)
			case "kv.write.bytes":
				bytesOK = num(&ev.Bytes)
			case "kv.layer.base":
				baseOK = num(&ev.LayerBase)
			case "kv.layer.size":
				sizeOK = num(&ev.LayerSize)
			case "kv.block.bytes":
				num(&ev.BlockBytes)
			case "gen_ai.request.id":
				ev.Request = anyString(val)
			}
		case 9: // trace_id
			if len(v) == 16 {
				copy(ev.TraceID[:], v)
			}
		case 10: // span_id
			if len(v) == 8 {
				copy(ev.SpanID[:], v)
			}
		}
	}
	ev.HasRange = addrOK && bytesOK
	ev.HasLayerRange = baseOK && sizeOK && ev.LayerSize > 0
	ev.hasAddr, ev.hasBytes, ev.hasBase, ev.hasSize = addrOK, bytesOK, baseOK, sizeOK
	if ev.Op == OpNone {
		switch {
		case bytes.Contains(ev.Body, []byte("NVRM: Xid")):
			ev.Op = OpXid
			ev.Xid = parseXid(ev.Body)
		case isSanitizer(ev.Body):
			ev.Op = OpSanitizer
			ev.Kernel = sanitizerKernel(ev.Body)
		default:
			return ev, false
		}
	}
	if !parseResource(resource, &ev) {
		return ev, false
	}
	return ev, true
}

func parseResource(b []byte, ev *Event) bool {
	for len(b) > 0 {
		num, typ, v, _, rest := otlpwire.Next(b)
		if rest == nil {
			return false
		}
		b = rest
		if num != 1 || typ != protowire.BytesType {
			continue
		}
		k, val := keyValue(v)
		switch string(k) {
		case "host.name":
			ev.Host = anyString(val)
		case "gpu.uuid":
			ev.GPUUUID = anyString(val)
		case "gpu.index":
			ev.GPUIndex, _ = anyInt(val)
		case "service.instance.id":
			ev.Instance = anyString(val)
		}
	}
	return true
}

// keyValue splits a KeyValue message into its key and AnyValue bytes.
// Malformed bytes give neither (otlpwire.KeyValue gives what came before
// them).
func keyValue(b []byte) (key, val []byte) {
	if key, val, ok := otlpwire.KeyValue(b); ok {
		return key, val
	}
	return nil, nil
}

// anyString returns an AnyValue's first string_value or bytes_value.
func anyString(b []byte) []byte {
	return otlpwire.FirstAnyValue(b, 1<<otlpwire.KindString|1<<otlpwire.KindBytes).Bytes
}

// anyInt returns an AnyValue's first int_value, decimal string_value
// (atoi) or integral double_value, whichever comes first. These are
// kvgraph's conventions, not otlpwire.Value.Int's: the first member rather
// than the last, a double converted without a range check, and atoi's
// narrower text.
func anyInt(b []byte) (int64, bool) {
	v := otlpwire.FirstAnyValue(b, 1<<otlpwire.KindInt|1<<otlpwire.KindString|1<<otlpwire.KindDouble)
	switch v.Type {
	case otlpwire.KindInt:
		return int64(v.Num), true
	case otlpwire.KindString:
		return atoi(v.Bytes)
	case otlpwire.KindDouble:
		f := math.Float64frombits(v.Num)
		return int64(f), f == math.Trunc(f)
	}
	return 0, false
}

// anyHash reads kv.block.hash: hex text (up to 16 digits, optional 0x) or
// an integer.
func anyHash(b []byte) (uint64, bool) {
	if s := anyString(b); s != nil {
		s = bytes.TrimPrefix(s, []byte("0x"))
		if len(s) == 0 || len(s) > 16 {
			return 0, false
		}
		var h uint64
		for _, c := range s {
			d, ok := hexDigit(c)
			if !ok {
				return 0, false
			}
			h = h<<4 | uint64(d)
		}
		return h, true
	}
	v, ok := anyInt(b)
	return uint64(v), ok
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// atoi is otlpwire.Atoi as kvgraph reads integers: an optional '-' and at
// most 18 digits (no '+', nothing near int64's limits).
func atoi(s []byte) (int64, bool) {
	d := s
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 || d[0] == '+' {
		return 0, false
	}
	return otlpwire.Atoi(s)
}

func parseOp(s []byte) Op {
	switch string(s) {
	case "alloc":
		return OpAlloc
	case "write":
		return OpWrite
	case "read":
		return OpRead
	case "free":
		return OpFree
	case "zero":
		return OpZero
	case "evict":
		return OpEvict
	case "swap_out":
		return OpSwapOut
	case "swap_in":
		return OpSwapIn
	}
	return OpNone
}

// isSanitizer recognises a compute-sanitizer report line
// ("========= Invalid __global__ write of size 4 bytes", "========= Race
// reported between …", "========= ERROR SUMMARY: N errors" with N > 0).
func isSanitizer(b []byte) bool {
	i := bytes.Index(b, []byte("========="))
	if i < 0 {
		return false
	}
	rest := b[i:]
	return bytes.Contains(rest, []byte("Invalid ")) || bytes.Contains(rest, []byte("Race reported")) ||
		bytes.Contains(rest, []byte("Out-of-range")) || bytes.Contains(rest, []byte("Address "))
}

// sanitizerKernel returns the name after " in " on an "at 0x… in kernel"
// line of the report, if the body holds one.
func sanitizerKernel(b []byte) []byte {
	i := bytes.Index(b, []byte("at 0x"))
	if i < 0 {
		return nil
	}
	rest := b[i:]
	j := bytes.Index(rest, []byte(" in "))
	if j < 0 {
		return nil
	}
	k := rest[j+4:]
	if e := bytes.IndexAny(k, "\n\r"); e >= 0 {
		k = k[:e]
	}
	return bytes.TrimSpace(k)
}

// parseXid reads N from "NVRM: Xid (PCI:0000:3b:00): N, …".
func parseXid(b []byte) int64 {
	i := bytes.Index(b, []byte("NVRM: Xid"))
	rest := b[i+len("NVRM: Xid"):]
	if j := bytes.Index(rest, []byte("):")); j >= 0 {
		rest = rest[j+2:]
	}
	rest = bytes.TrimLeft(rest, " ")
	e := 0
	for e < len(rest) && rest[e] >= '0' && rest[e] <= '9' {
		e++
	}
	v, _ := atoi(rest[:e])
	return v
}
