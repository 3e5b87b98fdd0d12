package otlp

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestRoundTripProto(t *testing.T) {
	d := NewDecoder()
	for _, sig := range allSignals {
		t.Run(sig.String(), func(t *testing.T) {
			total := 0
			for seed := range seeds(300) {
				msg := newGen(seed).message(sig)
				b, err := proto.Marshal(msg)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) == 0 {
					continue
				}
				items := mustDecode(t, d, sig, EncodingProto, b)
				checkItems(t, msg, items, true)
				total += len(items)
			}
			if total < int(seeds(300)) {
				t.Fatalf("only %d items over all seeds", total)
			}
		})
	}
}

func TestRoundTripJSON(t *testing.T) {
	d := NewDecoder()
	for _, sig := range allSignals {
		for _, mode := range []struct {
			name    string
			opts    protojson.MarshalOptions
			numbers bool
		}{
			{"collector", protojson.MarshalOptions{UseEnumNumbers: true}, false}, // what the Collector writes
			{"snake_case+enum_names", protojson.MarshalOptions{UseProtoNames: true}, false},
			{"ints_as_numbers", protojson.MarshalOptions{UseEnumNumbers: true, Multiline: true}, true},
		} {
			t.Run(sig.String()+"/"+mode.name, func(t *testing.T) {
				for seed := range seeds(120) {
					msg := newGen(seed).message(sig)
					if size := proto.Size(msg); size == 0 {
						continue
					}
					pj, err := mode.opts.Marshal(msg)
					if err != nil {
						t.Fatal(err)
					}
					js := toOTLPJSON(t, pj, mode.numbers)
					items := mustDecode(t, d, sig, EncodingJSON, js)
					checkItems(t, msg, items, true)
					// The same items as from the protobuf encoding.
					b, _ := proto.Marshal(msg)
					pitems := mustDecode(t, NewDecoder(), sig, EncodingProto, b)
					if len(pitems) != len(items) {
						t.Fatalf("%d JSON items, %d proto items", len(items), len(pitems))
					}
				}
			})
		}
	}
}

// The Collector (pdata) writes fields in reverse order; anything may come
// with unknown fields in between.
func TestFieldOrder(t *testing.T) {
	d := NewDecoder()
	for _, sig := range allSignals {
		t.Run(sig.String(), func(t *testing.T) {
			for seed := range seeds(200) {
				msg := newGen(seed).message(sig)
				b, _ := proto.Marshal(msg)
				if len(b) == 0 {
					continue
				}
				fwd := append([]Item(nil), mustDecode(t, d, sig, EncodingProto, b)...)
				rev := reorderWire(t, b, descriptorOf(sig), nil)
				if bytes.Equal(rev, b) && len(fwd) > 1 {
					t.Fatal("reordering changed nothing")
				}
				// The reordered message is the same message.
				back := newMessage(sig)
				if err := proto.Unmarshal(rev, back); err != nil || !proto.Equal(back, msg) {
					t.Fatalf("reordered message differs: %v", err)
				}
				checkItems(t, msg, mustDecode(t, d, sig, EncodingProto, rev), true)
				junk := reorderWire(t, b, descriptorOf(sig), rand.New(rand.NewPCG(seed, 1)))
				items := mustDecode(t, d, sig, EncodingProto, junk)
				checkItems(t, msg, items, true)
				for i := range items {
					if !bytes.Equal(items[i].Name, fwd[i].Name) || items[i].TraceID != fwd[i].TraceID {
						t.Fatalf("item %d differs", i)
					}
				}
			}
		})
	}
	// The fixtures are in pdata's reverse order: in ascending order they give
	// the same items.
	for _, r := range loadFixtures(t) {
		if r.Enc != EncodingProto {
			continue
		}
		msg := newMessage(r.Signal)
		if err := proto.Unmarshal(r.Value, msg); err != nil {
			t.Fatal(err)
		}
		asc, _ := proto.Marshal(msg)
		if bytes.Equal(asc, r.Value) {
			t.Fatalf("%s/%s: fixture already in ascending order", r.Folder, r.Name)
		}
		checkItems(t, msg, mustDecode(t, d, r.Signal, EncodingProto, r.Value), true)
		checkItems(t, msg, mustDecode(t, d, r.Signal, EncodingProto, asc), true)
	}
}

