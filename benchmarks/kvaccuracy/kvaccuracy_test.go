package main

import (
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// A short run of the suite: every trigger under light load on 2 GPUs, one
// heavy run, and a clean heavy run; the accuracy targets must hold.
func TestAccuracyShort(t *testing.T) {
	var rs []Result
	scs := []Scenario{}
	for i, trig := range simulator.KVTriggers {
		scs = append(scs, Scenario{Name: string(trig) + "/light", Trigger: trig, Load: Light, GPUs: 2, Duration: 150 * time.Second, Faults: 2, Seed: int64(100 + i)})
	}
	scs = append(scs, Scenario{Name: "double_free/heavy", Trigger: simulator.DoubleFree, Load: Heavy, GPUs: 2, Duration: 100 * time.Second, Faults: 2, Seed: 7},
		Scenario{Name: "null_block_junk/light", Trigger: simulator.NullBlockJunk, Load: Light, GPUs: 2, Duration: 150 * time.Second, Faults: 2, Seed: 9, RestartEvery: 30 * time.Second})
	for _, sc := range scs {
		r, err := Run(sc, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-28s faults %d polluted %d detected %d P %.3f R %.3f ref %d P %.3f R %.3f root %d latency %v %v", r.Name, r.FaultsRealised, r.TruthPolluted, r.Detected, r.Precision, r.Recall,
			r.RefPolluted, r.RefPrecision, r.RefRecall, r.RootCorrect, r.LatenciesMs, r.RefExamples)
		if r.FaultsRealised == 0 {
			t.Errorf("%s: no fault realised", r.Name)
		}
		rs = append(rs, r)
	}
	s := Aggregate(rs)
	if s.Precision < 0.95 || s.Recall < 0.95 || s.RootAccuracy < 0.9 {
		t.Errorf("precision %.3f recall %.3f root %.3f (%d/%d)", s.Precision, s.Recall, s.RootAccuracy, s.RootCorrect, s.Faults)
	}
	// Victims against the independent reference model: reads that
	// returned content the reader should not have seen.
	if s.RefPrecision < 0.95 || s.RefRecall < 0.95 {
		t.Errorf("victims against the reference model: precision %.3f recall %.3f", s.RefPrecision, s.RefRecall)
	}
	clean := Heavy
	clean.Gap = time.Second
	// Rolling restarts with graph capture through the null block, zeroed.
	r, err := Run(Scenario{Name: "clean", Load: clean, GPUs: 2, Duration: 3 * time.Minute, Seed: 7, RestartEvery: 40 * time.Second}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if r.Incidents != 0 || r.Edges != 0 || r.Preemptions == 0 || r.Swaps == 0 || r.Evictions == 0 {
		t.Errorf("clean run: %d incidents, %d edges (preemptions %d swaps %d evictions %d)", r.Incidents, r.Edges, r.Preemptions, r.Swaps, r.Evictions)
	}
}

// The realistic fleet (the demo's) with every trigger once, on the two
// seeds that made TestReportFromDemo fail: a padding write into the
// fleet's shared prefix block with a second fault on its GPU
// (1796516439317146427: kv_base_swap, 1796525873030091290: wrong_stride).
// Each fault's incidents must hold its victims and no others' (a report
// shows one incident); victims are scored against the reference model too.
// Two seeds: the pass it runs in is make test's longest (more seeds:
// go run ./benchmarks/kvaccuracy -fleet N).
func TestFleetAccuracy(t *testing.T) {
	var all []Result
	for _, seed := range []int64{1796516439317146427, 1796525873030091290} {
		r, err := RunFleet(FleetScenario{Seed: seed, Hosts: 4, Rate: 10, Duration: 3 * time.Minute}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %d GPUs, %d events, faults %d, incidents %d (%d no fault's), root %d; victims P %.3f R %.3f, against the reference P %.3f R %.3f, grouped by fault P %.3f R %.3f (%.1fs)",
			seed, r.GPUs, r.Events, r.FaultsRealised, r.Incidents, r.Unmatched, r.RootCorrect, r.Precision, r.Recall, r.RefPrecision, r.RefRecall, r.GroupPrecision, r.GroupRecall, r.WallS)
		if r.FaultsRealised < len(simulator.KVTriggers)-1 {
			t.Errorf("seed %d: %d faults realised of %d", seed, r.FaultsRealised, len(simulator.KVTriggers))
		}
		// A retry that took a cancelled prefill's layers as computed in
		// a block another request left residue in names that request:
		// one such root is allowed.
		if r.RootCorrect < r.FaultsRealised-1 || r.Unmatched > 0 {
			t.Errorf("seed %d: root first for %d of %d faults, %d incidents of no fault", seed, r.RootCorrect, r.FaultsRealised, r.Unmatched)
		}
		if r.GroupPrecision < 0.95 || r.GroupRecall < 0.8 { // recall: the truth also counts a stray writer reading back its own block (README)
			t.Errorf("seed %d: victims grouped by fault P %.3f R %.3f", seed, r.GroupPrecision, r.GroupRecall)
		}
		all = append(all, r.Result)
	}
	if s := Aggregate(all); s.RefPrecision < 0.95 || s.RefRecall < 0.95 {
		t.Errorf("victims against the reference model: precision %.3f recall %.3f", s.RefPrecision, s.RefRecall)
	}
}
