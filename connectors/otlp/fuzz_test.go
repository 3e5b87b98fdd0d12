package otlp

import (
	"errors"
	"testing"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzDecode: Decode never panics, fails only with a *DecodeError and no
// items, and when both it and a full proto.Unmarshal accept a protobuf
// value, it gives exactly the items the full decode implies.
func FuzzDecode(f *testing.F) {
	for _, s := range samples(f) {
		if len(s.v) > 8192 {
			continue
		}
		f.Add(uint8(s.sig), uint8(s.enc), s.v)
	}
	f.Add(uint8(SignalSpans), uint8(EncodingProto), []byte{0x0a, 0x02, 0x12, 0x00})
	f.Add(uint8(SignalMetrics), uint8(EncodingJSON), []byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"exemplars":[{"traceId":"0102030405060708090a0b0c0d0e0f10"}]}]}}]}]}]}`))
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, s, e uint8, value []byte) {
		sig := Signal(s%3 + 1)
		enc := Encoding(e%2 + 1)
		items, err := d.Decode(sig, enc, value)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || items != nil {
				t.Fatalf("error %T %v with %d items", err, err, len(items))
			}
			if de.Offset < -1 || de.Offset > len(value) || de.Signal != sig || de.Encoding != enc {
				t.Fatalf("bad error %+v", de)
			}
			return
		}
		for i := range items {
			if items[i].Signal != sig {
				t.Fatalf("item %d: signal %v", i, items[i].Signal)
			}
			if sig == SignalSpans && (items[i].TraceID == [16]byte{}) {
				t.Fatalf("span with zero trace id")
			}
		}
		// Whatever the input, every item's bytes unmarshal (strings are
		// valid UTF-8, nesting is bounded).
		for i := range items {
			it := &items[i]
			if err := proto.Unmarshal(it.Payload, payloadType(sig, it.PointType)); err != nil {
				t.Fatalf("item %d: Payload: %v", i, err)
			}
			if err := proto.Unmarshal(it.Resource, &resourcepb.Resource{}); err != nil {
				t.Fatalf("item %d: Resource: %v", i, err)
			}
			if err := proto.Unmarshal(it.Scope, &commonpb.InstrumentationScope{}); err != nil {
				t.Fatalf("item %d: Scope: %v", i, err)
			}
			for _, s := range [][]byte{it.Name, it.MetricDescription, it.MetricUnit} {
				if !utf8.Valid(s) {
					t.Fatalf("item %d: invalid UTF-8 %q", i, s)
				}
			}
		}
		if enc != EncodingProto {
			return
		}
		msg := newMessage(sig)
		if proto.Unmarshal(value, msg) != nil {
			return
		}
		checkItems(t, msg, items, false)
	})
}

func payloadType(sig Signal, pt PointType) proto.Message {
	switch sig {
	case SignalSpans:
		return &tracepb.Span{}
	case SignalLogs:
		return &logspb.LogRecord{}
	}
	switch pt {
	case PointHistogram:
		return &metricspb.HistogramDataPoint{}
	case PointExpHistogram:
		return &metricspb.ExponentialHistogramDataPoint{}
	case PointSummary:
		return &metricspb.SummaryDataPoint{}
	}
	return &metricspb.NumberDataPoint{}
}
