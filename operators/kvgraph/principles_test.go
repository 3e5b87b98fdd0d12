package kvgraph

import (
	"slices"
	"strings"
	"testing"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// Tests from the convention (connectors/simulator/KV.md, INPUTS.md §5):
// what a block holds after swap-ins, zeroing, writes no request made and a
// restart of the server.

func swapIn(ms int64, req string, b int64) kvlog.Op {
	return kvlog.Op{Time: at(ms), Op: "swap_in", Request: req, Block: b}
}

func zeroLayer(ms int64, b, l int64) kvlog.Op {
	return kvlog.Op{Time: at(ms), Op: "zero", Block: b, Layer: l, Layers: pool.Layers}
}

// A swapped-in block, freed, then zeroed layer by layer or fully
// overwritten in pieces by its next owner, holds nothing of the swapped
// request: the new owner's reads and the prefix hits on its content are
// clean.
func TestSwappedInContentGoneAfterZeroOrOverwrite(t *testing.T) {
	h := newHarness(t, nil)
	// Layer 0 rewritten by b, the others zeroed one by one (kvlog sends
	// no layer index for a zero of layer 0).
	zeroAll := []kvlog.Op{pool.Write(at(3), "b", 1, 0, 0, pool.BlockBytes)}
	for l := int64(1); l < pool.Layers; l++ {
		zeroAll = append(zeroAll, zeroLayer(3, 1, l))
	}
	// Written in two halves per layer, read in one piece.
	var halves []kvlog.Op
	for l := int64(0); l < pool.Layers; l++ {
		halves = append(halves, pool.Write(at(12), "q", 2, l, 0, pool.BlockBytes/2), pool.Write(at(13), "q", 2, l, pool.BlockBytes/2, pool.BlockBytes/2))
	}
	last := halves[len(halves)-1]
	last.Hash = 0xcc
	halves[len(halves)-1] = last
	h.feed(gpu0, seq(
		alloc(0, "a", 1), swapIn(1, "a", 1), readAll(2, "a", 1), free(2, "a", 1),
		alloc(3, "b", 1), zeroAll, readAll(5, "b", 1),
		alloc(10, "p", 2), swapIn(11, "p", 2), free(11, "p", 2),
		alloc(12, "q", 2), halves, readAll(14, "q", 2), free(15, "q", 2),
		allocHit(16, "s", 2, 0xcc), readAll(17, "s", 2),
	)...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("clean swap-in lives made %d edges: %v", len(es), es[0])
	}
	// Zeroing one layer leaves the others holding p's swapped-in content.
	h.feed(gpu0, seq(alloc(20, "p", 3), swapIn(21, "p", 3), free(22, "p", 3), zeroLayer(23, 3, 2),
		alloc(24, "x", 3), pool.Read(at(25), "x", 3, 2, 0, pool.BlockBytes))...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("read of a zeroed layer made edges: %v", es[0])
	}
	h.feed(gpu0, pool.Read(at(26), "x", 3, 1, 0, pool.BlockBytes))
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"x"}) || inc.Root.RequestId != "p" || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE {
		t.Fatalf("polluted %v root %v", got, inc.Root)
	}
}

// A prefix hit on a block whose content came from a swap-in is not a hit
// on the hash the block held before it.
func TestSwapInReplacesTheContentHash(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "z", 1), fill(1, "z", 1, 0xaa), free(2, "z", 1),
		alloc(3, "p", 1), swapIn(4, "p", 1), free(5, "p", 1),
		allocHit(6, "s", 1, 0xaa), readAll(7, "s", 1),
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"s"}) || inc.Root.RequestId != "p" {
		t.Fatalf("polluted %v root %v", got, inc.Root)
	}
}

