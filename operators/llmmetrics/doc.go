// Package llmmetrics keeps the LLM-serving latency figures that braid
// derives per request (time to first token, time per output token, queue,
// prefill, decode, end-to-end), per-layer decode time, KV-cache hit ratio,
// batch efficiency, KV-cache health gauges and pollution incidents, the
// context-length curve (TPOT and decode throughput per model and prompt
// length bucket, see PromptBuckets), and requests by outcome, guardrail
// figures and checkers' verdicts per model and tenant, as cumulative
// histograms, counters and gauges ready to be exported.
//
// A Recorder is fed by the fuse stage (ObserveTrace per emitted trace,
// ObserveIncident per opened incident) and by whoever knows the KV-cache
// state (SetKV). Snapshot copies everything for an exporter: connectors/admin
// turns a Snapshot into Prometheus metrics with exemplars at every scrape.
// This package does not depend on any metrics library.
//
// Every histogram bucket keeps the latest exemplar observed in it: the trace
// id, the value and the event time, so that a dashboard can jump from a
// latency bucket to one request that fell into it.
//
// Cardinality is bounded: each family holds at most Config.MaxSeries label
// sets; observations for a new label set beyond that go to the label set
// whose values are all "other" and are counted in the family's overflow
// counter.
package llmmetrics
