package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// killAfter is a processor (counter, or hop) that closes kill when the
// job as a whole has processed at records (re-reads after an abort
// included).
type killAfter struct {
	counter Processor
	seen    *atomic.Int64
	at      int64
	kill    chan struct{}
	once    *sync.Once
}

func (k killAfter) Process(t *Task, r *kgo.Record, input int) error {
	if k.seen.Add(1) == k.at {
		k.once.Do(func() { close(k.kill) })
	}
	return k.counter.Process(t, r, input)
}

// kill stops the engine as SIGKILL would: its client closes under it, so
// no final checkpoint runs, its static membership is not left (the
// restarted instance takes its place), and its open transaction stays
// open until the restarted instance's producer, with the same
// transactional id, fences it.
func (r *running) kill(t *testing.T) error {
	t.Helper()
	r.e.sess.Client().Close()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its client closing")
		return nil
	}
}

// metaVariant is one way of running the same input.
type metaVariant struct {
	partitions int32
	maxPoll    int
	queueDepth int
	interval   time.Duration
	// pending is Config.PendingStateBytes: small values bring
	// checkpoints forward every few records.
	pending int64
	// hop sends every record through the internal topic mid to the next
	// partition's task before counting it (hop); exchange turns
	// Config.LocalExchange on; faults > 0 fails every other offset
	// commit of a transaction at the broker, faults of them, so that
	// their checkpoints abort.
	hop      bool
	exchange bool
	faults   int
}

func (v metaVariant) String() string {
	s := fmt.Sprintf("partitions=%d/poll=%d/queue=%d/interval=%v/pending=%d", v.partitions, v.maxPoll, v.queueDepth, v.interval, v.pending)
	if v.hop {
		s += fmt.Sprintf("/hop/exchange=%v/faults=%d", v.exchange, v.faults)
	}
	return s
}

// TestKfakeMetamorphic runs the same input — a few thousand records over
// several keys, written while the job runs — under different partition
// counts, poll sizes, queue depths and checkpoint frequencies, each with
// one kill at a seeded point and a restart (with its state directory or an
// empty one). The committed output of every variant is exactly what the
// input gives, computed from the input alone: each key's tallies in order,
// none twice, none missing; so the last tally of every key is the same in
// every variant.
func TestKfakeMetamorphic(t *testing.T) {
	const seed = 20261203
	const keys, n, chunk = 7, 3000, 100
	rng := rand.New(rand.NewPCG(seed, 1))
	input := make([]inputRecord, n)
	for i := range input {
		// Skewed: low keys are hotter.
		k := min(int(rng.ExpFloat64()*2), keys-1)
		input[i] = inputRecord{key: fmt.Sprintf("k%02d", k), value: rng.Int64N(2001) - 1000}
	}
	ref := map[string]tally{}
	for _, r := range input {
		v := ref[r.key]
		v.count++
		v.sum += r.value
		ref[r.key] = v
	}

	variants := []metaVariant{
		{partitions: 1, maxPoll: 10000, queueDepth: 8, interval: time.Second},
		{partitions: 3, maxPoll: 7, queueDepth: 1, interval: time.Second, pending: 2 << 10},
		{partitions: 4, maxPoll: 100, queueDepth: 2, interval: 2 * time.Second},
		{partitions: 4, maxPoll: 1, queueDepth: 8, interval: time.Second, pending: 16 << 10},
		{partitions: 3, maxPoll: 500, queueDepth: 4, interval: 1500 * time.Millisecond, pending: 512},
		// Through an internal topic, with the tasks' local exchange and
		// checkpoints aborted at the broker.
		{partitions: 3, maxPoll: 100, queueDepth: 2, interval: time.Second, hop: true, exchange: true, faults: 6},
		{partitions: 4, maxPoll: 7, queueDepth: 1, interval: time.Second, pending: 2 << 10, hop: true, exchange: true, faults: 4},
	}
	results := make([]map[string]tally, len(variants))
	t.Run("variants", func(t *testing.T) {
		for i, v := range variants {
			t.Run(v.String(), func(t *testing.T) {
				t.Parallel() // each on a cluster of its own
				vr := rand.New(rand.NewPCG(seed, uint64(i)+2))
				killAt := int64(n/5 + vr.IntN(3*n/5))
				emptyDir := vr.IntN(2) == 0
				results[i] = runMetaVariant(t, v, input, killAt, emptyDir, chunk)
				if !maps.Equal(results[i], ref) {
					t.Errorf("last tallies %v, want %v", results[i], ref)
				}
			})
		}
	})
	for i := range variants[1:] {
		if results[i+1] != nil && results[0] != nil && !maps.Equal(results[i+1], results[0]) {
			t.Errorf("variant %v ends with %v, variant %v with %v", variants[i+1], results[i+1], variants[0], results[0])
		}
	}
}

