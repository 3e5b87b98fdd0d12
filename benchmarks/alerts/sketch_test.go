package alerts

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/windows"
)

var (
	requests = flag.Int("requests", 20000, "requests of the e2e workload to generate (benchmarks/e2e -requests; the figures in benchmarks/README.md: 150000, 600000); -short: 5000")
	maxError = flag.Float64("max-error", 0.01, "the largest relative quantile error allowed")
)

// The rules' windows: 1 minute, ending every 15 s (the default SLO rules),
// built from 15 s panes.
const (
	pane   = int64(15e9)
	window = int64(60e9)
	tasks  = 4 // the fuse tasks that each aggregate their own part of a pane
)

var quantiles = []float64{0.5, 0.9, 0.99, 0.999}

var figures = []string{"ttft", "e2e"}

// attrs maps the root span attributes the figures come from.
var attrs = map[string]int{"gen_ai.latency.time_to_first_token": 0, "gen_ai.latency.e2e": 1}

type groupKey struct{ model, instance string }

type paneKey struct {
	g    groupKey
	pane int64 // start, ns
}

// sample is one trace's figure, as the alerts stage observes it.
type sample struct {
	t  int64
	v  float64
	id string
}

// TestSketchError compares the quantiles of windows.Agg with exact ones
// (sorting) over the workload of benchmarks/e2e (connectors/simulator, seed
// 1, its default configuration): the TTFT and e2e latency of every request,
// read from the root span's attributes, per model and instance, in every
// 1-minute window ending at a multiple of 15 s. As in the alerts stage, each
// of 4 tasks aggregates its traces per 15 s pane, the pane aggregates go
// through their binary encoding and are merged into the window. The exact
// quantile is the sample of rank ⌊q·(n−1)⌋, the rank windows.Agg documents.
func TestSketchError(t *testing.T) {
	n := *requests
	if testing.Short() {
		n = min(n, 5000)
	}
	cfg := simulator.Config{Seed: 1, Encoding: simulator.EncodingProto, Topics: simulator.DefaultTopics}
	batches := (n + simulator.DefaultRequestsPerBatch - 1) / simulator.DefaultRequestsPerBatch
	t.Logf("%d requests of the e2e workload", n)
	checkSketch(t, generate(t, cfg, batches))
}

// TestSketchErrorRealistic does the same over the simulator's realistic
// fleet (4 servers, 40 requests/s of event time, modelled queues) with a
// TTFT regression (×6 on one server for 2 minutes): the slow requests make
// a second mode far above the first, the shape the TTFT rule watches.
func TestSketchErrorRealistic(t *testing.T) {
	cfg := simulator.Config{Seed: 1, Encoding: simulator.EncodingProto, Topics: simulator.DefaultTopics,
		Realistic: true, Rate: 40, Hosts: 2,
		Regressions: []simulator.Regression{{Instance: 1, From: time.Minute, To: 3 * time.Minute, Factor: 6}}}
	d := 5 * time.Minute
	if testing.Short() {
		d = 4 * time.Minute
	}
	t.Logf("realistic fleet, %v of event time", d)
	checkSketch(t, generate(t, cfg, int(d/simulator.DefaultBatchInterval)))
}

