package simulator

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// variants are the exporter forms of INPUTS.md §1 the simulator covers.
var variants = []struct {
	name string
	cfg  Config
}{
	{"proto-keyed", Config{Encoding: EncodingProto, Keying: KeyByTraceID}},
	{"proto-unkeyed", Config{Encoding: EncodingProto, Keying: Unkeyed}},
	{"json-keyed", Config{Encoding: EncodingJSON, Keying: KeyByTraceID}},
	{"json-unkeyed", Config{Encoding: EncodingJSON, Keying: Unkeyed}},
	{"proto-keyed-disorder", Config{Keying: KeyByTraceID, Disorder: 150 * time.Millisecond, SplitRatio: 0.3}},
	{"json-unkeyed-disorder", Config{Encoding: EncodingJSON, Keying: Unkeyed, Disorder: time.Second, SplitRatio: 0.5, RequestsPerBatch: 20}},
}

// run returns the messages of n batches, then Flush, per batch (the last
// element holds Flush's messages).
func run(t *testing.T, cfg Config, n int) (*Simulator, [][]Message) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]Message
	for i := 0; i < n; i++ {
		out = append(out, s.Next())
	}
	out = append(out, s.Flush())
	return s, out
}

func TestDeterministic(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed = 42
			_, a := run(t, cfg, 12)
			_, b := run(t, cfg, 12)
			if !slices.EqualFunc(a, b, func(x, y []Message) bool {
				return slices.EqualFunc(x, y, func(m, n Message) bool {
					return m.Topic == n.Topic && bytes.Equal(m.Key, n.Key) && (m.Key == nil) == (n.Key == nil) && bytes.Equal(m.Value, n.Value)
				})
			}) {
				t.Fatal("same seed and config gave different messages")
			}
			cfg.Seed = 43
			_, c := run(t, cfg, 12)
			if bytes.Equal(a[0][0].Value, c[0][0].Value) {
				t.Fatal("different seeds gave the same first message")
			}
		})
	}
}

// decoded tallies everything found by decoding messages.
type decoded struct {
	spans          map[string][]string // trace id -> span ids
	roots          map[string]int
	logs           map[string]int
	exemplars      map[string]int
	exemplarSpan   map[string]string
	spanMessages   map[string]int
	traceless      int
	resourcePoints int
	lastEvent      uint64
	messages       map[string]int
}

func newDecoded() *decoded {
	return &decoded{
		spans: map[string][]string{}, roots: map[string]int{}, logs: map[string]int{},
		exemplars: map[string]int{}, exemplarSpan: map[string]string{}, spanMessages: map[string]int{},
		messages: map[string]int{},
	}
}

// eventTimes calls f with every record's event time in a decoded value.
func (d *decoded) add(t *testing.T, cfg Config, m Message, eventTime func(uint64)) {
	t.Helper()
	d.messages[m.Topic]++
	msg := decodeMessage(t, cfg, m)
	see := func(ns uint64) {
		d.lastEvent = max(d.lastEvent, ns)
		eventTime(ns)
	}
	switch x := msg.(type) {
	case *tracepb.TracesData:
		inMsg := map[string]bool{}
		for _, rs := range x.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					tid := hex.EncodeToString(sp.TraceId)
					d.spans[tid] = append(d.spans[tid], hex.EncodeToString(sp.SpanId))
					if len(sp.ParentSpanId) == 0 {
						d.roots[tid]++
					}
					inMsg[tid] = true
					see(sp.EndTimeUnixNano)
				}
			}
		}
		for tid := range inMsg {
			d.spanMessages[tid]++
		}
	case *logspb.LogsData:
		for _, rl := range x.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					if len(lr.TraceId) == 0 {
						d.traceless++
					} else {
						d.logs[hex.EncodeToString(lr.TraceId)]++
					}
					see(lr.TimeUnixNano)
				}
			}
		}
	case *metricspb.MetricsData:
		for _, rm := range x.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					switch data := mt.Data.(type) {
					case *metricspb.Metric_Histogram:
						for _, p := range data.Histogram.DataPoints {
							if len(p.Exemplars) == 0 {
								d.resourcePoints++
							}
							for _, e := range p.Exemplars {
								tid := hex.EncodeToString(e.TraceId)
								d.exemplars[tid]++
								d.exemplarSpan[tid] = hex.EncodeToString(e.SpanId)
							}
							see(p.TimeUnixNano)
						}
					case *metricspb.Metric_Gauge:
						for _, p := range data.Gauge.DataPoints {
							if len(p.Exemplars) == 0 {
								d.resourcePoints++
							}
							see(p.TimeUnixNano)
						}
					case *metricspb.Metric_Sum:
						for _, p := range data.Sum.DataPoints {
							if len(p.Exemplars) == 0 {
								d.resourcePoints++
							}
							see(p.TimeUnixNano)
						}
					default:
						t.Fatalf("unexpected metric type %T", data)
					}
				}
			}
		}
	}
}

