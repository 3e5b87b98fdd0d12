package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// heldCounter is counter, taking cost per record (a processor's work, so
// that a backlog takes several checkpoints to read), and counting the
// records it processes while its task runs on past a barrier whose
// transaction has not ended.
type heldCounter struct {
	counter
	cost time.Duration
	held *atomic.Int64
}

func (c heldCounter) Process(t *Task, r *kgo.Record, input int) error {
	if t.holding {
		c.held.Add(1)
	}
	time.Sleep(c.cost) // the work of processing the record, not synchronisation
	return c.counter.Process(t, r, input)
}

// TestKfakeTasksRunOnWhileTheTransactionEnds slows every EndTxn down by
// 150ms and reads a backlog over several checkpoints. The records polled before
// a checkpoint, and those the client has fetched when its barrier has
// passed, are processed while its transaction ends: the pause the tasks
// see (barrier and apply) leaves the slow end out, the checkpoint's cycle
// does not. Their output and state belong to the next checkpoint: the
// committed output is exactly once — also across a checkpoint that aborts
// (its TxnOffsetCommit fails) after the tasks ran on into it, and across
// a stop and a restart from the same state.
func TestKfakeTasksRunOnWhileTheTransactionEnds(t *testing.T) {
	f := newFakeEnv(t, 2)
	const slow = 150 * time.Millisecond
	f.c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		f.c.SleepControl(func() { time.Sleep(slow) }) // a slow broker, not synchronisation
		return nil, nil, false
	})
	var held atomic.Int64
	var mu sync.Mutex
	var infos []CheckpointInfo
	cfg := f.config(t, t.TempDir(), "counter-0")
	cfg.RunOn = true
	cfg.MaxPollRecords = 50
	cfg.OnCheckpoint = func(ci CheckpointInfo) {
		mu.Lock()
		infos = append(infos, ci)
		mu.Unlock()
	}
	topo := f.topology()
	topo.NewProcessor = func(*Task) (Processor, error) {
		return heldCounter{counter{out: f.out}, 400 * time.Microsecond, &held}, nil
	}
	newEngine := func() *Engine {
		e, err := New(cfg, topo)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const keys = 6
	f.produce(t, keys, 6000, 1)
	r := start(t, newEngine())
	w := f.watch(t)
	w.until(t, 60*time.Second, "the backlog's output complete", f.reached(), r)
	if h := held.Load(); h == 0 {
		t.Fatal("no record was processed while a transaction ended")
	}

	// An abort after the tasks ran on: what they did since the barrier
	// goes with the rest.
	fault := f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError})
	before := held.Load()
	f.produce(t, keys, 3000, int64(len(f.input))+1)
	waitCond(t, 30*time.Second, "an abort after running on", func() bool {
		return fault.Hits() > 0 && r.e.Stats().Aborts.Load() > 0 && held.Load() > before
	}, r)
	w.until(t, 60*time.Second, "the output complete after the abort", f.reached(), r)
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}

	mu.Lock()
	var ranOn, short int
	for _, ci := range infos {
		if !ci.RanOn || !ci.Committed {
			continue
		}
		ranOn++
		if ci.Pause > ci.Cycle {
			t.Errorf("pause %v longer than the checkpoint's cycle %v", ci.Pause, ci.Cycle)
		}
		if ci.Cycle >= slow && ci.Pause < ci.Cycle-slow {
			short++
		}
	}
	n := len(infos)
	mu.Unlock()
	t.Logf("%d checkpoints, %d committed ran on, %d of them paused the tasks less than their cycle less the slow EndTxn; %d records processed while running on; %d aborts",
		n, ranOn, short, held.Load(), r.e.Stats().Aborts.Load())
	if ranOn < 4 || short < ranOn*3/4 {
		t.Errorf("%d of %d run-on checkpoints paused the tasks for less than their end of transaction", short, ranOn)
	}

	// A restart from the same state goes on from the committed offsets:
	// exactly once still.
	f.produce(t, keys, 600, int64(len(f.input))+1)
	r2 := start(t, newEngine())
	f.watch(t).until(t, 30*time.Second, "the output complete after a restart", f.reached(), r2)
	if err := r2.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
}

// TestCommitSealedRewritesTheOffsetCommit: the transaction's offset commit
// gets the sealed offsets (its leader epoch unknown when the offset
// changed), leaves out partitions no task sealed, and topics left empty.
func TestCommitSealedRewritesTheOffsetCommit(t *testing.T) {
	part := func(p int32, off int64, epoch int32) kmsg.TxnOffsetCommitRequestTopicPartition {
		x := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		x.Partition, x.Offset, x.LeaderEpoch = p, off, epoch
		return x
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{
		{Topic: "in", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{part(0, 120, 3), part(1, 80, 3), part(2, 50, 3)}},
		{Topic: "mid", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{part(0, 9, 1)}},
	}
	commitSealed(req, map[string]map[int32]int64{"in": {0: 100, 1: 80}, "other": {0: 5}})
	if len(req.Topics) != 1 || req.Topics[0].Topic != "in" {
		t.Fatalf("topics %+v, want in alone", req.Topics)
	}
	got := req.Topics[0].Partitions
	if len(got) != 2 || got[0].Partition != 0 || got[0].Offset != 100 || got[0].LeaderEpoch != -1 ||
		got[1].Partition != 1 || got[1].Offset != 80 || got[1].LeaderEpoch != 3 {
		t.Fatalf("partitions %+v, want 0@100 (epoch -1) and 1@80 (epoch 3)", got)
	}
}
