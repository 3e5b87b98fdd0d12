package kvref

import (
	"math/rand"
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// A hand-built pool: 2 layers of 16 blocks of 64 bytes (16 tokens of 4
// bytes), layer-major: block b of layer L at L×1024 + b×64.
const (
	tBlockBytes = 64
	tBlocks     = 16
	tLayers     = 2
	tLayerSize  = tBlocks * tBlockBytes
)

func slot(b, layer int) int64 { return int64(layer*tLayerSize + b*tBlockBytes) }

// script builds an event sequence on GPU 0, 1 µs apart, and applies it.
type script struct {
	t  *testing.T
	m  *Model
	at time.Time
}

func newScript(t *testing.T) *script {
	return &script{t: t, m: New(), at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (s *script) ev(op, req string, b int) simulator.KVEvent {
	s.at = s.at.Add(time.Microsecond)
	return simulator.KVEvent{Time: s.at, GPU: 0, Op: op, Block: b, RefCnt: -1, Layer: -1, LayerCount: tLayers,
		Addr: -1, Bytes: -1, LayerBase: -1, LayerSize: -1, RequestID: req}
}

func (s *script) block(op, req string, b int) *script {
	s.m.Apply(s.ev(op, req, b))
	return s
}

func (s *script) alloc(req string, b int) *script { return s.block(simulator.OpAlloc, req, b) }
func (s *script) free(req string, b int) *script  { return s.block(simulator.OpFree, req, b) }
func (s *script) evict(b int) *script             { return s.block(simulator.OpEvict, "", b) }

func (s *script) hit(req string, b int, hash string) *script {
	e := s.ev(simulator.OpAlloc, req, b)
	e.Hash = hash
	s.m.Apply(e)
	return s
}

func (s *script) zero(b, layer int) *script {
	e := s.ev(simulator.OpZero, "", b)
	e.Layer = layer
	s.m.Apply(e)
	return s
}

// rw is a write or read by req for block b, layer layer, of n bytes at addr.
func (s *script) rw(op, req string, b, layer int, addr, n int64, hash string) *script {
	e := s.ev(op, req, b)
	e.Layer, e.Addr, e.Bytes, e.Hash = layer, addr, n, hash
	e.LayerBase, e.LayerSize = int64(layer*tLayerSize), tLayerSize
	s.m.Apply(e)
	return s
}

// fill writes req's block b in every layer, the whole slot, with hash on
// each layer's (filling) write.
func (s *script) fill(req string, b int, hash string) *script {
	for l := 0; l < tLayers; l++ {
		s.rw(simulator.OpWrite, req, b, l, slot(b, l), tBlockBytes, hash)
	}
	return s
}

// readAll reads req's block b, every layer, the whole slot.
func (s *script) readAll(req string, b int) *script {
	for l := 0; l < tLayers; l++ {
		s.rw(simulator.OpRead, req, b, l, slot(b, l), tBlockBytes, "")
	}
	return s
}

func (s *script) clean(reqs ...string) {
	s.t.Helper()
	for _, r := range reqs {
		if p, ok := s.m.Polluted()[r]; ok {
			s.t.Errorf("%s polluted: %+v", r, p)
		}
	}
}

func (s *script) polluted(req, via, from string) Pollution {
	s.t.Helper()
	p, ok := s.m.Polluted()[req]
	if !ok {
		s.t.Errorf("%s not polluted", req)
		return p
	}
	if p.Via != via || p.From != from {
		s.t.Errorf("%s: %+v, want via %s from %q", req, p, via, from)
	}
	return p
}

func (s *script) count(n int) {
	s.t.Helper()
	if got := len(s.m.Polluted()); got != n {
		s.t.Errorf("%d polluted, want %d: %v", got, n, s.m.Polluted())
	}
}

func TestOwnWriteReadClean(t *testing.T) {
	s := newScript(t)
	s.alloc("A", 3).rw(simulator.OpWrite, "A", 3, 0, slot(3, 0), 24, "").rw(simulator.OpRead, "A", 3, 0, slot(3, 0), 24, "")
	s.fill("A", 3, "h").readAll("A", 3)
	s.clean("A")
	s.count(0)
}

func TestNeverWrittenClean(t *testing.T) {
	s := newScript(t)
	s.alloc("A", 5).readAll("A", 5)
	s.alloc("B", 6).rw(simulator.OpWrite, "B", 6, 0, slot(6, 0), 16, "").rw(simulator.OpRead, "B", 6, 0, slot(6, 0), 48, "")
	s.count(0)
}

func TestPrefixHitClean(t *testing.T) {
	s := newScript(t)
	s.alloc("W", 2).fill("W", 2, "aa").readAll("W", 2)
	s.hit("R1", 2, "aa").readAll("R1", 2) // shared while W is live
	s.free("W", 2).free("R1", 2)
	s.hit("R2", 2, "aa").readAll("R2", 2) // from the cache
	s.count(0)
}

func TestHitStaleHashForeign(t *testing.T) {
	s := newScript(t)
	s.alloc("W", 2).fill("W", 2, "aa").free("W", 2).evict(2)
	s.alloc("X", 2).rw(simulator.OpWrite, "X", 2, 0, slot(2, 0), 32, "").free("X", 2)
	s.hit("R", 2, "aa").rw(simulator.OpRead, "R", 2, 1, slot(2, 1), tBlockBytes, "") // layer 1: still W's "aa" content
	s.clean("R")
	s.rw(simulator.OpRead, "R", 2, 0, slot(2, 0), tBlockBytes, "")
	p := s.polluted("R", Direct, "X")
	if p.Block != 2 || p.Layer != 0 {
		t.Errorf("%+v", p)
	}
	s.count(1)
	// a hit on a hash the block's content does not carry at all
	s.alloc("Y", 7).fill("Y", 7, "").free("Y", 7)
	s.hit("Z", 7, "bb").readAll("Z", 7)
	s.polluted("Z", Direct, "Y")
}

func TestRecycledReadBeforeWriteForeign(t *testing.T) {
	s := newScript(t)
	s.alloc("W", 4).fill("W", 4, "").readAll("W", 4).free("W", 4)
	s.alloc("R", 4).readAll("R", 4)
	s.polluted("R", Direct, "W")
	s.clean("W")
	// its own earlier tenure is not its content either
	s.alloc("V", 9).fill("V", 9, "").free("V", 9).alloc("V", 9).readAll("V", 9)
	s.polluted("V", Direct, "V")
}

func TestZeroThenReadClean(t *testing.T) {
	s := newScript(t)
	s.alloc("W", 4).fill("W", 4, "").free("W", 4).zero(4, -1)
	s.alloc("R", 4).readAll("R", 4)
	s.clean("R")
	// a write after the zero overrides it
	s.free("R", 4).alloc("X", 4).rw(simulator.OpWrite, "X", 4, 0, slot(4, 0), 8, "").free("X", 4)
	s.alloc("Q", 4).rw(simulator.OpRead, "Q", 4, 0, slot(4, 0), tBlockBytes, "")
	s.polluted("Q", Direct, "X")
	// a zero of one layer zeroes only that layer
	s.alloc("W2", 5).fill("W2", 5, "").free("W2", 5).zero(5, 1)
	s.alloc("R2", 5).rw(simulator.OpRead, "R2", 5, 1, slot(5, 1), tBlockBytes, "")
	s.clean("R2")
	s.rw(simulator.OpRead, "R2", 5, 0, slot(5, 0), tBlockBytes, "")
	s.polluted("R2", Direct, "W2")
	// a ranged zero
	s.alloc("W3", 6).fill("W3", 6, "").free("W3", 6)
	e := s.ev(simulator.OpZero, "", 6)
	e.Layer, e.Addr, e.Bytes = 0, slot(6, 0), tBlockBytes
	s.m.Apply(e)
	s.alloc("R3", 6).rw(simulator.OpRead, "R3", 6, 0, slot(6, 0), tBlockBytes, "")
	s.clean("R3")
	s.rw(simulator.OpRead, "R3", 6, 1, slot(6, 1), tBlockBytes, "")
	s.polluted("R3", Direct, "W3")
}

func TestSwap(t *testing.T) {
	s := newScript(t)
	s.alloc("R", 3).fill("R", 3, "").block(simulator.OpSwapOut, "R", 3)
	// meanwhile another request uses the block
	s.alloc("X", 3).fill("X", 3, "").readAll("X", 3).free("X", 3)
	s.block(simulator.OpSwapIn, "R", 3).readAll("R", 3)
	s.clean("R", "X")
	// R writes on after the swap-in and reads it
	s.rw(simulator.OpWrite, "R", 3, 0, slot(3, 0), 8, "").rw(simulator.OpRead, "R", 3, 0, slot(3, 0), tBlockBytes, "")
	s.clean("R")
	s.free("R", 3)
	// a new owner that writes its range fully, then reads it: clean
	s.alloc("Q", 3).fill("Q", 3, "").readAll("Q", 3).free("Q", 3)
	s.clean("Q")
	// swapped in again elsewhere, freed; a new owner reading unwritten: R's content
	s.alloc("S", 8).fill("S", 8, "").block(simulator.OpSwapOut, "S", 8).block(simulator.OpSwapIn, "S", 11).readAll("S", 11).free("S", 11)
	s.clean("S")
	s.alloc("N", 11).readAll("N", 11)
	s.polluted("N", Direct, "S")
	// a swap-in replaces a live holder's content
	s.alloc("L", 12).fill("L", 12, "").block(simulator.OpSwapIn, "S", 12).readAll("L", 12)
	s.polluted("L", Direct, "S")
	s.count(2)
}

func TestSwapSavesForeignContent(t *testing.T) {
	s := newScript(t)
	// X's write lands in R's block 3 (layer 1) inside what R wrote; R
	// swaps out, in elsewhere, and reads: X's bytes came back with its content
	s.alloc("R", 2).alloc("R", 3).fill("R", 2, "").fill("R", 3, "").readAll("R", 2).readAll("R", 3)
	s.alloc("X", 5).rw(simulator.OpWrite, "X", 5, 1, slot(3, 1)+16, 8, "")
	s.block(simulator.OpSwapOut, "R", 2).block(simulator.OpSwapOut, "R", 3)
	s.block(simulator.OpSwapIn, "R", 9).block(simulator.OpSwapIn, "R", 10)
	s.readAll("R", 9)
	s.clean("R")
	// twice swapped, unread in between: still X's
	s.block(simulator.OpSwapOut, "R", 9).block(simulator.OpSwapOut, "R", 10)
	s.block(simulator.OpSwapIn, "R", 11).block(simulator.OpSwapIn, "R", 12)
	s.rw(simulator.OpRead, "R", 12, 0, slot(12, 0), tBlockBytes, "")
	s.clean("R")
	s.rw(simulator.OpRead, "R", 12, 1, slot(12, 1), tBlockBytes, "")
	p := s.polluted("R", Direct, "X")
	if p.Block != 12 || p.Layer != 1 {
		t.Errorf("%+v", p)
	}
	// a foreign write outside what the holder wrote or read is not saved as its
	s.alloc("S", 4).rw(simulator.OpWrite, "S", 4, 0, slot(4, 0), 16, "").rw(simulator.OpRead, "S", 4, 0, slot(4, 0), 16, "")
	s.rw(simulator.OpWrite, "X", 5, 0, slot(4, 0)+32, 8, "")
	s.block(simulator.OpSwapOut, "S", 4).block(simulator.OpSwapIn, "S", 6).rw(simulator.OpRead, "S", 6, 0, slot(6, 0), 16, "")
	s.clean("S")
}

func TestDoubleOwnership(t *testing.T) {
	s := newScript(t)
	s.alloc("A", 6).alloc("B", 6)
	s.rw(simulator.OpWrite, "A", 6, 0, slot(6, 0), 32, "").rw(simulator.OpWrite, "B", 6, 0, slot(6, 0)+32, 32, "")
	s.rw(simulator.OpRead, "A", 6, 0, slot(6, 0), 32, "").rw(simulator.OpRead, "B", 6, 0, slot(6, 0)+32, 32, "")
	s.clean("A", "B")
	s.rw(simulator.OpRead, "A", 6, 0, slot(6, 0), tBlockBytes, "")
	s.polluted("A", Direct, "B")
	s.rw(simulator.OpRead, "B", 6, 0, slot(6, 0), tBlockBytes, "")
	s.polluted("B", Direct, "A")
	// a free of a block one does not hold changes nothing; the real
	// owner's content stays its own
	s2 := newScript(t)
	s2.alloc("C", 7).fill("C", 7, "").free("D", 7).readAll("C", 7)
	s2.count(0)
}

func TestWriteIntoAnotherSlot(t *testing.T) {
	s := newScript(t)
	s.alloc("A", 1).alloc("A", 2).alloc("B", 3)
	s.fill("A", 1, "").fill("A", 2, "").fill("B", 3, "")
	// A's write for its block 1 lands in block 3's slot, then in its own block 2's
	s.rw(simulator.OpWrite, "A", 1, 0, slot(3, 0)+8, 8, "").rw(simulator.OpWrite, "A", 1, 0, slot(2, 0), 8, "")
	s.readAll("A", 1)
	s.clean("A")
	s.readAll("B", 3)
	s.polluted("B", Direct, "A")
	s.readAll("A", 2)
	p := s.polluted("A", Direct, "A")
	if p.Block != 2 || p.Layer != 0 {
		t.Errorf("%+v", p)
	}
}

func TestWriteIntoNextLayer(t *testing.T) {
	s := newScript(t)
	s.alloc("A", 4)
	// layer 0's write lands in layer 1's region of its own block
	s.rw(simulator.OpWrite, "A", 4, 0, slot(4, 1), tBlockBytes, "")
	s.rw(simulator.OpRead, "A", 4, 0, slot(4, 0), tBlockBytes, "") // never written: clean
	s.clean("A")
	s.rw(simulator.OpRead, "A", 4, 1, slot(4, 1), tBlockBytes, "")
	s.polluted("A", Direct, "A")
}

func TestProcessWriteInNullBlock(t *testing.T) {
	s := newScript(t)
	s.rw(simulator.OpWrite, "", 0, 0, slot(0, 0), tBlockBytes, "") // CUDA-graph capture
	s.alloc("A", 1).fill("A", 1, "").readAll("A", 1)
	s.clean("A")
	s.rw(simulator.OpRead, "A", 0, 0, slot(0, 0), 8, "") // padding reads block 0
	s.polluted("A", Direct, "")
}

func TestPropagation(t *testing.T) {
	s := newScript(t)
	s.alloc("X", 2).fill("X", 2, "").free("X", 2)
	// R's table: 1 (position 0), 2 (1), 3 (2)
	s.alloc("R", 1).alloc("R", 2).alloc("R", 3)
	s.fill("R", 1, "")
	// block 2's content is X's: R reads residue at position 1
	s.rw(simulator.OpRead, "R", 2, 0, slot(2, 0), 8, "")
	s.count(1)
	s.polluted("R", Direct, "X")
	// R's later writes: from its last block (3, position 2) on they are
	// tainted; block 1 (position 0) stays clean
	s.fill("R", 1, "h1").fill("R", 3, "h3").free("R", 1).free("R", 2).free("R", 3)
	s.hit("Q1", 1, "h1").readAll("Q1", 1)
	s.clean("Q1")
	s.hit("Q", 3, "h3").readAll("Q", 3)
	s.polluted("Q", Propagated, "R")
	// a chain: Q, polluted with block 3 last, writes a new block; a hit on it
	s.alloc("Q", 5).fill("Q", 5, "h5").free("Q", 5).free("Q", 3)
	s.hit("P", 5, "h5").readAll("P", 5)
	s.polluted("P", Propagated, "Q")
	// and P's writes after that are tainted too: a second hop
	s.alloc("P", 6).fill("P", 6, "h6").free("P", 6)
	s.hit("O", 6, "h6").readAll("O", 6)
	s.polluted("O", Propagated, "P")
	// foreign wins over propagated, within a read and across reads
	s.hit("U", 3, "h3").alloc("U", 10)
	s.rw(simulator.OpRead, "U", 3, 0, slot(3, 0), tBlockBytes, "")
	s.polluted("U", Propagated, "R")
	s.readAll("U", 10) // never written
	s.alloc("Y", 10).fill("Y", 10, "").free("Y", 10).free("U", 10).alloc("U", 10).readAll("U", 10)
	s.polluted("U", Direct, "Y")
	reads, total := s.m.Reads()
	if total != len(reads) || total < 6 {
		t.Errorf("reads %d of %d", len(reads), total)
	}
}

func TestTaintedOwnBlockPosition(t *testing.T) {
	// polluted with 2 blocks: a write into position 0 is clean, into a block
	// it does not hold is tainted
	s := newScript(t)
	s.alloc("W", 7).fill("W", 7, "").free("W", 7)
	s.alloc("R", 1).alloc("R", 7).readAll("R", 7)
	s.polluted("R", Direct, "W")
	s.fill("R", 1, "a1").rw(simulator.OpWrite, "R", 12, 0, slot(12, 0), tBlockBytes, "")
	s.alloc("B", 12).rw(simulator.OpRead, "B", 12, 0, slot(12, 0), tBlockBytes, "")
	s.polluted("B", Direct, "R") // foreign anyway
	s.free("R", 1).hit("C", 1, "a1").readAll("C", 1)
	s.clean("C")
}

func TestRecomputeAfterPollution(t *testing.T) {
	// R is polluted in decode at its first block; a recompute preemption frees
	// everything and rewrites it: the blocks before its last one at the
	// pollution are recomputed from its tokens (clean), the last one and
	// those after are what it generated since (tainted)
	s := newScript(t)
	s.alloc("X", 1).fill("X", 1, "").free("X", 1)
	s.alloc("R", 4).alloc("R", 1).alloc("R", 5)
	s.fill("R", 4, "p0").fill("R", 5, "")
	s.rw(simulator.OpRead, "R", 1, 0, slot(1, 0), 8, "")
	s.polluted("R", Direct, "X")
	s.free("R", 4).free("R", 1).free("R", 5)
	s.alloc("R", 6).alloc("R", 7).alloc("R", 8).fill("R", 6, "p0").fill("R", 7, "p1").fill("R", 8, "p2").free("R", 6).free("R", 7).free("R", 8)
	s.hit("A", 6, "p0").readAll("A", 6).hit("B", 7, "p1").readAll("B", 7)
	s.clean("A", "B")
	s.hit("C", 8, "p2").readAll("C", 8)
	s.polluted("C", Propagated, "R")
}

func TestWriteIntoHitBlock(t *testing.T) {
	// a hit holder's write without the hash (padding junk) is foreign to
	// every reader of the shared block, itself included
	s := newScript(t)
	s.alloc("W", 2).fill("W", 2, "hh").free("W", 2)
	s.hit("A", 2, "hh").hit("B", 2, "hh")
	s.rw(simulator.OpWrite, "A", 2, 0, slot(2, 0)+56, 8, "")
	s.readAll("A", 2).readAll("B", 2)
	s.polluted("A", Direct, "A")
	s.polluted("B", Direct, "A")
	// one that carries the hash (a recomputation of the same content) is not
	s2 := newScript(t)
	s2.alloc("W", 2).fill("W", 2, "hh").free("W", 2)
	s2.hit("A", 2, "hh").fill("A", 2, "hh").readAll("A", 2).free("A", 2)
	s2.hit("B", 2, "hh").readAll("B", 2)
	s2.count(0)
}

func TestRecomputeRereadsOwnTaint(t *testing.T) {
	// polluted in prefill before its writes (at position 1, its last block
	// at 3): its blocks from position 1 on are tainted
	pre := func() *script {
		s := newScript(t)
		s.alloc("X", 1).fill("X", 1, "").free("X", 1)
		s.alloc("R", 4).alloc("R", 1).alloc("R", 5).alloc("R", 9)
		s.readAll("R", 1)
		s.polluted("R", Direct, "X")
		s.fill("R", 4, "a0").fill("R", 1, "a1").fill("R", 5, "a2").fill("R", 9, "")
		s.free("R", 4).free("R", 1).free("R", 5).free("R", 9)
		s.hit("Q", 1, "a1").readAll("Q", 1)
		s.polluted("Q", Propagated, "R")
		return s
	}
	// a recompute that reads only its clean block: rewrites below position 3 are clean
	s := pre()
	s.hit("R", 4, "a0").alloc("R", 6).alloc("R", 8).readAll("R", 4).fill("R", 6, "b1").fill("R", 8, "b2").free("R", 6).free("R", 8)
	s.hit("P", 8, "b2").readAll("P", 8)
	s.clean("P")
	// one that hits its own tainted block again at position 1: tainted from there
	s = pre()
	s.hit("R", 4, "a0").hit("R", 1, "a1").alloc("R", 6).readAll("R", 4).readAll("R", 1).fill("R", 6, "b2").free("R", 6)
	s.hit("O", 6, "b2").readAll("O", 6)
	s.polluted("O", Propagated, "R")
}

// The interval map against a byte array.
func TestMemoryAgainstBytes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const size = 3 * (1 << pageBits)
	var ref [size]*label
	m := memory{pages: map[int64]*page{}}
	labels := make([]*label, 5)
	for i := range labels {
		labels[i] = &label{writer: string(rune('a' + i))}
	}
	for it := 0; it < 20000; it++ {
		lo := rng.Int63n(size)
		hi := lo + 1 + rng.Int63n(min(size-lo, 600))
		if it%3 == 0 {
			l := labels[rng.Intn(len(labels))]
			m.set(lo, hi, l)
			for k := lo; k < hi; k++ {
				ref[k] = l
			}
			continue
		}
		var got []*label
		m.walk(lo, hi, func(l *label) { got = append(got, l) })
		var want []*label
		for k := lo; k < hi; k++ {
			if len(want) == 0 || want[len(want)-1] != ref[k] || (k&(1<<pageBits-1)) == 0 {
				want = append(want, ref[k])
			}
		}
		// walk may cut a run at a page boundary or between equal labels;
		// compare the runs with consecutive duplicates removed
		if !equalRuns(got, want) {
			t.Fatalf("walk [%d,%d): %v, want %v", lo, hi, got, want)
		}
	}
	for _, pg := range m.pages {
		for i := 1; i < len(pg.segs); i++ {
			a, b := pg.segs[i-1], pg.segs[i]
			if a.hi > b.lo || a.lo >= a.hi || a.hi == b.lo && a.l == b.l {
				t.Fatalf("segments %v %v", a, b)
			}
		}
	}
}

func equalRuns(a, b []*label) bool {
	dedup := func(x []*label) []*label {
		var out []*label
		for _, l := range x {
			if len(out) == 0 || out[len(out)-1] != l {
				out = append(out, l)
			}
		}
		return out
	}
	a, b = dedup(a), dedup(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
