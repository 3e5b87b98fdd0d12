package state

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// waitFlushed waits until k has no memtable waiting for its flush.
func waitFlushed(t *testing.T, k *Keyspace) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for k.db.Metrics().MemTable.Count > 1 {
		if time.Now().After(deadline) {
			t.Fatal("a memtable still waits for its flush after 10s")
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// TestMakeRoomKeepsRotationsOutOfCheckpoints: Pebble rotates a full
// memtable inside the commit that overflows it, and the rotation syncs the
// old write-ahead log and its directory. Checkpoints of 80 KB into 2 MiB
// memtables fill one every ~25 checkpoints: without MakeRoom the rotations
// happen inside checkpoints; with MakeRoom between checkpoints (once the
// last flush has ended, as it has seconds later), none does, and the state
// reads back whole.
func TestMakeRoomKeepsRotationsOutOfCheckpoints(t *testing.T) {
	for _, makeRoom := range []bool{false, true} {
		t.Run(fmt.Sprintf("makeRoom=%v", makeRoom), func(t *testing.T) {
			s, err := Open(Options{Dir: t.TempDir(), MemoryBudget: 16 << 20, MemTableBytes: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			k, err := s.Keyspace("ks")
			if err != nil {
				t.Fatal(err)
			}
			const checkpoints, perCheckpoint = 120, 20
			value := bytes.Repeat([]byte{7}, 4<<10)
			inside := 0
			for c := range checkpoints {
				for i := range perCheckpoint {
					if err := k.Set(fmt.Appendf(nil, "k%05d", c*perCheckpoint+i), value); err != nil {
						t.Fatal(err)
					}
				}
				before := k.wals.Load()
				if err := k.Checkpoint(Offsets{"in": {0: int64(c)}}); err != nil {
					t.Fatal(err)
				}
				if k.wals.Load() != before {
					inside++
				}
				if makeRoom {
					// Checkpoints come seconds apart: the flush of the
					// memtable before has ended (MakeRoom leaves a
					// rotation that would wait for it to the commit).
					waitFlushed(t, k)
					if err := k.MakeRoom(); err != nil {
						t.Fatal(err)
					}
				}
			}
			rotations := k.wals.Load()
			t.Logf("memtable %d bytes: %d rotations, %d inside a checkpoint", k.memTable, rotations, inside)
			if rotations < 3 {
				t.Fatalf("%d rotations: the test writes too little to fill memtables", rotations)
			}
			if makeRoom && inside > 0 {
				t.Errorf("%d of %d rotations inside a checkpoint, want none", inside, rotations)
			}
			if !makeRoom && inside < 3 {
				t.Errorf("without MakeRoom %d rotations inside a checkpoint, want them all (the case MakeRoom is for)", inside)
			}
			for i := range checkpoints * perCheckpoint {
				v, ok, err := k.Get(nil, fmt.Appendf(nil, "k%05d", i))
				if err != nil || !ok || !bytes.Equal(v, value) {
					t.Fatalf("key %d: ok %v, err %v, %d bytes", i, ok, err, len(v))
				}
			}
		})
	}
}
