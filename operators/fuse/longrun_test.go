package fuse

import (
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// TestStateLevelsOffOverHours feeds three hours of event time at a steady rate
// through one task and checks that open traces and state on disk stop
// growing once traces start to expire (idle gap + allowed lateness), i.e.
// event-time TTL keeps state bounded.
func TestStateLevelsOffOverHours(t *testing.T) {
	hours := 3
	if testing.Short() {
		hours = 1
	}
	h := newHarness(t, 1, func(c *Config) {
		c.IdleGap = 5 * time.Second
		c.AllowedLateness = 60 * time.Second
		c.FlushAfter = -1
	})
	sim, err := simulator.New(simulator.Config{Seed: 99, RequestsPerBatch: 1, BatchInterval: 2 * time.Second, TracelessLogs: -1, ResourcePoints: -1})
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]int{"otlp_spans": inSpans, "otlp_logs": inLogs, "otlp_metrics": inMetrics}
	batches := hours * 1800
	type sample struct {
		open  int64
		bytes uint64 // live state: keys and values
		disk  uint64 // on disk, including the WAL until the memtable flushes
	}
	live := func() uint64 {
		it, err := h.Task().State.Iter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var n uint64
		for it.First(); it.Valid(); it.Next() {
			n += uint64(len(it.Key()) + len(it.Value()))
		}
		return n
	}
	var samples []sample
	for b := 0; b < batches; b++ {
		for _, m := range sim.Next() {
			h.feedAt(inputs[m.Topic], m.Key, m.Value, int64(b))
		}
		sim.ForgetTraces()
		if b%10 == 9 {
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		if b%300 == 299 { // every 10 minutes of event time
			samples = append(samples, sample{h.stage.Counters().OpenTraces.Load(), live(), h.Task().State.Size()})
		}
		h.Out = h.Out[:0]
	}
	var maxFirst, maxLast sample
	for i, s := range samples {
		if i < len(samples)/2 {
			maxFirst.open = max(maxFirst.open, s.open)
			maxFirst.bytes = max(maxFirst.bytes, s.bytes)
		} else {
			maxLast.open = max(maxLast.open, s.open)
			maxLast.bytes = max(maxLast.bytes, s.bytes)
		}
		t.Logf("after %3d min: open traces %4d, live state %5d KiB, on disk %6d KiB", (i+1)*10, s.open, s.bytes>>10, s.disk>>10)
	}
	// Traces live idle gap + allowed lateness (+ out-of-orderness) after
	// their last member: at 1 request per 2s about 35 are open at any time.
	if maxLast.open > 60 {
		t.Errorf("open traces reached %d in the second half, want ≤ 60 (expired traces are not purged)", maxLast.open)
	}
	if maxLast.open > maxFirst.open*3/2 {
		t.Errorf("open traces still growing: %d in the first half, %d in the second", maxFirst.open, maxLast.open)
	}
	if maxLast.bytes > maxFirst.bytes*3/2 {
		t.Errorf("live state still growing: %d KiB in the first half, %d KiB in the second", maxFirst.bytes>>10, maxLast.bytes>>10)
	}
}
