package main

import (
	"encoding/hex"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/kvaccuracy/kvref"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Load is a request mix: mean gap between arrivals per GPU, how much of it
// shares system prompts, and how often requests are preempted or swapped.
type Load struct {
	Name         string
	Gap          time.Duration
	PrefixShare  float64
	PrefixGroups int
	Pressure     float64
	BlocksPerGPU int
}

var (
	Light = Load{Name: "light", Gap: 2 * time.Second, PrefixShare: 0.5, PrefixGroups: 4, Pressure: 0.2, BlocksPerGPU: 256}
	// Heavy: arrivals 8× denser into a quarter of the pool, most requests
	// sharing one of 3 prompts, half of them interrupted; pool exhaustion
	// preempts on top.
	Heavy = Load{Name: "heavy", Gap: 250 * time.Millisecond, PrefixShare: 0.9, PrefixGroups: 3, Pressure: 0.5, BlocksPerGPU: 64}
)

// Scenario is one simulated run.
type Scenario struct {
	Name     string
	Trigger  simulator.KVTrigger // "" for a clean run
	Load     Load
	GPUs     int
	Duration time.Duration
	Faults   int // faults of Trigger, one per GPU in turn, a window apart
	Seed     int64
	// Restarts: rolling restarts, each GPU's server in turn every
	// RestartEvery from the first minute on, with a CUDA-graph capture
	// through the reserved null block (KVConfig.NullBlock).
	RestartEvery time.Duration
}

// Result is what one scenario measured.
type Result struct {
	Name           string   `json:"name"`
	Trigger        string   `json:"trigger,omitempty"`
	Pattern        string   `json:"pattern,omitempty"`
	Load           string   `json:"load"`
	GPUs           int      `json:"gpus"`
	EventTimeS     float64  `json:"event_time_s"`
	Requests       int      `json:"requests"`
	Events         int      `json:"events"`
	Preemptions    int      `json:"preemptions"`
	Swaps          int      `json:"swaps"`
	Evictions      int      `json:"evictions"`
	FaultsRealised int      `json:"faults_realised"`
	TruthPolluted  int      `json:"truth_polluted"`
	Detected       int      `json:"detected_polluted"`
	TP             int      `json:"tp"`
	FP             int      `json:"fp"`
	FN             int      `json:"fn"`
	Precision      float64  `json:"precision"`
	Recall         float64  `json:"recall"`
	RootCorrect    int      `json:"root_correct"`
	PatternCorrect int      `json:"pattern_correct"`
	LatenciesMs    []int64  `json:"detection_latency_ms"`
	Incidents      int      `json:"incidents"`
	Edges          int64    `json:"edges"`
	WithEvidence   int      `json:"incidents_with_evidence"`
	WallS          float64  `json:"wall_s"` // processing only
	FalseExamples  []string `json:"false_examples,omitempty"`
	// Against the independent reference model (kvref): requests whose
	// reads returned content they should not have seen.
	RefPolluted  int      `json:"ref_polluted"`
	RefTP        int      `json:"ref_tp"`
	RefFP        int      `json:"ref_fp"`
	RefFN        int      `json:"ref_fn"`
	RefPrecision float64  `json:"ref_precision"`
	RefRecall    float64  `json:"ref_recall"`
	RefExamples  []string `json:"ref_examples,omitempty"`
}

// Run simulates sc, runs the detector over the events in-process (one
// engine task, a checkpoint every 10 s of event time) and scores it.
func Run(sc Scenario, dir string) (Result, error) {
	cfg := simulator.KVConfig{Seed: sc.Seed, Layers: 8, BlocksPerGPU: sc.Load.BlocksPerGPU, PrefixShare: sc.Load.PrefixShare,
		PrefixGroups: sc.Load.PrefixGroups, Pressure: sc.Load.Pressure}
	var kcfg kvgraph.Config
	kcfg.EnsureDefaults()
	window := kcfg.IncidentWindow
	if sc.RestartEvery > 0 {
		cfg.NullBlock = true
		for at, i := start.Add(45*time.Second), 0; at.Before(start.Add(sc.Duration)); at, i = at.Add(sc.RestartEvery), i+1 {
			cfg.Restarts = append(cfg.Restarts, simulator.KVRestart{GPU: i % sc.GPUs, At: at})
		}
	}
	for i := 0; i < sc.Faults; i++ {
		cfg.Faults = append(cfg.Faults, simulator.KVFault{Trigger: sc.Trigger, GPU: i % sc.GPUs,
			At: start.Add(time.Minute + time.Duration(i/sc.GPUs)*2*window + time.Duration(i%sc.GPUs)*7*time.Second)})
	}
	var gpus []simulator.KVGPU
	for i := 0; i < sc.GPUs; i++ {
		gpus = append(gpus, simulator.KVGPU{Host: fmt.Sprintf("node-%d", i/2), UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i), Index: i % 2,
			Instance: fmt.Sprintf("vllm-%d", i), Service: "vllm"})
	}
	sim, err := simulator.NewKV(cfg, gpus)
	if err != nil {
		return Result{}, err
	}
	d, err := openDetector(dir)
	if err != nil {
		return Result{}, err
	}
	defer d.close()

	res := Result{Name: sc.Name, Load: sc.Load.Name, GPUs: sc.GPUs, EventTimeS: sc.Duration.Seconds()}
	if sc.Trigger != "" {
		res.Trigger, res.Pattern = string(sc.Trigger), string(sc.Trigger.Pattern())
	}
	reqs := load(sc.Seed, sc.GPUs, sc.Duration, sc.Load.Gap)
	where := make([]kvlog.Where, len(gpus))
	for i, g := range gpus {
		where[i] = kvlog.Where{Host: g.Host, GPUUUID: g.UUID, GPUIndex: int64(g.Index), Instance: g.Instance}
	}
	var wall time.Duration
	var offset int64
	ref := kvref.New()
	refInstance := make([]string, len(gpus))
	feed := func(evs []simulator.KVEvent) error {
		for _, ev := range evs {
			if ev.Instance != refInstance[ev.GPU] {
				ref.Restart(ev.GPU) // a new server process: a fresh pool
				refInstance[ev.GPU] = ev.Instance
			}
			ref.Apply(ev)
		}
		// One message per run of events of one GPU, at most 256 records:
		// the Collector's batches by resource.
		var recs []*kgo.Record
		for i := 0; i < len(evs); {
			j := i
			var ops []kvlog.Op
			for ; j < len(evs) && evs[j].GPU == evs[i].GPU && evs[j].Instance == evs[i].Instance && j-i < 256; j++ {
				ops = append(ops, toOp(evs[j]))
			}
			w := where[evs[i].GPU]
			if evs[i].Instance != "" {
				w.Instance = evs[i].Instance // the server after a restart
			}
			v, err := proto.Marshal(kvlog.LogsData(w, ops...))
			if err != nil {
				return err
			}
			recs = append(recs, &kgo.Record{Topic: "otlp_logs", Value: v, Offset: offset})
			offset++
			i = j
		}
		t0 := time.Now()
		for _, r := range recs {
			if err := d.Process(0, r); err != nil {
				return err
			}
		}
		if err := d.Checkpoint(); err != nil {
			return err
		}
		wall += time.Since(t0)
		res.Events += len(evs)
		return d.collect()
	}
	i := 0
	const step = 10 * time.Second
	for until := start.Add(step); i < len(reqs); until = until.Add(step) {
		for ; i < len(reqs) && reqs[i].Arrival.Before(until); i++ {
			if err := sim.Add(reqs[i]); err != nil {
				return res, err
			}
		}
		if err := feed(sim.Step(until)); err != nil {
			return res, err
		}
	}
	if err := feed(sim.Flush()); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := d.Finish(); err != nil {
		return res, err
	}
	wall += time.Since(t0)
	if err := d.collect(); err != nil {
		return res, err
	}
	res.WallS = wall.Seconds()
	res.Edges = d.cfg.Counters.Edges.Load()
	score(&res, sim.Truth(), d.incidents, window)
	scoreRef(&res, ref.Polluted(), d.incidents)
	return res, nil
}

