// Package alerts is braid's alerts stage: rules over event-time windows of
// what the fuse stage observes (fused traces' figures, resource samples,
// pollution incidents), evaluated per group in the stream (see Processor
// for how combiners and owners share the work, expr.go for expressions).
//
// # Alert rules and recording rules
//
// An alert rule moves an alert through its lifecycle (pending, firing,
// resolved) and writes each change to braid.alerts. A recording rule
// (Rule.Record, as Prometheus has them) is evaluated the same way — its
// window, every and group_by — but its expression's value per group and
// window is handed to StageConfig.OnRecord (the job exports it as a gauge
// named Record with the group's labels and the rule's labels), with no
// lifecycle and nothing written to braid.alerts. A window with no value
// (NaN) is handed on too, so that the exporter can drop the series. A
// rule is evaluated for a group at a window end when the group has data in
// the rule's own window (or an active alert).
//
// # Long windows
//
// A function may take a window as last argument: avg(jailbreak, 1w) is the
// mean of jailbreak over the week ending where the rule's window ends, so
// that "avg(jailbreak) - avg(jailbreak, 1w)" is the drift of the rate now
// from its trailing baseline. A window no longer than the rule's is read
// from the fine panes, exactly. A longer one must be a multiple of
// alerts.baseline_resolution (B, default 6h), at most 400 of them, and is
// read from a coarse tier: for the figures read with a long window, each
// owned group keeps coarse panes of B, into which each fine pane is merged
// (folded) when it is dropped from the fine tier — once no window of the
// set reads it again, even revised (its start plus the set's longest
// window plus allowed lateness is behind the horizon). A fine pane is in
// one tier only, so nothing is counted twice, and late data never reaches
// a folded pane (it would be late for the fine pane, and is dropped). The
// long aggregate of a window ending at end is the coarse panes whose start
// lies in [end−W, end) plus the fine panes not yet folded whose coarse
// pane starts there too: the observations in [ceil(end−W, B), end).
//
// The approximation is at the old edge only: the window starts at the
// first multiple of B at or after end−W, so it is up to B shorter than W
// (a week read with B = 6h covers between 162 and 168 hours). The newest
// part is exact, from the fine panes. Coarse panes keep no exemplars and,
// unless a quantile is taken of the figure, no sketch.
//
// Coarse panes are kept for the longest long window of the group's set
// plus allowed lateness, and are part of the owner's checkpointed state
// (state version 2; a version 1 state, written before the coarse tier,
// restores with its fine panes and alert states and an empty coarse tier,
// which fills from then on). Memory per group: about (longest window / B)
// coarse panes of one aggregate (~130 bytes) per figure read with a long
// window — for the default rules (four figures over a week, B = 6h) about
// 15 KB per model and tenant (90 KB with B = 1h).
package alerts