// The reserved null block: a CUDA-graph capture writes it without a
// request. Zeroed afterwards, the padded reads through it are clean; not
// zeroed, they read junk whose source is the server process.
func TestNullBlockWrittenWithoutARequest(t *testing.T) {
	capture := func(ms int64) []kvlog.Op {
		var ops []kvlog.Op
		for l := int64(0); l < pool.Layers; l++ {
			ops = append(ops, pool.Write(at(ms), "", 0, l, 0, pool.BlockBytes))
		}
		return ops
	}
	padded := func(ms int64, req string) []kvlog.Op {
		return seq(alloc(ms, req, 5), fill(ms+1, req, 5, 0), readAll(ms+2, req, 5), readAll(ms+2, req, 0), free(ms+3, req, 5))
	}
	h := newHarness(t, nil)
	h.feed(gpu0, seq(capture(0), zero(1, 0), padded(2, "r1"))...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("padded reads of a zeroed null block made edges: %v", es[0])
	}
	if n := h.cfg.Counters.Rejected.Load(); n != 0 {
		t.Fatalf("%d writes without a request rejected", n)
	}
	h.feed(gpu0, seq(capture(10), padded(12, "r2"), padded(16, "r3"))...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"r2", "r3"}) {
		t.Fatalf("polluted %v", got)
	}
	r := inc.Root
	if r.RequestId != "" || r.Node != "proc:GPU-0/vllm-0" || r.Block != 0 || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE ||
		!strings.Contains(r.Detail, "server process") || !strings.Contains(r.Detail, "without a request") {
		t.Fatalf("root %v pattern %v", r, inc.Pattern)
	}
}

// A restart: the server's requests die holding blocks and the new
// process's pool starts empty. Its requests take the same blocks, write
// and read them: no two owners, no residue. Pollution after the restart is
// still found.
func TestRestartStartsAFreshPool(t *testing.T) {
	h := newHarness(t, nil)
	restarted := gpu0
	restarted.Instance = "vllm-0-b"
	h.feed(gpu0, seq(alloc(0, "old1", 1), fill(1, "old1", 1, 0xaa), alloc(0, "old2", 2), fill(1, "old2", 2, 0))...)
	h.feed(restarted, seq(
		alloc(10, "new1", 1), fill(11, "new1", 1, 0), readAll(12, "new1", 1),
		alloc(10, "new2", 2), pool.Write(at(11), "new2", 2, 0, 0, 64), pool.Read(at(12), "new2", 2, 0, 0, 64),
		// A hit on the old process's hash is no hit: its cache died with it.
		alloc(13, "new3", 3), fill(14, "new3", 3, 0xbb), readAll(15, "new3", 3),
	)...)
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("restart made %d edges: %v", len(es), es[0])
	}
	if n := h.cfg.Counters.Restarts.Load(); n != 1 {
		t.Fatalf("restarts %d, want 1", n)
	}
	h.feed(restarted, seq(free(20, "new1", 1), alloc(21, "new4", 1), readAll(22, "new4", 1))...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"new4"}) || inc.Root.RequestId != "new1" {
		t.Fatalf("polluted %v root %v", got, inc.Root)
	}
}

