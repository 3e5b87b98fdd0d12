package fuse

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/state"
)

const (
	inSpans   = 0
	inLogs    = 1
	inMetrics = 2
	inResolve = 3
	inKV      = 4
	inRepart  = 5
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	*engine.Harness
	t     *testing.T
	stage *Stage
	now   time.Time
	off   int64
}

func newHarness(t *testing.T, partitions int32, mod func(*Config)) *harness {
	t.Helper()
	return newTaskHarness(t, partitions, 0, mod)
}

// newTaskHarness opens task partition of a stage with partitions tasks.
func newTaskHarness(t *testing.T, partitions, partition int32, mod func(*Config)) *harness {
	t.Helper()
	cfg := Config{Partitions: partitions, IdleGap: time.Second, AllowedLateness: 10 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return newStageHarness(t, st, partition)
}

// newStageHarness opens task partition of st (tasks of one stage share its
// resources table, as the tasks of one instance do).
func newStageHarness(t *testing.T, st *Stage, partition int32) *harness {
	t.Helper()
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	now := time.Unix(1000, 0)
	h, err := engine.NewHarness(engine.Config{Store: store, OutOfOrderness: 2 * time.Second, Idleness: time.Second}, st.Topology(), partition, now)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{Harness: h, t: t, stage: st, now: now}
}

// feed processes one message value on input, 10ms of processing time later.
func (h *harness) feed(input int, key, value []byte) {
	h.t.Helper()
	h.feedAt(input, key, value, h.off)
	h.off++
}

func (h *harness) feedAt(input int, key, value []byte, offset int64) {
	h.t.Helper()
	h.now = h.now.Add(10 * time.Millisecond)
	h.SetNow(h.now)
	if err := h.Process(input, &kgo.Record{Key: key, Value: value, Offset: offset}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) out(topic string) []*kgo.Record {
	var rs []*kgo.Record
	for _, r := range h.Out {
		if r.Topic == topic {
			rs = append(rs, r)
		}
	}
	return rs
}

// fused decodes the emitted FusedTrace records, latest revision per trace,
// with the emission watermark cleared.
func (h *harness) fused() map[string]*braidpb.FusedTrace {
	h.t.Helper()
	m := map[string]*braidpb.FusedTrace{}
	parts := map[string][][]byte{}
	for _, r := range h.out("braid.fused") {
		if h.stage.cfg.MaxRecordBytes > 0 && len(r.Key)+len(r.Value) > h.stage.cfg.MaxRecordBytes {
			h.t.Fatalf("fused record of %d bytes, over the limit of %d", len(r.Key)+len(r.Value), h.stage.cfg.MaxRecordBytes)
		}
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			h.t.Fatalf("fused record does not decode: %v", err)
		}
		if !h.stage.cfg.JSON {
			checkFusedWire(h.t, r.Value)
		}
		if ft.Parts > 1 {
			// Parts concatenate to the whole revision (FusedTrace.part).
			k := string(r.Key) + "/" + strconv.Itoa(int(ft.Revision))
			if int(ft.Part) != len(parts[k]) {
				h.t.Fatalf("trace %s: part %d after %d parts", r.Key, ft.Part, len(parts[k]))
			}
			parts[k] = append(parts[k], r.Value)
			if len(parts[k]) < int(ft.Parts) {
				continue
			}
			ft.Reset()
			if err := proto.Unmarshal(bytes.Join(parts[k], nil), &ft); err != nil {
				h.t.Fatalf("fused parts do not decode: %v", err)
			}
			ft.Part, ft.Parts = 0, 0
		}
		ft.WatermarkUnixNano = 0
		if old := m[string(r.Key)]; old == nil || old.Revision < ft.Revision {
			m[string(r.Key)] = &ft
		}
	}
	return m
}

type genTrace struct {
	id    [16]byte
	spans []*tracepb.Span
	logs  []*logspb.LogRecord
	point *metricspb.HistogramDataPoint
}

var res = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
	{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}},
}}