func TestTruthMatchesDecoded(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed = 7
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg = s.cfg // with defaults
			d := newDecoded()
			const batches = 24
			for b := 0; b < batches; b++ {
				msgs := s.Next()
				hi := uint64(s.EventTime().UnixNano())
				lo := hi - uint64(cfg.BatchInterval+cfg.Disorder)
				for _, m := range msgs {
					d.add(t, cfg, m, func(ns uint64) {
						// Second parts of split traces carry the previous
						// batch's times.
						if ns > hi || ns <= lo-uint64(cfg.BatchInterval) {
							t.Errorf("batch %d: event time %d outside (%d, %d]", b, ns, lo, hi)
						}
					})
				}
				// Before Flush, Truth counts what was written so far.
				if b%6 == 5 {
					tr := s.Truth()
					if tr.Batches != b+1 {
						t.Fatalf("Batches = %d", tr.Batches)
					}
					checkTruth(t, tr, d, false)
				}
			}
			for _, m := range s.Flush() {
				d.add(t, cfg, m, func(uint64) {})
			}
			tr := s.Truth()
			checkTruth(t, tr, d, true)
			if len(tr.Traces) != batches*cfg.RequestsPerBatch {
				t.Fatalf("traces = %d, want %d", len(tr.Traces), batches*cfg.RequestsPerBatch)
			}
			if got, want := tr.LastEventTime, time.Unix(0, int64(d.lastEvent)).UTC(); !got.Equal(want) {
				t.Errorf("LastEventTime = %v, decoded %v", got, want)
			}
			if tr.LastEventTime.After(s.EventTime()) {
				t.Errorf("LastEventTime %v after EventTime %v", tr.LastEventTime, s.EventTime())
			}
			if tr.TracelessLogs != batches*cfg.TracelessLogs || tr.ResourcePoints != batches*cfg.ResourcePoints {
				t.Errorf("traceless logs %d, resource points %d", tr.TracelessLogs, tr.ResourcePoints)
			}
			if tr.SpanMessages != d.messages[cfg.Topics.Spans] || tr.LogMessages != d.messages[cfg.Topics.Logs] || tr.MetricMessages != d.messages[cfg.Topics.Metrics] {
				t.Errorf("messages: truth %d/%d/%d, decoded %v", tr.SpanMessages, tr.LogMessages, tr.MetricMessages, d.messages)
			}
		})
	}
}

