package job

import (
	"os"
	"runtime/debug"
)

// GCPercent is the Go collector's GOGC for a job: the heap may grow to
// five times what is live before a collection, within the memory limit.
// The job's live heap is mostly long-lived (open traces, Pebble's cache
// and memtables, the resources table) while most of what it allocates —
// decoded messages, records on their way to Kafka — lives for one
// message; at Go's default of 100 the collector marks the long-lived heap
// every time the short-lived garbage doubles it. The memory limit, not
// GOGC, is what keeps the process within its budget.
const GCPercent = 400

// TuneRuntime sets the Go runtime for a job of budget bytes: the memory
// limit at the budget unless GOMEMLIMIT is set, and GOGC at GCPercent
// unless GOGC is set. A budget of 0 leaves the memory limit alone (a
// process that holds more than the job, such as a benchmark producing
// its workload in the same process). It returns a func that restores
// what it changed.
func TuneRuntime(budget int64) (restore func()) {
	limit, percent := int64(-1), -1
	if budget > 0 && os.Getenv("GOMEMLIMIT") == "" {
		// The Go heap is most of what the budget bounds: let the
		// collector work harder before the process grows past it.
		limit = debug.SetMemoryLimit(budget)
	}
	if os.Getenv("GOGC") == "" {
		percent = debug.SetGCPercent(GCPercent)
	}
	return func() {
		if limit >= 0 {
			debug.SetMemoryLimit(limit)
		}
		if percent >= 0 {
			debug.SetGCPercent(percent)
		}
	}
}
