package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ---------------------------------------------------------------------------
// Random OTLP messages.

type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

func (g *gen) str(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-._ /:{}\"\\é"
	rs := []rune(alphabet)
	var b []rune
	for range g.r.IntN(n + 1) {
		b = append(b, rs[g.r.IntN(len(rs))])
	}
	return string(b)
}

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

func (g *gen) traceID() []byte {
	for {
		b := g.bytes(16)
		if g.r.IntN(5) == 0 { // SGLang style: upper 8 bytes zero
			clear(b[:8])
		}
		if !isZero16(b) {
			return b
		}
	}
}

func (g *gen) time() uint64 { return 1_700_000_000_000_000_000 + g.r.Uint64N(1<<50) }

func (g *gen) anyValue(depth int) *commonpb.AnyValue {
	k := g.r.IntN(7)
	if depth > 2 {
		k = g.r.IntN(5)
	}
	switch k {
	case 0:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: g.str(12)}}
	case 1:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(g.r.Uint64())}}
	case 2:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: g.r.NormFloat64() * 1e6}}
	case 3:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: g.r.IntN(2) == 0}}
	case 4:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: g.bytes(g.r.IntN(9))}}
	case 5:
		a := &commonpb.ArrayValue{}
		for range g.r.IntN(3) {
			a.Values = append(a.Values, g.anyValue(depth+1))
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: a}}
	default:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: g.attrs(3, depth+1)}}}
	}
}

func (g *gen) attrs(n, depth int) []*commonpb.KeyValue {
	var kvs []*commonpb.KeyValue
	for range g.r.IntN(n + 1) {
		// "traceId" as an attribute key must not be mistaken for an id.
		key := []string{"gen_ai.request.id", "traceId", "spanId", "service.name", g.str(10)}[g.r.IntN(5)]
		kvs = append(kvs, &commonpb.KeyValue{Key: key, Value: g.anyValue(depth)})
	}
	return kvs
}

func (g *gen) resource() *resourcepb.Resource {
	if g.r.IntN(5) == 0 {
		return nil
	}
	res := &resourcepb.Resource{Attributes: g.attrs(3, 0), DroppedAttributesCount: uint32(g.r.IntN(3))}
	res.Attributes = append(res.Attributes, &commonpb.KeyValue{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "svc-" + g.str(4)}}})
	return res
}

func (g *gen) scope() *commonpb.InstrumentationScope {
	if g.r.IntN(5) == 0 {
		return nil
	}
	return &commonpb.InstrumentationScope{Name: g.str(8), Version: g.str(4), Attributes: g.attrs(2, 0), DroppedAttributesCount: uint32(g.r.IntN(2))}
}

func (g *gen) span(traceID []byte) *tracepb.Span {
	start := g.time()
	s := &tracepb.Span{
		TraceId:                traceID,
		SpanId:                 g.bytes(8),
		TraceState:             g.str(6),
		Flags:                  g.r.Uint32(),
		Name:                   g.str(16),
		Kind:                   tracepb.Span_SpanKind(g.r.IntN(6)),
		StartTimeUnixNano:      start,
		EndTimeUnixNano:        start + g.r.Uint64N(1e10),
		Attributes:             g.attrs(12, 0),
		DroppedAttributesCount: uint32(g.r.IntN(3)),
		DroppedEventsCount:     uint32(g.r.IntN(3)),
		DroppedLinksCount:      uint32(g.r.IntN(3)),
	}
	if g.r.IntN(3) != 0 {
		s.ParentSpanId = g.bytes(8)
	}
	for range g.r.IntN(3) {
		s.Events = append(s.Events, &tracepb.Span_Event{TimeUnixNano: g.time(), Name: g.str(8), Attributes: g.attrs(2, 0)})
	}
	for range g.r.IntN(3) {
		s.Links = append(s.Links, &tracepb.Span_Link{TraceId: g.traceID(), SpanId: g.bytes(8), TraceState: g.str(3), Attributes: g.attrs(2, 0), Flags: g.r.Uint32()})
	}
	if g.r.IntN(3) != 0 {
		s.Status = &tracepb.Status{Message: g.str(8), Code: tracepb.Status_StatusCode(g.r.IntN(3))}
	}
	return s
}