func checkTruth(t *testing.T, tr Truth, d *decoded, complete bool) {
	t.Helper()
	spans, logs, ex := 0, 0, 0
	for _, id := range tr.TraceIDs {
		tt, ok := tr.Traces[id]
		if !ok {
			t.Fatalf("trace %s listed but missing", id)
		}
		if tt.TraceID != id || len(id) != 32 || strings.ToLower(id) != id {
			t.Fatalf("bad trace id %q", id)
		}
		if tt.Spans != len(d.spans[id]) || !slices.Equal(tt.SpanIDs, d.spans[id]) {
			t.Fatalf("trace %s: truth spans %d %v, decoded %v", id, tt.Spans, tt.SpanIDs, d.spans[id])
		}
		if tt.Logs != d.logs[id] {
			t.Fatalf("trace %s: truth logs %d, decoded %d", id, tt.Logs, d.logs[id])
		}
		if tt.ExemplarPoints != d.exemplars[id] {
			t.Fatalf("trace %s: truth exemplar points %d, decoded %d", id, tt.ExemplarPoints, d.exemplars[id])
		}
		if tt.ExemplarPoints > 0 && d.exemplarSpan[id] != tt.RootSpanID {
			t.Fatalf("trace %s: exemplar span %s, root %s", id, d.exemplarSpan[id], tt.RootSpanID)
		}
		if tt.SpanMessages != d.spanMessages[id] {
			t.Fatalf("trace %s: truth span messages %d, decoded %d", id, tt.SpanMessages, d.spanMessages[id])
		}
		if complete && !tt.Retry {
			if tt.PendingSpans != 0 || tt.Spans < 4 || d.roots[id] != 1 {
				t.Fatalf("trace %s incomplete after Flush: %+v roots %d", id, tt, d.roots[id])
			}
			if want := map[bool]int{true: 2, false: 1}[tt.Split]; tt.SpanMessages != want {
				t.Fatalf("trace %s: split %v in %d span messages", id, tt.Split, tt.SpanMessages)
			}
		}
		spans += tt.Spans
		logs += tt.Logs
		ex += tt.ExemplarPoints
	}
	if len(tr.Traces) != len(tr.TraceIDs) {
		t.Fatalf("%d traces, %d ids", len(tr.Traces), len(tr.TraceIDs))
	}
	for id := range d.spans {
		if _, ok := tr.Traces[id]; !ok {
			t.Fatalf("decoded trace %s not in truth", id)
		}
	}
	if spans != tr.Spans || logs != tr.TraceLogs || ex != tr.ExemplarPoints {
		t.Fatalf("totals %d/%d/%d, sums %d/%d/%d", tr.Spans, tr.TraceLogs, tr.ExemplarPoints, spans, logs, ex)
	}
	if d.traceless != tr.TracelessLogs || d.resourcePoints != tr.ResourcePoints {
		t.Fatalf("traceless %d/%d, resource points %d/%d", tr.TracelessLogs, d.traceless, tr.ResourcePoints, d.resourcePoints)
	}
}

// traceIDsIn returns the trace ids of every span or log in a message, in
// order, and the number of resource blocks.
func traceIDsIn(t *testing.T, cfg Config, m Message) (ids []string, resources int) {
	t.Helper()
	msg := decodeMessage(t, cfg, m)
	switch x := msg.(type) {
	case *tracepb.TracesData:
		for _, rs := range x.ResourceSpans {
			resources++
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					ids = append(ids, hex.EncodeToString(sp.TraceId))
				}
			}
		}
	case *logspb.LogsData:
		for _, rl := range x.ResourceLogs {
			resources++
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					ids = append(ids, hex.EncodeToString(lr.TraceId))
				}
			}
		}
	case *metricspb.MetricsData:
		resources = len(x.ResourceMetrics)
	}
	return ids, resources
}

func TestKeyedMessages(t *testing.T) {
	for _, enc := range []string{EncodingProto, EncodingJSON} {
		t.Run(enc, func(t *testing.T) {
			s, batches := run(t, Config{Seed: 3, Encoding: enc, Keying: KeyByTraceID, TracelessLogs: 3}, 20)
			cfg := s.cfg
			nullLogs := 0
			for b, msgs := range batches {
				seen := map[string]bool{}
				for _, m := range msgs {
					ids, _ := traceIDsIn(t, cfg, m)
					switch {
					case m.Topic == cfg.Topics.Metrics:
						if m.Key != nil {
							t.Fatalf("metrics message with key %q", m.Key)
						}
					case m.Key == nil:
						if m.Topic != cfg.Topics.Logs {
							t.Fatalf("null key on %s", m.Topic)
						}
						nullLogs++
						for _, id := range ids {
							if id != "" {
								t.Fatalf("null-key log message holds trace %s", id)
							}
						}
						if len(ids) != cfg.TracelessLogs {
							t.Fatalf("null-key log message holds %d logs, want %d", len(ids), cfg.TracelessLogs)
						}
					default:
						if len(m.Key) != 32 || strings.ToLower(string(m.Key)) != string(m.Key) {
							t.Fatalf("key %q is not 32 lower-case hex", m.Key)
						}
						if len(ids) == 0 {
							t.Fatal("empty keyed message")
						}
						for _, id := range ids {
							if id != string(m.Key) {
								t.Fatalf("message keyed %s holds trace %s", m.Key, id)
							}
						}
						k := m.Topic + "/" + string(m.Key)
						if seen[k] {
							t.Fatalf("batch %d: two %s messages for trace %s", b, m.Topic, m.Key)
						}
						seen[k] = true
					}
				}
			}
			if nullLogs != 20 {
				t.Fatalf("%d null-key log messages in 20 batches", nullLogs)
			}
		})
	}
}

