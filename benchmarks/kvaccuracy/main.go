// Command kvaccuracy measures braid's KV-cache pollution detection
// (operators/kvgraph) against the ground truth of the simulator's KV-block
// generator (connectors/simulator, KV.md).
//
// Every fault trigger runs under a light and a heavy load (heavy: dense
// arrivals into a small pool, most requests sharing system prompts, half of
// them preempted or swapped, plus preemption on pool exhaustion — legitimate
// sharing and preemption as distractors), with one fault per GPU. The
// detector runs in-process (engine.Harness, one task, a checkpoint every
// 10 s of event time). Scores: precision and recall of the polluted
// requests, top-1 root cause (the incident holding a fault's victims names
// the fault's source request as its root), the pattern, and detection
// latency in event time (incident's first edge − the fault's first faulty
// event). Then a clean run (no fault) of an hour of event time that must
// give no incident, and throughput: event time simulated / wall time spent
// processing (× real time).
//
//	go run ./benchmarks/kvaccuracy                 # full suite, writes benchmarks/results/kvaccuracy.json
//	go run ./benchmarks/kvaccuracy -short          # minutes of event time per scenario
//	go run ./benchmarks/kvaccuracy -trigger none -fleet 10   # the realistic fleet (RunFleet), 10 seeds
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// Report is the JSON written to -out.
type Report struct {
	Scenarios  []Result           `json:"scenarios"`
	ByTrigger  map[string]Summary `json:"by_trigger"`
	ByPattern  map[string]Summary `json:"by_pattern"`
	Overall    Summary            `json:"overall"`
	Clean      Result             `json:"clean"`
	Throughput Throughput         `json:"throughput"`
	Targets    map[string]bool    `json:"targets_met"`
	// Fleet: the realistic fleet's runs (-fleet), and their sum.
	Fleet        []FleetResult `json:"fleet,omitempty"`
	FleetOverall *FleetSummary `json:"fleet_overall,omitempty"`
}

// FleetSummary sums the fleet's runs: Summary, and the victims grouped by
// fault (FleetResult).
type FleetSummary struct {
	Summary
	GroupPrecision float64 `json:"group_precision"`
	GroupRecall    float64 `json:"group_recall"`
	Unmatched      int     `json:"unmatched_incidents"`
}

// Summary aggregates scenarios.
type Summary struct {
	Faults         int     `json:"faults_realised"`
	TP, FP, FN     int     `json:"-"`
	Precision      float64 `json:"precision"`
	Recall         float64 `json:"recall"`
	RootCorrect    int     `json:"root_correct"`
	RootAccuracy   float64 `json:"root_accuracy"`
	PatternCorrect int     `json:"pattern_correct"`
	LatencyP50Ms   int64   `json:"latency_p50_ms"`
	LatencyMaxMs   int64   `json:"latency_max_ms"`
	Polluted       int     `json:"truth_polluted"`
	Detected       int     `json:"detected_polluted"`
	// Victims against the reference model (kvref).
	RefTP, RefFP, RefFN int     `json:"-"`
	RefPrecision        float64 `json:"ref_precision"`
	RefRecall           float64 `json:"ref_recall"`
	latencies           []int64
}

// Throughput is the detector's speed on the clean run.
type Throughput struct {
	Events          int     `json:"events"`
	GPUs            int     `json:"gpus"`
	EventTimeS      float64 `json:"event_time_s"`
	WallS           float64 `json:"wall_s"`
	EventsPerS      float64 `json:"events_per_s"`
	FleetEventsPerS float64 `json:"fleet_events_per_s"`
	XRealTime       float64 `json:"x_real_time"`
}

