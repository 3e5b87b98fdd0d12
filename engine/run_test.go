package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	return b.engineFor(t, dir, b.topology(), mod)
}

// engineFor is engine with a topology of the caller's.
func (b brokerEnv) engineFor(t *testing.T, dir string, topo Topology, mod func(*Config)) *Engine {
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
	e, err := New(cfg, topo)
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
	got := map[string]int{}
	for _, r := range b.readRecords(t) {
		got[string(r.Key)]++
	}
	return got
}

// readValues returns the last committed value of each key in the output.
func (b brokerEnv) readValues(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, r := range b.readRecords(t) {
		got[string(r.Key)] = string(r.Value)
	}
	return got
}

// readRecords returns the committed output (sentinels left out).
func (b brokerEnv) readRecords(t *testing.T) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	end := fmt.Sprintf("\x00end-%d", time.Now().UnixNano())
	for p := range b.partitions {
		if err := pr.ProduceSync(ctx, &kgo.Record{Topic: b.out, Partition: p, Key: []byte(end)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []*kgo.Record
	ended := map[int32]bool{}
	for len(ended) < int(b.partitions) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (ended partitions %v)", b.out, ctx.Err(), ended)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == end {
				ended[r.Partition] = true
				return
			}
			if !ended[r.Partition] && !strings.HasPrefix(string(r.Key), "\x00end") {
				got = append(got, r)
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
		fs.EachRecord(func(r *kgo.Record) {
			if !strings.HasPrefix(string(r.Key), "\x00end") {
				seen[string(r.Key)] = true
			}
		})
	}
	cancel()
	return <-errc
}

// runUntilSignal runs e in the background until signal is ready (what
// says what that means) and returns Run's context, its cancel and Run's
// result; the engine stopping first, or d passing, fails the test.
func runUntilSignal(t *testing.T, e *Engine, signal <-chan struct{}, d time.Duration, what string) (context.Context, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	select {
	case <-signal:
	case err := <-errc:
		cancel()
		t.Fatalf("engine stopped before %s: %v", what, err)
	case <-time.After(d):
		cancel()
		t.Fatalf("not %s within %v", what, d)
	}
	return ctx, cancel, errc
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
			if r.Topic == b.mid && r.Value != nil && !r.Attrs.IsControl() {
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

// slowRestore is relay whose Restore blocks for partition 1 until release
// is closed.
type slowRestore struct {
	relay
	release <-chan struct{}
	blocked chan<- struct{}
}

func (s slowRestore) Restore(t *Task) error {
	if t.Partition == 1 {
		select {
		case s.blocked <- struct{}{}:
		default:
		}
		<-s.release
	}
	return nil
}

// TestSlowRestoreDoesNotStallOtherTasks: while task 1 takes longer to open
// than the transaction timeout, task 0 reads, checkpoints and commits its
// output; then task 1 opens and everything is out exactly once.
func TestSlowRestoreDoesNotStallOtherTasks(t *testing.T) {
	b := newBrokerEnv(t, 2)
	const n = 100
	b.produce(t, "a", n)
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	topo := b.topology()
	topo.NewProcessor = func(*Task) (Processor, error) {
		return slowRestore{relay: relay{mid: b.mid, out: b.out}, release: release, blocked: blocked}, nil
	}
	const txnTimeout = 11 * time.Second
	e := b.engineFor(t, t.TempDir(), topo, func(c *Config) { c.TransactionTimeout = txnTimeout })
	ctx, cancel, errc := runUntilSignal(t, e, blocked, 60*time.Second, "task 1 started opening")
	defer cancel()
	start := time.Now()
	// Partition 0's half of the input comes out while task 1 is opening.
	cl := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	for len(seen) < n/2 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("only %d of partition 0's %d records out while task 1 opens", len(seen), n/2)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Partition != 0 {
				t.Errorf("record %s of partition %d out while its task was opening", r.Key, r.Partition)
			}
			seen[string(r.Key)] = true
		})
	}
	// Keep task 1 opening past the transaction timeout.
	for time.Since(start) < txnTimeout+time.Second {
		select {
		case err := <-errc:
			t.Fatalf("engine stopped while task 1 was opening: %v", err)
		case <-time.After(time.Until(start.Add(txnTimeout + time.Second))):
		}
	}
	close(release)
	for len(seen) < n {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("%d of %d records out after task 1 opened", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}
	got := b.readOut(t)
	if len(got) != n {
		t.Errorf("output has %d keys, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("key %s out %d times", k, c)
		}
	}
}

// TestRestoreWithoutMatchingCheckpointRecovers: the group's committed
// offsets are ahead of every checkpoint record in the changelog (as a run
// that committed records it had not processed left it). The restart
// restores the latest checkpoint, reads again from its offsets, and every
// record comes out exactly once.
func TestRestoreWithoutMatchingCheckpointRecovers(t *testing.T) {
	b := newBrokerEnv(t, 2)
	const n = 100
	b.produce(t, "a", n)
	if err := b.runUntil(t, b.engine(t, t.TempDir(), nil), n); err != nil {
		t.Fatal(err)
	}
	b.produce(t, "b", n)
	// Move the committed offset of partition 0 of the input over 10 of
	// the new records, as if they had been committed unprocessed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(kafkatest.Client(t, b.brokers))
	offs, err := adm.FetchOffsets(ctx, b.group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(b.in, 0)
	if !ok || o.At != n/2 {
		t.Fatalf("committed offset of %s[0] is %+v, want %d", b.in, o, n/2)
	}
	var set kadm.Offsets
	set.AddOffset(b.in, 0, o.At+10, -1)
	if resp, err := adm.CommitOffsets(ctx, b.group, set); err != nil || resp.Error() != nil {
		t.Fatalf("commit offsets: %v %v", err, resp.Error())
	}
	var logBuf syncBuffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	if err := b.runUntil(t, b.engine(t, t.TempDir(), func(c *Config) { c.Logger = log }), 2*n); err != nil {
		t.Fatalf("restart: %v\n%s", err, logBuf.String())
	}
	got := b.readOut(t)
	if len(got) != 2*n {
		t.Errorf("output has %d keys, want %d", len(got), 2*n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("key %s out %d times", k, c)
		}
	}
	if !strings.Contains(logBuf.String(), "without a checkpoint record with the committed offsets") {
		t.Errorf("the restart did not say why it went back:\n%s", logBuf.String())
	}
	// The recovered position is committed: a restart from an empty store
	// restores the committed checkpoint without going back again.
	logBuf.Reset()
	b.produce(t, "c", 10)
	if err := b.runUntil(t, b.engine(t, t.TempDir(), func(c *Config) { c.Logger = log }), 2*n+10); err != nil {
		t.Fatalf("second restart: %v", err)
	}
	if strings.Contains(logBuf.String(), "not the committed one") {
		t.Errorf("the second restart went back again:\n%s", logBuf.String())
	}
	if got := b.readOut(t); len(got) != 2*n+10 {
		t.Errorf("output has %d keys after the second restart, want %d", len(got), 2*n+10)
	}
}

// syncBuffer is a bytes.Buffer safe for the engine's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// gatedRelay is relay whose first source record waits for release.
type gatedRelay struct {
	relay
	once    *sync.Once
	release <-chan struct{}
}

func (g gatedRelay) Process(t *Task, rec *kgo.Record, input int) error {
	g.once.Do(func() { <-g.release })
	return g.relay.Process(t, rec, input)
}

// TestPollBackpressureBoundsQueuedBytes: while a task is stuck, the poll
// loop stops once the tasks' queues hold FetchBufferBytes (plus one poll),
// instead of queueing the whole backlog; released, everything comes out
// exactly once.
func TestPollBackpressureBoundsQueuedBytes(t *testing.T) {
	b := newBrokerEnv(t, 1)
	const n, size = 3000, 2048
	cl := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	var recs []*kgo.Record
	for i := range n {
		k := fmt.Sprintf("a%04d", i)
		recs = append(recs, &kgo.Record{Topic: b.in, Key: []byte(k), Value: make([]byte, size)})
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer pcancel()
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	topo := b.topology()
	topo.NewProcessor = func(*Task) (Processor, error) {
		return gatedRelay{relay: relay{mid: b.mid, out: b.out}, once: &sync.Once{}, release: release}, nil
	}
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const limit, maxPoll = 1 << 20, 100
	e, err := New(Config{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:      b.group, TransactionalID: b.txnID, CheckpointInterval: time.Second, Store: store,
		FetchBufferBytes: limit, MaxPollRecords: maxPoll, QueueDepth: 1000,
	}, topo)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	highest := int64(0)
	for e.Stats().Backpressure.Load() < 1 {
		highest = max(highest, e.queued.Load())
		if time.Now().After(deadline) {
			t.Fatalf("no backpressure within 60s (queued %d bytes, records in %d)", e.queued.Load(), e.Stats().RecordsIn.Load())
		}
		time.Sleep(10 * time.Millisecond) // sampling interval, not synchronisation
	}
	highest = max(highest, e.queued.Load())
	if bound := int64(limit + maxPoll*(size+5)); highest > bound {
		t.Errorf("queued %d bytes, over FetchBufferBytes plus one poll (%d)", highest, bound)
	}
	if in := e.Stats().RecordsIn.Load(); in >= n {
		t.Errorf("all %d records were polled while the task was stuck", in)
	}
	close(release)
	pctx2, pcancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer pcancel2()
	out := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for len(seen) < n {
		fs := out.PollFetches(pctx2)
		if pctx2.Err() != nil {
			t.Fatalf("%d of %d records out", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got := b.readOut(t)
	for k, c := range got {
		if c != 1 {
			t.Errorf("key %s out %d times", k, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d keys out, want %d", len(got), n)
	}
}

// bigValues keeps, for a source record "set:N", N bytes derived from the
// key in state under the key; for "get" it emits the stored value's length
// and whether its bytes are intact.
type bigValues struct{ out string }

func bigValue(key []byte, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = key[0] + byte(i%251)
	}
	return v
}

func (p bigValues) Process(t *Task, rec *kgo.Record, _ int) error {
	if n, ok := strings.CutPrefix(string(rec.Value), "set:"); ok {
		size, err := strconv.Atoi(n)
		if err != nil {
			return err
		}
		return t.State.Set(rec.Key, bigValue(rec.Key, size))
	}
	v, ok, err := t.State.Get(nil, rec.Key)
	if err != nil {
		return err
	}
	res := "missing"
	if ok {
		res = fmt.Sprintf("%d %v", len(v), bytes.Equal(v, bigValue(rec.Key, len(v))))
	}
	t.Emit(&kgo.Record{Topic: p.out, Partition: t.Partition, Key: rec.Key, Value: []byte(res)})
	return nil
}

// TestChunkedChangelogRestoresThroughKafka: state values of several MB go
// through the real broker's changelog (1 MB message limit) in chunks, and a
// restart with an empty store gets them back, a later shorter value
// included.
func TestChunkedChangelogRestoresThroughKafka(t *testing.T) {
	b := newBrokerEnv(t, 1)
	topo := b.topology()
	topo.Inputs = topo.Inputs[:1]
	topo.NewProcessor = func(*Task) (Processor, error) { return bigValues{out: b.out}, nil }
	run := func(recs ...*kgo.Record) {
		t.Helper()
		cl := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		for _, r := range recs {
			r.Topic = b.in
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		store, err := state.Open(state.Options{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		e, err := New(Config{ClientOpts: []kgo.Opt{kgo.SeedBrokers(b.brokers...), kgo.FetchMaxWait(200 * time.Millisecond)},
			Group: b.group, TransactionalID: b.txnID, CheckpointInterval: time.Second, Store: store}, topo)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- e.Run(rctx) }()
		// Run until the input is consumed: its committed offset is at the
		// end.
		adm := kadm.NewClient(kafkatest.Client(t, b.brokers))
		for {
			offs, err := adm.FetchOffsets(ctx, b.group)
			if o, ok := offs.Lookup(b.in, 0); err == nil && ok {
				ends, err := adm.ListEndOffsets(ctx, b.in)
				if end, ok2 := ends.Lookup(b.in, 0); err == nil && ok2 && o.At >= end.Offset {
					break
				}
			}
			select {
			case err := <-errc:
				rcancel()
				t.Fatalf("engine stopped: %v", err)
			case <-ctx.Done():
				rcancel()
				t.Fatal("input not consumed within 90s")
			case <-time.After(100 * time.Millisecond): // poll interval of the check
			}
		}
		rcancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	set := func(k string, n int) *kgo.Record {
		return &kgo.Record{Key: []byte(k), Value: []byte("set:" + strconv.Itoa(n))}
	}
	run(set("a", 2_500_000), set("b", 3_000_000), set("c", 1_800_000))
	run(set("a", 1_200_000), set("c", 10))
	run(&kgo.Record{Key: []byte("a"), Value: []byte("get")}, &kgo.Record{Key: []byte("b"), Value: []byte("get")}, &kgo.Record{Key: []byte("c"), Value: []byte("get")})
	got := b.readValues(t)
	for k, want := range map[string]string{"a": "1200000 true", "b": "3000000 true", "c": "10 true"} {
		if got[k] != want {
			t.Errorf("key %s after restores: %q, want %q", k, got[k], want)
		}
	}
}

// stuckRelay is relay whose source record with key stuck waits for
// release: the task is stuck in the middle of a transaction.
type stuckRelay struct {
	relay
	stuck   string
	once    *sync.Once
	reached chan<- struct{}
	release <-chan struct{}
}

func (s stuckRelay) Process(t *Task, rec *kgo.Record, input int) error {
	if input == 0 && string(rec.Key) == s.stuck {
		s.once.Do(func() {
			close(s.reached)
			<-s.release
		})
	}
	return s.relay.Process(t, rec, input)
}

// TestTransactionTimedOutOnTheBrokerIsRetried: a task stuck for longer
// than the transaction timeout, after its transaction produced, finds the
// transaction aborted by the coordinator (its producer epoch is stale):
// the engine goes back to the last checkpoint and goes on, instead of
// stopping, and the output is exactly once.
func TestTransactionTimedOutOnTheBrokerIsRetried(t *testing.T) {
	b := newBrokerEnv(t, 2)
	const n = 200
	b.produce(t, "a", n)
	reached, release := make(chan struct{}), make(chan struct{})
	topo := b.topology()
	topo.NewProcessor = func(*Task) (Processor, error) {
		return stuckRelay{relay: relay{mid: b.mid, out: b.out}, stuck: fmt.Sprintf("a%04d", n-2), once: &sync.Once{}, reached: reached, release: release}, nil
	}
	const txnTimeout = 11 * time.Second
	e := b.engineFor(t, t.TempDir(), topo, func(c *Config) { c.TransactionTimeout = txnTimeout })
	ctx, cancel, errc := runUntilSignal(t, e, reached, 90*time.Second, "the stuck record was reached")
	defer cancel()
	// Stuck until the coordinator has aborted the open transaction.
	adm := kadm.NewClient(kafkatest.Client(t, b.brokers))
	deadline := time.Now().Add(txnTimeout + time.Minute)
	for {
		ds, err := adm.DescribeTransactions(ctx, b.txnID)
		if err == nil {
			if d, ok := ds[b.txnID]; ok && d.Err == nil && (d.State == "PrepareAbort" || d.State == "CompleteAbort") {
				t.Logf("the coordinator aborted the transaction (%s, epoch %d)", d.State, d.ProducerEpoch)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the transaction was not aborted on timeout (last: %v, %v)", ds, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the coordinator
	}
	close(release)
	b.produce(t, "b", n)
	cl := kafkatest.Client(t, b.brokers, kgo.ConsumeTopics(b.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	pctx, pcancel := context.WithTimeout(ctx, 90*time.Second)
	defer pcancel()
	for len(seen) < 2*n {
		select {
		case err := <-errc:
			t.Fatalf("the engine stopped with %d of %d keys out: %v", len(seen), 2*n, err)
		default:
		}
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("output has %d of %d keys after 90s", len(seen), 2*n)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
	if a := e.Stats().Aborts.Load(); a == 0 {
		t.Error("no checkpoint aborted: the transaction did not time out while the task was stuck")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}
	got := b.readOut(t)
	for _, prefix := range []string{"a", "b"} {
		for i := range n {
			if k := fmt.Sprintf("%s%04d", prefix, i); got[k] != 1 {
				t.Errorf("key %s is in the output %d times, want once", k, got[k])
			}
		}
	}
}
