package admin

import (
	"time"

	"github.com/braidlabs/braid/engine"
)

// EngineView is what the admin server reads from the engine. *engine.Engine
// implements it. Both methods must be safe for concurrent use.
type EngineView interface {
	// Stats returns the engine's live counters.
	Stats() *engine.Stats
	// Tasks returns a snapshot of the open tasks, one per assigned
	// partition.
	Tasks() []engine.TaskStat
}

// Counters is a snapshot of the fuse stage's record accounting, summed over
// its tasks. Every figure but OpenTraces only grows.
type Counters struct {
	Messages       int64 // input messages read from the source topics
	Members        int64 // members (spans, log records, points) cut from decoded messages
	Local          int64 // trace groups fused in place (fast path)
	Repartitioned  int64 // trace groups sent to the repartition topic
	Fused          int64 // fused records emitted, every revision
	Revisions      int64 // of which revision > 0
	IncidentTags   int64 // incident tags sent to polluted requests' traces
	TagsLate       int64 // of which arrived after their trace was purged (dropped)
	IdleFlushed    int64 // traces emitted by the processing-time flush before event time closed them
	Late           int64 // members sent to the late topic
	DLQ            int64 // messages sent to the dead-letter topic
	UnjoinedLogs   int64 // log records without a trace id
	UnjoinedPoints int64 // metric points without an exemplar trace id
	Truncated      int64 // members cut by a per-trace cap
	OpenTraces     int64 // traces in state; each has exactly one pending timer

	// Resolve stage (request-id joins).
	Declared     int64 // request ids declared by spans
	Resolved     int64 // trace-less log records joined to a trace by request id
	Unresolved   int64 // trace-less log records flagged: no span declared their request id in time
	OpenRequests int64 // request ids in state
	// Resources stage.
	ResourcePoints  int64 // metric points without an exemplar written to the resources table
	ResourceSamples int64 // samples applied to this instance's resources table
	ResourceSeries  int64 // series in this instance's resources table
	// kvgraph stage.
	KVEvents         int64 // KV-block events, sanitizer and Xid lines routed to the kvgraph stage
	PollutionEdges   int64 // pollution-graph edges emitted
	Incidents        int64 // pollution incidents opened
	PollutedRequests int64 // requests marked polluted
	KVRestarts       int64 // server restarts seen on a GPU (a new service.instance.id): its pool started afresh
	UnrelatedLines   int64 // sanitizer and Xid lines attached nowhere: Xids that are no memory fault, racecheck reports, host lines naming no GPU braid can place

	// Bounds (README, "Memory model" and "Bad input").
	// MemoryBytes is the estimated memory of each budget share the stages
	// hold, by share name (open_traces, closed_traces, waiting_logs,
	// kv_buffer, kv_state, resources).
	MemoryBytes map[string]int64
	// Evictions counts what a full share pushed out, by share name.
	Evictions map[string]int64
	// Dropped counts records dropped by policy, by reason (skip policy,
	// evidence and incident items cut by the record limit…).
	Dropped map[string]int64
	// Future counts members whose event time was too far ahead of their
	// record's timestamp (late or re-stamped).
	Future int64
	// RepairedUTF8 counts members whose strings held invalid UTF-8 and were
	// repaired.
	RepairedUTF8 int64
}

// PartitionLag is the consumer lag of one input partition.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Records between the group's committed offset and the end offset.
	Records int64
}

// LagView is what the Collector reads for consumer lag. *LagMonitor
// implements it.
type LagView interface {
	// Lags returns the lag of every input partition as of the last
	// successful refresh, sorted by topic and partition, and the time of
	// that refresh (zero before the first). The caller must not modify the
	// slice.
	Lags() ([]PartitionLag, time.Time)
}