// Supporting lines attach only where they can be evidence: the incident's
// GPU (by uuid, index, or the PCI bus id an Xid names), Xids of memory
// faults, memcheck lines to writes that left their layer; never an Xid
// 63, a racecheck report, or another GPU's line on the host.
func TestEvidenceOnlyOfTheIncidentsGPUAndKind(t *testing.T) {
	h := newHarness(t, nil)
	// Both GPUs are known; an Xid line with its uuid teaches GPU-1's bus id.
	h.feed(gpu1, kvlog.Op{Time: at(0), Body: "NVRM: Xid (PCI:0000:86:00): 13, pid=7, name=python3, Graphics SM Warp Exception"})
	h.feed(gpu1, alloc(0, "q", 1))
	h.feed(gpu0, kvlog.Op{Time: at(0), Body: "NVRM: Xid (PCI:0000:3B:00): 13, pid=8, name=python3"})
	// A dirty-residue incident on GPU-0.
	h.feed(gpu0, seq(alloc(10, "r1", 1), fill(11, "r1", 1, 0), free(12, "r1", 1), alloc(13, "r2", 1), readAll(14, "r2", 1))...)
	host := kvlog.Where{Host: "node-a", GPUIndex: -1}
	h.feed(gpu0, kvlog.Op{Time: at(20), Body: "NVRM: Xid (PCI:0000:3b:00): 63, pid=8, Row Remapper: New row marked for remapping"})
	h.feed(gpu0, kvlog.Op{Time: at(21), Body: "========= Race reported between Write access at 0x1b0 in void attn_kernel and Read access at 0x1c0"})
	h.feed(gpu0, kvlog.Op{Time: at(22), Body: "========= Invalid __global__ write of size 16 bytes"})           // memcheck: no write left a layer here
	h.feed(host, kvlog.Op{Time: at(23), Body: "NVRM: Xid (PCI:0000:86:00): 31, pid=7, Ch 00000008, MMU Fault"}) // GPU-1's
	h.feed(host, kvlog.Op{Time: at(24), Body: "NVRM: Xid (PCI:0000:3b:00): 31, pid=8, Ch 00000010, MMU Fault"}) // GPU-0's
	h.feed(host, kvlog.Op{Time: at(25), Body: "NVRM: Xid (PCI:0000:af:00): 43, pid=9"})                         // no GPU braid can place
	inc := h.only()
	var texts []string
	for _, e := range inc.Evidence {
		texts = append(texts, e.Text)
	}
	if len(texts) != 2 || !strings.Contains(texts[0], "(PCI:0000:3B:00): 13") || !strings.Contains(texts[1], "(PCI:0000:3b:00): 31") {
		t.Fatalf("evidence %q", texts)
	}
	if n := h.cfg.Counters.Unrelated.Load(); n != 3 {
		t.Fatalf("unrelated lines %d, want 3 (Xid 63, racecheck, an unplaceable Xid 43)", n)
	}
}

// A victim is a request whose read returned content it should not have
// seen. A block handed out twice, written by both owners: the owner that
// reads the other's bytes is a victim; the one that only writes, or reads
// back the range it rewrote itself, is not; nor is the writer of a stray
// write into another request's block until that owner reads it. The fault
// is reported from the write on (an edge without a victim), victims come
// with their reads.
func TestVictimsAreReaders(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r1", 5), fill(1, "r1", 5, 0), free(2, "r1", 5), free(3, "r1", 5), // double free
		zero(4, 5), alloc(5, "w", 5), alloc(6, "x", 5), // handed out twice
		pool.Write(at(7), "w", 5, 0, 0, 512), pool.Write(at(8), "x", 5, 0, 256, 512), // x over w's [256,512)
		pool.Read(at(9), "x", 5, 0, 256, 512), // x reads its own bytes only
	)...)
	inc := h.only()
	if inc.Root.RequestId != "r1" || inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE {
		t.Fatalf("root %v pattern %v", inc.Root, inc.Pattern)
	}
	if got := polluted(inc); len(got) != 0 {
		t.Fatalf("victims %v before anyone read another's bytes", got)
	}
	h.feed(gpu0, pool.Read(at(10), "w", 5, 0, 0, 256)) // w's own untouched half
	if got := polluted(h.only()); len(got) != 0 {
		t.Fatalf("victims %v after a read of untouched bytes", got)
	}
	h.feed(gpu0, pool.Read(at(11), "w", 5, 0, 0, 512)) // now through x's bytes
	if got := polluted(h.only()); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("victims %v, want the reader w", got)
	}

	// A stray write into a block whose owner then rewrites that range
	// before reading it: nobody read foreign bytes.
	h2 := newHarness(t, nil)
	h2.feed(gpu0, seq(
		alloc(0, "a", 7), fill(1, "a", 7, 0), free(2, "a", 7), // a preempted, its offload still running
		alloc(3, "b", 7), fill(4, "b", 7, 0),
		pool.Write(at(5), "a", 7, 1, 0, 1024), // the late offload write
		pool.Write(at(6), "b", 7, 1, 0, 1024), readAll(7, "b", 7),
	)...)
	inc2 := h2.only()
	if inc2.Root.RequestId != "a" {
		t.Fatalf("root %v", inc2.Root)
	}
	if got := polluted(inc2); len(got) != 0 {
		t.Fatalf("victims %v: b rewrote the range before it read it", got)
	}
}

