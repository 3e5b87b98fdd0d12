package kvgraph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

func TestCleanLifecyclesMakeNoIncident(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		// A request fills block 1 and reads it; frees it; the block is
		// zeroed and handed to another request that writes before reading.
		alloc(0, "r1", 1), fill(1, "r1", 1, 0xaa), readAll(2, "r1", 1), free(3, "r1", 1),
		zero(4, 1), alloc(5, "r2", 1), readAll(6, "r2", 1), fill(7, "r2", 1, 0), readAll(8, "r2", 1),
		// Legitimate prefix sharing: r3 fills block 2 with hash 0xbb; r4
		// and, after r3 freed it, r5 hit it by hash and read it.
		alloc(10, "r3", 2), fill(11, "r3", 2, 0xbb), allocHit(12, "r4", 2, 0xbb), readAll(13, "r4", 2),
		free(14, "r3", 2), allocHit(15, "r5", 2, 0xbb), readAll(16, "r5", 2),
		// Recycling without zeroing is fine when the new owner reads only
		// what it wrote: token by token, partial ranges.
		free(20, "r4", 2), free(20, "r5", 2), kvlog.Op{Time: at(21), Op: "evict", Block: 2},
		alloc(22, "r6", 2), pool.Write(at(23), "r6", 2, 0, 0, 64), pool.Read(at(24), "r6", 2, 0, 0, 64),
		// Preemption by swap: r7 swaps block 3 out, frees it, gets block 4,
		// swaps in, reads.
		alloc(30, "r7", 3), fill(31, "r7", 3, 0), kvlog.Op{Time: at(32), Op: "swap_out", Request: "r7", Block: 3}, free(33, "r7", 3),
		alloc(34, "r8", 4), fill(35, "r8", 4, 0), free(36, "r8", 4),
		alloc(37, "r7", 4), kvlog.Op{Time: at(38), Op: "swap_in", Request: "r7", Block: 4}, readAll(39, "r7", 4),
		// Preemption by recompute: r8 gets block 3 (r7's residue), rewrites it, reads.
		alloc(40, "r8", 3), fill(41, "r8", 3, 0), readAll(42, "r8", 3),
	)...)
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("clean run made %d edges: %v", len(es), es[0])
	}
	if latest, _ := h.incidents(); len(latest) != 0 {
		t.Fatalf("clean run made incidents: %v", latest)
	}
}

func TestDirtyResidue(t *testing.T) {
	h := newHarness(t, nil)
	tr := [16]byte{1, 2, 3}
	r2 := alloc(5, "r2", 1)
	r2.TraceID = tr
	h.feed(gpu0, seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(3, "r1", 1))...)
	h.feed(gpu0, r2, pool.Write(at(6), "r2", 1, 2, 0, 128), pool.Read(at(7), "r2", 1, 2, 0, 1024))
	es := h.edges()
	if len(es) != 2 || es[0].Source != "req:GPU-0/r1" || es[0].Target != "blk:GPU-0/1" || es[1].Target != "req:GPU-0/r2" {
		t.Fatalf("edges %v", es)
	}
	if es[1].Kind != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE || es[1].Layer != 2 || string(es[1].TargetTraceId) != string(tr[:]) {
		t.Fatalf("edge %v", es[1])
	}
	if len(es[1].Evidence) != 2 || es[1].Evidence[0].Topic != "kv" {
		t.Fatalf("evidence %v", es[1].Evidence)
	}
	inc := h.only()
	if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE || inc.Root.RequestId != "r1" || inc.Root.Block != 1 ||
		inc.Root.TimeUnixNano != uint64(at(7)) || inc.Gpu != "GPU-0" || inc.Host != "node-a" {
		t.Fatalf("incident %v", inc)
	}
	if got := polluted(inc); !slices.Equal(got, []string{"r2"}) || string(inc.Polluted[0].TraceId) != string(tr[:]) {
		t.Fatalf("polluted %v", inc.Polluted)
	}
	if len(inc.Layers) != 1 || inc.Layers[0].Layer != 2 || inc.Layers[0].CorruptedReads != 1 {
		t.Fatalf("layers %v", inc.Layers)
	}
	if !strings.HasPrefix(inc.Id, "inc-") || inc.State != braidpb.IncidentState_INCIDENT_STATE_OPEN {
		t.Fatalf("id %q state %v", inc.Id, inc.State)
	}
}

func TestZeroedOrSharedBlockIsNotResidue(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 1), fill(1, "r1", 1, 0x11), free(3, "r1", 1), zero(4, 1),
		alloc(5, "r2", 1), readAll(6, "r2", 1),
		alloc(10, "r3", 2), fill(11, "r3", 2, 0x22), free(12, "r3", 2),
		allocHit(13, "r4", 2, 0x22), readAll(14, "r4", 2),
	)...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("edges %v", es)
	}
	// A prefix hit whose hash does not match the content is not sharing.
	h.feed(gpu0, seq(free(15, "r4", 2), alloc(16, "r5", 2), fill(17, "r5", 2, 0x33), free(18, "r5", 2),
		allocHit(19, "r6", 2, 0x22), readAll(20, "r6", 2))...)
	if got := polluted(h.only()); !slices.Equal(got, []string{"r6"}) {
		t.Fatalf("polluted %v", got)
	}
}

