package otlp

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// bad is a placeholder replaced by invalid UTF-8 of the same length after
// marshalling (proto.Marshal refuses invalid strings).
const bad = "<BAD>"

func withInvalidUTF8(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(bad)) {
		t.Fatal("placeholder missing")
	}
	return bytes.ReplaceAll(b, []byte(bad), []byte("a\xff\xfeb\xc3"))
}

func strVal(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

func nested(v *commonpb.AnyValue, levels int) *commonpb.AnyValue {
	for range levels {
		v = &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{kv("k", v)}}}}
	}
	return v
}

func testSpan(mod func(*tracepb.Span)) *tracepb.Span {
	s := &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), Name: "op", StartTimeUnixNano: 1, EndTimeUnixNano: 2}
	if mod != nil {
		mod(s)
	}
	return s
}

func spansData(res *resourcepb.Resource, scope *commonpb.InstrumentationScope, spans ...*tracepb.Span) *tracepb.TracesData {
	return &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Scope: scope, Spans: spans}}}}}
}

// hasReplacement reports whether some string field of m, at any depth,
// holds U+FFFD.
func hasReplacement(m protoreflect.Message) bool {
	found := false
	var walk func(m protoreflect.Message)
	var value func(fd protoreflect.FieldDescriptor, v protoreflect.Value)
	value = func(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
		switch fd.Kind() {
		case protoreflect.StringKind:
			if strings.ContainsRune(v.String(), '\uFFFD') {
				found = true
			}
		case protoreflect.MessageKind:
			walk(v.Message())
		}
	}
	walk = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.IsList() {
				l := v.List()
				for i := range l.Len() {
					value(fd, l.Get(i))
				}
			} else if !fd.IsMap() {
				value(fd, v)
			}
			return true
		})
	}
	walk(m)
	return found
}

func TestInvalidUTF8IsRepairedInEveryStringField(t *testing.T) {
	res := func(v string) *resourcepb.Resource {
		return &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", strVal(v))}}
	}
	cases := []struct {
		name string
		sig  Signal
		msg  proto.Message
	}{
		{"span name", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) { s.Name = bad }))},
		{"span trace_state", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) { s.TraceState = bad }))},
		{"span attribute value", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			s.Attributes = []*commonpb.KeyValue{kv("gen_ai.request.model", strVal(bad))}
		}))},
		{"span attribute key", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			s.Attributes = []*commonpb.KeyValue{kv(bad, strVal("x"))}
		}))},
		{"nested attribute value", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			arr := &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{strVal("ok"), nested(strVal(bad), 5)}}}}
			s.Attributes = []*commonpb.KeyValue{kv("a", arr)}
		}))},
		{"event name", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			s.Events = []*tracepb.Span_Event{{Name: bad}}
		}))},
		{"link attribute", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			s.Links = []*tracepb.Span_Link{{TraceId: bytes.Repeat([]byte{3}, 16), SpanId: bytes.Repeat([]byte{4}, 8), Attributes: []*commonpb.KeyValue{kv("l", strVal(bad))}}}
		}))},
		{"status message", SignalSpans, spansData(nil, nil, testSpan(func(s *tracepb.Span) {
			s.Status = &tracepb.Status{Message: bad, Code: tracepb.Status_STATUS_CODE_ERROR}
		}))},
		{"resource attribute", SignalSpans, spansData(res(bad), nil, testSpan(nil))},
		{"scope name", SignalSpans, spansData(nil, &commonpb.InstrumentationScope{Name: bad}, testSpan(nil))},
		{"scope attribute", SignalSpans, spansData(nil, &commonpb.InstrumentationScope{Name: "s", Attributes: []*commonpb.KeyValue{kv("k", strVal(bad))}}, testSpan(nil))},
		{"log body", SignalLogs, &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TimeUnixNano: 1, Body: strVal(bad)}}}}}}}},
		{"log severity and attribute", SignalLogs, &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TimeUnixNano: 1, SeverityText: bad, Attributes: []*commonpb.KeyValue{kv("gen_ai.request.id", strVal(bad))}}}}}}}}},
		{"point attribute and exemplar", SignalMetrics, &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
			Name: "m", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{DataPoints: []*metricspb.HistogramDataPoint{{
				TimeUnixNano: 1, Attributes: []*commonpb.KeyValue{kv("p", strVal(bad))},
				Exemplars: []*metricspb.Exemplar{{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), FilteredAttributes: []*commonpb.KeyValue{kv("e", strVal(bad))}}},
			}}}},
		}}}}}}}},
		{"metric name", SignalMetrics, &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
			Name: bad, Unit: bad, Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{TimeUnixNano: 1}}}},
		}}}}}}}},
	}
	d := NewDecoder()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			value := withInvalidUTF8(t, c.msg)
			// What a consumer would do with the bytes as they came.
			if err := proto.Unmarshal(value, proto.Clone(c.msg)); err == nil {
				t.Fatal("test input is valid UTF-8")
			}
			items, err := d.Decode(c.sig, EncodingProto, value)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != 1 {
				t.Fatalf("%d items, want 1", len(items))
			}
			it := items[0]
			var payload proto.Message
			switch c.sig {
			case SignalSpans:
				payload = &tracepb.Span{}
			case SignalLogs:
				payload = &logspb.LogRecord{}
			default:
				payload = &metricspb.HistogramDataPoint{}
				if it.PointType == PointGauge {
					payload = &metricspb.NumberDataPoint{}
				}
			}
			found := false
			for _, part := range []struct {
				b []byte
				m proto.Message
			}{{it.Payload, payload}, {it.Resource, &resourcepb.Resource{}}, {it.Scope, &commonpb.InstrumentationScope{}}} {
				if err := proto.Unmarshal(part.b, part.m); err != nil {
					t.Fatalf("%T does not unmarshal: %v", part.m, err)
				}
				found = found || hasReplacement(part.m.ProtoReflect())
			}
			for _, s := range [][]byte{it.Name, it.MetricUnit} {
				if strings.ContainsRune(string(s), '\uFFFD') {
					found = true
				}
			}
			if !found {
				t.Fatal("no U+FFFD in the repaired item")
			}
			if c.sig != SignalMetrics || c.name != "metric name" {
				if d.Repaired() == 0 {
					t.Fatal("Repaired() = 0")
				}
			}
		})
	}
}

