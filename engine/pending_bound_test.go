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
	const bound, maxPoll = 2 << 20, 32
	pendingStatePeak(t, bound, maxPoll, int64(bound+maxPoll*peakSize*peakAmp+bound/2))
}

// TestPendingStateBoundSizesPolls: a poll returns what the client has
// buffered, up to MaxPollRecords, and a fetch of large records holds more
// than the whole bound (here a fetch of 2 MiB is 8 MiB of state, the bound
// 2 MiB). The engine polls no more records than the room left takes, at
// the mean record size, so with the default MaxPollRecords the peak stays
// within the bound plus one doubling of a task's batch buffer and a few
// records (the amplification is measured, not known: the first epoch's is
// a guess).
func TestPendingStateBoundSizesPolls(t *testing.T) {
	const bound = 2 << 20
	pendingStatePeak(t, bound, 10000, int64(bound+bound/2+16*peakSize*peakAmp))
}

// The workload of pendingStatePeak: peakN records of peakSize bytes, each
// writing peakAmp bytes of state per input byte.
const peakN, peakSize, peakAmp = 3000, 4 << 10, 4

// pendingStatePeak reads peakN records of peakSize bytes with an amplifier
// writing peakAmp bytes of state per input byte, under a pending state bound and a
// fetch buffer 8 times it, and checks the largest pending total any
// barrier found against limit, and that the bound brought checkpoints
// forward.
func pendingStatePeak(t *testing.T, bound int64, maxPoll int, limit int64) {
	t.Helper()
	f := newFakeEnv(t, 2)
	const n, size, amp = peakN, peakSize, peakAmp
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
	t.Logf("peak pending %d bytes (bound %d, limit %d), %d early checkpoints", peak, bound, limit, early)
	if peak > limit {
		t.Errorf("peak pending state %d bytes, over the bound %d: limit %d", peak, bound, limit)
	}
	// 12 MiB of input writes 48 MiB of state: a checkpoint at least every
	// limit bytes of state.
	if min := int64(n * size * amp / limit); early < min {
		t.Errorf("%d early checkpoints, want at least %d", early, min)
	}
}