func (g *gen) traces() *tracepb.TracesData {
	td := &tracepb.TracesData{}
	ids := [][]byte{g.traceID(), g.traceID(), g.traceID()}
	for range 1 + g.r.IntN(3) {
		rs := &tracepb.ResourceSpans{Resource: g.resource(), SchemaUrl: g.str(10)}
		for range 1 + g.r.IntN(3) {
			ss := &tracepb.ScopeSpans{Scope: g.scope(), SchemaUrl: g.str(5)}
			for range g.r.IntN(5) {
				ss.Spans = append(ss.Spans, g.span(ids[g.r.IntN(len(ids))]))
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		td.ResourceSpans = append(td.ResourceSpans, rs)
	}
	return td
}

func (g *gen) logRecord(ids [][]byte) *logspb.LogRecord {
	l := &logspb.LogRecord{
		ObservedTimeUnixNano:   g.time(),
		SeverityNumber:         logspb.SeverityNumber(g.r.IntN(25)),
		SeverityText:           g.str(5),
		Body:                   g.anyValue(0),
		Attributes:             g.attrs(6, 0),
		DroppedAttributesCount: uint32(g.r.IntN(3)),
		Flags:                  g.r.Uint32(),
		EventName:              g.str(6),
	}
	if g.r.IntN(4) != 0 {
		l.TimeUnixNano = g.time()
	}
	if g.r.IntN(3) != 0 {
		l.TraceId = ids[g.r.IntN(len(ids))]
		if g.r.IntN(4) != 0 {
			l.SpanId = g.bytes(8)
		}
	}
	return l
}

func (g *gen) logs() *logspb.LogsData {
	ld := &logspb.LogsData{}
	ids := [][]byte{g.traceID(), g.traceID()}
	for range 1 + g.r.IntN(3) {
		rl := &logspb.ResourceLogs{Resource: g.resource(), SchemaUrl: g.str(10)}
		for range 1 + g.r.IntN(3) {
			sl := &logspb.ScopeLogs{Scope: g.scope(), SchemaUrl: g.str(5)}
			for range g.r.IntN(5) {
				sl.LogRecords = append(sl.LogRecords, g.logRecord(ids))
			}
			rl.ScopeLogs = append(rl.ScopeLogs, sl)
		}
		ld.ResourceLogs = append(ld.ResourceLogs, rl)
	}
	return ld
}

func (g *gen) exemplars(ids [][]byte) []*metricspb.Exemplar {
	var ex []*metricspb.Exemplar
	for range g.r.IntN(4) {
		e := &metricspb.Exemplar{FilteredAttributes: g.attrs(2, 0), TimeUnixNano: g.time()}
		if g.r.IntN(2) == 0 {
			e.Value = &metricspb.Exemplar_AsDouble{AsDouble: g.r.Float64()}
		} else {
			e.Value = &metricspb.Exemplar_AsInt{AsInt: g.r.Int64()}
		}
		if g.r.IntN(4) != 0 {
			e.TraceId = ids[g.r.IntN(len(ids))]
			if g.r.IntN(4) != 0 {
				e.SpanId = g.bytes(8)
			}
		}
		ex = append(ex, e)
	}
	return ex
}

func (g *gen) optFloat() *float64 {
	if g.r.IntN(2) == 0 {
		return nil
	}
	f := g.r.Float64() * 100
	return &f
}

func (g *gen) metric(ids [][]byte) *metricspb.Metric {
	m := &metricspb.Metric{Name: g.str(12), Description: g.str(20), Unit: g.str(3), Metadata: g.attrs(2, 0)}
	n := 1 + g.r.IntN(3)
	temporality := metricspb.AggregationTemporality(g.r.IntN(3))
	switch g.r.IntN(5) {
	case 0, 1:
		var pts []*metricspb.NumberDataPoint
		for range n {
			p := &metricspb.NumberDataPoint{Attributes: g.attrs(3, 0), StartTimeUnixNano: g.time(), TimeUnixNano: g.time(), Exemplars: g.exemplars(ids), Flags: uint32(g.r.IntN(2))}
			if g.r.IntN(2) == 0 {
				p.Value = &metricspb.NumberDataPoint_AsDouble{AsDouble: g.r.Float64()}
			} else {
				p.Value = &metricspb.NumberDataPoint_AsInt{AsInt: g.r.Int64()}
			}
			pts = append(pts, p)
		}
		if g.r.IntN(2) == 0 {
			m.Data = &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: pts}}
		} else {
			m.Data = &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: pts, AggregationTemporality: temporality, IsMonotonic: g.r.IntN(2) == 0}}
		}
	case 2:
		h := &metricspb.Histogram{AggregationTemporality: temporality}
		for range n {
			p := &metricspb.HistogramDataPoint{Attributes: g.attrs(3, 0), StartTimeUnixNano: g.time(), TimeUnixNano: g.time(), Count: g.r.Uint64N(1000), Sum: g.optFloat(), Exemplars: g.exemplars(ids), Min: g.optFloat(), Max: g.optFloat()}
			for range g.r.IntN(6) {
				p.ExplicitBounds = append(p.ExplicitBounds, g.r.Float64())
				p.BucketCounts = append(p.BucketCounts, g.r.Uint64N(100))
			}
			h.DataPoints = append(h.DataPoints, p)
		}
		m.Data = &metricspb.Metric_Histogram{Histogram: h}
	case 3:
		h := &metricspb.ExponentialHistogram{AggregationTemporality: temporality}
		for range n {
			p := &metricspb.ExponentialHistogramDataPoint{Attributes: g.attrs(3, 0), StartTimeUnixNano: g.time(), TimeUnixNano: g.time(), Count: g.r.Uint64N(1000), Sum: g.optFloat(), Scale: int32(g.r.IntN(20)) - 10, ZeroCount: g.r.Uint64N(5), Exemplars: g.exemplars(ids), ZeroThreshold: g.r.Float64()}
			p.Positive = &metricspb.ExponentialHistogramDataPoint_Buckets{Offset: int32(g.r.IntN(10)) - 5, BucketCounts: []uint64{g.r.Uint64N(9), g.r.Uint64N(9)}}
			if g.r.IntN(2) == 0 {
				p.Negative = &metricspb.ExponentialHistogramDataPoint_Buckets{Offset: 1, BucketCounts: []uint64{g.r.Uint64N(9)}}
			}
			h.DataPoints = append(h.DataPoints, p)
		}
		m.Data = &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: h}
	default:
		s := &metricspb.Summary{}
		for range n {
			p := &metricspb.SummaryDataPoint{Attributes: g.attrs(3, 0), StartTimeUnixNano: g.time(), TimeUnixNano: g.time(), Count: g.r.Uint64N(1000), Sum: g.r.Float64()}
			p.QuantileValues = []*metricspb.SummaryDataPoint_ValueAtQuantile{{Quantile: 0.5, Value: g.r.Float64()}, {Quantile: 0.99, Value: g.r.Float64()}}
			s.DataPoints = append(s.DataPoints, p)
		}
		m.Data = &metricspb.Metric_Summary{Summary: s}
	}
	return m
}

