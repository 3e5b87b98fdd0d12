package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/braidlabs/braid/windows"
)

func TestSeqHeader(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: seqHeader, Value: encodeSeq(7, 1<<40+3)}}}
	from, seq, ok := takeSeq(r)
	if !ok || from != 7 || seq != 1<<40+3 {
		t.Fatalf("takeSeq = %d, %d, %v; want 7, %d, true", from, seq, ok, uint64(1<<40+3))
	}
	if len(r.Headers) != 1 || r.Headers[0].Key != "a" {
		t.Fatalf("headers after takeSeq: %v, want the first only", r.Headers)
	}
	for _, h := range [][]kgo.RecordHeader{
		nil,
		{{Key: "a"}},
		{{Key: seqHeader, Value: []byte{1, 2, 3}}},             // malformed: kept, no sequence
		{{Key: seqHeader, Value: encodeSeq(1, 1)}, {Key: "b"}}, // not the last header
	} {
		r := &kgo.Record{Headers: h}
		if _, _, ok := takeSeq(r); ok || len(r.Headers) != len(h) {
			t.Errorf("takeSeq(%v) = ok %v, headers %v; want none taken", h, ok, r.Headers)
		}
	}
}

func TestSeqsRoundTrip(t *testing.T) {
	out, in := []uint64{0, 1, 300, 1 << 62}, []uint64{5, 0, 0, 99}
	v := encodeSeqs(out, in)
	gotOut, gotIn := make([]uint64, 4), make([]uint64, 4)
	if !decodeSeqs(v, gotOut, gotIn) || fmt.Sprint(gotOut) != fmt.Sprint(out) || fmt.Sprint(gotIn) != fmt.Sprint(in) {
		t.Fatalf("decodeSeqs(encodeSeqs(%v, %v)) = %v, %v", out, in, gotOut, gotIn)
	}
	// Another partition count, truncated and trailing bytes: not taken.
	for _, bad := range [][]byte{v[:len(v)-1], append(v[:len(v):len(v)], 1), encodeSeqs(out[:2], in[:2]), nil, {0xff}} {
		o, i := make([]uint64, 4), make([]uint64, 4)
		if decodeSeqs(bad, o, i) {
			t.Errorf("decodeSeqs(%x) took it: %v %v", bad, o, i)
		}
	}
}

// lateHop forwards every source record, with its event time (the record
// timestamp), through the internal topic mid to the next partition's
// task, and counts the records that reach it behind its watermark.
type lateHop struct {
	mid        string
	partitions int32
	seen, late *atomic.Int64
}

