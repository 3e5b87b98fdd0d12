package arrowexport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/operators/braidpb"
)

func sv(v string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}
}
func iv(v int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
}
func dv(v float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}
}
func bv(v bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}
}
func av(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}
func kvl(kvs ...*commonpb.KeyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs}}}
}
func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

// t0 is 2026-01-01T00:00:00Z.
const t0 = uint64(1767225600000000000)

func traceID(i int) []byte {
	id := []byte{0xab, 0xcd, 0, 0, 0, 0, 0, 0, 0x1f, 0x2e, 0x3d, 0x4c, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(id[12:], uint32(i))
	return id
}

func spanID(i, j int) []byte {
	id := []byte{0xa0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(id[2:6], uint32(i))
	binary.BigEndian.PutUint16(id[6:], uint16(j))
	return id
}

// sampleTrace is a realistic FusedTrace: 2 resources, nSpans spans (root
// first) with attributes and events, a log with a string body and one with
// a kvlist body, a histogram and a gauge point, and flags.
func sampleTrace(i, nSpans int) *braidpb.FusedTrace {
	tid := traceID(i)
	start := t0 + uint64(i)*1_000_000_000
	root := spanID(i, 0)
	vllm := &commonpb.InstrumentationScope{Name: "vllm", Version: "0.11.0"}
	ft := &braidpb.FusedTrace{
		TraceId:           tid,
		Revision:          uint32(i % 3),
		StartTimeUnixNano: start,
		EndTimeUnixNano:   start + 420_000_000,
		WatermarkUnixNano: start + 30_000_000_000,
		Resources: []*resourcepb.Resource{
			{Attributes: []*commonpb.KeyValue{
				kv("service.name", sv("vllm")),
				kv("host.name", sv(fmt.Sprintf("gpu-node-%d", i%4))),
				kv("process.pid", iv(4242)),
			}},
			{Attributes: []*commonpb.KeyValue{
				kv("service.name", sv("dcgm-exporter")),
				kv("gpu.uuid", sv("GPU-0f1e2d3c-0000-1111-2222-333344445555")),
				kv("gpu.index", iv(int64(i%8))),
			}},
		},
		Flags: []braidpb.Flag{braidpb.Flag_FLAG_ERROR, braidpb.Flag_FLAG_REVISED},
	}
	for j := 0; j < nSpans; j++ {
		s := &tracepb.Span{
			TraceId:           tid,
			SpanId:            spanID(i, j),
			Name:              fmt.Sprintf("llm.step.%d", j),
			Kind:              tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: start + uint64(j)*1_000_000,
			EndTimeUnixNano:   start + uint64(j)*1_000_000 + 40_000_000,
			Attributes: []*commonpb.KeyValue{
				kv("layer_id", iv(int64(j))),
				kv("gen_ai.request.model", sv("meta-llama/Llama-3.1-8B-Instruct")),
			},
		}
		if j == 0 {
			s.Name = "llm_request"
			s.Kind = tracepb.Span_SPAN_KIND_SERVER
			s.EndTimeUnixNano = start + 420_000_000
			s.Attributes = []*commonpb.KeyValue{
				kv("gen_ai.request.id", sv(fmt.Sprintf("cmpl-%d", i))),
				kv("gen_ai.usage.prompt_tokens", iv(512)),
				kv("gen_ai.request.temperature", dv(0.7)),
				kv("gen_ai.request.stream", bv(true)),
				kv("gen_ai.request.stop", av(sv("</s>"), sv("\n"))),
			}
			s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "CUDA out of memory"}
			s.Events = []*tracepb.Span_Event{
				{TimeUnixNano: start + 5_000_000, Name: "first_token"},
				{TimeUnixNano: start + 419_000_000, Name: "exception", Attributes: []*commonpb.KeyValue{
					kv("exception.type", sv("torch.OutOfMemoryError")),
				}},
			}
		} else {
			s.ParentSpanId = root
		}
		ft.Spans = append(ft.Spans, &braidpb.FusedSpan{
			ResourceIndex: 0,
			Scope:         vllm,
			Span:          s,
			Origin:        &braidpb.Origin{Topic: "otlp_spans", Partition: 3, Offset: int64(1000*i + j)},
		})
	}
	ft.Logs = []*braidpb.FusedLog{
		{
			ResourceIndex: 0, Scope: vllm,
			Log: &logspb.LogRecord{
				TimeUnixNano: start + 420_000_000, ObservedTimeUnixNano: start + 421_000_000,
				SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
				Body:    sv(fmt.Sprintf("Finished request cmpl-%d", i)),
				TraceId: tid, SpanId: root,
				Attributes: []*commonpb.KeyValue{kv("code.function", sv("engine.step"))},
			},
			Origin: &braidpb.Origin{Topic: "otlp_logs", Partition: 3, Offset: int64(77 + i)},
		},
		{
			ResourceIndex: 0, Scope: vllm,
			Log: &logspb.LogRecord{
				ObservedTimeUnixNano: start + 419_500_000,
				SeverityNumber:       logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, SeverityText: "ERROR",
				Body:    kvl(kv("msg", sv("oom")), kv("free_mib", iv(12)), kv("tags", av(sv("a"), bv(false)))),
				TraceId: tid,
			},
			Origin: &braidpb.Origin{Topic: "otlp_logs", Partition: 3, Offset: int64(78 + i)},
		},
	}
	hsum := 0.42
	ft.Points = []*braidpb.FusedPoint{
		{
			ResourceIndex: 0, Scope: &commonpb.InstrumentationScope{Name: "prometheus"},
			Metric: &metricspb.Metric{
				Name: "vllm:e2e_request_latency_seconds", Unit: "s",
				Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
					AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
					DataPoints: []*metricspb.HistogramDataPoint{{
						TimeUnixNano: start + 500_000_000, Count: 3, Sum: &hsum,
						BucketCounts: []uint64{1, 2, 0}, ExplicitBounds: []float64{0.1, 1},
						Attributes: []*commonpb.KeyValue{kv("model_name", sv("llama"))},
						Exemplars: []*metricspb.Exemplar{
							{TimeUnixNano: start + 400_000_000, TraceId: traceID(i + 1_000_000), Value: &metricspb.Exemplar_AsDouble{AsDouble: 9}},
							{TimeUnixNano: start + 420_000_000, TraceId: tid, SpanId: root, Value: &metricspb.Exemplar_AsDouble{AsDouble: 0.42}},
						},
					}},
				}},
			},
			Origin: &braidpb.Origin{Topic: "otlp_metrics", Partition: 0, Offset: int64(9 + i)},
		},
		{
			ResourceIndex: 1, Scope: &commonpb.InstrumentationScope{Name: "dcgm"},
			Metric: &metricspb.Metric{
				Name: "DCGM_FI_DEV_GPU_UTIL", Unit: "%",
				Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
					TimeUnixNano: start + 410_000_000,
					Value:        &metricspb.NumberDataPoint_AsInt{AsInt: 97},
					Exemplars:    []*metricspb.Exemplar{{TraceId: tid, Value: &metricspb.Exemplar_AsInt{AsInt: 97}}},
				}}}},
			},
			Origin: &braidpb.Origin{Topic: "otlp_metrics", Partition: 1, Offset: int64(10 + i)},
		},
	}
	errs := uint32(1)
	ft.Summary = &braidpb.Summary{
		SpanCount: uint32(len(ft.Spans)), LogCount: 2, PointCount: 2,
		RootSpanName: "llm_request", RootServiceName: "vllm",
		DurationNano: 420_000_000, ErrorSpanCount: errs, DroppedLogs: 4,
	}
	return ft
}

