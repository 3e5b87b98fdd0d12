package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/connectors/view"
	"github.com/braidlabs/braid/operators/braidpb"
)

// TestViewInBrowser drives a real headless Chromium through the view of a
// running demo (in-process Kafka, simulator, job, view), the way an SRE
// would: the overview's heatmap, a brush over the TTFT spike the simulator
// injected, the explanation, the incident's pollution graph, the layer
// heatmap and a victim's trace. What the pages show is checked against the
// simulator's ground truth, written when the demo ends. Every request the
// page makes must go to the view itself (the browser resolves no other
// host). Screenshots of each page go to $BRAID_ARTIFACTS/view (default
// artifacts/view at the repository root).
func TestViewInBrowser(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without -race, in make test's second pass (a demo and a browser under the detector fall minutes behind)")
	}
	t.Parallel() // beside the other two of make test's demo pass
	if testing.Short() {
		t.Skip("runs the demo and a browser for a minute or two")
	}
	chrome := findChromium()
	if chrome == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium on PATH: .ci/run installs the Debian package chromium")
		}
		t.Skip("no chromium on PATH (Debian package chromium); CI installs it")
	}
	shots := artifactsDir(t, "view")

	addr, viewAddr := freeAddr(t), freeAddr(t)
	truthFile := filepath.Join(t.TempDir(), "truth.jsonl")
	const fastForward, speed = 90 * time.Second, 10
	regFrom, regTo := 20*time.Second, 50*time.Second
	// Three KV faults, 10 s, 30 s and 50 s into event time: a layer
	// out-of-bounds write, a dirty residue and a mixed write. A realised
	// fault can stay harmless (no victim); the test follows one with
	// victims.
	faults := strings.Join([]string{string(simulator.WrongStride), string(simulator.RecycledNotZeroed), string(simulator.DoubleFree)}, ",")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	launch := time.Now()
	seed := demoSeed(t)
	go func() {
		done <- runDemo(ctx, []string{"--addr", addr, "--admin-addr", "", "--view-addr", viewAddr, "--quiet", "--state-dir", t.TempDir(),
			"--seed", fmt.Sprint(seed), "--hosts", "2", "--rate", "10", "--faults", faults,
			"--regression", fmt.Sprintf("server=1,factor=20,from=%v,to=%v", regFrom, regTo), "--leak", "", "--jailbreak-jump", "",
			"--fast-forward", fastForward.String(), "--speed", fmt.Sprint(speed), "--truth", truthFile},
			slog.New(slog.NewTextHandler(io.Discard, nil)), &out, &errOut)
	}()
	demoEnded := func() {
		select {
		case err := <-done:
			t.Fatalf("demo ended: %v\n%s\n%s", err, out.String(), errOut.String())
		default:
		}
	}
	base := view.URL(viewAddr)
	if !strings.Contains(out.String(), base) {
		waitFor(t, 30*time.Second, "the demo to print the view's URL", func() bool { demoEnded(); return strings.Contains(out.String(), base) })
	}
	waitFor(t, 30*time.Second, "the view to listen", func() bool {
		demoEnded()
		resp, err := http.Get(base + "healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// The demo's clock: event time starts fastForward−fastForward/speed
	// behind the launch; the regression's window is relative to that.
	start := launch.Add(fastForward/speed - fastForward)

	// The browser: headless, no sandbox (CI runs as root), and no host
	// but the view's resolves.
	bctx, bcancel := headless(ctx, chrome, 1400, 1000, "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1")
	defer bcancel()
	var reqMu sync.Mutex
	var requests []string
	var jsErrors []string
	if err := chromedp.Listen(bctx, func(ev any) {
		reqMu.Lock()
		defer reqMu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *network.EventLoadingFailed:
			jsErrors = append(jsErrors, fmt.Sprintf("loading failed: %s %s", e.Type, e.ErrorText))
		}
	}); err != nil {
		t.Fatal(err)
	}
	do := func(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cc := context.WithTimeout(bctx, timeout)
		defer cc()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, errOut.String())
		}
	}
	eval := func(expr string, v any) {
		t.Helper()
		c, cc := context.WithTimeout(bctx, 10*time.Second)
		defer cc()
		res, err := chromedp.Run(c, chromedp.Evaluate[json.RawMessage](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal(res, v); err != nil {
			t.Fatalf("evaluate %s: %v (%s)", expr, err, res)
		}
	}
	ready := func(page string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(`body[data-ready="` + page + `"]`))
	}
	shot := func(name string) {
		t.Helper()
		c, cc := context.WithTimeout(bctx, 20*time.Second)
		defer cc()
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// 1. The overview, opened early: while the job has fused nothing yet it
	// says so; it fills in and shows the incident as soon as it is found,
	// without a reload.
	do("open the overview", time.Minute, chromedp.Navigate(base), ready("overview"))
	var empty bool
	eval(`document.body.dataset.empty === '1'`, &empty)
	var st view.Status
	getJSON(t, base+"api/status", &st)
	if st.Traces == 0 && !empty {
		t.Errorf("the overview does not mark itself empty with no trace indexed")
	}
	if empty {
		shot("empty")
	}
	// Event time catches up with the wall clock fastForward into it; the
	// last fault is 50 s in.
	waitFor(t, 4*time.Minute, "the view to index the regression's window and an incident with victims", func() bool {
		demoEnded()
		getJSON(t, base+"api/status", &st)
		if st.Incidents == 0 || st.Newest < start.Add(fastForward).UnixMilli() {
			return false
		}
		var list []view.IncidentSummary
		getJSON(t, base+"api/incidents", &list)
		return slices.ContainsFunc(list, func(i view.IncidentSummary) bool { return i.Victims > 0 })
	})
	do("the live overview shows the incident", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#incidents a.incident-link`)), chromedp.WaitVisible(chromedp.CSS(`#ttft-heatmap canvas`)))
	shot("overview")

	// 2. Brush the spike. The range is fixed (the page stops refreshing);
	// the latency band starts where the rest of the range thins out, as an
	// SRE reads the heatmap: above the 99th percentile of the columns
	// clear of the regression's window.
	from, to := start.UnixMilli(), st.Newest
	fixed := fmt.Sprintf("%s?from=%d&to=%d", base, from, to)
	var ov view.Overview
	getJSON(t, base+"api/overview?"+strings.SplitN(fixed, "?", 2)[1], &ov)
	hm := ov.TTFT
	selFrom, selTo := start.Add(regFrom+2*time.Second).UnixMilli(), start.Add(regTo-2*time.Second).UnixMilli()
	inWindow := func(ti int64) bool {
		b := hm.Times[ti]
		return b >= selFrom-hm.BucketMs/2 && b+hm.BucketMs <= selTo+hm.BucketMs/2
	}
	// The baseline is the columns clear of the regression's window: a
	// column that straddles one of its ends (wide columns, when the range
	// is long) holds regressed requests, which would lift the band above
	// the spike.
	regStart, regEnd := start.Add(regFrom).UnixMilli(), start.Add(regTo).UnixMilli()
	outside := func(ti int64) bool {
		b := hm.Times[ti]
		return b+hm.BucketMs <= regStart || b >= regEnd
	}
	nb := len(hm.Bounds) - 1
	baseCounts, selCounts := make([]int64, nb), make([]int64, nb)
	var baseTotal int64
	var cols []int64
	for _, c := range hm.Cells {
		switch {
		case inWindow(c[0]):
			selCounts[c[1]] += c[2]
			if !slices.Contains(cols, c[0]) {
				cols = append(cols, c[0])
			}
		case outside(c[0]):
			baseCounts[c[1]] += c[2]
			baseTotal += c[2]
		}
	}
	if len(cols) == 0 || baseTotal == 0 {
		t.Fatalf("no heatmap column inside the regression's window %v–%v: %+v", time.UnixMilli(selFrom), time.UnixMilli(selTo), hm)
	}
	lo, tail := nb-1, int64(0)
	for lo > 0 && float64(tail+baseCounts[lo-1]) <= 0.01*float64(baseTotal) {
		tail += baseCounts[lo-1]
		lo--
	}
	hi := lo
	for j := lo; j < nb; j++ {
		if selCounts[j] > 0 {
			hi = j
		}
	}
	var spike int64
	for _, n := range selCounts[lo:] {
		spike += n
	}
	if spike == 0 {
		t.Fatalf("no spike above %vms in the regression's window: %v", hm.Bounds[lo], selCounts)
	}
	slices.Sort(cols)
	x0, x1 := hm.Times[cols[0]]+hm.BucketMs/2, hm.Times[cols[len(cols)-1]]+hm.BucketMs/2
	y0, y1 := (hm.Bounds[lo]+hm.Bounds[lo+1])/2, (hm.Bounds[hi]+hm.Bounds[hi+1])/2
	do("open the overview over a fixed range", 30*time.Second, chromedp.Navigate(fixed), ready("overview"), chromedp.WaitVisible(chromedp.CSS(`#ttft-heatmap canvas`)))
	var p0, p1 struct{ X, Y float64 }
	eval(fmt.Sprintf(`braid.heatmapPixel('ttft', %d, %g)`, x0, y0), &p0)
	eval(fmt.Sprintf(`braid.heatmapPixel('ttft', %d, %g)`, x1, y1), &p1)
	// Corner to corner, a little beyond the cells' centres.
	do("brush the spike", 30*time.Second, chromedp.DragAndDropXY(p0.X-4, p0.Y+4, p1.X+4, p1.Y-4, 12), ready("explain"),
		chromedp.WaitVisible(chromedp.CSS(`#dimensions .dimension`)))
	var dims []struct {
		Name   string
		Values []string
	}
	eval(`[...document.querySelectorAll('#dimensions .dimension')].map((d) => ({name: d.dataset.dimension, values: [...d.querySelectorAll('.dimension-value')].map((v) => v.dataset.value)}))`, &dims)
	var selected string
	eval(`document.getElementById('selected-count').textContent`, &selected)
	shot("explain")
	if len(dims) == 0 || len(dims[0].Values) == 0 {
		t.Fatalf("the explanation ranks nothing: %+v", dims)
	}

	// 3. One click on the top value filters the overview to it.
	do("filter to the top value", 30*time.Second,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#dimensions .dimension[data-dimension=%q] .dimension-value[data-value=%q]`, dims[0].Name, dims[0].Values[0]))),
		ready("overview"))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(loc); err != nil || u.Query().Get(dims[0].Name) != dims[0].Values[0] {
		t.Errorf("clicking %s=%s went to %s", dims[0].Name, dims[0].Values[0], loc)
	}

	// 4. The incident: its graph names a root cause, highlighted.
	var withVictims string
	do("open the incidents", 30*time.Second, chromedp.Navigate(base+"incidents"), ready("incidents"))
	eval(`[...document.querySelectorAll('#incidents tr')].filter((r) => r.querySelector('a.incident-link') && Number(r.children[4].textContent) > 0).map((r) => r.querySelector('a.incident-link').textContent)[0] || ''`, &withVictims)
	if withVictims == "" {
		t.Fatal("the incidents page lists no incident with victims; the view's API did")
	}
	do("open an incident with victims", 30*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a.incident-link[href=%q]`, "/incident/"+url.PathEscape(withVictims)))), ready("incident"),
		chromedp.WaitVisible(chromedp.CSS(`#graph canvas`)))
	var inc struct {
		ID      string   `json:"id"`
		Root    string   `json:"root"`
		CyRoots []string `json:"cyRoots"`
		Victims []string `json:"victims"`
	}
	eval(`({id: decodeURIComponent(location.pathname.slice(10)), root: document.getElementById('root-cause').dataset.request,
		cyRoots: braid.cy.nodes('.root').map((n) => n.id()),
		victims: [...document.querySelectorAll('#victims tr[data-request]')].map((r) => r.dataset.request)})`, &inc)
	shot("incident")
	if len(inc.CyRoots) != 1 || !strings.Contains(inc.CyRoots[0], inc.Root) || inc.Root == "" {
		t.Errorf("the graph's highlighted root %v is not the root cause %q", inc.CyRoots, inc.Root)
	}

	// 5. The layer heatmap of the incident, from its link.
	do("open the incident's layers", 30*time.Second, chromedp.Click(chromedp.CSS(`a[href^="/layers?incident="]`)), ready("layers"),
		chromedp.WaitVisible(chromedp.CSS(`#hit-heatmap canvas`)))
	var layers []int
	eval(`[...document.querySelectorAll('#polluted-layers span.layer')].map((s) => Number(s.dataset.layer))`, &layers)
	shot("layers")

	// 6. A victim's trace, from an incident's victim list. The trace is
	// fused once its request has ended and event time has closed it, which
	// may come after the incident names it (its row links to it from
	// then on): wait until a victim's trace is indexed with its spans and
	// the incident's flag. Not every victim has a trace: a request that
	// read polluted blocks and was then aborted wrote none (seed
	// 1796509194380842505: the first incident's one victim), so every
	// incident with victims is looked at.
	var victim, victimInc string
	var victimEnd float64 // the trace's end, unix ms
	waitFor(t, time.Minute, "a victim's trace to be fused with FLAG_POLLUTED", func() bool {
		demoEnded()
		var list []view.IncidentSummary
		getJSON(t, base+"api/incidents", &list)
		// The incident opened above first.
		if i := slices.IndexFunc(list, func(is view.IncidentSummary) bool { return is.ID == inc.ID }); i > 0 {
			list[0], list[i] = list[i], list[0]
		}
		for _, is := range list {
			if is.Victims == 0 {
				continue
			}
			var ip view.IncidentPage
			getJSON(t, base+"api/incident/"+url.PathEscape(is.ID), &ip)
			for _, v := range ip.Victims {
				if !v.Indexed || v.TraceID == "" {
					continue
				}
				var tp view.TracePage
				getJSON(t, base+"api/trace/"+v.TraceID, &tp)
				if len(tp.Spans) > 0 && slices.Contains(tp.Flags, braidpb.Flag_FLAG_POLLUTED.String()) {
					victim, victimInc, victimEnd = v.RequestID, is.ID, tp.End
					return true
				}
			}
		}
		return false
	})
	// The trace may have been flushed before its last span came (the
	// demo's flush_after, under load): that span revises it once event
	// time passes the trace. Wait until the view has indexed traces that
	// end past it by the demo's idle gap and out-of-orderness and more.
	waitFor(t, time.Minute, "event time past the victim's trace", func() bool {
		demoEnded()
		getJSON(t, base+"api/status", &st)
		return float64(st.Newest) >= victimEnd+float64((demoIdleGap+demoOutOfOrderness+time.Second)/time.Millisecond)
	})
	do("open a victim's trace", 30*time.Second, chromedp.Navigate(base+"incident/"+url.PathEscape(victimInc)), ready("incident"),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#victims tr[data-request=%q] a.trace-link`, victim))), ready("trace"))
	var tr struct {
		TraceID string `json:"traceId"`
		Spans   int    `json:"spans"`
		KV      int    `json:"kv"`
		Logs    int    `json:"logs"`
		Flags   string `json:"flags"`
	}
	eval(`({traceId: location.pathname.slice(7), spans: document.querySelectorAll('#waterfall .span-row[data-span-id]').length,
		kv: document.querySelectorAll('#kv-events tr.kv-event').length, logs: document.querySelectorAll('#logs tr.log-row').length,
		flags: document.getElementById('flags').textContent})`, &tr)
	shot("trace")

	// 7. An alert's generatorURL (the url of its braid.alerts record) opens
	// its page.
	var alerts []view.AlertSummary
	getJSON(t, base+"api/alerts", &alerts)
	ai := slices.IndexFunc(alerts, func(a view.AlertSummary) bool { return a.URL != "" })
	if ai < 0 {
		t.Fatalf("no indexed alert carries a url (generatorURL): %+v", alerts)
	}
	if !strings.HasPrefix(alerts[ai].URL, base+"alerts/") {
		t.Errorf("alert %s: url %s is not the view's alert page", alerts[ai].Key, alerts[ai].URL)
	}
	do("open an alert's generatorURL", 30*time.Second, chromedp.Navigate(alerts[ai].URL), ready("alert"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.episode[data-rule=%q]`, alerts[ai].Rule))))

	reqMu.Lock()
	for _, r := range requests {
		if !strings.HasPrefix(r, base) && !strings.HasPrefix(r, "data:") {
			t.Errorf("the page requested %s, outside the view", r)
		}
	}
	for _, e := range jsErrors {
		t.Errorf("the page: %s", e)
	}
	reqMu.Unlock()

	// What the demo's topics hold of the trace shown, read before the
	// demo (and its broker) stops: said if the trace falls short.
	record := traceRecord(t, addr, tr.TraceID)
	// The truth, written as the demo ends.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
	truth := readTruth(t, truthFile)
	if len(truth.regressions) != 1 {
		t.Fatalf("truth: %d regressions, want 1", len(truth.regressions))
	}
	reg := truth.regressions[0]
	if time.UnixMilli(selFrom).Before(reg.From) || time.UnixMilli(selTo).After(reg.To) {
		t.Errorf("the selection %v–%v is not inside the regression's window %v–%v (the demo's clock moved)", time.UnixMilli(selFrom), time.UnixMilli(selTo), reg.From, reg.To)
	}
	// The explanation ranks the regressed server first: its instance or its
	// GPU (one server per GPU, so both tell the selection apart alike).
	want := map[string]string{"instance": reg.Instance, "gpu": reg.GPUUUID}
	if w, ok := want[dims[0].Name]; !ok || dims[0].Values[0] != w {
		t.Errorf("the explanation of %s selected requests ranks %s=%s first, want instance=%s or gpu=%s (%+v)", selected, dims[0].Name, dims[0].Values[0], reg.Instance, reg.GPUUUID, dims)
	}
	fi := slices.IndexFunc(truth.faults, func(f simulator.KVFaultTruth) bool { return f.SourceRequest == inc.Root })
	if fi < 0 {
		t.Fatalf("the incident's root cause %q is no fault's source request: %+v", inc.Root, truth.faults)
	}
	fault := truth.faults[fi]
	// The polluted layers: every layer for a block-level fault (layer -1);
	// for a layer out-of-bounds write of layer L, L's region of other
	// blocks or, past its end, layer L+1's (KV.md).
	if len(layers) == 0 {
		t.Errorf("the layer heatmap of %s (%s, layer %d) shows no polluted layer", inc.ID, fault.Trigger, fault.Layer)
	}
	if fault.Pattern == simulator.LayerOOB {
		for _, l := range layers {
			if l != fault.Layer && l != fault.Layer+1 {
				t.Errorf("the layer heatmap of %s shows layer %d polluted; the %s fault wrote layer %d (into %d or %d)", inc.ID, l, fault.Trigger, fault.Layer, fault.Layer, fault.Layer+1)
			}
		}
	}
	polluted := append(slices.Clone(fault.Victims), fault.Propagated...)
	for _, v := range inc.Victims {
		if !slices.Contains(polluted, v) {
			t.Errorf("the incident page lists %s as a victim; the simulator polluted %v", v, polluted)
		}
	}
	if len(inc.Victims) == 0 {
		t.Errorf("the incident page lists no victim; the simulator polluted %v", polluted)
	}
	rt, ok := truth.byRequest[victim]
	if !ok {
		t.Fatalf("victim %s is no request of the truth", victim)
	}
	if tr.TraceID != rt.TraceID {
		t.Errorf("victim %s's link opened trace %s, the simulator's %s", victim, tr.TraceID, rt.TraceID)
	}
	if tr.Spans != rt.Spans {
		t.Errorf("trace %s shows %d spans, the simulator wrote %d; the demo's topics held: %s", tr.TraceID, tr.Spans, rt.Spans, record)
	}
	if tr.KV == 0 || tr.Logs == 0 {
		t.Errorf("trace %s shows %d KV events and %d logs, want some of each (the simulator wrote %d KV events and %d logs)", tr.TraceID, tr.KV, tr.Logs, rt.KVEvents, rt.Logs)
	}
	if !strings.Contains(tr.Flags, "polluted") {
		t.Errorf("victim trace %s is not flagged polluted: %q", tr.TraceID, tr.Flags)
	}
	t.Logf("selected %s requests; ranked %s=%s first; incident %s root %s, layers %v, %d victims; trace %s: %d spans, %d logs, %d KV events; screenshots in %s",
		selected, dims[0].Name, dims[0].Values[0], inc.ID, inc.Root, layers, len(inc.Victims), tr.TraceID, tr.Spans, tr.Logs, tr.KV, shots)
}

// traceRecord describes what the demo's fused, late and dead-letter topics
// hold of trace traceHex, up to their ends now (readAll): each fused
// record's revision and members, and each late or dead-letter record that
// carries the trace id with its headers (the reason).
func traceRecord(t *testing.T, addr, traceHex string) string {
	t.Helper()
	id, err := hex.DecodeString(traceHex)
	if err != nil {
		return fmt.Sprintf("trace id %q: %v", traceHex, err)
	}
	var out []string
	for _, topic := range []string{"braid.fused", "braid.late", "braid.dlq"} {
		for _, recs := range readAll(t, []string{addr}, topic) {
			for _, r := range recs {
				switch {
				case topic == "braid.fused" && (string(r.Key) == traceHex || bytes.Equal(r.Key, id)):
					var ft braidpb.FusedTrace
					if err := proto.Unmarshal(r.Value, &ft); err != nil {
						out = append(out, fmt.Sprintf("fused %d/%d: %v", r.Partition, r.Offset, err))
						continue
					}
					out = append(out, fmt.Sprintf("fused %d/%d revision %d: %d spans, %d logs", r.Partition, r.Offset, ft.Revision, len(ft.Spans), len(ft.Logs)))
				case topic != "braid.fused" && (bytes.Contains(r.Value, id) || bytes.Contains(r.Value, []byte(traceHex))):
					var hs []string
					for _, h := range r.Headers {
						hs = append(hs, h.Key+"="+string(h.Value))
					}
					out = append(out, fmt.Sprintf("%s %d/%d %v", topic, r.Partition, r.Offset, hs))
				}
			}
		}
	}
	return strings.Join(out, "; ")
}

// findChromium is the path of a Chromium or Chrome binary on PATH, or "".
// headless starts a headless Chromium (no sandbox: CI runs as root) of
// the given window size whose host resolution follows rules; cancel ends
// it.
func headless(ctx context.Context, chrome string, w, h int, rules string) (context.Context, context.CancelFunc) {
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(w, h),
		chromedp.Flag("host-resolver-rules", rules),
		chromedp.Flag("disable-background-networking", true))...)
	bctx, bcancel := chromedp.NewContext(actx)
	return bctx, func() { bcancel(); acancel() }
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactsDir is $BRAID_ARTIFACTS/name (default artifacts/name at the
// repository root), made empty.
func artifactsDir(t *testing.T, name string) string {
	root := os.Getenv("BRAID_ARTIFACTS")
	if root == "" {
		root = filepath.Join("..", "..", "artifacts")
	}
	dir := filepath.Join(root, name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond every 100 ms until it holds, or fails the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getJSON GETs u into v; a view not up yet leaves v as it was.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

type demoTruth struct {
	regressions []simulator.RegressionTruth
	faults      []simulator.KVFaultTruth
	byRequest   map[string]simulator.TruthLine
	polluted    map[string]time.Time // when each polluted request was polluted
}

func readTruth(t *testing.T, path string) demoTruth {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := demoTruth{byRequest: map[string]simulator.TruthLine{}, polluted: map[string]time.Time{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var head struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &head); err != nil {
			t.Fatalf("truth: %v", err)
		}
		switch head.Type {
		case "request":
			var l simulator.TruthLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			tr.byRequest[l.RequestID] = l
		case "regression":
			var r simulator.RegressionTruth
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			tr.regressions = append(tr.regressions, r)
		case "polluted":
			var p simulator.KVPolluted
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			tr.polluted[p.RequestID] = p.Time
		case "fault":
			var k simulator.KVFaultTruth
			if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
				t.Fatal(err)
			}
			tr.faults = append(tr.faults, k)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tr
}
