package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/state"
	"github.com/braidlabs/braid/windows"
)

// liveBound is the out-of-orderness of the live tests: a record at event
// time ts is covered by the watermark once it reaches ts - liveBound.
const liveBound = time.Second

// eventTimes observes every source record's timestamp as its event time and
// counts, per input, the records read and those that came behind the
// task's watermark.
type eventTimes struct {
	seen, late [4]atomic.Int64
}

func (e *eventTimes) Process(t *Task, r *kgo.Record, input int) error {
	ts := r.Timestamp.UnixNano()
	if wm := t.Watermark(); wm != windows.MinTime && ts < wm {
		e.late[input].Add(1)
	}
	e.seen[input].Add(1)
	t.Observe(input, ts)
	return nil
}

// liveEngine runs a topology of the given inputs with an eventTimes
// processor until the test ends.
func liveEngine(t *testing.T, brokers []string, partitions int32, inputs []Input, mod func(*Config)) (*Engine, *eventTimes) {
	t.Helper()
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	proc := &eventTimes{}
	cfg := Config{
		ClientOpts:         []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:              "cu-" + inputs[0].Topic,
		TransactionalID:    "cu-txn-" + inputs[0].Topic,
		CheckpointInterval: time.Second,
		OutOfOrderness:     liveBound,
		Store:              store,
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg, Topology{Name: "cu", Inputs: inputs, Partitions: partitions,
		NewProcessor: func(*Task) (Processor, error) { return proc, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
		store.Close()
	})
	return e, proc
}

// waitFor polls cond every few milliseconds until it holds or d has passed,
// and returns how long it took (false: it never held).
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			return time.Since(start), false
		}
		time.Sleep(2 * time.Millisecond) // sampling interval, not synchronisation
	}
	return time.Since(start), true
}

func taskStat(e *Engine, p int32) (TaskStat, bool) {
	for _, s := range e.Tasks() {
		if s.Partition == p {
			return s, true
		}
	}
	return TaskStat{}, false
}

// stream writes a record stamped now to partition 0 of topic every 20ms
// until the test ends or stop is called.
func stream(t *testing.T, cl *kgo.Client, topic string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond) // the stream's rate
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Timestamp: time.Now()}).FirstErr(); err != nil && ctx.Err() == nil {
				t.Errorf("stream to %s: %v", topic, err)
				return
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// follow writes probes records stamped now to partition 0 of topic and
// returns, for each, how long after it was written partition p's watermark
// covered it (reached its time minus liveBound); a probe not covered
// within limit fails the test.
func follow(t *testing.T, e *Engine, cl *kgo.Client, topic string, p int32, probes int, limit time.Duration) []time.Duration {
	t.Helper()
	var got []time.Duration
	for range probes {
		ts := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Timestamp: ts}).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		target := ts.Add(-liveBound).UnixNano()
		_, ok := waitFor(limit, func() bool { return e.Watermarks()[p] >= target })
		took := time.Since(written)
		if !ok {
			s, _ := taskStat(e, p)
			t.Fatalf("task %d's watermark %v did not cover a record of %s within %v of its write (stat %+v)", p, time.Unix(0, e.Watermarks()[p]), topic, limit, s)
		}
		got = append(got, took)
	}
	return got
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestWatermarkFollowsDensePartitionWhenCaughtUp: a task reads one dense and
// one sparse source partition, live. Once the sparse partition is caught up
// and quiet for CaughtUpIdleness it no longer holds the watermark, which
// follows the dense partition within a fraction of a second of each write
// (before, the sparse partition held it for Idleness, 30s); a sparse record
// holds it only until the partition is confirmed caught up again.
func TestWatermarkFollowsDensePartitionWhenCaughtUp(t *testing.T) {
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, 1, "cu-dense", "cu-sparse")
	dense, sparse := topics[0], topics[1]
	e, proc := liveEngine(t, b, 1, []Input{{Topic: dense}, {Topic: sparse}}, nil)
	// Both partitions are empty: the end checker finds the task caught up.
	took, ok := waitFor(60*time.Second, func() bool { s, ok := taskStat(e, 0); return ok && s.CaughtUp })
	if !ok {
		t.Fatal("the task with two empty partitions is not caught up within 60s")
	}
	t.Logf("caught up %v after Run started (group join and task opening included)", took)

	cl := kafkatest.Client(t, b)
	stop := stream(t, cl, dense)
	before := follow(t, e, cl, dense, 0, 10, time.Second)
	// A sparse record, older than the dense stream: it holds the watermark
	// until the partition is confirmed caught up and quiet again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: sparse, Timestamp: time.Now().Add(-3 * time.Second)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(10*time.Second, func() bool { return proc.seen[1].Load() == 1 }); !ok {
		t.Fatal("the sparse record was not read within 10s")
	}
	after := follow(t, e, cl, dense, 0, 10, time.Second)
	stop()
	t.Logf("watermark covered a dense record %v (median) after its write, max %v; after a sparse record %v, max %v",
		median(before), slices.Max(before), median(after), slices.Max(after))
	for _, d := range [][]time.Duration{before, after} {
		if m := median(d); m > 500*time.Millisecond {
			t.Errorf("median latency %v, want well under a second", m)
		}
	}
	// Traffic stopped: the task is caught up, every input idle, and the
	// watermark is the dense partition's (the largest input watermark).
	if _, ok := waitFor(10*time.Second, func() bool { s, _ := taskStat(e, 0); return s.CaughtUp }); !ok {
		t.Fatal("not caught up within 10s of the stream's end")
	}
	if n := proc.late[0].Load() + proc.late[1].Load(); n != 1 {
		// The sparse record, 3s old, is behind the dense partition's
		// watermark: exactly that one.
		t.Errorf("%d records behind the watermark, want 1 (the sparse record)", n)
	}
}

