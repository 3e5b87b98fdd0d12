package engine

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
	"github.com/braidlabs/braid/windows"
)

func twoSources(t *testing.T, cfg Config) *Harness {
	t.Helper()
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg.Store = store
	topo := Topology{Name: "cu", Partitions: 1, NewProcessor: func(*Task) (Processor, error) { return observer{}, nil },
		Inputs: []Input{{Topic: "dense"}, {Topic: "sparse"}}}
	h, err := NewHarness(cfg, topo, 0, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// stamped is a source record with timestamp sec seconds.
func stamped(sec int64) *kgo.Record { return &kgo.Record{Timestamp: time.Unix(sec, 0)} }

// TestCaughtUpSourceStopsHoldingTheWatermark: a caught-up source partition
// with no record for CaughtUpIdleness no longer holds the task's watermark;
// its next record holds it again until the next confirmation; a task that is
// not caught up waits for Idleness as before.
func TestCaughtUpSourceStopsHoldingTheWatermark(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := twoSources(t, Config{OutOfOrderness: time.Second, Idleness: 30 * time.Second})
	const none = windows.MinTime / 1e9 // step's want in seconds: MinTime
	step := func(d time.Duration, input int, r *kgo.Record, want int64) {
		t.Helper()
		h.SetNow(t0.Add(d))
		var err error
		if r != nil {
			err = h.Process(input, r)
		} else {
			err = h.Advance()
		}
		if err != nil {
			t.Fatal(err)
		}
		w := want * 1e9
		if want == none {
			w = windows.MinTime
		}
		if got := h.Watermark(); got != w {
			t.Fatalf("at +%v: watermark %v, want %d", d, got, w)
		}
	}
	step(0, 0, stamped(10), none) // the sparse input is unseen and not idle
	step(0, 1, stamped(5), 4)
	if h.Task().CaughtUp() {
		t.Fatal("caught up before any report")
	}
	step(time.Second, 0, stamped(12), 4) // not caught up: the sparse input holds
	h.MarkCaughtUp()
	if !h.Task().CaughtUp() {
		t.Fatal("not caught up after MarkCaughtUp")
	}
	// The sparse input has been quiet since +0: it no longer holds.
	step(1100*time.Millisecond, 0, nil, 11)
	if !h.Task().CaughtUp() {
		t.Fatal("not caught up with no record since the report")
	}
	step(1300*time.Millisecond, 0, stamped(14), 13)
	if h.Task().CaughtUp() {
		t.Fatal("caught up with a dense record since the report")
	}
	step(1700*time.Millisecond, 1, stamped(8), 13) // a sparse record holds it again...
	step(1800*time.Millisecond, 0, stamped(16), 13)
	step(2500*time.Millisecond, 0, nil, 13) // ...until confirmed caught up
	h.MarkCaughtUp()
	step(2500*time.Millisecond, 0, nil, 15) // every input caught up and quiet: the largest
	if !h.Task().CaughtUp() {
		t.Fatal("not caught up after MarkCaughtUp with no record since")
	}
	// An aborted checkpoint takes the position back: not caught up.
	if err := h.Abort(); err != nil {
		t.Fatal(err)
	}
	if h.Task().CaughtUp() {
		t.Fatal("caught up after an aborted checkpoint")
	}
}

// TestCaughtUpIdlenessOff: a negative CaughtUpIdleness leaves a caught-up
// partition to the regular Idleness.
func TestCaughtUpIdlenessOff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := twoSources(t, Config{OutOfOrderness: time.Second, Idleness: 30 * time.Second, CaughtUpIdleness: -1})
	if err := h.Process(0, stamped(10)); err != nil {
		t.Fatal(err)
	}
	if err := h.Process(1, stamped(5)); err != nil {
		t.Fatal(err)
	}
	h.MarkCaughtUp()
	h.SetNow(t0.Add(10 * time.Second))
	if err := h.Process(0, stamped(20)); err != nil {
		t.Fatal(err)
	}
	if got := h.Watermark(); got != 4e9 {
		t.Fatalf("watermark %d with caught-up idleness off, want the sparse input's 4s", got)
	}
}

// TestLiveNeedsEveryTask: an instance is live while its task is caught up
// now and every other task of the instance has been caught up within the
// last checkpoint interval; one task reading a backlog for longer makes it
// not live.
func TestLiveNeedsEveryTask(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := twoSources(t, Config{CheckpointInterval: 5 * time.Second})
	if h.Task().Live() {
		t.Fatal("live before any report of the task's ends")
	}
	h.MarkCaughtUp()
	if !h.Task().Live() {
		t.Fatal("not live: the only task is caught up")
	}
	sibling := &published{}
	h.e.mu.Lock()
	h.e.mu.tasks[1] = sibling
	h.e.mu.Unlock()
	if h.Task().Live() {
		t.Fatal("live while a sibling task was never caught up")
	}
	sibling.caughtUpAt.Store(t0.Add(-4 * time.Second).UnixNano())
	if !h.Task().Live() {
		t.Fatal("not live: the sibling was caught up 4s ago, within the 5s interval")
	}
	sibling.caughtUpAt.Store(t0.Add(-6 * time.Second).UnixNano())
	if h.Task().Live() {
		t.Fatal("live while the sibling has been behind for 6s")
	}
	sibling.caughtUp.Store(true)
	if !h.Task().Live() {
		t.Fatal("not live: the sibling is caught up now")
	}
	if err := h.Process(0, stamped(10)); err != nil {
		t.Fatal(err)
	}
	if h.Task().Live() {
		t.Fatal("live although the task itself has a record since its last report")
	}
}