// A K/V base mix-up: the writes meant for layer 1 of a fresh block land in
// the same block's slot of layer 2, and the request then writes layer 2
// itself (over them). Layer 2 holds what the request wrote there; layer 1
// holds nothing it wrote, so its read of layer 1 returns content it should
// not have seen: it is its own victim, from that read (not before), with
// the out-of-bounds write as the root. A request whose misdirected bytes it
// writes again properly before reading them is no victim.
func TestMisdirectedLayerReadBack(t *testing.T) {
	for _, rewrite := range []bool{false, true} {
		h := newHarness(t, nil)
		bad := pool.Write(at(2), "r1", 5, 1, 0, 1024)
		bad.Addr = pool.Addr(2, 5) // layer 1's bytes, in layer 2's slot
		ops := []any{alloc(0, "r1", 5), pool.Write(at(1), "r1", 5, 0, 0, 1024), bad, pool.Write(at(3), "r1", 5, 2, 0, 1024)}
		if rewrite {
			ops = append(ops, pool.Write(at(4), "r1", 5, 1, 0, 1024))
		}
		h.feed(gpu0, seq(ops...)...)
		inc := h.only()
		if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB || inc.Root.RequestId != "r1" {
			t.Fatalf("rewrite=%v: pattern %v root %v", rewrite, inc.Pattern, inc.Root)
		}
		if got := polluted(inc); len(got) != 0 {
			t.Fatalf("rewrite=%v: victims %v before any read", rewrite, got)
		}
		h.feed(gpu0, pool.Read(at(5), "r1", 5, 2, 0, 1024)) // its own layer 2
		if got := polluted(h.only()); len(got) != 0 {
			t.Fatalf("rewrite=%v: victims %v after a read of the layer it wrote", rewrite, got)
		}
		h.feed(gpu0, pool.Read(at(6), "r1", 5, 1, 0, 1024))
		got := polluted(h.only())
		if want := []string{"r1"}; rewrite {
			if len(got) != 0 {
				t.Fatalf("rewrite: victims %v, the range was written again before the read", got)
			}
		} else if !slices.Equal(got, want) {
			t.Fatalf("victims %v, want %v (layer 1 was never written where it belongs)", got, want)
		}
	}
}

// Attention is causal: a polluted request's KV from the polluted position
// on is polluted, and a request that shares those blocks by prefix hash
// reads it. A preempted request recomputes its KV from its tokens: its new
// blocks are clean, and a request sharing them is no victim — unless the
// recompute itself reads polluted content again (a prefix hit on a
// tainted cached block), which pollutes what it writes after it.
func TestRecomputeAfterPreemptionIsClean(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "r0", 1), fill(1, "r0", 1, 0), free(2, "r0", 1), // r0's bytes left in block 1
		alloc(3, "p", 1), readAll(4, "p", 1), // p reads them: polluted at position 0
		alloc(5, "p", 2), fill(6, "p", 2, 0xb2), // p's block 2 carries it
		allocHit(7, "q", 2, 0xb2), readAll(8, "q", 2), // q shares it: a victim
		free(9, "p", 1), free(9, "p", 2), // p preempted
		zero(10, 3), alloc(11, "p", 3), fill(12, "p", 3, 0xb3), // the recompute
		allocHit(13, "s", 3, 0xb3), readAll(14, "s", 3), // s shares the recomputed block
	)...)
	if got := polluted(h.only()); !slices.Equal(got, []string{"p", "q"}) {
		t.Fatalf("victims %v, want p and q (s read the recomputed, clean block)", got)
	}

	// The recompute hits the tainted cached block 2 (its own old prefix)
	// and writes block 4 after it: block 4 carries the pollution again.
	h2 := newHarness(t, nil)
	h2.feed(gpu0, seq(
		alloc(0, "r0", 1), fill(1, "r0", 1, 0), free(2, "r0", 1),
		alloc(3, "p", 1), readAll(4, "p", 1),
		alloc(5, "p", 2), fill(6, "p", 2, 0xb2),
		free(9, "p", 1), free(9, "p", 2),
		allocHit(10, "p", 2, 0xb2), readAll(11, "p", 2), // the recompute reuses its cached prefix
		zero(12, 4), alloc(13, "p", 4), fill(14, "p", 4, 0xb4),
		allocHit(15, "s", 4, 0xb4), readAll(16, "s", 4),
	)...)
	if got := polluted(h2.only()); !slices.Equal(got, []string{"p", "s"}) {
		t.Fatalf("victims %v, want p and s (the recompute read its tainted prefix again)", got)
	}
}

