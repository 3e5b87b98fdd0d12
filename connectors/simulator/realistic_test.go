package simulator

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

var realisticVariants = []struct {
	name string
	cfg  Config
}{
	{"proto-keyed", Config{Realistic: true}},
	{"json-unkeyed", Config{Realistic: true, Encoding: EncodingJSON, Keying: Unkeyed}},
	{"proto-unkeyed-disorder", Config{Realistic: true, Keying: Unkeyed, Disorder: 2 * time.Second, SplitRatio: 0.3, AbortRatio: 0.1}},
	{"json-keyed-saturated", Config{Realistic: true, Encoding: EncodingJSON, Rate: 100, Hosts: 1, ScrapeInterval: 500 * time.Millisecond}},
	{"proto-keyed-trickle", Config{Realistic: true, Rate: 0.7, Hosts: 3, AbortRatio: 0.2}},
}

// rdecoded is what decoding realistic messages finds, beyond decoded.
type rdecoded struct {
	*decoded
	rootReqIDs map[string]string // gen_ai.request.id of root spans -> trace id
	rootAttrs  map[string]map[string]string
	rootRes    map[string]map[string]string // trace id -> resource attributes
	engineIDs  map[string]int               // request id -> trace-less logs naming it
	aborted    map[string]bool              // request ids of "Aborted request"/"Abort request" logs
	hints      int
	malformed  int
	series     map[string]*dseries

	kvByReq   map[string]int // KV records naming each request id
	kvOps     int            // records with kv.op
	kvLines   []*logspb.LogRecord
	kvTraceOf map[string]string // request id -> trace id of its KV records
	kvSpanOf  map[string]string // request id -> span id of its KV records
	kvWhere   map[string]string // request id -> host.name/gpu.uuid/gpu.index/service.instance.id of its KV records
}

func (d *rdecoded) addKV(t *testing.T, res map[string]string, lr *logspb.LogRecord) {
	t.Helper()
	a := attrMap(lr.Attributes)
	if a["kv.op"] == "" {
		if lr.Body.GetStringValue() == "" {
			t.Fatal("KV record without kv.op or body")
		}
		d.kvLines = append(d.kvLines, lr)
		return
	}
	d.kvOps++
	id := a["gen_ai.request.id"]
	if id == "" {
		return // an op of no request (eviction of a cached block)
	}
	d.kvByReq[id]++
	where := res["host.name"] + "/" + res["gpu.uuid"] + "/" + res["gpu.index"] + "/" + res["service.instance.id"]
	if old, ok := d.kvWhere[id]; ok && old != where {
		t.Fatalf("request %s: KV records on %s and %s", id, old, where)
	}
	d.kvWhere[id] = where
	tid, sid := hex.EncodeToString(lr.TraceId), hex.EncodeToString(lr.SpanId)
	if old, ok := d.kvTraceOf[id]; ok && old != tid {
		t.Fatalf("request %s: KV records in traces %q and %q", id, old, tid)
	}
	d.kvTraceOf[id], d.kvSpanOf[id] = tid, sid
}

// dseries is a decoded scraped series.
type dseries struct {
	name, instance, host, uuid string
	labels                     map[string]string
	counter                    bool
	samples                    []sample
}

var (
	bodyID    = regexp.MustCompile(`(?:request |rid=|rid=')((?:chat)?cmpl-[0-9a-f]{32}|[0-9a-f]{32})`)
	goodHint  = regexp.MustCompile(`^model=[^;=]+;tenant=[^;=]+;route=[^;=]+$`)
	canonical = map[string]string{
		"vllm:kv_cache_usage_perc": MetricKVCacheUsage, "vllm:gpu_cache_usage_perc": MetricKVCacheUsage, "sglang:token_usage": MetricKVCacheUsage,
		"vllm:num_requests_running": MetricRequestsRunning, "sglang:num_running_reqs": MetricRequestsRunning,
		"vllm:num_requests_waiting": MetricRequestsWaiting, "sglang:num_queue_reqs": MetricRequestsWaiting,
		"vllm:num_preemptions":      MetricPreemptions,
		"vllm:prefix_cache_queries": MetricPrefixCacheQueries, "vllm:gpu_prefix_cache_queries": MetricPrefixCacheQueries,
		"vllm:prefix_cache_hits": MetricPrefixCacheHits, "vllm:gpu_prefix_cache_hits": MetricPrefixCacheHits,
		"sglang:cache_hit_rate": MetricPrefixCacheHitRate, "vllm:cache_config_info": MetricCacheConfigInfo,
		"DCGM_FI_DEV_FB_USED": MetricGPUFBUsed, "DCGM_FI_DEV_FB_FREE": MetricGPUFBFree, "DCGM_FI_DEV_FB_RESERVED": MetricGPUFBReserved,
		"DCGM_FI_DEV_GPU_UTIL": MetricGPUUtil, "DCGM_FI_PROF_PCIE_TX_BYTES": MetricPCIeTx, "DCGM_FI_PROF_PCIE_RX_BYTES": MetricPCIeRx,
		"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": MetricNVLinkTotal, "DCGM_FI_DEV_XID_ERRORS": MetricXidErrors,
	}
)

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = fmt.Sprint(v.DoubleValue)
		}
	}
	return m
}