func genTraces(r *rand.Rand, n int, start time.Time) []*genTrace {
	var ts []*genTrace
	for i := range n {
		g := &genTrace{}
		for k := range g.id {
			g.id[k] = byte(r.IntN(256))
		}
		t0 := start.Add(time.Duration(i) * 100 * time.Millisecond).UnixNano()
		root := sid(r)
		for s := range 3 {
			sp := &tracepb.Span{TraceId: g.id[:], SpanId: sid(r), Name: "llm.decode.layer." + strconv.Itoa(s),
				StartTimeUnixNano: uint64(t0), EndTimeUnixNano: uint64(t0 + int64(s+1)*int64(time.Millisecond))}
			if s == 0 {
				sp.SpanId, sp.Name = root, "llm_request"
			} else {
				sp.ParentSpanId = root
			}
			g.spans = append(g.spans, sp)
		}
		for l := range 2 {
			g.logs = append(g.logs, &logspb.LogRecord{TimeUnixNano: uint64(t0 + int64(l)), TraceId: g.id[:], SpanId: root,
				Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "log " + strconv.Itoa(l)}}})
		}
		g.point = &metricspb.HistogramDataPoint{TimeUnixNano: uint64(t0), Count: 1, Exemplars: []*metricspb.Exemplar{{TraceId: g.id[:], SpanId: root, TimeUnixNano: uint64(t0)}}}
		ts = append(ts, g)
	}
	return ts
}

func sid(r *rand.Rand) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	b[0] |= 1
	return b
}

func spansMsg(spans ...*tracepb.Span) []byte {
	b, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
	return b
}

func logsMsg(logs ...*logspb.LogRecord) []byte {
	b, _ := proto.Marshal(&logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{LogRecords: logs}}}}})
	return b
}

func pointsMsg(points ...*metricspb.HistogramDataPoint) []byte {
	b, _ := proto.Marshal(&metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{Resource: res, ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
		Name: "vllm:e2e_request_latency_seconds", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{DataPoints: points, AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}},
	}}}}}}})
	return b
}

type msg struct {
	input int
	key   []byte
	value []byte
	time  int64
	off   int64
}

// messages splits traces Collector-style: spans of a trace in two messages,
// logs in one, points in one; keyed by trace id.
func messages(ts []*genTrace) []msg {
	var ms []msg
	for _, g := range ts {
		key := otlp.AppendTraceIDHex(nil, g.id)
		t0 := int64(g.spans[0].StartTimeUnixNano)
		ms = append(ms,
			msg{inSpans, key, spansMsg(g.spans[1]), t0, 0},
			msg{inSpans, key, spansMsg(g.spans[0], g.spans[2]), t0 + 1, 0},
			msg{inLogs, key, logsMsg(g.logs...), t0 + 2, 0},
			msg{inMetrics, nil, pointsMsg(g.point), t0 + 3, 0},
		)
	}
	for i := range ms {
		ms[i].off = int64(i)
	}
	return ms
}

