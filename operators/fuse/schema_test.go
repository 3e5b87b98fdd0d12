package fuse

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/internal/wirecheck"
)

func descriptor(m proto.Message) protoreflect.MessageDescriptor { return m.ProtoReflect().Descriptor() }

// TestHandEncodedFields checks every field number that fuse writes by hand
// against the generated descriptor of its message: the field's name and
// the wire type fuse writes it with.
func TestHandEncodedFields(t *testing.T) {
	trace := descriptor(&braidpb.FusedTrace{})
	summary := descriptor(&braidpb.Summary{})
	sampling := descriptor(&braidpb.Sampling{})
	origin := descriptor(&braidpb.Origin{})
	metric := descriptor(&metricspb.Metric{})
	const (
		bytes   = protowire.BytesType
		varint  = protowire.VarintType
		fixed64 = protowire.Fixed64Type
	)
	type field struct {
		num  protowire.Number
		typ  protowire.Type
		name protoreflect.Name
	}
	fields := map[protoreflect.MessageDescriptor][]field{
		trace: {
			{fTraceID, bytes, "trace_id"},
			{fRevision, varint, "revision"},
			{fStart, fixed64, "start_time_unix_nano"},
			{fEnd, fixed64, "end_time_unix_nano"},
			{fResources, bytes, "resources"},
			{fSpans, bytes, "spans"},
			{fLogs, bytes, "logs"},
			{fPoints, bytes, "points"},
			{fSummary, bytes, "summary"},
			{fFlags, bytes, "flags"}, // packed
			{fWatermark, fixed64, "watermark_unix_nano"},
			{fDerived, bytes, "derived"},
			{fResourceContext, bytes, "resource_context"},
			{fIncidents, bytes, "incident_ids"},
			{fPart, varint, "part"},
			{fParts, varint, "parts"},
			{fSampling, bytes, "sampling"},
		},
		descriptor(&braidpb.FusedSpan{}): {
			{fMemberResourceIndex, varint, "resource_index"}, {fMemberScope, bytes, "scope"}, {fMemberPayload, bytes, "span"}, {fMemberOrigin, bytes, "origin"},
		},
		descriptor(&braidpb.FusedLog{}): {
			{fMemberResourceIndex, varint, "resource_index"}, {fMemberScope, bytes, "scope"}, {fMemberPayload, bytes, "log"}, {fMemberOrigin, bytes, "origin"},
		},
		descriptor(&braidpb.FusedPoint{}): {
			{fMemberResourceIndex, varint, "resource_index"}, {fMemberScope, bytes, "scope"}, {fMemberPayload, bytes, "metric"}, {fMemberOrigin, bytes, "origin"},
		},
		origin: {
			{fOriginTopic, bytes, "topic"},
			{fOriginPartition, varint, "partition"},
			{fOriginOffset, varint, "offset"},
		},
		summary: {
			{fSummarySpans, varint, "span_count"},
			{fSummaryLogs, varint, "log_count"},
			{fSummaryPoints, varint, "point_count"},
			{fSummaryRootName, bytes, "root_span_name"},
			{fSummaryRootService, bytes, "root_service_name"},
			{fSummaryDuration, fixed64, "duration_nano"},
			{fSummaryErrors, varint, "error_span_count"},
			{fSummaryDroppedSpans, varint, "dropped_spans"},
			{fSummaryDroppedLogs, varint, "dropped_logs"},
			{fSummaryDroppedPoints, varint, "dropped_points"},
		},
		sampling: {
			{fSamplingKept, varint, "kept"},
			{fSamplingReason, bytes, "reason"},
			{fSamplingRate, fixed64, "rate"},
			{fSamplingThreshold, bytes, "threshold"},
		},
		// appendMetric frames a point's Metric with its data member by
		// otlp.PointType.
		metric: {
			{protowire.Number(otlp.PointGauge), bytes, "gauge"},
			{protowire.Number(otlp.PointSum), bytes, "sum"},
			{protowire.Number(otlp.PointHistogram), bytes, "histogram"},
			{protowire.Number(otlp.PointExpHistogram), bytes, "exponential_histogram"},
			{protowire.Number(otlp.PointSummary), bytes, "summary"},
		},
	}
	for md, fs := range fields {
		for _, f := range fs {
			fd := md.Fields().ByNumber(f.num)
			switch {
			case fd == nil:
				t.Errorf("%s has no field %d (want %s)", md.FullName(), f.num, f.name)
			case fd.Name() != f.name:
				t.Errorf("%s field %d is %s, written as %s", md.FullName(), f.num, fd.Name(), f.name)
			case !wirecheck.Allows(fd, f.typ):
				t.Errorf("%s.%s is written with wire type %d, declared %s", md.FullName(), f.name, f.typ, fd.Kind())
			}
		}
	}
	// Every field of FusedTrace is written.
	if n := trace.Fields().Len(); n != len(fields[trace]) {
		t.Errorf("FusedTrace has %d fields, %d written", n, len(fields[trace]))
	}
}

