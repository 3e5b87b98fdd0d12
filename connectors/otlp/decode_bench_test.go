package otlp

import (
	"fmt"
	"math/rand/v2"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

type benchMsg struct {
	sig   Signal
	msg   proto.Message
	proto []byte
	json  []byte
	items int
}

type benchBatch struct {
	msgs                 []benchMsg
	items                int
	protoBytes, jsonByte int
}

func kvS(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
func kvI(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}
func kvD(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// newBenchBatch builds what one Collector batch of an LLM-serving fleet
// looks like: 100 spans in 10 traces with about 12 gen_ai.* attributes each,
// 60 log records (KV-block events with trace ids, engine logs without), and
// histogram metrics with exemplars, each as otlp_proto and otlp_json.
func newBenchBatch(tb testing.TB) *benchBatch {
	r := rand.New(rand.NewPCG(42, 42))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
		kvS("service.name", "vllm"), kvS("service.instance.id", "vllm-0"), kvS("host.name", "gpu-node-17"),
		kvS("gpu.uuid", "GPU-5f1c2d7e-0b5a-4c3e-9d2a-7b8e6f4a1c3d"), kvI("gpu.index", 3), kvS("model_name", "meta-llama/Llama-3.1-70B-Instruct"),
	}}
	scope := &commonpb.InstrumentationScope{Name: "vllm.tracing", Version: "0.11.0"}
	const t0 = uint64(1_795_992_549_000_000_000)
	var traceIDs [][]byte
	var spans []*tracepb.Span
	for tr := range 10 {
		tid := rnd(16)
		traceIDs = append(traceIDs, tid)
		root := rnd(8)
		start := t0 + uint64(tr)*1e8
		for s := range 10 {
			sp := &tracepb.Span{
				TraceId: tid, SpanId: rnd(8), Flags: 257, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
				StartTimeUnixNano: start + uint64(s)*1e6, EndTimeUnixNano: start + uint64(s+1)*1e6,
				Status: &tracepb.Status{},
			}
			switch s {
			case 0:
				sp.SpanId, sp.Name, sp.Kind = root, "llm_request", tracepb.Span_SPAN_KIND_SERVER
				sp.EndTimeUnixNano = start + 2e7
			case 1:
				sp.Name = "llm.prefill"
			case 9:
				sp.Name = "llm.sampling"
			default:
				sp.Name = fmt.Sprintf("llm.decode.layer.%d", s)
			}
			if s != 0 {
				sp.ParentSpanId = root
			}
			sp.Attributes = []*commonpb.KeyValue{
				kvS("gen_ai.request.id", fmt.Sprintf("cmpl-%x", tid[:6])), kvS("gen_ai.response.model", "meta-llama/Llama-3.1-70B-Instruct"),
				kvS("gen_ai.operation.name", "chat"), kvS("gen_ai.provider.name", "vllm"),
				kvD("gen_ai.latency.time_to_first_token", 0.0421), kvD("gen_ai.latency.e2e", 1.873), kvD("gen_ai.latency.time_in_queue", 0.0032),
				kvD("gen_ai.latency.time_in_model_prefill", 0.031), kvI("gen_ai.usage.prompt_tokens", 1834), kvI("gen_ai.usage.completion_tokens", 211),
				kvI("layer_id", int64(s)), kvD("kv_cache_hit_ratio", 0.61),
			}
			spans = append(spans, sp)
		}
	}
	traces := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, SchemaUrl: "https://opentelemetry.io/schemas/1.40.0",
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: scope, Spans: spans}}}}}

	var recs []*logspb.LogRecord
	for i := range 60 {
		l := &logspb.LogRecord{TimeUnixNano: t0 + uint64(i)*1e6, ObservedTimeUnixNano: t0 + uint64(i)*1e6 + 5e5, SeverityNumber: 9, SeverityText: "INFO"}
		if i%3 != 0 {
			l.TraceId, l.SpanId = traceIDs[i%10], rnd(8)
			l.Body = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "kv block write"}}
			l.Attributes = []*commonpb.KeyValue{kvS("kv.op", "write"), kvI("kv.block.id", int64(i*7)), kvI("kv.layer.index", int64(i%80)),
				kvI("kv.write.addr", int64(i)*4096), kvI("kv.write.bytes", 4096), kvS("gen_ai.request.id", fmt.Sprintf("cmpl-%x", traceIDs[i%10][:6]))}
		} else {
			l.Body = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: fmt.Sprintf("INFO 11-29 12:00:00 engine.py:310] Finished request chatcmpl-%d.", i)}}
		}
		recs = append(recs, l)
	}
	logs := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{Scope: scope, LogRecords: recs}}}}}

	var metrics []*metricspb.Metric
	for _, name := range []string{"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:inter_token_latency_seconds", "vllm:request_queue_time_seconds"} {
		h := &metricspb.Histogram{AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}
		for p := range 5 {
			dp := &metricspb.HistogramDataPoint{
				Attributes:        []*commonpb.KeyValue{kvS("model_name", "meta-llama/Llama-3.1-70B-Instruct"), kvS("engine", fmt.Sprint(p))},
				StartTimeUnixNano: t0 - 3.6e12, TimeUnixNano: t0 + uint64(p)*1e9, Count: 1000, ExplicitBounds: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5},
			}
			dp.BucketCounts = make([]uint64, 15)
			for i := range dp.BucketCounts {
				dp.BucketCounts[i] = uint64(i * 13)
			}
			for e := range 3 {
				dp.Exemplars = append(dp.Exemplars, &metricspb.Exemplar{TimeUnixNano: t0, Value: &metricspb.Exemplar_AsDouble{AsDouble: 0.04},
					TraceId: traceIDs[(p+e)%10], SpanId: rnd(8)})
			}
			h.DataPoints = append(h.DataPoints, dp)
		}
		metrics = append(metrics, &metricspb.Metric{Name: name, Unit: "s", Description: "Histogram of latency in seconds.", Data: &metricspb.Metric_Histogram{Histogram: h}})
	}
	metrics = append(metrics, &metricspb.Metric{Name: "vllm:kv_cache_usage_perc", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{
		{TimeUnixNano: t0, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 0.93}, Attributes: []*commonpb.KeyValue{kvS("model_name", "llama")}}}}}})
	mdata := &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{Resource: res, ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: scope, Metrics: metrics}}}}}

	b := &benchBatch{}
	for _, m := range []struct {
		sig Signal
		msg proto.Message
	}{{SignalSpans, traces}, {SignalLogs, logs}, {SignalMetrics, mdata}} {
		pb, err := proto.Marshal(m.msg)
		if err != nil {
			tb.Fatal(err)
		}
		pj, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(m.msg)
		if err != nil {
			tb.Fatal(err)
		}
		bm := benchMsg{sig: m.sig, msg: m.msg, proto: reorderWire(tb, pb, descriptorOf(m.sig), nil), json: toOTLPJSON(tb, pj, false), items: len(wantItems(m.msg))}
		b.msgs = append(b.msgs, bm)
		b.items += bm.items
		b.protoBytes += len(bm.proto)
		b.jsonByte += len(bm.json)
	}
	return b
}