func TestFuseJoinsSpansLogsPoints(t *testing.T) {
	h := newHarness(t, 1, nil)
	ts := genTraces(rand.New(rand.NewPCG(1, 2)), 20, base)
	for _, m := range messages(ts) {
		h.feed(m.input, m.key, m.value)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	got := h.fused()
	if len(got) != len(ts) {
		t.Fatalf("fused %d traces, want %d", len(got), len(ts))
	}
	for _, g := range ts {
		ft := got[string(otlp.AppendTraceIDHex(nil, g.id))]
		if ft == nil {
			t.Fatalf("trace %x missing", g.id)
		}
		if len(ft.Spans) != 3 || len(ft.Logs) != 2 || len(ft.Points) != 1 {
			t.Fatalf("trace %x: %d spans, %d logs, %d points; want 3, 2, 1", g.id, len(ft.Spans), len(ft.Logs), len(ft.Points))
		}
		for _, s := range ft.Spans {
			if !containsSpan(g.spans, s.Span) {
				t.Errorf("trace %x holds a span it does not own: %v", g.id, s.Span)
			}
		}
		if ft.Summary.GetRootSpanName() != "llm_request" || ft.Summary.GetRootServiceName() != "vllm" {
			t.Errorf("summary root = %q/%q", ft.Summary.GetRootSpanName(), ft.Summary.GetRootServiceName())
		}
		if h := ft.Points[0].Metric.GetHistogram(); h == nil || len(h.DataPoints) != 1 || !proto.Equal(h.DataPoints[0], g.point) {
			t.Errorf("point not carried intact: %v", ft.Points[0].Metric)
		}
		if ft.Revision != 0 {
			t.Errorf("revision %d, want 0", ft.Revision)
		}
	}
}

func containsSpan(spans []*tracepb.Span, s *tracepb.Span) bool {
	for _, x := range spans {
		if proto.Equal(x, s) {
			return true
		}
	}
	return false
}

func TestFuseOutOfOrderWithinBoundGivesSameOutput(t *testing.T) {
	ts := genTraces(rand.New(rand.NewPCG(3, 4)), 30, base)
	ms := messages(ts)
	run := func(ms []msg) map[string]*braidpb.FusedTrace {
		h := newHarness(t, 1, nil)
		for _, m := range ms {
			h.feedAt(m.input, m.key, m.value, m.off)
		}
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
		if n := len(h.out("braid.late")); n != 0 {
			t.Fatalf("%d late records within the bound", n)
		}
		return h.fused()
	}
	sorted := run(ms)
	// Shuffle within the out-of-orderness bound (2s): swap messages whose
	// event times are less than 1s apart.
	r := rand.New(rand.NewPCG(5, 6))
	shuffled := append([]msg(nil), ms...)
	for i := range shuffled {
		j := i + r.IntN(8)
		if j < len(shuffled) && shuffled[j].time-shuffled[i].time < int64(time.Second) {
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		}
	}
	got := run(shuffled)
	if len(got) != len(sorted) {
		t.Fatalf("shuffled gave %d traces, sorted %d", len(got), len(sorted))
	}
	for k, want := range sorted {
		if !proto.Equal(got[k], want) {
			t.Fatalf("trace %s differs between sorted and shuffled input", k)
		}
	}
}

func TestFuseLateDataRevisesThenGoesToLate(t *testing.T) {
	h := newHarness(t, 1, nil)
	g := genTraces(rand.New(rand.NewPCG(7, 8)), 1, base)[0]
	key := otlp.AppendTraceIDHex(nil, g.id)
	h.feed(inSpans, key, spansMsg(g.spans[0], g.spans[1]))
	// Move the watermark past the trace's idle gap with a later trace.
	later := genTraces(rand.New(rand.NewPCG(9, 10)), 1, base.Add(5*time.Second))[0]
	h.now = h.now.Add(1500 * time.Millisecond) // the inputs without data go idle
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, later.id), spansMsg(later.spans...))
	if got := h.fused()[string(key)]; got == nil || len(got.Spans) != 2 || got.Revision != 0 {
		t.Fatalf("first emission = %v, want revision 0 with 2 spans", got)
	}
	// Within allowed lateness (10s): revision 1 with all 3 spans.
	h.feed(inSpans, key, spansMsg(g.spans[2]))
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, later.id), spansMsg(later.spans...)) // activity on the spans input
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	got := h.fused()[string(key)]
	if got == nil || got.Revision != 1 || len(got.Spans) != 3 {
		t.Fatalf("revision = %v, want revision 1 with 3 spans", got)
	}
	if !hasFlag(got, braidpb.Flag_FLAG_REVISED) {
		t.Errorf("revision not flagged: %v", got.Flags)
	}
	// Beyond allowed lateness: the log goes to braid.late, unchanged.
	far := genTraces(rand.New(rand.NewPCG(11, 12)), 1, base.Add(30*time.Second))[0]
	h.feed(inSpans, otlp.AppendTraceIDHex(nil, far.id), spansMsg(far.spans...))
	h.feed(inLogs, key, logsMsg(g.logs[0]))
	late := h.out("braid.late")
	if len(late) != 1 {
		t.Fatalf("%d late records, want 1", len(late))
	}
	var ld logspb.LogsData
	if err := proto.Unmarshal(late[0].Value, &ld); err != nil {
		t.Fatal(err)
	}
	if lr := ld.ResourceLogs[0].ScopeLogs[0].LogRecords[0]; !proto.Equal(lr, g.logs[0]) {
		t.Errorf("late log changed: %v", lr)
	}
	if hdr(late[0], "braid.topic") != "otlp_logs" || hdr(late[0], "braid.reason") == "" || string(late[0].Key) != string(key) {
		t.Errorf("late headers/key wrong: %v key %s", late[0].Headers, late[0].Key)
	}
	if c := h.stage.Counters(); c.Late.Load() != 1 || c.Revisions.Load() != 1 {
		t.Errorf("counters late=%d revisions=%d", c.Late.Load(), c.Revisions.Load())
	}
}