func TestMixedWriteAfterDoubleFree(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 5), fill(1, "r1", 5, 0), free(2, "r1", 5), free(3, "r1", 5), // double free
		zero(4, 5), alloc(5, "r2", 5), alloc(6, "r3", 5), // handed out twice
		pool.Write(at(7), "r2", 5, 0, 0, 512), pool.Write(at(8), "r3", 5, 0, 256, 512), // r3 overwrites r2's bytes
		pool.Read(at(9), "r2", 5, 0, 0, 512), pool.Read(at(10), "r3", 5, 0, 0, 512),
	)...)
	inc := h.only()
	if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE || inc.Root.RequestId != "r1" || inc.Root.TimeUnixNano != uint64(at(3)) {
		t.Fatalf("root %v", inc.Root)
	}
	// Both owners read content the other wrote.
	if got := polluted(inc); !slices.Equal(got, []string{"r2", "r3"}) {
		t.Fatalf("polluted %v", got)
	}
	for _, e := range h.edges() {
		if e.Kind != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
			t.Fatalf("edge kind %v", e)
		}
	}
}

func TestStaleWriteIntoAnotherRequestsBlock(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 7), fill(1, "r1", 7, 0), free(2, "r1", 7), // preempted
		alloc(3, "r2", 7), fill(4, "r2", 7, 0),
		pool.Write(at(5), "r1", 7, 1, 0, 1024), // async offload of r1 still writing
		pool.Read(at(6), "r2", 7, 1, 0, 1024),
	)...)
	inc := h.only()
	if inc.Root.RequestId != "r1" || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		t.Fatalf("root %v", inc.Root)
	}
	if got := polluted(inc); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("polluted %v", got)
	}
	if len(inc.Layers) != 1 || inc.Layers[0].Layer != 1 || inc.Layers[0].Hits != 1 {
		t.Fatalf("layers %v", inc.Layers)
	}
}

func TestLayerOutOfBounds(t *testing.T) {
	h := newHarness(t, nil)
	// r2 owns block 3 and has written layer 2; r1's write for layer 1 of
	// block 3 lands one layer further (a wrong stride).
	oob := pool.Write(at(5), "r1", 3, 1, 0, 1024)
	oob.Addr += pool.LayerSize()
	h.feed(gpu0, seq(
		alloc(0, "r1", 9), fill(1, "r1", 9, 0), // teaches the block size
		alloc(2, "r2", 3), fill(3, "r2", 3, 0), oob, pool.Read(at(6), "r2", 3, 2, 0, 1024),
	)...)
	inc := h.only()
	if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB || inc.Root.RequestId != "r1" || inc.Root.Layer != 2 {
		t.Fatalf("root %v", inc.Root)
	}
	if got := polluted(inc); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("polluted %v", got)
	}
	var sawLayer bool
	for _, e := range h.edges() {
		if e.Target == "layer:GPU-0/2" && e.Source == "req:GPU-0/r1" {
			sawLayer = true
		}
	}
	if !sawLayer {
		t.Fatalf("no request → layer edge: %v", h.edges())
	}
	if len(inc.Layers) != 1 || inc.Layers[0].Layer != 2 || inc.Layers[0].Hits != 1 || inc.Layers[0].CorruptedReads != 1 {
		t.Fatalf("layers %v", inc.Layers)
	}
	// Beyond the layer count: no victim, still an incident.
	h2 := newHarness(t, nil)
	w := pool.Write(at(1), "r9", 15, 3, 0, 2048) // the last slot of the last layer, overflowing the pool
	h2.feed(gpu0, alloc(0, "r9", 15), w)
	inc = h2.only()
	if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB || len(inc.Polluted) != 0 {
		t.Fatalf("incident %v", inc)
	}
}

func TestPropagationThroughPrefixSharing(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1),
		alloc(3, "r2", 1), readAll(4, "r2", 1), // r2 polluted by residue
		alloc(5, "r2", 2), fill(6, "r2", 2, 0xcafe), // r2 fills a block from polluted state
		allocHit(7, "r3", 2, 0xcafe), readAll(8, "r3", 2), // r3 shares it
		alloc(9, "r4", 4), fill(10, "r4", 4, 0xbeef), allocHit(11, "r5", 4, 0xbeef), readAll(12, "r5", 4), // unrelated
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"r2", "r3"}) {
		t.Fatalf("polluted %v", got)
	}
	for _, p := range inc.Polluted {
		want := braidpb.PollutionVia_POLLUTION_VIA_DIRECT
		if p.RequestId == "r3" {
			want = braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED
		}
		if p.Via != want {
			t.Fatalf("%s via %v", p.RequestId, p.Via)
		}
	}
	if inc.Root.RequestId != "r1" || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE {
		t.Fatalf("root %v", inc.Root)
	}
}

