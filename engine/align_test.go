package engine

import (
	"context"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// skewProbe observes each record's timestamp as its event time and keeps
// how far one input had been read past a record of the other when that
// record came (the event time the task held members of the first for,
// waiting for the second).
type skewProbe struct {
	mu      sync.Mutex
	newest  [2]int64
	worst   time.Duration
	records int
	queued  int64 // the most bytes of one source seen queued for a task
}

func (p *skewProbe) Process(t *Task, r *kgo.Record, input int) error {
	ts := r.Timestamp.UnixNano()
	t.Observe(input, ts)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records++
	if input < len(t.pub.queued) {
		p.queued = max(p.queued, t.pub.queued[input].Load())
	}
	p.newest[input] = max(p.newest[input], ts)
	if other := p.newest[1-input]; other != 0 {
		p.worst = max(p.worst, time.Duration(other-ts))
	}
	return nil
}

// alignmentRun reads two source topics holding the same span of event
// time, one in smaller records (a fetch covers more of it) than the other,
// with Config.Alignment align, and returns how far one was read ahead of
// the other at worst, and the alignment pauses. With apart, the topics
// have two partitions and their records lie in different ones: one task
// reads the fast topic, another the slow one.
func alignmentRun(t *testing.T, align time.Duration, apart bool) (time.Duration, int64, int64) {
	t.Helper()
	const n, fetchBuffer = 1500, 1 << 20
	partitions := int32(1)
	if apart {
		partitions = 2
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "fast", "slow", "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeEnv{c: c, brokers: c.ListenAddrs(), partitions: partitions, changelog: "changelog", group: "align"}
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(64<<10))
	base := time.Now().Add(-2 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for j, in := range []struct {
		topic string
		size  int
	}{{"fast", 4 << 10}, {"slow", 16 << 10}} {
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: in.topic, Partition: int32(j) % partitions, Key: fmt.Appendf(nil, "k%d", i),
				Value: make([]byte, in.size), Timestamp: base.Add(time.Duration(i) * time.Second)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	probe := &skewProbe{}
	cfg := f.config(t, t.TempDir(), "align")
	cfg.FetchBufferBytes = fetchBuffer
	cfg.MaxRecordBytes = 32 << 10
	cfg.Alignment = align
	e, err := New(cfg, Topology{
		Name:         "align",
		Inputs:       []Input{{Topic: "fast"}, {Topic: "slow"}},
		Partitions:   partitions,
		Changelog:    "changelog",
		NewProcessor: func(*Task) (Processor, error) { return probe, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e)
	waitCond(t, 60*time.Second, fmt.Sprintf("%d records processed", 2*n), func() bool {
		probe.mu.Lock()
		defer probe.mu.Unlock()
		return probe.records >= 2*n
	}, r)
	// Both read to their end: nothing stays paused.
	waitCond(t, 10*time.Second, "no partition paused", func() bool { return e.Stats().AlignedPartitions.Load() == 0 }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	return probe.worst, e.Stats().AlignmentPauses.Load(), probe.queued
}

// TestSourceAlignment: a task reading two sources over the same event
// time reads neither more than about Config.Alignment (plus the fetches
// under way when it was paused) ahead of the other, and reads both to
// their end; without alignment one is read far ahead of the other. The
// same holds across the tasks of an instance: one task's source is held
// to another's.
func TestSourceAlignment(t *testing.T) {
	const align, slack = time.Minute, 6 * time.Minute
	for _, apart := range []bool{false, true} {
		t.Run(map[bool]string{false: "one task", true: "two tasks"}[apart], func(t *testing.T) {
			testSourceAlignment(t, align, slack, apart)
		})
	}
}

func testSourceAlignment(t *testing.T, align, slack time.Duration, apart bool) {
	off, _, _ := alignmentRun(t, 0, apart)
	on, pauses, queued := alignmentRun(t, align, apart)
	t.Logf("one source read ahead of the other at worst: %v without alignment, %v with %v (%d pauses); at most %d KiB of one source queued for a task", off, on, align, pauses, queued>>10)
	if off <= align+slack {
		t.Fatalf("without alignment one source was read only %v ahead of the other: the input does not skew the reads", off)
	}
	if pauses == 0 {
		t.Errorf("no alignment pause")
	}
	if on > align+slack {
		t.Errorf("with alignment %v one source was read %v ahead of the other, want at most %v", align, on, align+slack)
	}
}

// slowProbe records, per source, the most bytes of its records queued for
// the task, and works on each record for a while (a checksum, repeated),
// so that the poll loop can fetch faster than the task processes.
type slowProbe struct {
	mu      sync.Mutex
	queued  [2]int64
	records int
	sum     uint32
}

func (p *slowProbe) Process(t *Task, r *kgo.Record, input int) error {
	t.Observe(input, r.Timestamp.UnixNano())
	sum := uint32(0)
	for range 40 {
		sum = crc32.Update(sum, crc32.IEEETable, r.Value)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sum ^= sum
	p.records++
	if input < len(t.pub.queued) {
		p.queued[input] = max(p.queued[input], t.pub.queued[input].Load())
	}
	return nil
}

// TestAlignmentQueueBound: with alignment on, what a source partition
// has queued for its task stays near the engine's queue bound, however
// far the event times let it run (here the bound in event time never
// binds): the source pauses once its queue passes the bound.
func TestAlignmentQueueBound(t *testing.T) {
	const n, size, fetchBuffer = 1200, 8 << 10, 4 << 20
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "a", "b", "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeEnv{c: c, brokers: c.ListenAddrs(), partitions: 1, changelog: "changelog", group: "qbound"}
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(64<<10))
	base := time.Now().Add(-2 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"a", "b"} {
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i),
				Value: make([]byte, size), Timestamp: base.Add(time.Duration(i) * time.Second)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	probe := &slowProbe{}
	cfg := f.config(t, t.TempDir(), "qbound")
	cfg.FetchBufferBytes = fetchBuffer
	cfg.MaxRecordBytes = 32 << 10
	cfg.Alignment = 24 * time.Hour
	e, err := New(cfg, Topology{
		Name:         "qbound",
		Inputs:       []Input{{Topic: "a"}, {Topic: "b"}},
		Partitions:   1,
		Changelog:    "changelog",
		NewProcessor: func(*Task) (Processor, error) { return probe, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e)
	waitCond(t, 60*time.Second, fmt.Sprintf("%d records processed", 2*n), func() bool {
		probe.mu.Lock()
		defer probe.mu.Unlock()
		return probe.records >= 2*n
	}, r)
	waitCond(t, 10*time.Second, "no partition paused", func() bool { return e.Stats().AlignedPartitions.Load() == 0 }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	bound := int64(fetchBuffer / (2 * 1 * 2))
	probe.mu.Lock()
	defer probe.mu.Unlock()
	t.Logf("at most %d and %d KiB queued for the task, bound %d KiB", probe.queued[0]>>10, probe.queued[1]>>10, bound>>10)
	for i, q := range probe.queued {
		if q == 0 {
			t.Errorf("source %d: nothing seen queued", i)
		}
		if limit := bound + alignedPartitionFetchBytes*3; q > limit {
			t.Errorf("source %d: %d KiB queued for the task, want at most %d KiB (the bound and a poll's batches)", i, q>>10, limit>>10)
		}
	}
}