// TestLaggingPartitionHoldsWatermark: a source partition with a backlog
// (here: its fetching paused after the first batch) holds the watermark
// however long it is silent, while the other partition is caught up; once
// it is read to its end no record of it was behind the watermark, and the
// watermark follows the live partition again.
func TestLaggingPartitionHoldsWatermark(t *testing.T) {
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, 1, "cu-live", "cu-backlog")
	live, backlog := topics[0], topics[1]
	cl := kafkatest.Client(t, b)
	old := time.Now().Add(-time.Hour)
	var recs []*kgo.Record
	const n = 500
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: backlog, Timestamp: old.Add(time.Duration(i) * time.Millisecond)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var paused atomic.Bool
	var eng atomic.Pointer[Engine]
	prev := afterPoll
	t.Cleanup(func() { afterPoll = prev })
	afterPoll = func(_ context.Context, fs kgo.Fetches) {
		if e := eng.Load(); e != nil && !paused.Load() && slices.ContainsFunc(fs.Records(), func(r *kgo.Record) bool { return r.Topic == backlog }) {
			e.sess.Client().PauseFetchPartitions(map[string][]int32{backlog: {0}})
			paused.Store(true)
		}
	}
	e, proc := liveEngine(t, b, 1, []Input{{Topic: live}, {Topic: backlog}}, func(c *Config) { c.MaxPollRecords = 10 })
	eng.Store(e)
	stop := stream(t, cl, live)
	defer stop()
	if _, ok := waitFor(60*time.Second, func() bool { return paused.Load() && proc.seen[0].Load() > 0 }); !ok {
		t.Fatal("no backlog and live records read within 60s")
	}
	read := proc.seen[1].Load()
	if read >= n {
		t.Fatalf("all %d backlog records read in the first batch", read)
	}
	// The live partition is caught up, the backlog silent: for 10 times
	// CaughtUpIdleness, it still holds the watermark behind its records.
	limit := old.Add(time.Duration(read) * time.Millisecond).UnixNano()
	window := 10 * DefaultCaughtUpIdleness
	if _, held := waitFor(window, func() bool { return e.Watermarks()[0] > limit }); held {
		t.Fatalf("watermark %v passed the lagging partition's records (up to %v) while it was behind", time.Unix(0, e.Watermarks()[0]), time.Unix(0, limit))
	}
	if s, _ := taskStat(e, 0); s.CaughtUp {
		t.Error("caught up while a partition has a backlog")
	}
	e.sess.Client().ResumeFetchPartitions(map[string][]int32{backlog: {0}})
	if _, ok := waitFor(30*time.Second, func() bool { return proc.seen[1].Load() == n }); !ok {
		t.Fatalf("%d of %d backlog records read within 30s of resuming", proc.seen[1].Load(), n)
	}
	if late := proc.late[1].Load(); late != 0 {
		t.Errorf("%d backlog records came behind the watermark", late)
	}
	lat := follow(t, e, cl, live, 0, 5, time.Second)
	t.Logf("backlog held the watermark for %v; then it covered live records %v (median) after their write", window, median(lat))
}