func newRDecoded() *rdecoded {
	return &rdecoded{decoded: newDecoded(), rootReqIDs: map[string]string{}, rootAttrs: map[string]map[string]string{},
		rootRes: map[string]map[string]string{}, engineIDs: map[string]int{}, aborted: map[string]bool{}, series: map[string]*dseries{},
		kvByReq: map[string]int{}, kvTraceOf: map[string]string{}, kvSpanOf: map[string]string{}, kvWhere: map[string]string{}}
}

func (d *rdecoded) add(t *testing.T, cfg Config, m Message) {
	t.Helper()
	d.decoded.add(t, cfg, m, func(uint64) {})
	msg := decodeMessage(t, cfg, m)
	switch x := msg.(type) {
	case *tracepb.TracesData:
		for _, rs := range x.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					if len(sp.ParentSpanId) != 0 {
						continue
					}
					tid := hex.EncodeToString(sp.TraceId)
					a := attrMap(sp.Attributes)
					d.rootReqIDs[a["gen_ai.request.id"]] = tid
					a["name"] = sp.Name
					d.rootAttrs[tid] = a
					d.rootRes[tid] = attrMap(rs.Resource.Attributes)
				}
			}
		}
	case *logspb.LogsData:
		for _, rl := range x.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				if sl.Scope.GetName() == kvScope.Name {
					for _, lr := range sl.LogRecords {
						d.addKV(t, attrMap(rl.Resource.Attributes), lr)
					}
					continue
				}
				for _, lr := range sl.LogRecords {
					if len(lr.TraceId) != 0 {
						continue
					}
					a := attrMap(lr.Attributes)
					body := lr.Body.GetStringValue()
					id := a["request_id"]
					if id == "" {
						if sm := bodyID.FindStringSubmatch(body); sm != nil {
							id = sm[1]
						}
					} else if strings.Contains(body, id) {
						t.Fatalf("log names %s in body and attribute", id)
					}
					if id == "" {
						t.Fatalf("engine log without a request id: %q", body)
					}
					d.engineIDs[id]++
					if strings.HasPrefix(body, "Abort") {
						d.aborted[id] = true
					}
					if h, ok := a["llm_context_hint"]; ok {
						d.hints++
						if !goodHint.MatchString(h) {
							d.malformed++
						}
						if a["log_schema_version"] == "" {
							t.Fatal("hint without log_schema_version")
						}
					}
				}
			}
		}
	case *metricspb.MetricsData:
		for _, rm := range x.ResourceMetrics {
			res := attrMap(rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					var pts []*metricspb.NumberDataPoint
					counter := false
					switch data := mt.Data.(type) {
					case *metricspb.Metric_Gauge:
						pts = data.Gauge.DataPoints
					case *metricspb.Metric_Sum:
						pts, counter = data.Sum.DataPoints, true
						if !data.Sum.IsMonotonic || data.Sum.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
							t.Fatalf("%s: not a cumulative monotonic sum", mt.Name)
						}
					default:
						continue
					}
					for _, p := range pts {
						if len(p.Exemplars) != 0 {
							t.Fatalf("%s: scraped point with exemplars", mt.Name)
						}
						labels := attrMap(p.Attributes)
						var pairs []string
						for k, v := range labels {
							pairs = append(pairs, k+"="+v)
						}
						sort.Strings(pairs)
						key := mt.Name + "{" + strings.Join(pairs, ",") + "}@" + res["service.instance.id"]
						se := d.series[key]
						if se == nil {
							se = &dseries{name: mt.Name, instance: res["service.instance.id"], host: res["host.name"], uuid: labels["UUID"], labels: labels, counter: counter}
							d.series[key] = se
						}
						se.samples = append(se.samples, sample{p.TimeUnixNano, p.GetAsDouble()})
					}
				}
			}
		}
	}
}