// checkSketch compares the sketches' quantiles of every window with the
// exact ones.
func checkSketch(t *testing.T, samples map[paneKey][2][]sample) {
	t.Helper()

	// The stage's side: per task, pane, group and figure, an Agg.
	type partKey struct {
		paneKey
		task int
		fig  int
	}
	parts := map[partKey]*windows.Agg{}
	exact := map[paneKey][2][]float64{}
	traces := 0
	for k, ss := range samples {
		for fig, s := range ss {
			for _, x := range s {
				task := int(x.id[len(x.id)-1]) % tasks
				pk := partKey{k, task, fig}
				a := parts[pk]
				if a == nil {
					a = &windows.Agg{}
					parts[pk] = a
				}
				a.Add(x.t, x.v, x.id)
			}
			e := exact[k]
			for _, x := range s {
				e[fig] = append(e[fig], x.v)
			}
			exact[k] = e
		}
		traces += len(ss[0])
	}
	// Encoded and decoded, as a partial record carries them.
	panes := map[paneKey][2]*windows.Agg{}
	for pk, a := range parts {
		b, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d windows.Agg
		if err := d.UnmarshalBinary(b); err != nil {
			t.Fatalf("decode a pane aggregate: %v", err)
		}
		p := panes[pk.paneKey]
		if p[pk.fig] == nil {
			p[pk.fig] = &windows.Agg{}
		}
		p[pk.fig].Merge(&d)
		panes[pk.paneKey] = p
	}

	groups := map[groupKey]bool{}
	var lo, hi int64 = math.MaxInt64, math.MinInt64
	for k := range exact {
		groups[k.g] = true
		lo, hi = min(lo, k.pane), max(hi, k.pane)
	}
	type worst struct {
		err       float64
		got, want float64
		n         int
		group     groupKey
		end       int64
		fig       string
		q         float64
	}
	var all worst
	perQ := map[string]*worst{}
	windowsChecked, minN, maxN := 0, math.MaxInt, 0
	for g := range groups {
		for end := lo + pane; end <= hi+window; end += pane {
			for fig := range figures {
				var vals []float64
				w := &windows.Agg{}
				for p := end - window; p < end; p += pane {
					k := paneKey{g, p}
					vals = append(vals, exact[k][fig]...)
					if a := panes[k][fig]; a != nil {
						w.Merge(a)
					}
				}
				if len(vals) == 0 {
					continue
				}
				if int(w.Count) != len(vals) {
					t.Fatalf("%v window ending %d: the aggregate counts %v samples, want %d", g, end, w.Count, len(vals))
				}
				sort.Float64s(vals)
				windowsChecked++
				minN, maxN = min(minN, len(vals)), max(maxN, len(vals))
				for _, q := range quantiles {
					want := vals[int(math.Floor(q*float64(len(vals)-1)))]
					got := w.Quantile(q)
					e := math.Abs(got-want) / want
					if math.IsNaN(got) || want == 0 {
						t.Fatalf("%v %s window ending %d: p%g = %v, exact %v", g, figures[fig], end, q*100, got, want)
					}
					key := fmt.Sprintf("%s p%g", figures[fig], q*100)
					if perQ[key] == nil {
						perQ[key] = &worst{}
					}
					if e > perQ[key].err {
						*perQ[key] = worst{err: e, got: got, want: want, n: len(vals), group: g, end: end, fig: figures[fig], q: q}
					}
					if e > all.err {
						all = worst{err: e, got: got, want: want, n: len(vals), group: g, end: end, fig: figures[fig], q: q}
					}
				}
			}
		}
	}
	if windowsChecked == 0 {
		t.Fatal("no window")
	}
	keys := make([]string, 0, len(perQ))
	for k := range perQ {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t.Logf("%d traces with both figures, %d groups (model, instance), %d windows × figure (1 min, every 15 s; %d to %d samples)",
		traces, len(groups), windowsChecked, minN, maxN)
	for _, k := range keys {
		w := perQ[k]
		t.Logf("  %-9s max relative error %.4f %%  (%v, window ending %d: %.6g vs exact %.6g, %d samples)", k, w.err*100, w.group, w.end, w.got, w.want, w.n)
	}
	t.Logf("max relative error over every window, group, figure and quantile: %.4f %% (%s p%g)", all.err*100, all.fig, all.q*100)
	if all.err > *maxError {
		t.Errorf("max relative quantile error %.4f %% > %.2f %%: %s p%g of %v, window ending %d: %v vs exact %v (%d samples)",
			all.err*100, *maxError*100, all.fig, all.q*100, all.group, all.end, all.got, all.want, all.n)
	}
}

// generate runs the simulator for the batches and returns the root spans'
// figures per pane and group.
func generate(t *testing.T, cfg simulator.Config, batches int) map[paneKey][2][]sample {
	t.Helper()
	sim, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[paneKey][2][]sample{}
	// TracesData has the wire form of ExportTraceServiceRequest.
	var req tracepb.TracesData
	take := func(msgs []simulator.Message) {
		for _, m := range msgs {
			if m.Topic != simulator.DefaultTopics.Spans {
				continue
			}
			req.Reset()
			if err := proto.Unmarshal(m.Value, &req); err != nil {
				t.Fatalf("decode a span message: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				instance := str(rs.GetResource().GetAttributes(), "service.instance.id")
				for _, ss := range rs.ScopeSpans {
					for _, sp := range ss.Spans {
						if len(sp.ParentSpanId) != 0 || sp.Kind != tracepb.Span_SPAN_KIND_SERVER {
							continue
						}
						g := groupKey{model: str(sp.Attributes, "gen_ai.response.model"), instance: instance}
						end := int64(sp.EndTimeUnixNano)
						k := paneKey{g, end - end%pane}
						e := out[k]
						id := fmt.Sprintf("%x", sp.TraceId)
						for _, kv := range sp.Attributes {
							if fig, ok := attrs[kv.Key]; ok {
								e[fig] = append(e[fig], sample{t: end, v: kv.Value.GetDoubleValue(), id: id})
							}
						}
						if len(e[0]) != len(e[1]) {
							t.Fatalf("root span %s: not both figures", id)
						}
						out[k] = e
					}
				}
			}
		}
	}
	for range batches {
		take(sim.Next())
		sim.ForgetTraces()
	}
	take(sim.Flush())
	return out
}

func str(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}