// Suite is the scenario list.
func Suite(short bool) ([]Scenario, Scenario) {
	light, heavy := 8*time.Minute, 6*time.Minute
	clean := time.Hour
	if short {
		light, heavy, clean = 4*time.Minute, 3*time.Minute, 5*time.Minute
	}
	var out []Scenario
	for i, trig := range simulator.KVTriggers {
		for _, l := range []struct {
			load Load
			d    time.Duration
		}{{Light, light}, {Heavy, heavy}} {
			out = append(out, Scenario{Name: string(trig) + "/" + l.load.Name, Trigger: trig, Load: l.load, GPUs: 4, Duration: l.d, Faults: 4, Seed: int64(100 + i)})
		}
	}
	// Junk left in the null block by a restart's graph capture: rolling
	// restarts every 30 s, one GPU at a time.
	for _, l := range []struct {
		load Load
		d    time.Duration
	}{{Light, light}, {Heavy, heavy}} {
		out = append(out, Scenario{Name: string(simulator.NullBlockJunk) + "/" + l.load.Name, Trigger: simulator.NullBlockJunk, Load: l.load, GPUs: 4,
			Duration: l.d, Faults: 4, Seed: 120, RestartEvery: 30 * time.Second})
	}
	cleanLoad := Heavy
	cleanLoad.Name = "clean-heavy"
	cleanLoad.Gap = time.Second
	// The clean run restarts a server every 5 minutes (graph capture
	// through the null block, zeroed): the new pool's owners are no
	// mixed writes, the capture's bytes no residue.
	return out, Scenario{Name: "clean", Load: cleanLoad, GPUs: 2, Duration: clean, Seed: 7, RestartEvery: 5 * time.Minute}
}

// Options choose what Build runs.
type Options struct {
	Short     bool          // minutes of event time per scenario, a 5-minute clean run
	Trigger   string        // only these triggers' scenarios, comma separated; "none": the clean run alone
	Seeds     int           // every scenario under this many seeds
	SeedBase  int64         // added to every scenario's seed (0: the suite's own); the clean run's too
	GPUs      int           // GPUs per scenario; 0: the suite's
	Clean     time.Duration // event time of the clean run; 0: the suite's
	CleanGPUs int           // GPUs of the clean run; 0: the suite's
	Fleet     int           // runs of the realistic fleet (FleetScenario), seeds 1… (+SeedBase)
	FleetRate float64       // its requests per second (0: the demo's, 10)
	FleetHost int           // its hosts, two GPUs each (0: the demo's, 4)
}

// Aggregate sums results into a Summary.
func Aggregate(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		s.Faults += r.FaultsRealised
		s.TP += r.TP
		s.FP += r.FP
		s.FN += r.FN
		s.RootCorrect += r.RootCorrect
		s.PatternCorrect += r.PatternCorrect
		s.Polluted += r.TruthPolluted
		s.Detected += r.Detected
		s.RefTP += r.RefTP
		s.RefFP += r.RefFP
		s.RefFN += r.RefFN
		s.latencies = append(s.latencies, r.LatenciesMs...)
	}
	s.Precision, s.Recall = ratio(s.TP, s.TP+s.FP), ratio(s.TP, s.TP+s.FN)
	s.RefPrecision, s.RefRecall = ratio(s.RefTP, s.RefTP+s.RefFP), ratio(s.RefTP, s.RefTP+s.RefFN)
	s.RootAccuracy = ratio(s.RootCorrect, s.Faults)
	if len(s.latencies) > 0 {
		slices.Sort(s.latencies)
		s.LatencyP50Ms = s.latencies[len(s.latencies)/2]
		s.LatencyMaxMs = s.latencies[len(s.latencies)-1]
	}
	return s
}

