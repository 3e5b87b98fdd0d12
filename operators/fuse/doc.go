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
// A task runs the stages the engine's topology routes its inputs to, each
// an operator of its own holding its own state: the resolve stage
// (resolver, resolve.go: request ids, their declarations and waiting
// logs), the KV-cache stage (kvStage, kv.go: KV events routed to the
// task of their host, held until the watermark, and the kvgraph
// detector), and fuse (processor: the open traces, their timers and the
// closed-trace tombstones), which also reads the source topics and routes
// what each member is to the stage it belongs to. The stages share the
// task's outputs (dead-letter and late copies, records cut to the size
// limit) and pass work on through the internal topics or, within the
// task, by a call: resolved logs to fuse (resolver.deliver), incident
// tags to fuse (kvgraph.Config.OnIncident).
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
