package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSamplingCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	seen := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_sampling_seen_total"}, []string{"tenant"})
	kept := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_sampling_kept_total"}, []string{"tenant", "reason"})
	records := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_sampling_records_total"})
	bytes := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_sampling_bytes_total"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_alerts_observations_total"})
	reg.MustRegister(seen, kept, records, bytes, other)
	seen.WithLabelValues("").Add(90)
	seen.WithLabelValues("a").Add(10)
	kept.WithLabelValues("", "rate").Add(9)
	kept.WithLabelValues("a", "rate").Add(1)
	kept.WithLabelValues("a", "error").Add(2)
	records.Add(24)
	bytes.Add(1000)
	other.Add(7)

	sc, err := samplingCounters(reg)
	if err != nil {
		t.Fatal(err)
	}
	if sc == nil || sc.Seen != 100 || sc.Tenants != 2 || sc.Kept["rate"] != 10 || sc.Kept["error"] != 2 ||
		sc.KeptTotal != 12 || sc.Records != 24 || sc.Bytes != 1000 {
		t.Fatalf("got %+v", sc)
	}
	if sc, err := samplingCounters(prometheus.NewRegistry()); err != nil || sc != nil {
		t.Fatalf("no sampling metrics: got %+v, %v", sc, err)
	}
}

func TestSamplingCostAndMedian(t *testing.T) {
	on := []Phase{{Round: 1, CPUSec: 10, AllFusedCPUSec: 12, SettledCPUSec: 13}, {Round: 2, CPUSec: 11, AllFusedCPUSec: 14}, {Round: 3, Error: "x"}}
	off := []Phase{{Round: 1, CPUSec: 10, AllFusedCPUSec: 10, SettledCPUSec: 10}, {Round: 2, CPUSec: 10, AllFusedCPUSec: 10, SettledCPUSec: 11}, {Round: 3, CPUSec: 1}}
	mOn, mOff := median(on), median(off)
	// Round 2 of on did not reach window 3: left out of its median.
	if mOn.SettledCPUSec != 13 || mOn.AllFusedCPUSec != 13 || mOn.CPUSec != 10.5 {
		t.Fatalf("median on: %+v", mOn)
	}
	c := samplingCost(on, off, mOn, mOff)
	if len(c.AllFusedPerRound) != 2 || c.AllFusedPerRound[0] != 1.2 || c.AllFusedPerRound[1] != 1.4 || len(c.SettledPerRound) != 1 {
		t.Fatalf("per round: %+v", c)
	}
	if c.AllFusedCPURatio != 13.0/10 {
		t.Fatalf("ratio %v", c.AllFusedCPURatio)
	}
}