// toOp is a simulator event as kvlog writes it.
func toOp(ev simulator.KVEvent) kvlog.Op {
	op := kvlog.Op{Time: ev.Time.UnixNano(), Op: ev.Op, Request: ev.RequestID, Block: int64(ev.Block), Layer: int64(ev.Layer),
		Layers: int64(ev.LayerCount), Body: ev.Body}
	if ev.Op == "" {
		return op
	}
	if ev.TraceID != "" {
		if b, err := hex.DecodeString(ev.TraceID); err == nil && len(b) == 16 {
			op.TraceID = [16]byte(b)
		}
	}
	if ev.Hash != "" {
		op.Hash, _ = strconv.ParseUint(ev.Hash, 16, 64)
	}
	if ev.RefCnt >= 0 {
		op.RefCnt, op.HasRef = int64(ev.RefCnt), true
	}
	if ev.Addr >= 0 && ev.Bytes >= 0 {
		op.Addr, op.Bytes, op.HasRange = ev.Addr, ev.Bytes, true
	}
	if ev.LayerSize > 0 {
		op.LayerBase, op.LayerSize = ev.LayerBase, ev.LayerSize
	}
	return op
}

// load is a steady stream of requests on every GPU (the simulator's own
// test load): arrivals gap/2..3gap/2 apart, 1–9 s long, prompts of 20–320
// tokens, up to 200 output tokens.
func load(seed int64, gpus int, d, gap time.Duration) []simulator.KVRequest {
	rng := rand.New(rand.NewSource(seed))
	var out []simulator.KVRequest
	for g := 0; g < gpus; g++ {
		for t := start.Add(time.Duration(rng.Int63n(int64(gap)))); t.Before(start.Add(d)); t = t.Add(gap/2 + time.Duration(rng.Int63n(int64(gap)))) {
			out = append(out, simulator.KVRequest{
				RequestID: fmt.Sprintf("cmpl-%d-%d", g, len(out)), TraceID: fmt.Sprintf("%032x", len(out)+1), SpanID: fmt.Sprintf("%016x", len(out)+1),
				GPU: g, Arrival: t, Finish: t.Add(time.Second + time.Duration(rng.Int63n(int64(8*time.Second)))),
				PromptTokens: 20 + rng.Intn(300), OutputTokens: rng.Intn(200), Prefix: simulator.KVAutoPrefix,
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival.Before(out[j].Arrival) })
	return out
}

// score compares the incidents' latest revisions with the truth.
func score(res *Result, truth simulator.KVTruth, all []*braidpb.Incident, window time.Duration) {
	s := truth.Summary
	res.Requests, res.Preemptions, res.Swaps, res.Evictions = s.Requests, s.Preemptions, s.Swaps, s.Evictions
	res.FaultsRealised = len(truth.Faults)
	latest := latestRevisions(all)
	var incs []*braidpb.Incident
	for _, inc := range latest {
		if inc.Root.GetDetail() != "" && len(inc.Root.Detail) > 0 && hasSuffix(inc.Root.Detail, "(merged into another incident)") {
			continue // its content lives on in the survivor
		}
		incs = append(incs, inc)
	}
	slices.SortFunc(incs, func(a, b *braidpb.Incident) int {
		if a.FirstUnixNano != b.FirstUnixNano {
			if a.FirstUnixNano < b.FirstUnixNano {
				return -1
			}
			return 1
		}
		if a.Id < b.Id {
			return -1
		}
		return 1
	})
	res.Incidents = len(incs)
	detected := map[string]bool{}
	how := map[string]string{}
	for _, inc := range incs {
		for _, p := range inc.Polluted {
			detected[p.RequestId] = true
			how[p.RequestId] = kvgraph.KindName(inc.Pattern) + " " + strings.ToLower(strings.TrimPrefix(p.Via.String(), "POLLUTION_VIA_")) + " from " + p.From
		}
		if len(inc.Evidence) > 0 {
			res.WithEvidence++
		}
	}
	want := truth.PollutedSet()
	res.TruthPolluted, res.Detected = len(want), len(detected)
	for id := range detected {
		if want[id] {
			res.TP++
		} else {
			res.FP++
			if len(res.FalseExamples) < 5 {
				res.FalseExamples = append(res.FalseExamples, "fp "+id+" ("+how[id]+")")
			}
		}
	}
	for id := range want {
		if !detected[id] {
			res.FN++
			if len(res.FalseExamples) < 10 {
				res.FalseExamples = append(res.FalseExamples, "fn "+id)
			}
		}
	}
	res.Precision, res.Recall = ratio(res.TP, res.TP+res.FP), ratio(res.TP, res.TP+res.FN)
	// Each realised fault to the incident that holds most of its victims,
	// else the first on its GPU that opened within a window after it.
	for _, f := range truth.Faults {
		victims := map[string]bool{}
		for _, v := range f.Victims {
			victims[v] = true
		}
		for _, v := range f.Propagated {
			victims[v] = true
		}
		var best *braidpb.Incident
		bestN := 0
		for _, inc := range incs {
			if inc.Gpu != f.GPU {
				continue
			}
			n := 0
			for _, p := range inc.Polluted {
				if victims[p.RequestId] {
					n++
				}
			}
			if n > bestN {
				best, bestN = inc, n
			}
		}
		if best == nil {
			ft := uint64(f.Time.UnixNano())
			for _, inc := range incs {
				if inc.Gpu == f.GPU && inc.FirstUnixNano+uint64(time.Second) >= ft && inc.FirstUnixNano <= ft+uint64(window) {
					best = inc
					break
				}
			}
		}
		if best == nil {
			continue
		}
		if best.Root.GetRequestId() == f.SourceRequest {
			res.RootCorrect++
		}
		if kvgraph.KindName(best.Pattern) == string(f.Pattern) {
			res.PatternCorrect++
		}
		res.LatenciesMs = append(res.LatenciesMs, (int64(best.FirstUnixNano)-f.Time.UnixNano())/int64(time.Millisecond))
	}
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// scoreRef compares the requests the incidents name polluted with the
// reference model's.
func scoreRef(res *Result, want map[string]kvref.Pollution, all []*braidpb.Incident) {
	detected := map[string]bool{}
	for _, inc := range all {
		for _, p := range inc.Polluted {
			detected[p.RequestId] = true
		}
	}
	res.RefPolluted = len(want)
	for id := range detected {
		if _, ok := want[id]; ok {
			res.RefTP++
		} else {
			res.RefFP++
			if len(res.RefExamples) < 5 {
				res.RefExamples = append(res.RefExamples, "fp "+id)
			}
		}
	}
	for id, p := range want {
		if !detected[id] {
			res.RefFN++
			if len(res.RefExamples) < 10 {
				res.RefExamples = append(res.RefExamples, fmt.Sprintf("fn %s (%s from %q, block %d layer %d)", id, p.Via, p.From, p.Block, p.Layer))
			}
		}
	}
	res.RefPrecision, res.RefRecall = ratio(res.RefTP, res.RefTP+res.RefFP), ratio(res.RefTP, res.RefTP+res.RefFN)
}
