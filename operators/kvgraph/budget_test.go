package kvgraph

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// cleanChurn: n short clean lifecycles of distinct requests on distinct
// blocks, in messages of 100 ops, after a long-lived request took block
// 9999 and a shared prefix block 0; at the end the long-lived request
// writes and reads its block again and another request shares block 0.
var bigPool = kvlog.Pool{Layers: 2, Blocks: 1 << 20, BlockBytes: 64}

func bigFill(ms int64, req string, b int64, hash uint64) []kvlog.Op {
	var ops []kvlog.Op
	for l := range bigPool.Layers {
		op := bigPool.Write(at(ms), req, b, l, 0, bigPool.BlockBytes)
		op.Hash = hash
		ops = append(ops, op)
	}
	return ops
}

func bigReadAll(ms int64, req string, b int64) []kvlog.Op {
	var ops []kvlog.Op
	for l := range bigPool.Layers {
		ops = append(ops, bigPool.Read(at(ms), req, b, l, 0, bigPool.BlockBytes))
	}
	return ops
}

func cleanChurn(n int) [][]kvlog.Op {
	msgs := [][]kvlog.Op{seq(alloc(0, "long", 9999), bigFill(0, "long", 9999, 0), alloc(0, "sys", 0), bigFill(0, "sys", 0, 0xabc))}
	var ops []kvlog.Op
	for i := range n {
		req := fmt.Sprintf("req-%07d", i)
		b := int64(100_000 + i)
		ms := int64(1 + i/10)
		ops = append(ops, alloc(ms, req, b), bigPool.Write(at(ms), req, b, 0, 0, bigPool.BlockBytes), bigPool.Read(at(ms), req, b, 0, 0, bigPool.BlockBytes),
			free(ms, req, b), zero(ms, b))
		if len(ops) >= 100 {
			msgs = append(msgs, ops)
			ops = nil
		}
	}
	end := int64(2 + n/10)
	return append(msgs, ops, seq(bigPool.Write(at(end), "long", 9999, 1, 0, 32), bigPool.Read(at(end), "long", 9999, 1, 0, 64),
		bigReadAll(end, "long", 9999), allocHit(end, "late", 0, 0xabc), bigReadAll(end+1, "late", 0)))
}

// TestStateStaysWithinItsBudget: distinct requests and blocks beyond the
// budget are evicted, least recently used first; the state estimate never
// passes MaxStateBytes; a clean run stays clean (a block met again after
// its owners were forgotten is not taken for pollution).
func TestStateStaysWithinItsBudget(t *testing.T) {
	const limit = 256 << 10
	h := newHarness(t, func(c *Config) { c.MaxStateBytes = limit; c.BlockTTL = 1 << 40 })
	for i, ops := range cleanChurn(20_000) {
		h.feed(gpu0, ops...)
		if n := h.cfg.Counters.StateBytes.Load(); n > limit {
			t.Fatalf("message %d: state of %d bytes > %d", i, n, limit)
		}
		if i%50 == 0 {
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	c := h.cfg.Counters
	if c.EvictedBlocks.Load() == 0 || c.EvictedRequests.Load() == 0 {
		t.Fatalf("evicted %d blocks, %d requests", c.EvictedBlocks.Load(), c.EvictedRequests.Load())
	}
	if latest, _ := h.incidents(); len(latest) != 0 {
		for _, inc := range latest {
			t.Errorf("incident on a clean run: %v", inc.Root)
		}
	}
	if es := h.edges(); len(es) != 0 {
		t.Fatalf("%d edges on a clean run: %v", len(es), es[0])
	}
	t.Logf("evicted %d blocks, %d requests", c.EvictedBlocks.Load(), c.EvictedRequests.Load())
}

// TestLargeIncidentClosesEarlyOverBudget: an incident that takes more than
// half of MaxStateBytes closes early, said in its root's detail.
func TestLargeIncidentClosesEarlyOverBudget(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxStateBytes = 512 << 10 })
	for _, ops := range manyVictims(3000) {
		h.feed(gpu0, ops...)
		if n := h.cfg.Counters.StateBytes.Load(); n > 512<<10 {
			t.Fatalf("state of %d bytes", n)
		}
	}
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	h.checkOutputs()
	if h.cfg.Counters.EvictedIncidents.Load() == 0 {
		t.Fatal("no incident closed early")
	}
	latest, _ := h.incidents()
	early, victims := 0, 0
	for _, inc := range latest {
		if strings.Contains(inc.Root.Detail, "closed early") {
			early++
		}
		victims += len(inc.Polluted) + int(inc.PollutedDropped)
	}
	if early == 0 || victims != 3000 {
		t.Fatalf("%d incidents, %d closed early, %d victims", len(latest), early, victims)
	}
}

// TestStateMemoryOfDistinctRequests measures the heap that 100 k distinct
// requests and blocks (20 k under the race detector) leave in the detector
// with a budget of 4 MiB, against the estimate.
func TestStateMemoryOfDistinctRequests(t *testing.T) {
	const limit = 4 << 20
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	msgs := cleanChurn(n)
	before := heap()
	h := newDiskHarness(t, func(c *Config) { c.MaxStateBytes = limit; c.BlockTTL = 1 << 40 })
	for i, ops := range msgs {
		h.feed(gpu0, ops...)
		if i%100 == 99 { // the engine checkpoints every commit interval
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := h.cfg
	after := heap()
	grew := int64(after) - int64(before)
	runtime.KeepAlive(msgs)
	t.Logf("%d requests: state estimate %d KiB, heap +%d KiB (limit %d KiB), evicted %d blocks %d requests", n,
		cfg.Counters.StateBytes.Load()>>10, grew>>10, limit>>10, cfg.Counters.EvictedBlocks.Load(), cfg.Counters.EvictedRequests.Load())
	if grew > 2*limit+(4<<20) {
		t.Fatalf("heap grew %d KiB for a budget of %d KiB", grew>>10, limit>>10)
	}
	if len(h.Out) != 0 {
		t.Fatalf("%d records on a clean run", len(h.Out))
	}
	runtime.KeepAlive(h)
}