// inputOpaque are the messages whose bytes fuse copies from its input:
// their fields are the input's, not fuse's to check.
var inputOpaque = []protoreflect.FullName{
	"opentelemetry.proto.resource.v1.Resource",
	"opentelemetry.proto.common.v1.InstrumentationScope",
	"opentelemetry.proto.trace.v1.Span",
	"opentelemetry.proto.logs.v1.LogRecord",
	"opentelemetry.proto.metrics.v1.NumberDataPoint",
	"opentelemetry.proto.metrics.v1.HistogramDataPoint",
	"opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint",
	"opentelemetry.proto.metrics.v1.SummaryDataPoint",
	"braid.v1.Derived",
	"braid.v1.ResourceContext",
}

// checkFusedWire checks a FusedTrace record value written in protobuf
// against the schema (fused does, for every test that reads them).
func checkFusedWire(t testing.TB, v []byte) {
	t.Helper()
	if err := wirecheck.Check(v, descriptor(&braidpb.FusedTrace{}), inputOpaque...); err != nil {
		t.Fatalf("fused record does not match the schema: %v", err)
	}
}

// TestMembersMatchSchema: a member's body is the fields of a FusedSpan,
// FusedLog or FusedPoint (the point's Metric framed by appendMetric, for
// every point type), and a late member re-encoded as a one-item OTLP
// message is a TracesData, LogsData or MetricsData.
func TestMembersMatchSchema(t *testing.T) {
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}}}}
	scope := &commonpb.InstrumentationScope{Name: "s"}
	tid, sid := make([]byte, 16), make([]byte, 8)
	tid[0], sid[0] = 1, 1
	exemplars := []*metricspb.Exemplar{{TraceId: tid, SpanId: sid, TimeUnixNano: 1}}
	number := []*metricspb.NumberDataPoint{{TimeUnixNano: 1, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 1}, Exemplars: exemplars}}
	metrics := []*metricspb.Metric{
		{Name: "g", Description: "d", Unit: "1", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: number}}},
		{Name: "s", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: number, IsMonotonic: true,
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}}},
		{Name: "h", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
			DataPoints:             []*metricspb.HistogramDataPoint{{TimeUnixNano: 1, BucketCounts: []uint64{1}, Exemplars: exemplars}},
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}}},
		{Name: "e", Data: &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: &metricspb.ExponentialHistogram{
			DataPoints:             []*metricspb.ExponentialHistogramDataPoint{{TimeUnixNano: 1, Exemplars: exemplars}},
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}}},
		{Name: "q", Data: &metricspb.Metric_Summary{Summary: &metricspb.Summary{DataPoints: []*metricspb.SummaryDataPoint{{TimeUnixNano: 1}}}}},
	}
	msgs := []struct {
		sig      otlp.Signal
		msg      proto.Message
		body     proto.Message // the member body's message
		oneItem  proto.Message // the late record's
		wantKind kind
	}{
		{otlp.SignalSpans, &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Scope: scope,
			Spans: []*tracepb.Span{{TraceId: tid, SpanId: sid, Name: "s"}}}}}}}, &braidpb.FusedSpan{}, &tracepb.TracesData{}, kindSpan},
		{otlp.SignalLogs, &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{Scope: scope,
			LogRecords: []*logspb.LogRecord{{TimeUnixNano: 1, TraceId: tid}}}}}}}, &braidpb.FusedLog{}, &logspb.LogsData{}, kindLog},
		{otlp.SignalMetrics, &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{Resource: res, ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: scope,
			Metrics: metrics}}}}}, &braidpb.FusedPoint{}, &metricspb.MetricsData{}, kindPoint},
	}
	d := otlp.NewDecoder()
	for _, m := range msgs {
		v, err := proto.Marshal(m.msg)
		if err != nil {
			t.Fatal(err)
		}
		items, err := d.Decode(m.sig, otlp.EncodingProto, v)
		if err != nil {
			t.Fatal(err)
		}
		var w chunkWriter
		for i := range items {
			w.appendItem(&items[i], m.sig, "in", 3, int64(i)+1)
		}
		n := 0
		err = readMembers(w.buf, func(mb *member) error {
			n++
			if mb.kind != m.wantKind {
				t.Errorf("%v: member of kind %d", m.sig, mb.kind)
			}
			if err := wirecheck.Check(mb.body, descriptor(m.body), inputOpaque...); err != nil {
				t.Errorf("%v member body: %v", m.sig, err)
			}
			if err := wirecheck.Check(oneItemMessage(mb), descriptor(m.oneItem), inputOpaque...); err != nil {
				t.Errorf("%v late record: %v", m.sig, err)
			}
			return nil
		})
		if err != nil || n != len(items) || n == 0 {
			t.Fatalf("%v: %d members of %d items: %v", m.sig, n, len(items), err)
		}
	}
}
