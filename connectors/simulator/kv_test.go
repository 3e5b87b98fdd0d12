package simulator

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// kvChecker replays KV events and reports every breach of the clean
// invariant (KV.md), from the events alone.
type kvChecker struct {
	layers     int
	layerSize  int64
	blockBytes int64
	blocks     int
	gpus       map[int]*kvcGPU
	last       map[int]time.Time
	violations []kvViolation
	ops        map[string]int
	hits       int // allocs with a hash
	shared     int // allocs leaving ref_cnt > 1
	bodies     int
}

type kvViolation struct {
	Rule, Request string
	Time          time.Time
}

type kvcGPU struct {
	owners  []map[string]bool
	hash    []string
	covered map[string]map[[2]int]int64 // request → (block, layer) → bytes valid from the slot start
}

func newKVChecker(cfg KVConfig) *kvChecker {
	cfg.EnsureDefaults()
	return &kvChecker{layers: cfg.Layers, layerSize: int64(cfg.BlocksPerGPU) * cfg.BlockBytes, blockBytes: cfg.BlockBytes,
		blocks: cfg.BlocksPerGPU, gpus: map[int]*kvcGPU{}, last: map[int]time.Time{}, ops: map[string]int{}}
}

func (c *kvChecker) gpu(i int) *kvcGPU {
	g := c.gpus[i]
	if g == nil {
		g = &kvcGPU{owners: make([]map[string]bool, c.blocks), hash: make([]string, c.blocks), covered: map[string]map[[2]int]int64{}}
		for b := range g.owners {
			g.owners[b] = map[string]bool{}
		}
		c.gpus[i] = g
	}
	return g
}

func (c *kvChecker) bad(rule string, ev KVEvent) {
	c.violations = append(c.violations, kvViolation{rule, ev.RequestID, ev.Time})
}

func (c *kvChecker) cover(g *kvcGPU, req string, b int, n int64) {
	m := g.covered[req]
	if m == nil {
		m = map[[2]int]int64{}
		g.covered[req] = m
	}
	for l := 0; l < c.layers; l++ {
		m[[2]int{b, l}] = n
	}
}

func (c *kvChecker) event(ev KVEvent) {
	if t, ok := c.last[ev.GPU]; ok && ev.Time.Before(t) {
		c.bad("time_order", ev)
	}
	c.last[ev.GPU] = ev.Time
	if ev.Op == "" {
		c.bodies++
		return
	}
	c.ops[ev.Op]++
	g := c.gpu(ev.GPU)
	b, r := ev.Block, ev.RequestID
	switch ev.Op {
	case OpAlloc, OpSwapIn:
		if ev.Hash != "" {
			c.hits++
			if g.hash[b] != ev.Hash {
				c.bad("stale_hit", ev)
			}
			c.cover(g, r, b, c.blockBytes)
		} else {
			if len(g.owners[b]) > 0 {
				c.bad("two_owners", ev)
			}
			c.cover(g, r, b, 0)
			if ev.Op == OpSwapIn {
				c.cover(g, r, b, c.blockBytes)
			}
		}
		g.owners[b][r] = true
		if ev.RefCnt > 1 {
			c.shared++
		}
	case OpFree, OpSwapOut:
		if !g.owners[b][r] {
			c.bad("bad_free", ev)
		}
		delete(g.owners[b], r)
		delete(g.covered[r], [2]int{b, 0})
		for l := 0; l < c.layers; l++ {
			delete(g.covered[r], [2]int{b, l})
		}
	case OpEvict:
		if len(g.owners[b]) > 0 {
			c.bad("evict_live", ev)
		}
		g.hash[b] = ""
	case OpZero:
		for o := range g.owners[b] {
			c.cover(g, o, b, c.blockBytes)
		}
	case OpWrite:
		base := int64(ev.Layer) * c.layerSize
		if ev.LayerBase != base || ev.LayerSize != c.layerSize || ev.Addr < base || ev.Addr+ev.Bytes > base+c.layerSize {
			c.bad("oob_layer", ev)
		}
		foreign, mixed := false, false
		for off := ev.Addr; off < ev.Addr+ev.Bytes; off = (off/c.blockBytes + 1) * c.blockBytes {
			if off >= int64(c.layers)*c.layerSize {
				break
			}
			tb := int(off % c.layerSize / c.blockBytes)
			if tb != b || !g.owners[tb][r] {
				foreign = true
			}
			for o := range g.owners[tb] {
				if o != r {
					mixed = true
				}
			}
		}
		if foreign {
			c.bad("foreign_slot", ev)
		}
		if mixed {
			c.bad("mixed_write", ev)
		}
		if ev.Hash != "" {
			g.hash[b] = ev.Hash
		}
		if !foreign && ev.Addr >= base && ev.Addr+ev.Bytes <= base+c.layerSize {
			start := ev.Addr - base - int64(b)*c.blockBytes
			key := [2]int{b, ev.Layer}
			if m := g.covered[r]; m != nil && start <= m[key] {
				m[key] = max(m[key], start+ev.Bytes)
			}
		}
	case OpRead:
		start := ev.Addr - int64(ev.Layer)*c.layerSize - int64(b)*c.blockBytes
		if !g.owners[b][r] || start != 0 || ev.Bytes > c.blockBytes {
			c.bad("foreign_read", ev)
		} else if g.covered[r][[2]int{b, ev.Layer}] < ev.Bytes {
			c.bad("unwritten_read", ev)
		}
	default:
		c.bad("unknown_op", ev)
	}
}

