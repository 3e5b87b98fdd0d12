// Package semconv is braid's one internal vocabulary for LLM-serving
// telemetry: it translates the names that vLLM, SGLang, TensorRT-LLM /
// Triton, TGI, llama.cpp, the DCGM exporter (and braid's NVML exporter) and
// the OpenTelemetry GenAI conventions use (../../../shared/INPUTS.md §3–§4)
// into one set of canonical names, reads attributes, identities and request
// ids straight from serialized OTLP messages, and derives per-request
// figures (braidpb.Derived).
//
// Hot-path functions (AppendAttrs, Lookup, LookupValue, RequestIDs.FromLog,
// RequestIDs.FromSpan, Deriver.AddSpan/AddLog) scan protobuf wire bytes
// with connectors/otlp/wire; they never proto.Unmarshal. Values that alias
// their input (Value, LookupValue) say so.
//
// # Metrics
//
// NormalizeMetric maps a metric name (and, for one TensorRT-LLM metric, a
// label) onto a canonical Metric. Counter names match with and without a
// _total suffix. Every Scale is 1 today: every source already reports in
// the canonical unit (vLLM's *_perc and SGLang's token_usage are fractions
// 0–1 despite their names).
//
//	canonical                  kind       unit     source names
//	kv_cache_usage             gauge      1        vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc,
//	                                               sglang:token_usage, trtllm_kv_cache_utilization,
//	                                               nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}
//	kv_cache_blocks_max        gauge      {block}  nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}
//	kv_cache_blocks_free       gauge      {block}  nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free"}
//	kv_cache_blocks_used       gauge      {block}  nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}
//	prefix_cache_queries       counter    {token}  vllm:prefix_cache_queries, vllm:gpu_prefix_cache_queries
//	prefix_cache_hits          counter    {token}  vllm:prefix_cache_hits, vllm:gpu_prefix_cache_hits
//	prefix_cache_hit_rate      gauge      1        sglang:cache_hit_rate, trtllm_kv_cache_hit_rate
//	preemptions                counter    {preemption} vllm:num_preemptions
//	requests_running           gauge      {request} vllm:num_requests_running, sglang:num_running_reqs,
//	                                               tgi_batch_current_size
//	requests_waiting           gauge      {request} vllm:num_requests_waiting, sglang:num_queue_reqs, tgi_queue_size
//	corrupted_requests         counter    {request} vllm:corrupted_requests
//	cache_config_info          info       1        vllm:cache_config_info (labels block_size, num_gpu_blocks…)
//	ttft_seconds               histogram  s        vllm:time_to_first_token_seconds,
//	                                               sglang:time_to_first_token_seconds,
//	                                               gen_ai.server.time_to_first_token
//	itl_seconds                histogram  s        vllm:inter_token_latency_seconds,
//	                                               vllm:time_per_output_token_seconds,
//	                                               gen_ai.server.time_per_output_token
//	e2e_seconds                histogram  s        vllm:e2e_request_latency_seconds, tgi_request_duration,
//	                                               gen_ai.server.request.duration
//	queue_time_seconds         histogram  s        vllm:request_queue_time_seconds
//	prefill_time_seconds       histogram  s        vllm:request_prefill_time_seconds
//	decode_time_seconds        histogram  s        vllm:request_decode_time_seconds
//	gpu_fb_used_mib            gauge      MiB      DCGM_FI_DEV_FB_USED
//	gpu_fb_free_mib            gauge      MiB      DCGM_FI_DEV_FB_FREE
//	gpu_fb_reserved_mib        gauge      MiB      DCGM_FI_DEV_FB_RESERVED
//	gpu_fb_total_mib           gauge      MiB      DCGM_FI_DEV_FB_TOTAL
//	gpu_util_percent           gauge      %        DCGM_FI_DEV_GPU_UTIL
//	gpu_mem_copy_util_percent  gauge      %        DCGM_FI_DEV_MEM_COPY_UTIL
//	pcie_tx_bytes              gauge      By/s     DCGM_FI_PROF_PCIE_TX_BYTES
//	pcie_rx_bytes              gauge      By/s     DCGM_FI_PROF_PCIE_RX_BYTES
//	nvlink_bandwidth_total     counter    1        DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (DCGM raw units)
//	nvlink_tx_bytes            gauge      By/s     DCGM_FI_PROF_NVLINK_TX_BYTES
//	nvlink_rx_bytes            gauge      By/s     DCGM_FI_PROF_NVLINK_RX_BYTES
//	nvlink_crc_flit_errors     counter    {error}  DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
//	nvlink_crc_data_errors     counter    {error}  DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
//	nvlink_replay_errors       counter    {error}  DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
//	nvlink_recovery_errors     counter    {error}  DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
//	xid_errors                 gauge      1        DCGM_FI_DEV_XID_ERRORS (value: the last Xid code)
//	kv_cache_fragmentation     gauge      1        kv_cache_fragmentation_ratio, vllm:kv_cache_fragmentation_ratio, sglang:kv_cache_fragmentation_ratio
//
// The GenAI histogram names are also matched as the Prometheus exporter
// writes them (gen_ai_server_time_to_first_token[_seconds], …), and the
// vLLM and SGLang *_seconds names also without _seconds (the Collector's
// Prometheus name normalization moves the unit suffix into the unit). The
// variable Metrics holds this table (name, kind, unit, help).
//
// # Span attribute keys
//
// SpanKey maps source keys onto canonical ones: gen_ai.usage.prompt_tokens
// and gen_ai.usage.input_tokens → input_tokens; completion_tokens and
// output_tokens → output_tokens; gen_ai.latency.time_to_first_token, e2e,
// time_in_queue, time_in_model_prefill, time_in_model_decode,
// time_in_model_inference, kv_cache_transfer_time → ttft, e2e, queue_time,
// prefill_time, decode_time, inference_time, kv_cache_transfer_time
// (seconds); gen_ai.response.model → model; gen_ai.request.model →
// request_model; gen_ai.operation.name → operation; gen_ai.provider.name
// (and the older gen_ai.system) → provider; gen_ai.response.id →
// response_id; gen_ai.request.id, SGLang rid, Triton request_id →
// request_id; the detail-span keys layer_id, batch_size, seq_len,
// kv_cache_hit_ratio, is_speculative and num_layers / layer_count /
// kv.layer.count → layer_count. SGLang request spans named "… Req {rid}"
// give their rid through SGLangRID.
//
// # Identity and matching
//
// IdentityOf reads (Service, Instance, Host, GPUUUID, GPUIndex, Model) from
// resource attributes (service.name, service.instance.id, host.name,
// gpu.uuid, gpu.index) overridden by point/span attributes (DCGM UUID, gpu,
// Hostname/hostname; vLLM model_name; gen_ai.response.model, else
// gen_ai.request.model). DCGM's modelName is the GPU model and is never the
// Model. Identity.String is "service=…,instance=…,host=…,gpu_uuid=…,
// gpu_index=…,model=…" in that order, empty parts left out.
//
// The matching rule (Identity.Matches): a request — the identity of its
// spans — matches a resource series when Host is equal and non-empty on
// both sides, and
//
//   - for a series with a GPU (uuid or index: a GPU exporter's, DCGM or
//     NVML), the request's GPU is equal: uuids when both have one, else
//     indexes when both have one; a request whose GPU cannot be compared
//     does not match. Such a series' Instance is the exporter's scrape
//     target, not the server's, and its Model is empty, so neither is
//     compared;
//   - for any other series (the server's own metrics), the series has no
//     Instance or the request's Instance is equal, and the series has no
//     Model or the request's Model is equal.
//
// Service is not compared (a scraped series' service.name is the scrape
// job).
//
// # Request ids
//
// RequestIDRules (YAML attribute_keys, body_patterns, id_formats) compile
// into RequestIDs. A log's id comes from its attributes first (in
// attribute_keys priority), then from its string body (first matching
// pattern's capture group); a span's from its attributes, then from an
// SGLang span name. Normal form: verbatim, except that an attribute key
// "key=prefix" or a named capture group (?P<name>…) prefixes the id
// ("prefix" / "name-") unless it already starts with it: llama.cpp's
// "task 42" (log) and task_id=42 (span or log attribute) both become
// "task-42". Defaults: see DefaultRequestIDRules.
//
// # Derived figures
//
// A Deriver collects the spans and logs of one request and computes a
// braidpb.Derived. Durations are nanoseconds; 0 means unknown. When several
// spans give one figure, the largest wins (so the result does not depend
// on member order); strings take the lexicographically smallest non-empty
// value.
//
//   - ttft: gen_ai.latency.time_to_first_token (s); else the end of the
//     llm.prefill span − the root span's start.
//   - e2e: gen_ai.latency.e2e; else root end − root start (roots: spans
//     without a parent; several roots are taken together).
//   - queue_time: gen_ai.latency.time_in_queue.
//   - prefill_time: gen_ai.latency.time_in_model_prefill; else the
//     llm.prefill span's duration.
//   - decode_time: gen_ai.latency.time_in_model_decode; else the last end
//     of an llm.decode* or llm.sampling span − the llm.prefill end.
//   - inference_time: gen_ai.latency.time_in_model_inference; else
//     prefill_time + decode_time when both are known.
//   - kv_cache_transfer: gen_ai.latency.kv_cache_transfer_time; else the
//     span events kv_cache_transfer_end − kv_cache_transfer_start.
//   - tpot: decode_time / (output_tokens − 1), when output_tokens > 1.
//   - input_tokens, output_tokens: gen_ai.usage.* (SpanKey).
//   - kv_cache_hit_ratio: mean of the kv_cache_hit_ratio attribute over the
//     spans that carry it.
//   - model: gen_ai.response.model, else gen_ai.request.model; operation,
//     provider: gen_ai.operation.name, gen_ai.provider.name.
//   - layer_count: the largest num_layers / layer_count / kv.layer.count of
//     any span or resource; 0 when unknown.
//   - layers, seq_len_buckets: over llm.decode.layer.N spans, count and
//     total/min/max duration, per layer (layer_id, else N) and per seq_len
//     bucket (0 for no seq_len, else the largest power of two ≤ seq_len).
//   - speculative_spans: layer spans with is_speculative true.
//   - anchors: one per llm.decode.layer.N span: its request id (its own,
//     else the request whose window holds its start, else the smallest
//     request id), its start time and layer_id. It is invalid, with the
//     reasons joined by ",", when the request id is empty or of unknown
//     format (unknown_request_id, see RequestIDRules.IDFormats); the start
//     is zero (zero_time); there is no window to check against
//     (no_request_window) or the start lies outside it (outside_request);
//     layer_id is missing or not an integer (missing_layer), negative
//     (negative_layer), ≥ layer_count when that is known
//     (layer_out_of_range), or differs from N (layer_mismatch). A request's
//     window is [min start, max end] of the non-layer spans declaring its
//     id, else of the root spans.
//   - hints: llm_context_hint log attributes ("key=value;key=value", see
//     ParseContextHint); on a key given by several logs the latest log
//     (time_unix_nano, else observed time) wins.
//   - log_schema_versions: the distinct log_schema_version values.
//   - logs: per request, logs; logs with a request id (RequestIDs.FromLog);
//     with log_schema_version; with a valid and with an invalid hint (a
//     non-string hint is invalid). Absent when the request has no logs.
//   - verdicts, quality, tenant: what guardrails and evaluators said of the
//     request, read from spans, span events and logs in the names the tools
//     emit (OpenTelemetry gen_ai.evaluation.result, OpenLIT guard.* and
//     evals.*, NeMo Guardrails rail.*, braid.verdict.*), and the tenant
//     (tenant.id, tenant_id, tenant; else a hint's tenant). The convention
//     is in verdict.go: VerdictKind, VerdictDecision.

package semconv
