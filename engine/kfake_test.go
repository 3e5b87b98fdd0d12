package engine

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/braidlabs/braid/state"
)

// The tests in this file run the engine against kfake, franz-go's
// in-process Kafka (transactions, consumer groups, read_committed), so the
// checkpoint protocol, aborts, rebalances, restores and fencing are
// exercised in seconds, without the real broker that the tests using
// kafkatest need. kfake listens on loopback sockets, so these tests wait
// by polling with deadlines, not in a synctest bubble.

// counter keeps, per key, the number of records read and the sum of their
// values (decimal integers) in its state, and emits both ("count sum")
// under the key to out after each record: the output of a key is its
// running tally, so a record counted twice or lost shows in every value
// after it.
type counter struct{ out string }

func (c counter) Process(t *Task, r *kgo.Record, _ int) error {
	v, ok, err := t.State.Get(nil, r.Key)
	if err != nil {
		return err
	}
	var cur tally
	if ok {
		if cur, err = parseTally(v); err != nil {
			return fmt.Errorf("state of %q: %w", r.Key, err)
		}
	}
	x, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		return fmt.Errorf("record %q at offset %d: %w", r.Value, r.Offset, err)
	}
	cur.count++
	cur.sum += x
	val := cur.encode()
	if err := t.State.Set(r.Key, val); err != nil {
		return err
	}
	t.Emit(&kgo.Record{Topic: c.out, Partition: t.Partition, Key: append([]byte(nil), r.Key...), Value: val})
	return nil
}

// tally is a key's running count and sum.
type tally struct{ count, sum int64 }

func (v tally) encode() []byte { return fmt.Appendf(nil, "%d %d", v.count, v.sum) }

func (v tally) String() string { return fmt.Sprintf("{%d %d}", v.count, v.sum) }

func parseTally(b []byte) (tally, error) {
	c, s, ok := strings.Cut(string(b), " ")
	if !ok {
		return tally{}, fmt.Errorf("tally %q has no sum", b)
	}
	n, err1 := strconv.ParseInt(c, 10, 64)
	sum, err2 := strconv.ParseInt(s, 10, 64)
	if err1 != nil || err2 != nil {
		return tally{}, fmt.Errorf("tally %q is not two integers", b)
	}
	return tally{n, sum}, nil
}

// fakeEnv is a kfake cluster with the counter topology's topics.
type fakeEnv struct {
	c          *kfake.Cluster
	brokers    []string
	partitions int32
	in, out    string
	changelog  string
	group      string
	// input is every record produced to in, in order, for the reference.
	input []inputRecord
}

type inputRecord struct {
	key   string
	value int64
}

func newFakeEnv(t *testing.T, partitions int32) *fakeEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "in", "mid", "glob", "out", "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &fakeEnv{c: c, brokers: c.ListenAddrs(), partitions: partitions,
		in: "in", out: "out", changelog: "changelog", group: "counter"}
}

func (f *fakeEnv) topology() Topology {
	return Topology{
		Name:       "counter",
		Inputs:     []Input{{Topic: f.in}},
		Partitions: f.partitions,
		Changelog:  f.changelog,
		NewProcessor: func(*Task) (Processor, error) {
			return counter{out: f.out}, nil
		},
	}
}