func TestUnkeyedMessages(t *testing.T) {
	s, batches := run(t, Config{Seed: 5, Keying: Unkeyed, RequestsPerBatch: 12}, 20)
	cfg := s.cfg
	mixed := 0
	for b, msgs := range batches[:20] {
		perTopic := map[string]int{}
		for _, m := range msgs {
			if m.Key != nil {
				t.Fatalf("unkeyed message with key %q", m.Key)
			}
			perTopic[m.Topic]++
			ids, resources := traceIDsIn(t, cfg, m)
			distinct := map[string]bool{}
			for _, id := range ids {
				distinct[id] = true
			}
			if resources > 1 && len(distinct) > 1 {
				mixed++
			}
		}
		for _, topic := range []string{cfg.Topics.Spans, cfg.Topics.Logs, cfg.Topics.Metrics} {
			if perTopic[topic] != 1 {
				t.Fatalf("batch %d: %d messages on %s, want 1", b, perTopic[topic], topic)
			}
		}
	}
	if mixed < 20 {
		t.Fatalf("only %d unkeyed messages mix several resources and traces", mixed)
	}
}

func TestSplitTraces(t *testing.T) {
	for _, k := range []Keying{KeyByTraceID, Unkeyed} {
		t.Run(k.String(), func(t *testing.T) {
			s, batches := run(t, Config{Seed: 11, Keying: k, SplitRatio: 0.25}, 12)
			cfg := s.cfg
			tr := s.Truth()
			type part struct {
				batch int
				spans []*tracepb.Span
				key   []byte
			}
			parts := map[string][]part{}
			for b, msgs := range batches {
				for _, m := range msgs {
					if m.Topic != cfg.Topics.Spans {
						continue
					}
					msg, err := decode("spans", cfg.Encoding, m.Value)
					if err != nil {
						t.Fatal(err)
					}
					per := map[string][]*tracepb.Span{}
					var order []string
					for _, rs := range msg.(*tracepb.TracesData).ResourceSpans {
						for _, ss := range rs.ScopeSpans {
							for _, sp := range ss.Spans {
								id := hex.EncodeToString(sp.TraceId)
								if per[id] == nil {
									order = append(order, id)
								}
								per[id] = append(per[id], sp)
							}
						}
					}
					for _, id := range order {
						parts[id] = append(parts[id], part{b, per[id], m.Key})
					}
				}
			}
			splits := 0
			for _, id := range tr.TraceIDs {
				tt := tr.Traces[id]
				ps := parts[id]
				if !tt.Split {
					if len(ps) != 1 || ps[0].batch != tt.Batch {
						t.Fatalf("trace %s not split but in %d parts", id, len(ps))
					}
					continue
				}
				splits++
				if len(ps) != 2 {
					t.Fatalf("split trace %s in %d parts", id, len(ps))
				}
				first, second := ps[0], ps[1]
				if first.batch != tt.Batch || second.batch != tt.Batch+1 {
					t.Fatalf("split trace %s: parts in batches %d and %d, request in %d", id, first.batch, second.batch, tt.Batch)
				}
				if len(first.spans) != 1 || len(first.spans[0].ParentSpanId) == 0 {
					t.Fatalf("split trace %s: first part is not one child span", id)
				}
				root := 0
				for _, sp := range second.spans {
					if len(sp.ParentSpanId) == 0 {
						root++
					}
				}
				if root != 1 || len(second.spans) != tt.Spans-1 {
					t.Fatalf("split trace %s: second part has %d spans, %d roots", id, len(second.spans), root)
				}
				if k == KeyByTraceID && (!bytes.Equal(first.key, []byte(id)) || !bytes.Equal(second.key, []byte(id))) {
					t.Fatalf("split trace %s: keys %q, %q", id, first.key, second.key)
				}
			}
			if want := len(tr.TraceIDs) / 4; splits != want {
				t.Fatalf("%d split traces, want %d", splits, want)
			}
		})
	}
}

