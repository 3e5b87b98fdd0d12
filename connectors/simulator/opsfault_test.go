package simulator

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// opsRoot is one request as its decoded spans and logs show it.
type opsRoot struct {
	instance, host, uuid   string
	start, end             uint64 // root span
	prefillStart           uint64 // llm.prefill
	decodeStart            uint64 // earliest llm.decode.layer.N
	queue, ttft, e2e, pref float64
	logE2E                 []string // e2e=… of the trace's stats logs
}

// opsSeries is one decoded scraped series.
type opsSeries struct {
	resource map[string]string
	labels   map[string]string
	samples  []sample
}

type opsRun struct {
	s      *Simulator
	roots  map[string]*opsRoot
	series map[string]*opsSeries // metric name + "/" + UUID label (DCGM) or service.instance.id (server)
	truth  []byte
}

var statsE2E = regexp.MustCompile(` e2e=([0-9.]+)s$`)

func doubleAttr(sp *tracepb.Span, key string) float64 {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value.GetDoubleValue()
		}
	}
	return math.NaN()
}

// runOps runs cfg for batches then Flush, checks the truth against the
// decoded messages as every realistic test does, and decodes the spans,
// the trace-id logs and the scrapes independently of the simulator.
func runOps(t *testing.T, cfg Config, batches int) *opsRun {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := newRDecoded()
	run := &opsRun{s: s, roots: map[string]*opsRoot{}, series: map[string]*opsSeries{}}
	root := func(tid string) *opsRoot {
		r := run.roots[tid]
		if r == nil {
			r = &opsRoot{decodeStart: math.MaxUint64}
			run.roots[tid] = r
		}
		return r
	}
	add := func(m Message) {
		d.add(t, s.cfg, m)
		msg := decodeMessage(t, s.cfg, m)
		switch x := msg.(type) {
		case *tracepb.TracesData:
			for _, rs := range x.ResourceSpans {
				res := attrMap(rs.Resource.Attributes)
				for _, ss := range rs.ScopeSpans {
					for _, sp := range ss.Spans {
						r := root(hex.EncodeToString(sp.TraceId))
						switch {
						case len(sp.ParentSpanId) == 0:
							r.instance, r.host, r.uuid = res["service.instance.id"], res["host.name"], res["gpu.uuid"]
							r.start, r.end = sp.StartTimeUnixNano, sp.EndTimeUnixNano
							r.queue = doubleAttr(sp, "gen_ai.latency.time_in_queue")
							r.ttft = doubleAttr(sp, "gen_ai.latency.time_to_first_token")
							r.e2e = doubleAttr(sp, "gen_ai.latency.e2e")
							r.pref = doubleAttr(sp, "gen_ai.latency.time_in_model_prefill")
						case sp.Name == "llm.prefill":
							r.prefillStart = sp.StartTimeUnixNano
						case len(sp.Name) > len("llm.decode.layer.") && sp.Name[:len("llm.decode.layer.")] == "llm.decode.layer.":
							r.decodeStart = min(r.decodeStart, sp.StartTimeUnixNano)
						}
					}
				}
			}
		case *logspb.LogsData:
			for _, rl := range x.ResourceLogs {
				for _, sl := range rl.ScopeLogs {
					if sl.Scope.GetName() == kvScope.Name {
						continue
					}
					for _, lr := range sl.LogRecords {
						if len(lr.TraceId) == 0 {
							continue
						}
						if sm := statsE2E.FindStringSubmatch(lr.Body.GetStringValue()); sm != nil {
							r := root(hex.EncodeToString(lr.TraceId))
							r.logE2E = append(r.logE2E, sm[1])
						}
					}
				}
			}
		case *metricspb.MetricsData:
			for _, rm := range x.ResourceMetrics {
				res := attrMap(rm.Resource.Attributes)
				for _, sm := range rm.ScopeMetrics {
					for _, mt := range sm.Metrics {
						g := mt.GetGauge()
						if g == nil {
							continue
						}
						for _, p := range g.DataPoints {
							labels := attrMap(p.Attributes)
							key := mt.Name + "/" + res["service.instance.id"]
							if u := labels["UUID"]; u != "" {
								key = mt.Name + "/" + u
							}
							se := run.series[key]
							if se == nil {
								se = &opsSeries{resource: res, labels: labels}
								run.series[key] = se
							}
							se.samples = append(se.samples, sample{p.TimeUnixNano, p.GetAsDouble()})
						}
					}
				}
			}
		}
	}
	for range batches {
		for _, m := range s.Next() {
			add(m)
		}
	}
	for _, m := range s.Flush() {
		add(m)
	}
	checkTruth(t, s.Truth(), d.decoded, true)
	var buf bytes.Buffer
	if err := s.WriteTruth(&buf); err != nil {
		t.Fatal(err)
	}
	run.truth = buf.Bytes()
	for _, se := range run.series {
		sort.SliceStable(se.samples, func(i, j int) bool { return se.samples[i].t < se.samples[j].t })
	}
	return run
}