// client returns a client of the cluster, closed when the test ends.
func (f *fakeEnv) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// config is the engine configuration of the tests: a store in dir, a
// checkpoint every second, heartbeats often enough that a rebalance takes
// a fraction of a second, and the engine's log in the test's log when it
// fails.
func (f *fakeEnv) config(t *testing.T, dir, txnID string) Config {
	t.Helper()
	store, err := state.Open(state.Options{Dir: dir, MemoryBudget: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return Config{
		ClientOpts: []kgo.Opt{
			kgo.SeedBrokers(f.brokers...),
			kgo.FetchMaxWait(100 * time.Millisecond),
			kgo.HeartbeatInterval(100 * time.Millisecond),
		},
		Group:              f.group,
		TransactionalID:    txnID,
		CheckpointInterval: time.Second,
		Store:              store,
		Logger:             testLogger(t, txnID),
	}
}

func (f *fakeEnv) engine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg, f.topology())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// testLogger collects what the engine logs and writes it to the test's
// log if the test fails.
func testLogger(t *testing.T, name string) *slog.Logger {
	var buf syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// produce writes n records to in, keys k00… round-robin over keys keys
// (key i to partition i mod partitions), values first, first+1, …, and
// notes them for the reference. Their timestamps are the time now.
func (f *fakeEnv) produce(t *testing.T, keys, n int, first int64) {
	t.Helper()
	f.produceTimed(t, keys, n, first, time.Now(), 0)
}

// produceTimed is produce with timestamps (event times, to a processor
// that observes them) rising from base by step a record.
func (f *fakeEnv) produceTimed(t *testing.T, keys, n int, first int64, base time.Time, step time.Duration) {
	t.Helper()
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		k, v := i%keys, first+int64(i)
		key := fmt.Sprintf("k%02d", k)
		recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(k) % f.partitions, Key: []byte(key),
			Value: strconv.AppendInt(nil, v, 10), Timestamp: base.Add(time.Duration(i) * step)})
		f.input = append(f.input, inputRecord{key, v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// want is the output the input so far must give, computed from the input
// alone: per key, the tally after each of its records.
func (f *fakeEnv) want() map[string][]tally {
	out := map[string][]tally{}
	for _, r := range f.input {
		var cur tally
		if s := out[r.key]; len(s) > 0 {
			cur = s[len(s)-1]
		}
		cur.count++
		cur.sum += r.value
		out[r.key] = append(out[r.key], cur)
	}
	return out
}

// finals is the last tally of each key.
func finals(m map[string][]tally) map[string]tally {
	out := map[string]tally{}
	for k, s := range m {
		if len(s) > 0 {
			out[k] = s[len(s)-1]
		}
	}
	return out
}

// byKey groups output records by key, in offset order within each
// partition (a key's records all go to one partition).
func byKey(t *testing.T, recs []*kgo.Record) map[string][]tally {
	t.Helper()
	out := map[string][]tally{}
	for _, r := range recs {
		v, err := parseTally(r.Value)
		if err != nil {
			t.Fatalf("output record %s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		out[string(r.Key)] = append(out[string(r.Key)], v)
	}
	return out
}

// checkOutput fails the test unless the output is exactly what the input
// gives: every key's tallies 1, 2, … n in order, none twice, none missing.
func checkOutput(t *testing.T, got, want map[string][]tally) {
	t.Helper()
	for k, w := range want {
		if g := got[k]; !slices.Equal(g, w) {
			t.Errorf("key %s: output has %d tallies, want %d; got %v, want %v", k, len(g), len(w), abbrev(g), abbrev(w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s is in the output (%v) but not in the input", k, abbrev(g))
		}
	}
}

// abbrev shows at most the first and last few tallies.
func abbrev(s []tally) string {
	if len(s) <= 8 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v … %v", s[:4], s[len(s)-4:])
}

// readAll returns every record of topic up to its current end that a
// consumer with the isolation level iso reads. Nothing may be writing to
// topic transactionally: read_committed stops at the oldest open
// transaction.
func (f *fakeEnv) readAll(t *testing.T, topic string, iso kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(f.client(t)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := f.client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: partitions %v not read to their end within 10s", topic, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// committed returns the group's committed offsets of in, by partition.
func (f *fakeEnv) committed(t *testing.T) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(f.client(t)).FetchOffsets(ctx, f.group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == f.in && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// inputEnds returns the end offset of every partition of in.
func (f *fakeEnv) inputEnds(t *testing.T) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(f.client(t)).ListEndOffsets(ctx, f.in)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// running is an engine's Run in the background.
type running struct {
	e      *Engine
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed
}

// start runs e until stop (or the end of the test).
func start(t *testing.T, e *Engine) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// stop cancels Run (SIGTERM) and returns its result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its cancel")
		return nil
	}
}

// exited reports whether Run has returned, and with what.
func (r *running) exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// watcher reads the committed output as it comes, and fails the test as
// soon as a tally is not one the input gives.
type watcher struct {
	f    *fakeEnv
	cl   *kgo.Client
	last map[string]tally
	n    int
	// want is f.want() of the first wantOf records of the input.
	want   map[string][]tally
	wantOf int
}

func (f *fakeEnv) watch(t *testing.T) *watcher {
	return &watcher{f: f, cl: f.client(t, kgo.ConsumeTopics(f.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond)),
		last: map[string]tally{}}
}

// check fails the test if v, the tally of key at r, is not the tally
// after some record of key in the input.
func (w *watcher) check(t *testing.T, r *kgo.Record, v tally) {
	t.Helper()
	if len(w.f.input) != w.wantOf {
		w.want, w.wantOf = w.f.want(), len(w.f.input)
	}
	k := string(r.Key)
	if s := w.want[k]; v.count < 1 || v.count > int64(len(s)) || s[v.count-1] != v {
		t.Fatalf("committed output %s[%d]@%d: key %s has tally %v, which the input (%d tallies of the key: %v) does not give",
			r.Topic, r.Partition, r.Offset, k, v, len(s), abbrev(s))
	}
}

// until polls the committed output until cond holds, failing the test if
// d passes first or one of the engines stops.
func (w *watcher) until(t *testing.T, d time.Duration, what string, cond func(last map[string]tally) bool, runs ...*running) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond(w.last) {
		for _, r := range runs {
			if done, err := r.exited(); done {
				t.Fatalf("engine stopped before %s: %v", what, err)
			}
		}
		if time.Now().After(deadline) {
			for _, r := range runs {
				st := r.e.Stats()
				t.Logf("engine: %d records in, %d out, %d checkpoints, %d aborted", st.RecordsIn.Load(), st.RecordsOut.Load(), st.Checkpoints.Load(), st.Aborts.Load())
			}
			t.Fatalf("not %s within %v (committed output: %d records, last tallies %v)", what, d, w.n, w.last)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		fs := w.cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			w.n++
			v, err := parseTally(r.Value)
			if err != nil {
				t.Fatalf("committed output %s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err)
			}
			w.check(t, r, v)
			w.last[string(r.Key)] = v
		})
	}
}

// reached is until's condition that every key's last committed tally is
// the one the input so far gives.
func (f *fakeEnv) reached() func(map[string]tally) bool {
	want := finals(f.want())
	return func(last map[string]tally) bool { return maps.Equal(last, want) }
}

// waitCond polls cond every few milliseconds until it holds, failing the
// test if d passes first or one of the engines stops.
func waitCond(t *testing.T, d time.Duration, what string, cond func() bool, runs ...*running) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		for _, r := range runs {
			if done, err := r.exited(); done {
				t.Fatalf("engine stopped before %s: %v", what, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond) // sampling interval, not synchronisation
	}
}

// TestKfakeCheckpointCommitsOutputOnce holds the first transaction commit
// at the broker: the checkpoint's output is there, but a read_committed
// consumer sees none of it and the group has committed no offset. Once the
// commit goes through, the output is readable exactly once and the
// committed offsets are at the end of the input.
func TestKfakeCheckpointCommitsOutputOnce(t *testing.T) {
	f := newFakeEnv(t, 2)
	const keys, n = 5, 200
	f.produce(t, keys, n, 1)
	held, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	defer unhold()
	f.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !req.(*kmsg.EndTxnRequest).Commit {
			return nil, nil, false
		}
		f.c.DropControl()
		close(held)
		f.c.SleepControl(func() { <-release })
		return nil, nil, false // then the broker commits
	})
	r := start(t, f.engine(t, f.config(t, t.TempDir(), "counter-0")))
	select {
	case <-held:
	case <-r.done:
		t.Fatalf("engine stopped before its first commit: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no transaction commit within 10s")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(f.client(t))
	lso, err := adm.ListCommittedOffsets(ctx, f.out)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("before the commit, %s[%d] is readable read_committed up to offset %d, want 0", o.Topic, o.Partition, o.Offset)
		}
	})
	pending := f.readAll(t, f.out, kgo.ReadUncommitted())
	if len(pending) == 0 {
		t.Fatal("the transaction being committed holds no output")
	}
	want := f.want()
	for k, s := range byKey(t, pending) {
		if w := want[k]; len(s) > len(w) || !slices.Equal(s, w[:len(s)]) {
			t.Errorf("key %s: the pending transaction holds %v, not a prefix of %v", k, abbrev(s), abbrev(w))
		}
	}
	if got := f.committed(t); len(got) != 0 {
		t.Errorf("before the commit the group has committed offsets %v", got)
	}
	t.Logf("held the first commit with %d output records pending", len(pending))

	unhold()
	f.watch(t).until(t, 10*time.Second, "the output complete", f.reached(), r)
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), want)
	if got, ends := f.committed(t), f.inputEnds(t); !maps.Equal(got, ends) {
		t.Errorf("committed offsets %v, want the input's ends %v", got, ends)
	}
	if c := r.e.Stats().Checkpoints.Load(); c < 1 {
		t.Errorf("%d checkpoints committed", c)
	}
}

// TestKfakeAbortRollsBackToTheCheckpoint fails the offset commit of the
// transaction holding a second batch of input at the broker, so that
// checkpoint aborts: what it emitted is in the output topic but never
// readable read_committed, the tasks' state goes back to the last
// checkpoint, the input is read again, and the committed output counts
// every record exactly once.
func TestKfakeAbortRollsBackToTheCheckpoint(t *testing.T) {
	f := newFakeEnv(t, 2)
	const keys, n = 4, 100
	f.produce(t, keys, n, 1)
	r := start(t, f.engine(t, f.config(t, t.TempDir(), "counter-0")))
	w := f.watch(t)
	w.until(t, 10*time.Second, "the first batch out", f.reached(), r)
	if a := r.e.Stats().Aborts.Load(); a != 0 {
		t.Fatalf("%d checkpoints aborted before the fault", a)
	}

	// Only a transaction that polled something commits offsets: the one
	// with the second batch.
	fault := f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError})
	f.produce(t, keys, n, 1001)
	waitCond(t, 10*time.Second, "a checkpoint aborted", func() bool { return r.e.Stats().Aborts.Load() > 0 }, r)
	w.until(t, 10*time.Second, "the second batch out", f.reached(), r)
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	if h := fault.Hits(); h != 1 {
		t.Errorf("the fault answered %d offset commits, want 1", h)
	}
	if a := r.e.Stats().Aborts.Load(); a != 1 {
		t.Errorf("%d checkpoints aborted, want 1", a)
	}

	want := f.want()
	committed := f.readAll(t, f.out, kgo.ReadCommitted())
	checkOutput(t, byKey(t, committed), want)
	// What the aborted checkpoint emitted is in the topic, invisible.
	visible := map[[2]int64]bool{}
	for _, r := range committed {
		visible[[2]int64{int64(r.Partition), r.Offset}] = true
	}
	var aborted []*kgo.Record
	for _, r := range f.readAll(t, f.out, kgo.ReadUncommitted()) {
		if !visible[[2]int64{int64(r.Partition), r.Offset}] {
			aborted = append(aborted, r)
		}
	}
	if len(aborted) == 0 {
		t.Fatal("the aborted checkpoint left no output in the topic: nothing was rolled back")
	}
	for k, s := range byKey(t, aborted) {
		// The second batch's tallies, as the rolled-back state gives
		// them again: the aborted epoch counted from the checkpoint.
		second := want[k][n/keys:]
		if len(s) > len(second) || !slices.Equal(s, second[:len(s)]) {
			t.Errorf("key %s: the aborted checkpoint emitted %v, want a prefix of the second batch's %v", k, abbrev(s), abbrev(second))
		}
	}
	t.Logf("the aborted checkpoint emitted %d records, none of them committed", len(aborted))
}

