package job

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Budget is state.memory_budget split into the shares of everything the job
// holds in memory. Each share bounds one structure; when it is full the
// structure applies backpressure or evicts with a counted loss (see
// README.md, "Memory model"). Shares are fixed fractions of the total so
// that one number sizes the job.
type Budget struct {
	// Total is state.memory_budget, bytes.
	Total int64
	// PebbleCache is the block cache shared by every keyspace.
	PebbleCache int64
	// PebbleMemTables is the memtable memory of all keyspaces together.
	PebbleMemTables int64
	// StateBatch bounds the state writes that wait for the next
	// checkpoint (Pebble's indexed batches); a task that fills its part
	// brings the checkpoint forward.
	StateBatch int64
	// FetchBuffer bounds records polled from Kafka and not yet processed;
	// when full, polling stops (backpressure).
	FetchBuffer int64
	// ProducerBuffer bounds records produced and not yet acknowledged;
	// when full, the task waits (backpressure).
	ProducerBuffer int64
	// OpenTraces bounds fuse's in-memory open-trace records and their
	// members since the last checkpoint; when full the oldest open traces
	// are emitted early (a later member revises them).
	OpenTraces int64
	// ClosedTraces bounds fuse's tombstones of emitted and purged traces
	// (event_time.closed_retention); when full the oldest are forgotten
	// early (a member for such a trace starts it again at revision 0).
	ClosedTraces int64
	// WaitingLogs bounds logs that wait for a span to declare their
	// request id; when full the oldest go to braid.late with reason
	// "memory budget".
	WaitingLogs int64
	// KVBuffer bounds KV-block events held until the watermark passes
	// them; when full the oldest are handed to the detector early.
	KVBuffer int64
	// KVState bounds the pollution detector's block, request and incident
	// state; when full the least recently used entries are forgotten.
	KVState int64
	// Resources bounds the resources table (per-resource series); when
	// full the least recently updated series are removed.
	Resources int64
	// Sampling bounds the sampling stage's latency windows (the slow
	// rule); when full the model updated longest ago is forgotten.
	Sampling int64
}

// budgetShares are the shares in percent of the total, in Budget's order.
var budgetShares = []struct {
	name    string
	percent int64
	field   func(*Budget) *int64
}{
	{"pebble block cache", 13, func(b *Budget) *int64 { return &b.PebbleCache }},
	{"pebble memtables", 10, func(b *Budget) *int64 { return &b.PebbleMemTables }},
	{"state writes before checkpoint", 10, func(b *Budget) *int64 { return &b.StateBatch }},
	{"fetched records", 10, func(b *Budget) *int64 { return &b.FetchBuffer }},
	{"producer buffer", 10, func(b *Budget) *int64 { return &b.ProducerBuffer }},
	{"open traces", 15, func(b *Budget) *int64 { return &b.OpenTraces }},
	{"closed traces", 5, func(b *Budget) *int64 { return &b.ClosedTraces }},
	{"waiting logs", 5, func(b *Budget) *int64 { return &b.WaitingLogs }},
	{"KV event buffer", 5, func(b *Budget) *int64 { return &b.KVBuffer }},
	{"KV detector state", 10, func(b *Budget) *int64 { return &b.KVState }},
	{"resources table", 5, func(b *Budget) *int64 { return &b.Resources }},
	{"sampling windows", 2, func(b *Budget) *int64 { return &b.Sampling }},
}

// MinMemoryBudget is the smallest state.memory_budget accepted.
const MinMemoryBudget = 64 << 20

// SplitBudget splits total into its shares.
func SplitBudget(total int64) Budget {
	b := Budget{Total: total}
	for _, s := range budgetShares {
		*s.field(&b) = total / 100 * s.percent
	}
	return b
}

// WriteTable writes the shares as a table (braid run --print-budget, README).
func (b Budget) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "share\tpercent\tbytes\t\n")
	for _, s := range budgetShares {
		fmt.Fprintf(tw, "%s\t%d %%\t%d\t\n", s.name, s.percent, *s.field(&b))
	}
	fmt.Fprintf(tw, "total\t100 %%\t%d\t\n", b.Total)
	return tw.Flush()
}
