package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The reader merges the records of every input partition in the order of
// (record timestamp, topic index, partition, offset): a k-way merge over
// one small queue per partition, each in offset order. A record is taken
// only when every partition that may still deliver records has a head
// record, so the merged order depends only on the records in the ranges,
// never on how fetches happen to arrive.
//
// A partition's queue is bounded: above pauseRecords records or pauseBytes
// bytes its fetching pauses, and resumes below half of both.
//
// End of a range [From, To): the partition is done when a record at offset
// To-1 or beyond has been seen. The client keeps control records (they are
// not replayed), so the commit or abort marker of a transactional producer
// counts too: an input partition's last offsets are often such markers, and
// an aborted record at To-1 is followed by its abort marker. Offsets can
// only be missing for good in a compacted input topic (the Collector's
// unkeyed records rule that out); a partition that delivers nothing for
// StallTimeout while the merge waits on it is an error that names it,
// rather than a guess that would make the output depend on timing.

const (
	pauseRecords = 4096
	pauseBytes   = 4 << 20
)

// fetched is one partition's part of a poll.
type fetched struct {
	topic     string
	partition int32
	recs      []*kgo.Record
}

// fetcher is the Kafka side of the reader; tests fake it.
type fetcher interface {
	// poll blocks until records of some partitions arrive or ctx ends.
	poll(ctx context.Context) ([]fetched, error)
	pause(topic string, partition int32)
	resume(topic string, partition int32)
}

type tp struct {
	topic     string
	partition int32
}

// source is one input partition in the merge.
type source struct {
	rng    PartitionRange
	queue  []*kgo.Record
	head   int
	bytes  int
	done   bool  // no record of the range is still to come from Kafka
	paused bool  // fetching paused because the queue is long
	seen   int64 // offset after the last record that arrived
	taken  int64 // offset after the last record taken (progress)
	heapIx int   // index in the merge heap, -1 if absent
	// lastSeen is the wall-clock time something arrived, for the stall
	// check only.
	lastSeen time.Time
}

func (s *source) queued() int { return len(s.queue) - s.head }

type reader struct {
	f        fetcher
	srcs     []*source
	byTP     map[tp]*source
	heap     mergeHeap
	starving int // sources not done with an empty queue
	stall    time.Duration
	read     int64 // records taken
}

func newReader(f fetcher, ranges []PartitionRange, stall time.Duration) *reader {
	r := &reader{f: f, byTP: map[tp]*source{}, stall: stall}
	now := time.Now()
	for _, rng := range ranges {
		s := &source{rng: rng, seen: rng.From, taken: rng.From, heapIx: -1, lastSeen: now}
		if rng.Len() == 0 {
			s.done = true
		} else {
			r.starving++
		}
		r.srcs = append(r.srcs, s)
		r.byTP[tp{rng.Topic, rng.Partition}] = s
	}
	return r
}

// next returns the next record in merge order and its source index, or nil
// at the end of every range.
func (r *reader) next(ctx context.Context) (*kgo.Record, int, error) {
	for r.starving > 0 {
		if err := r.poll(ctx); err != nil {
			return nil, 0, err
		}
	}
	if len(r.heap) == 0 {
		return nil, 0, nil
	}
	s := r.heap[0]
	rec := s.queue[s.head]
	s.queue[s.head] = nil
	s.head++
	s.bytes -= recSize(rec)
	s.taken = rec.Offset + 1
	r.read++
	if s.queued() == 0 {
		s.queue, s.head = s.queue[:0], 0
		heap.Remove(&r.heap, s.heapIx)
		if !s.done {
			r.starving++
			s.lastSeen = time.Now() // the stall clock starts now
		}
	} else {
		if s.head >= 1024 && s.head*2 >= len(s.queue) {
			// A queue that never empties would grow its array forever.
			n := copy(s.queue, s.queue[s.head:])
			clear(s.queue[n:])
			s.queue, s.head = s.queue[:n], 0
		}
		heap.Fix(&r.heap, s.heapIx)
	}
	if s.paused && !s.done && s.queued() < pauseRecords/2 && s.bytes < pauseBytes/2 {
		s.paused = false
		r.f.resume(s.rng.Topic, s.rng.Partition)
	}
	return rec, s.rng.Input, nil
}