func (g *gen) metrics() *metricspb.MetricsData {
	md := &metricspb.MetricsData{}
	ids := [][]byte{g.traceID(), g.traceID(), g.traceID()}
	for range 1 + g.r.IntN(3) {
		rm := &metricspb.ResourceMetrics{Resource: g.resource(), SchemaUrl: g.str(10)}
		for range 1 + g.r.IntN(3) {
			sm := &metricspb.ScopeMetrics{Scope: g.scope(), SchemaUrl: g.str(5)}
			for range g.r.IntN(4) {
				sm.Metrics = append(sm.Metrics, g.metric(ids))
			}
			rm.ScopeMetrics = append(rm.ScopeMetrics, sm)
		}
		md.ResourceMetrics = append(md.ResourceMetrics, rm)
	}
	return md
}

func (g *gen) message(sig Signal) proto.Message {
	switch sig {
	case SignalSpans:
		return g.traces()
	case SignalLogs:
		return g.logs()
	}
	return g.metrics()
}

// ---------------------------------------------------------------------------
// Expected items, computed from the Go types.

type wantItem struct {
	Item                    // ids, times, names, metric fields; byte slices unused except names
	resource  proto.Message // never nil
	scope     proto.Message // never nil
	payload   proto.Message
	payloadMT proto.Message // empty message of the payload's type
}

func orEmptyResource(r *resourcepb.Resource) proto.Message {
	if r == nil {
		return &resourcepb.Resource{}
	}
	return r
}

func orEmptyScope(s *commonpb.InstrumentationScope) proto.Message {
	if s == nil {
		return &commonpb.InstrumentationScope{}
	}
	return s
}

func id16(b []byte) (id [16]byte) {
	if len(b) == 16 {
		id = [16]byte(b)
	}
	return id
}

func id8(b []byte) (id [8]byte) {
	if len(b) == 8 {
		id = [8]byte(b)
	}
	return id
}

