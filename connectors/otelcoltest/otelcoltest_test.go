package otelcoltest_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/otelcoltest"
)

const (
	nTraces = 50
	nLogs   = 20
)

// garbage is a record value that is no protobuf: its first tag is a field
// number past the largest with wire type 7.
var garbage = []byte("\xff\xff\xff\xff\x7fnot OTLP")

// TestCollectorRoundTrip writes 50 traces (one TracesData record each, keyed
// by the trace id in hex like the Collector's Kafka exporter), 20 LogsData
// and one record of garbage to topics of their own, starts a real Collector
// on them, and checks that every trace and log comes out of it as written:
// ids, names, trace states, attributes of every type, events, links,
// statuses and flags. The garbage record goes before the last trace, on its
// partition (same key): that the last trace arrives shows that the
// Collector goes on past it, and its log says what it did with it.
func TestCollectorRoundTrip(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	otelcoltest.Build(t) // before the clock starts: the first build takes minutes
	topics := kafkatest.NewTopics(t, brokers, 4, "otelcoltest-spans", "otelcoltest-logs")
	// A short metadata age: a new topic can be unknown to the first
	// metadata request, and the default would retry it after 5 s.
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.MetadataMinAge(100*time.Millisecond))

	traces := make(map[string]*tracepb.TracesData, nTraces)
	var records []*kgo.Record
	for i := range nTraces {
		td := traceData(i)
		id := hex.EncodeToString(td.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId)
		traces[id] = td
		if i == nTraces-1 {
			records = append(records, &kgo.Record{Topic: topics[0], Key: []byte(id), Value: garbage})
		}
		records = append(records, &kgo.Record{Topic: topics[0], Key: []byte(id), Value: marshal(t, td)})
	}
	logs := make(map[string]*logspb.LogsData, nLogs)
	for i := range nLogs {
		ld := logData(i)
		id := hex.EncodeToString(ld.ResourceLogs[0].ScopeLogs[0].LogRecords[0].TraceId)
		logs[id] = ld
		records = append(records, &kgo.Record{Topic: topics[1], Key: []byte(id), Value: marshal(t, ld)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	t0 := time.Now()
	col := otelcoltest.Start(t, otelcoltest.Options{Brokers: brokers, TracesTopic: topics[0], LogsTopic: topics[1]})
	started := time.Since(t0)
	var gotTraces []*tracepb.TracesData
	var gotLogs []*logspb.LogsData
	otelcoltest.WaitFor(t, 60*time.Second, func() bool {
		gotTraces, gotLogs = col.Traces(t), col.Logs(t)
		return len(byTraceID(gotTraces)) >= nTraces && len(byLogTraceID(gotLogs)) >= nLogs
	})
	t.Logf("the Collector was ready %v after its start and had written %d traces and %d logs %v after it",
		started.Round(time.Millisecond), len(gotTraces), len(gotLogs), time.Since(t0).Round(time.Millisecond))

	// Every record comes back once (a redelivery after a rebalance would be
	// the Kafka receiver's at-least-once; it is logged, not failed).
	if len(gotTraces) != nTraces || len(gotLogs) != nLogs {
		t.Logf("redelivered: %d traces and %d logs were written more than once", len(gotTraces)-nTraces, len(gotLogs)-nLogs)
	}
	for id, got := range byTraceID(gotTraces) {
		want, ok := traces[id]
		if !ok {
			t.Errorf("trace %s: not one of those written", id)
			continue
		}
		if !proto.Equal(got, want) {
			t.Errorf("trace %s differs:\n got %s\nwant %s", id, protojson.Format(got), protojson.Format(want))
		}
	}
	for id, got := range byLogTraceID(gotLogs) {
		want, ok := logs[id]
		if !ok {
			t.Errorf("log of trace %s: not one of those written", id)
			continue
		}
		if !proto.Equal(got, want) {
			t.Errorf("log of trace %s differs:\n got %s\nwant %s", id, protojson.Format(got), protojson.Format(want))
		}
	}
	// Spot checks that say plainly what the equality covers.
	last := traceData(nTraces - 1)
	got := byTraceID(gotTraces)[hex.EncodeToString(last.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId)]
	if got == nil {
		t.Fatalf("the trace after the garbage record did not arrive")
	}
	root := got.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if root.Name != "llm.request" || root.TraceState != fmt.Sprintf("braid=t%d,vendor=x;y", nTraces-1) {
		t.Errorf("root span: name %q trace_state %q", root.Name, root.TraceState)
	}

	// The garbage record: logged, counted, skipped; the Collector runs on.
	log := col.Log(t)
	if !strings.Contains(log, "failed to unmarshal message") {
		t.Errorf("the Collector's log does not mention the garbage record:\n%s", log)
	}
	if !col.Running() {
		t.Errorf("the Collector stopped after the garbage record")
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "failed to unmarshal message") || strings.Contains(line, "skipping due to message_marking") {
			t.Logf("on the garbage record the Collector logged: %s", line)
		}
	}
}

// byTraceID indexes TracesData by the trace id of their first span.
func byTraceID(tds []*tracepb.TracesData) map[string]*tracepb.TracesData {
	m := make(map[string]*tracepb.TracesData, len(tds))
	for _, td := range tds {
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					m[hex.EncodeToString(s.TraceId)] = td
				}
			}
		}
	}
	return m
}

