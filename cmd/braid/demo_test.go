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
