package braidpb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func i64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func sampleTrace() *braidpb.FusedTrace {
	traceID := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x1f, 0x2e, 0x3d, 0x4c, 0x5b, 0x6a, 0x79, 0x88}
	root := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	child := []byte{8, 7, 6, 5, 4, 3, 2, 1}
	const t0 = uint64(1767225600000000000)
	scope := &commonpb.InstrumentationScope{Name: "vllm", Version: "0.11.0"}
	sum := 0.42
	return &braidpb.FusedTrace{
		TraceId:           traceID,
		Revision:          2,
		StartTimeUnixNano: t0,
		EndTimeUnixNano:   t0 + 420_000_000,
		Resources: []*resourcepb.Resource{
			{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("host.name", "gpu-node-1")}},
			{Attributes: []*commonpb.KeyValue{str("service.name", "dcgm"), str("gpu.uuid", "GPU-0f1e")}},
		},
		Spans: []*braidpb.FusedSpan{
			{
				ResourceIndex: 0,
				Scope:         scope,
				Span: &tracepb.Span{
					TraceId: traceID, SpanId: root, Name: "llm_request",
					Kind:              tracepb.Span_SPAN_KIND_SERVER,
					StartTimeUnixNano: t0, EndTimeUnixNano: t0 + 420_000_000,
					Attributes: []*commonpb.KeyValue{str("gen_ai.request.id", "cmpl-abc"), i64("gen_ai.usage.prompt_tokens", 512)},
					Status:     &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "oom"},
				},
				Origin: &braidpb.Origin{Topic: "otlp_spans", Partition: 3, Offset: 1234},
			},
			{
				ResourceIndex: 0,
				Scope:         scope,
				Span: &tracepb.Span{
					TraceId: traceID, SpanId: child, ParentSpanId: root, Name: "llm.prefill",
					StartTimeUnixNano: t0 + 1_000_000, EndTimeUnixNano: t0 + 50_000_000,
					Attributes: []*commonpb.KeyValue{i64("layer_id", 3)},
				},
				Origin: &braidpb.Origin{Topic: "otlp_spans", Partition: 3, Offset: 1230},
			},
		},
		Logs: []*braidpb.FusedLog{{
			ResourceIndex: 0,
			Scope:         scope,
			Log: &logspb.LogRecord{
				TimeUnixNano: t0 + 420_000_000, SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
				Body:    &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "Finished request cmpl-abc"}},
				TraceId: traceID, SpanId: root,
			},
			Origin: &braidpb.Origin{Topic: "otlp_logs", Partition: 3, Offset: 77},
		}},
		Points: []*braidpb.FusedPoint{{
			ResourceIndex: 1,
			Scope:         &commonpb.InstrumentationScope{Name: "prometheus"},
			Metric: &metricspb.Metric{
				Name: "vllm:e2e_request_latency_seconds", Unit: "s",
				Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
					AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
					DataPoints: []*metricspb.HistogramDataPoint{{
						TimeUnixNano: t0 + 500_000_000, Count: 3, Sum: &sum,
						BucketCounts: []uint64{1, 2, 0}, ExplicitBounds: []float64{0.1, 1},
						Exemplars: []*metricspb.Exemplar{{
							TimeUnixNano: t0 + 420_000_000, TraceId: traceID, SpanId: root,
							Value: &metricspb.Exemplar_AsDouble{AsDouble: 0.42},
						}},
					}},
				}},
			},
			Origin: &braidpb.Origin{Topic: "otlp_metrics", Partition: 0, Offset: 9},
		}},
		Summary: &braidpb.Summary{
			SpanCount: 2, LogCount: 1, PointCount: 1,
			RootSpanName: "llm_request", RootServiceName: "vllm",
			DurationNano: 420_000_000, ErrorSpanCount: 1, DroppedLogs: 4,
		},
		Flags:             []braidpb.Flag{braidpb.Flag_FLAG_ERROR, braidpb.Flag_FLAG_REVISED},
		WatermarkUnixNano: t0 + 30_000_000_000,
	}
}

func TestFusedTraceRoundTrip(t *testing.T) {
	in := sampleTrace()
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out braidpb.FusedTrace
	if err := proto.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) {
		t.Fatalf("round trip changed the message:\n in: %v\nout: %v", in, &out)
	}
	if got := len(out.GetSpans()); got != 2 {
		t.Fatalf("spans = %d", got)
	}
	if got := out.GetPoints()[0].GetMetric().GetHistogram().GetDataPoints()[0].GetExemplars()[0].GetTraceId(); !bytes.Equal(got, in.GetTraceId()) {
		t.Fatalf("exemplar trace id = %x", got)
	}

	// protojson, the human option, round-trips too.
	j, err := protojson.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var outJ braidpb.FusedTrace
	if err := protojson.Unmarshal(j, &outJ); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &outJ) {
		t.Fatal("protojson round trip changed the message")
	}
}

func TestDescriptorPaths(t *testing.T) {
	fd := braidpb.File_braid_v1_braid_proto
	if got := fd.Path(); got != "braid/v1/braid.proto" {
		t.Fatalf("path = %q", got)
	}
	if got := string(fd.Package()); got != "braid.v1" {
		t.Fatalf("package = %q", got)
	}
	// The imports must resolve to the otlp module's registered files.
	for i := 0; i < fd.Imports().Len(); i++ {
		imp := fd.Imports().Get(i)
		if imp.IsPlaceholder() {
			t.Errorf("import %s is unresolved", imp.Path())
		}
	}
}

// TestProtocDecode checks that protoc reads a marshalled FusedTrace with the
// vendored OpenTelemetry protos (skipped where protoc is not installed).
func TestProtocDecode(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not installed")
	}
	b, err := proto.Marshal(sampleTrace())
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fused.bin")
	if err := os.WriteFile(bin, b, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	// Same command line as documented, run from the repository root.
	cmd := exec.Command(protoc, "--decode", "braid.v1.FusedTrace", "-I", "operators/braidpb", "operators/braidpb/braid/v1/braid.proto")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Stdin = in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("protoc --decode: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{`name: "llm_request"`, `topic: "otlp_spans"`, `root_span_name: "llm_request"`, "FLAG_REVISED", `name: "vllm:e2e_request_latency_seconds"`, "SPAN_KIND_SERVER"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("protoc output lacks %s:\n%s", want, out)
		}
	}
}

func TestRepairUTF8MakesMessagesMarshal(t *testing.T) {
	d := &braidpb.Derived{RequestIds: []string{"ok", "r\xff1"}, Model: "llama\xc3", Provider: "vllm"}
	if _, err := proto.Marshal(d); err == nil {
		t.Fatal("invalid UTF-8 marshalled")
	}
	if !braidpb.RepairUTF8(d) {
		t.Fatal("RepairUTF8 reported no change")
	}
	if _, err := proto.Marshal(d); err != nil {
		t.Fatal(err)
	}
	if d.Model != "llama\uFFFD" || d.RequestIds[1] != "r\uFFFD1" || d.RequestIds[0] != "ok" || d.Provider != "vllm" {
		t.Fatalf("repaired to %q %q", d.Model, d.RequestIds)
	}
	if braidpb.RepairUTF8(d) {
		t.Fatal("a valid message was changed")
	}
}