func TestSupportingEvidenceAttachesButNeverOpens(t *testing.T) {
	h := newHarness(t, nil)
	san := kvlog.Op{Time: at(1), Body: "========= Invalid __global__ write of size 16 bytes\n=========     at 0x1a0 in reshape_and_cache_kernel"}
	xid := kvlog.Op{Time: at(9000), Body: "NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, Graphics Exception"}
	h.feed(gpu0, san)
	h.feed(gpu1, kvlog.Op{Time: at(2), Body: "========= Invalid __global__ write of size 4 bytes"})
	if latest, _ := h.incidents(); len(latest) != 0 {
		t.Fatal("a sanitizer line alone opened an incident")
	}
	// A write past the pool's end: what memcheck sees.
	h.feed(gpu0, alloc(10, "r9", 15), pool.Write(at(11), "r9", 15, 3, 0, 2048))
	h.feed(kvlog.Where{Host: "node-a", GPUIndex: 0}, xid)                                                                      // names the GPU by index only
	h.feed(kvlog.Where{Host: "node-a", GPUIndex: -1}, kvlog.Op{Time: at(9001), Body: "NVRM: Xid (PCI:0000:3b:00): 31, pid=1"}) // the host's kernel log
	h.feed(kvlog.Where{Host: "node-b", GPUIndex: -1}, kvlog.Op{Time: at(9002), Body: "NVRM: Xid (PCI:0000:3b:00): 31, pid=1"}) // another host
	inc := h.only()
	var kinds []string
	for _, e := range inc.Evidence {
		kinds = append(kinds, e.Kind)
	}
	if !slices.Equal(kinds, []string{"sanitizer", "xid", "xid"}) {
		t.Fatalf("evidence %v", inc.Evidence)
	}
	if !strings.Contains(inc.Evidence[1].Text, "Xid") || inc.Evidence[0].Origin.Topic != "kv" {
		t.Fatalf("evidence %v", inc.Evidence)
	}
}

func TestIncidentRevisionsAndClose(t *testing.T) {
	var calls []string
	var traces int
	h := newHarness(t, func(c *Config) {
		c.OnIncident = func(_ *engine.Task, inc *braidpb.Incident) error {
			calls = append(calls, fmt.Sprintf("%s/%d", inc.Id, inc.Revision))
			for _, v := range inc.Polluted {
				if len(v.TraceId) == 16 {
					traces++
				}
			}
			return nil
		}
	})
	r2 := alloc(3, "r2", 1)
	r2.TraceID = [16]byte{9}
	h.feed(gpu0, seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1), r2, readAll(4, "r2", 1))...)
	h.feed(gpu0, seq(alloc(5, "r1", 2), fill(6, "r1", 2, 0), free(7, "r1", 2), alloc(8, "r3", 2), readAll(9, "r3", 2))...)
	_, all := h.incidents()
	if len(all) != 2 || all[0].Revision != 0 || all[1].Revision != 1 || len(all[1].Polluted) != 2 {
		t.Fatalf("revisions %v", all)
	}
	// Event time moves past the window: the incident closes.
	h.feed(gpu0, alloc(20000, "r9", 9))
	latest, all := h.incidents()
	inc := latest[all[0].Id]
	if inc.State != braidpb.IncidentState_INCIDENT_STATE_CLOSED || inc.Revision != 2 {
		t.Fatalf("after the window: %v", inc)
	}
	// OnIncident gets each polluted request once: r2 (with its trace) in
	// revision 0, r3 in revision 1, none in the closing revision.
	if want := []string{all[0].Id + "/0", all[0].Id + "/1"}; !slices.Equal(calls, want) || traces != 1 {
		t.Fatalf("OnIncident calls %v, %d trace ids; want %v, 1", calls, traces, want)
	}
	// A new fault on the same block opens a new incident.
	h.feed(gpu0, seq(free(20001, "r3", 2), alloc(20002, "r4", 2), readAll(20003, "r4", 2))...)
	if latest, _ := h.incidents(); len(latest) != 2 {
		t.Fatalf("%d incidents", len(latest))
	}
	c := h.cfg.Counters
	if c.Incidents.Load() != 2 || c.Closed.Load() != 1 || c.Edges.Load() == 0 {
		t.Fatalf("counters incidents %d closed %d edges %d", c.Incidents.Load(), c.Closed.Load(), c.Edges.Load())
	}
}

func TestBlocksExpire(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1))...)
	c := h.cfg.Counters
	if c.Blocks.Load() != 1 {
		t.Fatalf("blocks %d", c.Blocks.Load())
	}
	h.feed(gpu0, alloc(120000, "r2", 2)) // two minutes later: block 1 and r1 are forgotten
	if c.Blocks.Load() != 1 {
		t.Fatalf("blocks %d after the TTL", c.Blocks.Load())
	}
	// Forgotten content cannot be blamed: reading block 1 is clean now.
	h.feed(gpu0, seq(alloc(120001, "r3", 1), readAll(120002, "r3", 1))...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("edges %v", es)
	}
}