// Build runs the suite — each scenario under seeds seeds (its own, then
// the next ones) on gpus GPUs (0: the scenario's) — and the clean run.
func Build(o Options, dir string, log func(string)) (Report, error) {
	base, clean := Suite(o.Short)
	if o.Clean > 0 {
		clean.Duration = o.Clean
	}
	if o.CleanGPUs > 0 {
		clean.GPUs = o.CleanGPUs
	}
	only, seeds := o.Trigger, o.Seeds
	clean.Seed += o.SeedBase
	var scs []Scenario
	for _, sc := range base {
		for i := range max(1, seeds) {
			v := sc
			v.Seed += o.SeedBase + int64(i)*1000
			if o.GPUs > 0 {
				v.GPUs = o.GPUs
			}
			if seeds > 1 || o.SeedBase != 0 {
				v.Name = fmt.Sprintf("%s/seed%d", sc.Name, v.Seed)
			}
			scs = append(scs, v)
		}
	}
	var rep Report
	var want map[string]bool // nil: every trigger
	if only != "" {
		want = map[string]bool{}
		for _, tr := range strings.Split(only, ",") {
			want[strings.TrimSpace(tr)] = true
		}
	}
	for _, sc := range scs {
		if want != nil && !want[string(sc.Trigger)] {
			continue
		}
		r, err := Run(sc, filepath.Join(dir, "state"))
		if err != nil {
			return rep, fmt.Errorf("%s: %w", sc.Name, err)
		}
		log(fmt.Sprintf("%-28s faults %d polluted %3d detected %3d  P %.3f R %.3f  ref %3d P %.3f R %.3f  root %d/%d  pattern %d  events %d  %.1fs",
			r.Name, r.FaultsRealised, r.TruthPolluted, r.Detected, r.Precision, r.Recall, r.RefPolluted, r.RefPrecision, r.RefRecall, r.RootCorrect, r.FaultsRealised, r.PatternCorrect, r.Events, r.WallS))
		rep.Scenarios = append(rep.Scenarios, r)
	}
	rep.ByTrigger, rep.ByPattern = map[string]Summary{}, map[string]Summary{}
	byT, byP := map[string][]Result{}, map[string][]Result{}
	for _, r := range rep.Scenarios {
		byT[r.Trigger] = append(byT[r.Trigger], r)
		byP[r.Pattern] = append(byP[r.Pattern], r)
	}
	for k, v := range byT {
		rep.ByTrigger[k] = Aggregate(v)
	}
	for k, v := range byP {
		rep.ByPattern[k] = Aggregate(v)
	}
	rep.Overall = Aggregate(rep.Scenarios)
	if o.Fleet > 0 {
		var rs []Result
		var tp, fp, fn, unmatched int
		for i := range o.Fleet {
			sc := FleetScenario{Seed: o.SeedBase + int64(i) + 1, Hosts: 4, Rate: 10, Duration: 4 * time.Minute}
			if o.FleetRate > 0 {
				sc.Rate = o.FleetRate
			}
			if o.FleetHost > 0 {
				sc.Hosts = o.FleetHost
			}
			r, err := RunFleet(sc, filepath.Join(dir, "state"))
			if err != nil {
				return rep, fmt.Errorf("fleet: %w", err)
			}
			log(fmt.Sprintf("%-28s faults %d polluted %3d detected %3d  P %.3f R %.3f  ref %3d P %.3f R %.3f  root %d/%d  grouped P %.3f R %.3f  incidents %d (%d no fault's)  events %d  %.1fs",
				r.Name, r.FaultsRealised, r.TruthPolluted, r.Detected, r.Precision, r.Recall, r.RefPolluted, r.RefPrecision, r.RefRecall, r.RootCorrect, r.FaultsRealised,
				r.GroupPrecision, r.GroupRecall, r.Incidents, r.Unmatched, r.Events, r.WallS))
			rep.Fleet = append(rep.Fleet, r)
			rs = append(rs, r.Result)
			tp, fp, fn, unmatched = tp+r.GroupTP, fp+r.GroupFP, fn+r.GroupFN, unmatched+r.Unmatched
		}
		rep.FleetOverall = &FleetSummary{Summary: Aggregate(rs), GroupPrecision: ratio(tp, tp+fp), GroupRecall: ratio(tp, tp+fn), Unmatched: unmatched}
	}
	r, err := Run(clean, filepath.Join(dir, "state"))
	if err != nil {
		return rep, fmt.Errorf("clean: %w", err)
	}
	rep.Clean = r
	log(fmt.Sprintf("clean %v: requests %d events %d preemptions %d swaps %d evictions %d → incidents %d edges %d (%.1fs)",
		clean.Duration, r.Requests, r.Events, r.Preemptions, r.Swaps, r.Evictions, r.Incidents, r.Edges, r.WallS))
	rep.Throughput = Throughput{Events: r.Events, GPUs: clean.GPUs, EventTimeS: r.EventTimeS, WallS: r.WallS,
		EventsPerS: float64(r.Events) / r.WallS, FleetEventsPerS: float64(r.Events) / r.EventTimeS, XRealTime: r.EventTimeS / r.WallS}
	rep.Targets = map[string]bool{
		"clean_incidents=0": r.Incidents == 0,
		"x_real_time>=20":   rep.Throughput.XRealTime >= 20,
	}
	if len(rep.Scenarios) > 0 { // not with -trigger none: nothing to score
		rep.Targets["precision>=0.98"] = rep.Overall.Precision >= 0.98
		rep.Targets["recall>=0.98"] = rep.Overall.Recall >= 0.98
		rep.Targets["root_first>=0.95"] = rep.Overall.RootAccuracy >= 0.95
		rep.Targets["ref_victim_precision>=0.95"] = rep.Overall.RefPrecision >= 0.95
		rep.Targets["ref_victim_recall>=0.95"] = rep.Overall.RefRecall >= 0.95
	}
	return rep, nil
}

