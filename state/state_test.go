package state

import (
	"testing"
)

func TestKeyspaceCheckpointRollbackReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Keyspace("fuse-0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keyspace("fuse-0"); err == nil {
		t.Fatal("a keyspace opened twice")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.Set([]byte("a"), []byte("1")))
	if v, ok, _ := k.Get(nil, []byte("a")); !ok || string(v) != "1" {
		t.Fatalf("pending write not visible: %q %v", v, ok)
	}
	must(k.Checkpoint(Offsets{"in": {0: 10}}))
	must(k.Set([]byte("b"), []byte("2")))
	must(k.DeleteRange([]byte("a"), []byte("b")))
	k.Rollback()
	if _, ok, _ := k.Get(nil, []byte("b")); ok {
		t.Fatal("rolled-back write still visible")
	}
	if v, ok, _ := k.Get(nil, []byte("a")); !ok || string(v) != "1" {
		t.Fatal("rolled-back delete took effect")
	}
	must(k.Set([]byte("c"), []byte("3")))
	must(k.Close()) // uncheckpointed writes are lost
	must(s.Close())

	s, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err = s.Keyspace("fuse-0")
	if err != nil {
		t.Fatal(err)
	}
	offs, err := k.Offsets()
	must(err)
	if offs["in"][0] != 10 {
		t.Fatalf("offsets after reopen = %v", offs)
	}
	if _, ok, _ := k.Get(nil, []byte("c")); ok {
		t.Fatal("a write after the last checkpoint survived a close")
	}
	must(k.DeleteRange([]byte("a"), []byte("z")))
	must(k.Checkpoint(Offsets{}))
	it, err := k.Iter([]byte("a"), []byte("z"))
	must(err)
	if it.First() {
		t.Fatalf("range delete left %q", it.Key())
	}
	it.Close()
	if err := s.Remove("fuse-0"); err == nil {
		t.Fatal("removed an open keyspace")
	}
	must(k.Close())
	must(s.Remove("fuse-0"))
}

func TestOptionsValidate(t *testing.T) {
	o := Options{MemoryBudget: 1}
	if err := o.Validate(); err == nil {
		t.Fatal("empty dir and tiny budget accepted")
	}
}