// TestTransactionalSourceIsCaughtUp: a source written by a transactional
// producer ends with a transaction marker (here a commit, then an abort),
// which the task's position moves past: the partition is judged caught up,
// stops holding the watermark, and the group's committed offset is its end.
func TestTransactionalSourceIsCaughtUp(t *testing.T) {
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, 1, "cu-plain", "cu-txn")
	plain, txn := topics[0], topics[1]
	tx := kafkatest.Client(t, b, kgo.TransactionalID("cu-producer-"+txn))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: txn, Timestamp: time.Now().Add(-5 * time.Second)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	// The coordinator writes the markers after it answered EndTxn: the
	// abort marker may reach the partition a moment later.
	adm := kadm.NewClient(kafkatest.Client(t, b))
	var end int64
	if _, ok := waitFor(30*time.Second, func() bool {
		ends, err := adm.ListEndOffsets(ctx, txn)
		if err != nil {
			return false
		}
		o, _ := ends.Lookup(txn, 0)
		end = o.Offset
		return end >= 4
	}); !ok || end != 4 {
		t.Fatalf("%s ends at %d, want 4 (record, commit marker, aborted record, abort marker)", txn, end)
	}
	e, proc := liveEngine(t, b, 1, []Input{{Topic: plain}, {Topic: txn}}, nil)
	if _, ok := waitFor(60*time.Second, func() bool { s, _ := taskStat(e, 0); return s.CaughtUp }); !ok {
		t.Fatal("the task is not caught up within 60s")
	}
	if got := proc.seen[1].Load(); got != 1 {
		t.Errorf("%d records of the transactional source processed, want 1 (the committed one)", got)
	}
	cl := kafkatest.Client(t, b)
	stop := stream(t, cl, plain)
	lat := follow(t, e, cl, plain, 0, 10, time.Second)
	stop()
	t.Logf("with a transactional source: watermark covered plain records %v (median) after their write, max %v", median(lat), slices.Max(lat))
	if m := median(lat); m > 500*time.Millisecond {
		t.Errorf("median latency %v, want well under a second", m)
	}
	if _, ok := waitFor(30*time.Second, func() bool {
		offs, err := adm.FetchOffsets(ctx, "cu-"+plain)
		o, ok := offs.Lookup(txn, 0)
		return err == nil && ok && o.At == end
	}); !ok {
		t.Errorf("the committed offset of %s did not reach its end %d within 30s", txn, end)
	}
}

// TestDownstreamWatermarkFollows: two tasks exchange markers on an internal
// topic; only partition 0 of the source has data. Task 1's source is caught
// up and quiet, so its markers say it is idle, and both tasks' watermarks
// follow partition 0's data within about a checkpoint interval (markers go
// out once per checkpoint).
func TestDownstreamWatermarkFollows(t *testing.T) {
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, 2, "cu-src", "cu-mid")
	src, mid := topics[0], topics[1]
	e, _ := liveEngine(t, b, 2, []Input{{Topic: src}, {Topic: mid, Internal: true}}, nil)
	if _, ok := waitFor(60*time.Second, func() bool {
		s0, ok0 := taskStat(e, 0)
		s1, ok1 := taskStat(e, 1)
		return ok0 && ok1 && s0.CaughtUp && s1.CaughtUp
	}); !ok {
		t.Fatal("the tasks are not caught up within 60s")
	}
	cl := kafkatest.Client(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	stop := stream(t, cl, src)
	defer stop()
	limit := time.Second + 2*time.Second // checkpoint interval, and one more checkpoint's worth
	for p := range int32(2) {
		lat := follow(t, e, cl, src, p, 5, limit)
		t.Logf("task %d's watermark covered partition 0's records %v (median) after their write, max %v", p, median(lat), slices.Max(lat))
	}
}

// TestCaughtUpPartitionGettingRecordsHoldsWatermark: a partition that was
// caught up and gets records the poll loop does not fetch (here: its
// fetching paused, as a held poll loop or a starved fetch leaves it) is
// behind again by the broker's end, and holds the watermark behind them;
// once they are read, none was behind the watermark.
func TestCaughtUpPartitionGettingRecordsHoldsWatermark(t *testing.T) {
	b := kafkatest.Brokers(t)
	topics := kafkatest.NewTopics(t, b, 1, "cu-live", "cu-quiet")
	live, quiet := topics[0], topics[1]
	cl := kafkatest.Client(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: quiet, Timestamp: time.Now()}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e, proc := liveEngine(t, b, 1, []Input{{Topic: live}, {Topic: quiet}}, nil)
	stop := stream(t, cl, live)
	defer stop()
	if _, ok := waitFor(60*time.Second, func() bool {
		s, _ := taskStat(e, 0)
		return proc.seen[1].Load() == 1 && proc.seen[0].Load() > 0 && s.CaughtUp
	}); !ok {
		t.Fatal("the task did not read both partitions to their end within 60s")
	}
	e.sess.Client().PauseFetchPartitions(map[string][]int32{quiet: {0}})
	const n = 20
	ts := time.Now()
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Topic: quiet, Timestamp: ts})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The live partition moves on; the quiet one, behind, holds the
	// watermark for 10 times the caught-up idleness (and the 1s bound).
	window := time.Second + 10*DefaultCaughtUpIdleness
	if _, passed := waitFor(window, func() bool { return e.Watermarks()[0] > ts.UnixNano() }); passed {
		t.Fatalf("watermark %v passed the unread records of a partition that was caught up (at %v)", time.Unix(0, e.Watermarks()[0]), ts)
	}
	e.sess.Client().ResumeFetchPartitions(map[string][]int32{quiet: {0}})
	if _, ok := waitFor(30*time.Second, func() bool { return proc.seen[1].Load() == 1+n }); !ok {
		t.Fatalf("%d of %d records of the quiet partition read within 30s of resuming", proc.seen[1].Load(), 1+n)
	}
	if late := proc.late[1].Load(); late != 0 {
		t.Errorf("%d records came behind the watermark", late)
	}
}