// TestKfakeRestoreContinuesTheCounts stops the engine (as SIGTERM does)
// and starts a new one four times over, each after more input: with the
// same state directory (local state is current: nothing is rebuilt), with
// an empty one (every task rebuilds from the changelog), and with a copy
// of the first run's directory (local state older than the committed
// offsets: wiped and rebuilt). Each run's counts go on from the last
// one's, never from 0, and the committed output is exactly once.
func TestKfakeRestoreContinuesTheCounts(t *testing.T) {
	f := newFakeEnv(t, 2)
	const keys, n = 4, 80
	run := func(dir string) string {
		t.Helper()
		f.produce(t, keys, n, int64(len(f.input))+1)
		cfg := f.config(t, dir, "counter-0")
		var log syncBuffer
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		r := start(t, f.engine(t, cfg))
		f.watch(t).until(t, 10*time.Second, "the output complete", f.reached(), r)
		if err := r.stop(t); err != nil {
			t.Fatalf("run: %v\n%s", err, log.String())
		}
		if err := cfg.Store.Close(); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	rebuilt := func(log string) int { return strings.Count(log, "restored state from changelog") }

	dir := t.TempDir()
	if log := run(dir); rebuilt(log) != 0 {
		t.Errorf("the first run rebuilt state:\n%s", log)
	}
	stale := t.TempDir()
	if err := os.CopyFS(stale, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if log := run(dir); rebuilt(log) != 0 {
		t.Errorf("the restart with the same directory rebuilt state:\n%s", log)
	}
	if log := run(t.TempDir()); rebuilt(log) != int(f.partitions) {
		t.Errorf("the restart with an empty directory did not rebuild every task from the changelog:\n%s", log)
	}
	if log := run(stale); rebuilt(log) != int(f.partitions) {
		t.Errorf("the restart with a stale directory did not rebuild every task from the changelog:\n%s", log)
	}
	checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
	for k, v := range finals(f.want()) {
		if v.count != 4*n/keys {
			t.Fatalf("key %s: reference count %d, want %d", k, v.count, 4*n/keys)
		}
	}
}

// taskSet is the partitions of e's open tasks.
func taskSet(e *Engine) []int32 {
	var ps []int32
	for _, s := range e.Tasks() {
		ps = append(ps, s.Partition)
	}
	return ps
}

// TestKfakeRebalanceMovesTasks runs two engines in one group: the first
// alone takes every task; when the second joins, half the tasks move to it
// (restored there from the changelog) while input keeps coming; when the
// second stops, the first takes all of them back. The committed output
// counts every record exactly once throughout.
func TestKfakeRebalanceMovesTasks(t *testing.T) {
	f := newFakeEnv(t, 4)
	const keys, n = 8, 160
	all := []int32{0, 1, 2, 3}
	f.produce(t, keys, n, 1)
	a := start(t, f.engine(t, f.config(t, t.TempDir(), "counter-a")))
	w := f.watch(t)
	w.until(t, 10*time.Second, "the first batch out", f.reached(), a)
	if got := taskSet(a.e); !slices.Equal(got, all) {
		t.Fatalf("the only member has tasks %v, want %v", got, all)
	}

	b := start(t, f.engine(t, f.config(t, t.TempDir(), "counter-b")))
	split := func() bool {
		pa, pb := taskSet(a.e), taskSet(b.e)
		return len(pa) == 2 && len(pb) == 2 && !slices.ContainsFunc(pa, func(p int32) bool { return slices.Contains(pb, p) })
	}
	waitCond(t, 10*time.Second, "the tasks split between the members", split, a, b)
	t.Logf("tasks after the join: a %v, b %v", taskSet(a.e), taskSet(b.e))
	f.produce(t, keys, n, 1001)
	w.until(t, 10*time.Second, "the second batch out", f.reached(), a, b)
	if in := b.e.Stats().RecordsIn.Load(); in == 0 {
		t.Error("the second member read no input")
	}

	if err := b.stop(t); err != nil {
		t.Fatalf("second member: %v", err)
	}
	waitCond(t, 10*time.Second, "the first member has every task again", func() bool { return slices.Equal(taskSet(a.e), all) }, a)
	f.produce(t, keys, n, 2001)
	w.until(t, 10*time.Second, "the third batch out", f.reached(), a)
	if err := a.stop(t); err != nil {
		t.Fatalf("first member: %v", err)
	}
	checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
	if got, ends := f.committed(t), f.inputEnds(t); !maps.Equal(got, ends) {
		t.Errorf("committed offsets %v, want the input's ends %v", got, ends)
	}
}

// TestKfakeFinalCheckpointRetried fails the offset commit of the final
// checkpoint at the broker (as a coordinator moving does), so that its
// transaction aborts: the engine reads again what the tasks had read and
// commits it in a second try, Run returns no error, and the committed
// output and offsets hold every record exactly once.
func TestKfakeFinalCheckpointRetried(t *testing.T) {
	f := newFakeEnv(t, 2)
	const keys, n = 4, 200
	cfg := f.config(t, t.TempDir(), "counter-0")
	cfg.CheckpointInterval = time.Minute // the final checkpoint is the only one
	r := start(t, f.engine(t, cfg))
	f.produce(t, keys, n, 1)
	waitCond(t, 10*time.Second, "every record read", func() bool { return r.e.Stats().RecordsIn.Load() >= n }, r)
	fault := f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError})
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	if h := fault.Hits(); h != 1 {
		t.Fatalf("the fault answered %d offset commits, want 1", h)
	}
	st := r.e.Stats()
	if st.Aborts.Load() != 1 || st.Checkpoints.Load() != 1 {
		t.Errorf("%d checkpoints committed and %d aborted, want 1 and 1", st.Checkpoints.Load(), st.Aborts.Load())
	}
	if c, ends := f.committed(t), f.inputEnds(t); !maps.Equal(c, ends) {
		t.Errorf("committed offsets %v, want the input's ends %v", c, ends)
	}
	checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
}
