package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchProbe counts the bytes of the records the client holds, fetched
// and not yet polled, as the engine's memory model counts them (their
// bytes and recordOverhead each), and keeps the peak.
type fetchProbe struct {
	mu         sync.Mutex
	held, peak int64
}

func (p *fetchProbe) OnFetchRecordBuffered(r *kgo.Record) {
	p.mu.Lock()
	p.held += int64(RecordBytes(r)) + recordOverhead
	p.peak = max(p.peak, p.held)
	p.mu.Unlock()
}

func (p *fetchProbe) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	p.mu.Lock()
	p.held -= int64(RecordBytes(r)) + recordOverhead
	p.mu.Unlock()
}

// compressible is size bytes of which one in 48 is random and the rest
// 'a': about 20:1 with zstd.
func compressible(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		if j%48 == 0 {
			b[j] = byte(rng.Uint32())
		} else {
			b[j] = 'a'
		}
	}
	return b
}

// sink processes records and keeps nothing.
type sink struct{}

func (sink) Process(*Task, *kgo.Record, int) error { return nil }

// TestFetchesHeldWithinTheirShareDecompressed: the client's fetches are
// sized in bytes as the broker sends them, compressed, but held
// decompressed until polled. Three brokers, input that compresses about
// 20:1 (zstd), a fetch buffer of 4 MiB: each of the at most four fetches
// the client holds may take an eighth of it decompressed, so the client
// never holds more than half of it plus one producer batch per fetch.
// Fetches sized at an eighth in compressed bytes held 30 MB here.
func TestFetchesHeldWithinTheirShareDecompressed(t *testing.T) {
	const partitions, perPartition, size = 6, 600, 16 << 10
	const fetchBuffer, batch = 4 << 20, 64 << 10
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, "in", "out", "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeEnv{c: c, brokers: c.ListenAddrs(), partitions: partitions, in: "in", out: "out", changelog: "changelog", group: "sink"}
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerBatchMaxBytes(batch))
	rng := rand.New(rand.NewPCG(1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := range partitions {
		recs := make([]*kgo.Record, 0, perPartition)
		for i := range perPartition {
			recs = append(recs, &kgo.Record{Topic: f.in, Partition: int32(p), Key: fmt.Appendf(nil, "k%d", i), Value: compressible(rng, size)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	probe := &fetchProbe{}
	cfg := f.config(t, t.TempDir(), "sink")
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithHooks(probe))
	cfg.FetchBufferBytes = fetchBuffer
	cfg.MaxRecordBytes = 256 << 10 // under an eighth of the fetch buffer: the share is that eighth
	top := f.topology()
	top.NewProcessor = func(*Task) (Processor, error) { return sink{}, nil }
	e, err := New(cfg, top)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e)
	const n = partitions * perPartition
	waitCond(t, 60*time.Second, fmt.Sprintf("%d records in", n), func() bool { return e.Stats().RecordsIn.Load() >= n }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	peak := probe.peak
	probe.mu.Unlock()
	share := int64(fetchBuffer / 8)
	limit := maxConcurrentFetches * (share + batch + batch/size*recordOverhead)
	t.Logf("client held at most %d bytes decompressed (limit %d); fetch size now %d", peak, limit, e.Stats().FetchBytes.Load())
	if peak > limit {
		t.Errorf("client held %d bytes of fetched records, over %d: %d fetches of %d and a batch each", peak, limit, maxConcurrentFetches, share)
	}
	if fb := e.Stats().FetchBytes.Load(); fb >= share/10 {
		t.Errorf("fetch size %d bytes for input that compresses ~20:1, want under a tenth of the share %d", fb, share)
	}
}

// bloater sets a value of its own under each record's key, made from the
// record's offset (tasks run on goroutines of their own: nothing shared).
type bloater struct{ value func(seed uint64) []byte }

func (b bloater) Process(t *Task, r *kgo.Record, _ int) error {
	return t.State.Set(append([]byte(nil), r.Key...), b.value(uint64(r.Offset)))
}

// TestRestoreFetchesHeldWithinTheirShare: a task restoring its state
// from the changelog reads it with a client of its own, whose fetches are
// sized as the engine's (an eighth of the fetch buffer decompressed each),
// and at most maxConcurrentRestores tasks restore at once (here 6 open).
// With Kafka's default of 1 MiB per partition, compressed, a restore of
// state that compresses well held tens of megabytes, outside the budget.
func TestRestoreFetchesHeldWithinTheirShare(t *testing.T) {
	const n, size = 1200, 16 << 10
	f := newFakeEnv(t, 6)
	f.produce(t, n, n, 0) // n keys: n values in state
	value := func(seed uint64) []byte { return compressible(rand.New(rand.NewPCG(seed, 4)), size) }
	top := f.topology()
	top.NewProcessor = func(*Task) (Processor, error) { return bloater{value: value}, nil }
	cfg := f.config(t, t.TempDir(), "bloater")
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	e, err := New(cfg, top)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e)
	waitCond(t, 60*time.Second, fmt.Sprintf("%d records in", n), func() bool { return e.Stats().RecordsIn.Load() >= n }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Another instance without local state restores every task.
	probe := &fetchProbe{}
	cfg = f.config(t, t.TempDir(), "bloater-2")
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.WithHooks(probe))
	cfg.FetchBufferBytes = 4 << 20
	cfg.MaxRecordBytes = 256 << 10
	var restored atomic.Int64
	cfg.Logger = slog.New(countRestores{slog.NewTextHandler(io.Discard, nil), &restored})
	e2, err := New(cfg, top)
	if err != nil {
		t.Fatal(err)
	}
	r2 := start(t, e2)
	waitCond(t, 60*time.Second, "every task restored", func() bool { return restored.Load() >= int64(f.partitions) }, r2)
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	peak := probe.peak
	probe.mu.Unlock()
	share := cfg.FetchBufferBytes / 8
	batch := int64(cfg.MaxRecordBytes + 48_000) // the engine's producer batches
	// At most maxConcurrentRestores restore at once.
	limit := maxConcurrentRestores * (share + batch + batch/size*recordOverhead)
	t.Logf("restores held at most %d bytes of changelog records decompressed (limit %d)", peak, limit)
	if peak > limit {
		t.Errorf("restores held %d bytes of fetched changelog records, over %d: a fetch of %d and a batch per restoring task", peak, limit, share)
	}
}

// countRestores counts the log records that say a task restored its state
// from the changelog.
type countRestores struct {
	slog.Handler
	n *atomic.Int64
}

func (c countRestores) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "restored state from changelog" {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

// TestFetchBytes: the fetch size is the target over the ratio of
// decompressed to compressed bytes, within [minFetchBytes, maxFetchBytes],
// and never more than the target.
func TestFetchBytes(t *testing.T) {
	var size atomic.Int64
	for _, c := range []struct {
		target, comp, raw, want int64
	}{
		{8 << 20, 1, 1, 8 << 20},                 // incompressible
		{8 << 20, 2, 1, 8 << 20},                 // a ratio below 1 counts as 1
		{8 << 20, 1, 8, 1 << 20},                 // 8:1
		{8 << 20, 1, 10_000, minFetchBytes},      // a ratio too high for the smallest fetch
		{1 << 30, 1, 1, maxFetchBytes},           // a large budget: franz-go's read bound
		{1 << 30, 1, 2, maxFetchBytes},           // …whatever the ratio, while over it
		{minFetchBytes / 2, 1, 1, minFetchBytes}, // a target under the smallest fetch
	} {
		s := newFetchSizer(c.target, &size)
		if got := s.fetchBytes(c.comp, c.raw); got != c.want {
			t.Errorf("target %d, %d bytes as sent for %d decompressed: fetch %d, want %d", c.target, c.comp, c.raw, got, c.want)
		}
	}
	if size.Load() != minFetchBytes {
		t.Errorf("first fetches %d bytes, want %d until a batch is read", size.Load(), minFetchBytes)
	}
}

// TestLargeFetchBufferReads: a fetch buffer whose eighth is more than
// franz-go reads from a broker at once (BrokerMaxReadBytes, 100 MiB) —
// the fetched-records share of a memory budget over 8 GiB — made the
// client refuse its options, and the engine could not start.
func TestLargeFetchBufferReads(t *testing.T) {
	f := newFakeEnv(t, 2)
	f.produce(t, 4, 40, 0)
	cfg := f.config(t, t.TempDir(), "large")
	cfg.FetchBufferBytes = 1 << 30
	e := f.engine(t, cfg)
	r := start(t, e)
	waitCond(t, 30*time.Second, "40 records in", func() bool { return e.Stats().RecordsIn.Load() >= 40 }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().FetchBytes.Load(); got > maxFetchBytes {
		t.Errorf("fetch size %d, over %d", got, maxFetchBytes)
	}
}
