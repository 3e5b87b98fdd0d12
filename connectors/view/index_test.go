package view

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}
func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// fakeTrace is the generator's truth of one trace.
type fakeTrace struct {
	id       [16]byte
	start    time.Time
	ttft     time.Duration
	instance string
	model    string
	tenant   string
	err      bool
	hit      [3]float64 // per layer 0..2
}

func (f *fakeTrace) record() *braidpb.FusedTrace {
	st := uint64(f.start.UnixNano())
	e2e := f.ttft + 500*time.Millisecond
	end := st + uint64(e2e)
	root := &tracepb.Span{TraceId: f.id[:], SpanId: []byte{1, 0, 0, 0, 0, 0, 0, 1}, Name: "llm_request", StartTimeUnixNano: st, EndTimeUnixNano: end}
	if f.err {
		root.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
	}
	spans := []*braidpb.FusedSpan{{Span: root, Origin: &braidpb.Origin{Topic: "otlp_spans", Partition: 1, Offset: 7}}}
	for l := range 3 {
		s := st + uint64(f.ttft) + uint64(l)*uint64(100*time.Millisecond)
		spans = append(spans, &braidpb.FusedSpan{Span: &tracepb.Span{TraceId: f.id[:], SpanId: []byte{2, 0, 0, 0, 0, 0, 0, byte(l)}, ParentSpanId: root.SpanId,
			Name: fmt.Sprintf("llm.decode.layer.%d", l), StartTimeUnixNano: s, EndTimeUnixNano: s + uint64(90*time.Millisecond),
			Attributes: []*commonpb.KeyValue{num("layer_id", int64(l)), dbl("kv_cache_hit_ratio", f.hit[l])}}})
	}
	ft := &braidpb.FusedTrace{TraceId: f.id[:], StartTimeUnixNano: st, EndTimeUnixNano: end,
		Resources: []*resourcepb.Resource{{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("service.instance.id", f.instance),
			str("host.name", strings.Split(f.instance, ":")[0]), str("gpu.uuid", "GPU-"+f.instance)}}},
		Spans: spans,
		Logs: []*braidpb.FusedLog{{Log: &logspb.LogRecord{TimeUnixNano: end, SeverityText: "INFO", Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "Finished request"}}},
			Origin: &braidpb.Origin{Topic: "otlp_logs", Partition: 0, Offset: 3}}},
		Derived: &braidpb.Derived{TtftNanos: int64(f.ttft), E2ENanos: int64(e2e), Model: f.model, Tenant: f.tenant, RequestIds: []string{"cmpl-" + hex.EncodeToString(f.id[:4])}},
		Summary: &braidpb.Summary{SpanCount: 4},
	}
	if f.err {
		ft.Summary.ErrorSpanCount = 1
		ft.Flags = append(ft.Flags, braidpb.Flag_FLAG_ERROR)
	}
	return ft
}

// fleet makes n traces over 10 minutes: 8 instances, 3 models, TTFT
// around 200 ms, and a spike (TTFT × 20) on spikeInstance in minutes 4–6.
func fleet(seed uint64, n int, spikeInstance string) []*fakeTrace {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []*fakeTrace
	for i := range n {
		f := &fakeTrace{start: t0.Add(time.Duration(i) * 10 * time.Minute / time.Duration(n))}
		for j := range f.id {
			f.id[j] = byte(rng.UintN(256))
		}
		f.instance = fmt.Sprintf("gpu-node-%02d:%d", rng.IntN(4)+1, 8000+rng.IntN(2))
		f.model = []string{"llama", "qwen", "mixtral"}[rng.IntN(3)]
		f.tenant = []string{"acme", "globex", "initech"}[rng.IntN(3)]
		f.err = rng.IntN(16) == 0
		f.ttft = time.Duration(100+rng.IntN(200)) * time.Millisecond
		for l := range f.hit {
			f.hit[l] = rng.Float64()
		}
		if m := f.start.Sub(t0); f.instance == spikeInstance && m >= 4*time.Minute && m < 6*time.Minute {
			f.ttft *= 20
		}
		out = append(out, f)
	}
	return out
}

