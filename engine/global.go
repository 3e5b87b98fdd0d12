package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/windows"
)

// Global is a topic that the tasks write and that every instance reads
// whole (a global table, as Kafka Streams' GlobalKTable): for data without a
// key of the job's stages, such as per-resource time series.
//
// Tasks write it in their transactions and send their source watermark to
// every partition of it at each checkpoint, as for internal inputs. The
// engine reads it, read_committed, from the start, on a goroutine of its
// own, and hands every record — data and markers — to Feed;
// GlobalWatermark turns the markers into the table's watermark.
type Global struct {
	Topic string
	// Feed is called for every record of the topic in partition order,
	// from one goroutine at a time; now is processing time. The record is
	// valid only during the call.
	Feed func(r *kgo.Record, now time.Time)
	// End is called when the input ends (a bounded replay, Harness.Finish):
	// nothing more will come.
	End func()
}

// GlobalWatermark tracks the watermark of a global topic from the markers
// the tasks write to it: an event time that every task had passed (in its
// sources) when it wrote the last marker read from every partition. Records
// a task wrote before such a marker precede it in the partition, so once
// the global watermark has passed t, every on-time record with event time
// up to t has been fed. Not safe for concurrent use.
type GlobalWatermark struct {
	w     *windows.Watermarks
	tasks int32
	parts int32
}

// NewGlobalWatermark tracks a topic of partitions partitions written by
// tasks tasks. An input silent for idleness stops holding the watermark
// back; if no marker at all has been seen and every input is idle, no task
// is writing and the watermark is windows.MaxTime.
func NewGlobalWatermark(partitions, tasks int32, idleness time.Duration, now time.Time) *GlobalWatermark {
	w := windows.NewWatermarks(int(partitions*tasks), 0, idleness, now)
	for i := range int(partitions * tasks) {
		w.MarkUpstream(i)
	}
	return &GlobalWatermark{w: w, tasks: tasks, parts: partitions}
}

// Observe records r if it is a watermark marker and reports whether it was.
func (g *GlobalWatermark) Observe(r *kgo.Record, now time.Time) bool {
	if r.Value != nil || len(r.Headers) != 1 || r.Headers[0].Key != markerHeader {
		return false
	}
	up, wm, idle, ok := decodeMarker(r.Headers[0].Value)
	if !ok || up < 0 || up >= g.tasks || r.Partition < 0 || r.Partition >= g.parts {
		return true // malformed: ignored
	}
	g.w.Report(int(r.Partition*g.tasks+up), wm, idle, now)
	return true
}

// Current is the watermark at processing time now.
func (g *GlobalWatermark) Current(now time.Time) int64 {
	wm := g.w.Current(now)
	if wm == windows.MinTime && g.w.Idle(now) && !g.seen() {
		return windows.MaxTime
	}
	return wm
}

func (g *GlobalWatermark) seen() bool {
	for _, m := range g.w.Maxima() {
		if m != windows.MinTime {
			return true
		}
	}
	return false
}

// End moves the watermark to the end of time.
func (g *GlobalWatermark) End() { g.w.Advance(windows.MaxTime) }

// readGlobals reads every global topic of the topology until ctx ends.
func (e *Engine) readGlobals(ctx context.Context) error {
	if len(e.topo.Globals) == 0 {
		return nil
	}
	byTopic := map[string]*Global{}
	topics := make([]string, 0, len(e.topo.Globals))
	for i := range e.topo.Globals {
		g := &e.topo.Globals[i]
		byTopic[g.Topic] = g
		topics = append(topics, g.Topic)
	}
	opts := append([]kgo.Opt{}, e.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := newSizedClient(opts, e.fetchShare())
	if err != nil {
		return fmt.Errorf("engine: global table client: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var errs []error
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("engine: read global %s[%d]: %w", topic, p, err))
			}
		})
		if len(errs) > 0 {
			e.log.Warn("global table fetch failed; retrying", "err", errors.Join(errs...))
		}
		now := e.cfg.Now()
		fetches.EachRecord(func(r *kgo.Record) {
			if g := byTopic[r.Topic]; g != nil {
				e.feedRead(g, e.xk[r.Topic]-len(e.internal), r, now)
			}
		})
	}
}
