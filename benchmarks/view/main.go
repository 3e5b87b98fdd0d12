// Command view is the load check of braid's drill-down view (see
// benchmarks/README.md): the index's memory and disk per trace, and the
// latency of its JSON API and of its rendered pages, with -traces (100,000)
// fused traces indexed.
//
// It fills a view index (connectors/view, Pebble in a temporary
// directory) through Index.Apply, as `braid view` does from braid.fused,
// braid.incidents and braid.alerts, with fused traces shaped like the
// realistic fleet's (a root span, guard, prefill, decode-layer spans,
// evaluator and sampling spans with their attributes, five log records,
// a resource context of sixteen series, derived figures with per-layer
// timings), spread over -span of event time on 8 servers, with a TTFT
// spike on one of them, -incidents KV incidents of 5 victims each and
// -alerts alert episodes. It measures:
//
//   - memory: the Go heap after a GC, less the heap before the index
//     opened, per trace; the index's own estimate (Status.BytesPerTrace);
//     the mean size of a fused record for comparison;
//   - disk: the Pebble directory per trace;
//   - API: -requests GETs of each endpoint (the pages' queries, over
//     HTTP on loopback, one at a time): p50, p99, max; the baseline is
//     /healthz, served by the same server;
//   - pages: with Chromium on PATH (or -chromium), -page-loads loads of
//     each page in a real headless browser, from navigation to the page's
//     body[data-ready] (data fetched and charts drawn): p50, p99, max.
//
// Targets: API p99 ≤ 300 ms, page p99 ≤ 1 s. The figures go to -out
// (benchmarks/results/view-100k.json) and a table to stdout.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/view"
	"github.com/braidlabs/braid/operators/braidpb"
)

func main() {
	traces := flag.Int("traces", 100_000, "fused traces to index")
	span := flag.Duration("span", time.Hour, "event time the traces spread over")
	incidents := flag.Int("incidents", 50, "KV incidents to index")
	alerts := flag.Int("alerts", 200, "alert episodes to index")
	requests := flag.Int("requests", 50, "GETs per API endpoint")
	pageLoads := flag.Int("page-loads", 10, "loads per page in the browser")
	chromium := flag.String("chromium", "", "Chromium binary (default: chromium, chromium-browser or google-chrome on PATH; none: skip the page loads)")
	out := flag.String("out", "benchmarks/results/view-100k.json", "result file")
	seed := flag.Uint64("seed", 1, "generator seed")
	serve := flag.String("serve", "", "after the measurements, serve the filled view on this address until interrupted (to look at it)")
	flag.Parse()
	if err := run(*traces, *span, *incidents, *alerts, *requests, *pageLoads, *chromium, *out, *seed, *serve); err != nil {
		log.Fatal(err)
	}
}

// Result is the JSON written to -out.
type Result struct {
	Traces, Incidents, Alerts int
	SpanSeconds               float64
	IndexSeconds              float64 // wall time of the Apply calls
	MeanRecordBytes           float64 // mean marshalled FusedTrace
	HeapBytesPerTrace         float64 // Go heap after GC, per trace
	EstimateBytesPerTrace     int     // Status.BytesPerTrace
	DiskBytesPerTrace         float64
	API                       []Latency
	Pages                     []Latency
	PagesSkipped              string `json:",omitempty"`
	APITargetMs, PageTargetMs float64
	APIWorstP99Ms             float64
	PageWorstP99Ms            float64
	Pass                      bool
	GoVersion                 string
	CPUs                      int
}

// Latency is one endpoint's or page's figures, in milliseconds.
type Latency struct {
	Name                string
	URL                 string
	N                   int
	P50Ms, P99Ms, MaxMs float64
	Bytes               int `json:",omitempty"` // response size (API)
	// RatioToBaseline: p50 over the p50 of /healthz (API).
	RatioToBaseline float64 `json:",omitempty"`
	// Pages: the median of what the page's script reports (braid.timing):
	// from navigation to its script starting, fetching its data and
	// building the DOM, and drawing its charts.
	ScriptStartMs, DataMs, DrawMs float64 `json:",omitempty"`
}