func main() {
	var o Options
	flag.BoolVar(&o.Short, "short", false, "minutes of event time per scenario and a 5-minute clean run")
	out := flag.String("out", "benchmarks/results/kvaccuracy.json", "write the report here (\"\" for none)")
	flag.StringVar(&o.Trigger, "trigger", "", "run only these triggers' scenarios, comma separated (and the clean run); none: the clean run alone")
	flag.IntVar(&o.Seeds, "seeds", 1, "run every scenario under this many seeds")
	flag.Int64Var(&o.SeedBase, "seed-base", 0, "add this to every scenario's seed: seeds the suite's figures were not measured on")
	flag.IntVar(&o.GPUs, "gpus", 0, "GPUs per scenario (0: the suite's, 4)")
	flag.DurationVar(&o.Clean, "clean", 0, "event time of the clean run (0: the suite's, 1h; 5m with -short)")
	flag.IntVar(&o.CleanGPUs, "clean-gpus", 0, "GPUs of the clean run (0: the suite's, 2)")
	flag.Float64Var(&o.FleetRate, "fleet-rate", 0, "requests per second of the -fleet runs (0: 10)")
	flag.IntVar(&o.FleetHost, "fleet-hosts", 0, "hosts of the -fleet runs, two GPUs each (0: 4)")
	flag.IntVar(&o.Fleet, "fleet", 0, "also run the realistic fleet (the demo's: 8 GPUs, 10 requests/s, every trigger once, 4 minutes) under this many seeds")
	flag.Parse()
	dir, err := os.MkdirTemp("", "kvaccuracy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	rep, err := Build(o, dir, func(s string) { fmt.Println(s) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvaccuracy:", err)
		os.Exit(1)
	}
	ov := rep.Overall
	fmt.Printf("overall: precision %.3f recall %.3f root first %d/%d (%.3f) pattern %d latency p50 %d ms max %d ms; victims against the reference model: precision %.3f recall %.3f\n",
		ov.Precision, ov.Recall, ov.RootCorrect, ov.Faults, ov.RootAccuracy, ov.PatternCorrect, ov.LatencyP50Ms, ov.LatencyMaxMs, ov.RefPrecision, ov.RefRecall)
	if f := rep.FleetOverall; f != nil {
		fmt.Printf("fleet: %d runs, root first %d/%d; victims precision %.3f recall %.3f, against the reference %.3f / %.3f, grouped by fault %.3f / %.3f; %d incidents of no fault\n",
			len(rep.Fleet), f.RootCorrect, f.Faults, f.Precision, f.Recall, f.RefPrecision, f.RefRecall, f.GroupPrecision, f.GroupRecall, f.Unmatched)
	}
	t := rep.Throughput
	fmt.Printf("throughput: %d events in %.2fs = %.0f events/s; fleet of %d GPUs emits %.0f events/s → %.1f× real time\n",
		t.Events, t.WallS, t.EventsPerS, t.GPUs, t.FleetEventsPerS, t.XRealTime)
	fmt.Printf("targets: %v\n", rep.Targets)
	if *out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
