package engine

import "github.com/twmb/franz-go/pkg/kgo"

// Processor is the logic of one task. The engine calls it from the task's
// goroutine only, so it needs no locks. Process returns an error only for
// something the task cannot go on from (state I/O); a bad record is the
// processor's to route (dead-letter) and is not an error.
type Processor interface {
	// Process handles one record read from input (an index into
	// Topology.Inputs). rec and its slices stay valid only during the call
	// unless the processor copies them.
	Process(t *Task, rec *kgo.Record, input int) error
}

// WatermarkHandler is implemented by processors with event-time timers. It
// is called after every batch of records and on every tick with the task's
// watermark (which never goes back); it fires what is due and may emit.
type WatermarkHandler interface {
	OnWatermark(t *Task, wm int64) error
}

// Backlogger is implemented by processors whose OnWatermark does a bounded
// amount of work per call: while Backlog reports true the task calls
// OnWatermark again as soon as its queue is empty, so that a large backlog
// of due timers never delays a checkpoint barrier by more than one slice.
type Backlogger interface {
	Backlog() bool
}

// WatermarkHolder is implemented by processors that may still write, to
// an internal topic, records timed behind the watermark the task sends on
// it: work held until a watermark passed it, which a slice (Backlogger)
// left for a later call, or which a watermark the processor has not been
// handed yet makes due. The markers the task sends on that topic carry at
// most HeldWatermark, so that the tasks reading it have not closed, by
// their watermark, what those records still change. The work itself must
// be released by a watermark that does not cover the topic it holds
// (Task.UpstreamWatermark), or the hold would hold its own release.
type WatermarkHolder interface {
	// HeldWatermark returns, for an internal input (an index into
	// Topology.Inputs), the earliest event time such a record may have;
	// math.MaxInt64 when none is held.
	HeldWatermark(input int) int64
}

// Checkpointer is implemented by processors that hold state in memory: at a
// checkpoint they write it into t.State before the transaction commits.
type Checkpointer interface {
	PrepareCheckpoint(t *Task) error
}

// Restorer is implemented by processors that cache state in memory. Restore
// is called when the task opens and after every aborted checkpoint, when
// t.State is back at the last committed checkpoint.
type Restorer interface {
	Restore(t *Task) error
}

// Closer is implemented by processors that hold resources.
type Closer interface {
	Close() error
}