// Duplicate fields follow proto3: scalars and resource/scope take the last
// occurrence, status messages merge, the metric's data oneof is replaced by
// another member and merges with the same member.
func TestDuplicateFields(t *testing.T) {
	d := NewDecoder()
	tid1, tid2 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	sid := bytes.Repeat([]byte{3}, 8)
	m := func(msg proto.Message) []byte {
		b, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	field := func(num protowire.Number, msg []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), msg)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	// Span: trace_id twice, status twice (code in the first only), name twice.
	span := cat(m(&tracepb.Span{TraceId: tid1, SpanId: sid, Name: "first", Status: &tracepb.Status{Code: 2}}),
		m(&tracepb.Span{TraceId: tid2, Name: "second", Status: &tracepb.Status{Message: "m"}}))
	res1 := m(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "a"}}}}})
	res2 := m(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "b"}}}}})
	scope1, scope2 := m(&commonpb.InstrumentationScope{Name: "s1"}), m(&commonpb.InstrumentationScope{Name: "s2"})
	ss := cat(field(1, scope1), field(2, span), field(1, scope2))
	rs := cat(field(1, res1), field(2, ss), field(1, res2))
	td := field(1, rs)
	items := mustDecode(t, d, SignalSpans, EncodingProto, td)
	var full tracepb.TracesData
	if err := proto.Unmarshal(td, &full); err != nil {
		t.Fatal(err)
	}
	want := full.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if len(items) != 1 || items[0].TraceID != [16]byte(tid2) || string(items[0].Name) != "second" ||
		items[0].StatusCode != int32(want.Status.Code) || items[0].StatusCode != 2 {
		t.Fatalf("got %s, protobuf says %v", describe(&items[0]), want)
	}
	if !bytes.Equal(items[0].Resource, res2) || !bytes.Equal(items[0].Scope, scope2) {
		t.Fatalf("resource/scope: not the last occurrence")
	}

	// Metric: gauge, then sum (replaces it), then sum again (merges).
	pt := func(ts uint64, ex ...*metricspb.Exemplar) *metricspb.NumberDataPoint {
		return &metricspb.NumberDataPoint{TimeUnixNano: ts, Exemplars: ex}
	}
	metric := cat(
		m(&metricspb.Metric{Name: "old", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{pt(1), pt(2)}}}}),
		m(&metricspb.Metric{Name: "new", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: []*metricspb.NumberDataPoint{pt(3)}, AggregationTemporality: 1}}}),
		m(&metricspb.Metric{Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{IsMonotonic: true, DataPoints: []*metricspb.NumberDataPoint{
			pt(4, &metricspb.Exemplar{TraceId: tid1, SpanId: sid}, &metricspb.Exemplar{TraceId: tid2}, &metricspb.Exemplar{TraceId: tid1}, &metricspb.Exemplar{TraceId: make([]byte, 16)}),
		}}}}),
	)
	md := field(1, field(2, field(2, metric)))
	var fullM metricspb.MetricsData
	if err := proto.Unmarshal(md, &fullM); err != nil {
		t.Fatal(err)
	}
	items = mustDecode(t, d, SignalMetrics, EncodingProto, md)
	checkItems(t, &fullM, items, true)
	if len(items) != 3 || items[0].Time != 3 || items[1].Time != 4 || items[2].Time != 4 ||
		items[1].TraceID != [16]byte(tid1) || items[1].SpanID != [8]byte(sid) || items[2].TraceID != [16]byte(tid2) || items[2].SpanID != ([8]byte{}) ||
		items[0].PointType != PointSum || items[0].Temporality != 1 || !items[0].Monotonic || string(items[0].Name) != "new" ||
		!sameBytes(items[1].Payload, items[2].Payload) {
		for i := range items {
			t.Log(describe(&items[i]))
		}
		t.Fatal("wrong items")
	}
}