func TestWriteIntoAnotherSlotOfTheLayer(t *testing.T) {
	h := newHarness(t, nil)
	// r1 owns blocks 2 and 4; its write for block 2 lands in block 4's
	// slot (a wrong stride inside the layer): r2, which shares nothing,
	// is untouched; r1 itself, reading its block 4, reads bytes that are
	// not block 4's.
	bad := pool.Write(at(3), "r1", 2, 1, 0, 1024)
	bad.Addr = pool.Addr(1, 4)
	h.feed(gpu0, seq(alloc(0, "r0", 9), fill(1, "r0", 9, 0), alloc(2, "r1", 2), alloc(2, "r1", 4), alloc(2, "r2", 5), fill(2, "r2", 5, 0), bad,
		pool.Read(at(4), "r1", 4, 1, 0, 1024), readAll(5, "r2", 5))...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"r1"}) || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		t.Fatalf("polluted %v pattern %v", got, inc.Pattern)
	}
}

func TestTaintFollowsTheBlockTable(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "w", 3), fill(1, "w", 3, 0), free(2, "w", 3),
		// r holds block 1 (index 0), then block 3 (index 1) with w's residue.
		alloc(3, "r", 1), alloc(3, "r", 3), readAll(4, "r", 3),
		// r fills block 1 after it was polluted at index 1: not tainted;
		// then block 5 (index 2): tainted.
		fill(5, "r", 1, 0xa1), alloc(6, "r", 5), fill(7, "r", 5, 0xa5),
		allocHit(8, "s1", 1, 0xa1), readAll(9, "s1", 1),
		allocHit(8, "s2", 5, 0xa5), readAll(9, "s2", 5),
	)...)
	if got := polluted(h.only()); !slices.Equal(got, []string{"r", "s2"}) {
		t.Fatalf("polluted %v", got)
	}
}

func TestSwappedInContentUnderLaterWrites(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "a", 1), fill(1, "a", 1, 0), free(2, "a", 1), // residue of a
		alloc(3, "p", 1), kvlog.Op{Time: at(4), Op: "swap_in", Request: "p", Block: 1}, readAll(5, "p", 1), free(6, "p", 1),
		alloc(7, "q", 1), fill(8, "q", 1, 0xbb), readAll(9, "q", 1), free(10, "q", 1),
		allocHit(11, "s", 1, 0xbb), readAll(12, "s", 1),
	)...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("edges %v", es)
	}
	// Swapped-in content read by another request is residue.
	h.feed(gpu0, seq(alloc(20, "p", 2), kvlog.Op{Time: at(21), Op: "swap_in", Request: "p", Block: 2}, free(22, "p", 2), alloc(23, "x", 2), readAll(24, "x", 2))...)
	if got := polluted(h.only()); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("polluted %v", got)
	}
}

func TestRetryOfACancelledRequest(t *testing.T) {
	h := newHarness(t, nil)
	half := func(ms int64, req string, b int64, hash uint64, l0, l1 int64) []kvlog.Op {
		var ops []kvlog.Op
		for l := l0; l < l1; l++ {
			op := pool.Write(at(ms), req, b, l, 0, pool.BlockBytes)
			op.Hash = hash
			ops = append(ops, op)
		}
		return ops
	}
	h.feed(gpu0, seq(
		alloc(0, "v", 2), fill(1, "v", 2, 0), free(2, "v", 2), // residue in block 2
		alloc(3, "c", 1), half(4, "c", 1, 0x77, 0, 2), free(5, "c", 1), // c cancelled mid-prefill
		alloc(6, "retry", 2), half(7, "retry", 2, 0x77, 2, 4), readAll(8, "retry", 2), // the retry takes layers 0-1 as computed
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"retry"}) || inc.Root.RequestId != "c" {
		t.Fatalf("polluted %v root %v", got, inc.Root)
	}
	// A later prefix hit on the retry's block shares what the retry wrote
	// (layers 2-3); layers 0-1 hold v's residue, which it reads.
	h.feed(gpu0, seq(free(9, "retry", 2), allocHit(10, "s", 2, 0x77), readAll(11, "s", 2))...)
	inc = h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"retry", "s"}) || inc.Root.RequestId != "c" {
		t.Fatalf("after the prefix hit: polluted %v root %v", got, inc.Root)
	}
}

