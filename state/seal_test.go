package state

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSealedCheckpointsAgainstAModel runs random writes, seals, background
// commits (absorbed while in flight or after they ended), settles and
// rollbacks against a plain map model of what reads
// see and of what the last committed checkpoint holds, then reopens the
// keyspace and compares what is on disk with the last commit.
func TestSealedCheckpointsAgainstAModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sealModel(t, seed, 16) })
	}
	// Values of up to 256 KiB: batches over half a memtable, which
	// Pebble keeps as memtables of their own, flushes and compactions.
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("large/%d", seed), func(t *testing.T) { sealModel(t, seed, 256<<10) })
	}
}

func sealModel(t *testing.T, seed uint64, maxValue int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MemoryBudget: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Keyspace("k")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	key := func() string { return fmt.Sprintf("k%02d", rng.IntN(40)) }
	view := map[string]string{}      // what reads must see
	sealed := map[string]string(nil) // the sealed checkpoint, not yet committed
	committed := map[string]string{} // the last committed checkpoint
	var sealedOffs, committedOffs int64
	check := func(step int) {
		t.Helper()
		for i := range 40 {
			kk := fmt.Sprintf("k%02d", i)
			v, ok, err := k.Get(nil, []byte(kk))
			must(err)
			if w, wok := view[kk]; ok != wok || string(v) != w {
				t.Fatalf("step %d: %s = %q %v, model %q %v", step, kk, v, ok, w, wok)
			}
		}
		it, err := k.Iter([]byte("k"), []byte("l"))
		must(err)
		n := 0
		for it.First(); it.Valid(); it.Next() {
			if view[string(it.Key())] != string(it.Value()) {
				t.Fatalf("step %d: iterator at %s = %q, model %q", step, it.Key(), it.Value(), view[string(it.Key())])
			}
			n++
		}
		must(it.Close())
		if n != len(view) {
			t.Fatalf("step %d: iterator saw %d keys, model %d", step, n, len(view))
		}
	}
	for step := range 600 {
		switch r := rng.IntN(100); {
		case r < 50:
			kk, v := key(), fmt.Sprintf("v%d-%s", step, strings.Repeat("x", rng.IntN(maxValue)))
			must(k.Set([]byte(kk), []byte(v)))
			view[kk] = v
		case r < 62:
			kk := key()
			must(k.Delete([]byte(kk)))
			delete(view, kk)
		case r < 66:
			a, b := key(), key()
			if a > b {
				a, b = b, a
			}
			must(k.DeleteRange([]byte(a), []byte(b)))
			for kk := range view {
				if kk >= a && kk < b {
					delete(view, kk)
				}
			}
		case r < 76 && sealed == nil:
			sealedOffs = int64(step)
			must(k.Seal(Offsets{"in": {0: sealedOffs}}))
			sealed = maps.Clone(view)
		case r < 86 && sealed != nil:
			must(k.CommitSealed())
			committed, sealed, committedOffs = sealed, nil, sealedOffs
		case r < 90:
			if rng.IntN(2) == 0 && k.Committing() != nil {
				<-k.Committing()
			}
			must(k.Absorb())
		case r < 93:
			must(k.Settle(rng.IntN(2) == 0))
		case r < 96:
			must(k.Rollback())
			view, sealed = maps.Clone(committed), nil
		default:
			check(step)
		}
		if step%50 == 0 {
			check(step)
		}
	}
	check(-1)
	if sealed != nil {
		must(k.CommitSealed())
		committed, committedOffs = sealed, sealedOffs
	}
	must(k.Set([]byte("k99"), []byte("lost"))) // after the last checkpoint
	must(k.Close())
	must(s.Close())

	s, err = Open(Options{Dir: dir, MemoryBudget: 16 << 20})
	must(err)
	defer s.Close()
	k, err = s.Keyspace("k")
	must(err)
	defer k.Close()
	offs, err := k.Offsets()
	must(err)
	if committedOffs > 0 && offs["in"][0] != committedOffs {
		t.Fatalf("offsets after reopen %v, last committed %d", offs, committedOffs)
	}
	view = committed
	check(-2)
}

// openKeyspace opens a store with opts and its keyspace "k", both closed
// when the test ends.
func openKeyspace(t *testing.T, opts Options) *Keyspace {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	k, err := s.Keyspace("k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// TestCheckpointRefusesAPendingSeal: the two ways of checkpointing do not
// mix.
func TestCheckpointRefusesAPendingSeal(t *testing.T) {
	k := openKeyspace(t, Options{InMemory: true, MemoryBudget: 16 << 20})
	if err := k.CommitSealed(); err == nil {
		t.Fatal("CommitSealed without Seal succeeded")
	}
	if err := k.Seal(Offsets{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Checkpoint(Offsets{}); err == nil {
		t.Fatal("Checkpoint over a sealed checkpoint succeeded")
	}
}

// TestCommittingIsNotPending: while CommitSealed's commit is in flight the
// sealed checkpoint is not pending (no checkpoint can lower it) but
// committing, and once it is absorbed it is neither; what was written
// after Seal stays pending throughout.
func TestCommittingIsNotPending(t *testing.T) {
	k := openKeyspace(t, Options{Dir: t.TempDir(), MemoryBudget: 16 << 20})
	value := strings.Repeat("v", 1000)
	for i := range 200 {
		if err := k.Set(fmt.Appendf(nil, "a%03d", i), []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Seal(Offsets{"in": {0: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := k.Set([]byte("after"), []byte(value)); err != nil {
		t.Fatal(err)
	}
	sealed := k.PendingBytes()
	if err := k.CommitSealed(); err != nil {
		t.Fatal(err)
	}
	pending, committing := k.PendingBytes(), k.CommittingBytes()
	if committing < 200*1000 || pending >= sealed-200*1000 || pending < 1000 {
		t.Fatalf("in flight: pending %d (of %d before), committing %d; want the 200 KB sealed counted as committing only", pending, sealed, committing)
	}
	<-k.Committing()
	if err := k.Absorb(); err != nil {
		t.Fatal(err)
	}
	if c := k.CommittingBytes(); c != 0 || k.Committing() != nil {
		t.Fatalf("absorbed: committing %d", c)
	}
	// PendingBytes counts the batch's capacity, and a batch from Pebble's
	// pool may keep a buffer of up to 1 MB from an earlier use: what is
	// left is checked by its entries.
	if n, l := k.batch.Count(), len(k.batch.Repr()); n != 1 || l > batchHeaderLen+1100 {
		t.Fatalf("absorbed: %d entries in %d bytes pending, want the write after Seal alone", n, l)
	}
	if p := k.PendingBytes(); p < 1000 {
		t.Fatalf("absorbed: pending %d, want the write after Seal", p)
	}
}