func TestLogTimes(t *testing.T) {
	d := NewDecoder()
	tid := bytes.Repeat([]byte{7}, 16)
	b, _ := proto.Marshal(&logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{
		{TimeUnixNano: 10, ObservedTimeUnixNano: 20, TraceId: tid},
		{ObservedTimeUnixNano: 30, TraceId: []byte{}},
		{},
	}}}}}})
	items := mustDecode(t, d, SignalLogs, EncodingProto, b)
	if len(items) != 3 || items[0].Time != 10 || items[0].StartTime != 10 || items[0].TraceID != [16]byte(tid) ||
		items[1].Time != 30 || items[1].StartTime != 30 || items[1].TraceID != ([16]byte{}) || items[2].Time != 0 {
		t.Fatalf("got %v %v %v", describe(&items[0]), describe(&items[1]), describe(&items[2]))
	}
	if items[0].Resource != nil || items[0].Scope != nil {
		t.Fatal("absent resource/scope must be nil")
	}
}

func TestHalfZeroTraceID(t *testing.T) {
	d := NewDecoder()
	tid := make([]byte, 16)
	tid[15] = 0x2a // SGLang: upper 8 bytes zero
	sp, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{TraceId: tid, SpanId: []byte("12345678"), Name: "Req 1"}}}}}}})
	items := mustDecode(t, d, SignalSpans, EncodingProto, sp)
	if len(items) != 1 || items[0].TraceID != [16]byte(tid) {
		t.Fatal("half-zero trace id lost")
	}
	js := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0000000000000000000000000000002a","spanId":"3132333435363738","name":"Req 1"}]}]}]}`
	items = mustDecode(t, d, SignalSpans, EncodingJSON, []byte(js))
	if len(items) != 1 || items[0].TraceID != [16]byte(tid) || items[0].SpanID != [8]byte([]byte("12345678")) {
		t.Fatal("half-zero trace id lost in JSON")
	}
}

func TestReuseAndZeroAlloc(t *testing.T) {
	b := newBenchBatch(t)
	d := NewDecoder()
	for _, m := range b.msgs {
		mustDecode(t, d, m.sig, EncodingProto, m.proto)
	}
	allocs := testing.AllocsPerRun(50, func() {
		for _, m := range b.msgs {
			if _, err := d.Decode(m.sig, EncodingProto, m.proto); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("proto Decode allocates %.1f times per batch in steady state", allocs)
	}
	// JSON: the Decoder is reusable and gives the same items each time.
	for _, m := range b.msgs {
		first := len(mustDecode(t, d, m.sig, EncodingJSON, m.json))
		if again := len(mustDecode(t, d, m.sig, EncodingJSON, m.json)); again != first || first != m.items {
			t.Fatalf("%v: %d then %d items, want %d", m.sig, first, again, m.items)
		}
	}
}

func TestEnumsAndErrors(t *testing.T) {
	for _, c := range []struct {
		s   string
		enc Encoding
	}{{"otlp_proto", EncodingProto}, {"otlp_json", EncodingJSON}} {
		enc, err := ParseEncoding(c.s)
		if err != nil || enc != c.enc || enc.String() != c.s {
			t.Errorf("ParseEncoding(%q) = %v, %v", c.s, enc, err)
		}
	}
	for _, s := range []string{"", "proto", "otlp_JSON", "raw"} {
		if _, err := ParseEncoding(s); err == nil {
			t.Errorf("ParseEncoding(%q) succeeded", s)
		}
	}
	if SignalSpans.String() != "spans" || SignalLogs.String() != "logs" || SignalMetrics.String() != "metrics" || Signal(9).String() != "Signal(9)" {
		t.Error("Signal.String")
	}
	if PointGauge != 5 || PointSum != 7 || PointHistogram != 9 || PointExpHistogram != 10 || PointSummary != 11 {
		t.Error("PointType values must be the Metric field numbers")
	}
	e := &DecodeError{Signal: SignalSpans, Encoding: EncodingProto, Reason: "truncated", Offset: 12}
	if got := e.Error(); got != "otlp: decode spans (otlp_proto): truncated at byte 12" {
		t.Errorf("Error() = %q", got)
	}
	e.Offset = -1
	if got := e.Error(); got != "otlp: decode spans (otlp_proto): truncated" {
		t.Errorf("Error() = %q", got)
	}
	d := NewDecoder()
	if _, err := d.Decode(0, EncodingProto, []byte{10, 0}); err == nil {
		t.Error("unknown signal accepted")
	}
	if _, err := d.Decode(SignalSpans, 0, []byte{10, 0}); err == nil || !strings.Contains(err.Error(), "unknown encoding") {
		t.Errorf("unknown encoding: %v", err)
	}
}
