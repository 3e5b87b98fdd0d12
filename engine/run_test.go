package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/state"
)

// relay forwards every source record through the internal topic mid and
// writes it to out from there, keeping what it saw in its state (so the
// changelog has something to restore).
type relay struct {
	mid, out string
}

func (r relay) Process(t *Task, rec *kgo.Record, input int) error {
	switch input {
	case 0:
		if err := t.State.Set(append([]byte("s/"), rec.Key...), rec.Value); err != nil {
			return err
		}
		t.Emit(&kgo.Record{Topic: r.mid, Partition: t.Partition, Key: rec.Key, Value: rec.Value})
	default:
		if err := t.State.Set(append([]byte("m/"), rec.Key...), rec.Value); err != nil {
			return err
		}
		t.Emit(&kgo.Record{Topic: r.out, Partition: t.Partition, Key: rec.Key, Value: rec.Value})
	}
	return nil
}

type brokerEnv struct {
	brokers            []string
	in, mid, changelog string
	out, group, txnID  string
	partitions         int32
}

func newBrokerEnv(t *testing.T, partitions int32) brokerEnv {
	t.Helper()
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, partitions, "eng-in", "eng-mid", "eng-changelog", "eng-out")
	return brokerEnv{brokers: b, in: topics[0], mid: topics[1], changelog: topics[2], out: topics[3],
		group: "eng-" + topics[0], txnID: "eng-txn-" + topics[0], partitions: partitions}
}

func (b brokerEnv) topology() Topology {
	return Topology{
		Name:       "relay",
		Inputs:     []Input{{Topic: b.in}, {Topic: b.mid, Internal: true}},
		Partitions: b.partitions,
		Changelog:  b.changelog,
		NewProcessor: func(*Task) (Processor, error) {
			return relay{mid: b.mid, out: b.out}, nil
		},
	}
}

func (b brokerEnv) engine(t *testing.T, dir string, mod func(*Config)) *Engine {
	t.Helper()
	store, err := state.Open(state.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := Config{
		ClientOpts:         []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:              b.group,
		TransactionalID:    b.txnID,
		CheckpointInterval: time.Second,
		Store:              store,
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg, b.topology())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// produce writes n records with keys prefix000… round-robin over the
// partitions of the input topic.
func (b brokerEnv) produce(t *testing.T, prefix string, n int) {
	t.Helper()
	cl := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		k := fmt.Sprintf("%s%04d", prefix, i)
		recs = append(recs, &kgo.Record{Topic: b.in, Partition: int32(i) % b.partitions, Key: []byte(k), Value: []byte(k), Timestamp: time.Now()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readOut returns how often each key is in the committed output. The
// engine must have stopped: a sentinel written to every partition after it
// marks the end.
func (b brokerEnv) readOut(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range b.partitions {
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: b.out, Partition: p, Key: []byte("\x00end")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]int{}
	ended := map[int32]bool{}
	for len(ended) < int(b.partitions) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (ended partitions %v)", b.out, ctx.Err(), ended)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == "\x00end" {
				ended[r.Partition] = true
				return
			}
			if !ended[r.Partition] {
				got[string(r.Key)]++
			}
		})
	}
	return got
}

// runUntil runs e until the committed output holds want distinct keys, then
// stops it and returns Run's error.
func (b brokerEnv) runUntil(t *testing.T, e *Engine, want int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	cl := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	pctx, pcancel := context.WithTimeout(ctx, 90*time.Second)
	defer pcancel()
	for len(seen) < want {
		select {
		case err := <-errc:
			return fmt.Errorf("engine stopped with %d of %d keys out: %v", len(seen), want, err)
		default:
		}
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			cancel()
			<-errc
			return fmt.Errorf("output has %d of %d keys after 90s", len(seen), want)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
	cancel()
	return <-errc
}

// TestSIGTERMAfterPollLosesNothing stops the engine (as SIGTERM does: the
// Run context is cancelled) while the loop holds records of the internal
// topic between poll and dispatch, then restarts it from an empty local
// store (so its state comes from the changelog): every record is in the
// output exactly once, and the restart succeeds.
func TestSIGTERMAfterPollLosesNothing(t *testing.T) {
	b := newBrokerEnv(t, 2)
	const n = 200
	b.produce(t, "a", n)

	var held atomic.Bool
	var mu sync.Mutex
	var heldRecords int
	prev := afterPoll
	t.Cleanup(func() { afterPoll = prev })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	afterPoll = func(rctx context.Context, fs kgo.Fetches) {
		internal := 0
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == b.mid && r.Value != nil {
				internal++
			}
		})
		if internal == 0 || held.Swap(true) {
			return
		}
		mu.Lock()
		heldRecords = internal
		mu.Unlock()
		cancel() // SIGTERM while the polled records wait for dispatch
		<-rctx.Done()
	}
	e1 := b.engine(t, t.TempDir(), nil)
	errc := make(chan error, 1)
	go func() { errc <- e1.Run(ctx) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("first run: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the first run did not stop within 90s of its start")
	}
	if !held.Load() {
		t.Fatal("the loop never polled records of the internal topic")
	}
	mu.Lock()
	t.Logf("stopped while %d internal records were held between poll and dispatch", heldRecords)
	mu.Unlock()
	afterPoll = prev

	// Restart with an empty store: every task restores from the changelog.
	b.produce(t, "b", n)
	if err := b.runUntil(t, b.engine(t, t.TempDir(), nil), 2*n); err != nil {
		t.Fatalf("restart: %v", err)
	}
	got := b.readOut(t)
	for _, prefix := range []string{"a", "b"} {
		for i := range n {
			k := fmt.Sprintf("%s%04d", prefix, i)
			if got[k] != 1 {
				t.Errorf("key %s is in the output %d times, want once", k, got[k])
			}
		}
	}
	if len(got) != 2*n {
		t.Errorf("output has %d keys, want %d", len(got), 2*n)
	}
}
