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

	"github.com/twmb/franz-go/pkg/kgo"
)

// killAfter is counter that closes kill when the job as a whole has
// processed at records (re-reads after an abort included).
type killAfter struct {
	counter
	seen *atomic.Int64
	at   int64
	kill chan struct{}
	once *sync.Once
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
}

func (v metaVariant) String() string {
	return fmt.Sprintf("partitions=%d/poll=%d/queue=%d/interval=%v/pending=%d", v.partitions, v.maxPoll, v.queueDepth, v.interval, v.pending)
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
	topo.NewProcessor = func(*Task) (Processor, error) {
		return killAfter{counter: counter{out: f.out}, seen: &seen, at: killAt, kill: kill, once: &once}, nil
	}
	dir := t.TempDir()
	newEngine := func(dir string) *Engine {
		cfg := f.config(t, dir, "counter-i0")
		cfg.InstanceID = "i0"
		cfg.MaxPollRecords = v.maxPoll
		cfg.QueueDepth = v.queueDepth
		cfg.CheckpointInterval = v.interval
		cfg.PendingStateBytes = v.pending
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
	case <-time.After(20 * time.Second):
		t.Fatalf("the job did not process %d records within 20s (%d)", killAt, seen.Load())
	}
	err := r.kill(t)
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
	got := byKey(t, f.readAll(t, f.out, kgo.ReadCommitted()))
	checkOutput(t, got, f.want())
	return finals(got)
}
