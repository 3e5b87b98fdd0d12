// Package admin serves a braid job's own observability over HTTP:
// Prometheus metrics at /metrics, liveness at /healthz and readiness at
// /readyz.
//
// The job's figures are one Table: a row per counter or gauge, with its
// name, help, label, log key and the read of the atomic counter it comes
// from — EngineMetrics for the engine's, StageMetrics for the fuse stage
// and the stages it hosts. The Collector exports the table on /metrics,
// the job's counters line and the demo's progress line print its logged
// rows (Table.LogArgs, Table.Line), and a test checks that the README
// names every row. Besides the table the Collector reads an EngineView
// (the engine's open tasks: their watermarks and state) and a LagView (a
// LagMonitor, which polls the group's committed offsets and the topics'
// end offsets in the background). Metrics follow the pull model: the
// Collector reads at scrape time. Only the checkpoint histograms are
// pushed, by Checkpoints.Observe from engine.Config.OnCheckpoint.
//
// The derived LLM metrics (braid_llm_* latency histograms per model and
// instance, llm_batch_efficiency_ratio, braid_kv_* gauges, pollution
// incidents by pattern) come from an llmmetrics.Recorder that the fuse stage
// feeds (CollectorConfig.LLM, or an LLMCollector of its own). Their
// histogram buckets carry the latest trace id as an exemplar, which the
// OpenMetrics exposition of /metrics shows; the Grafana dashboard
// deploy/grafana/braid-llm.json is checked against the names exported here
// (dashboard_test.go).
//
// The alerts stage's recording rules are exported by a RecordedCollector,
// an unchecked collector the job feeds from alerts.StageConfig.OnRecord:
// one gauge family per record name, the window end of each series
// (braid_recorded_window_end_timestamp_seconds) and the series evicted
// per record (braid_recorded_series_evicted_total).
//
// The owner of the wiring (cmd/braid/job) creates the registry, registers
// Checkpoints and the Collector on it, and runs the Server and the
// LagMonitor beside the engine.
package admin
