package simulator

import "time"

// Truth is what the simulator generated so far: the expected result of
// decoding every message returned by Next and Flush.
type Truth struct {
	// Traces by trace id (32 lower-case hex characters): every request
	// generated so far, less those dropped by Simulator.ForgetTraces. In
	// realistic mode, every request with a record carrying its trace id
	// written so far: its spans, or before them a KV event (Spans 0 and
	// Batch -1 until its spans are written); orphans are in Orphans.
	Traces map[string]TraceTruth
	// TraceIDs lists the keys of Traces in the order the requests were
	// generated.
	TraceIDs []string

	// Spans, TraceLogs and ExemplarPoints are the totals of the fields of
	// the same names over all traces, including those dropped by
	// ForgetTraces.
	Spans, TraceLogs, ExemplarPoints int
	// PendingSpans is the number of spans of split traces held back for the
	// next batch (Flush writes them).
	PendingSpans int
	// TracelessLogs is the number of log records written without a trace id.
	TracelessLogs int
	// ResourcePoints is the number of metric points written without an
	// exemplar (gauges that belong to a resource, not a trace).
	ResourcePoints int

	// Messages written per topic (Config.Topics names).
	SpanMessages, LogMessages, MetricMessages int
	// Batches is the number of Next calls so far.
	Batches int
	// LastEventTime is the latest event time of any record written so far
	// (span end, log time, point time); zero before the first record.
	LastEventTime time.Time

	// Orphans are the requests aborted before they finished (realistic
	// mode), in the order their abort was written: engine logs name them,
	// no span or trace-id log does. TraceID is empty, Orphan true, Finish
	// the abort time.
	Orphans []TraceTruth
	// ContextHints is the number of engine log records carrying
	// llm_context_hint, MalformedContextHints those whose hint is not
	// "model=…;tenant=…;route=…" (realistic mode).
	ContextHints, MalformedContextHints int
	// KVEvents is the number of KV-block log records (attribute kv.op) and
	// KVLines the number of body-only lines of the KV simulator
	// (compute-sanitizer, NVRM Xid) written (Config.KVEvents). They count
	// in TraceLogs or TracelessLogs too, as their trace id says.
	KVEvents, KVLines int
	// KV is the KV simulator's truth so far: realised faults, polluted
	// requests, summary (Config.KVEvents; complete after Flush).
	KV KVTruth
	// Regressions and Leaks are the truth of Config.Regressions and
	// Config.Leaks, in their order (realistic mode).
	Regressions []RegressionTruth
	Leaks       []LeakTruth
}

// TraceTruth is what was generated for one request (one trace).
type TraceTruth struct {
	// TraceID is the trace id as 32 lower-case hex characters. SGLang
	// requests have the upper 8 bytes zero.
	TraceID string
	// RequestID is the root span's gen_ai.request.id: "cmpl-<32 hex>" for
	// vLLM, the 32-hex rid for SGLang.
	RequestID string
	// Service is the resource's service.name ("vllm" or "sglang"), Instance
	// its service.instance.id.
	Service, Instance string
	// Batch is the index (from 0) of the batch the request finished in.
	Batch int
	// Arrival and Finish are the root span's start and end. Every span of
	// the request ends at Finish; its logs and its exemplar point are at
	// Finish too.
	Arrival, Finish time.Time

	// RootSpanID is the root span's id, 16 hex characters.
	RootSpanID string
	// SpanIDs are the ids (16 hex characters) of the spans written so far,
	// in the order they were written.
	SpanIDs []string
	// Spans is the number of spans written so far (len(SpanIDs)).
	Spans int
	// PendingSpans is the number of spans still held back for the next
	// batch: non-zero only for a split trace whose second part has not been
	// written yet.
	PendingSpans int
	// Logs is the number of log records written with this trace id.
	Logs int
	// ExemplarPoints is the number of histogram points whose exemplar
	// carries this trace id (0 or 1).
	ExemplarPoints int
	// SpanMessages is the number of span messages holding at least one span
	// of this trace (2 for a split trace once both parts are written).
	SpanMessages int
	// Split is true when the trace's spans were cut across two batches.
	Split bool
	// Error is true when the root span has status ERROR.
	Error bool
	// RequestIDLogs is the number of trace-less log records whose body names
	// RequestID (what a request-id join must attach to this trace); in
	// realistic mode, the engine logs naming it in the body or in attribute
	// request_id.
	RequestIDLogs int

	// Realistic mode only.

	// Host, GPUUUID and GPUIndex say where the request ran (resource
	// host.name, gpu.uuid, gpu.index); Model is the served model
	// (gen_ai.request.model); Tenant and Route those of its
	// llm_context_hint.
	Host, GPUUUID string
	GPUIndex      int
	Model         string
	Tenant, Route string
	// KVEvents is the number of KV-block log records naming RequestID
	// (Config.KVEvents); those with its trace id count in Logs too.
	KVEvents int
	// Orphan is true for a request aborted before it finished: it never gets
	// a span (Truth.Orphans lists it, Traces does not).
	Orphan bool
	// Regressed is true for a request slowed by a Config.Regressions
	// entry (RegressionTruth lists it).
	Regressed bool
	// Retry is true for a request the KV simulator made up (the retry of a
	// request it cancelled mid-prefill): only its KV events carry its trace
	// id; it has no spans, and Arrival and Finish are its first KV event.
	Retry bool
	// open: registered by a KV event, its spans not written yet.
	open bool
	// Resources are the windows of every series at the request's place (its
	// server's series and its GPU's DCGM series) over [Arrival, Finish],
	// sorted by Metric then Series.
	Resources []ResourceWindow

	// Config.Verdicts only (all zero for orphans, retries and without
	// Verdicts).

	// Verdicts are the request's verdicts as the verdict convention reads
	// them from what was written, in the order written: the input guard's,
	// then the output evaluations' (span events and attributes of the
	// checkers' spans, then log records).
	Verdicts []VerdictTruth
	// JailbreakAttempt is true for a request generated as a jailbreak
	// attempt (VerdictConfig.JailbreakRate, Jumps), whether the guard
	// caught it or not.
	JailbreakAttempt bool
	// GuardrailChecked, GuardrailBypass, Blocked and PIILeak are the
	// convention's per-trace figures of Verdicts: some verdict of stage
	// input (every served request); an input verdict decided pass and an
	// output verdict of the same kind (jailbreak, pii or toxicity) decided
	// flag or block (an attempt the jailbreak guard missed);
	// some verdict decided block (a NeMo rail stopped an attempt: an
	// OpenLIT guard's detection reads flag); a pii verdict of stage output
	// decided flag or block.
	GuardrailChecked, GuardrailBypass, Blocked, PIILeak bool
}
