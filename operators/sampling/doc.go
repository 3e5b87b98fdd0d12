// Package sampling decides, after the join, which fused traces trace
// stores (Jaeger, Tempo) keep, and re-encodes the kept ones as plain OTLP.
//
// The fuse stage runs a Processor in each task and asks it at every
// emission of a trace that is not kept yet (Processor.Decide): a trace is
// kept by a rule whatever its rate — an error status, a KV-cache incident
// (FLAG_POLLUTED), a quality flag (guardrail bypass, PII leak, blocked
// request), or a TTFT or end-to-end latency above its model's current
// p99 (Slow) — or by rate: its 56-bit randomness, a hash of the trace id
// seeded with its tenant's seed, is at least the rejection threshold
// (1 − rate)·2⁵⁶, OpenTelemetry's consistent-probability convention. The
// rate is the tenant's policy (Policy): a constant, or per model
// clamp(base + batch·batch_size + seq_len·seq_len, min, max). Every
// instance and a replay decide the same for the same trace.
//
// A kept trace stays kept. Encoder writes its members, as they come, to
// TracesData and LogsData record values: spans with the decision in their
// W3C tracestate (ot=th:…;rv:…) and braid.sampling.* attributes, logs
// joined by request id with the trace id they lacked, cut to fit the
// record size limit.
//
// The slow rule's latency windows are per task and model, checkpointed in
// the task's keyspace (prefix 's') and bounded by Config.MaxModels and
// Config.MaxBytes. The counters are per tenant, bounded by
// Config.MaxTenants (Stage.Counts).
package sampling
