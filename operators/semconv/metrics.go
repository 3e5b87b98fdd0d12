package semconv

import "strings"

// Kind is the kind of a canonical metric.
type Kind uint8

// Metric kinds.
const (
	Gauge Kind = iota + 1
	Counter
	Histogram
	// Info is a gauge of constant value 1 whose labels carry the data
	// (Prometheus "info" metric).
	Info
)

func (k Kind) String() string {
	switch k {
	case Gauge:
		return "gauge"
	case Counter:
		return "counter"
	case Histogram:
		return "histogram"
	case Info:
		return "info"
	}
	return "unknown"
}

// Metric is a metric name translated into braid's vocabulary.
type Metric struct {
	// Name is the canonical name (one of Metrics).
	Name string
	Kind Kind
	// Scale multiplies a raw value (a gauge or counter value, a histogram
	// sum or bucket bound) into the canonical unit.
	Scale float64
}

// MetricInfo documents one canonical metric.
type MetricInfo struct {
	Name string
	Kind Kind
	// Unit in UCUM-like notation: "1" (dimensionless), "s", "MiB", "By",
	// "By/s", "%", "{request}"…
	Unit string
	Help string
}

// Canonical metric names.
const (
	KVCacheUsage          = "kv_cache_usage"
	KVCacheBlocksMax      = "kv_cache_blocks_max"
	KVCacheBlocksFree     = "kv_cache_blocks_free"
	KVCacheBlocksUsed     = "kv_cache_blocks_used"
	PrefixCacheQueries    = "prefix_cache_queries"
	PrefixCacheHits       = "prefix_cache_hits"
	PrefixCacheHitRate    = "prefix_cache_hit_rate"
	Preemptions           = "preemptions"
	RequestsRunning       = "requests_running"
	RequestsWaiting       = "requests_waiting"
	CorruptedRequests     = "corrupted_requests"
	CacheConfigInfo       = "cache_config_info"
	TTFTSeconds           = "ttft_seconds"
	ITLSeconds            = "itl_seconds"
	E2ESeconds            = "e2e_seconds"
	QueueTimeSeconds      = "queue_time_seconds"
	PrefillTimeSeconds    = "prefill_time_seconds"
	DecodeTimeSeconds     = "decode_time_seconds"
	GPUFBUsedMiB          = "gpu_fb_used_mib"
	GPUFBFreeMiB          = "gpu_fb_free_mib"
	GPUFBReservedMiB      = "gpu_fb_reserved_mib"
	GPUFBTotalMiB         = "gpu_fb_total_mib"
	GPUUtilPercent        = "gpu_util_percent"
	GPUMemCopyUtilPercent = "gpu_mem_copy_util_percent"
	PCIeTxBytes           = "pcie_tx_bytes"
	PCIeRxBytes           = "pcie_rx_bytes"
	NVLinkBandwidthTotal  = "nvlink_bandwidth_total"
	NVLinkTxBytes         = "nvlink_tx_bytes"
	NVLinkRxBytes         = "nvlink_rx_bytes"
	NVLinkCRCFlitErrors   = "nvlink_crc_flit_errors"
	NVLinkCRCDataErrors   = "nvlink_crc_data_errors"
	NVLinkReplayErrors    = "nvlink_replay_errors"
	NVLinkRecoveryErrors  = "nvlink_recovery_errors"
	XidErrors             = "xid_errors"
	KVCacheFragmentation  = "kv_cache_fragmentation"
)