// byLogTraceID indexes LogsData by the trace id of their first record.
func byLogTraceID(lds []*logspb.LogsData) map[string]*logspb.LogsData {
	m := make(map[string]*logspb.LogsData, len(lds))
	for _, ld := range lds {
		for _, rl := range ld.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, r := range sl.LogRecords {
					m[hex.EncodeToString(r.TraceId)] = ld
				}
			}
		}
	}
	return m
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// id returns n bytes derived from kind and i (distinct for each).
func id(kind byte, i, n int) []byte {
	b := make([]byte, n)
	b[0] = kind
	binary.BigEndian.PutUint32(b[n-4:], uint32(i)+1)
	for j := 1; j < n-4; j++ {
		b[j] = byte(i*31 + j*7)
	}
	return b
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func integer(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// traceData is trace i: one resource, one scope, a root span and two
// children, with attributes of every OTLP value type.
func traceData(i int) *tracepb.TracesData {
	traceID := id(0xa0, i, 16)
	start := uint64(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()) + uint64(i)*1e9
	root := &tracepb.Span{
		TraceId:           traceID,
		SpanId:            id(0xb0, i, 8),
		TraceState:        fmt.Sprintf("braid=t%d,vendor=x;y", i),
		Flags:             0x301, // sampled, remote known and set
		Name:              "llm.request",
		Kind:              tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: start,
		EndTimeUnixNano:   start + 750e6,
		Attributes: []*commonpb.KeyValue{
			str("gen_ai.request.model", "llama-3.1-8b"),
			integer("gen_ai.usage.input_tokens", int64(100+i)),
			integer("big", -1<<62),
			{Key: "gen_ai.request.temperature", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.25 + float64(i)/8}}},
			{Key: "gen_ai.is_stream", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: i%2 == 0}}},
			{Key: "gen_ai.response.finish_reasons", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{
				Values: []*commonpb.AnyValue{{Value: &commonpb.AnyValue_StringValue{StringValue: "stop"}}, {Value: &commonpb.AnyValue_IntValue{IntValue: 7}}}}}}},
			{Key: "braid.nested", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
				Values: []*commonpb.KeyValue{str("tenant", fmt.Sprintf("t-%d", i%4)), integer("n", int64(i))}}}}},
			{Key: "braid.raw", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 0xfe, byte(i)}}}},
			str("unicode", "ünïcødé ✓ \"quoted\"\n"),
		},
		DroppedAttributesCount: 2,
		Events: []*tracepb.Span_Event{{
			TimeUnixNano: start + 10e6,
			Name:         "gen_ai.content.prompt",
			Attributes:   []*commonpb.KeyValue{str("gen_ai.prompt", fmt.Sprintf("prompt %d", i))},
		}},
		Links: []*tracepb.Span_Link{{
			TraceId:    id(0xc0, i, 16),
			SpanId:     id(0xd0, i, 8),
			TraceState: "linked=1",
			Attributes: []*commonpb.KeyValue{str("link.kind", "follows")},
			Flags:      0x101,
		}},
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK},
	}
	prefill := &tracepb.Span{
		TraceId: traceID, SpanId: id(0xb1, i, 8), ParentSpanId: root.SpanId,
		TraceState: root.TraceState, Flags: 1,
		Name: "llm.prefill", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: start + 1e6, EndTimeUnixNano: start + 100e6,
		Attributes: []*commonpb.KeyValue{integer("layer", 0)},
		// Unset: the Collector writes "status": {} for a span without a
		// status, which decodes to an empty Status, not to none.
		Status: &tracepb.Status{},
	}
	decode := &tracepb.Span{
		TraceId: traceID, SpanId: id(0xb2, i, 8), ParentSpanId: root.SpanId,
		Flags: 1,
		Name:  "llm.decode", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: start + 100e6, EndTimeUnixNano: start + 740e6,
		Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: fmt.Sprintf("oom %d", i)},
	}
	return &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			str("service.name", fmt.Sprintf("vllm-%d", i%3)),
			str("host.name", "gpu-node-1"),
		}},
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope:     &commonpb.InstrumentationScope{Name: "otelcoltest", Version: "1.0.0", Attributes: []*commonpb.KeyValue{str("scope.attr", "s")}},
			Spans:     []*tracepb.Span{root, prefill, decode},
			SchemaUrl: "https://opentelemetry.io/schemas/1.37.0",
		}},
		SchemaUrl: "https://opentelemetry.io/schemas/1.37.0",
	}}}
}

// logData is log i: two records of trace i.
func logData(i int) *logspb.LogsData {
	traceID := id(0xa0, i, 16)
	at := uint64(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()) + uint64(i)*1e9
	return &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", fmt.Sprintf("vllm-%d", i%3))}},
		ScopeLogs: []*logspb.ScopeLogs{{
			Scope: &commonpb.InstrumentationScope{Name: "otelcoltest"},
			LogRecords: []*logspb.LogRecord{{
				TimeUnixNano:         at,
				ObservedTimeUnixNano: at + 5e6,
				SeverityNumber:       logspb.SeverityNumber_SEVERITY_NUMBER_WARN,
				SeverityText:         "WARN",
				Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: fmt.Sprintf("KV cache at %d%%", 80+i%20)}},
				Attributes:           []*commonpb.KeyValue{integer("kv.blocks", int64(1000+i)), str("gpu", "0")},
				Flags:                1,
				TraceId:              traceID,
				SpanId:               id(0xb0, i, 8),
				EventName:            "vllm.kv_cache",
			}, {
				TimeUnixNano:   at + 1e6,
				SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO,
				Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
					Values: []*commonpb.KeyValue{str("msg", "done"), integer("tokens", int64(i))}}}},
				TraceId: traceID,
				SpanId:  id(0xb2, i, 8),
			}},
		}},
	}}}
}