// TestTwoFaultsInOneLayer: two unrelated requests whose writes land in the
// same layer of one GPU, each into a different request's block, are two
// incidents with two roots: a layer is shared by every request on the GPU
// and joins nothing.
func TestTwoFaultsInOneLayer(t *testing.T) {
	h := newHarness(t, nil)
	oob1 := pool.Write(at(5), "r1", 3, 1, 0, 1024)
	oob1.Addr += pool.LayerSize() // into layer 2 of block 3 (r2's)
	oob2 := pool.Write(at(2005), "r5", 7, 1, 0, 1024)
	oob2.Addr += pool.LayerSize() // into layer 2 of block 7 (r6's)
	h.feed(gpu0, seq(
		alloc(0, "r1", 9), fill(1, "r1", 9, 0),
		alloc(2, "r2", 3), fill(3, "r2", 3, 0), oob1, pool.Read(at(6), "r2", 3, 2, 0, 1024),
		alloc(2000, "r5", 11), fill(2001, "r5", 11, 0),
		alloc(2002, "r6", 7), fill(2003, "r6", 7, 0), oob2, pool.Read(at(2006), "r6", 7, 2, 0, 1024),
	)...)
	h.feed(gpu0, alloc(30000, "r99", 14)) // event time past both windows
	_, incs := h.incidents()
	roots := map[string][]string{}
	for _, inc := range incs {
		roots[inc.Root.RequestId] = polluted(inc)
	}
	if len(roots) != 2 || !slices.Equal(roots["r1"], []string{"r2"}) || !slices.Equal(roots["r5"], []string{"r6"}) {
		t.Fatalf("incidents by root: %v", roots)
	}
}

// An error of OnIncident (the stage behind it could not take the tags)
// fails the call that emitted the incident: the task stops and goes back
// to its checkpoint rather than losing the tags.
func TestOnIncidentErrorFailsTheTask(t *testing.T) {
	boom := errors.New("cannot tag")
	var calls int
	h := newHarness(t, func(c *Config) {
		c.OnIncident = func(*engine.Task, *braidpb.Incident) error { calls++; return boom }
	})
	err := h.Process(0, &kgo.Record{Value: kvlog.Marshal(gpu0, seq(alloc(0, "r1", 5), fill(1, "r1", 5, 0), free(2, "r1", 5), alloc(3, "r2", 5), readAll(4, "r2", 5))...)})
	if err == nil {
		err = h.Finish()
	}
	if calls == 0 {
		t.Fatal("OnIncident was not called")
	}
	if !errors.Is(err, boom) {
		t.Fatalf("Advance = %v, want the OnIncident error", err)
	}
}

// An incident opens at the faulty write, before anyone read the bytes:
// OnIncident is given its revision 0 without a victim (alerts and counts
// see every incident), then the revision that names its first victim.
func TestOnIncidentGetsANewIncidentWithoutVictims(t *testing.T) {
	type call struct {
		rev     uint32
		victims int
	}
	var calls []call
	h := newHarness(t, func(c *Config) {
		c.OnIncident = func(_ *engine.Task, inc *braidpb.Incident) error {
			calls = append(calls, call{inc.Revision, len(inc.Polluted)})
			return nil
		}
	})
	h.feed(gpu0, seq(
		alloc(0, "r1", 5), fill(1, "r1", 5, 0), free(2, "r1", 5), free(3, "r1", 5), // double free
		zero(4, 5), alloc(5, "w", 5), alloc(6, "x", 5),
		pool.Write(at(7), "w", 5, 0, 0, 512), pool.Write(at(8), "x", 5, 0, 256, 512),
	)...)
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != (call{0, 0}) {
		t.Fatalf("calls %v, want revision 0 without victims", calls)
	}
	h.feed(gpu0, pool.Read(at(9), "w", 5, 0, 0, 512))
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[1].victims != 1 || calls[1].rev == 0 {
		t.Fatalf("calls %v, want a later revision with the one victim", calls)
	}
}

// TestStrideIntoTheNextLayersOtherSlot: a copy kernel built for a packed
// layout writes layer L of block b at L×LayerSize + 2b×BlockBytes; for
// 2b ≥ Blocks that is in layer L+1, in the slot of block 2b−Blocks. The
// owner of that block reads its layer L+1 and gets the writer's bytes.
func TestStrideIntoTheNextLayersOtherSlot(t *testing.T) {
	h := newHarness(t, nil)
	bad := pool.Write(at(5), "w", 12, 1, 0, pool.BlockBytes)
	bad.Addr = 1*pool.LayerSize() + 2*12*pool.BlockBytes // layer 2, block 8's slot
	h.feed(gpu0, seq(
		alloc(0, "v", 8), fill(1, "v", 8, 0),
		alloc(2, "w", 12), fill(3, "w", 12, 0), bad,
		pool.Read(at(6), "v", 8, 2, 0, pool.BlockBytes),
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"v"}) || inc.Root.RequestId != "w" {
		t.Fatalf("polluted %v root %v pattern %v", got, inc.Root, inc.Pattern)
	}
}

