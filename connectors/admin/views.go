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