func wantItems(msg proto.Message) []wantItem {
	var out []wantItem
	switch m := msg.(type) {
	case *tracepb.TracesData:
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, wantItem{
						Item: Item{Signal: SignalSpans, TraceID: id16(s.TraceId), SpanID: id8(s.SpanId), ParentSpanID: id8(s.ParentSpanId),
							Time: int64(s.EndTimeUnixNano), StartTime: int64(s.StartTimeUnixNano), Name: []byte(s.Name), StatusCode: int32(s.GetStatus().GetCode())},
						resource: orEmptyResource(rs.Resource), scope: orEmptyScope(ss.Scope), payload: s, payloadMT: &tracepb.Span{},
					})
				}
			}
		}
	case *logspb.LogsData:
		for _, rl := range m.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					t := l.TimeUnixNano
					if t == 0 {
						t = l.ObservedTimeUnixNano
					}
					out = append(out, wantItem{
						Item:     Item{Signal: SignalLogs, TraceID: id16(l.TraceId), SpanID: id8(l.SpanId), Time: int64(t), StartTime: int64(t)},
						resource: orEmptyResource(rl.Resource), scope: orEmptyScope(sl.Scope), payload: l, payloadMT: &logspb.LogRecord{},
					})
				}
			}
		}
	case *metricspb.MetricsData:
		for _, rm := range m.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					base := Item{Signal: SignalMetrics, Name: []byte(mt.Name), MetricDescription: []byte(mt.Description), MetricUnit: []byte(mt.Unit)}
					type pt struct {
						p          proto.Message
						mt         proto.Message
						start, now uint64
						ex         []*metricspb.Exemplar
					}
					var pts []pt
					switch d := mt.Data.(type) {
					case *metricspb.Metric_Gauge:
						base.PointType = PointGauge
						for _, p := range d.Gauge.DataPoints {
							pts = append(pts, pt{p, &metricspb.NumberDataPoint{}, p.StartTimeUnixNano, p.TimeUnixNano, p.Exemplars})
						}
					case *metricspb.Metric_Sum:
						base.PointType, base.Temporality, base.Monotonic = PointSum, int32(d.Sum.AggregationTemporality), d.Sum.IsMonotonic
						for _, p := range d.Sum.DataPoints {
							pts = append(pts, pt{p, &metricspb.NumberDataPoint{}, p.StartTimeUnixNano, p.TimeUnixNano, p.Exemplars})
						}
					case *metricspb.Metric_Histogram:
						base.PointType, base.Temporality = PointHistogram, int32(d.Histogram.AggregationTemporality)
						for _, p := range d.Histogram.DataPoints {
							pts = append(pts, pt{p, &metricspb.HistogramDataPoint{}, p.StartTimeUnixNano, p.TimeUnixNano, p.Exemplars})
						}
					case *metricspb.Metric_ExponentialHistogram:
						base.PointType, base.Temporality = PointExpHistogram, int32(d.ExponentialHistogram.AggregationTemporality)
						for _, p := range d.ExponentialHistogram.DataPoints {
							pts = append(pts, pt{p, &metricspb.ExponentialHistogramDataPoint{}, p.StartTimeUnixNano, p.TimeUnixNano, p.Exemplars})
						}
					case *metricspb.Metric_Summary:
						base.PointType = PointSummary
						for _, p := range d.Summary.DataPoints {
							pts = append(pts, pt{p, &metricspb.SummaryDataPoint{}, p.StartTimeUnixNano, p.TimeUnixNano, nil})
						}
					}
					for _, p := range pts {
						it := base
						it.Time, it.StartTime = int64(p.now), int64(p.start)
						w := wantItem{resource: orEmptyResource(rm.Resource), scope: orEmptyScope(sm.Scope), payload: p.p, payloadMT: p.mt}
						var seen [][16]byte
						for _, e := range p.ex {
							tid := id16(e.TraceId)
							if tid == ([16]byte{}) || containsID(seen, tid) {
								continue
							}
							seen = append(seen, tid)
							w.Item = it
							w.TraceID, w.SpanID = tid, id8(e.SpanId)
							out = append(out, w)
						}
						if len(seen) == 0 {
							w.Item = it
							out = append(out, w)
						}
					}
				}
			}
		}
	}
	return out
}