// runRealistic runs batches then Flush and decodes everything.
func runRealistic(t *testing.T, cfg Config, batches int) (*Simulator, *rdecoded) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := newRDecoded()
	for b := 0; b < batches; b++ {
		msgs := s.Next()
		hi := uint64(s.EventTime().UnixNano())
		for _, m := range msgs {
			d.add(t, s.cfg, m)
		}
		if d.lastEvent > hi {
			t.Fatalf("batch %d: event time %d after the batch's %d", b, d.lastEvent, hi)
		}
		if b == batches/2 {
			checkTruth(t, s.Truth(), d.decoded, false)
		}
	}
	for _, m := range s.Flush() {
		d.add(t, s.cfg, m)
	}
	return s, d
}

func TestRealisticTruthMatchesDecoded(t *testing.T) {
	for _, v := range realisticVariants {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed = 21
			s, d := runRealistic(t, cfg, 60)
			tr := s.Truth()
			checkTruth(t, tr, d.decoded, true)
			if tr.PendingSpans != 0 || len(s.queue) != 0 {
				t.Fatalf("after Flush: %d pending spans, %d items queued", tr.PendingSpans, len(s.queue))
			}
			if tr.SpanMessages != d.messages[s.cfg.Topics.Spans] || tr.LogMessages != d.messages[s.cfg.Topics.Logs] || tr.MetricMessages != d.messages[s.cfg.Topics.Metrics] {
				t.Errorf("messages: truth %d/%d/%d, decoded %v", tr.SpanMessages, tr.LogMessages, tr.MetricMessages, d.messages)
			}
			if got, want := tr.LastEventTime, time.Unix(0, int64(d.lastEvent)).UTC(); !got.Equal(want) {
				t.Errorf("LastEventTime = %v, decoded %v", got, want)
			}
			arrived := len(tr.Traces) + len(tr.Orphans)
			if cfg.Rate == 0 {
				if want := 60 * s.cfg.RequestsPerBatch; arrived != want {
					t.Fatalf("%d requests, want %d", arrived, want)
				}
			} else if want := cfg.Rate * 60 * s.cfg.BatchInterval.Seconds(); math.Abs(float64(arrived)-want) > 1 {
				t.Fatalf("%d requests at rate %v over 60 batches, want %v", arrived, cfg.Rate, want)
			}
			if len(tr.Orphans) == 0 {
				t.Fatal("no orphans")
			}
			// Every request is named by its engine logs: arrival and finish
			// or abort.
			for _, tt := range tr.Traces {
				if d.engineIDs[tt.RequestID] != tt.RequestIDLogs || tt.RequestIDLogs != 2 {
					t.Fatalf("request %s: %d engine logs, truth %d", tt.RequestID, d.engineIDs[tt.RequestID], tt.RequestIDLogs)
				}
				if d.rootReqIDs[tt.RequestID] != tt.TraceID {
					t.Fatalf("request %s: root span in trace %q, truth %s", tt.RequestID, d.rootReqIDs[tt.RequestID], tt.TraceID)
				}
				if d.aborted[tt.RequestID] {
					t.Fatalf("finished request %s has an abort log", tt.RequestID)
				}
				res, a := d.rootRes[tt.TraceID], d.rootAttrs[tt.TraceID]
				if res["host.name"] != tt.Host || res["gpu.uuid"] != tt.GPUUUID || res["gpu.index"] != fmt.Sprint(tt.GPUIndex) ||
					res["service.instance.id"] != tt.Instance || a["gen_ai.request.model"] != tt.Model || a["gen_ai.operation.name"] != "chat" {
					t.Fatalf("trace %s: resource %v attributes %v, truth %+v", tt.TraceID, res, a, tt)
				}
				if tt.Service == "sglang" && (a["rid"] != tt.RequestID || a["name"] != "Generate Req "+tt.RequestID) {
					t.Fatalf("sglang root %v", a)
				}
			}
			// Orphans: engine logs only, never a span.
			for _, o := range tr.Orphans {
				if !o.Orphan || o.TraceID != "" || o.Spans+o.Logs+o.ExemplarPoints != 0 {
					t.Fatalf("orphan %+v", o)
				}
				if _, ok := d.rootReqIDs[o.RequestID]; ok {
					t.Fatalf("orphan %s has a span", o.RequestID)
				}
				if !d.aborted[o.RequestID] || d.engineIDs[o.RequestID] != 2 || o.RequestIDLogs != 2 {
					t.Fatalf("orphan %s: %d engine logs (truth %d), aborted %v", o.RequestID, d.engineIDs[o.RequestID], o.RequestIDLogs, d.aborted[o.RequestID])
				}
			}
			if d.hints != tr.ContextHints || d.malformed != tr.MalformedContextHints || d.hints == 0 {
				t.Fatalf("hints %d (truth %d), malformed %d (truth %d)", d.hints, tr.ContextHints, d.malformed, tr.MalformedContextHints)
			}
			checkResourceWindows(t, tr, d)
		})
	}
}

