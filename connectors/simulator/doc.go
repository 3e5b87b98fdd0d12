// Package simulator generates, deterministically, the Kafka records that the
// OpenTelemetry Collector's Kafka exporter writes for a small fleet of LLM
// inference servers. It feeds `braid demo`, integration tests and
// benchmarks, and reports the ground truth of what it wrote.
//
// # Output
//
// Each call to Next is one Collector export batch (the batch processor's
// 200ms timeout by default) and returns its records as Messages: topic, key
// (nil for a null key) and value, in the order the Collector produces them:
// span records, then log records, then the metrics record. Produce writes
// them with a franz-go client; configure it with
// kgo.RecordPartitioner(Partitioner()), the exporter's default partitioner,
// so that keyed records land on abs(int32(fnv1a_32(key)) % partitions).
//
// Values are exactly what the exporter writes (INPUTS.md §1):
//
//   - Config.Encoding "otlp_proto": a serialized TracesData, LogsData or
//     MetricsData (go.opentelemetry.io/proto/otlp), byte for byte as pdata
//     marshals it: fields in reverse declaration order, the resource, scope
//     and status messages always present (possibly empty), the span, parent
//     span and log ids written even when empty. A decoder that expects
//     proto.Marshal's layout will see the difference; proto.Unmarshal does
//     not.
//   - "otlp_json": the same messages as OTLP/JSON, on one line, as pdata
//     writes them: lowerCamelCase keys in declaration order, traceId, spanId
//     and parentSpanId in lower-case hex (not base64), 64-bit integers as
//     decimal strings, enums as numbers, empty messages as {}.
//
// The encoders are checked against real Collector records
// (testdata/collector, from the exporter v0.165.1): decoding each record and
// re-encoding it gives the same bytes.
//
// Keying (Config.Keying):
//
//   - KeyByTraceID (partition_traces_by_id, partition_logs_by_trace_id): one
//     span record and one log record per trace id per batch, key = the trace
//     id as 32 lower-case hex characters (the ASCII text, not the 16 raw
//     bytes). A batch's logs without a trace id come in one null-key log
//     record. Metrics: one null-key record per batch.
//   - Unkeyed (the exporter's default): one record per signal per batch,
//     holding the whole batch (several resources, consecutive requests of
//     one server sharing a resource block, one server possibly in several
//     blocks), null key.
//
// Split traces: Config.SplitRatio of the traces (default 10%, exactly, over
// a run) are cut by the batch boundary, as the batch processor does: the
// first part, in the request's batch, holds one child span (llm.prefill);
// the second part, the rest including the root, opens the next batch, with
// the same key. Flush writes the second parts still pending, so that a
// finite run is complete.
//
// # Realistic mode
//
// Config.Realistic (what `braid demo` runs) replaces the content below with
// a fleet described in FORMAT.md: Config.Hosts hosts of two GPUs, one vLLM
// (v1 or legacy metric names) or SGLang server per GPU serving one of three
// models; requests that arrive (Config.Rate per second of event time),
// queue, run and finish on a modelled server, or are aborted (orphans: engine
// logs, never a span); engine logs without trace ids at arrival and finish
// or abort, naming the request id in the body or in attribute request_id,
// some with log_schema_version and llm_context_hint; Prometheus-receiver
// scrapes of every server and DCGM exporter each Config.ScrapeInterval whose
// values follow the model (KV usage with the running requests, preemptions
// under KV pressure, framebuffer use with KV usage); and per-request
// resource truth (TraceTruth.Resources): the series at the request's place
// over its window. Config.KVEvents feeds every request to the KV block
// simulator (NewKV, KV.md) and writes its per-block events as log records,
// with Config.KV.Faults injected. WriteTruth writes the truth as JSON Lines.
// The zero Config keeps the original content, byte for byte.
//
// Two operational faults, off by default, with their truth
// (Truth.Regressions, Truth.Leaks; FORMAT.md):
//
//   - Config.Regressions: a TTFT regression of one server. The requests
//     arriving on it in the window have a longer prefill, so that their
//     time to first token is Factor times the model's; their spans
//     (gen_ai.latency.*, start and end times of the root and children),
//     logs and exemplar agree. The truth names the server as braid sees it
//     (service.instance.id and host.name) and lists the slowed trace ids.
//   - Config.Leaks: a memory leak on one GPU. DCGM_FI_DEV_FB_USED grows
//     by MiBPerMinute on top of the model's value during the window
//     (FB_FREE and the server's KV usage gauge follow), then drops back.
//     The truth names the GPU by its DCGM labels (UUID, gpu, Hostname or
//     hostname).
//
// A leak moves no random draw, nor does a regression of a server whose
// engine logs carry no llm_context_hint (host + gpu index even) as long as
// it makes no request give up in the queue: the requests, and the other
// servers' values, are those of the same Seed without the fault.
//
// Config.Verdicts adds quality and safety verdicts to the served requests
// (VerdictConfig, FORMAT.md): an input jailbreak guard on each (an OpenLIT
// guard span on vLLM, a NeMo Guardrails rail span on SGLang), and on those
// it lets through output evaluations (gen_ai.evaluation.result span events
// and log records, OpenLIT evals attributes), with their truth
// (TraceTruth.Verdicts and figures). They draw from a random source of
// their own: without their spans and records, the output is that of the
// same Seed without verdicts.
//
// # Content
//
// Four servers: three vLLM instances (service.name "vllm") and one SGLang
// (service.name "sglang"), each on its own host and GPU. Their resource has
// service.name, service.instance.id, host.name, gpu.uuid and model_name.
//
// Each request is one trace. Spans, all ending at the request's finish time
// (vLLM creates them when the request finishes), children first, root last:
//
//   - llm.prefill (INTERNAL): batch_size, seq_len, kv_cache_hit_ratio;
//   - 2 to 4 llm.decode.layer.N (INTERNAL): layer_id, batch_size, seq_len,
//     kv_cache_hit_ratio, is_speculative;
//   - llm.sampling (INTERNAL): batch_size, seq_len;
//   - llm_request (SERVER, start = arrival, end = finish):
//     gen_ai.request.id ("cmpl-<32 hex>" for vLLM, the 32-hex rid for SGLang,
//     which also gets an attribute rid), gen_ai.response.model,
//     gen_ai.usage.prompt_tokens and completion_tokens, gen_ai.latency.*
//     (time_in_queue, time_to_first_token, e2e, time_in_model_prefill,
//     _decode, _inference). About 1 in 16 has status ERROR.
//
// Trace and span ids are random from the seeded generator. Requests go to
// the SGLang server about 1 time in 8, and their trace ids have the upper 8
// bytes zero, as SGLang's do; no id is all zero.
//
// Per request: Config.LogsPerRequest log records (default 2) with its trace
// id and a span id, at its finish time ("Finished request cmpl-…", then a
// stats line; ERROR severity for failed requests); and, unless
// Config.NoExemplars, one point of the cumulative histogram
// vllm:e2e_request_latency_seconds (sglang:… for SGLang; vLLM's bucket
// bounds) whose one exemplar carries the trace id, the root span id, the
// e2e latency and the finish time.
//
// Per batch: Config.TracelessLogs engine log records without a trace id
// (default 1): the first names a request of the batch by its request id only
// ("Added request cmpl-…", SGLang "Receive: obj=GenerateReqInput(rid='…')"),
// what a request-id join must resolve; the others are engine statistics. And
// Config.ResourcePoints gauge points without exemplars (default 2), round
// robin over each server's vllm:kv_cache_usage_perc (sglang:token_usage) and
// the DCGM exporter's DCGM_FI_DEV_FB_USED on its host (resource
// service.name dcgm-exporter, host.name; labels gpu, UUID, pci_bus_id,
// modelName, Hostname). Metrics carry the Prometheus receiver's scope.
//
// # Event time
//
// Batch n (from 0) has event time Config.Start + n·Config.BatchInterval,
// which EventTime returns after it. Its requests finish at random times in
// the batch's interval (EventTime − BatchInterval, EventTime], each moved
// back by a random amount up to Config.Disorder (bounded out-of-orderness);
// spans end, logs and exemplar points are at the finish time; trace-less
// logs and resource points are at their own random times in the same
// window. The second part of a split trace keeps its times, so it arrives
// one batch late.
//
// # Truth
//
// Truth reports, for the messages returned so far, per trace id: the
// request id, service, instance, batch, arrival and finish, the number of
// spans written and their ids in order, the spans still pending (split),
// the log records carrying the trace id, the exemplar points pointing at
// it, the span messages holding it, whether it was split or failed, and the
// trace-less logs naming its request id. Plus totals: spans, trace-id logs,
// exemplar points, pending spans, trace-less logs, resource points,
// messages per topic, batches, and the latest event time written. Decoding
// every message with proto.Unmarshal (hex ids turned back into bytes for
// otlp_json) gives exactly these numbers; the package's tests check it.
// Truth keeps every trace; ForgetTraces drops the complete ones in long runs.
//
// The same Seed and Config give the same messages, byte for byte.
package simulator