// Metrics lists every canonical metric, in the order of the table in
// doc.go. Do not modify it.
var Metrics = []MetricInfo{
	{KVCacheUsage, Gauge, "1", "KV-cache usage, fraction 0–1 of the GPU block pool"},
	{KVCacheBlocksMax, Gauge, "{block}", "KV-cache blocks in the pool"},
	{KVCacheBlocksFree, Gauge, "{block}", "free KV-cache blocks"},
	{KVCacheBlocksUsed, Gauge, "{block}", "used KV-cache blocks"},
	{PrefixCacheQueries, Counter, "{token}", "prefix-cache queries"},
	{PrefixCacheHits, Counter, "{token}", "prefix-cache hits"},
	{PrefixCacheHitRate, Gauge, "1", "prefix-cache hit rate, fraction 0–1"},
	{Preemptions, Counter, "{preemption}", "requests preempted by the scheduler"},
	{RequestsRunning, Gauge, "{request}", "requests in the running batch"},
	{RequestsWaiting, Gauge, "{request}", "requests waiting in the queue"},
	{CorruptedRequests, Counter, "{request}", "requests with NaN logits (corrupted)"},
	{CacheConfigInfo, Info, "1", "cache configuration in labels (block_size, num_gpu_blocks…)"},
	{TTFTSeconds, Histogram, "s", "time to first token"},
	{ITLSeconds, Histogram, "s", "inter-token latency (time per output token)"},
	{E2ESeconds, Histogram, "s", "end-to-end request latency"},
	{QueueTimeSeconds, Histogram, "s", "time in the waiting queue"},
	{PrefillTimeSeconds, Histogram, "s", "time in prefill"},
	{DecodeTimeSeconds, Histogram, "s", "time in decode"},
	{GPUFBUsedMiB, Gauge, "MiB", "GPU framebuffer memory used"},
	{GPUFBFreeMiB, Gauge, "MiB", "GPU framebuffer memory free"},
	{GPUFBReservedMiB, Gauge, "MiB", "GPU framebuffer memory reserved by the driver"},
	{GPUFBTotalMiB, Gauge, "MiB", "GPU framebuffer memory total"},
	{GPUUtilPercent, Gauge, "%", "GPU utilization"},
	{GPUMemCopyUtilPercent, Gauge, "%", "GPU memory-copy utilization"},
	{PCIeTxBytes, Gauge, "By/s", "PCIe transmit rate"},
	{PCIeRxBytes, Gauge, "By/s", "PCIe receive rate"},
	{NVLinkBandwidthTotal, Counter, "1", "NVLink bandwidth counter, all lanes (DCGM raw units)"},
	{NVLinkTxBytes, Gauge, "By/s", "NVLink transmit rate"},
	{NVLinkRxBytes, Gauge, "By/s", "NVLink receive rate"},
	{NVLinkCRCFlitErrors, Counter, "{error}", "NVLink CRC flit errors"},
	{NVLinkCRCDataErrors, Counter, "{error}", "NVLink CRC data errors"},
	{NVLinkReplayErrors, Counter, "{error}", "NVLink replay errors"},
	{NVLinkRecoveryErrors, Counter, "{error}", "NVLink recovery errors"},
	{XidErrors, Gauge, "1", "last Xid error code (0: none)"},
	{KVCacheFragmentation, Gauge, "1", "KV-block fragmentation: (free − largest contiguous free run) / free, 0–1"},
}

// metricNames maps every known source name (without a _total suffix) onto
// its canonical metric.
var metricNames = map[string]Metric{}