// TestRetryOfACancelledRequestWithoutAHash: the cancelled request's block
// and its retry's carry no content hash (the prompt's last, partial
// block), and another request's residue is what the retry's block holds:
// the layers the retry wrote are exactly those the cancelled request had
// not, as far into each (the same tokens), so it is the root. A request
// that freed a block with other layers or other tokens written, or long
// before, is not.
func TestRetryOfACancelledRequestWithoutAHash(t *testing.T) {
	tokens := func(ms int64, req string, b int64, l0, l1, n int64) []kvlog.Op {
		var ops []kvlog.Op
		for l := l0; l < l1; l++ {
			ops = append(ops, pool.Write(at(ms), req, b, l, 0, n))
		}
		return ops
	}
	layers := func(ms int64, req string, b int64, l0, l1 int64) []kvlog.Op {
		return tokens(ms, req, b, l0, l1, pool.BlockBytes/2)
	}
	for _, tc := range []struct {
		name   string
		c      []kvlog.Op // what the request freed before the retry wrote
		cFreed int64      // when, ms
		root   string
	}{
		{"cancelled with the other layers", layers(4, "c", 1, 0, 2), 5, "c"},
		{"cancelled with other layers than the retry lacks", layers(4, "c", 1, 0, 1), 5, "w"},
		{"cancelled with other tokens written", tokens(4, "c", 1, 0, 2, pool.BlockBytes/4), 5, "w"},
		{"cancelled long before", layers(4, "c", 1, 0, 2), 5 - partialWindow.Milliseconds() - 1000, "w"},
		{"finished, every layer written", layers(4, "c", 1, 0, 4), 5, "w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			cAt := tc.cFreed - 2
			c := tc.c
			for i := range c {
				c[i].Time = at(cAt + 1)
			}
			h.feed(gpu0, seq(
				alloc(cAt-100, "w", 2), fill(cAt-99, "w", 2, 0), readAll(cAt-98, "w", 2), free(cAt-97, "w", 2), // residue in block 2
				alloc(cAt, "c", 1), c, free(tc.cFreed, "c", 1),
				alloc(6, "retry", 2), layers(7, "retry", 2, 2, 4), readAll(8, "retry", 2), // layers 0-1 taken as computed
			)...)
			inc := h.only()
			if got := polluted(inc); !slices.Equal(got, []string{"retry"}) || inc.Root.RequestId != tc.root {
				t.Fatalf("polluted %v root %q (%s), want root %q", got, inc.Root.RequestId, inc.Root.Detail, tc.root)
			}
		})
	}
}

// r2, polluted by r1's residue, writes a fault of its own after that
// incident closed; later requests share r2's polluted prefix. They are
// the first incident's victims, carried on (a continuation with its
// root), not victims of r2's fault, whose node r2 is.
func TestPropagationAfterCloseContinuesItsIncident(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1),
		alloc(3, "r2", 1), readAll(4, "r2", 1), // r2 polluted by residue: incident A
		alloc(5, "r2", 2), fill(6, "r2", 2, 0xcafe), // r2's polluted prefix
		allocHit(7, "r3", 2, 0xcafe), readAll(8, "r3", 2), // shared while A is open
	)...)
	h.feed(gpu0, alloc(20000, "t1", 10)) // A closes
	h.feed(gpu0, seq(
		alloc(20001, "r6", 5), fill(20002, "r6", 5, 0),
		pool.Write(at(20003), "r2", 5, 1, 0, 1024), // r2 writes into r6's block: incident B
		pool.Read(at(20004), "r6", 5, 1, 0, 1024),
		allocHit(20005, "r7", 2, 0xcafe), readAll(20006, "r7", 2),
		allocHit(20007, "r8", 2, 0xcafe), readAll(20008, "r8", 2),
	)...)
	latest, _ := h.incidents()
	var a, b, c *braidpb.Incident
	for _, inc := range latest {
		switch {
		case slices.Contains(polluted(inc), "r2"):
			a = inc
		case slices.Contains(polluted(inc), "r6"):
			b = inc
		case slices.Contains(polluted(inc), "r7"):
			c = inc
		}
	}
	if len(latest) != 3 || a == nil || b == nil || c == nil {
		t.Fatalf("incidents %v", latest)
	}
	if got := polluted(a); !slices.Equal(got, []string{"r2", "r3"}) || a.State != braidpb.IncidentState_INCIDENT_STATE_CLOSED {
		t.Fatalf("A: %v %v", got, a.State)
	}
	if got := polluted(b); !slices.Equal(got, []string{"r6"}) || b.Root.RequestId != "r2" || b.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		t.Fatalf("B: victims %v, root %v", got, b.Root)
	}
	if got := polluted(c); !slices.Equal(got, []string{"r7", "r8"}) {
		t.Fatalf("continuation: victims %v", got)
	}
	if c.Continues != a.Id || c.Root.RequestId != "r1" || c.Pattern != a.Pattern || c.Id == a.Id {
		t.Fatalf("continuation: continues %q (A %q), root %v, pattern %v", c.Continues, a.Id, c.Root, c.Pattern)
	}
	for _, p := range c.Polluted {
		if p.Via != braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED || p.From != "req:GPU-0/r2" {
			t.Fatalf("continuation victim %v", p)
		}
	}
}