func (c *kvChecker) rules() []string {
	var out []string
	for _, v := range c.violations {
		if !slices.Contains(out, v.Rule) {
			out = append(out, v.Rule)
		}
	}
	sort.Strings(out)
	return out
}

var kvStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func kvGPUs(n int) []KVGPU {
	var g []KVGPU
	for i := 0; i < n; i++ {
		g = append(g, KVGPU{Host: fmt.Sprintf("node-%d", i), UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i), Index: 0, Instance: fmt.Sprintf("vllm-%d", i), Service: "vllm"})
	}
	return g
}

// kvLoad generates requests on each GPU for d of event time.
func kvLoad(seed int64, gpus int, d time.Duration, gap time.Duration) []KVRequest {
	rng := rand.New(rand.NewSource(seed))
	var out []KVRequest
	for g := 0; g < gpus; g++ {
		for t := kvStart.Add(time.Duration(rng.Int63n(int64(gap)))); t.Before(kvStart.Add(d)); t = t.Add(gap/2 + time.Duration(rng.Int63n(int64(gap)))) {
			out = append(out, KVRequest{
				RequestID: fmt.Sprintf("cmpl-%d-%d", g, len(out)), TraceID: fmt.Sprintf("%032x", len(out)+1), SpanID: fmt.Sprintf("%016x", len(out)+1),
				GPU: g, Arrival: t, Finish: t.Add(time.Second + time.Duration(rng.Int63n(int64(8*time.Second)))),
				PromptTokens: 20 + rng.Intn(300), OutputTokens: rng.Intn(200), Prefix: KVAutoPrefix,
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival.Before(out[j].Arrival) })
	return out
}

// kvRun runs the requests, stepping a minute at a time, and feeds the
// events to fn.
func kvRun(t testing.TB, cfg KVConfig, gpus int, reqs []KVRequest, fn func(KVEvent)) KVTruth {
	t.Helper()
	k, err := NewKV(cfg, kvGPUs(gpus))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for step := kvStart.Add(time.Minute); i < len(reqs); step = step.Add(time.Minute) {
		for ; i < len(reqs) && reqs[i].Arrival.Before(step); i++ {
			if err := k.Add(reqs[i]); err != nil {
				t.Fatal(err)
			}
		}
		for _, ev := range k.Step(step) {
			fn(ev)
		}
	}
	for _, ev := range k.Flush() {
		fn(ev)
	}
	return k.Truth()
}

func TestKVCleanInvariant(t *testing.T) {
	cfg := KVConfig{Seed: 7, Layers: 4, BlocksPerGPU: 64, PrefixShare: 0.9, PrefixGroups: 3, Pressure: 0.5}
	c := newKVChecker(cfg)
	reqs := kvLoad(1, 2, time.Hour, 2*time.Second)
	truth := kvRun(t, cfg, 2, reqs, c.event)
	if len(c.violations) > 0 {
		t.Fatalf("clean run: %d violations, rules %v, first %+v", len(c.violations), c.rules(), c.violations[0])
	}
	s := truth.Summary
	t.Logf("requests %d, events %d (%.0f per request), ops %v, hits %d, shared %d, summary %+v", s.Requests, s.Events, float64(s.Events)/float64(s.Requests), c.ops, c.hits, c.shared, s)
	if s.Polluted != 0 || len(truth.Faults) != 0 || c.bodies != 0 {
		t.Fatalf("clean run has truth %+v", s)
	}
	if s.Preemptions == 0 || s.Swaps == 0 || s.Evictions == 0 || c.hits == 0 || c.shared == 0 {
		t.Fatalf("clean run lacks preemption, swaps, evictions or sharing: %+v, hits %d, shared %d", s, c.hits, c.shared)
	}
	if s.Requests != len(reqs) || s.Events != sum(c.ops)+c.bodies {
		t.Fatalf("summary %+v for %d requests, %d events", s, len(reqs), sum(c.ops))
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// kvFaultCfg is a busy small fleet with one fault at 2 minutes.
func kvFaultCfg(trig KVTrigger, seed int64) KVConfig {
	return KVConfig{Seed: seed, Layers: 4, BlocksPerGPU: 64, PrefixShare: 0.6, PrefixGroups: 2, Pressure: 0.2,
		Faults: []KVFault{{Trigger: trig, At: kvStart.Add(2 * time.Minute), GPU: 0}}}
}

func TestKVFaults(t *testing.T) {
	cases := []struct {
		trig     KVTrigger
		intended []string
		allowed  []string
	}{
		{RecycledNotZeroed, []string{"unwritten_read"}, nil},
		{CancelRetry, []string{"unwritten_read"}, nil},
		{OffloadAfterPreempt, []string{"mixed_write", "foreign_slot"}, nil},
		// The cache may index a doubly owned block under its other owner's hash.
		{DoubleFree, []string{"bad_free", "two_owners", "mixed_write"}, []string{"stale_hit"}},
		{RadixStale, []string{"stale_hit", "mixed_write"}, nil},
		{PaddingSlotMinus1, []string{"oob_layer", "foreign_slot"}, []string{"mixed_write"}},
		{WrongStride, []string{"oob_layer", "foreign_slot"}, []string{"mixed_write"}},
		{KVBaseSwap, []string{"oob_layer", "unwritten_read"}, []string{"mixed_write", "foreign_slot"}},
	}
	// A victim is a request that reads the foreign bytes (KV.md); a fault
	// whose bytes nobody reads before they are rewritten or freed has
	// none, so victims (direct, or through a block the bytes went on in)
	// are required of each trigger under some seed, not under every one.
	withVictims := map[KVTrigger]int{}
	for seed := int64(1); seed <= 3; seed++ {
		reqs := kvLoad(seed, 2, 4*time.Minute, time.Second)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.trig, seed), func(t *testing.T) {
				cfg := kvFaultCfg(tc.trig, seed)
				c := newKVChecker(cfg)
				var bodies []string
				truth := kvRun(t, cfg, 2, reqs, func(ev KVEvent) {
					c.event(ev)
					if ev.Op == "" {
						bodies = append(bodies, ev.Body)
					}
				})
				if len(truth.Faults) != 1 {
					t.Fatalf("faults %+v, summary %+v", truth.Faults, truth.Summary)
				}
				f := truth.Faults[0]
				if f.Trigger != tc.trig || f.Pattern != tc.trig.Pattern() || f.GPU != kvGPUs(1)[0].UUID || f.SourceRequest == "" {
					t.Fatalf("fault %+v", f)
				}
				if len(f.Victims)+len(f.Propagated) > 0 {
					withVictims[tc.trig]++
				}
				rules := c.rules()
				for _, r := range tc.intended {
					if !slices.Contains(rules, r) {
						t.Errorf("rule %s not violated; violated %v", r, rules)
					}
				}
				involved := map[string]bool{f.SourceRequest: true}
				for _, v := range append(f.Victims, f.Propagated...) {
					involved[v] = true
				}
				hit := false
				for _, v := range c.violations {
					if !slices.Contains(tc.intended, v.Rule) && !slices.Contains(tc.allowed, v.Rule) {
						t.Errorf("unexpected violation %+v", v)
					}
					if v.Time.Before(f.Time) {
						t.Errorf("violation %+v before the fault at %s", v, f.Time)
					}
					hit = hit || involved[v.Request]
				}
				if !hit {
					t.Errorf("no violation by the source or a victim of %+v", f)
				}
				polluted := truth.PollutedSet()
				for _, v := range f.Victims {
					if !polluted[v] {
						t.Errorf("victim %s not in the polluted set", v)
					}
				}
				for _, p := range truth.Polluted {
					if p.Fault != 0 || p.Trigger != tc.trig || p.RootRequest != f.SourceRequest {
						t.Errorf("polluted %+v", p)
					}
				}
				if f.Sanitizer != slices.ContainsFunc(bodies, func(s string) bool { return strings.HasPrefix(s, "========= Invalid __global__ write") }) {
					t.Errorf("sanitizer %v, bodies %q", f.Sanitizer, bodies)
				}
				if f.Xid != slices.ContainsFunc(bodies, func(s string) bool { return strings.Contains(s, "NVRM: Xid") }) {
					t.Errorf("xid %v, bodies %q", f.Xid, bodies)
				}
				t.Logf("fault %+v; rules %v; polluted %d (%d propagated)", f, rules, truth.Summary.Polluted, truth.Summary.Propagated)
			})
		}
	}
	for _, tc := range cases {
		if withVictims[tc.trig] == 0 {
			t.Errorf("%s: no victim under any seed", tc.trig)
		}
	}
}

// TestKVPropagation: a K/V base mix-up in the first request of a prefix
// group leaves its prefix blocks polluted in the prefix cache; later
// requests of the group hit them and are polluted in turn.
func TestKVPropagation(t *testing.T) {
	cfg := KVConfig{Seed: 1, Layers: 4, Pressure: -1, PrefixGroups: 1,
		Faults: []KVFault{{Trigger: KVBaseSwap, At: kvStart, GPU: -1}}}
	var reqs []KVRequest
	for i := 0; i < 4; i++ {
		at := kvStart.Add(time.Duration(i) * 5 * time.Second)
		reqs = append(reqs, KVRequest{RequestID: fmt.Sprintf("r%d", i), TraceID: fmt.Sprintf("%032x", i+1), GPU: 0,
			Arrival: at, Finish: at.Add(2 * time.Second), PromptTokens: 200, OutputTokens: 40, Prefix: 0})
	}
	reqs = append(reqs, KVRequest{RequestID: "alone", GPU: 0, Arrival: kvStart.Add(30 * time.Second), Finish: kvStart.Add(32 * time.Second), PromptTokens: 200, OutputTokens: 40, Prefix: -1})
	c := newKVChecker(cfg)
	truth := kvRun(t, cfg, 1, reqs, c.event)
	if len(truth.Faults) != 1 || truth.Faults[0].SourceRequest != "r0" || truth.Roots()[0] != "r0" {
		t.Fatalf("faults %+v", truth.Faults)
	}
	got := map[string]string{}
	for _, p := range truth.Polluted {
		got[p.RequestID] = p.Via
		if p.RootRequest != "r0" {
			t.Errorf("polluted %+v: root not r0", p)
		}
		if p.Via == "propagated" && p.From != "r0" {
			t.Errorf("polluted %+v: not from r0", p)
		}
	}
	want := map[string]string{"r0": "direct", "r1": "propagated", "r2": "propagated", "r3": "propagated"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("polluted %v, want %v", got, want)
	}
	if f := truth.Faults[0]; !reflect.DeepEqual(f.Propagated, []string{"r1", "r2", "r3"}) {
		t.Fatalf("fault %+v", f)
	}
	for _, v := range c.violations {
		if v.Request != "r0" {
			t.Errorf("violation %+v by a reader of legitimately shared blocks", v)
		}
	}
}

func TestKVDeterministic(t *testing.T) {
	run := func(seed int64) ([]KVEvent, []byte) {
		cfg := KVConfig{Seed: seed, Layers: 4, BlocksPerGPU: 64, Pressure: 0.3}
		for i, trig := range KVTriggers {
			cfg.Faults = append(cfg.Faults, KVFault{Trigger: trig, At: kvStart.Add(time.Duration(20+10*i) * time.Second), GPU: -1})
		}
		var evs []KVEvent
		truth := kvRun(t, cfg, 2, kvLoad(5, 2, 4*time.Minute, time.Second), func(ev KVEvent) { evs = append(evs, ev) })
		var buf bytes.Buffer
		if err := truth.WriteJSONL(&buf); err != nil {
			t.Fatal(err)
		}
		return evs, buf.Bytes()
	}
	e1, t1 := run(11)
	e2, t2 := run(11)
	if !reflect.DeepEqual(e1, e2) || !bytes.Equal(t1, t2) {
		t.Fatal("same seed, different output")
	}
	e3, _ := run(12)
	if reflect.DeepEqual(e1, e3) {
		t.Fatal("different seeds, same events")
	}
	lines := strings.Split(strings.TrimSpace(string(t1)), "\n")
	if !strings.HasPrefix(lines[0], `{"type":"fault","fault":`) || !strings.HasPrefix(lines[len(lines)-1], `{"type":"summary",`) {
		t.Fatalf("truth:\n%s", t1)
	}
	t.Logf("%d events; truth:\n%s", len(e1), t1)
}

func TestKVConfigValidate(t *testing.T) {
	_, err := NewKV(KVConfig{Layers: 1, BlockBytes: 100, BlockTokens: 16, PrefixShare: 2, Faults: []KVFault{{Trigger: "nope", GPU: 5}}}, kvGPUs(1))
	for _, want := range []string{"Layers 1", "BlockBytes 100", "PrefixShare 2", "Faults[0].Trigger", "Faults[0].GPU 5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	k, err := NewKV(KVConfig{}, kvGPUs(1))
	if err != nil {
		t.Fatal(err)
	}
	k.Step(kvStart.Add(time.Minute))
	if err := k.Add(KVRequest{RequestID: "x", Arrival: kvStart, Finish: kvStart.Add(time.Second), PromptTokens: 1, Prefix: -1}); err == nil || !strings.Contains(err.Error(), ErrKVLate.Error()) {
		t.Fatalf("late add: %v", err)
	}
}

// TestKVFigures: with the default pool, range ops (writes and reads) per
// request scale with Layers; block ops do not.
func TestKVFigures(t *testing.T) {
	reqs := kvLoad(9, 4, 10*time.Minute, 2*time.Second)
	perReq := map[int][2]float64{}
	for _, layers := range []int{8, 16} {
		c := newKVChecker(KVConfig{Layers: layers})
		truth := kvRun(t, KVConfig{Seed: 1, Layers: layers}, 4, reqs, c.event)
		n := float64(truth.Summary.Requests)
		rng := float64(c.ops[OpWrite]+c.ops[OpRead]) / n
		blk := float64(c.ops[OpAlloc]+c.ops[OpFree]+c.ops[OpEvict]+c.ops[OpSwapIn]+c.ops[OpSwapOut]) / n
		perReq[layers] = [2]float64{rng, blk}
		t.Logf("Layers %d: %d requests, %.0f events per request (%.0f writes+reads, %.0f block ops), %.0f events/s per GPU; %+v",
			layers, truth.Summary.Requests, float64(truth.Summary.Events)/n, rng, blk, float64(truth.Summary.Events)/600/4, truth.Summary)
		if len(c.violations) > 0 {
			t.Fatalf("violations %v", c.rules())
		}
	}
	if r := perReq[16][0] / perReq[8][0]; r < 1.6 || r > 2.1 { // decode reads every block in one layer only
		t.Errorf("range ops per request: %v; ratio %.2f, want 1.6 to 2.1", perReq, r)
	}
	if r := perReq[16][1] / perReq[8][1]; r < 0.8 || r > 1.25 {
		t.Errorf("block ops per request: %v; ratio %.2f, want about 1", perReq, r)
	}
}

// TestKVStepIndependent: the events do not depend on how Add and Step calls
// interleave (stepping by the minute, by 200ms, or adding everything first).
func TestKVStepIndependent(t *testing.T) {
	cfg := KVConfig{Seed: 4, Layers: 4, BlocksPerGPU: 64, Pressure: 0.3}
	for i, trig := range KVTriggers {
		cfg.Faults = append(cfg.Faults, KVFault{Trigger: trig, At: kvStart.Add(time.Duration(20+10*i) * time.Second), GPU: -1})
	}
	reqs := kvLoad(6, 2, 3*time.Minute, time.Second)
	run := func(step time.Duration) ([]KVEvent, KVTruth) {
		k, err := NewKV(cfg, kvGPUs(2))
		if err != nil {
			t.Fatal(err)
		}
		var evs []KVEvent
		i := 0
		for until := kvStart.Add(step); step > 0 && i < len(reqs); until = until.Add(step) {
			for ; i < len(reqs) && reqs[i].Arrival.Before(until); i++ {
				if err := k.Add(reqs[i]); err != nil {
					t.Fatal(err)
				}
			}
			evs = append(evs, k.Step(until)...)
		}
		for ; i < len(reqs); i++ {
			if err := k.Add(reqs[i]); err != nil {
				t.Fatal(err)
			}
		}
		return append(evs, k.Flush()...), k.Truth()
	}
	e0, t0 := run(0)
	for _, step := range []time.Duration{time.Minute, 200 * time.Millisecond} {
		e, tr := run(step)
		if !reflect.DeepEqual(e, e0) || !reflect.DeepEqual(tr, t0) {
			t.Fatalf("step %v: %d events, truth %+v; all at once: %d events, truth %+v", step, len(e), tr.Summary, len(e0), t0.Summary)
		}
	}
	if t0.Summary.Faults != len(KVTriggers) {
		t.Fatalf("summary %+v", t0.Summary)
	}
}

// TestKVOpsWithinTheirRequest: every op of a request falls between its
// Arrival and its Finish, as a server's ops fall within its request's span
// — also on a pool too small for the load, where prefills wait for room,
// decodes are preempted and swapped out, and faults fire. (The events of
// one GPU are serialised a microsecond apart: slack for that.)
func TestKVOpsWithinTheirRequest(t *testing.T) {
	for _, trig := range []KVTrigger{"", RecycledNotZeroed, OffloadAfterPreempt} {
		t.Run(string(trig), func(t *testing.T) {
			cfg := KVConfig{Seed: 3, Layers: 4, BlocksPerGPU: 48, PrefixShare: 0.5, PrefixGroups: 2, Pressure: 0.4}
			if trig != "" {
				cfg = kvFaultCfg(trig, 3)
				cfg.BlocksPerGPU, cfg.Pressure = 48, 0.4
			}
			reqs := kvLoad(5, 2, 10*time.Minute, 600*time.Millisecond)
			byID := map[string]KVRequest{}
			for _, r := range reqs {
				byID[r.RequestID] = r
			}
			const slack = 10 * time.Millisecond
			var ops, outside int
			var worst time.Duration
			truth := kvRun(t, cfg, 2, reqs, func(ev KVEvent) {
				r, ok := byID[ev.RequestID]
				if !ok {
					return
				}
				ops++
				if d := ev.Time.Sub(r.Finish); ev.Time.Before(r.Arrival) || d > slack {
					outside++
					worst = max(worst, d)
				}
			})
			t.Logf("%d requests, %d ops, aborted %d, preemptions %d, swaps %d, faults %d", len(reqs), ops, truth.Summary.Aborted, truth.Summary.Preemptions, truth.Summary.Swaps, len(truth.Faults))
			if outside > 0 {
				t.Fatalf("%d of %d ops outside their request, up to %v after its Finish", outside, ops, worst)
			}
			if truth.Summary.Preemptions == 0 || truth.Summary.Swaps == 0 {
				t.Fatalf("the pool was not under pressure: %+v", truth.Summary)
			}
		})
	}
}