// oddTrace has everything optional left out or malformed.
func oddTrace() *braidpb.FusedTrace {
	return &braidpb.FusedTrace{
		TraceId: []byte{0xff, 0xee},
		Resources: []*resourcepb.Resource{
			nil,
			{Attributes: []*commonpb.KeyValue{
				kv("empty", nil),
				kv("empty2", &commonpb.AnyValue{}),
				kv("bad\xffkey", sv("bad\xfevalue")),
				kv("bytes", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 2, 0xff}}}),
				kv("nan", dv(math.NaN())),
				kv("inf_in_array", av(dv(math.Inf(-1)), dv(1e21), iv(-3), nil, sv("q\"\\\x01\u2028é"))),
			}},
		},
		Spans:  []*braidpb.FusedSpan{nil, {Span: &tracepb.Span{Name: "lonely", Kind: 42, StartTimeUnixNano: 5}}},
		Logs:   []*braidpb.FusedLog{{Log: &logspb.LogRecord{Body: iv(7)}}, {}},
		Points: []*braidpb.FusedPoint{{Metric: &metricspb.Metric{Name: "nodata"}}, {}},
		Summary: &braidpb.Summary{
			DurationNano: math.MaxUint64,
		},
		Flags: []braidpb.Flag{braidpb.Flag_FLAG_NO_ROOT_SPAN, braidpb.Flag(99)},
	}
}

