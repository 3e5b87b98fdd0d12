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

// probeCounts is what both probes keep: the records processed, and per
// source the most bytes of its records seen queued for the task.
type probeCounts struct {
	mu      sync.Mutex
	records int
	queued  [2]int64
}

// count counts a record of input processed by t; p.mu held.
func (p *probeCounts) count(t *Task, input int) {
	p.records++
	if input < len(t.pub.queued) {
		p.queued[input] = max(p.queued[input], t.pub.queued[input].Load())
	}
}

func (p *probeCounts) processed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records
}

// skewProbe observes each record's timestamp as its event time and keeps
// how far one input had been read past a record of the other when that
// record came (the event time the task held members of the first for,
// waiting for the second).
type skewProbe struct {
	probeCounts
	newest [2]int64
	worst  time.Duration
}

func (p *skewProbe) Process(t *Task, r *kgo.Record, input int) error {
	ts := r.Timestamp.UnixNano()
	t.Observe(input, ts)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count(t, input)
	p.newest[input] = max(p.newest[input], ts)
	if other := p.newest[1-input]; other != 0 {
		p.worst = max(p.worst, time.Duration(other-ts))
	}
	return nil
}

// alignSource is a source topic of runAligned: its records' value size,
// and the partition they are produced to.
type alignSource struct {
	topic     string
	size      int
	partition int32
}

// runAligned produces n records to each source, one a second of event time
// from two hours ago, and runs a topology of the sources over partitions,
// with FetchBufferBytes fetchBuffer and Config.Alignment align, until
// probe has processed them all and no partition stays paused.
func runAligned(t *testing.T, name string, partitions int32, srcs []alignSource, n int, fetchBuffer int64, align time.Duration,
	probe interface {
		Processor
		processed() int
	}) *Engine {
	t.Helper()
	topics := []string{"changelog"}
	inputs := make([]Input, 0, len(srcs))
	for _, src := range srcs {
		topics = append(topics, src.topic)
		inputs = append(inputs, Input{Topic: src.topic})
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fakeEnv{c: c, brokers: c.ListenAddrs(), partitions: partitions, changelog: "changelog", group: name}
	cl := f.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(64<<10))
	base := time.Now().Add(-2 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, src := range srcs {
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: src.topic, Partition: src.partition, Key: fmt.Appendf(nil, "k%d", i),
				Value: make([]byte, src.size), Timestamp: base.Add(time.Duration(i) * time.Second)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := f.config(t, t.TempDir(), name)
	cfg.FetchBufferBytes = fetchBuffer
	cfg.MaxRecordBytes = 32 << 10
	cfg.Alignment = align
	e, err := New(cfg, Topology{
		Name:         name,
		Inputs:       inputs,
		Partitions:   partitions,
		Changelog:    "changelog",
		NewProcessor: func(*Task) (Processor, error) { return probe, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, e)
	want := len(srcs) * n
	waitCond(t, 60*time.Second, fmt.Sprintf("%d records processed", want), func() bool { return probe.processed() >= want }, r)
	// Every source read to its end: nothing stays paused.
	waitCond(t, 10*time.Second, "no partition paused", func() bool { return e.Stats().AlignedPartitions.Load() == 0 }, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	return e
}

// alignmentRun reads two source topics holding the same span of event
// time, one in smaller records (a fetch covers more of it) than the other,
// with Config.Alignment align, and returns how far one was read ahead of
// the other at worst, the alignment pauses, and the most bytes of one
// source queued for a task. With apart, the topics have two partitions
// and their records lie in different ones: one task reads the fast
// topic, another the slow one.
func alignmentRun(t *testing.T, align time.Duration, apart bool) (time.Duration, int64, int64) {
	t.Helper()
	partitions, slow := int32(1), int32(0)
	if apart {
		partitions, slow = 2, 1
	}
	probe := &skewProbe{}
	e := runAligned(t, "align", partitions, []alignSource{{"fast", 4 << 10, 0}, {"slow", 16 << 10, slow}}, 1500, 1<<20, align, probe)
	probe.mu.Lock()
	defer probe.mu.Unlock()
	return probe.worst, e.Stats().AlignmentPauses.Load(), max(probe.queued[0], probe.queued[1])
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

// slowProbe works on each record for a while (a checksum, repeated), so
// that the poll loop can fetch faster than the task processes.
type slowProbe struct {
	probeCounts
	sum uint32
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
	p.count(t, input)
	return nil
}

// TestAlignmentQueueBound: with alignment on, what a source partition
// has queued for its task stays near the engine's queue bound, however
// far the event times let it run (here the bound in event time never
// binds): the source pauses once its queue passes the bound.
func TestAlignmentQueueBound(t *testing.T) {
	const fetchBuffer = 4 << 20
	probe := &slowProbe{}
	runAligned(t, "qbound", 1, []alignSource{{"a", 8 << 10, 0}, {"b", 8 << 10, 0}}, 1200, fetchBuffer, 24*time.Hour, probe)
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