// TestFuseLatenessIsTheTrace: a server that writes a request's spans
// when the request ends (INPUTS.md: vLLM) gives its early spans event
// times as old as the request is long. Members that arrive together are
// judged by the newest of them, and a trace still open takes members
// however old their own times: neither goes to braid.late. A record whose
// newest member is beyond allowed lateness, for no open trace, does.
func TestFuseLatenessIsTheTrace(t *testing.T) {
	h := newHarness(t, 1, nil) // allowed lateness 10s, out-of-orderness 2s
	r := rand.New(rand.NewPCG(13, 14))
	span := func(id [16]byte, root []byte, end time.Duration) *tracepb.Span {
		sp := &tracepb.Span{TraceId: id[:], SpanId: sid(r), Name: "llm_request",
			StartTimeUnixNano: uint64(base.UnixNano()), EndTimeUnixNano: uint64(base.Add(end).UnixNano())}
		if root != nil {
			sp.ParentSpanId, sp.Name = root, "llm.prefill"
		} else {
			sp.SpanId = sid(r)
		}
		return sp
	}
	newID := func() [16]byte {
		var id [16]byte
		for i := range id {
			id[i] = byte(r.IntN(256))
		}
		return id
	}
	key := func(id [16]byte) []byte { return otlp.AppendTraceIDHex(nil, id) }
	// The watermark to base+28s: a trace ending at base+30s. A member
	// alone is late from 10s behind it, before base+18s.
	h.now = h.now.Add(1500 * time.Millisecond) // the inputs without data go idle
	mover := newID()
	h.feed(inSpans, key(mover), spansMsg(span(mover, nil, 30*time.Second)))

	// A 26s request, its spans in one record: the prefill span ended
	// 24s before the root.
	long := newID()
	longRoot := span(long, nil, 29*time.Second)
	h.feed(inSpans, key(long), spansMsg(longRoot, span(long, longRoot.SpanId, 5*time.Second)))
	// An open trace, then a member of it 26s older than its root.
	open := newID()
	openRoot := span(open, nil, 29*time.Second)
	h.feed(inSpans, key(open), spansMsg(openRoot))
	h.feed(inSpans, key(open), spansMsg(span(open, openRoot.SpanId, 3*time.Second)))
	// A record all of whose members are beyond allowed lateness.
	old := newID()
	oldRoot := span(old, nil, 6*time.Second)
	h.feed(inSpans, key(old), spansMsg(oldRoot, span(old, oldRoot.SpanId, 4*time.Second)))

	late := h.out("braid.late")
	for _, l := range late {
		if string(l.Key) != string(key(old)) {
			t.Errorf("a member of trace %s went to braid.late: %s", l.Key, hdr(l, "braid.reason"))
		}
	}
	if len(late) != 2 {
		t.Errorf("%d late records, want the 2 spans of the record beyond allowed lateness", len(late))
	}
	// Every trace out: the watermark far past them.
	h.now = h.now.Add(time.Second)
	far := newID()
	h.feed(inSpans, key(far), spansMsg(span(far, nil, 2*time.Minute)))
	fused := h.fused()
	for name, id := range map[string][16]byte{"the long request's": long, "the open trace's": open} {
		if got := fused[string(key(id))]; got == nil || len(got.Spans) != 2 {
			t.Errorf("%s trace fused as %v, want its 2 spans", name, got)
		}
	}
	if got := fused[string(key(old))]; got != nil {
		t.Errorf("the late record's trace was fused: %v", got)
	}
}