// writeAll writes traces in format f with batch size batchRows and a checked
// allocator, and returns the bytes.
func writeAll(t testing.TB, f Format, batchRows int, traces []*braidpb.FusedTrace) []byte {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	var buf bytes.Buffer
	w, err := newWriter(&buf, f, mem, batchRows)
	if err != nil {
		t.Fatal(err)
	}
	for _, ft := range traces {
		if err := w.Write(ft); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	return buf.Bytes()
}

// readResult is a file read back: its schema, the number of batches / row
// groups, and its rows converted by toGo.
type readResult struct {
	schema  *arrow.Schema
	batches int
	rows    []map[string]any
}

func readArrow(t testing.TB, path string) readResult {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f, ipc.WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res := readResult{schema: r.Schema(), batches: r.NumRecords()}
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		res.rows = append(res.rows, recordRows(rec)...)
	}
	return res
}

func readParquet(t testing.TB, path string) readResult {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, mem)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	res := readResult{schema: sc, batches: pf.NumRowGroups()}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	for tr.Next() {
		res.rows = append(res.rows, recordRows(tr.Record())...)
	}
	if got := int(pf.NumRows()); got != len(res.rows) {
		t.Fatalf("parquet metadata says %d rows, read %d", got, len(res.rows))
	}
	return res
}

func recordRows(rec arrow.Record) []map[string]any {
	rows := make([]map[string]any, rec.NumRows())
	for i := range rows {
		row := make(map[string]any, rec.NumCols())
		for c := 0; c < int(rec.NumCols()); c++ {
			row[rec.ColumnName(c)] = toGo(rec.Column(c), i)
		}
		rows[i] = row
	}
	return rows
}

// kvPair is one map entry; a map<string,string> becomes []kvPair.
type kvPair struct {
	K string
	V any
}

// toGo converts element i of a to plain Go values: nil for null, the
// primitive values, time stamps as int64 ns, lists as []any, structs as
// map[string]any, maps as []kvPair.
func toGo(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Uint32:
		return a.Value(i)
	case *array.Uint64:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.Timestamp:
		return int64(a.Value(i))
	case *array.Map:
		start, end := a.ValueOffsets(i)
		out := []kvPair{}
		for j := int(start); j < int(end); j++ {
			out = append(out, kvPair{K: toGo(a.Keys(), j).(string), V: toGo(a.Items(), j)})
		}
		return out
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := int(start); j < int(end); j++ {
			out = append(out, toGo(a.ListValues(), j))
		}
		return out
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		out := make(map[string]any, a.NumField())
		for f := 0; f < a.NumField(); f++ {
			out[st.Field(f).Name] = toGo(a.Field(f), i)
		}
		return out
	}
	panic(fmt.Sprintf("toGo: unhandled %T", a))
}

// lookup returns the value of key in a []kvPair.
func lookup(t testing.TB, m any, key string) any {
	t.Helper()
	for _, p := range m.([]kvPair) {
		if p.K == key {
			return p.V
		}
	}
	t.Fatalf("key %q not in %v", key, m)
	return nil
}