func TestContent(t *testing.T) {
	s, batches := run(t, Config{Seed: 9, RequestsPerBatch: 50}, 20)
	cfg := s.cfg
	tr := s.Truth()
	sglang, errs := 0, 0
	for _, id := range tr.TraceIDs {
		tt := tr.Traces[id]
		if id == strings.Repeat("0", 32) {
			t.Fatal("all-zero trace id")
		}
		half := strings.HasPrefix(id, strings.Repeat("0", 16))
		if half != (tt.Service == "sglang") {
			t.Fatalf("trace %s of %s", id, tt.Service)
		}
		if half {
			sglang++
		}
		if tt.Error {
			errs++
		}
		if tt.Service == "vllm" && !strings.HasPrefix(tt.RequestID, "cmpl-") {
			t.Fatalf("vllm request id %q", tt.RequestID)
		}
		if tt.Arrival.After(tt.Finish) {
			t.Fatalf("trace %s arrives after it finishes", id)
		}
	}
	if n := len(tr.TraceIDs); sglang < n/16 || sglang > n/5 {
		t.Fatalf("%d of %d traces are SGLang-style", sglang, n)
	}
	if errs == 0 {
		t.Fatal("no ERROR traces")
	}
	requestIDLogs := 0
	for _, tt := range tr.Traces {
		requestIDLogs += tt.RequestIDLogs
	}
	if requestIDLogs != 20 {
		t.Fatalf("%d request-id-only logs, want one per batch", requestIDLogs)
	}

	// Shape of one request: root llm_request (SERVER) last, children INTERNAL
	// with the detail attributes, all ending at the finish time.
	msg, err := decode("spans", cfg.Encoding, batches[0][0].Value)
	if err != nil {
		t.Fatal(err)
	}
	rs := msg.(*tracepb.TracesData).ResourceSpans[0]
	attrs := map[string]bool{}
	for _, kv := range rs.Resource.Attributes {
		attrs[kv.Key] = true
	}
	for _, k := range []string{"service.name", "service.instance.id", "host.name", "gpu.uuid", "model_name"} {
		if !attrs[k] {
			t.Errorf("resource lacks %s", k)
		}
	}
	spans := rs.ScopeSpans[0].Spans
	root := spans[len(spans)-1]
	if root.Name != "llm_request" || root.Kind != tracepb.Span_SPAN_KIND_SERVER || len(root.ParentSpanId) != 0 {
		t.Fatalf("root %v", root)
	}
	rootAttrs := map[string]bool{}
	for _, kv := range root.Attributes {
		rootAttrs[kv.Key] = true
	}
	for _, k := range []string{"gen_ai.request.id", "gen_ai.response.model", "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.latency.e2e", "gen_ai.latency.time_to_first_token"} {
		if !rootAttrs[k] {
			t.Errorf("root lacks %s", k)
		}
	}
	names := []string{}
	for _, sp := range spans[:len(spans)-1] {
		names = append(names, sp.Name)
		if !bytes.Equal(sp.ParentSpanId, root.SpanId) || sp.EndTimeUnixNano != root.EndTimeUnixNano || sp.StartTimeUnixNano < root.StartTimeUnixNano {
			t.Fatalf("child %s: parent/times wrong", sp.Name)
		}
	}
	if names[0] != "llm.prefill" || names[len(names)-1] != "llm.sampling" || len(names) < 4 || len(names) > 6 ||
		!strings.HasPrefix(names[1], "llm.decode.layer.") {
		t.Fatalf("children %v", names)
	}
}

