package kvgraph

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

type msg struct {
	w   kvlog.Where
	ops []kvlog.Op
}

// story is a run with every detector, propagation, evidence on two GPUs,
// closing and expiry.
func story() []msg {
	oob := pool.Write(at(405), "o1", 3, 1, 0, 1024)
	oob.Addr += pool.LayerSize()
	return []msg{
		{gpu0, seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1))},
		{gpu0, []kvlog.Op{{Time: at(3), Body: "========= Invalid __global__ write of size 16 bytes"}}},
		{gpu0, seq(alloc(10, "r2", 1), readAll(11, "r2", 1))},
		{gpu1, seq(alloc(12, "q1", 1), fill(13, "q1", 1, 0xfeed), allocHit(14, "q2", 1, 0xfeed), readAll(15, "q2", 1))},
		{gpu0, seq(alloc(20, "r2", 2), fill(21, "r2", 2, 0xcafe), allocHit(22, "r3", 2, 0xcafe))},
		{gpu0, seq(readAll(23, "r3", 2))},
		{gpu1, seq(alloc(300, "d1", 5), fill(301, "d1", 5, 0), free(302, "d1", 5), free(303, "d1", 5), zero(304, 5), alloc(305, "d2", 5), alloc(306, "d3", 5))},
		{gpu1, seq(pool.Write(at(307), "d2", 5, 0, 0, 512), pool.Write(at(308), "d3", 5, 0, 256, 512), pool.Read(at(309), "d2", 5, 0, 0, 512), pool.Read(at(310), "d3", 5, 0, 0, 512))},
		{gpu0, seq(alloc(400, "o1", 9), fill(401, "o1", 9, 0), alloc(402, "o2", 3), fill(403, "o2", 3, 0), oob)},
		{gpu0, seq(pool.Read(at(406), "o2", 3, 2, 0, 1024))},
		{kvlog.Where{Host: "node-a", GPUIndex: -1}, []kvlog.Op{{Time: at(500), Body: "NVRM: Xid (PCI:0000:3b:00): 13, pid=7"}}},
		// A prefill cancelled after layers 0-1 (its record of that
		// crosses the cuts), and a retry that takes them as computed.
		{gpu1, seq(alloc(600, "w9", 8), fill(601, "w9", 8, 0), readAll(602, "w9", 8), free(603, "w9", 8))},
		{gpu1, seq(alloc(604, "c9", 7), pool.Write(at(605), "c9", 7, 0, 0, 512), pool.Write(at(605), "c9", 7, 1, 0, 512), free(606, "c9", 7))},
		{gpu1, seq(alloc(607, "retry9", 8), pool.Write(at(608), "retry9", 8, 2, 0, 512), pool.Write(at(608), "retry9", 8, 3, 0, 512))},
		{gpu1, seq(readAll(609, "retry9", 8))},
		{gpu0, seq(alloc(20000, "t1", 10))},
		// r2's incident has closed; r5 shares r2's polluted prefix.
		{gpu0, seq(allocHit(20000, "r5", 2, 0xcafe), readAll(20000, "r5", 2), free(20000, "r5", 2))},
		{gpu0, seq(free(20001, "r3", 2), alloc(20002, "r4", 2), readAll(20003, "r4", 2))},
		{gpu1, seq(alloc(50000, "t2", 10))},
		{gpu0, seq(alloc(200000, "t3", 11))},
	}
}

func run(t *testing.T, msgs []msg, cut int, mode string) []string {
	t.Helper()
	h := newHarness(t, nil)
	committed := 0
	for i, m := range msgs {
		if i == cut {
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			committed = len(h.Out)
			off := h.off
			h.feed(m.w, m.ops...)
			h.off = off // the same record again
			switch mode {
			case "restart":
				if err := h.Restart(); err != nil {
					t.Fatal(err)
				}
			case "abort":
				if err := h.Abort(); err != nil {
					t.Fatal(err)
				}
			}
			h.Out = h.Out[:committed]
		}
		h.feed(m.w, m.ops...)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range h.Out {
		out = append(out, fmt.Sprintf("%s|%d|%s|%x", r.Topic, r.Partition, r.Key, r.Value))
	}
	return out
}

func TestStoryOutput(t *testing.T) {
	h := newHarness(t, nil)
	for _, m := range story() {
		h.feed(m.w, m.ops...)
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	latest, _ := h.incidents()
	if len(latest) != 6 {
		t.Fatalf("%d incidents", len(latest))
	}
	var victims []string
	for _, inc := range latest {
		victims = append(victims, polluted(inc)...)
		if slices.Contains(polluted(inc), "retry9") && inc.Root.RequestId != "c9" {
			t.Fatalf("the retry's incident has root %q, want the cancelled c9", inc.Root.RequestId)
		}
		if slices.Contains(polluted(inc), "r5") {
			if inc.Root.RequestId != "r1" || inc.Continues == "" || latest[inc.Continues] == nil || !slices.Contains(polluted(latest[inc.Continues]), "r2") {
				t.Fatalf("r5's incident: root %q, continues %q; want root r1, continuing r2's incident", inc.Root.RequestId, inc.Continues)
			}
		}
	}
	want := map[string]bool{"r2": true, "r3": true, "d2": true, "d3": true, "o2": true, "r4": true, "retry9": true, "r5": true}
	if len(victims) != len(want) {
		t.Fatalf("victims %v", victims)
	}
	for _, v := range victims {
		if !want[v] {
			t.Fatalf("victims %v", victims)
		}
	}
	for _, inc := range latest {
		if inc.State.String() != "INCIDENT_STATE_CLOSED" {
			t.Fatalf("incident %s not closed", inc.Id)
		}
	}
	if c := h.cfg.Counters; c.Blocks.Load() != 0 {
		t.Fatalf("%d blocks left after the TTL", c.Blocks.Load())
	}
}

// Checkpoint, then lose or abort the next message at every point: the
// output is the uninterrupted run's, byte for byte.
func TestRestoreIsExact(t *testing.T) {
	msgs := story()
	want := run(t, msgs, -1, "")
	for cut := 0; cut < len(msgs); cut++ {
		for _, mode := range []string{"restart", "abort"} {
			got := run(t, msgs, cut, mode)
			if len(got) != len(want) {
				t.Fatalf("cut %d %s: %d records, want %d", cut, mode, len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal([]byte(got[i]), []byte(want[i])) {
					t.Fatalf("cut %d %s: record %d differs:\n got %.300s\nwant %.300s", cut, mode, i, got[i], want[i])
				}
			}
		}
	}
}
