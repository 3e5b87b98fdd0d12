package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// requester counts records as counter does and asks for a checkpoint on
// each: the first record at 300ms after it was read, later ones at the
// time the first asked for (a request met already), the record with value
// lastValue at 100ms after it was read.
type requester struct {
	counter
	mu    sync.Mutex
	first int64 // the first request, unix ns
	asked []int64
}

const lastValue = 99

func (q *requester) Process(t *Task, r *kgo.Record, input int) error {
	if err := q.counter.Process(t, r, input); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at := q.first
	switch {
	case string(r.Value) == "99":
		at = t.Now().Add(100 * time.Millisecond).UnixNano()
	case q.first == 0:
		q.first = t.Now().Add(300 * time.Millisecond).UnixNano()
		at = q.first
	}
	q.asked = append(q.asked, at)
	t.RequestCheckpoint(at)
	return nil
}

// TestRequestedCheckpoint: a task's request brings a checkpoint long
// before the regular one (a minute away), not before the time asked; it
// commits what was read, as a regular checkpoint does; requests met
// already (at or before a checkpoint's start) bring none; a new request
// comes RequestSpacing after the last requested checkpoint at the
// earliest.
func TestRequestedCheckpoint(t *testing.T) {
	f := newFakeEnv(t, 1)
	cfg := f.config(t, t.TempDir(), "req-0")
	cfg.CheckpointInterval = time.Minute
	var mu sync.Mutex
	var starts []time.Time
	cfg.OnCheckpoint = func(ci CheckpointInfo) {
		mu.Lock()
		defer mu.Unlock()
		if !ci.FollowUp {
			starts = append(starts, time.Now().Add(-ci.Cycle))
		}
	}
	q := &requester{counter: counter{out: f.out}}
	topo := f.topology()
	topo.NewProcessor = func(*Task) (Processor, error) { return q, nil }
	e, err := New(cfg, topo)
	if err != nil {
		t.Fatal(err)
	}
	start(t, e)

	// waitCommitted polls until n records of the output are committed and
	// want checkpoints were requested and reported.
	waitCommitted := func(n int, want int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := len(f.readAll(t, f.out, kgo.ReadCommitted()))
			mu.Lock()
			seen := len(starts)
			mu.Unlock()
			if got >= n && e.Stats().RequestedCheckpoints.Load() >= want && int64(seen) >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 20s: %d of %d records committed, %d of %d checkpoints requested", got, n, e.Stats().RequestedCheckpoints.Load(), want)
			}
			time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
		}
	}
	f.produce(t, 1, 1, 0)
	waitCommitted(1, 1)
	q.mu.Lock()
	first := q.first
	q.mu.Unlock()
	mu.Lock()
	if len(starts) == 0 || starts[0].UnixNano() < first {
		t.Errorf("checkpoints began at %v, want the first at or after the request %v", starts, time.Unix(0, first))
	}
	mu.Unlock()

	// Records asking again for the time met already, then one asking
	// for a new checkpoint: that one, and only it, comes.
	f.produce(t, 1, 20, 1)
	f.produce(t, 1, 1, lastValue)
	waitCommitted(22, 2)
	if n := e.Stats().RequestedCheckpoints.Load(); n != 2 {
		t.Errorf("%d requested checkpoints, want 2 (the met requests bring none)", n)
	}
	mu.Lock()
	if len(starts) >= 2 && starts[1].Sub(starts[0]) < e.cfg.RequestSpacing {
		t.Errorf("requested checkpoints began %v apart, want at least RequestSpacing %v", starts[1].Sub(starts[0]), e.cfg.RequestSpacing)
	}
	mu.Unlock()
	if n := e.Stats().Checkpoints.Load(); n > 2+2*int64(e.hops) {
		t.Errorf("%d checkpoints, want at most the 2 requested and their follow-ups", n)
	}
}
