// Package kvlog writes KV-block events as the OTLP log records of braid's
// convention (INPUTS.md §5, operators/kvgraph): one record per op, the op's
// fields as attributes, the GPU as resource attributes. Tests, benchmarks
// and instrumented servers written in Go use it.
package kvlog

import (
	"fmt"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

// Where is the resource of a GPU's events.
type Where struct {
	Host, GPUUUID, Instance string
	GPUIndex                int64 // -1: none
}

// Op is one KV op; zero-valued optional fields are left out (set Has* for
// the ones whose zero is meaningful).
type Op struct {
	Time    int64 // unix ns
	Op      string
	Request string
	TraceID [16]byte
	Block   int64
	// Hash, when non-zero, is written as 16 hex digits.
	Hash   uint64
	RefCnt int64
	HasRef bool
	// Layer is written on reads and writes, and on other ops when > 0.
	Layer int64
	// Layers is kv.layer.count (0: absent).
	Layers      int64
	Addr, Bytes int64
	HasRange    bool
	LayerBase   int64
	LayerSize   int64 // 0: absent
	// Body replaces the attributes: a sanitizer or Xid line.
	Body string
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// Resource is w as an OTLP resource.
func Resource(w Where) *resourcepb.Resource {
	r := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("host.name", w.Host)}}
	if w.GPUUUID != "" {
		r.Attributes = append(r.Attributes, str("gpu.uuid", w.GPUUUID))
	}
	if w.GPUIndex >= 0 {
		r.Attributes = append(r.Attributes, num("gpu.index", w.GPUIndex))
	}
	if w.Instance != "" {
		r.Attributes = append(r.Attributes, str("service.instance.id", w.Instance))
	}
	return r
}

// Record is op as an OTLP log record.
func Record(op Op) *logspb.LogRecord {
	lr := &logspb.LogRecord{TimeUnixNano: uint64(op.Time), ObservedTimeUnixNano: uint64(op.Time)}
	if op.TraceID != ([16]byte{}) {
		lr.TraceId = op.TraceID[:]
	}
	if op.Body != "" {
		lr.Body = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: op.Body}}
		return lr
	}
	a := []*commonpb.KeyValue{str("kv.op", op.Op), num("kv.block.id", op.Block)}
	if op.Hash != 0 {
		a = append(a, str("kv.block.hash", fmt.Sprintf("%016x", op.Hash)))
	}
	if op.HasRef {
		a = append(a, num("kv.block.ref_cnt", op.RefCnt))
	}
	if op.Op == "write" || op.Op == "read" || op.Layer > 0 {
		a = append(a, num("kv.layer.index", op.Layer))
	}
	if op.Layers > 0 {
		a = append(a, num("kv.layer.count", op.Layers))
	}
	if op.HasRange {
		a = append(a, num("kv.write.addr", op.Addr), num("kv.write.bytes", op.Bytes))
	}
	if op.LayerSize > 0 {
		a = append(a, num("kv.layer.base", op.LayerBase), num("kv.layer.size", op.LayerSize))
	}
	if op.Request != "" {
		a = append(a, str("gen_ai.request.id", op.Request))
	}
	lr.Attributes = a
	return lr
}

// LogsData is one message of ops, all from w.
func LogsData(w Where, ops ...Op) *logspb.LogsData {
	sl := &logspb.ScopeLogs{}
	for _, op := range ops {
		sl.LogRecords = append(sl.LogRecords, Record(op))
	}
	return &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: Resource(w), ScopeLogs: []*logspb.ScopeLogs{sl}}}}
}

// Marshal is LogsData(w, ops...) serialized: a Kafka record value.
func Marshal(w Where, ops ...Op) []byte {
	b, err := proto.Marshal(LogsData(w, ops...))
	if err != nil {
		panic(err)
	}
	return b
}

// Pool is a GPU's KV pool geometry (layer-major): layer l owns
// [l*LayerSize, (l+1)*LayerSize); block b of layer l starts at
// l*LayerSize + b*BlockBytes.
type Pool struct {
	Layers     int64
	Blocks     int64
	BlockBytes int64
}

// LayerSize is the bytes of one layer.
func (p Pool) LayerSize() int64 { return p.Blocks * p.BlockBytes }

// Addr is where block b of layer l starts.
func (p Pool) Addr(l, b int64) int64 { return l*p.LayerSize() + b*p.BlockBytes }

// Write is a clean write of [off, off+n) of block b, layer l by req.
func (p Pool) Write(t int64, req string, b, l, off, n int64) Op {
	return Op{Time: t, Op: "write", Request: req, Block: b, Layer: l, Layers: p.Layers, Addr: p.Addr(l, b) + off, Bytes: n, HasRange: true,
		LayerBase: l * p.LayerSize(), LayerSize: p.LayerSize()}
}

// Read is a read of [off, off+n) of block b, layer l by req.
func (p Pool) Read(t int64, req string, b, l, off, n int64) Op {
	op := p.Write(t, req, b, l, off, n)
	op.Op = "read"
	return op
}