// runMetaVariant writes input in chunks while the job runs, kills it once
// it has processed killAt records, restarts it (from an empty state
// directory if emptyDir), and returns the last committed tally of each key
// once the output is complete; the whole committed output must be exactly
// what the input gives.
func runMetaVariant(t *testing.T, v metaVariant, input []inputRecord, killAt int64, emptyDir bool, chunk int) map[string]tally {
	f := newFakeEnv(t, v.partitions)
	kill := make(chan struct{})
	var seen atomic.Int64
	var once sync.Once
	topo := f.topology()
	var proc Processor = counter{out: f.out}
	if v.hop {
		topo.Inputs = append(topo.Inputs, Input{Topic: "mid", Internal: true})
		proc = hop{counter: counter{out: f.out}, mid: "mid", partitions: v.partitions}
	}
	topo.NewProcessor = func(*Task) (Processor, error) {
		return killAfter{counter: proc, seen: &seen, at: killAt, kill: kill, once: &once}, nil
	}
	var commits atomic.Int64
	if v.faults > 0 {
		f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Count: -1, When: func(kmsg.Request) bool {
			c := commits.Add(1)
			return c%2 == 0 && c <= 2*int64(v.faults)
		}})
	}
	var exchanged, skipped, aborts int64
	defer func() {
		if v.hop {
			t.Logf("%d internal records taken from the exchange, %d copies read from Kafka skipped, %d checkpoints aborted", exchanged, skipped, aborts)
		}
	}()
	dir := t.TempDir()
	newEngine := func(dir string) *Engine {
		cfg := f.config(t, dir, "counter-i0")
		cfg.InstanceID = "i0"
		cfg.MaxPollRecords = v.maxPoll
		cfg.QueueDepth = v.queueDepth
		cfg.CheckpointInterval = v.interval
		cfg.PendingStateBytes = v.pending
		cfg.LocalExchange = v.exchange
		e, err := New(cfg, topo)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	r := start(t, newEngine(dir))

	// The input comes while the job runs: a chunk every 20ms.
	pr := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produced := make(chan error, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond) // the input's pace
		defer tick.Stop()
		for i := 0; i < len(input); i += chunk {
			var recs []*kgo.Record
			for _, in := range input[i:min(i+chunk, len(input))] {
				k, _ := strconv.Atoi(in.key[1:])
				recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(k) % v.partitions, Key: []byte(in.key),
					Value: strconv.AppendInt(nil, in.value, 10), Timestamp: time.Now()})
			}
			if err := pr.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				produced <- err
				return
			}
			<-tick.C
		}
		produced <- nil
	}()
	f.input = input

	select {
	case <-kill:
	case <-r.done:
		t.Fatalf("engine stopped before the kill: %v", r.err)
	case <-time.After(60 * time.Second): // generous: the race pass on 2 loaded cores
		t.Fatalf("the job did not process %d records within 60s (%d)", killAt, seen.Load())
	}
	err := r.kill(t)
	exchanged, skipped, aborts = r.e.Stats().ExchangeRecords.Load(), r.e.Stats().ExchangeSkipped.Load(), r.e.Stats().Aborts.Load()
	t.Logf("killed after %d records processed, %d checkpoints committed, %d aborted (Run: %v); restarting with %s state directory",
		seen.Load(), r.e.Stats().Checkpoints.Load(), r.e.Stats().Aborts.Load(), err, map[bool]string{true: "an empty", false: "its"}[emptyDir])
	if err := r.e.cfg.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if emptyDir {
		dir = t.TempDir()
	}
	r = start(t, newEngine(dir))
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	w := f.watch(t)
	w.until(t, 20*time.Second, "the output complete", f.reached(), r)
	if err := r.stop(t); err != nil {
		t.Fatalf("run after the restart: %v", err)
	}
	exchanged += r.e.Stats().ExchangeRecords.Load()
	skipped += r.e.Stats().ExchangeSkipped.Load()
	aborts += r.e.Stats().Aborts.Load()
	got := byKey(t, f.readAll(t, f.out, kgo.ReadCommitted()))
	checkOutput(t, got, f.want())
	return finals(got)
}

// hop sends every source record through the internal topic mid to the
// next partition's task, which counts it (counter). A key's records all
// take the same path, in order.
type hop struct {
	counter    counter
	mid        string
	partitions int32
}

func (h hop) Process(t *Task, r *kgo.Record, input int) error {
	if input == 0 {
		t.Emit(&kgo.Record{Topic: h.mid, Partition: (t.Partition + 1) % h.partitions, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
		return nil
	}
	return h.counter.Process(t, r, input)
}