func (r *reader) poll(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, r.stall)
	fs, err := r.f.poll(pctx)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	now := time.Now()
	for _, f := range fs {
		s := r.byTP[tp{f.topic, f.partition}]
		if s == nil || s.done || len(f.recs) == 0 {
			continue
		}
		s.lastSeen = now
		wasEmpty := s.queued() == 0
		for _, rec := range f.recs {
			if rec.Offset < s.seen {
				continue // arrived before: refetched after a pause
			}
			if rec.Offset >= s.rng.To {
				s.done = true
				break
			}
			s.seen = rec.Offset + 1
			if !rec.Attrs.IsControl() {
				s.queue = append(s.queue, rec)
				s.bytes += recSize(rec)
			}
			if rec.Offset >= s.rng.To-1 {
				s.done = true
				break
			}
		}
		if wasEmpty && s.queued() > 0 {
			heap.Push(&r.heap, s)
		}
		if wasEmpty && (s.queued() > 0 || s.done) {
			r.starving--
		}
		switch {
		case s.done:
			if !s.paused {
				s.paused = true
				r.f.pause(s.rng.Topic, s.rng.Partition) // for good
			}
		case !s.paused && (s.queued() >= pauseRecords || s.bytes >= pauseBytes):
			s.paused = true
			r.f.pause(s.rng.Topic, s.rng.Partition)
		}
	}
	var stalled []string
	for _, s := range r.srcs {
		if !s.done && s.queued() == 0 && now.Sub(s.lastSeen) >= r.stall {
			stalled = append(stalled, fmt.Sprintf("%s:%d at offset %d of [%d, %d)", s.rng.Topic, s.rng.Partition, s.seen, s.rng.From, s.rng.To))
		}
	}
	if len(stalled) > 0 {
		return fmt.Errorf("replay: no records for %v from %s; are offsets missing (a compacted input topic)? Pass --to as TOPIC:PARTITION:OFFSET to end there", r.stall, strings.Join(stalled, ", "))
	}
	return nil
}

// progress returns the offsets covered so far and in all.
func (r *reader) progress() (done, total int64) {
	for _, s := range r.srcs {
		total += s.rng.Len()
		if s.done && s.queued() == 0 {
			done += s.rng.Len()
			continue
		}
		done += min(max(s.taken-s.rng.From, 0), s.rng.Len())
	}
	return done, total
}

func recSize(r *kgo.Record) int { return len(r.Key) + len(r.Value) + 64 }

// less is the merge order: record timestamp, topic index, partition,
// offset.
func less(a, b *source) bool {
	ra, rb := a.queue[a.head], b.queue[b.head]
	if ta, tb := ra.Timestamp.UnixNano(), rb.Timestamp.UnixNano(); ta != tb {
		return ta < tb
	}
	if a.rng.Input != b.rng.Input {
		return a.rng.Input < b.rng.Input
	}
	if a.rng.Partition != b.rng.Partition {
		return a.rng.Partition < b.rng.Partition
	}
	return ra.Offset < rb.Offset
}

type mergeHeap []*source

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return less(h[i], h[j]) }
func (h mergeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIx, h[j].heapIx = i, j
}
func (h *mergeHeap) Push(x any) {
	s := x.(*source)
	s.heapIx = len(*h)
	*h = append(*h, s)
}
func (h *mergeHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapIx = -1
	return s
}

// kafkaFetcher reads the ranges with a plain consumer: no group, no
// commits, read_committed, control records kept (see above).
type kafkaFetcher struct {
	cl *kgo.Client
}

func newKafkaFetcher(opts []kgo.Opt, ranges []PartitionRange) (*kafkaFetcher, error) {
	parts := map[string]map[int32]kgo.Offset{}
	for _, r := range ranges {
		if r.Len() == 0 {
			continue
		}
		if parts[r.Topic] == nil {
			parts[r.Topic] = map[int32]kgo.Offset{}
		}
		parts[r.Topic][r.Partition] = kgo.NewOffset().At(r.From)
	}
	opts = append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// A From before the log start (deleted by retention) starts at
		// the log start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &kafkaFetcher{cl: cl}, nil
}

func (k *kafkaFetcher) poll(ctx context.Context) ([]fetched, error) {
	fs := k.cl.PollFetches(ctx)
	var errs []error
	for _, e := range fs.Errors() {
		if errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded) {
			continue
		}
		errs = append(errs, fmt.Errorf("replay: fetch %s:%d: %w", e.Topic, e.Partition, e.Err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []fetched
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err == nil && len(p.Records) > 0 {
			out = append(out, fetched{topic: p.Topic, partition: p.Partition, recs: p.Records})
		}
	})
	return out, nil
}

func (k *kafkaFetcher) pause(topic string, p int32) {
	k.cl.PauseFetchPartitions(map[string][]int32{topic: {p}})
}

func (k *kafkaFetcher) resume(topic string, p int32) {
	k.cl.ResumeFetchPartitions(map[string][]int32{topic: {p}})
}

func (k *kafkaFetcher) close() { k.cl.Close() }
