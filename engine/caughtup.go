package engine

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A source partition is caught up when the task's next offset to process
// has reached the partition's end as last reported by the broker (the last
// stable offset: the engine reads read_committed) and no record came since.
// Two reports feed it: every polled batch carries the end of the fetch it
// came from, judged by the task once it has processed the batch; and, since
// franz-go hands the poll loop no empty fetch, the end checker asks the
// brokers for the ends of the source partitions of every task, every
// EndCheckInterval, off the poll loop (a partition that returned no record
// since its task opened has no other source; one that is caught up gets
// records the held poll loop does not fetch).
const (
	// EndCheckInterval: a caught-up task learns that new records reached
	// its sources within this (or its next fetch), when the poll loop is
	// held too.
	EndCheckInterval = 250 * time.Millisecond
	endCheckTimeout  = 5 * time.Second
)

// endReport is the end checker's mailbox of one task: the latest answer per
// source (-1: none), and a signal that there is one.
type endReport struct {
	mu     sync.Mutex
	end    []int64 // last stable offset
	start  []int64 // log start offset
	signal chan struct{}
}

func (r *endReport) init(sources int) {
	r.end, r.start, r.signal = make([]int64, sources), make([]int64, sources), make(chan struct{}, 1)
	for i := range r.end {
		r.end[i], r.start[i] = -1, -1
	}
}

func (r *endReport) put(end, start []int64) {
	r.mu.Lock()
	copy(r.end, end)
	copy(r.start, start)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *endReport) take() (end, start []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.end...), append([]int64(nil), r.start...)
}

// watchEnds runs the end checker until ctx ends.
func (e *Engine) watchEnds(ctx context.Context, cl *kgo.Client) {
	if e.sources == 0 {
		return
	}
	tick := time.NewTicker(EndCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e.checkEnds(ctx, cl)
	}
}

// checkEnds asks for the ends of the source partitions of every open task
// and leaves them to the tasks. A partition whose answer fails is left out
// (-1) this time.
func (e *Engine) checkEnds(ctx context.Context, cl *kgo.Client) {
	e.mu.Lock()
	// Caught-up tasks too: while the poll loop is held (backpressure, a
	// checkpoint) records that reach a caught-up partition are not
	// fetched, and only the broker's end says the partition is behind
	// again — without it the partition would go idle and what it holds
	// would arrive late.
	pubs := maps.Clone(e.mu.tasks)
	e.mu.Unlock()
	needStart := false
	for _, pub := range pubs {
		needStart = needStart || pub.needStart.Load()
	}
	if len(pubs) == 0 {
		return
	}
	parts := make([]int32, 0, len(pubs))
	for p := range pubs {
		parts = append(parts, p)
	}
	rctx, cancel := context.WithTimeout(ctx, endCheckTimeout)
	defer cancel()
	ends := listOffsets(rctx, cl, e.srcTopics, parts, -1)
	var starts map[string]map[int32]int64
	if needStart {
		starts = listOffsets(rctx, cl, e.srcTopics, parts, -2)
	}
	if ctx.Err() != nil {
		return
	}
	for p, pub := range pubs {
		end, start := make([]int64, e.sources), make([]int64, e.sources)
		for i, topic := range e.srcTopics {
			end[i], start[i] = lookup(ends, topic, p), lookup(starts, topic, p)
		}
		pub.ends.put(end, start)
	}
}

func lookup(m map[string]map[int32]int64, topic string, p int32) int64 {
	if o, ok := m[topic][p]; ok {
		return o
	}
	return -1
}

// listOffsets asks for the offsets at timestamp ts (-1: the end, read
// committed, i.e. the last stable offset; -2: the log start) of partitions
// parts of topics. Partitions whose answer failed are absent.
func listOffsets(ctx context.Context, cl *kgo.Client, topics []string, parts []int32, ts int64) map[string]map[int32]int64 {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	for _, topic := range topics {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = ts
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	out := map[string]map[int32]int64{}
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			continue
		}
		resp, ok := sh.Resp.(*kmsg.ListOffsetsResponse)
		if !ok {
			continue
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if kerr.ErrorForCode(rp.ErrorCode) != nil || rp.Offset < 0 {
					continue
				}
				if out[rt.Topic] == nil {
					out[rt.Topic] = map[int32]int64{}
				}
				out[rt.Topic][rp.Partition] = rp.Offset
			}
		}
	}
	return out
}

// CaughtUp reports whether every source partition of the task is caught
// up: its next offset to process has reached the partition's end as last
// reported by the broker (the last stable offset), and no source record
// arrived since. False while that is unknown (a task just opened, before
// the first report), for a task without source inputs, and when the
// watermarks are frozen (replay). Operators use it to take processing-time
// shortcuts only when live.
func (t *Task) CaughtUp() bool {
	if len(t.caught) == 0 || t.all.Frozen() {
		return false
	}
	for _, c := range t.caught {
		if !c {
			return false
		}
	}
	return true
}

// Live reports whether the instance is live as far as it can tell: this
// task is caught up (CaughtUp) and every other task of the instance has
// been caught up now or within the last checkpoint interval. False while
// any of them reads a backlog, and for as long as CaughtUp is. A task that
// receives nothing while Live is false is stalled (the poll loop held by
// backpressure or a checkpoint, a slow sibling), not idle: operators take
// processing-time shortcuts, such as flushing what input stopped feeding,
// only when Live. Other instances' tasks are not seen; their repartitioned
// records keep the task's own input flowing while they read.
func (t *Task) Live() bool {
	if !t.CaughtUp() {
		return false
	}
	since := t.e.cfg.Now().Add(-t.e.cfg.CheckpointInterval).UnixNano()
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	for _, pub := range t.e.mu.tasks {
		if pub != &t.pub && !pub.caughtUp.Load() && pub.caughtUpAt.Load() < since {
			return false
		}
	}
	return true
}

// setCaught sets source i caught up or not, in every tracker. Task
// goroutine.
func (t *Task) setCaught(i int, c bool) {
	t.caught[i] = c
	for _, w := range t.fed {
		w.SetCaughtUp(i, c)
	}
}

// judge sets source i caught up when the task's next offset there has
// reached end, the partition's end as a broker reported it; start is the
// log start offset (-1 unknown), where consumption begins when the task
// has no position of its own.
func (t *Task) judge(i int, end, start int64) {
	next, ok := t.offsets[t.e.srcTopics[i]]
	if !ok {
		next = 0
	}
	next = max(next, start)
	t.setCaught(i, end >= 0 && next >= end)
	for _, w := range t.fed {
		w.SetBehind(i, end >= 0 && next < end)
	}
}

// takeEnds judges the sources by the end checker's latest answer.
func (t *Task) takeEnds() {
	end, start := t.pub.ends.take()
	for i := range end {
		if end[i] >= 0 {
			t.judge(i, end[i], start[i])
		}
	}
	t.publishCaughtUp()
	t.align()
}

// publishCaughtUp publishes CaughtUp for the end checker and Engine.Tasks.
func (t *Task) publishCaughtUp() {
	c := t.CaughtUp()
	t.pub.caughtUp.Store(c)
	if c {
		t.pub.caughtUpAt.Store(t.e.cfg.Now().UnixNano())
	}
	need := false
	for _, topic := range t.e.srcTopics {
		if _, ok := t.offsets[topic]; !ok {
			need = true
		}
	}
	t.pub.needStart.Store(need)
}