func records(t testing.TB, topic string, kind Kind, first int64, ms ...proto.Message) []Record {
	var out []Record
	for i, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Record{Kind: kind, Topic: topic, Partition: 0, Offset: first + int64(i), Value: b})
	}
	return out
}

func openIndex(t testing.TB, dir string, mod func(*Options)) *Index {
	t.Helper()
	o := Options{Dir: dir}
	if mod != nil {
		mod(&o)
	}
	ix, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func applyFleet(t testing.TB, ix *Index, fs []*fakeTrace) {
	t.Helper()
	for i := 0; i < len(fs); i += 100 {
		var ms []proto.Message
		for _, f := range fs[i:min(i+100, len(fs))] {
			ms = append(ms, f.record())
		}
		if err := ix.Apply(records(t, "braid.fused", KindFused, int64(i), ms...)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOverviewAgainstBruteForce checks the heatmap cells, the groups and
// the totals against a count made here from the generator's truth.
func TestOverviewAgainstBruteForce(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		fs := fleet(seed, 3000, "gpu-node-02:8001")
		ix := openIndex(t, t.TempDir(), nil)
		applyFleet(t, ix, fs)
		from, to := t0.Add(2*time.Minute), t0.Add(8*time.Minute)
		ov := ix.Overview(Query{From: from, To: to, Filters: map[string]string{"model": "qwen"}})
		want := map[[2]int64]int64{}
		total := 0
		groups := map[string]int{}
		for _, f := range fs {
			if f.start.Before(from) || !f.start.Before(to) || f.model != "qwen" {
				continue
			}
			total++
			groups[f.instance]++
			ti := int64(f.start.Sub(from) / (5 * time.Second)) // 6 min / 120 buckets
			ms := float64(f.ttft) / 1e6
			li := int64(0)
			for li+1 < latBuckets && ms >= latBounds[li+1] {
				li++
			}
			want[[2]int64{ti, li}]++
		}
		if ov.Total != total || ov.TTFT.BucketMs != 5000 {
			t.Fatalf("seed %d: total %d bucket %d, want %d, 5000", seed, ov.Total, ov.TTFT.BucketMs, total)
		}
		got := map[[2]int64]int64{}
		for _, c := range ov.TTFT.Cells {
			got[[2]int64{c[0], c[1]}] = c[2]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d: cells\n got %v\nwant %v", seed, got, want)
		}
		for _, g := range ov.Groups {
			if g.Model != "qwen" || groups[g.Instance] != g.Requests {
				t.Fatalf("seed %d: group %+v, want %d requests", seed, g, groups[g.Instance])
			}
			delete(groups, g.Instance)
		}
		if len(groups) != 0 {
			t.Fatalf("seed %d: groups missing: %v", seed, groups)
		}
		ix.Close()
	}
}

// TestExplainRanksTheSpikesInstanceFirst selects the spike's rectangle
// and expects the instance (and its GPU, one to one) first, with the
// spiking value on top.
func TestExplainRanksTheSpikesInstanceFirst(t *testing.T) {
	for _, spike := range []string{"gpu-node-02:8001", "gpu-node-04:8000"} {
		fs := fleet(7, 4000, spike)
		ix := openIndex(t, t.TempDir(), nil)
		applyFleet(t, ix, fs)
		q := Query{From: t0, To: t0.Add(10 * time.Minute), Metric: "ttft", Lo: time.Second, Hi: time.Hour,
			SelFrom: t0.Add(4 * time.Minute), SelTo: t0.Add(6 * time.Minute)}
		ex := ix.Explain(q)
		sel := 0
		for _, f := range fs {
			if f.instance == spike && f.ttft >= time.Second {
				sel++
			}
		}
		if ex.Selected != sel || ex.Baseline != len(fs)-sel {
			t.Fatalf("selected %d baseline %d, want %d %d", ex.Selected, ex.Baseline, sel, len(fs)-sel)
		}
		top := ex.Dimensions[:2]
		names := []string{top[0].Name, top[1].Name}
		slices.Sort(names)
		if fmt.Sprint(names) != "[gpu instance]" || top[0].Score < 0.8 {
			t.Fatalf("top dimensions %+v", top)
		}
		for _, d := range top {
			want := spike
			if d.Name == "gpu" {
				want = "GPU-" + spike
			}
			if d.Values[0].Value != want || d.Values[0].SelShare != 1 {
				t.Fatalf("%s: top value %+v, want %s", d.Name, d.Values[0], want)
			}
		}
		for _, d := range ex.Dimensions[2:] {
			if d.Name != "host" && d.Score > 0.5 {
				t.Fatalf("dimension %s scores %v though it does not tell the spike apart", d.Name, d.Score)
			}
		}
		// The slowest traces of the selection are the spike's, slowest first.
		tl := ix.Traces(q)
		if tl.Total != sel || len(tl.Traces) != 50 || tl.Traces[0].Instance != spike || tl.Traces[0].TTFT < tl.Traces[49].TTFT {
			t.Fatalf("traces %d %+v", tl.Total, tl.Traces[:1])
		}
		ix.Close()
	}
}

func TestLayersMeanPerBucket(t *testing.T) {
	fs := fleet(3, 600, "")
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	applyFleet(t, ix, fs)
	from, to := t0, t0.Add(10*time.Minute)
	ly, err := ix.Layers(Query{From: from, To: to, Filters: map[string]string{"instance": "gpu-node-01:8000"}})
	if err != nil {
		t.Fatal(err)
	}
	type acc struct {
		sum float64
		n   int
	}
	want := map[[2]int]*acc{}
	for _, f := range fs {
		if f.instance != "gpu-node-01:8000" {
			continue
		}
		ti := int(f.start.Sub(from) / (5 * time.Second))
		for l, h := range f.hit {
			a := want[[2]int{ti, l}]
			if a == nil {
				a = &acc{}
				want[[2]int{ti, l}] = a
			}
			a.sum += h
			a.n++
		}
	}
	if fmt.Sprint(ly.Layers) != "[0 1 2]" || len(ly.HitRatio) != len(want) {
		t.Fatalf("layers %v, %d cells, want 3 layers, %d cells", ly.Layers, len(ly.HitRatio), len(want))
	}
	for _, c := range ly.HitRatio {
		a := want[[2]int{int(c[0]), int(c[1])}]
		if a == nil || abs(c[2]-a.sum/float64(a.n)) > 1e-4 {
			t.Fatalf("cell %v, want %v", c, a)
		}
	}
	for _, c := range ly.DecodeMs {
		if c[2] != 90 {
			t.Fatalf("decode cell %v, want 90 ms", c)
		}
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

func testIncident(id string, victims []*fakeTrace, rev uint32) *braidpb.Incident {
	at := victims[0].start.Add(-time.Second)
	inc := &braidpb.Incident{Id: id, Revision: rev, State: braidpb.IncidentState_INCIDENT_STATE_OPEN, Host: "gpu-node-02", Gpu: "GPU-x",
		Pattern: braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE, FirstUnixNano: uint64(at.UnixNano()), LastUnixNano: uint64(victims[len(victims)-1].start.UnixNano()),
		Root: &braidpb.RootCause{Node: "req:GPU-x/cmpl-root", Kind: braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE, RequestId: "cmpl-root", Block: 7, Layer: 1, TimeUnixNano: uint64(at.UnixNano()),
			Origin: &braidpb.Origin{Topic: "otlp_logs", Partition: 2, Offset: 99}, Detail: "block 7 freed by cmpl-root, not zeroed"},
		Layers: []*braidpb.LayerCount{{Layer: 1, Hits: 2, CorruptedReads: 5}, {Layer: 0, CorruptedReads: 1}}}
	for i, v := range victims {
		req := "cmpl-" + hex.EncodeToString(v.id[:4])
		inc.Polluted = append(inc.Polluted, &braidpb.PollutedRequest{RequestId: req, TraceId: v.id[:], Via: braidpb.PollutionVia_POLLUTION_VIA_DIRECT,
			TimeUnixNano: uint64(v.start.UnixNano()), From: "blk:GPU-x/7"})
		inc.Edges = append(inc.Edges, &braidpb.PollutionEdge{Source: "blk:GPU-x/7", Target: "req:GPU-x/" + req, Kind: braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE,
			TimeUnixNano: uint64(v.start.UnixNano()) + uint64(i), Block: 7, Layer: 1, TargetRequest: req, TargetTraceId: v.id[:],
			Evidence: []*braidpb.Origin{{Topic: "otlp_logs", Partition: 2, Offset: int64(100 + i)}}, IncidentId: id, Detail: "read of block 7 by " + req})
	}
	return inc
}

// TestRestartResumes: what was committed is there after a reopen, with the
// input position; the pages read the whole records.
func TestRestartResumes(t *testing.T) {
	dir := t.TempDir()
	fs := fleet(5, 500, "")
	ix := openIndex(t, dir, nil)
	applyFleet(t, ix, fs)
	inc := testIncident("inc-1", fs[10:13], 0)
	if err := ix.Apply(records(t, "braid.incidents", KindIncident, 0, inc)); err != nil {
		t.Fatal(err)
	}
	alert := &braidpb.Alert{Rule: "BraidTTFTHigh", Group: map[string]string{"instance": "gpu-node-02:8001", "model": "qwen"}, State: braidpb.AlertState_ALERT_STATE_FIRING,
		Episode: 1, WindowEndUnixNano: uint64(t0.Add(6 * time.Minute).UnixNano()), IncidentIds: []string{"inc-1"}}
	if err := ix.Apply(records(t, "braid.alerts", KindAlert, 41, alert)); err != nil {
		t.Fatal(err)
	}
	before := ix.Status()
	ix.Close()

	ix = openIndex(t, dir, nil)
	defer ix.Close()
	after := ix.Status()
	if after.Traces != 500 || after.Incidents != 1 || after.Alerts != 1 || after.Newest != before.Newest || after.Oldest != before.Oldest {
		t.Fatalf("after reopen %+v, before %+v", after, before)
	}
	offs := ix.Offsets()
	if offs["braid.fused"][0] != 500 || offs["braid.incidents"][0] != 1 || offs["braid.alerts"][0] != 42 {
		t.Fatalf("offsets %v", offs)
	}
	v := fs[11]
	tp, err := ix.TracePage(hex.EncodeToString(v.id[:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Spans) != 4 || tp.Spans[0].Name != "llm_request" || tp.Spans[1].Depth != 1 || len(tp.Logs) != 1 || tp.Instance != v.instance {
		t.Fatalf("trace page %+v", tp)
	}
	if len(tp.KVEvents) != 1 || !strings.Contains(tp.KVEvents[0].Text, "read of block 7") || tp.KVEvents[0].Origin != "otlp_logs/2/101" || len(tp.Incidents) != 1 {
		t.Fatalf("KV events %+v incidents %+v", tp.KVEvents, tp.Incidents)
	}
	ip, err := ix.IncidentPage("inc-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ip.Victims) != 3 || !ip.Victims[0].Indexed || !ip.Graph.Nodes[0].Root || ip.Graph.Nodes[0].Label != "cmpl-root" || len(ip.Alerts) != 1 {
		t.Fatalf("incident page %+v", ip)
	}
	if ip.Timeline[0].Kind != "root" || ip.Timeline[0].Origin != "otlp_logs/2/99" {
		t.Fatalf("timeline %+v", ip.Timeline)
	}
	ly, err := ix.Layers(Query{From: t0, To: t0.Add(time.Hour), Incident: "inc-1"})
	if err != nil || fmt.Sprint(ly.Polluted) != "[1 0]" {
		t.Fatalf("layers of the incident %v %v", ly.Polluted, err)
	}
	if p := ix.Alert(AlertKeyOf(alert)); len(p.Episodes) != 1 || p.Key != `BraidTTFTHigh/instance="gpu-node-02:8001",model="qwen"` {
		t.Fatalf("alert page %+v", p)
	}
}

// TestBounds: retention behind the newest event time and MaxTraces hold,
// in memory and in the store (a reopen sees the same), oldest first.
func TestBounds(t *testing.T) {
	dir := t.TempDir()
	fs := fleet(9, 2000, "") // 10 minutes
	ix := openIndex(t, dir, func(o *Options) { o.Retention = 5 * time.Minute; o.MaxTraces = 700 })
	applyFleet(t, ix, fs)
	st := ix.Status()
	if st.Traces != 700 || time.UnixMilli(st.Oldest).Before(fs[1300].start.Truncate(time.Millisecond)) {
		t.Fatalf("status %+v, want the newest 700 traces", st)
	}
	// One more Apply deletes the evicted from the store.
	if err := ix.Apply(records(t, "braid.fused", KindFused, 2000, fs[1999].record())); err != nil {
		t.Fatal(err)
	}
	ix.Close()
	ix = openIndex(t, dir, func(o *Options) { o.Retention = time.Minute })
	defer ix.Close()
	st = ix.Status()
	want := 0
	for _, f := range fs {
		if !f.start.Add(f.ttft + 500*time.Millisecond).Before(fs[1999].start.Add(fs[1999].ttft + 500*time.Millisecond - time.Minute)) {
			want++
		}
	}
	if st.Traces != want {
		t.Fatalf("after reopen with 1m retention: %d traces, want %d", st.Traces, want)
	}
	if _, err := ix.TracePage(hex.EncodeToString(fs[100].id[:])); err != errNotFound {
		t.Fatalf("evicted trace: %v", err)
	}
}

// TestRevisionsPartsAndFormats: the highest revision wins whatever the
// order; a revision in parts is indexed once all parts are there; protojson
// records are read; bad records are counted and skipped.
func TestRevisionsPartsAndFormats(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	f := fleet(11, 1, "")[0]
	r0 := f.record()
	r1 := proto.Clone(r0).(*braidpb.FusedTrace)
	r1.Revision = 1
	r1.IncidentIds = []string{"inc-9"}
	r1.Flags = append(r1.Flags, braidpb.Flag_FLAG_POLLUTED)
	// Revision 1 in two parts, cut at a field boundary of the whole.
	whole, _ := proto.Marshal(r1)
	head := proto.Clone(r1).(*braidpb.FusedTrace)
	head.Logs, head.IncidentIds = nil, nil
	head.Part, head.Parts = 0, 2
	tail := &braidpb.FusedTrace{TraceId: r1.TraceId, Revision: 1, Logs: r1.Logs, IncidentIds: r1.IncidentIds, Part: 1, Parts: 2}
	hb, _ := proto.Marshal(head)
	tb, _ := proto.Marshal(tail)
	_ = whole
	js, _ := protojson.Marshal(r0)
	recs := []Record{
		{Kind: KindFused, Topic: "braid.fused", Offset: 0, Value: js},
		{Kind: KindFused, Topic: "braid.fused", Offset: 1, Value: hb},
		{Kind: KindFused, Topic: "braid.fused", Offset: 2, Value: []byte{0xff, 0xff, 0xff}},
		{Kind: KindFused, Topic: "braid.fused", Offset: 3, Value: tb},
		{Kind: KindIncident, Topic: "braid.incidents", Offset: 0, Value: []byte("{not json")},
	}
	if err := ix.Apply(recs); err != nil {
		t.Fatal(err)
	}
	if ix.Invalid.Load() != 2 {
		t.Fatalf("invalid %d, want 2", ix.Invalid.Load())
	}
	// A re-read of revision 0 does not replace revision 1.
	if err := ix.Apply(records(t, "braid.fused", KindFused, 4, r0)); err != nil {
		t.Fatal(err)
	}
	tp, err := ix.TracePage(hex.EncodeToString(f.id[:]))
	if err != nil {
		t.Fatal(err)
	}
	if tp.Revision != 1 || len(tp.Logs) != 1 || !slices.Contains(tp.Flags, "FLAG_POLLUTED") {
		t.Fatalf("trace page rev %d logs %d flags %v", tp.Revision, len(tp.Logs), tp.Flags)
	}
	if ov := ix.Overview(Query{From: t0, To: t0.Add(time.Hour)}); ov.Total != 1 || ov.Series.Polluted[0] != 1 {
		t.Fatalf("overview total %d polluted %v", ov.Total, ov.Series.Polluted)
	}
}

// TestHandlerAccess: read-only, the token guards the API, bad queries are
// 400 with a message, unknown ids 404, pages served for every path.
func TestHandlerAccess(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	applyFleet(t, ix, fleet(1, 50, ""))
	assets := fstest.MapFS{"index.html": {Data: []byte("<html>shell")}, "app.js": {Data: []byte("//js")}}
	reporter := func(ctx context.Context, id, format string) ([]byte, string, error) {
		if id != "inc-1" {
			return nil, "", fmt.Errorf("%w: incident %q", ErrNotFound, id)
		}
		return []byte("report " + id + " as " + format), "text/plain", nil
	}
	srv := httptest.NewServer(Handler(ix, "s3cret", assets, nil, WithReporter(reporter)))
	defer srv.Close()
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path, token string
		code        int
		has         string
	}{
		{"/api/status", "", 401, "bearer token"},
		{"/api/status", "wrong", 401, "bearer token"},
		{"/api/status", "s3cret", 200, `"traces":50`},
		{"/api/overview?from=abc", "s3cret", 400, "unix milliseconds"},
		{"/api/explain", "s3cret", 400, "explain needs metric"},
		{"/api/trace/zz", "s3cret", 400, "32 hex"},
		{"/api/trace/" + strings.Repeat("0", 32), "s3cret", 404, "not in the index"},
		{"/api/incident/nope", "s3cret", 404, "not in the index"},
		{"/api/alert/" + url.PathEscape("BraidTTFTHigh/model=x"), "s3cret", 404, "not in the index"},
		{"/api/report/inc-1", "", 401, "bearer token"},
		{"/api/report/inc-1", "s3cret", 200, "report inc-1 as html"},
		{"/api/report/inc-1?format=md", "s3cret", 200, "report inc-1 as md"},
		{"/api/report/inc-1?format=pdf", "s3cret", 400, "want html, md or json"},
		{"/api/report/inc-2", "s3cret", 404, "not in the index"},
		{"/incident/inc-1", "", 200, "shell"},
		{"/assets/app.js", "", 200, "//js"},
		{"/assets/", "", 404, ""},
	} {
		code, body := get(c.path, c.token)
		if code != c.code || !strings.Contains(body, c.has) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, code, body, c.code, c.has)
		}
	}
	resp, err := http.Post(srv.URL+"/api/status", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	var st Status
	_, body := get("/api/status", "s3cret")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Traces != 50 || len(st.Instances) == 0 {
		t.Fatalf("status %s: %v", body, err)
	}
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{{"127.0.0.1:9465", "", true}, {"[::1]:9465", "", true}, {"localhost:1", "", true}, {"0.0.0.0:9465", "", false}, {":9465", "", false},
		{"10.0.0.1:9465", "", false}, {"0.0.0.0:9465", "t", true}} {
		if err := CheckAccess(c.addr, c.token); (err == nil) != c.ok {
			t.Errorf("CheckAccess(%q, %q) = %v", c.addr, c.token, err)
		}
	}
}

// TestAssetVersions: the shell names each asset with its content hash;
// those requests may be cached for good, the unversioned ones are
// revalidated, and a changed asset gets a new URL.
func TestAssetVersions(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	page := func(js string) (string, http.Header) {
		assets := fstest.MapFS{"index.html": {Data: []byte(`<script src="/assets/app.js"></script><link href="/assets/missing.css">`)}, "app.js": {Data: []byte(js)}}
		srv := httptest.NewServer(Handler(ix, "", assets, nil))
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ref := regexpFind(t, `/assets/app\.js\?v=[0-9a-f]{12}`, string(b))
		if !strings.Contains(string(b), `href="/assets/missing.css"`) {
			t.Errorf("a reference to no asset changed: %s", b)
		}
		resp, err = http.Get(srv.URL + ref)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header.Clone()
		resp, err = http.Get(srv.URL + "/assets/app.js")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("unversioned asset: Cache-Control %q", cc)
		}
		return ref, h
	}
	ref1, h := page("//one")
	if cc := h.Get("Cache-Control"); !strings.Contains(cc, "immutable") || !strings.Contains(cc, "max-age=31536000") {
		t.Errorf("versioned asset: Cache-Control %q", cc)
	}
	if ref2, _ := page("//two"); ref2 == ref1 {
		t.Errorf("a changed asset kept its URL %s", ref1)
	}
}

func regexpFind(t *testing.T, re, s string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindString(s)
	if m == "" {
		t.Fatalf("no %s in %s", re, s)
	}
	return m
}

// TestAlertWithoutWindowEnd: an alert record that leaves out its window's
// end is kept by the latest time it carries, not dropped as older than
// the retention.
func TestAlertWithoutWindowEnd(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	fs := fleet(1, 50, "")
	applyFleet(t, ix, fs)
	at := uint64(fs[len(fs)-1].start.UnixNano())
	a := &braidpb.Alert{Rule: "BraidTTFTHigh", State: braidpb.AlertState_ALERT_STATE_FIRING, Episode: 1, Group: map[string]string{"instance": "x"}, ActiveSinceUnixNano: at}
	if err := ix.Apply(records(t, "braid.alerts", KindAlert, 0, a)); err != nil {
		t.Fatal(err)
	}
	applyFleet(t, ix, fleet(2, 10, "")) // another Apply: eviction runs
	if got := ix.Alerts(false); len(got) != 1 || got[0].Rule != "BraidTTFTHigh" {
		t.Fatalf("alerts %+v", got)
	}
}

// TestIncidentLayersCoverItsGPU: the layer heatmaps of an incident count
// every trace of its GPU in range, not only its victims.
func TestIncidentLayersCoverItsGPU(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	defer ix.Close()
	fs := fleet(3, 400, "")
	applyFleet(t, ix, fs)
	inc := testIncident("inc-g", fs[:2], 1)
	inc.Gpu = "GPU-" + fs[0].instance
	if err := ix.Apply(records(t, "braid.incidents", KindIncident, 0, inc)); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, f := range fs {
		if f.instance == fs[0].instance {
			want++
		}
	}
	ly, err := ix.Layers(Query{From: t0, To: t0.Add(time.Hour), Incident: "inc-g", Filters: map[string]string{"incident": "inc-g"}})
	if err != nil || ly.Traces != want || want < 10 {
		t.Fatalf("layers of the incident: %d traces (%v), want the %d of its GPU", ly.Traces, err, want)
	}
}

// TestAlertKeyFromRecord: an alert is indexed under its record's Kafka
// key (the key of its generatorURL), whatever the order of its group's
// labels, also after a restart; the alert's page answers at the URL the
// alerts stage writes.
func TestAlertKeyFromRecord(t *testing.T) {
	dir := t.TempDir()
	ix := openIndex(t, dir, nil)
	fs := fleet(1, 10, "")
	applyFleet(t, ix, fs)
	key := `BraidTTFTHigh/model="qwen",instance="gpu-node-02:8001"` // group_by: model, instance
	a := &braidpb.Alert{Rule: "BraidTTFTHigh", State: braidpb.AlertState_ALERT_STATE_FIRING, Episode: 1,
		Group: map[string]string{"instance": "gpu-node-02:8001", "model": "qwen"}, WindowEndUnixNano: uint64(fs[9].start.UnixNano())}
	recs := records(t, "braid.alerts", KindAlert, 0, a)
	recs[0].Key = []byte(key)
	if err := ix.Apply(recs); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if p := ix.Alert(key); len(p.Episodes) != 1 {
			t.Fatalf("round %d: no episode under %s: %+v", round, key, ix.Alerts(false))
		}
		srv := httptest.NewServer(Handler(ix, "", nil, nil))
		resp, err := http.Get(srv.URL + "/api/alert/" + `BraidTTFTHigh/model=%22qwen%22,instance=%22gpu-node-02:8001%22`)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: GET the generatorURL's key: %s", round, resp.Status)
		}
		ix.Close()
		ix = openIndex(t, dir, nil)
	}
	ix.Close()
}

// A Close while the follower's Apply runs waits for it: the Apply ends,
// the next one returns errClosed, nothing uses the closed store.
func TestCloseDuringApply(t *testing.T) {
	ix := openIndex(t, t.TempDir(), nil)
	fs := fleet(3, 2000, "")
	var applied atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for i := 0; ; i = (i + 50) % len(fs) {
			var ms []proto.Message
			for _, f := range fs[i : i+50] {
				ms = append(ms, f.record())
			}
			if err := ix.Apply(records(t, "braid.fused", KindFused, applied.Load()*50, ms...)); err != nil {
				errc <- err
				return
			}
			applied.Add(1)
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for applied.Load() < 5 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, errClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
}