// r2, a victim of r1's open incident, writes out of bounds into r9's
// block: a fault of its own, its own incident; the two faults met in r2,
// they are not one.
func TestVictimsOwnFaultIsItsOwnIncident(t *testing.T) {
	h := newHarness(t, nil)
	oob := pool.Write(at(22), "r2", 3, 1, 0, 1024)
	oob.Addr += pool.LayerSize()
	h.feed(gpu0, seq(
		alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1),
		alloc(3, "r2", 1), readAll(4, "r2", 1), // r2 polluted by residue
		alloc(10, "r2", 9), fill(11, "r2", 9, 0),
		alloc(20, "r9", 3), fill(21, "r9", 3, 0), oob, pool.Read(at(23), "r9", 3, 2, 0, 1024),
	)...)
	latest, _ := h.incidents()
	if len(latest) != 2 {
		t.Fatalf("%d incidents, want 2: %v", len(latest), latest)
	}
	for _, inc := range latest {
		switch inc.Root.RequestId {
		case "r1":
			if got := polluted(inc); !slices.Equal(got, []string{"r2"}) {
				t.Fatalf("r1's incident: victims %v", got)
			}
		case "r2":
			if got := polluted(inc); !slices.Equal(got, []string{"r9"}) || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB {
				t.Fatalf("r2's incident: victims %v, pattern %v", got, inc.Pattern)
			}
		default:
			t.Fatalf("root %v", inc.Root)
		}
	}
}

// r5 writes into r6's block 5 (one fault); later r2's write for layer 1
// lands in layer 2 of the same block (another), and r6 reads it. The
// read belongs to r2's fault: the block links the faults that wrote into
// it, not a read of another fault's bytes.
func TestReadOfAnotherFaultsBytesIsThatFaults(t *testing.T) {
	h := newHarness(t, nil)
	oob := pool.Write(at(6), "r2", 5, 1, 0, 1024)
	oob.Addr += pool.LayerSize()
	h.feed(gpu0, seq(
		alloc(0, "r1", 9), fill(1, "r1", 9, 0), // teaches the block size
		alloc(2, "r6", 5), fill(3, "r6", 5, 0),
		pool.Write(at(4), "r5", 5, 1, 0, 1024), pool.Read(at(5), "r6", 5, 1, 0, 1024),
		oob, pool.Read(at(7), "r6", 5, 2, 0, 1024),
	)...)
	latest, _ := h.incidents()
	if len(latest) != 2 {
		t.Fatalf("%d incidents, want 2: %v", len(latest), latest)
	}
	for _, inc := range latest {
		want := braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE
		if inc.Root.RequestId == "r2" {
			want = braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB
		} else if inc.Root.RequestId != "r5" {
			t.Fatalf("root %v", inc.Root)
		}
		if got := polluted(inc); inc.Pattern != want || !slices.Equal(got, []string{"r6"}) {
			t.Fatalf("%s's incident: pattern %v, victims %v", inc.Root.RequestId, inc.Pattern, got)
		}
	}
}

// r2's write for layer 1 of its block lands in layer 2 (a K/V base
// mix-up); reading layer 1 then returns r1's leftovers. The residue read
// is r2's fault's doing: one incident, rooted at r2, not one rooted at r1.
func TestResidueReadByAFaultsWriterIsItsFault(t *testing.T) {
	h := newHarness(t, nil)
	swap := pool.Write(at(5), "r2", 1, 1, 0, 512) // half the slot: the read sees r1's leftovers past it
	swap.Addr += pool.LayerSize()
	h.feed(gpu0, seq(
		alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(2, "r1", 1),
		alloc(3, "r2", 1), pool.Write(at(4), "r2", 1, 0, 0, 1024), swap,
		pool.Read(at(6), "r2", 1, 1, 0, 1024),
	)...)
	inc := h.only()
	if inc.Root.RequestId != "r2" || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB {
		t.Fatalf("root %v, pattern %v", inc.Root, inc.Pattern)
	}
	if got := polluted(inc); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("victims %v", got)
	}
}

// A prefill cancelled after layers 0-1; its retry takes those layers as
// computed in two blocks that others left residue in. One fault, the
// cancelled prefill's: one incident, though the residue's writers, the
// blocks and the reads differ.
func TestRetryResidueInTwoBlocksIsOneIncident(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu1, seq(
		alloc(600, "w9", 8), fill(601, "w9", 8, 0), free(602, "w9", 8),
		alloc(600, "w8", 6), fill(601, "w8", 6, 0), free(602, "w8", 6),
		alloc(604, "c9", 7), pool.Write(at(605), "c9", 7, 0, 0, 512), pool.Write(at(605), "c9", 7, 1, 0, 512), free(606, "c9", 7),
		alloc(607, "retry9", 8), pool.Write(at(608), "retry9", 8, 2, 0, 512), pool.Write(at(608), "retry9", 8, 3, 0, 512),
		alloc(607, "retry9", 6), pool.Write(at(608), "retry9", 6, 2, 0, 512), pool.Write(at(608), "retry9", 6, 3, 0, 512),
		readAll(609, "retry9", 8), readAll(610, "retry9", 6),
	)...)
	inc := h.only()
	if inc.Root.RequestId != "c9" || !slices.Equal(polluted(inc), []string{"retry9"}) {
		t.Fatalf("root %v, victims %v", inc.Root, polluted(inc))
	}
}

