package main

import (
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// TestDemoRate: --rate goes from a trickle to saturation in event time.
func TestDemoRate(t *testing.T) {
	for _, tc := range []struct {
		rate      float64
		realistic bool
		batches   int
		want      int // requests arriving over the batches
	}{
		{0.2, true, 100, 4},   // 20 s
		{40, true, 50, 400},   // 10 s
		{2000, true, 5, 2000}, // 1 s
		{40, false, 10, 80},   // legacy: 8 per batch
	} {
		o := simOptions{rate: tc.rate, encoding: simulator.EncodingProto, keyed: true, realistic: tc.realistic}
		sim, err := simulator.New(o.simConfig(1, simulator.DefaultStart))
		if err != nil {
			t.Fatal(err)
		}
		for range tc.batches {
			sim.Next()
		}
		tr := sim.Truth()
		if !tc.realistic {
			if len(tr.Traces) != tc.want {
				t.Errorf("legacy rate %v: %d requests, want %d", tc.rate, len(tr.Traces), tc.want)
			}
			continue
		}
		sim.Flush()
		tr = sim.Truth()
		if got := len(tr.Traces) + len(tr.Orphans); got != tc.want {
			t.Errorf("rate %v: %d requests over %v, want %d", tc.rate, got, time.Duration(tc.batches)*200*time.Millisecond, tc.want)
		}
	}
}

// TestDemoFaults: --faults turns on KV events and injects the faults, each
// realised and in the truth.
func TestDemoFaults(t *testing.T) {
	if _, err := parseFaults("double_free,nope"); err == nil {
		t.Fatal("unknown trigger accepted")
	}
	triggers, err := parseFaults("all")
	if err != nil || len(triggers) != len(simulator.KVTriggers) {
		t.Fatalf("all: %v %v", triggers, err)
	}
	triggers, _ = parseFaults("double_free, wrong_stride")
	o := simOptions{rate: 10, encoding: simulator.EncodingProto, keyed: true, realistic: true, hosts: 1, kvEvents: true, faults: triggers}
	sim, err := simulator.New(o.simConfig(1, simulator.DefaultStart))
	if err != nil {
		t.Fatal(err)
	}
	for range 500 { // 100 s
		sim.Next()
	}
	sim.Flush()
	tr := sim.Truth()
	if tr.KVEvents == 0 || tr.KV.Summary.Faults != 2 {
		t.Fatalf("%d KV events, summary %+v", tr.KVEvents, tr.KV.Summary)
	}
}
