package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/state"
)

// timed is a two-stage topology: a source record (event time: its
// timestamp) is forwarded through the internal topic mid to the other
// task, which holds it until its watermark passes the event time and then
// writes it to out. The downstream watermark includes the upstream task's
// markers on mid, so the record comes out only after a checkpoint has
// committed them. With mid2 (an internal topic with From mid) the record
// goes on from mid to mid2 and is held there: its release waits for the
// markers on mid2, which carry those on mid a checkpoint later (two hops).
type timed struct {
	mid, mid2, out string
	parts          int32
	held           []*kgo.Record
	// throttle, if set, is received from before each source record (a
	// rate limit for reading a backlog).
	throttle <-chan time.Time
	// onSource is called for every source record.
	onSource func(*kgo.Record)
}

func (p *timed) Process(t *Task, r *kgo.Record, input int) error {
	switch input {
	case 0:
		if p.throttle != nil {
			<-p.throttle
		}
		if p.onSource != nil {
			p.onSource(r)
		}
		t.Observe(0, r.Timestamp.UnixNano())
		t.Emit(&kgo.Record{Topic: p.mid, Partition: (t.Partition + 1) % p.parts, Key: r.Key, Timestamp: r.Timestamp})
	case 1:
		if p.mid2 != "" {
			t.Emit(&kgo.Record{Topic: p.mid2, Partition: (t.Partition + 1) % p.parts, Key: r.Key, Timestamp: r.Timestamp})
			break
		}
		fallthrough
	default:
		p.held = append(p.held, &kgo.Record{Topic: p.out, Partition: t.Partition, Key: r.Key, Timestamp: r.Timestamp})
	}
	return nil
}

func (p *timed) OnWatermark(t *Task, wm int64) error {
	kept := p.held[:0]
	for _, r := range p.held {
		if r.Timestamp.UnixNano() <= wm {
			t.Emit(r)
		} else {
			kept = append(kept, r)
		}
	}
	p.held = kept
	return nil
}

type timedTopics struct {
	brokers             []string
	src, mid, mid2, out string
}

// newTimedTopics makes the topics of the timed topology, mid2 only with
// twoHops.
func newTimedTopics(t *testing.T, prefix string, twoHops bool) timedTopics {
	t.Helper()
	b := kafkatest.Brokers(t)
	names := []string{prefix + "-src", prefix + "-mid", prefix + "-out"}
	if twoHops {
		names = append(names, prefix+"-mid2")
	}
	topics := kafkatest.NewTopics(t, b, 2, names...)
	tt := timedTopics{brokers: b, src: topics[0], mid: topics[1], out: topics[2]}
	if twoHops {
		tt.mid2 = topics[3]
	}
	return tt
}

// timedEngine runs the timed topology on two partitions until the test
// ends; mod adjusts the configuration, proc each task's processor.
func timedEngine(t *testing.T, tt timedTopics, mod func(*Config), proc func(*timed)) *Engine {
	t.Helper()
	brokers, src, mid, out := tt.brokers, tt.src, tt.mid, tt.out
	inputs := []Input{{Topic: src}, {Topic: mid, Internal: true}}
	if tt.mid2 != "" {
		inputs = append(inputs, Input{Topic: tt.mid2, Internal: true, From: []string{mid}})
	}
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		ClientOpts:         []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.FetchMaxWait(200 * time.Millisecond)},
		Group:              "fu-" + src,
		TransactionalID:    "fu-txn-" + src,
		CheckpointInterval: time.Second,
		OutOfOrderness:     liveBound,
		Store:              store,
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg, Topology{Name: "fu", Inputs: inputs, Partitions: 2,
		NewProcessor: func(*Task) (Processor, error) {
			p := &timed{mid: mid, mid2: tt.mid2, out: out, parts: 2}
			if proc != nil {
				proc(p)
			}
			return p, nil
		}})
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
	return e
}

// committedTimes reads topic read_committed until the test ends and
// returns the time each key was first read.
func committedTimes(t *testing.T, brokers []string, topic string) (seen func(key string) (time.Time, bool)) {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var mu sync.Mutex
	at := map[string]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if _, ok := at[string(r.Key)]; !ok {
					at[string(r.Key)] = now
				}
			})
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(key string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		ts, ok := at[key]
		return ts, ok
	}
}