func hasFlag(ft *braidpb.FusedTrace, f braidpb.Flag) bool {
	for _, x := range ft.Flags {
		if x == f {
			return true
		}
	}
	return false
}

func hdr(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func TestFuseMalformedGoesToDLQ(t *testing.T) {
	h := newHarness(t, 1, nil)
	good := genTraces(rand.New(rand.NewPCG(1, 1)), 1, base)[0]
	valid := spansMsg(good.spans...)
	bad := map[string][]byte{
		"truncated": valid[:len(valid)-3],
		"empty":     {},
		"json":      []byte(`{"resourceSpans": [`),
		"wrongtype": logsMsg(good.logs...),
	}
	names := make([]string, 0, len(bad))
	for k := range bad {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		h.feed(inSpans, []byte(n), bad[n])
	}
	h.feed(inSpans, nil, valid) // the job goes on
	dlq := h.out("braid.dlq")
	if len(dlq) != len(bad) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), len(bad))
	}
	for _, r := range dlq {
		if string(r.Value) != string(bad[string(r.Key)]) {
			t.Errorf("DLQ value of %s changed", r.Key)
		}
		if hdr(r, "braid.reason") == "" || hdr(r, "braid.topic") != "otlp_spans" || hdr(r, "braid.partition") != "0" || hdr(r, "braid.offset") == "" {
			t.Errorf("DLQ headers of %s: %v", r.Key, r.Headers)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(h.fused()) != 1 {
		t.Errorf("the valid message after the bad ones was not fused")
	}
}

func TestFuseCheckpointAbortRestart(t *testing.T) {
	h := newHarness(t, 1, nil)
	ts := genTraces(rand.New(rand.NewPCG(13, 14)), 2, base)
	a, b := ts[0], ts[1]
	ka, kb := otlp.AppendTraceIDHex(nil, a.id), otlp.AppendTraceIDHex(nil, b.id)
	h.feed(inSpans, ka, spansMsg(a.spans[0]))
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	h.feed(inSpans, ka, spansMsg(a.spans[1]))
	h.feed(inSpans, kb, spansMsg(b.spans...))
	if err := h.Abort(); err != nil { // the last two messages are undone
		t.Fatal(err)
	}
	h.feed(inSpans, ka, spansMsg(a.spans[2]))
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	h.feed(inLogs, ka, logsMsg(a.logs...)) // lost in the crash below
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	got := h.fused()
	if len(got) != 1 || got[string(ka)] == nil {
		t.Fatalf("fused %v, want only trace a", keys(got))
	}
	ft := got[string(ka)]
	if len(ft.Spans) != 2 || len(ft.Logs) != 0 {
		t.Fatalf("trace a after abort+restart: %d spans %d logs, want 2 and 0", len(ft.Spans), len(ft.Logs))
	}
	_ = kb
}

func keys(m map[string]*braidpb.FusedTrace) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestFuseCapsCutAndFlag(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxSpans = 2 })
	g := genTraces(rand.New(rand.NewPCG(15, 16)), 1, base)[0]
	key := otlp.AppendTraceIDHex(nil, g.id)
	h.feed(inSpans, key, spansMsg(g.spans...))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	ft := h.fused()[string(key)]
	if ft == nil || len(ft.Spans) != 2 || ft.Summary.GetDroppedSpans() != 1 || !hasFlag(ft, braidpb.Flag_FLAG_TRUNCATED) {
		t.Fatalf("capped trace = %v", ft)
	}
	if h.stage.Counters().Truncated.Load() != 1 {
		t.Errorf("truncated counter = %d", h.stage.Counters().Truncated.Load())
	}
}