// Source names per canonical metric. Counter names are listed without
// _total; NormalizeMetric matches them with and without it.
var metricSources = map[string][]string{
	KVCacheUsage: {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
		"sglang:token_usage", "trtllm_kv_cache_utilization"},
	PrefixCacheQueries: {"vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"},
	PrefixCacheHits:    {"vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"},
	PrefixCacheHitRate: {"sglang:cache_hit_rate", "trtllm_kv_cache_hit_rate"},
	Preemptions:        {"vllm:num_preemptions"},
	RequestsRunning:    {"vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"},
	RequestsWaiting:    {"vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"},
	CorruptedRequests:  {"vllm:corrupted_requests"},
	CacheConfigInfo:    {"vllm:cache_config_info"},
	TTFTSeconds: {"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds",
		"gen_ai.server.time_to_first_token", "gen_ai_server_time_to_first_token",
		"gen_ai_server_time_to_first_token_seconds"},
	ITLSeconds: {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
		"gen_ai.server.time_per_output_token", "gen_ai_server_time_per_output_token",
		"gen_ai_server_time_per_output_token_seconds"},
	E2ESeconds: {"vllm:e2e_request_latency_seconds", "tgi_request_duration",
		"gen_ai.server.request.duration", "gen_ai_server_request_duration",
		"gen_ai_server_request_duration_seconds"},
	QueueTimeSeconds:      {"vllm:request_queue_time_seconds"},
	PrefillTimeSeconds:    {"vllm:request_prefill_time_seconds"},
	DecodeTimeSeconds:     {"vllm:request_decode_time_seconds"},
	GPUFBUsedMiB:          {"DCGM_FI_DEV_FB_USED"},
	GPUFBFreeMiB:          {"DCGM_FI_DEV_FB_FREE"},
	GPUFBReservedMiB:      {"DCGM_FI_DEV_FB_RESERVED"},
	GPUFBTotalMiB:         {"DCGM_FI_DEV_FB_TOTAL"},
	GPUUtilPercent:        {"DCGM_FI_DEV_GPU_UTIL"},
	GPUMemCopyUtilPercent: {"DCGM_FI_DEV_MEM_COPY_UTIL"},
	PCIeTxBytes:           {"DCGM_FI_PROF_PCIE_TX_BYTES"},
	PCIeRxBytes:           {"DCGM_FI_PROF_PCIE_RX_BYTES"},
	NVLinkBandwidthTotal:  {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"},
	NVLinkTxBytes:         {"DCGM_FI_PROF_NVLINK_TX_BYTES"},
	NVLinkRxBytes:         {"DCGM_FI_PROF_NVLINK_RX_BYTES"},
	NVLinkCRCFlitErrors:   {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"},
	NVLinkCRCDataErrors:   {"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"},
	NVLinkReplayErrors:    {"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"},
	NVLinkRecoveryErrors:  {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"},
	XidErrors:             {"DCGM_FI_DEV_XID_ERRORS"},
	KVCacheFragmentation:  {"kv_cache_fragmentation_ratio", "vllm:kv_cache_fragmentation_ratio", "sglang:kv_cache_fragmentation_ratio"},
}

// kvBlockMetric is TensorRT-LLM's (Triton backend) KV-cache metric; its
// label kv_cache_block_type says which figure a series is.
const kvBlockMetric = "nv_trt_llm_kv_cache_block_metrics"

var kvBlockTypes = map[string]string{
	"max":      KVCacheBlocksMax,
	"free":     KVCacheBlocksFree,
	"used":     KVCacheBlocksUsed,
	"fraction": KVCacheUsage,
}

var metricInfo = map[string]MetricInfo{}

func init() {
	for _, m := range Metrics {
		metricInfo[m.Name] = m
	}
	for canon, srcs := range metricSources {
		info, ok := metricInfo[canon]
		if !ok {
			panic("semconv: source names for unknown metric " + canon)
		}
		for _, s := range srcs {
			m := Metric{Name: canon, Kind: info.Kind, Scale: 1}
			metricNames[s] = m
			// The Collector's Prometheus name normalization moves a unit
			// suffix into the metric's unit.
			if base, ok := strings.CutSuffix(s, "_seconds"); ok && strings.Contains(base, ":") {
				metricNames[base] = m
			}
		}
	}
}

// MetricInfoOf returns the documentation of a canonical metric.
func MetricInfoOf(name string) (MetricInfo, bool) {
	m, ok := metricInfo[name]
	return m, ok
}

// NormalizeMetric translates a metric name as it arrives (Prometheus
// receiver or OTLP) into braid's vocabulary. label returns the value of a
// label (data-point attribute) of the series; it is consulted only for
// names whose meaning depends on a label
// (nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type}) and may be nil.
// Names of counters match with and without a _total suffix, vLLM and
// SGLang names ending in _seconds also without it. Unknown names,
// and label-dependent names without a known label value, return ok=false.
// It does not allocate.
func NormalizeMetric(name string, label func(key string) (string, bool)) (Metric, bool) {
	if m, ok := metricNames[name]; ok {
		return m, true
	}
	if base, ok := strings.CutSuffix(name, "_total"); ok {
		if m, ok := metricNames[base]; ok && m.Kind == Counter {
			return m, true
		}
	}
	if name == kvBlockMetric && label != nil {
		if t, ok := label("kv_cache_block_type"); ok {
			if canon, ok := kvBlockTypes[t]; ok {
				info := metricInfo[canon]
				return Metric{Name: canon, Kind: info.Kind, Scale: 1}, true
			}
		}
	}
	return Metric{}, false
}
