package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// amplifier writes amp copies of every record's value to state under a key
// of its own: state grows amp times faster than the input is read.
type amplifier struct{ amp int }

func (a amplifier) Process(t *Task, r *kgo.Record, _ int) error {
	key := binary.BigEndian.AppendUint64([]byte("r"), uint64(r.Offset))
	return t.State.Set(key, bytes.Repeat(r.Value, a.amp))
}

// TestPendingStateBoundCountsQueuedInput: the barrier reaches a task behind
// the records queued for it, so a bound on pending state writes that looked
// only at what was written would be passed by the queue times the state
// each input byte writes. With a fetch buffer 8 times the state bound and 4
// bytes of state per input byte, the largest pending total any barrier
// finds stays within the bound plus what one poll adds and one doubling
// of a task's batch buffer, and every record is processed.
func TestPendingStateBoundCountsQueuedInput(t *testing.T) {
	f := newFakeEnv(t, 2)
	const n, size, amp = 3000, 4 << 10, 4
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(i) % f.partitions,
			Key: fmt.Appendf(nil, "k%04d", i), Value: bytes.Repeat([]byte{byte(i)}, size), Timestamp: time.Now()})
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const bound, maxPoll = 2 << 20, 32
	cfg := f.config(t, t.TempDir(), "amplifier")
	cfg.CheckpointInterval = time.Minute
	cfg.PendingStateBytes = bound
	cfg.FetchBufferBytes = 8 * bound
	cfg.MaxPollRecords = maxPoll
	top := f.topology()
	top.NewProcessor = func(*Task) (Processor, error) { return amplifier{amp: amp}, nil }
	e, err := New(cfg, top)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	deadline := time.Now().Add(40 * time.Second)
	for e.Stats().RecordsIn.Load() < n {
		select {
		case err := <-errc:
			t.Fatalf("run ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-errc
			t.Fatalf("after 40s: %d of %d records in", e.Stats().RecordsIn.Load(), n)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The final checkpoint's barrier counts too: Run has returned.
	peak, early := e.Stats().PendingStatePeak.Load(), e.Stats().EarlyCheckpoints.Load()
	limit := int64(bound + maxPoll*size*amp + bound/2)
	t.Logf("peak pending %d bytes (bound %d, limit %d), %d early checkpoints", peak, bound, limit, early)
	if peak > limit {
		t.Errorf("peak pending state %d bytes, over the bound %d plus one poll and a doubling (%d)", peak, bound, limit)
	}
	// 12 MiB of input writes 48 MiB of state: a checkpoint at least every
	// 2 MiB of state.
	if min := int64(n * size * amp / (bound + maxPoll*size*amp + bound/2)); early < min {
		t.Errorf("%d early checkpoints, want at least %d", early, min)
	}
}