func (h lateHop) Process(t *Task, r *kgo.Record, input int) error {
	ts := r.Timestamp.UnixNano()
	if input == 0 {
		t.Observe(input, ts)
		t.Emit(&kgo.Record{Topic: h.mid, Partition: (t.Partition + 1) % h.partitions, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		return nil
	}
	if wm := t.Watermark(); wm != windows.MinTime && ts < wm {
		h.late.Add(1)
	}
	h.seen.Add(1)
	return nil
}

// TestExchangeWatermarks checks the local exchange's progress markers:
// with a checkpoint every 20s, the tasks' watermarks follow the sources
// through the internal topic within seconds, where without the exchange
// they wait for the first checkpoint's markers; and no record forwarded
// through the topic comes behind the watermark of the task that reads
// it, also across checkpoints aborted at the broker.
func TestExchangeWatermarks(t *testing.T) {
	for _, exchange := range []bool{true, false} {
		t.Run(fmt.Sprintf("exchange=%v", exchange), func(t *testing.T) {
			t.Parallel()
			const partitions = 3
			f := newFakeEnv(t, partitions)
			var seen, late atomic.Int64
			topo := f.topology()
			topo.Inputs = append(topo.Inputs, Input{Topic: "mid", Internal: true})
			topo.NewProcessor = func(*Task) (Processor, error) {
				return lateHop{mid: "mid", partitions: partitions, seen: &seen, late: &late}, nil
			}
			e, r := startExchange(t, f, topo, "wm-0", exchange, 20*time.Second)
			pr := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			produce := func(n int) time.Time {
				t.Helper()
				var recs []*kgo.Record
				now := time.Now()
				for i := range n {
					p := int32(i % partitions)
					recs = append(recs, &kgo.Record{Topic: f.in, Partition: p, Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v"), Timestamp: now.Add(time.Duration(i) * time.Microsecond)})
				}
				if err := pr.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				return now
			}
			at := produce(300)
			began := time.Now()
			moved := func() bool {
				ws := e.Watermarks()
				if len(ws) < partitions {
					return false
				}
				for _, wm := range ws {
					if wm < at.Add(-time.Second).UnixNano() {
						return false
					}
				}
				return true
			}
			if exchange {
				waitCond(t, 5*time.Second, "every task's watermark past the input's, through the exchange", moved, r)
				t.Logf("watermarks followed the sources through the internal topic in %v", time.Since(began).Round(time.Millisecond))
			} else {
				if _, passed := waitFor(5*time.Second, moved); passed {
					t.Fatalf("watermarks moved through the internal topic before any checkpoint, without the exchange: %v", e.Watermarks())
				}
			}
			if e.Stats().Checkpoints.Load() != 0 {
				t.Fatalf("%d checkpoints within 5s of the start, with a 20s interval", e.Stats().Checkpoints.Load())
			}
			if !exchange {
				return
			}
			// Checkpoints every second now, with offset commits failing
			// at the broker: their checkpoints abort, the tasks roll back
			// and read the input again, still nothing comes late.
			if err := r.stop(t); err != nil {
				t.Fatalf("run: %v", err)
			}
			e, r = runAborting(t, f, topo, "wm-0", 40, func() { produce(60) })
			if err := r.stop(t); err != nil {
				t.Fatalf("run: %v", err)
			}
			st := e.Stats()
			t.Logf("%d records read from mid, %d taken from the exchange, %d Kafka copies skipped, %d aborts", seen.Load(), st.ExchangeRecords.Load(), st.ExchangeSkipped.Load(), st.Aborts.Load())
			if st.ExchangeRecords.Load() == 0 {
				t.Error("nothing was taken from the exchange")
			}
			if n := late.Load(); n != 0 {
				t.Errorf("%d of %d records forwarded through mid came behind the reading task's watermark", n, seen.Load())
			}
		})
	}
}

// toGlobal writes every source record to the global topic glob, to the
// partition of its key, and observes its timestamp as its event time.
type toGlobal struct{ partitions int32 }

func (g toGlobal) Process(t *Task, r *kgo.Record, input int) error {
	t.Observe(input, r.Timestamp.UnixNano())
	k, _ := strconv.Atoi(string(r.Key[1:]))
	t.Emit(&kgo.Record{Topic: "glob", Partition: int32(k) % g.partitions, Key: r.Key, Value: r.Value})
	return nil
}

// globalFeeds counts what a global table is fed: data records by value,
// and its watermark from the markers.
type globalFeeds struct {
	mu   sync.Mutex
	fed  map[string]int
	wm   *GlobalWatermark
	bad  int
	recs int
}

func (g *globalFeeds) feed(r *kgo.Record, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.wm.Observe(r, now) {
		return
	}
	if len(r.Headers) != 0 {
		g.bad++ // the sequence header must not reach the table
	}
	g.fed[string(r.Value)]++
	g.recs++
}

func (g *globalFeeds) watermark() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wm.Current(time.Now())
}

// TestExchangeGlobalTable checks the global tables' side of the local
// exchange: with a checkpoint every 20s, the table's watermark follows
// the sources within seconds (its markers come in memory), and every
// record the tasks write to it is fed to the table exactly once —
// from memory or from Kafka, never both — also across checkpoints
// aborted at the broker, whose records the tasks write again.
func TestExchangeGlobalTable(t *testing.T) {
	const partitions = 3
	f := newFakeEnv(t, partitions)
	g := &globalFeeds{fed: map[string]int{}, wm: NewGlobalWatermark(partitions, partitions, time.Minute, time.Now())}
	topo := f.topology()
	topo.Globals = []Global{{Topic: "glob", Feed: g.feed}}
	topo.NewProcessor = func(*Task) (Processor, error) { return toGlobal{partitions: partitions}, nil }
	e, r := startExchange(t, f, topo, "glob-0", true, 20*time.Second)
	pr := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	next := 0
	produce := func(n int) time.Time {
		t.Helper()
		var recs []*kgo.Record
		now := time.Now()
		for range n {
			recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(next % partitions), Key: []byte("k" + strconv.Itoa(next)), Value: []byte("v" + strconv.Itoa(next)), Timestamp: now})
			next++
		}
		if err := pr.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return now
	}
	at := produce(300)
	waitCond(t, 5*time.Second, "the table's watermark past the input's, before any checkpoint", func() bool {
		return g.watermark() >= at.Add(-time.Second).UnixNano()
	}, r)
	if c := e.Stats().Checkpoints.Load(); c != 0 {
		t.Fatalf("%d checkpoints within 5s with a 20s interval", c)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}

	// Checkpoints every second, four of them aborted at the broker; a
	// new instance, whose table is read from the topic's start.
	g = &globalFeeds{fed: map[string]int{}, wm: NewGlobalWatermark(partitions, partitions, time.Minute, time.Now())}
	topo.Globals = []Global{{Topic: "glob", Feed: g.feed}}
	e, r = runAborting(t, f, topo, "glob-0", 30, func() { produce(20) })
	waitCond(t, 10*time.Second, "every record fed to the table", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.fed) == next
	}, r)
	if err := r.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var twice []string
	for v, n := range g.fed {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s×%d", v, n))
		}
	}
	st := e.Stats()
	t.Logf("%d records fed for %d written; %d taken from the exchange, %d Kafka copies skipped, %d aborts", g.recs, next, st.ExchangeRecords.Load(), st.ExchangeSkipped.Load(), st.Aborts.Load())
	if len(twice) > 0 {
		t.Errorf("%d records fed more than once: %v", len(twice), twice[:min(len(twice), 10)])
	}
	if g.bad != 0 {
		t.Errorf("%d records reached the table with a header", g.bad)
	}
}

