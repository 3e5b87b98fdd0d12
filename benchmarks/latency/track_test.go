package main

import (
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// TestMembersMatchTruth: the members counted in the simulator's messages
// are the truth's spans, trace-id logs less KV events, and exemplar points.
func TestMembersMatchTruth(t *testing.T) {
	topics := simulator.Topics{Spans: "s", Logs: "l", Metrics: "m"}
	sim, err := simulator.New(simulator.Config{Seed: 3, Realistic: true, KVEvents: true, Hosts: 2, Rate: 20, Topics: topics,
		KV: simulator.KVConfig{Faults: []simulator.KVFault{{Trigger: simulator.CancelRetry, At: simulator.DefaultStart.Add(5 * time.Second), GPU: -1}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]members{}
	for i := 0; i < 150; i++ {
		for _, m := range sim.Next() {
			switch {
			case m.Topic == topics.Spans && len(m.Key) == 32:
				g := got[string(m.Key)]
				g.spans += spanCount(m.Value)
				got[string(m.Key)] = g
			case m.Topic == topics.Logs && len(m.Key) == 32:
				g := got[string(m.Key)]
				g.logs += memberLogCount(m.Value)
				got[string(m.Key)] = g
			case m.Topic == topics.Metrics:
				for id, n := range exemplarTraces(m.Value) {
					g := got[id]
					g.points += n
					got[id] = g
				}
			}
		}
	}
	truth := sim.Truth()
	checked := 0
	for id, tt := range truth.Traces {
		want := members{spans: tt.Spans, logs: tt.Logs - tt.KVEvents, points: tt.ExemplarPoints}
		if tt.Retry {
			want.logs = 0 // only KV events carry a retry's trace id
		}
		if g := got[id]; g != want {
			t.Errorf("trace %s (retry %v): counted %+v, truth %+v", id, tt.Retry, g, want)
		}
		if want.spans > 0 {
			checked++
		}
	}
	if checked < 200 {
		t.Fatalf("only %d traces with spans checked", checked)
	}
	for id := range got {
		if _, ok := truth.Traces[id]; !ok {
			t.Errorf("counted members of %s, which the truth does not know", id)
		}
	}
}

func TestDistribution(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := distribution(ds)
	if l.Count != 100 || l.P50Ms != 50 || l.P90Ms != 90 || l.P99Ms != 99 || l.MaxMs != 100 || l.MinMs != 1 {
		t.Fatalf("distribution = %+v", l)
	}
	if l := distribution(nil); l.Count != 0 {
		t.Fatalf("empty distribution = %+v", l)
	}
}