func run(n int, span time.Duration, nInc, nAlerts, requests, pageLoads int, chromium, out string, seed uint64, serve string) error {
	dir, err := os.MkdirTemp("", "braid-view-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ix, err := view.Open(view.Options{Dir: dir, MaxTraces: max(n, 1), Retention: 30 * 24 * time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer ix.Close()

	g := newGen(seed, n, nInc, span)
	res := Result{Traces: n, Incidents: nInc, Alerts: nAlerts, SpanSeconds: span.Seconds(), APITargetMs: 300, PageTargetMs: 1000,
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU()}
	t0 := time.Now()
	var recBytes int64
	var batch []view.Record
	var off int64
	flush := func() error {
		err := ix.Apply(batch)
		batch = batch[:0]
		return err
	}
	for i := range n {
		b, err := proto.Marshal(g.trace(i))
		if err != nil {
			return err
		}
		recBytes += int64(len(b))
		batch = append(batch, view.Record{Kind: view.KindFused, Topic: "braid.fused", Partition: int32(i % 8), Offset: off, Value: b})
		off++
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	for i := range nInc {
		b, err := proto.Marshal(g.incident(i, nInc))
		if err != nil {
			return err
		}
		batch = append(batch, view.Record{Kind: view.KindIncident, Topic: "braid.incidents", Offset: int64(i), Value: b})
	}
	for i := range nAlerts {
		b, err := proto.Marshal(g.alert(i, nAlerts, nInc))
		if err != nil {
			return err
		}
		batch = append(batch, view.Record{Kind: view.KindAlert, Topic: "braid.alerts", Offset: int64(i), Value: b})
	}
	if err := flush(); err != nil {
		return err
	}
	res.IndexSeconds = time.Since(t0).Seconds()
	res.MeanRecordBytes = float64(recBytes) / float64(n)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.HeapBytesPerTrace = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	st := ix.Status()
	res.EstimateBytesPerTrace = st.BytesPerTrace
	if st.Traces != n {
		return fmt.Errorf("the index holds %d traces of %d", st.Traces, n)
	}
	var disk int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				disk += fi.Size()
			}
		}
		return nil
	})
	res.DiskBytesPerTrace = float64(disk) / float64(n)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: view.Handler(ix, "", view.Assets(), slog.New(slog.NewTextHandler(io.Discard, nil)))}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	// The pages' queries: what each page fetches, over the default range
	// and over a selection.
	from, to := g.start.UnixMilli(), g.start.Add(span).UnixMilli()
	spikeFrom, spikeTo := g.spikeFrom.UnixMilli(), g.spikeTo.UnixMilli()
	sel := fmt.Sprintf("from=%d&to=%d&metric=ttft&lo=2000&hi=100000&sel_from=%d&sel_to=%d", from, to, spikeFrom, spikeTo)
	incID, traceID := g.incidentID(0), hex.EncodeToString(g.id(n/2))
	api := []Latency{
		{Name: "healthz (baseline)", URL: "/healthz"},
		{Name: "status", URL: "/api/status"},
		{Name: "overview", URL: "/api/overview"},
		{Name: "overview, one instance", URL: "/api/overview?instance=" + g.instances[g.spike]},
		{Name: "explain", URL: "/api/explain?" + sel},
		{Name: "traces of the selection", URL: "/api/traces?" + sel + "&limit=20"},
		{Name: "layers of the selection", URL: "/api/layers?" + sel},
		{Name: "layers of an incident", URL: "/api/layers?incident=" + incID},
		{Name: "incidents", URL: "/api/incidents"},
		{Name: "incident", URL: "/api/incident/" + incID},
		{Name: "trace", URL: "/api/trace/" + traceID},
		{Name: "alerts", URL: "/api/alerts"},
	}
	cl := &http.Client{Timeout: 30 * time.Second}
	for i := range api {
		a := &api[i]
		var ds []time.Duration
		for range requests + 2 {
			t := time.Now()
			resp, err := cl.Get(base + a.URL)
			if err != nil {
				return err
			}
			nb, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", a.URL, resp.Status)
			}
			ds = append(ds, time.Since(t))
			a.Bytes = int(nb)
		}
		fill(a, ds[2:]) // two warm-up requests
		if a.P99Ms > res.APIWorstP99Ms && i > 0 {
			res.APIWorstP99Ms = a.P99Ms
		}
	}
	for i := 1; i < len(api); i++ {
		api[i].RatioToBaseline = api[i].P50Ms / max(api[0].P50Ms, 1e-3)
	}
	res.API = api

	pages := []Latency{
		{Name: "overview", URL: "/"},
		{Name: "explain", URL: "/explain?" + sel},
		{Name: "layers", URL: "/layers?" + sel},
		{Name: "incidents", URL: "/incidents"},
		{Name: "incident", URL: "/incident/" + incID},
		{Name: "trace", URL: "/trace/" + traceID},
		{Name: "alerts", URL: "/alerts"},
	}
	if chromium == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				chromium = p
				break
			}
		}
	}
	if chromium == "" || chromium == "none" {
		res.PagesSkipped = "no Chromium on PATH"
	} else if err := loadPages(chromium, base, pages, pageLoads); err != nil {
		return err
	} else {
		res.Pages = pages
		for _, p := range pages {
			res.PageWorstP99Ms = max(res.PageWorstP99Ms, p.P99Ms)
		}
	}
	res.Pass = res.APIWorstP99Ms <= res.APITargetMs && (res.Pages == nil || res.PageWorstP99Ms <= res.PageTargetMs)

	fmt.Printf("view load check: %d traces, %d incidents, %d alert episodes over %v (indexed in %.1fs)\n", n, nInc, nAlerts, span, res.IndexSeconds)
	fmt.Printf("  memory: %.0f B/trace of Go heap (index's estimate %d B), %.0f B/trace on disk; a fused record is %.0f B\n",
		res.HeapBytesPerTrace, res.EstimateBytesPerTrace, res.DiskBytesPerTrace, res.MeanRecordBytes)
	fmt.Printf("  %-26s %8s %8s %8s %9s %8s\n", "API", "p50 ms", "p99 ms", "max ms", "bytes", "×healthz")
	for _, a := range res.API {
		fmt.Printf("  %-26s %8.2f %8.2f %8.2f %9d %8.1f\n", a.Name, a.P50Ms, a.P99Ms, a.MaxMs, a.Bytes, a.RatioToBaseline)
	}
	if res.Pages != nil {
		fmt.Printf("  %-26s %8s %8s %8s   %s\n", "page (to body[data-ready])", "p50 ms", "p99 ms", "max ms", "median: script start / data / charts ms")
		for _, p := range res.Pages {
			fmt.Printf("  %-26s %8.1f %8.1f %8.1f   %.0f / %.0f / %.0f\n", p.Name, p.P50Ms, p.P99Ms, p.MaxMs, p.ScriptStartMs, p.DataMs, p.DrawMs)
		}
	} else {
		fmt.Printf("  pages: skipped (%s)\n", res.PagesSkipped)
	}
	fmt.Printf("  API p99 %.1f ms (target ≤ %.0f), page p99 %.1f ms (target ≤ %.0f): pass=%v\n", res.APIWorstP99Ms, res.APITargetMs, res.PageWorstP99Ms, res.PageTargetMs, res.Pass)
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if serve != "" {
		fmt.Printf("serving the view on %s until interrupted\n", view.URL(serve))
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return view.Serve(ctx, ix, serve, "", view.Assets(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	}
	return nil
}

// loadPages loads each page loads times in one headless browser tab, from
// a blank page each time, until its body[data-ready] is the page's.
func loadPages(chromium, base string, pages []Latency, loads int) error {
	actx, acancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return fmt.Errorf("start %s: %w", chromium, err)
	}
	for i := range pages {
		p := &pages[i]
		ready := strings.TrimPrefix(strings.SplitN(strings.SplitN(p.URL, "?", 2)[0], "/", 3)[1], "/")
		if ready == "" {
			ready = "overview"
		}
		var ds []time.Duration
		var start, data, draw []float64
		for range loads + 1 {
			c, cc := context.WithTimeout(ctx, 30*time.Second)
			if err := chromedp.Do(c, chromedp.Navigate("about:blank")); err != nil {
				cc()
				return err
			}
			t := time.Now()
			err := chromedp.Do(c, chromedp.Navigate(base+p.URL), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="`+ready+`"]`)))
			d := time.Since(t)
			if err != nil {
				cc()
				return fmt.Errorf("page %s: %w", p.URL, err)
			}
			tm, err := chromedp.Run(c, chromedp.Evaluate[struct{ DataMs, DrawMs, SinceNavigationMs float64 }](
				`({DataMs: braid.timing.dataMs, DrawMs: braid.timing.drawMs, SinceNavigationMs: braid.timing.sinceNavigationMs})`))
			cc()
			if err != nil {
				return fmt.Errorf("page %s: timing: %w", p.URL, err)
			}
			ds = append(ds, d)
			start = append(start, tm.SinceNavigationMs-tm.DataMs-tm.DrawMs)
			data, draw = append(data, tm.DataMs), append(draw, tm.DrawMs)
		}
		fill(p, ds[1:]) // one warm-up load
		p.ScriptStartMs, p.DataMs, p.DrawMs = median(start[1:]), median(data[1:]), median(draw[1:])
	}
	return nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

func fill(l *Latency, ds []time.Duration) {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	l.N = len(ds)
	l.P50Ms = ms(ds[len(ds)/2])
	l.P99Ms = ms(ds[min(len(ds)-1, int(float64(len(ds))*0.99))])
	l.MaxMs = ms(ds[len(ds)-1])
}

// gen makes the fused traces, incidents and alerts.
type gen struct {
	rng                *rand.Rand
	seed               uint64
	n, nInc            int
	start              time.Time
	span               time.Duration
	instances, gpus    []string
	models             []string
	tenants            []string
	spike              int
	spikeFrom, spikeTo time.Time
}

func newGen(seed uint64, n, nInc int, span time.Duration) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed: seed, n: n, nInc: nInc,
		start: time.Now().Add(-span).Truncate(time.Minute), span: span, spike: 3,
		models: []string{"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-32B-Instruct-AWQ"}, tenants: []string{"acme", "globex", "initech", "hooli", "umbrella", "(none)"}}
	for h := range 4 {
		for p := range 2 {
			g.instances = append(g.instances, fmt.Sprintf("gpu-node-%02d:%d", h+1, 8000+p))
			g.gpus = append(g.gpus, fmt.Sprintf("GPU-%08x-%04x-4%03x-8%03x-%012x", seed*7+uint64(h), h, p, h*2+p, uint64(h*2+p)*0x1000193))
		}
	}
	g.spikeFrom, g.spikeTo = g.start.Add(span*4/10), g.start.Add(span*45/100)
	return g
}

// id is trace i's id, a function of the seed and i.
func (g *gen) id(i int) []byte {
	r := rand.New(rand.NewPCG(g.seed, uint64(i)))
	b := make([]byte, 16)
	for j := range b {
		b[j] = byte(r.UintN(256))
	}
	return b
}

func (g *gen) incidentID(i int) string {
	return fmt.Sprintf("inc-%016x", uint64(i)*0x9e3779b97f4a7c15^g.seed)
}

func kv(k string, v any) *commonpb.KeyValue {
	var a *commonpb.AnyValue
	switch x := v.(type) {
	case string:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case int:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case float64:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	case bool:
		a = &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}}
	}
	return &commonpb.KeyValue{Key: k, Value: a}
}

func origin(topic string, p int32, off int64) *braidpb.Origin {
	return &braidpb.Origin{Topic: topic, Partition: p, Offset: off}
}

func (g *gen) trace(i int) *braidpb.FusedTrace {
	r := g.rng
	id := g.id(i)
	srv := r.IntN(len(g.instances))
	inst, gpu, model := g.instances[srv], g.gpus[srv], g.models[srv/4]
	host := strings.Split(inst, ":")[0]
	at := g.start.Add(time.Duration(i) * g.span / time.Duration(g.n))
	st := uint64(at.UnixNano())
	ttft := time.Duration(40+r.ExpFloat64()*120) * time.Millisecond
	if srv == g.spike && !at.Before(g.spikeFrom) && at.Before(g.spikeTo) {
		ttft *= 20
	}
	out := 50 + r.IntN(900)
	prompt, tenant := 100+r.IntN(4000), g.tenants[r.IntN(len(g.tenants))]
	tpot := time.Duration(15+r.IntN(15)) * time.Millisecond
	e2e := ttft + time.Duration(out)*tpot
	end := st + uint64(e2e)
	req := "cmpl-" + hex.EncodeToString(id)
	sid := func(k byte) []byte { return []byte{k, id[1], id[2], id[3], id[4], id[5], id[6], id[7]} }
	root := &tracepb.Span{TraceId: id, SpanId: sid(1), Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: st, EndTimeUnixNano: end,
		Attributes: []*commonpb.KeyValue{kv("gen_ai.request.id", req), kv("gen_ai.request.model", model), kv("gen_ai.usage.prompt_tokens", prompt),
			kv("gen_ai.usage.completion_tokens", out), kv("gen_ai.latency.time_to_first_token", ttft.Seconds()), kv("gen_ai.latency.e2e", e2e.Seconds()),
			kv("gen_ai.request.max_tokens", 1024), kv("gen_ai.request.temperature", 0.7), kv("tenant.id", tenant)}}
	errSpan := r.IntN(20) == 0
	if errSpan {
		root.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "request aborted"}
	}
	child := func(k byte, name string, from, to uint64, attrs ...*commonpb.KeyValue) *braidpb.FusedSpan {
		return &braidpb.FusedSpan{Span: &tracepb.Span{TraceId: id, SpanId: sid(k), ParentSpanId: root.SpanId, Name: name, StartTimeUnixNano: from, EndTimeUnixNano: to, Attributes: attrs},
			Origin: origin("otlp_spans", int32(i%4), int64(i*8+int(k)))}
	}
	spans := []*braidpb.FusedSpan{{Span: root, Origin: origin("otlp_spans", int32(i%4), int64(i*8))},
		child(2, "guard prompt_injection", st, st+uint64(3*time.Millisecond), kv("guard.decision", "allow"), kv("guard.score", r.Float64()*0.2)),
		child(3, "llm.prefill", st, st+uint64(ttft), kv("batch_size", 1+r.IntN(32)), kv("seq_len", prompt))}
	var layers []*braidpb.LayerStats
	for k := range 2 + r.IntN(3) {
		l := r.IntN(32)
		ls := st + uint64(ttft) + uint64(k)*uint64(time.Millisecond)
		d := uint64(e2e-ttft) * uint64(60+r.IntN(40)) / 100
		spans = append(spans, child(byte(4+k), fmt.Sprintf("llm.decode.layer.%d", l), ls, ls+d, kv("layer_id", l), kv("kv_cache_hit_ratio", r.Float64()), kv("batch_size", 1+r.IntN(32))))
		layers = append(layers, &braidpb.LayerStats{Key: int64(l), Count: 1, TotalNanos: int64(d), MinNanos: int64(d), MaxNanos: int64(d)})
	}
	spans = append(spans, child(9, "evaluate", end-uint64(20*time.Millisecond), end, kv("eval.name", "toxicity"), kv("eval.score", r.Float64())),
		child(10, "llm.sampling", end-uint64(2*time.Millisecond), end, kv("sampling.top_p", 0.9)))
	body := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	var logs []*braidpb.FusedLog
	for k, b := range []string{"Added request " + req + ".", "Received request " + req + ": prompt: '...', params: SamplingParams(n=1, temperature=0.7, top_p=0.9, max_tokens=1024)",
		"Finished request " + req + ".", fmt.Sprintf("Request %s: prompt_tokens=%d completion_tokens=%d e2e=%.3fs", req, prompt, out, e2e.Seconds()), "Request " + req + " finished: stop"} {
		t := st
		if k >= 2 {
			t = end
		}
		logs = append(logs, &braidpb.FusedLog{Log: &logspb.LogRecord{TimeUnixNano: t, SeverityText: "INFO", SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, Body: body(b), TraceId: id, SpanId: root.SpanId},
			Origin: origin("otlp_logs", int32(k%4), int64(i*5+k))})
	}
	var series []*braidpb.SeriesWindow
	for k, m := range []string{"cache_config_info", "gpu_fb_free_mib", "gpu_fb_reserved_mib", "gpu_fb_used_mib", "gpu_util_percent", "kv_cache_usage", "nvlink_bandwidth_total",
		"pcie_rx_bytes", "pcie_tx_bytes", "preemptions", "prefix_cache_hits", "prefix_cache_queries", "requests_running", "requests_waiting", "xid_errors", "num_requests_swapped"} {
		res := "service=vllm,instance=" + inst + ",host=" + host + ",model_name=" + model
		if k%3 == 1 {
			res = "service=dcgm-exporter,instance=" + host + ":9400,host=" + host + ",gpu=" + gpu
		}
		v := r.Float64() * 1e4
		series = append(series, &braidpb.SeriesWindow{Metric: m, Resource: res, AtStart: proto.Float64(v), AtEnd: v * 1.1, Min: v * 0.9, Max: v * 1.2, Samples: uint32(2 + r.IntN(14))})
	}
	hit := r.Float64()
	ft := &braidpb.FusedTrace{TraceId: id, StartTimeUnixNano: st, EndTimeUnixNano: end,
		Resources: []*resourcepb.Resource{{Attributes: []*commonpb.KeyValue{kv("service.name", "vllm"), kv("service.instance.id", inst), kv("host.name", host),
			kv("gpu.uuid", gpu), kv("gpu.index", srv%2), kv("k8s.pod.name", "vllm-"+host), kv("k8s.namespace.name", "inference")}}},
		Spans: spans, Logs: logs,
		Summary: &braidpb.Summary{SpanCount: uint32(len(spans)), LogCount: uint32(len(logs)), RootSpanName: "llm_request", RootServiceName: "vllm", DurationNano: uint64(e2e)},
		Flags:   []braidpb.Flag{braidpb.Flag_FLAG_RESOLVED_BY_REQUEST_ID},
		Derived: &braidpb.Derived{RequestIds: []string{req}, TtftNanos: int64(ttft), TpotNanos: int64(tpot), E2ENanos: int64(e2e), PrefillTimeNanos: int64(ttft),
			DecodeTimeNanos: int64(e2e - ttft), InputTokens: int64(prompt), OutputTokens: int64(out), KvCacheHitRatio: &hit, Model: model,
			Operation: "chat", Provider: "vllm", Layers: layers, LayerCount: 32, Tenant: tenant},
		ResourceContext: &braidpb.ResourceContext{Series: series},
	}
	if errSpan {
		ft.Summary.ErrorSpanCount = 1
		ft.Flags = append(ft.Flags, braidpb.Flag_FLAG_ERROR)
	}
	// Incident k's victims are traces k·n/incidents … +4 (gen.incident).
	if per := g.n / max(g.nInc, 1); g.nInc > 0 && i%per < 5 && i/per < g.nInc {
		ft.IncidentIds = []string{g.incidentID(i / per)}
		ft.Flags = append(ft.Flags, braidpb.Flag_FLAG_POLLUTED)
	}
	return ft
}

func (g *gen) incident(k, n int) *braidpb.Incident {
	id := g.incidentID(k)
	srv := k % len(g.gpus)
	gpu, host := g.gpus[srv], strings.Split(g.instances[srv], ":")[0]
	at := g.start.Add(time.Duration(k) * g.span / time.Duration(n))
	root := "cmpl-root-" + fmt.Sprint(k)
	inc := &braidpb.Incident{Id: id, Revision: 1, State: braidpb.IncidentState_INCIDENT_STATE_OPEN, Host: host, Gpu: gpu,
		Pattern: braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE, FirstUnixNano: uint64(at.UnixNano()), LastUnixNano: uint64(at.Add(5 * time.Second).UnixNano()),
		Root: &braidpb.RootCause{Node: "req:" + gpu + "/" + root, Kind: braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE, RequestId: root, Block: int64(100 + k), Layer: -1,
			TimeUnixNano: uint64(at.UnixNano()), Origin: origin("otlp_logs", 2, int64(k)), Detail: fmt.Sprintf("block %d freed twice by %s", 100+k, root)},
		Layers: []*braidpb.LayerCount{{Layer: 0, Hits: 2, CorruptedReads: 3}, {Layer: 1, CorruptedReads: 1}}}
	blk := fmt.Sprintf("blk:%s/%d", gpu, 100+k)
	for v := range 5 {
		ti := (k*(g.n/max(n, 1)) + v) % g.n
		req := "cmpl-" + hex.EncodeToString(g.id(ti))
		t := uint64(at.Add(time.Duration(v) * time.Second).UnixNano())
		inc.Polluted = append(inc.Polluted, &braidpb.PollutedRequest{RequestId: req, TraceId: g.id(ti), Via: braidpb.PollutionVia_POLLUTION_VIA_DIRECT, TimeUnixNano: t, From: blk})
		inc.Edges = append(inc.Edges, &braidpb.PollutionEdge{Source: blk, Target: "req:" + gpu + "/" + req, Kind: braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE,
			TimeUnixNano: t, Block: int64(100 + k), Layer: -1, TargetRequest: req, TargetTraceId: g.id(ti), IncidentId: id,
			Evidence: []*braidpb.Origin{origin("otlp_logs", 2, int64(1000*k+v))}, Detail: "write into block owned by " + req})
	}
	inc.Edges = append(inc.Edges, &braidpb.PollutionEdge{Source: inc.Root.Node, Target: blk, Kind: braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE,
		TimeUnixNano: uint64(at.UnixNano()), Block: int64(100 + k), Layer: -1, SourceRequest: root, IncidentId: id, Evidence: []*braidpb.Origin{origin("otlp_logs", 2, int64(k))}})
	return inc
}

func (g *gen) alert(k, n, nInc int) *braidpb.Alert {
	srv := k % len(g.instances)
	at := g.start.Add(time.Duration(k) * g.span / time.Duration(n))
	a := &braidpb.Alert{Rule: "BraidTTFTHigh", State: braidpb.AlertState_ALERT_STATE_FIRING, Severity: "critical", Episode: uint64(k/len(g.instances) + 1),
		Group: map[string]string{"instance": g.instances[srv], "model": g.models[srv/4]}, Value: proto.Float64(3.2), Threshold: proto.Float64(2.5),
		ActiveSinceUnixNano: uint64(at.UnixNano()), StartsAtUnixNano: uint64(at.Add(3 * time.Minute).UnixNano()), WindowEndUnixNano: uint64(at.Add(3 * time.Minute).UnixNano()),
		Annotations: map[string]string{"summary": fmt.Sprintf("TTFT p99 3.2s > 2.5s on %s", g.instances[srv])}}
	if k%4 == 0 && nInc > 0 {
		a.Rule, a.Group = "BraidKVCachePollution", map[string]string{"gpu": g.gpus[srv]}
		a.IncidentIds = []string{g.incidentID(k % nInc)}
	}
	return a
}
