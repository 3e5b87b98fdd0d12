package semconv

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func i64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func f64(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func boolean(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func resource(t testing.TB, attrs ...*commonpb.KeyValue) []byte {
	return marshal(t, &resourcepb.Resource{Attributes: attrs})
}

type spanOpt func(*tracepb.Span)

func span(t testing.TB, name string, start, end uint64, attrs []*commonpb.KeyValue, opts ...spanOpt) []byte {
	s := &tracepb.Span{
		TraceId:           []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanId:            []byte{1, 1, 1, 1, 1, 1, 1, byte(len(name))},
		Name:              name,
		Kind:              tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: start,
		EndTimeUnixNano:   end,
		Attributes:        attrs,
	}
	for _, o := range opts {
		o(s)
	}
	return marshal(t, s)
}

func child(s *tracepb.Span) { s.ParentSpanId = []byte{9, 9, 9, 9, 9, 9, 9, 9} }

func events(ev ...*tracepb.Span_Event) spanOpt {
	return func(s *tracepb.Span) { s.Events = ev }
}

func logRecord(t testing.TB, ts uint64, body string, attrs ...*commonpb.KeyValue) []byte {
	l := &logspb.LogRecord{TimeUnixNano: ts, SeverityText: "INFO", Attributes: attrs}
	if body != "" {
		l.Body = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}}
	}
	return marshal(t, l)
}

func marshalLogWithBody(t testing.TB, body *commonpb.AnyValue) []byte {
	return marshal(t, &logspb.LogRecord{TimeUnixNano: 1, Body: body})
}

func prototextString(m proto.Message) string { return prototext.Format(m) }

func protoNum(n int) protowire.Number { return protowire.Number(n) }
