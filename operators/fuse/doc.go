// Package fuse is braid's first stage: ingest and trace-keyed fusion in one
// task per partition.
//
// Ingest decodes each OTLP message of otlp_spans / otlp_logs / otlp_metrics,
// cuts it into members (spans, log records, exemplar metric points) and groups
// them by trace id. A group whose trace id hashes (the Collector's
// partitioner, over the hex key) to the task's own partition is fused in
// place: the fast path, which the Collector's partition_traces_by_id and
// partition_logs_by_trace_id settings make the common case. Any other group
// goes to the repartition topic keyed by trace id and is fused by the task
// that owns it.
//
// Fuse keeps each open trace in the task's keyspace: a small in-memory
// record per trace (times, counts, revision) and its members in chunks, one
// per trace per checkpoint, under "d"+trace id+chunk number. A trace is
// emitted to braid.fused when the watermark passes its last event time plus
// the idle gap. A member that arrives later but within allowed lateness adds
// to the trace and causes it to be emitted again with revision+1. A member
// whose event time is more than allowed lateness behind the watermark goes to
// braid.late, re-encoded as a one-item OTLP message. When the watermark
// passes last event time + idle gap + allowed lateness, the trace's keys are
// deleted and a tombstone (trace id, next revision) is kept for
// ClosedRetention of event time: a member that arrives for the trace
// meanwhile goes to braid.late with reason "trace already closed", so that
// a key's records are one revision sequence 0..n (see closed.go). A restart
// rebuilds the timers and the FlushAfter queue of every restored trace.
//
// Members without a trace id (logs that carry only a request id, metric
// points without exemplars) are counted as unjoined: they belong to the
// resolve and resources stages.
//
// A task is a topology of stages (task.go), each an operator holding its
// own state behind one interface — process, onWatermark,
// prepareCheckpoint, restore, close, every one returning an error — and
// declared in the order a record passes them: ingest (ingest.go: reads the
// sources, routes each member to the stage it belongs to), the resources
// sampler (samples.go), the KV-cache stage (kvStage, kv.go: KV events
// routed to the task of their host, held until the watermark, and the
// kvgraph detector), resolve (resolver, resolve.go: request ids, their
// declarations and waiting logs), fuse (fuser: the open traces, their
// timers and the closed-trace tombstones), alerts (alertsStage, with the
// derived LLM metrics' feed) and sampling (samplingStage). The stages
// share the task's outputs (dead-letter and late copies, records cut to
// the size limit) and hand work on through the internal topics or, within
// the task, by a call to the next stage's entry point: resolved logs and
// incident tags to fuse, emitted traces to alerts and sampling. The
// watermark reaches the stages in that order; the KV-cache stage holds
// the watermark the stages after it see, and the one its task's markers
// on the repartition topic carry, at the earliest KV event it holds
// (engine.WatermarkHolder), so that no trace closes before the tags of the
// incidents those events show.
//
// Nothing in the input stops the job. A record a stage cannot handle (an
// undecodable message, a malformed internal record, a member larger than
// MaxRecordBytes allows) goes unchanged to braid.dlq with braid.reason
// "<stage>: <cause>", braid.topic, braid.partition and braid.offset headers
// — or is skipped, or fails the job, as Config.ErrorPolicy says. Strings
// that are not valid UTF-8 are repaired by the decoder (each invalid
// sequence becomes U+FFFD) before they reach a member or a protobuf
// marshal, so that every record braid writes unmarshals. A member whose
// event time is more than MaxClockSkew ahead of its record's broker
// timestamp advances no watermark: it goes to braid.late with reason
// "future event time", or is re-stamped (Config.FuturePolicy). Event-time
// arithmetic saturates at the ends of the int64 range.
//
// Every record the stage writes fits Config.MaxRecordBytes: repartition and
// resolve records are cut at member boundaries, state values (trace chunks,
// waiting-log chunks) are at most a quarter of it or one member, late and
// dead-letter copies are cut into braid.chunk/braid.chunks records, and a
// fused trace is split into parts (FusedTrace.part/parts). Per-trace caps
// (MaxSpans, MaxLogs, MaxPoints, MaxBytes) cut what a trace keeps.
//
// Memory: each task's open traces (records and members since the last
// checkpoint) are bounded by MaxOpenTraceBytes — pending members spill to
// state, then the oldest traces are emitted early and leave memory, counted
// in Evicted, and are revised if more members come — and the logs waiting
// for a request id by MaxWaitingLogBytes — the oldest go to braid.late with
// reason "memory budget", counted in WaitingEvicted. The gauges
// OpenTraceBytes and WaitingLogBytes show both.
package fuse