// outputLatency streams records stamped now to partition 0 of the source
// every 50ms for d (their phases against the checkpoints spread evenly)
// and returns, for each, how long after the upstream watermark passed it
// (its event time + OutOfOrderness) it was readable in the output.
func outputLatency(t *testing.T, e *Engine, tt timedTopics, d time.Duration) []time.Duration {
	t.Helper()
	brokers, src, out := tt.brokers, tt.src, tt.out
	if _, ok := waitFor(60*time.Second, func() bool {
		s0, ok0 := taskStat(e, 0)
		s1, ok1 := taskStat(e, 1)
		return ok0 && ok1 && s0.CaughtUp && s1.CaughtUp
	}); !ok {
		t.Fatal("the tasks are not caught up within 60s")
	}
	seen := committedTimes(t, brokers, out)
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	type probe struct {
		key string
		ts  time.Time
	}
	var probes []probe
	tick := time.NewTicker(50 * time.Millisecond) // the stream's rate
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		p := probe{key: fmt.Sprintf("k%05d", len(probes)), ts: time.Now()}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: src, Partition: 0, Key: []byte(p.key), Timestamp: p.ts}).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, p)
	}
	// A record is released once a later one's event time is past it by
	// OutOfOrderness: the last second's records never are.
	last := probes[len(probes)-1].ts
	for len(probes) > 0 && probes[len(probes)-1].ts.After(last.Add(-liveBound-100*time.Millisecond)) {
		probes = probes[:len(probes)-1]
	}
	var lat []time.Duration
	for _, p := range probes {
		var at time.Time
		if _, ok := waitFor(30*time.Second, func() bool { var ok bool; at, ok = seen(p.key); return ok }); !ok {
			t.Fatalf("record %s not in the committed output within 30s", p.key)
		}
		lat = append(lat, at.Sub(p.ts.Add(liveBound)))
	}
	return lat
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestFollowUpCheckpointCommitsReleasedOutput: a record whose release
// depends on the upstream task's markers is readable (read_committed)
// within one checkpoint interval after the upstream watermark passed it,
// plus what the commits take, when follow-up checkpoints are on, also when
// the markers take two hops: the checkpoint that carries the markers and
// one follow-up per hop, each waiting at most FollowUpWait for the markers
// to be read, and no second regular interval. Without them it takes one to
// two intervals (the markers come with a checkpoint, the output with the
// next), one more per further hop.
//
// The bound counts the commit times this run saw (the slowest one for
// each commit a record waits for), not a fixed figure: on a loaded broker
// a transaction takes longer to end, which follow-ups do not change.
func TestFollowUpCheckpointCommitsReleasedOutput(t *testing.T) {
	const margin = time.Second
	for _, c := range []struct {
		interval, stream  time.Duration
		followUp, twoHops bool
	}{
		{time.Second, 8 * time.Second, true, false},
		{time.Second, 8 * time.Second, false, false},
		{5 * time.Second, 16 * time.Second, true, false},
		{5 * time.Second, 16 * time.Second, false, false},
		{time.Second, 8 * time.Second, true, true},
		{time.Second, 8 * time.Second, false, true},
	} {
		name := fmt.Sprintf("interval=%v/followup=%v/twohops=%v", c.interval, c.followUp, c.twoHops)
		t.Run(name, func(t *testing.T) {
			tt := newTimedTopics(t, "fu", c.twoHops)
			var maxCommit atomic.Int64
			var followUpWait time.Duration
			e := timedEngine(t, tt, func(cfg *Config) {
				cfg.CheckpointInterval = c.interval
				if !c.followUp {
					cfg.FollowUpWait = -1
				}
				cfg.OnCheckpoint = func(ci CheckpointInfo) {
					if d := int64(ci.Commit); d > maxCommit.Load() {
						maxCommit.Store(d)
					}
				}
				cfg.EnsureDefaults()
				followUpWait = cfg.FollowUpWait
			}, nil)
			lat := outputLatency(t, e, tt, c.stream)
			st := e.Stats()
			t.Logf("%d records: readable %v (median), %v (p99), %v (max) after the watermark passed them; %d checkpoints, %d follow-ups, slowest commit %v",
				len(lat), quantile(lat, 0.5), quantile(lat, 0.99), slices.Max(lat), st.Checkpoints.Load(), st.FollowUpCheckpoints.Load(), time.Duration(maxCommit.Load()))
			if c.followUp {
				hops := time.Duration(1)
				if c.twoHops {
					hops = 2
				}
				bound := c.interval + (hops+1)*time.Duration(maxCommit.Load()) + hops*followUpWait + margin
				if m := slices.Max(lat); m > bound {
					t.Errorf("latency up to %v, want at most the interval %v + %d commits of up to %v + %d follow-up waits of %v + %v = %v",
						m, c.interval, hops+1, time.Duration(maxCommit.Load()), hops, followUpWait, margin, bound)
				}
				if st.FollowUpCheckpoints.Load() == 0 {
					t.Error("no follow-up checkpoint")
				}
				return
			}
			if n := st.FollowUpCheckpoints.Load(); n != 0 {
				t.Errorf("%d follow-ups with FollowUpWait < 0", n)
			}
			// Output waits for the checkpoint after the one with the
			// markers (and one more per further hop): at least one
			// interval.
			if m := quantile(lat, 0.5); m < c.interval {
				t.Errorf("median latency %v without follow-ups, want at least the interval %v", m, c.interval)
			}
		})
	}
}

