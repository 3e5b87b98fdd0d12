package kvgraph

import (
	"fmt"
	"strings"
	"testing"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// manyVictims: r0 leaves block 1 dirty; n requests with long ids each get
// it, read it and free it — one incident of n victims.
func manyVictims(n int) [][]kvlog.Op {
	long := strings.Repeat("x", 200)
	msgs := [][]kvlog.Op{seq(alloc(0, "r0", 1), fill(1, "r0", 1, 0), free(2, "r0", 1))}
	var ops []kvlog.Op
	for i := range n {
		req := fmt.Sprintf("%s-%06d", long, i)
		ms := int64(10 + i)
		ops = append(ops, alloc(ms, req, 1), pool.Read(at(ms), req, 1, 0, 0, pool.BlockBytes), free(ms, req, 1))
		if len(ops) >= 300 {
			msgs = append(msgs, ops)
			ops = nil
		}
	}
	return append(msgs, ops)
}

// TestLargeIncidentFitsTheBroker: an incident of thousands of victims (its
// whole state is megabytes) keeps every state value and every record under
// MaxRecordBytes, says what its records leave out, and restores exactly.
func TestLargeIncidentFitsTheBroker(t *testing.T) {
	const n = 6000
	for _, restart := range []bool{false, true} {
		handed := 0
		h := newHarness(t, func(c *Config) {
			c.OnIncident = func(_ *engine.Task, inc *braidpb.Incident) error { handed += len(inc.Polluted); return nil }
		})
		msgs := manyVictims(n)
		for i, ops := range msgs {
			h.feed(gpu0, ops...)
			if i%4 == 3 {
				if err := h.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				h.checkState()
			}
			if restart && i == len(msgs)/2 {
				if err := h.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				if err := h.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := h.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		segs := h.checkState()
		if segs < n/segItems {
			t.Fatalf("%d incident segments in state, want ≥ %d", segs, n/segItems)
		}
		if err := h.Finish(); err != nil {
			t.Fatal(err)
		}
		h.checkOutputs()
		inc := h.only()
		if inc.State != braidpb.IncidentState_INCIDENT_STATE_CLOSED || inc.Root.RequestId != "r0" {
			t.Fatalf("incident %s root %v", inc.State, inc.Root)
		}
		if got := len(inc.Polluted) + int(inc.PollutedDropped); got != n || inc.PollutedDropped == 0 {
			t.Fatalf("polluted %d listed + %d dropped, want %d", len(inc.Polluted), inc.PollutedDropped, n)
		}
		if got := len(inc.Edges) + int(inc.EdgesDropped); got != n+1 {
			t.Fatalf("edges %d listed + %d dropped, want %d", len(inc.Edges), inc.EdgesDropped, n+1)
		}
		if handed != n {
			t.Fatalf("OnIncident was given %d polluted requests, want each of %d once", handed, n)
		}
		if h.cfg.Counters.Truncated.Load() == 0 || h.cfg.Counters.Polluted.Load() < n {
			t.Fatalf("truncated %d polluted %d", h.cfg.Counters.Truncated.Load(), h.cfg.Counters.Polluted.Load())
		}
		if err := h.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if segs := h.checkState(); segs != 0 {
			t.Fatalf("closed incident left %d segments", segs)
		}
		t.Logf("restart=%v: %d victims, record lists %d (+%d dropped), %d edges (+%d dropped)", restart, n, len(inc.Polluted), inc.PollutedDropped, len(inc.Edges), inc.EdgesDropped)
	}
}

// checkState asserts that no state value reaches MaxRecordBytes and returns
// the number of incident segments.
func (h *harness) checkState() int {
	h.t.Helper()
	it, err := h.Task().State.Iter([]byte{prefix}, []byte{prefix + 1})
	if err != nil {
		h.t.Fatal(err)
	}
	defer it.Close()
	segs := 0
	for it.First(); it.Valid(); it.Next() {
		if len(it.Key())+len(it.Value()) >= h.cfg.MaxRecordBytes {
			h.t.Fatalf("state value %q of %d bytes", it.Key()[:min(20, len(it.Key()))], len(it.Value()))
		}
		if it.Key()[1] == 'j' {
			segs++
		}
	}
	return segs
}