func TestFuseRepartitionsForeignTraces(t *testing.T) {
	h := newHarness(t, 4, nil)
	ts := genTraces(rand.New(rand.NewPCG(17, 18)), 40, base)
	var all []*tracepb.Span
	for _, g := range ts {
		all = append(all, g.spans...)
	}
	h.feed(inSpans, nil, spansMsg(all...)) // one unkeyed batch
	local, remote := 0, 0
	for _, g := range ts {
		if otlp.HashPartition(otlp.AppendTraceIDHex(nil, g.id), 4) == 0 {
			local++
		} else {
			remote++
		}
	}
	rep := h.out("braid.fuse-repartition")
	if len(rep) != remote {
		t.Fatalf("%d repartition records, want %d", len(rep), remote)
	}
	for _, r := range rep {
		id, ok := otlp.ParseTraceIDHex(r.Key)
		if !ok || otlp.HashPartition(r.Key, 4) != r.Partition || r.Partition == 0 {
			t.Fatalf("repartition record key %s partition %d", r.Key, r.Partition)
		}
		_ = id
	}
	// A task fuses what it receives on the repartition topic.
	h2 := newHarness(t, 4, nil)
	for _, r := range rep {
		if r.Partition == 1 {
			h2.feed(inRepart, r.Key, r.Value)
		}
	}
	h2.SetNow(h2.now.Add(5 * time.Second))
	if err := h2.Finish(); err != nil {
		t.Fatal(err)
	}
	for k, ft := range h2.fused() {
		if otlp.HashPartition([]byte(k), 4) != 1 || len(ft.Spans) != 3 {
			t.Errorf("repartitioned trace %s: %d spans", k, len(ft.Spans))
		}
	}
	if h.stage.Counters().Local.Load() != int64(local) {
		t.Errorf("local groups = %d, want %d", h.stage.Counters().Local.Load(), local)
	}
}

func TestFuseTimerBacklogFiresInSlices(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1 })
	ts := genTraces(rand.New(rand.NewPCG(19, 20)), 3*timerSlice, base)
	var all []*tracepb.Span
	for _, g := range ts {
		all = append(all, g.spans...)
	}
	h.feed(inSpans, nil, spansMsg(all...)) // one batch: no watermark step in between
	if n := len(h.out("braid.fused")); n != 0 {
		t.Fatalf("%d traces emitted before the watermark moved", n)
	}
	// The inputs without data go idle: the watermark jumps past every
	// trace at once, and one call fires one slice.
	h.now = h.now.Add(2 * time.Second)
	h.SetNow(h.now)
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	first := len(h.out("braid.fused"))
	if first == 0 || first > timerSlice {
		t.Fatalf("one slice emitted %d traces, want 1..%d", first, timerSlice)
	}
	if err := h.Advance(); err != nil { // goes on while backlogged
		t.Fatal(err)
	}
	if n := len(h.out("braid.fused")); n <= first {
		t.Fatalf("Advance emitted nothing more than the first slice (%d)", n)
	}
	if err := h.Finish(); err != nil { // the last traces, within bound + gap of the end
		t.Fatal(err)
	}
	if n := len(h.fused()); n != len(ts) {
		t.Fatalf("emitted %d traces, want %d", n, len(ts))
	}
}

func TestFuseLargeTraceIsChunkedUnderTheRecordLimit(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.FlushAfter = -1; c.MaxBytes = 4 << 20 })
	g := genTraces(rand.New(rand.NewPCG(21, 22)), 1, base)[0]
	key := otlp.AppendTraceIDHex(nil, g.id)
	big := strings.Repeat("x", 4096)
	var spans []*tracepb.Span
	for i := range 400 { // ≈1.7 MB of spans in one trace, from one resource
		sp := proto.Clone(g.spans[1]).(*tracepb.Span)
		sp.SpanId = sid(rand.New(rand.NewPCG(uint64(i), 1)))
		sp.Name = big
		spans = append(spans, sp)
	}
	for i := 0; i < len(spans); i += 50 {
		h.feed(inSpans, key, spansMsg(spans[i:i+50]...))
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.out("braid.fuse-changelog") {
		if len(r.Value) > maxChunk+64<<10 {
			t.Fatalf("changelog record of %d bytes, want ≤ %d", len(r.Value), maxChunk+64<<10)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if ft := h.fused()[string(key)]; ft == nil || len(ft.Spans) != len(spans) {
		n := -1
		if ft != nil {
			n = len(ft.Spans)
		}
		t.Fatalf("large trace fused with %d spans, want %d", n, len(spans))
	}
}