// TestNoFollowUpWhileReadingBacklog: a task reading a backlog is not
// caught up, so the checkpoints while it reads have no follow-ups (the
// other task is caught up and reads the markers at once); once it has read
// the backlog, they come back.
func TestNoFollowUpWhileReadingBacklog(t *testing.T) {
	const n = 2000
	tt := newTimedTopics(t, "fu-backlog", false)
	// One record per poll, the task reads at most 500 records/s: the
	// backlog takes several checkpoints, and the poll loop never waits
	// for the task more than a record's time (the other task reads what
	// it is sent at once).
	cl := kafkatest.Client(t, tt.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(600))
	old := time.Now().Add(-time.Hour)
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: tt.src, Partition: 0, Key: []byte(fmt.Sprintf("b%05d", i)), Value: make([]byte, 400),
			Timestamp: old.Add(time.Duration(i) * time.Millisecond)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var read, followUps, first, checkpoints atomic.Int64
	var eng atomic.Pointer[Engine]
	e := timedEngine(t, tt, func(c *Config) {
		c.MaxPollRecords = 1
	}, func(p *timed) {
		p.throttle = tick.C
		p.onSource = func(*kgo.Record) {
			switch read.Add(1) {
			case 1:
				first.Store(eng.Load().Stats().Checkpoints.Load())
			case n:
				e := eng.Load()
				followUps.Store(e.Stats().FollowUpCheckpoints.Load())
				checkpoints.Store(e.Stats().Checkpoints.Load())
			}
		}
	})
	eng.Store(e)
	if _, ok := waitFor(60*time.Second, func() bool { return read.Load() >= n }); !ok {
		t.Fatalf("%d of %d backlog records read within 60s", read.Load(), n)
	}
	during := checkpoints.Load() - first.Load()
	t.Logf("%d checkpoints while the backlog was read, %d follow-ups", during, followUps.Load())
	if during < 2 {
		t.Errorf("%d checkpoints while the backlog was read, want at least 2 for the test to say anything", during)
	}
	if f := followUps.Load(); f != 0 {
		t.Errorf("%d follow-up checkpoints while reading a backlog, want 0", f)
	}
	// Live again: a new record's release is followed up.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: tt.src, Partition: 0, Key: []byte("live"), Timestamp: time.Now()}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(30*time.Second, func() bool { return e.Stats().FollowUpCheckpoints.Load() > followUps.Load() }); !ok {
		t.Error("no follow-up checkpoint within 30s of the backlog's end and a live record")
	}
}
