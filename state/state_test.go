package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	must(k.Rollback())
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

func TestClosedReturnsErrClosed(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Keyspace("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, gerr := k.Get(nil, []byte("x"))
	_, ierr := k.Iter(nil, nil)
	_, oerr := k.Offsets()
	for name, err := range map[string]error{
		"Close": k.Close(), "Set": k.Set([]byte("x"), nil), "Delete": k.Delete([]byte("x")),
		"DeleteRange": k.DeleteRange([]byte("a"), []byte("b")), "Checkpoint": k.Checkpoint(nil),
		"Get": gerr, "Iter": ierr, "Offsets": oerr,
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s on a closed keyspace: %v", name, err)
		}
	}
	k.Rollback() // no-op, no panic
	if k.Size() != 0 {
		t.Error("size of a closed keyspace")
	}
	if _, err := s.Keyspace("b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close with an open keyspace: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Store.Close: %v", err)
	}
	if _, err := s.Keyspace("c"); !errors.Is(err, ErrClosed) {
		t.Errorf("Keyspace on a closed store: %v", err)
	}
}

func TestMemTablesShareTheBudget(t *testing.T) {
	for _, c := range []struct {
		opts Options
		open int
		want int64
	}{
		{Options{MemTableBytes: 64 << 20}, 0, 32 << 20},
		{Options{MemTableBytes: 64 << 20}, 3, 8 << 20},
		{Options{MemTableBytes: 64 << 20, MaxKeyspaces: 16}, 0, 2 << 20},
		{Options{MemTableBytes: 64 << 20, MaxKeyspaces: 2}, 7, 4 << 20},
		{Options{MemTableBytes: 64 << 20}, 1000, MinMemTableBytes},
		{Options{MemoryBudget: 256 << 20}, 0, 64 << 20}, // default: half the budget
	} {
		dir := t.TempDir()
		c.opts.Dir = dir
		s, err := Open(c.opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.open {
			s.mu.open[strconv.Itoa(i)] = nil // count only
		}
		if got := s.MemTableSize(); got != c.want {
			t.Errorf("%+v with %d open: memtable %d, want %d", c.opts, c.open, got, c.want)
		}
		s.mu.open = map[string]*Keyspace{}
		s.Close()
	}
	o := Options{Dir: "x", MemoryBudget: 64 << 20}
	o.EnsureDefaults()
	if o.CacheBytes != 32<<20 || o.MemTableBytes != 32<<20 {
		t.Errorf("defaults from a 64 MiB budget: cache %d, memtables %d", o.CacheBytes, o.MemTableBytes)
	}
}

func TestPebbleEventsAreLogged(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := eventListener(log)
	l.BackgroundError(errors.New("disk on fire"))
	pebbleLogger{log}.Errorf("compaction %d failed", 7)
	for _, want := range []string{"pebble background error", "disk on fire", "compaction 7 failed", "level=ERROR"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestCheckpointSurvivesSIGKILL: a child process checkpoints and kills
// itself with SIGKILL right after a checkpoint returns; the reopened
// keyspace has that checkpoint's offsets.
func TestCheckpointSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv("STATE_KILL_CHILD_DIR"); dir != "" {
		s, err := Open(Options{Dir: dir})
		if err != nil {
			os.Exit(2)
		}
		k, err := s.Keyspace("k")
		if err != nil {
			os.Exit(2)
		}
		for i := int64(1); i <= 50; i++ {
			if err := k.Set([]byte("v"), bytes.Repeat([]byte{byte(i)}, 4096)); err != nil {
				os.Exit(2)
			}
			if err := k.Checkpoint(Offsets{"in": {0: i}}); err != nil {
				os.Exit(2)
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for run := range 5 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointSurvivesSIGKILL$")
		cmd.Env = append(os.Environ(), "STATE_KILL_CHILD_DIR="+dir)
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: child ended with %v, not SIGKILL", run, err)
		}
		s, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.Keyspace("k")
		if err != nil {
			t.Fatal(err)
		}
		offs, err := k.Offsets()
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := k.Get(nil, []byte("v"))
		if offs["in"][0] != 50 || len(v) != 4096 || v[0] != 50 {
			t.Errorf("run %d: after SIGKILL the keyspace is at checkpoint %d, want the last one, 50", run, offs["in"][0])
		}
		s.Close()
	}
}

// BenchmarkCheckpoint measures one checkpoint of 100 writes of 1 KiB,
// synced (the default) and not.
func BenchmarkCheckpoint(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("NoSync=%v", noSync), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), NoSync: noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			k, err := s.Keyspace("k")
			if err != nil {
				b.Fatal(err)
			}
			v := make([]byte, 1024)
			for i := range b.N {
				for j := range 100 {
					k.Set([]byte(fmt.Sprintf("%d-%d", i, j)), v)
				}
				if err := k.Checkpoint(Offsets{"in": {0: int64(i)}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLargeCheckpointIsHeldUntilFlushed: a checkpoint's batch of half a
// memtable or more is kept by Pebble in memory until it is flushed;
// TakeFlush says how much and closes Done once it is on disk (the data is
// then in an sstable: the memtable is empty). A small batch goes into the
// memtable and has nothing to wait for. PendingBytes counts a batch by
// its buffer's capacity, never below its length.
func TestLargeCheckpointIsHeldUntilFlushed(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), MemTableBytes: 2 * MinMemTableBytes, MaxKeyspaces: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err := s.Keyspace("kv-0")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Set([]byte("small"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := k.Checkpoint(Offsets{"in": {0: 1}}); err != nil {
		t.Fatal(err)
	}
	if f := k.TakeFlush(); f.Done != nil || f.Bytes != 0 {
		t.Fatalf("a one-key checkpoint is held for a flush: %+v", f)
	}
	value := bytes.Repeat([]byte("v"), 4<<10)
	for i := range 512 { // 2 MiB: larger than the 1 MiB memtable
		if err := k.Set(fmt.Appendf(nil, "key%04d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	if p := k.PendingBytes(); p < 2<<20 || p > 8<<20 {
		t.Fatalf("PendingBytes %d for 2 MiB of writes", p)
	}
	if err := k.Checkpoint(Offsets{"in": {0: 2}}); err != nil {
		t.Fatal(err)
	}
	f := k.TakeFlush()
	if f.Done == nil || f.Bytes < 2<<20 {
		t.Fatalf("a 2 MiB checkpoint with 1 MiB memtables: TakeFlush %+v", f)
	}
	<-f.Done
	if m := k.db.Metrics(); m.Levels[0].NumFiles == 0 && m.Levels[6].NumFiles == 0 {
		t.Fatalf("Done closed with no sstable written: %s", m)
	}
	if v, ok, err := k.Get(nil, []byte("key0511")); err != nil || !ok || !bytes.Equal(v, value) {
		t.Fatalf("after the flush key0511 = %d bytes, %v, %v", len(v), ok, err)
	}
}

// An in-memory store behaves as one on disk while it is open — a keyspace
// closed and opened again finds its last checkpoint, pending writes are
// seen by iterators — writes nothing to disk, and forgets everything once
// closed.
func TestInMemory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.Keyspace("fuse-0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := k.Set([]byte{'k', byte('0' + i)}, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Checkpoint(Offsets{"in": {0: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete([]byte("k1")); err != nil {
		t.Fatal(err)
	}
	if err := k.Set([]byte("k9"), []byte("9")); err != nil {
		t.Fatal(err)
	}
	walk := func(k *Keyspace, lower, upper string) string {
		t.Helper()
		it, err := k.Iter([]byte(lower), []byte(upper))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for it.First(); it.Valid(); it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	if got, want := walk(k, "k0", "k:"), "k0=0 k2=2 k3=3 k4=4 k9=9"; got != want {
		t.Fatalf("pending walk = %q, want %q", got, want)
	}
	if got, want := walk(k, "k2", "k4"), "k2=2 k3=3"; got != want {
		t.Fatalf("bounded walk = %q, want %q", got, want)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k, err = s.Keyspace("fuse-0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := walk(k, "k", "l"), "k0=0 k1=1 k2=2 k3=3 k4=4"; got != want {
		t.Fatalf("after reopening = %q, want the checkpoint %q", got, want)
	}
	if o, err := k.Offsets(); err != nil || o["in"][0] != 5 {
		t.Fatalf("offsets after reopening = %v, %v", o, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wd, "state")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an in-memory store left %s/state on disk (%v)", wd, err)
	}
	s, err = Open(Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err = s.Keyspace("fuse-0")
	if err != nil {
		t.Fatal(err)
	}
	if got := walk(k, "k", "l"); got != "" {
		t.Fatalf("a new in-memory store has %q", got)
	}
}