// r2's write for its block 2 lands in block 5's slot (a fault: r5 reads
// it). r5 frees block 5 unzeroed and r6 reads r5's leftovers in another
// layer: another fault, the block's. Block 5 is where r2's write landed,
// no link between the two.
func TestResidueInABlockAnotherFaultWroteIntoIsItsOwn(t *testing.T) {
	h := newHarness(t, nil)
	stray := pool.Write(at(5), "r2", 2, 0, 0, 1024)
	stray.Addr += 3 * pool.BlockBytes // slot 5 of layer 0
	h.feed(gpu0, seq(
		alloc(0, "r1", 9), fill(1, "r1", 9, 0), // teaches the block size
		alloc(2, "r5", 5), fill(3, "r5", 5, 0),
		alloc(4, "r2", 2), stray, pool.Read(at(6), "r5", 5, 0, 0, 1024),
		free(7, "r5", 5), alloc(8, "r6", 5), pool.Read(at(9), "r6", 5, 1, 0, 1024),
	)...)
	latest, _ := h.incidents()
	if len(latest) != 2 {
		t.Fatalf("%d incidents, want 2: %v", len(latest), latest)
	}
	for _, inc := range latest {
		want := map[string]string{"r2": "r5", "r5": "r6"}[inc.Root.RequestId]
		if got := polluted(inc); want == "" || !slices.Equal(got, []string{want}) {
			t.Fatalf("root %s: victims %v", inc.Root.RequestId, got)
		}
	}
}

// r2, sharing r1's prefix block 15 by its hash, writes half of layer 0
// into it without a hash (a padded slot's stray store). The server's
// prefix index is unchanged: r3 and r4 still get the block for that hash
// (r3 while r1 and r2 hold it), read r2's bytes and are its victims. They
// are prefix hits, not a block handed out twice: r3's own fault later (a
// write into r9's block out of its layer) is an incident of its own.
func TestStrayWriteIntoASharedBlockKeepsItsHash(t *testing.T) {
	h := newHarness(t, nil)
	oob := pool.Write(at(9), "r3", 3, 1, 0, 1024)
	oob.Addr += pool.LayerSize() // lands in layer 2 of r9's block 3
	h.feed(gpu0, seq(
		alloc(0, "r1", 15), fill(1, "r1", 15, 0xbeef),
		allocHit(2, "r2", 15, 0xbeef), readAll(3, "r2", 15),
		pool.Write(at(4), "r2", 15, 0, 0, 512),
		allocHit(5, "r3", 15, 0xbeef), readAll(6, "r3", 15),
		alloc(7, "r9", 3), fill(7, "r9", 3, 0), alloc(8, "r3", 4), oob, pool.Read(at(10), "r9", 3, 2, 0, 1024),
		free(11, "r1", 15), free(11, "r2", 15), free(11, "r3", 15),
		allocHit(12, "r4", 15, 0xbeef), readAll(13, "r4", 15),
	)...)
	for _, e := range h.edges() {
		if strings.Contains(e.Detail, "allocated") {
			t.Errorf("a prefix hit taken for a block handed out twice: %s", e.Detail)
		}
	}
	latest, _ := h.incidents()
	if len(latest) != 2 {
		t.Fatalf("%d incidents, want 2: %v", len(latest), latest)
	}
	for _, inc := range latest {
		switch inc.Root.RequestId {
		case "r2":
			if got := polluted(inc); !slices.Equal(got, []string{"r3", "r4"}) || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
				t.Fatalf("r2's incident: victims %v, pattern %v", got, inc.Pattern)
			}
		case "r3":
			if got := polluted(inc); !slices.Equal(got, []string{"r9"}) || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB {
				t.Fatalf("r3's incident: victims %v, pattern %v", got, inc.Pattern)
			}
		default:
			t.Fatalf("root %v", inc.Root)
		}
	}
}

// r2 shares r1's prefix block by its hash and writes into it without the
// hash (a padded slot's stray store); reading the prefix back, it reads
// its stray bytes, not the content it shares: a victim of its own fault,
// as r1 is.
func TestStrayWriteOverASharedPrefixPollutesItsWriter(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 15), fill(1, "r1", 15, 0xbeef),
		allocHit(2, "r2", 15, 0xbeef), readAll(3, "r2", 15),
		pool.Write(at(4), "r2", 15, 0, 0, 512),
		readAll(5, "r2", 15), readAll(6, "r1", 15),
	)...)
	inc := h.only()
	if got := polluted(inc); inc.Root.RequestId != "r2" || !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("root %v, victims %v", inc.Root, got)
	}
}

// A block handed out twice: r2, its second owner, writes its own content
// into it (no hash) and reads it back. Its own bytes are what it may read:
// r1, whose content it overwrote, is the victim.
func TestSecondOwnerReadsItsOwnWrites(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 7), fill(1, "r1", 7, 0),
		alloc(2, "r2", 7), fill(3, "r2", 7, 0), readAll(4, "r2", 7), readAll(5, "r1", 7),
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("root %v, victims %v", inc.Root, got)
	}
}