func TestValidUTF8IsNotCopied(t *testing.T) {
	msg := spansData(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", strVal("vllé"))}}, &commonpb.InstrumentationScope{Name: "s"},
		testSpan(func(s *tracepb.Span) { s.Attributes = []*commonpb.KeyValue{kv("a", nested(strVal("ü"), 10))} }))
	value, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	items, err := d.Decode(SignalSpans, EncodingProto, value)
	if err != nil {
		t.Fatal(err)
	}
	if d.Repaired() != 0 {
		t.Fatalf("Repaired() = %d for valid input", d.Repaired())
	}
	inValue := func(b []byte) bool {
		p, s := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(value)))
		return p >= s && p < s+uintptr(len(value))
	}
	for _, b := range [][]byte{items[0].Payload, items[0].Resource, items[0].Scope} {
		if !inValue(b) {
			t.Fatal("valid item bytes were copied")
		}
	}
	if res, payload := items[0].Original(); items[0].Repaired() || !sameSlice(res, items[0].Resource) || !sameSlice(payload, items[0].Payload) {
		t.Fatal("a valid item is reported repaired, or its Original bytes are not its own")
	}
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// TestOriginalIsTheMemberAsRead: a repaired item says so and hands out its
// resource and payload as the message held them, invalid bytes and all,
// without a copy; an item of the same resource with a valid payload is
// repaired only in its resource.
func TestOriginalIsTheMemberAsRead(t *testing.T) {
	ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("host.name", strVal(bad))}},
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{
			{TimeUnixNano: 1, Attributes: []*commonpb.KeyValue{kv("gen_ai.request.id", strVal(bad))}},
			{TimeUnixNano: 2, Attributes: []*commonpb.KeyValue{kv("gen_ai.request.id", strVal("r1"))}},
		}}},
	}, {
		Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("host.name", strVal("node-a"))}},
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TimeUnixNano: 3, Body: strVal("ok")}}}},
	}}}
	value := withInvalidUTF8(t, ld)
	invalid := []byte("a\xff\xfeb\xc3")
	d := NewDecoder()
	items, err := d.Decode(SignalLogs, EncodingProto, value)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("%d items, want 3", len(items))
	}
	inValue := func(b []byte) bool {
		p, s := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(value)))
		return p >= s && p+uintptr(len(b)) <= s+uintptr(len(value))
	}
	for i, it := range items[:2] {
		res, payload := it.Original()
		if !it.Repaired() {
			t.Fatalf("item %d: not reported repaired", i)
		}
		if !inValue(res) || !bytes.Contains(res, invalid) || bytes.Contains(it.Resource, invalid) {
			t.Fatalf("item %d: Original resource %q, Resource %q", i, res, it.Resource)
		}
		if err := proto.Unmarshal(it.Resource, &resourcepb.Resource{}); err != nil {
			t.Fatalf("item %d: repaired resource: %v", i, err)
		}
		if !inValue(payload) || cap(res) != len(res) || cap(payload) != len(payload) {
			t.Fatalf("item %d: Original bytes copied or not clipped", i)
		}
		if i == 0 && (!bytes.Contains(payload, invalid) || bytes.Contains(it.Payload, invalid)) {
			t.Fatalf("item 0: Original payload %q, Payload %q", payload, it.Payload)
		}
		if i == 1 && !sameSlice(payload, it.Payload) {
			t.Fatal("item 1: a valid payload's Original is not the payload")
		}
	}
	if res, payload := items[2].Original(); items[2].Repaired() || !sameSlice(res, items[2].Resource) || !sameSlice(payload, items[2].Payload) {
		t.Fatal("item 2 (another resource, all valid) reported repaired")
	}
}

func TestDeepNestingIsRejected(t *testing.T) {
	d := NewDecoder()
	for _, levels := range []int{MaxNesting / 3, 100_000} {
		msg := spansData(nil, nil, testSpan(func(s *tracepb.Span) { s.Attributes = []*commonpb.KeyValue{kv("deep", nested(strVal("x"), levels))} }))
		value, err := proto.MarshalOptions{}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Decode(SignalSpans, EncodingProto, value)
		if levels == MaxNesting/3 {
			if err != nil {
				t.Fatalf("%d levels: %v", levels, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "nested deeper than") {
			t.Fatalf("%d levels: err %v, want nesting error", levels, err)
		}
	}
}