// checkResourceWindows recomputes every request's resource windows from the
// decoded samples.
func checkResourceWindows(t *testing.T, tr Truth, d *rdecoded) {
	t.Helper()
	for _, se := range d.series {
		if canonical[strings.TrimSuffix(se.name, "_total")] == "" {
			t.Fatalf("unexpected series %s", se.name)
		}
		for i := 1; i < len(se.samples); i++ {
			if se.samples[i].t <= se.samples[i-1].t {
				t.Fatalf("%s: samples out of order", se.name)
			}
			if se.counter && se.samples[i].v < se.samples[i-1].v {
				t.Fatalf("%s: counter went down", se.name)
			}
		}
	}
	all := append(slices.Collect(func(yield func(TraceTruth) bool) {
		for _, id := range tr.TraceIDs {
			if !yield(tr.Traces[id]) {
				return
			}
		}
	}), tr.Orphans...)
	for _, tt := range all {
		a, f := uint64(tt.Arrival.UnixNano()), uint64(tt.Finish.UnixNano())
		var want []ResourceWindow
		for key, se := range d.series {
			if se.instance != tt.Instance && (se.uuid != tt.GPUUUID || se.host != tt.Host) {
				continue
			}
			w := ResourceWindow{Metric: canonical[strings.TrimSuffix(se.name, "_total")], Name: se.name, Series: key, Counter: se.counter}
			for _, p := range se.samples {
				v := p.v
				switch {
				case p.t <= a:
					w.AtStart = &v
				case p.t <= f:
					w.Samples++
				}
				if p.t <= f {
					w.AtEnd = &v
				}
			}
			startT := lastAtOrBefore(se.samples, a)
			for _, p := range se.samples {
				v := p.v
				if p.t > a && p.t <= f || w.AtStart != nil && p.t == startT {
					if w.Min == nil || v < *w.Min {
						w.Min = &v
					}
					if w.Max == nil || v > *w.Max {
						w.Max = &v
					}
				}
			}
			if w.Counter && w.AtStart != nil && w.AtEnd != nil {
				dv := *w.AtEnd - *w.AtStart
				w.Delta = &dv
			}
			want = append(want, w)
		}
		sort.Slice(want, func(i, j int) bool {
			if want[i].Metric != want[j].Metric {
				return want[i].Metric < want[j].Metric
			}
			return want[i].Series < want[j].Series
		})
		if len(want) != len(tt.Resources) {
			t.Fatalf("request %s: %d windows, decoded %d", tt.RequestID, len(tt.Resources), len(want))
		}
		for i, w := range want {
			g := tt.Resources[i]
			if g.Metric != w.Metric || g.Name != w.Name || g.Series != w.Series || g.Counter != w.Counter || g.Samples != w.Samples ||
				!eqp(g.AtStart, w.AtStart) || !eqp(g.AtEnd, w.AtEnd) || !eqp(g.Min, w.Min) || !eqp(g.Max, w.Max) || !eqp(g.Delta, w.Delta) {
				t.Fatalf("request %s window %d:\n truth   %s\n decoded %s", tt.RequestID, i, fmtWindow(g), fmtWindow(w))
			}
			if g.Instance != d.series[w.Series].instance || g.Host != d.series[w.Series].host {
				t.Fatalf("request %s window %s: instance %s host %s", tt.RequestID, w.Series, g.Instance, g.Host)
			}
		}
	}
}

