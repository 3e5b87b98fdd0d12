package fuse

import (
	"math"
	"strconv"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
)

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

type scrape struct {
	at  time.Time
	kv  float64 // vllm:kv_cache_usage_perc on host h1, instance h1:8000, model m
	pre int64   // vllm:num_preemptions_total (counter)
	fb  float64 // DCGM_FI_DEV_FB_USED of GPU-1 on h1
	fb2 float64 // DCGM_FI_DEV_FB_USED of GPU-2 on h1 (another GPU: must not match)
}

func scrapeMsg(s scrape) []byte {
	ts := uint64(s.at.UnixNano())
	vllm := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{strKV("service.name", "vllm"), strKV("service.instance.id", "h1:8000"), strKV("host.name", "h1")}}
	dcgm := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{strKV("service.name", "dcgm-exporter"), strKV("service.instance.id", "h1:9400"), strKV("host.name", "h1")}}
	gauge := func(name string, v float64, labels ...*commonpb.KeyValue) *metricspb.Metric {
		return &metricspb.Metric{Name: name, Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
			TimeUnixNano: ts, Attributes: labels, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}}}}}}
	}
	counter := &metricspb.Metric{Name: "vllm:num_preemptions_total", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{IsMonotonic: true,
		AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
		DataPoints: []*metricspb.NumberDataPoint{{TimeUnixNano: ts, Attributes: []*commonpb.KeyValue{strKV("model_name", "m")},
			Value: &metricspb.NumberDataPoint_AsInt{AsInt: s.pre}}}}}}
	md := &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{
		{Resource: vllm, ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{
			gauge("vllm:kv_cache_usage_perc", s.kv, strKV("model_name", "m"), strKV("engine", "0")), counter,
			gauge("vllm:some_unknown_metric", 1)}}}},
		{Resource: dcgm, ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{
			gauge("DCGM_FI_DEV_FB_USED", s.fb, strKV("gpu", "0"), strKV("UUID", "GPU-1"), strKV("Hostname", "h1")),
			gauge("DCGM_FI_DEV_FB_USED", s.fb2, strKV("gpu", "1"), strKV("UUID", "GPU-2"), strKV("hostname", "h1"))}}}},
	}}
	b, _ := proto.Marshal(md)
	return b
}

func placedSpan(id [16]byte, start, end time.Time) []byte {
	r := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{strKV("service.name", "vllm"), strKV("service.instance.id", "h1:8000"),
		strKV("host.name", "h1"), strKV("gpu.uuid", "GPU-1"), strKV("gpu.index", "0")}}
	sp := &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 1, 1, 1, 1, 1, 1, 1}, Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
		Attributes: []*commonpb.KeyValue{strKV("gen_ai.response.model", "m")}}
	b, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: r, ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{sp}}}}}})
	return b
}

