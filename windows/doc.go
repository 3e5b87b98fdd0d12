// Package windows holds braid's pure event-time math: watermarks over a set
// of inputs with bounded out-of-orderness and idleness, the lateness rule,
// and windowed aggregation for alert rules.
//
// Watermarks never reads a clock itself: callers pass the processing time
// in, so every function is deterministic.
//
// Panes aggregates samples per string group key into epoch-aligned
// tumbling or sliding windows (Spec), one Agg per pane of length Slide,
// and reports each window once the watermark passes its end, in order of
// end then key — again deterministically: no map order reaches the output,
// and the whole state, including what has been reported, round-trips
// through AppendBinary/UnmarshalBinary so that a task restored from a
// checkpoint neither repeats nor skips a window. Agg holds count, sum,
// minimum, maximum, first and last sample (for growth rates), quantiles and
// the exemplars of the largest values.
//
// Quantiles come from a DDSketch (github.com/DataDog/sketches-go, the only
// dependency outside the standard library): it has a relative-error
// guarantee (0.5 % here) on every quantile, tail ones included, which is
// what latency SLOs need; sketches of panes merge exactly into the sketch
// of their window, whatever the order; and its bins are bounded, collapsing
// the smallest magnitudes when a window's values span more than its
// range. Exact quantiles would need every sample of a window in memory,
// and t-digest-like sketches have no such error bound and merge
// approximately.
package windows
