package engine

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lateCounter is counter, with its records' timestamps as event time,
// noting every record whose event time is behind the task's watermark
// when it is processed.
type lateCounter struct {
	counter
	cost time.Duration
	late *atomic.Int64
	seen *atomic.Int64
	what *atomic.Value // the first late record, described
}

func (c lateCounter) Process(t *Task, r *kgo.Record, input int) error {
	c.seen.Add(1)
	if ts, wm := t.RecordTime(), t.Watermark(); ts < wm {
		if c.late.Add(1) == 1 {
			c.what.Store(fmt.Sprintf("%s[%d]@%d at %d, %v behind the watermark", r.Topic, r.Partition, r.Offset, ts, time.Duration(wm-ts)))
		}
	}
	t.Observe(input, t.RecordTime())
	time.Sleep(c.cost) // the work of processing the record, not synchronisation
	return c.counter.Process(t, r, input)
}

// TestKfakeAbortRewindsTheWatermark: an aborted checkpoint takes the
// tasks back to the last committed one, and the consumer back to its
// offsets; the watermark must go back with them. Otherwise the records
// read again — in order, each partition's event times rising — are
// behind a watermark their own first reading raised, and a job would
// send them to the late topic. Held at the barrier and running on past
// it alike.
func TestKfakeAbortRewindsTheWatermark(t *testing.T) {
	for _, runOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("run_on=%v", runOn), func(t *testing.T) {
			f := newFakeEnv(t, 2)
			const n = 3000
			var late, seen atomic.Int64
			var what atomic.Value
			cfg := f.config(t, t.TempDir(), "counter-0")
			cfg.RunOn = runOn
			cfg.OutOfOrderness = time.Millisecond
			cfg.MaxPollRecords = 50
			topo := f.topology()
			topo.NewProcessor = func(*Task) (Processor, error) {
				return lateCounter{counter{out: f.out}, 200 * time.Microsecond, &late, &seen, &what}, nil
			}
			e, err := New(cfg, topo)
			if err != nil {
				t.Fatal(err)
			}
			const keys = 4
			base := time.Now().Add(-time.Hour)
			r := start(t, e)
			w := f.watch(t)
			for i, first := range []bool{true, false} {
				// A backlog read over several checkpoints, later in event
				// time than the one before: one of its checkpoints aborts
				// — the first the tasks ever make, then one after a
				// commit.
				fault := f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError})
				aborts := r.e.Stats().Aborts.Load()
				f.produceTimed(t, keys, n, int64(i*n+1), base.Add(time.Duration(i)*time.Minute), 10*time.Millisecond)
				waitCond(t, 30*time.Second, fmt.Sprintf("an abort while backlog %d is read (first checkpoint: %v)", i, first), func() bool {
					return fault.Hits() > 0 && r.e.Stats().Aborts.Load() > aborts
				}, r)
				w.until(t, 60*time.Second, fmt.Sprintf("backlog %d out", i), f.reached(), r)
			}
			if err := r.stop(t); err != nil {
				t.Fatalf("run: %v", err)
			}
			reread := seen.Load() - 2*n
			if reread <= 0 {
				t.Fatalf("no record was read again after the aborts (%d processed for %d)", seen.Load(), 2*n)
			}
			t.Logf("%d read again after %d aborts; %d late", reread, r.e.Stats().Aborts.Load(), late.Load())
			if n := late.Load(); n > 0 {
				t.Errorf("%d records were behind the watermark when processed, the first %s; %d read again after %d aborts",
					n, what.Load(), reread, r.e.Stats().Aborts.Load())
			}
			checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
		})
	}
}