func lastAtOrBefore(samples []sample, t uint64) uint64 {
	var last uint64
	for _, p := range samples {
		if p.t <= t {
			last = p.t
		}
	}
	return last
}

func eqp(a, b *float64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func fmtWindow(w ResourceWindow) string {
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("%s %s n=%d start=%s end=%s min=%s max=%s delta=%s", w.Metric, w.Series, w.Samples, f(w.AtStart), f(w.AtEnd), f(w.Min), f(w.Max), f(w.Delta))
}

func TestRealisticDeterministic(t *testing.T) {
	kv := Config{Realistic: true, Rate: 5, Hosts: 1, KVEvents: true, KV: KVConfig{Faults: []KVFault{
		{Trigger: DoubleFree, At: DefaultStart.Add(time.Second), GPU: -1}, {Trigger: PaddingSlotMinus1, At: DefaultStart, GPU: 1}}}}
	ops := Config{Realistic: true, Rate: 5, Hosts: 1, KVEvents: true,
		Regressions: []Regression{{Instance: 1, From: time.Second, To: 4 * time.Second, Factor: 3}},
		Leaks:       []Leak{{GPU: 0, From: 2 * time.Second, To: 5 * time.Second, MiBPerMinute: 600}}}
	for _, v := range append(realisticVariants[:3], struct {
		name string
		cfg  Config
	}{"kv-events", kv}, struct {
		name string
		cfg  Config
	}{"regression-leak", ops}, struct {
		name string
		cfg  Config
	}{"verdicts", Config{Realistic: true, Rate: 20, Hosts: 1, Verdicts: &VerdictConfig{JailbreakRate: 0.2}}}) {
		t.Run(v.name, func(t *testing.T) {
			gen := func(seed int64) ([]byte, []byte) {
				cfg := v.cfg
				cfg.Seed = seed
				s, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				var msgs []Message
				for range 30 {
					msgs = append(msgs, s.Next()...)
				}
				for _, m := range append(msgs, s.Flush()...) {
					fmt.Fprintf(&out, "%s %q %x\n", m.Topic, m.Key, m.Value)
				}
				var truth bytes.Buffer
				if err := s.WriteTruth(&truth); err != nil {
					t.Fatal(err)
				}
				return out.Bytes(), truth.Bytes()
			}
			m1, t1 := gen(5)
			m2, t2 := gen(5)
			if !bytes.Equal(m1, m2) || !bytes.Equal(t1, t2) {
				t.Fatal("same seed gave different messages or truth")
			}
			m3, t3 := gen(6)
			if bytes.Equal(m1, m3) || bytes.Equal(t1, t3) {
				t.Fatal("different seeds gave the same output")
			}
		})
	}
}

// TestRealisticModel checks that the values move together: KV usage with
// running requests, preemptions and queueing under saturation, none at a
// trickle, framebuffer use with KV usage.
func TestRealisticModel(t *testing.T) {
	type figures struct {
		maxKV, maxWaiting, preemptions, maxRunning float64
		fbFollowsKV                                bool
	}
	measure := func(cfg Config, batches int) figures {
		_, d := runRealistic(t, cfg, batches)
		var f figures
		kvByGPU := map[string][]sample{}
		fbByGPU := map[string][]sample{}
		for _, se := range d.series {
			last := se.samples[len(se.samples)-1].v
			for _, p := range se.samples {
				switch canonical[strings.TrimSuffix(se.name, "_total")] {
				case MetricKVCacheUsage:
					f.maxKV = max(f.maxKV, p.v)
				case MetricRequestsWaiting:
					f.maxWaiting = max(f.maxWaiting, p.v)
				case MetricRequestsRunning:
					f.maxRunning = max(f.maxRunning, p.v)
				}
			}
			switch canonical[strings.TrimSuffix(se.name, "_total")] {
			case MetricPreemptions:
				f.preemptions += last
			case MetricKVCacheUsage:
				kvByGPU[se.instance] = se.samples
			case MetricGPUFBUsed:
				fbByGPU[se.host+"/"+se.labels["gpu"]] = se.samples
			}
		}
		// The GPU whose KV usage peaks highest also has the highest
		// framebuffer use on its host's GPU of the same index.
		f.fbFollowsKV = true
		for inst, kv := range kvByGPU {
			host, port, _ := strings.Cut(inst, ":")
			gpu := port[len(port)-1:]
			fb := fbByGPU[host+"/"+gpu]
			if len(fb) == 0 {
				t.Fatalf("no FB_USED for %s", inst)
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, p := range fb {
				lo, hi = min(lo, p.v), max(hi, p.v)
			}
			peak := slices.MaxFunc(kv, func(a, b sample) int { return int(math.Copysign(1, a.v-b.v)) })
			if peak.v > 0.5 && hi-lo < 0.4*(0.9*gpuTotalMiB-30_000) {
				f.fbFollowsKV = false
			}
		}
		return f
	}
	busy := measure(Config{Seed: 1, Realistic: true, Rate: 150, Hosts: 1}, 100)
	t.Logf("busy %+v", busy)
	if busy.maxKV < 0.95 || busy.maxWaiting == 0 || busy.preemptions == 0 || busy.maxRunning < 20 || !busy.fbFollowsKV {
		t.Fatalf("saturated fleet: %+v", busy)
	}
	quiet := measure(Config{Seed: 1, Realistic: true, Rate: 0.5, Hosts: 1}, 150)
	if quiet.maxKV > 0.5 || quiet.maxWaiting != 0 || quiet.preemptions != 0 || quiet.maxRunning > 5 {
		t.Fatalf("trickle: %+v", quiet)
	}
}

func TestRealisticFleet(t *testing.T) {
	s, err := New(Config{Seed: 3, Realistic: true, Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.instances) != 6 {
		t.Fatalf("%d servers on 3 hosts", len(s.instances))
	}
	flavours, models, hostLabels, noTotal := map[flavour]int{}, map[string]bool{}, map[string]bool{}, 0
	ids := map[string]bool{}
	for _, in := range s.instances {
		flavours[in.flavour]++
		models[in.model] = true
		if ids[in.id] {
			t.Fatalf("duplicate instance %s", in.id)
		}
		ids[in.id] = true
		if in.noTotal {
			noTotal++
		}
		for k := range labelMap(in.dFBUsed.labels) {
			if strings.EqualFold(k, "hostname") {
				hostLabels[k] = true
			}
		}
	}
	if flavours[flavourVLLM] == 0 || flavours[flavourVLLMLegacy] == 0 || flavours[flavourSGLang] == 0 || len(models) != 3 ||
		!hostLabels["hostname"] || !hostLabels["Hostname"] || noTotal == 0 || noTotal == 6 {
		t.Fatalf("fleet lacks a variant: %v %v %v total-less %d", flavours, models, hostLabels, noTotal)
	}
}

// TestRealisticKVEvents: the KV simulator's events are written per the
// convention, each attached to its request, and its faults leave their
// marks (an Xid in DCGM) and their truth.
func TestRealisticKVEvents(t *testing.T) {
	var faults []KVFault
	for i, trig := range KVTriggers {
		faults = append(faults, KVFault{Trigger: trig, At: DefaultStart.Add(time.Duration(2+i) * time.Second), GPU: -1})
	}
	for _, v := range []struct {
		name string
		cfg  Config
	}{
		{"proto-keyed", Config{}},
		{"json-unkeyed-disorder", Config{Encoding: EncodingJSON, Keying: Unkeyed, Disorder: time.Second}},
	} {
		t.Run(v.name, func(t *testing.T) {
			cfg := v.cfg
			cfg.Seed, cfg.Realistic, cfg.KVEvents, cfg.Rate, cfg.Hosts, cfg.AbortRatio = 8, true, true, 6, 1, 0.1
			cfg.KV = KVConfig{Faults: faults}
			s, d := runRealistic(t, cfg, 75)
			tr := s.Truth()
			checkTruth(t, tr, d.decoded, true)
			if tr.KVEvents != d.kvOps || tr.KVLines != len(d.kvLines) || d.kvOps == 0 {
				t.Fatalf("KV records: truth %d + %d lines, decoded %d + %d", tr.KVEvents, tr.KVLines, d.kvOps, len(d.kvLines))
			}
			reqs := append(slices.Collect(func(yield func(TraceTruth) bool) {
				for _, tt := range tr.Traces {
					if !yield(tt) {
						return
					}
				}
			}), tr.Orphans...)
			known := map[string]bool{}
			for _, tt := range reqs {
				known[tt.RequestID] = true
				if tt.KVEvents != d.kvByReq[tt.RequestID] {
					t.Fatalf("request %s: truth %d KV records, decoded %d", tt.RequestID, tt.KVEvents, d.kvByReq[tt.RequestID])
				}
				if tt.KVEvents == 0 {
					continue
				}
				if d.kvTraceOf[tt.RequestID] != tt.TraceID || !tt.Orphan && d.kvSpanOf[tt.RequestID] != tt.RootSpanID {
					t.Fatalf("request %s: KV records in trace %q span %q, truth %q %q", tt.RequestID, d.kvTraceOf[tt.RequestID], d.kvSpanOf[tt.RequestID], tt.TraceID, tt.RootSpanID)
				}
				if want := fmt.Sprintf("%s/%s/%d/%s", tt.Host, tt.GPUUUID, tt.GPUIndex, tt.Instance); d.kvWhere[tt.RequestID] != want {
					t.Fatalf("request %s: KV records on %s, want %s", tt.RequestID, d.kvWhere[tt.RequestID], want)
				}
			}
			kv := tr.KV
			if kv.Summary.Faults == 0 || len(kv.Polluted) == 0 {
				t.Fatalf("no fault realised: %+v", kv.Summary)
			}
			for _, p := range kv.Polluted {
				if !known[p.RequestID] && !strings.Contains(p.RequestID, "retry") {
					t.Logf("polluted request %s is not one of the simulator's", p.RequestID)
				}
			}
			// An Xid line shows in DCGM_FI_DEV_XID_ERRORS of its GPU from
			// its time on.
			xids := 0
			for _, lr := range d.kvLines {
				m := xidLine.FindStringSubmatch(lr.Body.GetStringValue())
				if m == nil {
					continue
				}
				xids++
				seen := false
				for _, se := range d.series {
					if se.name != "DCGM_FI_DEV_XID_ERRORS" {
						continue
					}
					for _, p := range se.samples {
						if p.t >= lr.TimeUnixNano && fmt.Sprint(p.v) == m[1] {
							seen = true
						}
					}
				}
				if !seen {
					t.Fatalf("Xid %s at %d never in DCGM_FI_DEV_XID_ERRORS", m[1], lr.TimeUnixNano)
				}
			}
			var buf bytes.Buffer
			if err := s.WriteTruth(&buf); err != nil {
				t.Fatal(err)
			}
			for _, typ := range []string{`"type":"fault"`, `"type":"polluted"`, `"type":"summary"`, `"kv_events":`} {
				if !bytes.Contains(buf.Bytes(), []byte(typ)) {
					t.Fatalf("truth file lacks %s", typ)
				}
			}
			t.Logf("%d KV records, %d lines (%d Xid), %d faults, %d polluted", d.kvOps, len(d.kvLines), xids, kv.Summary.Faults, len(kv.Polluted))
		})
	}
}

func TestRealisticConfig(t *testing.T) {
	for _, bad := range []Config{
		{Rate: 3},                   // needs realistic
		{KVEvents: true},            // needs realistic
		{Realistic: true, Rate: -1}, //
		{Realistic: true, Hosts: MaxHosts + 1},
		{Realistic: true, AbortRatio: 2},
		{Realistic: true, ScrapeInterval: time.Microsecond},
		{Realistic: true, KV: KVConfig{Faults: []KVFault{{Trigger: DoubleFree}}}}, // faults need KV events
		{Realistic: true, KVEvents: true, Hosts: 1, KV: KVConfig{Faults: []KVFault{{Trigger: DoubleFree, GPU: 2}}}},
		{Realistic: true, KVEvents: true, KV: KVConfig{Faults: []KVFault{{Trigger: "nope", GPU: -1}}}},
		{Realistic: true, KVHosts: 1},                           // KV hosts need KV events
		{Realistic: true, KVEvents: true, Hosts: 2, KVHosts: 3}, // more than the fleet
		{Realistic: true, KVEvents: true, KVHosts: -1},          //
		{Realistic: true, KVEvents: true, Hosts: 3, KVHosts: 1, // faults index the KV servers
			KV: KVConfig{Faults: []KVFault{{Trigger: DoubleFree, GPU: 2}}}},
		{Regressions: []Regression{{Instance: 0, To: time.Second, Factor: 2}}}, // needs realistic
		{Leaks: []Leak{{GPU: 0, To: time.Second, MiBPerMinute: 1}}},            // needs realistic
		{Realistic: true, Hosts: 1, Regressions: []Regression{{Instance: 2, To: time.Second, Factor: 2}}},
		{Realistic: true, Regressions: []Regression{{Instance: -1, To: time.Second, Factor: 2}}},
		{Realistic: true, Regressions: []Regression{{From: time.Second, To: time.Second, Factor: 2}}},
		{Realistic: true, Regressions: []Regression{{From: -time.Second, To: time.Second, Factor: 2}}},
		{Realistic: true, Regressions: []Regression{{To: time.Second, Factor: 1}}},
		{Realistic: true, Regressions: []Regression{{To: time.Second, Factor: math.NaN()}}},
		{Realistic: true, Hosts: 1, Leaks: []Leak{{GPU: 2, To: time.Second, MiBPerMinute: 1}}},
		{Realistic: true, Leaks: []Leak{{From: 2 * time.Second, To: time.Second, MiBPerMinute: 1}}},
		{Realistic: true, Leaks: []Leak{{To: time.Second}}},
		{Realistic: true, Leaks: []Leak{{To: time.Second, MiBPerMinute: math.Inf(1)}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v): no error", bad)
		}
	}
	c := Config{Realistic: true}
	c.EnsureDefaults()
	if c.Hosts != DefaultHosts || c.ScrapeInterval != DefaultScrapeInterval || c.AbortRatio != DefaultAbortRatio {
		t.Fatalf("defaults %+v", c)
	}
	c = Config{Realistic: true, AbortRatio: -1}
	c.EnsureDefaults()
	if c.AbortRatio != 0 {
		t.Fatalf("abort ratio -1 gave %v", c.AbortRatio)
	}
}

func BenchmarkNextRealistic(b *testing.B) {
	for _, kv := range []bool{false, true} {
		b.Run(fmt.Sprintf("kv=%v", kv), func(b *testing.B) {
			s, err := New(Config{Seed: 1, Realistic: true, Rate: 40, KVEvents: kv})
			if err != nil {
				b.Fatal(err)
			}
			for range 100 { // warm up: requests in flight
				s.Next()
			}
			b.ReportAllocs()
			var bytes int64
			for b.Loop() {
				for _, m := range s.Next() {
					bytes += int64(len(m.Value))
				}
			}
			b.SetBytes(bytes / int64(b.N))
			b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

// TestRealisticKVHosts checks that KVHosts limits the KV-block events to
// the first hosts' servers while every host still serves requests.
func TestRealisticKVHosts(t *testing.T) {
	cfg := Config{Realistic: true, Rate: 30, Hosts: 3, KVEvents: true, KVHosts: 1,
		KV: KVConfig{Faults: []KVFault{{Trigger: DoubleFree, At: DefaultStart.Add(time.Second), GPU: -1}}}}
	s, d := runRealistic(t, cfg, 40)
	if d.kvOps == 0 {
		t.Fatal("no KV records")
	}
	for id, where := range d.kvWhere {
		if host, _, _ := strings.Cut(where, "/"); host != "gpu-node-01" {
			t.Fatalf("request %s: KV records on %s, want only gpu-node-01", id, where)
		}
	}
	served := map[string]int{}
	for _, res := range d.rootRes {
		served[res["host.name"]]++
	}
	if len(served) != 3 {
		t.Fatalf("root spans on hosts %v, want all 3", served)
	}
	kv := s.Truth().KV
	if len(kv.Faults) != 1 {
		t.Fatalf("faults %+v, want one", kv.Faults)
	}
	onHost1 := false
	for _, where := range d.kvWhere {
		onHost1 = onHost1 || strings.Contains(where, "/"+kv.Faults[0].GPU+"/")
	}
	if !onHost1 {
		t.Fatalf("fault on %s, not a server of gpu-node-01", kv.Faults[0].GPU)
	}
	t.Logf("%d KV records for %d requests on gpu-node-01; root spans per host %v", d.kvOps, len(d.kvWhere), served)
}