func TestEventTime(t *testing.T) {
	s, err := New(Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !s.EventTime().IsZero() {
		t.Fatal("EventTime before the first batch")
	}
	s.Next()
	if !s.EventTime().Equal(DefaultStart) {
		t.Fatalf("EventTime after one batch = %v", s.EventTime())
	}
	s.Next()
	s.Next()
	if want := DefaultStart.Add(2 * DefaultBatchInterval); !s.EventTime().Equal(want) {
		t.Fatalf("EventTime after three batches = %v, want %v", s.EventTime(), want)
	}
	tr := s.Truth()
	if tr.LastEventTime.After(s.EventTime()) || tr.LastEventTime.Before(s.EventTime().Add(-DefaultBatchInterval)) {
		t.Fatalf("LastEventTime %v, EventTime %v", tr.LastEventTime, s.EventTime())
	}
}

func TestTopicsAndNone(t *testing.T) {
	s, batches := run(t, Config{
		Seed: 2, Topics: Topics{Spans: "a", Logs: "b", Metrics: "c"},
		LogsPerRequest: -1, TracelessLogs: -1, ResourcePoints: -1, NoExemplars: true, SplitRatio: -1,
	}, 5)
	for _, msgs := range batches {
		for _, m := range msgs {
			if m.Topic != "a" {
				t.Fatalf("message on %s with no logs and no points", m.Topic)
			}
		}
	}
	tr := s.Truth()
	if tr.TraceLogs+tr.TracelessLogs+tr.ExemplarPoints+tr.ResourcePoints != 0 || tr.LogMessages+tr.MetricMessages != 0 {
		t.Fatalf("truth %+v", tr)
	}
	if len(batches[5]) != 0 {
		t.Fatal("Flush without splits returned messages")
	}
}

func TestConfig(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	c.EnsureDefaults()
	want := Config{
		Start: DefaultStart, Encoding: EncodingProto, RequestsPerBatch: 8, BatchInterval: 200 * time.Millisecond,
		SplitRatio: 0.1, LogsPerRequest: 2, TracelessLogs: 1, ResourcePoints: 2, Topics: DefaultTopics,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults %+v", c)
	}
	for _, bad := range []Config{
		{Encoding: "otlp_xml"},
		{Keying: 7},
		{RequestsPerBatch: -1},
		{BatchInterval: -time.Second},
		{SplitRatio: 1.5},
		{Disorder: -1},
		{Topics: Topics{Spans: "x", Logs: "x"}},
		{LogsPerRequest: maxPerItem + 1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v): no error", bad)
		}
	}
	if _, err := New(Config{Topics: Topics{Spans: "otlp_logs"}}); err == nil {
		t.Error("spans topic equal to the default logs topic accepted")
	}
}

func ExampleSimulator() {
	s, err := New(Config{Seed: 1, RequestsPerBatch: 2, SplitRatio: -1})
	if err != nil {
		panic(err)
	}
	for _, m := range s.Next() {
		key := "null"
		if m.Key != nil {
			key = string(m.Key)
		}
		fmt.Println(m.Topic, key)
	}
	tr := s.Truth()
	fmt.Println(len(tr.Traces), "traces,", tr.Spans, "spans,", tr.TraceLogs, "logs with a trace id,", tr.TracelessLogs, "without")
	fmt.Println("event time", s.EventTime().Format(time.RFC3339Nano))
	// Output:
	// otlp_spans 43027a8221d2e6f24ac47c49e3257636
	// otlp_spans ae7ba74782fa38ecaa6d8d2b03ae6d43
	// otlp_logs 43027a8221d2e6f24ac47c49e3257636
	// otlp_logs ae7ba74782fa38ecaa6d8d2b03ae6d43
	// otlp_logs null
	// otlp_metrics null
	// 2 traces, 13 spans, 4 logs with a trace id, 1 without
	// event time 2026-01-01T00:00:00Z
}

func BenchmarkNext(b *testing.B) {
	for _, enc := range []string{EncodingProto, EncodingJSON} {
		b.Run(enc, func(b *testing.B) {
			s, err := New(Config{Seed: 1, Encoding: enc, RequestsPerBatch: 64})
			if err != nil {
				b.Fatal(err)
			}
			var bytes int64
			for b.Loop() {
				for _, m := range s.Next() {
					bytes += int64(len(m.Value))
				}
			}
			b.SetBytes(bytes / int64(b.N))
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

func TestForgetTraces(t *testing.T) {
	s, err := New(Config{Seed: 12, SplitRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		s.Next()
	}
	before := s.Truth()
	s.ForgetTraces()
	after := s.Truth()
	if len(after.Traces) != len(after.TraceIDs) || len(after.Traces) == 0 || len(after.Traces) >= len(before.Traces) {
		t.Fatalf("kept %d of %d traces", len(after.Traces), len(before.Traces))
	}
	pending := 0
	for _, tt := range after.Traces {
		if tt.PendingSpans == 0 {
			t.Fatalf("kept complete trace %s", tt.TraceID)
		}
		pending += tt.PendingSpans
	}
	if pending != after.PendingSpans || after.Spans != before.Spans || after.TraceLogs != before.TraceLogs {
		t.Fatalf("totals changed: %+v", after)
	}
	s.Flush()
	if tr := s.Truth(); tr.PendingSpans != 0 || tr.Spans != before.Spans+before.PendingSpans {
		t.Fatalf("after Flush: pending %d spans %d", tr.PendingSpans, tr.Spans)
	}
}