// A block's content goes to host memory at a swap-out and comes back with
// the swap-in, which reads it all: bytes a stray write left in it are read
// then, so the swapped-out owner is a victim — named at the swap-out, as
// the detector does not carry content through host memory. Its own
// unwritten bytes (residue it never read) do not count.
func TestSwapOutCarriesForeignBytes(t *testing.T) {
	h := newHarness(t, nil)
	stray := pool.Write(at(5), "w", 7, 1, 0, 256)
	stray.Addr = pool.Addr(1, 4) // w's write for its block 7 lands in r's block 4
	h.feed(gpu0, seq(
		alloc(0, "r", 4), fill(1, "r", 4, 0), readAll(2, "r", 4),
		alloc(3, "w", 7), fill(4, "w", 7, 0), stray,
		kvlog.Op{Time: at(6), Op: "swap_out", Request: "r", Block: 4},
	)...)
	if got := polluted(h.only()); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("victims %v, want r (its swapped-out content holds w's bytes)", got)
	}
}

// A block freed twice is handed to two requests; the second writes into
// it, then the first swaps it out (and later back in, into another block,
// and reads it): the other owner's bytes went to host memory with its
// content, so the swapped-out owner is a victim, named at the swap-out, of
// the double free.
func TestSwapOutCarriesTheOtherOwnersWrites(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, seq(
		alloc(0, "x", 5), fill(1, "x", 5, 0), free(2, "x", 5), free(3, "x", 5), // double free
		alloc(4, "a", 3), alloc(4, "a", 5), alloc(5, "b", 5), // block 5 handed out twice
		fill(6, "a", 5, 0), pool.Write(at(7), "b", 5, 0, 0, 512), // b writes over a's layer 0
		kvlog.Op{Time: at(8), Op: "swap_out", Request: "a", Block: 3}, kvlog.Op{Time: at(8), Op: "swap_out", Request: "a", Block: 5},
	)...)
	inc := h.only()
	if got := polluted(inc); !slices.Equal(got, []string{"a"}) || inc.Root.RequestId != "x" {
		t.Fatalf("polluted %v root %v, want a, from the double free by x", got, inc.Root)
	}
	// The other owner overwrites every byte a wrote, each layer with its
	// own content hash (as servers write a block's hash with it): nothing
	// of a is left in the block, and what a swaps out is all b's.
	h1 := newHarness(t, nil)
	h1.feed(gpu0, seq(
		alloc(0, "x", 5), fill(1, "x", 5, 0), free(2, "x", 5), free(3, "x", 5),
		alloc(4, "a", 5), fill(5, "a", 5, 0xaa), alloc(6, "b", 5), fill(7, "b", 5, 0xbb),
		kvlog.Op{Time: at(8), Op: "swap_out", Request: "a", Block: 5},
	)...)
	if got := polluted(h1.only()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("polluted %v, want a: its swapped-out block holds only b's writes", got)
	}
	// Swapped out before the other owner wrote anything: nothing foreign
	// went with it.
	h2 := newHarness(t, nil)
	h2.feed(gpu0, seq(
		alloc(0, "x", 5), fill(1, "x", 5, 0), free(2, "x", 5), free(3, "x", 5),
		alloc(4, "a", 5), alloc(5, "b", 5), fill(6, "a", 5, 0),
		kvlog.Op{Time: at(7), Op: "swap_out", Request: "a", Block: 5}, pool.Write(at(8), "b", 5, 0, 0, 512),
	)...)
	_, all := h2.incidents()
	for _, inc := range all {
		if got := polluted(inc); len(got) != 0 {
			t.Fatalf("victims %v: a's content left before b wrote", got)
		}
	}
}