func containsID(ids [][16]byte, id [16]byte) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// checkItems compares items with the items msg should give. With
// checkContext false, Resource and Scope are not compared (the decoder uses
// the last occurrence where protobuf merges).
func checkItems(t testing.TB, msg proto.Message, items []Item, checkContext bool) {
	t.Helper()
	want := wantItems(msg)
	if len(items) != len(want) {
		t.Fatalf("%d items, want %d", len(items), len(want))
	}
	uo := proto.UnmarshalOptions{DiscardUnknown: true}
	for i := range items {
		got, w := &items[i], &want[i]
		if got.Signal != w.Signal || got.TraceID != w.TraceID || got.SpanID != w.SpanID || got.ParentSpanID != w.ParentSpanID ||
			got.Time != w.Time || got.StartTime != w.StartTime || got.StatusCode != w.StatusCode ||
			got.PointType != w.PointType || got.Temporality != w.Temporality || got.Monotonic != w.Monotonic {
			t.Fatalf("item %d:\n got %+v\nwant %+v", i, describe(got), describe(&w.Item))
		}
		if !bytes.Equal(got.Name, w.Name) || !bytes.Equal(got.MetricDescription, w.MetricDescription) || !bytes.Equal(got.MetricUnit, w.MetricUnit) {
			t.Fatalf("item %d: name %q desc %q unit %q, want %q %q %q", i, got.Name, got.MetricDescription, got.MetricUnit, w.Name, w.MetricDescription, w.MetricUnit)
		}
		if w.Signal == SignalLogs && got.Name != nil {
			t.Fatalf("item %d: log with name %q", i, got.Name)
		}
		for _, s := range [][]byte{got.Resource, got.Scope, got.Payload, got.Name, got.MetricDescription, got.MetricUnit} {
			if cap(s) != len(s) {
				t.Fatalf("item %d: slice with cap %d > len %d", i, cap(s), len(s))
			}
		}
		p := w.payloadMT.ProtoReflect().New().Interface()
		if err := uo.Unmarshal(got.Payload, p); err != nil {
			t.Fatalf("item %d: Payload: %v", i, err)
		}
		if !proto.Equal(p, discardUnknown(t, w.payload)) {
			t.Fatalf("item %d: Payload\n got %v\nwant %v", i, p, w.payload)
		}
		if !checkContext {
			continue
		}
		r := &resourcepb.Resource{}
		if err := uo.Unmarshal(got.Resource, r); err != nil {
			t.Fatalf("item %d: Resource: %v", i, err)
		}
		if !proto.Equal(r, w.resource) {
			t.Fatalf("item %d: Resource\n got %v\nwant %v", i, r, w.resource)
		}
		s := &commonpb.InstrumentationScope{}
		if err := uo.Unmarshal(got.Scope, s); err != nil {
			t.Fatalf("item %d: Scope: %v", i, err)
		}
		if !proto.Equal(s, w.scope) {
			t.Fatalf("item %d: Scope\n got %v\nwant %v", i, s, w.scope)
		}
	}
}