func BenchmarkDecode(b *testing.B) {
	batch := newBenchBatch(b)
	for _, enc := range []Encoding{EncodingProto, EncodingJSON} {
		name := map[Encoding]string{EncodingProto: "enc=proto", EncodingJSON: "enc=json"}[enc]
		b.Run(name, func(b *testing.B) {
			d := NewDecoder()
			size := batch.protoBytes
			if enc == EncodingJSON {
				size = batch.jsonByte
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for _, m := range batch.msgs {
					v := m.proto
					if enc == EncodingJSON {
						v = m.json
					}
					items, err := d.Decode(m.sig, enc, v)
					if err != nil {
						b.Fatal(err)
					}
					n += len(items)
				}
			}
			if n != batch.items*b.N {
				b.Fatalf("%d items, want %d", n, batch.items*b.N)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

// BenchmarkProtoUnmarshal is the baseline: a full proto.Unmarshal of the same
// bytes into the otlp Go types (TracesData, LogsData, MetricsData).
func BenchmarkProtoUnmarshal(b *testing.B) {
	batch := newBenchBatch(b)
	b.SetBytes(int64(batch.protoBytes))
	b.ReportAllocs()
	msgs := []proto.Message{&tracepb.TracesData{}, &logspb.LogsData{}, &metricspb.MetricsData{}}
	for b.Loop() {
		for i, m := range batch.msgs {
			if err := proto.Unmarshal(m.proto, msgs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(batch.items*b.N)/b.Elapsed().Seconds(), "items/s")
}

func BenchmarkHashPartition(b *testing.B) {
	key := AppendTraceIDHex(nil, [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	b.ReportAllocs()
	var p int32
	for b.Loop() {
		p += HashPartition(key, 12)
	}
	_ = p
}