// truthLines returns the lines of the truth file of the given type.
func truthLines(t *testing.T, file []byte, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(file))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// slope is the least-squares slope of the samples, in value per minute.
func slope(ss []sample) float64 {
	var sx, sy, sxx, sxy float64
	n := float64(len(ss))
	for _, s := range ss {
		x := float64(s.t-ss[0].t) / float64(time.Minute)
		sx += x
		sy += s.v
		sxx += x * x
		sxy += x * s.v
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

func TestRealisticRegression(t *testing.T) {
	const factor = 4.0
	from, to := 10*time.Second, 30*time.Second
	for _, kv := range []bool{false, true} {
		name := "kv-off"
		if kv {
			name = "kv-on"
		}
		t.Run(name, func(t *testing.T) {
			base := Config{Seed: 17, Realistic: true, Hosts: 1, Rate: 6, KVEvents: kv}
			if kv {
				base.Encoding, base.Keying = EncodingJSON, Unkeyed
			}
			cfg := base
			// Server 0 (gpu-node-01:8000): its engine logs carry no
			// llm_context_hint, whose random draws come in the order the
			// logs are written, so slowing it moves no other draw and the
			// clean run with the same seed has the same requests. Server 1
			// serves the same model.
			cfg.Regressions = []Regression{{Instance: 0, From: from, To: to, Factor: factor}}
			clean := runOps(t, base, 200)
			reg := runOps(t, cfg, 200)

			tr := reg.s.Truth()
			if len(tr.Regressions) != 1 {
				t.Fatalf("truth has %d regressions", len(tr.Regressions))
			}
			rt := tr.Regressions[0]
			lo, hi := uint64(DefaultStart.Add(from).UnixNano()), uint64(DefaultStart.Add(to).UnixNano())
			if rt.Index != 0 || rt.Instance != "gpu-node-01:8000" || rt.Host != "gpu-node-01" || rt.Service != "vllm" ||
				!rt.From.Equal(DefaultStart.Add(from)) || !rt.To.Equal(DefaultStart.Add(to)) || rt.Factor != factor {
				t.Fatalf("regression truth %+v", rt)
			}
			// The slowed set, as the decoded spans show it: the instance's
			// requests whose root span starts in the window.
			want := map[string]bool{}
			for tid, r := range reg.roots {
				if r.instance == rt.Instance && r.start >= lo && r.start < hi {
					want[tid] = true
					if r.host != rt.Host || r.uuid != rt.GPUUUID {
						t.Fatalf("trace %s: host %s gpu %s, truth %s %s", tid, r.host, r.uuid, rt.Host, rt.GPUUUID)
					}
				}
			}
			if len(want) < 50 || len(want) != len(rt.TraceIDs) {
				t.Fatalf("%d slowed traces decoded, truth lists %d", len(want), len(rt.TraceIDs))
			}
			for _, tid := range rt.TraceIDs {
				if !want[tid] {
					t.Fatalf("truth lists %s, not slowed", tid)
				}
			}
			for tid, tt := range tr.Traces {
				if tt.Regressed != want[tid] && !tt.Retry {
					t.Fatalf("trace %s: Regressed %v, slowed %v", tid, tt.Regressed, want[tid])
				}
			}
			if lines := truthLines(t, reg.truth, "regression"); len(lines) != 1 || lines[0]["instance"] != rt.Instance ||
				len(lines[0]["trace_ids"].([]any)) != len(rt.TraceIDs) {
				t.Fatalf("truth file regression lines %v", lines)
			}
			if n := len(truthLines(t, clean.truth, "regression")); n != 0 {
				t.Fatalf("clean run: %d regression lines", n)
			}

			// Each request is consistent with itself: the first decode span
			// starts a TTFT after the root, prefill a queue time after it,
			// the root lasts e2e, the stats log says the same e2e.
			for tid, r := range reg.roots {
				if r.end == 0 {
					continue // a KV retry: no spans
				}
				if d := math.Abs(float64(r.decodeStart-r.start)/1e9 - r.ttft); d > 3e-6 {
					t.Fatalf("trace %s: decode starts %v s after the root, TTFT %v", tid, float64(r.decodeStart-r.start)/1e9, r.ttft)
				}
				if d := math.Abs(float64(r.prefillStart-r.start)/1e9 - r.queue); d > 2e-6 {
					t.Fatalf("trace %s: prefill starts %v s after the root, queue %v", tid, float64(r.prefillStart-r.start)/1e9, r.queue)
				}
				if d := math.Abs(r.queue + r.pref - r.ttft); d > 2e-6 {
					t.Fatalf("trace %s: queue %v + prefill %v != TTFT %v", tid, r.queue, r.pref, r.ttft)
				}
				if d := math.Abs(float64(r.end-r.start)/1e9 - r.e2e); d > 1e-6 {
					t.Fatalf("trace %s: root lasts %v s, e2e %v", tid, float64(r.end-r.start)/1e9, r.e2e)
				}
				for _, le := range r.logE2E {
					if le != strconv.FormatFloat(r.e2e, 'f', 3, 64) {
						t.Fatalf("trace %s: log e2e %s, span %v", tid, le, r.e2e)
					}
				}
			}

			// Against the same seed without the regression: the slowed
			// requests' TTFT is factor times theirs, every other request's
			// is unchanged (the instance's after the window may queue
			// behind slowed ones).
			var ratios, slowed, neighbour []float64
			same, after := 0, 0
			for tid, r := range reg.roots {
				c, ok := clean.roots[tid]
				if !ok || r.end == 0 {
					if r.end != 0 {
						t.Fatalf("trace %s not in the clean run", tid)
					}
					continue
				}
				switch {
				case want[tid]:
					ratios = append(ratios, r.ttft/c.ttft)
					slowed = append(slowed, r.ttft)
				case r.instance == rt.Instance && r.start >= hi:
					after++
					if r.ttft == c.ttft && r.end == c.end {
						same++
					}
				default:
					if r.ttft != c.ttft || r.start != c.start || r.end != c.end {
						t.Fatalf("trace %s on %s at %v: TTFT %v end %d, clean %v %d", tid, r.instance,
							time.Unix(0, int64(r.start)).UTC(), r.ttft, r.end, c.ttft, c.end)
					}
					if r.start >= lo && r.start < hi {
						neighbour = append(neighbour, r.ttft)
					}
				}
			}
			for _, q := range ratios {
				if q < factor-1e-3 {
					t.Fatalf("a slowed request's TTFT is %v× the clean run's", q)
				}
			}
			if m := median(ratios); math.Abs(m-factor) > 0.01 {
				t.Fatalf("median TTFT ratio to the clean run %v, want %v", m, factor)
			}
			if after < 25 || float64(same) < 0.9*float64(after) {
				t.Fatalf("after the window: %d of %d requests unchanged", same, after)
			}
			// Against the neighbour serving the same model in the window.
			if q := median(slowed) / median(neighbour); q < 0.7*factor || q > 1.3*factor {
				t.Fatalf("median TTFT %v× the neighbour's (%d and %d requests)", q, len(slowed), len(neighbour))
			}
			t.Logf("%d slowed, median ratio %.4f to the clean run, %.2f to the neighbour; %d/%d unchanged after",
				len(slowed), median(ratios), median(slowed)/median(neighbour), same, after)
		})
	}
}

func TestRealisticLeak(t *testing.T) {
	const rate = 12_000.0 // MiB per minute
	from, to := 20*time.Second, 80*time.Second
	for _, kv := range []bool{false, true} {
		name := "kv-off"
		if kv {
			name = "kv-on"
		}
		t.Run(name, func(t *testing.T) {
			base := Config{Seed: 23, Realistic: true, Hosts: 1, Rate: 1, KVEvents: kv}
			if kv {
				base.Keying = Unkeyed
			}
			cfg := base
			cfg.Leaks = []Leak{{GPU: 0, From: from, To: to, MiBPerMinute: rate}}
			clean := runOps(t, base, 450)
			leak := runOps(t, cfg, 450)

			tr := leak.s.Truth()
			if len(tr.Leaks) != 1 {
				t.Fatalf("truth has %d leaks", len(tr.Leaks))
			}
			lt := tr.Leaks[0]
			fb := leak.series["DCGM_FI_DEV_FB_USED/"+lt.UUID]
			if fb == nil {
				t.Fatalf("no DCGM_FI_DEV_FB_USED series with UUID %s", lt.UUID)
			}
			if !maps.Equal(fb.labels, lt.Labels) || fb.labels["gpu"] != lt.GPU || fb.labels[lt.HostLabel] != lt.Host ||
				lt.Host != "gpu-node-01" || lt.GPU != "0" || fb.resource["service.instance.id"] != lt.Exporter ||
				fb.resource["service.name"] != "dcgm-exporter" || lt.Instance != "gpu-node-01:8000" {
				t.Fatalf("leak truth %+v, series %v %v", lt, fb.resource, fb.labels)
			}
			// The truth's GPU is the one the server's spans name.
			for _, r := range leak.roots {
				if r.instance == lt.Instance && r.uuid != lt.UUID {
					t.Fatalf("server %s spans on %s, leak truth %s", lt.Instance, r.uuid, lt.UUID)
				}
			}
			lo, hi := uint64(DefaultStart.Add(from).UnixNano()), uint64(DefaultStart.Add(to).UnixNano())
			in := func(s sample) bool { return s.t >= lo && s.t < hi }

			// From the produced samples alone: the slope in the window is
			// the leak's, the other GPU's is flat, and the use drops back
			// after the window.
			var win []sample
			for _, s := range fb.samples {
				if in(s) {
					win = append(win, s)
				}
			}
			if len(win) != lt.Samples || len(win) < 55 {
				t.Fatalf("%d samples in the window, truth %d", len(win), lt.Samples)
			}
			if k := slope(win); math.Abs(k-rate) > 0.1*rate {
				t.Fatalf("leaking GPU: slope %.0f MiB/min, want %v", k, rate)
			}
			var other *opsSeries
			for key, se := range leak.series {
				if key != "DCGM_FI_DEV_FB_USED/"+lt.UUID && se.labels["UUID"] != "" && key[:len("DCGM_FI_DEV_FB_USED/")] == "DCGM_FI_DEV_FB_USED/" {
					other = se
				}
			}
			var owin []sample
			for _, s := range other.samples {
				if in(s) {
					owin = append(owin, s)
				}
			}
			if k := slope(owin); math.Abs(k) > 0.1*rate {
				t.Fatalf("other GPU: slope %.0f MiB/min in the window", k)
			}
			last := win[len(win)-1]
			i := sort.Search(len(fb.samples), func(i int) bool { return fb.samples[i].t >= hi })
			if i == len(fb.samples) || fb.samples[i].v > last.v-0.5*rate*float64(to-from)/float64(time.Minute) {
				t.Fatalf("no drop after the window: last %v", last)
			}

			// Against the same seed without the leak, sample by sample: the
			// leaked MiB exactly, on the leaking GPU in the window only;
			// FB_FREE the opposite; the server's KV usage up by the leak
			// over its pool.
			pool := 0.9*gpuTotalMiB - modelLlama.weightsMiB - 2048
			for key, se := range leak.series {
				cs := clean.series[key]
				if cs == nil || len(cs.samples) != len(se.samples) {
					t.Fatalf("%s: samples differ in number from the clean run", key)
				}
				for j, s := range se.samples {
					c := cs.samples[j]
					want := 0.0
					if s.t != c.t {
						t.Fatalf("%s: sample %d at %d, clean %d", key, j, s.t, c.t)
					}
					leaked := rate * float64(s.t-lo) / float64(time.Minute)
					switch {
					case !in(s):
					case key == "DCGM_FI_DEV_FB_USED/"+lt.UUID:
						want = math.Round(leaked)
					case key == "DCGM_FI_DEV_FB_FREE/"+lt.UUID:
						want = -math.Round(leaked)
					case key == "vllm:kv_cache_usage_perc/"+lt.Instance:
						if math.Abs(s.v-min(1, c.v+leaked/pool)) > 0.0015 {
							t.Fatalf("KV usage %v at %d, clean %v, leak %.0f MiB", s.v, s.t, c.v, leaked)
						}
						continue
					}
					if s.v-c.v != want {
						t.Fatalf("%s at %v: %v, clean %v, want +%v", key, time.Unix(0, int64(s.t)).UTC(), s.v, c.v, want)
					}
				}
			}
			if lt.LeakedMiB != last.v-clean.series["DCGM_FI_DEV_FB_USED/"+lt.UUID].samples[slices.Index(fb.samples, last)].v {
				t.Fatalf("truth LeakedMiB %v", lt.LeakedMiB)
			}
			if lines := truthLines(t, leak.truth, "leak"); len(lines) != 1 || lines[0]["uuid"] != lt.UUID || lines[0]["host_label"] != lt.HostLabel {
				t.Fatalf("truth file leak lines %v", lines)
			}
			t.Logf("slope %.0f MiB/min (other GPU %.0f), %d samples, %v MiB leaked at the end", slope(win), slope(owin), len(win), lt.LeakedMiB)
		})
	}
}