// discardUnknown returns m without unknown fields (at any depth).
func discardUnknown(t testing.TB, m proto.Message) proto.Message {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface()
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func describe(it *Item) string {
	return fmt.Sprintf("{%v trace=%x span=%x parent=%x time=%d start=%d name=%q status=%d type=%v temp=%d mono=%v}",
		it.Signal, it.TraceID, it.SpanID, it.ParentSpanID, it.Time, it.StartTime, it.Name, it.StatusCode, it.PointType, it.Temporality, it.Monotonic)
}

func mustDecode(t testing.TB, d *Decoder, sig Signal, enc Encoding, value []byte) []Item {
	t.Helper()
	items, err := d.Decode(sig, enc, value)
	if err != nil {
		t.Fatalf("Decode(%v, %v): %v", sig, enc, err)
	}
	return items
}

func mustDecodeError(t testing.TB, d *Decoder, sig Signal, enc Encoding, value []byte) *DecodeError {
	t.Helper()
	items, err := d.Decode(sig, enc, value)
	if err == nil {
		t.Fatalf("Decode(%v, %v, %d bytes) = %d items, want an error", sig, enc, len(value), len(items))
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %T %v is not a *DecodeError", err, err)
	}
	if items != nil {
		t.Fatalf("error %v with %d items", err, len(items))
	}
	if de.Signal != sig || de.Encoding != enc || de.Offset < -1 || de.Offset > len(value) || de.Reason == "" {
		t.Fatalf("bad DecodeError %+v for a %d-byte value", de, len(value))
	}
	return de
}

// ---------------------------------------------------------------------------
// OTLP/JSON as the Collector writes it.

var idKeys = map[string]bool{"traceId": true, "trace_id": true, "spanId": true, "span_id": true, "parentSpanId": true, "parent_span_id": true}

var int64Keys = map[string]bool{
	"timeUnixNano": true, "startTimeUnixNano": true, "endTimeUnixNano": true, "observedTimeUnixNano": true,
	"asInt": true, "count": true, "intValue": true, "zeroCount": true, "bucketCounts": true,
}

// toOTLPJSON rewrites protojson output the way OTLP/JSON differs from it:
// ids become hex. With numbers, 64-bit integers are written as JSON
// numbers instead of strings (also valid input).
func toOTLPJSON(t testing.TB, pj []byte, numbers bool) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(pj))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch s, isStr := e.(string); {
				case idKeys[k] && isStr:
					b, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						t.Fatalf("%s: %v", k, err)
					}
					x[k] = hex.EncodeToString(b)
				case numbers && int64Keys[k]:
					x[k] = toNumbers(e)
				default:
					x[k] = walk(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func toNumbers(v any) any {
	switch x := v.(type) {
	case string:
		return json.Number(x)
	case []any:
		for i := range x {
			x[i] = toNumbers(x[i])
		}
	}
	return v
}

// ---------------------------------------------------------------------------
// Re-encoding with fields reordered.

// reorderWire re-encodes the message b of type md (recursively) with its
// fields sorted by descending field number (keeping the order of repeated
// occurrences), as pdata writes them. With junk, unknown fields of every
// wire type are inserted at every level.
func reorderWire(t testing.TB, b []byte, md protoreflect.MessageDescriptor, junk *rand.Rand) []byte {
	t.Helper()
	type fld struct {
		num protowire.Number
		raw []byte // tag and value, encoded
	}
	var fields []fld
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("bad tag")
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatal("bad value")
		}
		raw := b[:n+m]
		if fd := md.Fields().ByNumber(num); fd != nil && typ == protowire.BytesType && fd.Kind() == protoreflect.MessageKind {
			v, _ := protowire.ConsumeBytes(b[n:])
			raw = protowire.AppendTag(nil, num, typ)
			raw = protowire.AppendBytes(raw, reorderWire(t, v, fd.Message(), junk))
		}
		fields = append(fields, fld{num, raw})
		b = b[n+m:]
	}
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].num > fields[j].num })
	var out []byte
	for _, f := range fields {
		if junk != nil && junk.IntN(2) == 0 {
			out = appendJunk(out, junk)
		}
		out = append(out, f.raw...)
	}
	if junk != nil {
		out = appendJunk(out, junk)
	}
	return out
}

func appendJunk(b []byte, r *rand.Rand) []byte {
	num := protowire.Number(1000 + r.IntN(1000))
	switch r.IntN(5) {
	case 0:
		b = protowire.AppendTag(b, num, protowire.VarintType)
		return protowire.AppendVarint(b, r.Uint64())
	case 1:
		b = protowire.AppendTag(b, num, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, r.Uint32())
	case 2:
		b = protowire.AppendTag(b, num, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(r.Float64()))
	case 3:
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendString(b, "junk")
	default:
		b = protowire.AppendTag(b, num, protowire.StartGroupType)
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 7)
		return protowire.AppendTag(b, num, protowire.EndGroupType)
	}
}

func descriptorOf(sig Signal) protoreflect.MessageDescriptor {
	switch sig {
	case SignalSpans:
		return (&tracepb.TracesData{}).ProtoReflect().Descriptor()
	case SignalLogs:
		return (&logspb.LogsData{}).ProtoReflect().Descriptor()
	}
	return (&metricspb.MetricsData{}).ProtoReflect().Descriptor()
}

func newMessage(sig Signal) proto.Message {
	switch sig {
	case SignalSpans:
		return &tracepb.TracesData{}
	case SignalLogs:
		return &logspb.LogsData{}
	}
	return &metricspb.MetricsData{}
}

var allSignals = []Signal{SignalSpans, SignalLogs, SignalMetrics}

// seeds returns how many random messages a test builds: n, or a fifth of
// it under -short or the race detector (which slows these loops tenfold).
func seeds(n uint64) uint64 {
	if testing.Short() || raceEnabled {
		return n / 5
	}
	return n
}