// runAborting runs topo in a new instance with the local exchange, a
// checkpoint every second and four checkpoints' offset commits failed at
// the broker, while produce is called batches times at a pace; it returns
// once a checkpoint after those aborted ones has committed.
func runAborting(t *testing.T, f *fakeEnv, topo Topology, txnID string, batches int, produce func()) (*Engine, *running) {
	t.Helper()
	e, r := startExchange(t, f, topo, txnID, true, time.Second)
	var commits atomic.Int64
	f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Count: -1, When: func(kmsg.Request) bool {
		c := commits.Add(1)
		return c%2 == 0 && c <= 8
	}})
	for range batches {
		produce()
		time.Sleep(25 * time.Millisecond) // the input's pace
	}
	waitCond(t, 20*time.Second, "4 checkpoints aborted and one committed after them", func() bool {
		return e.Stats().Aborts.Load() >= 4 && e.Stats().Checkpoints.Load() >= 5
	}, r)
	return e, r
}

// startExchange runs topo in a new instance, with the local exchange or
// without, a checkpoint every interval and an out-of-orderness of 100ms.
func startExchange(t *testing.T, f *fakeEnv, topo Topology, txnID string, exchange bool, interval time.Duration) (*Engine, *running) {
	t.Helper()
	cfg := f.config(t, t.TempDir(), txnID)
	cfg.LocalExchange, cfg.CheckpointInterval, cfg.OutOfOrderness = exchange, interval, 100*time.Millisecond
	e, err := New(cfg, topo)
	if err != nil {
		t.Fatal(err)
	}
	return e, start(t, e)
}
