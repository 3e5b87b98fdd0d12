package main

import (
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
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

func TestReadFused(t *testing.T) {
	id, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f10")
	ft := &braidpb.FusedTrace{TraceId: id, Revision: 3, Part: 1, Parts: 2,
		Spans:   []*braidpb.FusedSpan{{}, {}},
		Logs:    []*braidpb.FusedLog{{}},
		Points:  []*braidpb.FusedPoint{{}, {}, {}},
		Summary: &braidpb.Summary{SpanCount: 9}}
	b, err := proto.Marshal(ft)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := readFused(b)
	want := fusedHead{traceID: hex.EncodeToString(id), revision: 3, part: 1, parts: 2, spans: 2, logs: 1, points: 3}
	if !ok || h != want {
		t.Fatalf("readFused = %+v, %v; want %+v", h, ok, want)
	}
	if _, ok := readFused(b[:len(b)-1]); ok {
		t.Fatal("a truncated record reads")
	}
	// Flags, packed as proto3 writes them: FLAG_POLLUTED among others.
	for _, flags := range [][]braidpb.Flag{{braidpb.Flag_FLAG_POLLUTED}, {braidpb.Flag_FLAG_NO_ROOT_SPAN, braidpb.Flag_FLAG_POLLUTED}, {braidpb.Flag_FLAG_NO_ROOT_SPAN}} {
		ft.Flags = flags
		b, err := proto.Marshal(ft)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := readFused(b)
		if want := slices.Contains(flags, braidpb.Flag_FLAG_POLLUTED); !ok || h.polluted != want {
			t.Errorf("flags %v: polluted %v (ok %v), want %v", flags, h.polluted, ok, want)
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