// TestResourcesAttachValuesInForce: the series of the request's instance
// (same model) and GPU are attached with the values in force during the
// request; another GPU's series and unknown metrics are not; the metric
// points arrive on another task than the span and after it.
func TestResourcesAttachValuesInForce(t *testing.T) {
	st, err := New(Config{Partitions: 2, IdleGap: time.Second, AllowedLateness: 10 * time.Second, ResourcesTopic: "braid.resources", ResourceIdleness: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, hs: []*harness{newStageHarness(t, st, 0), newStageHarness(t, st, 1)}}
	scrapes := []scrape{
		{base.Add(0 * time.Second), 0.10, 1, 1000, 5},
		{base.Add(1 * time.Second), 0.30, 2, 1100, 5},
		{base.Add(2 * time.Second), 0.80, 4, 1400, 5},
		{base.Add(3 * time.Second), 0.50, 7, 1300, 5},
		{base.Add(4 * time.Second), 0.20, 7, 1000, 5},
	}
	var id [16]byte
	id[0] = 0x42
	// The span first (on task 0), the scrapes later (on task 1).
	c.feed(0, inSpans, nil, placedSpan(id, base.Add(1500*time.Millisecond), base.Add(3500*time.Millisecond)))
	c.checkpoint(600 * time.Millisecond)
	for _, s := range scrapes {
		c.feed(1, inMetrics, nil, scrapeMsg(s))
	}
	if n := len(c.fused()); n != 0 {
		t.Fatalf("%d traces emitted before the table had their window", n)
	}
	moveEventTimeOn(c)
	ft := c.fused()[string(otlp.AppendTraceIDHex(nil, id))]
	if ft == nil {
		t.Fatal("trace not emitted")
	}
	got := map[string]string{}
	for _, w := range ft.GetResourceContext().GetSeries() {
		got[w.Metric+"|"+w.Resource] = fmtWindow(w.AtStart, w.AtEnd, w.Min, w.Max, w.Delta, w.Samples)
	}
	f := func(v float64) *float64 { return &v }
	want := map[string]string{
		"kv_cache_usage|service=vllm,instance=h1:8000,host=h1,model=m":                              fmtWindow(f(0.30), 0.50, 0.30, 0.80, nil, 2),
		"preemptions|service=vllm,instance=h1:8000,host=h1,model=m":                                 fmtWindow(f(2), 7, 2, 7, f(5), 2),
		"gpu_fb_used_mib|service=dcgm-exporter,instance=h1:9400,host=h1,gpu_uuid=GPU-1,gpu_index=0": fmtWindow(f(1100), 1300, 1100, 1400, nil, 2),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("attached %d series, want %d: %v", len(got), len(want), got)
	}
	if n := st.Counters().ResourcePoint.Load(); n != int64(4*(len(scrapes)+6)) {
		t.Errorf("ResourcePoint = %d, want %d", n, 4*(len(scrapes)+6))
	}
}

func fmtWindow(atStart *float64, atEnd, lo, hi float64, delta *float64, n uint32) string {
	s := "start="
	if atStart != nil {
		s += ftoa(*atStart)
	}
	s += " end=" + ftoa(atEnd) + " min=" + ftoa(lo) + " max=" + ftoa(hi) + " delta="
	if delta != nil {
		s += ftoa(*delta)
	}
	return s + " n=" + ftoa(float64(n))
}

func ftoa(v float64) string { return trimFloat(math.Round(v*1e6) / 1e6) }

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestFlushedTraceRevisedWithItsWindow: a trace emitted by flush_after
// (traffic stopped) before the resources table has its window is emitted
// again, with the window, once event time closes it: its last revision is
// the one a replay, which waits for the table, writes.
func TestFlushedTraceRevisedWithItsWindow(t *testing.T) {
	_, c, key := flushedTrace(t)
	if n := len(c.fused()[key].GetResourceContext().GetSeries()); n != 0 {
		t.Fatalf("the flushed record has %d series; the test needs the table behind", n)
	}
	// The samples of its window come, then event time moves on.
	for s := range 5 {
		c.feed(1, inMetrics, nil, scrapeMsg(scrape{base.Add(time.Duration(s) * time.Second), 0.1 * float64(s+1), int64(s), 1000, 5}))
	}
	moveEventTimeOn(c)
	last := c.fused()[key]
	if last.Revision == 0 || len(last.GetResourceContext().GetSeries()) == 0 {
		t.Fatalf("last revision %d with %d series; want a later revision with the window", last.Revision, len(last.GetResourceContext().GetSeries()))
	}
}

// TestFlushedTraceNotRevisedWithoutNews: a trace emitted by flush_after
// before the table has its window, whose window brings no samples before
// event time closes it, is not emitted again: that record would say what
// the first said. A revision carries something new.
func TestFlushedTraceNotRevisedWithoutNews(t *testing.T) {
	st, c, key := flushedTrace(t)
	moveEventTimeOn(c) // scrapes after its window only
	var records int
	for _, h := range c.hs {
		for _, r := range h.out("braid.fused") {
			if string(r.Key) == key {
				records++
			}
		}
	}
	if records != 1 || c.fused()[key].Revision != 0 {
		t.Fatalf("%d records, last revision %d; want the flushed one alone", records, c.fused()[key].Revision)
	}
	if n := st.Counters().Unrevised.Load(); n != 1 {
		t.Fatalf("Unrevised %d, want 1", n)
	}
	if n := st.Counters().Revisions.Load(); n != 0 {
		t.Fatalf("Revisions %d, want 0", n)
	}
}

// flushedTrace runs two tasks of a stage with the resources table and
// flush_after 2s: one trace (key) is read, traffic stops, and flush_after
// emits it before the table has its window.
func flushedTrace(t *testing.T) (*Stage, *cluster, string) {
	t.Helper()
	st, err := New(Config{Partitions: 2, IdleGap: time.Second, AllowedLateness: 10 * time.Second, FlushAfter: 2 * time.Second,
		ResourcesTopic: "braid.resources", ResourceIdleness: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, hs: []*harness{newStageHarness(t, st, 0), newStageHarness(t, st, 1)}}
	var id [16]byte
	id[0] = 0x42
	key := string(otlp.AppendTraceIDHex(nil, id))
	c.feed(0, inSpans, nil, placedSpan(id, base.Add(1500*time.Millisecond), base.Add(3500*time.Millisecond)))
	for _, h := range c.hs { // traffic stops: read to the end
		h.MarkCaughtUp()
	}
	for range 4 { // flush_after passes
		c.checkpoint(time.Second)
	}
	if c.fused()[key] == nil {
		t.Fatal("not emitted by flush_after")
	}
	return st, c, key
}

// moveEventTimeOn feeds six more scrapes (on task 1) and requests (on task
// 0), two seconds of event time apart, with a checkpoint after each: the
// watermark and the table's move past the first seconds.
func moveEventTimeOn(c *cluster) {
	for k := 1; k <= 6; k++ {
		at := base.Add(time.Duration(5+2*k) * time.Second)
		c.feed(1, inMetrics, nil, scrapeMsg(scrape{at, 0.1, 7, 1000, 5}))
		var other [16]byte
		other[0], other[1] = 0x99, byte(k)
		c.feed(0, inSpans, nil, spansMsg(requestSpan(other, "x", at, at)))
		c.checkpoint(600 * time.Millisecond)
	}
}
