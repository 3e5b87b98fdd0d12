package semconv

import (
	"strings"
	"testing"
)

// TestNormalizeMetric covers every metric name of INPUTS.md §3 and its
// variants.
func TestNormalizeMetric(t *testing.T) {
	type tc struct {
		name   string
		labels map[string]string
		want   string
		kind   Kind
	}
	cases := []tc{
		// vLLM, current names.
		{"vllm:kv_cache_usage_perc", nil, KVCacheUsage, Gauge},
		{"vllm:prefix_cache_queries", nil, PrefixCacheQueries, Counter},
		{"vllm:prefix_cache_queries_total", nil, PrefixCacheQueries, Counter},
		{"vllm:prefix_cache_hits", nil, PrefixCacheHits, Counter},
		{"vllm:prefix_cache_hits_total", nil, PrefixCacheHits, Counter},
		{"vllm:num_preemptions", nil, Preemptions, Counter},
		{"vllm:num_preemptions_total", nil, Preemptions, Counter},
		{"vllm:num_requests_running", nil, RequestsRunning, Gauge},
		{"vllm:num_requests_waiting", nil, RequestsWaiting, Gauge},
		{"vllm:corrupted_requests", nil, CorruptedRequests, Counter},
		{"vllm:corrupted_requests_total", nil, CorruptedRequests, Counter},
		{"vllm:cache_config_info", nil, CacheConfigInfo, Info},
		{"vllm:time_to_first_token_seconds", nil, TTFTSeconds, Histogram},
		{"vllm:inter_token_latency_seconds", nil, ITLSeconds, Histogram},
		{"vllm:e2e_request_latency_seconds", nil, E2ESeconds, Histogram},
		{"vllm:request_queue_time_seconds", nil, QueueTimeSeconds, Histogram},
		{"vllm:request_prefill_time_seconds", nil, PrefillTimeSeconds, Histogram},
		{"vllm:request_decode_time_seconds", nil, DecodeTimeSeconds, Histogram},
		// vLLM, legacy names.
		{"vllm:gpu_cache_usage_perc", nil, KVCacheUsage, Gauge},
		{"vllm:gpu_prefix_cache_queries", nil, PrefixCacheQueries, Counter},
		{"vllm:gpu_prefix_cache_queries_total", nil, PrefixCacheQueries, Counter},
		{"vllm:gpu_prefix_cache_hits", nil, PrefixCacheHits, Counter},
		{"vllm:gpu_prefix_cache_hits_total", nil, PrefixCacheHits, Counter},
		{"vllm:time_per_output_token_seconds", nil, ITLSeconds, Histogram},
		// vLLM, unit suffix moved into the unit by the Collector.
		{"vllm:time_to_first_token", nil, TTFTSeconds, Histogram},
		{"vllm:inter_token_latency", nil, ITLSeconds, Histogram},
		{"vllm:time_per_output_token", nil, ITLSeconds, Histogram},
		{"vllm:e2e_request_latency", nil, E2ESeconds, Histogram},
		{"vllm:request_queue_time", nil, QueueTimeSeconds, Histogram},
		{"vllm:request_prefill_time", nil, PrefillTimeSeconds, Histogram},
		{"vllm:request_decode_time", nil, DecodeTimeSeconds, Histogram},
		{"sglang:time_to_first_token", nil, TTFTSeconds, Histogram},
		// SGLang.
		{"sglang:token_usage", nil, KVCacheUsage, Gauge},
		{"sglang:cache_hit_rate", nil, PrefixCacheHitRate, Gauge},
		{"sglang:num_running_reqs", nil, RequestsRunning, Gauge},
		{"sglang:num_queue_reqs", nil, RequestsWaiting, Gauge},
		{"sglang:time_to_first_token_seconds", nil, TTFTSeconds, Histogram},
		// TensorRT-LLM / Triton.
		{"trtllm_kv_cache_utilization", nil, KVCacheUsage, Gauge},
		{"trtllm_kv_cache_hit_rate", nil, PrefixCacheHitRate, Gauge},
		{"nv_trt_llm_kv_cache_block_metrics", map[string]string{"kv_cache_block_type": "max", "model": "tensorrt_llm"}, KVCacheBlocksMax, Gauge},
		{"nv_trt_llm_kv_cache_block_metrics", map[string]string{"kv_cache_block_type": "free"}, KVCacheBlocksFree, Gauge},
		{"nv_trt_llm_kv_cache_block_metrics", map[string]string{"kv_cache_block_type": "used"}, KVCacheBlocksUsed, Gauge},
		{"nv_trt_llm_kv_cache_block_metrics", map[string]string{"kv_cache_block_type": "fraction"}, KVCacheUsage, Gauge},
		// TGI.
		{"tgi_queue_size", nil, RequestsWaiting, Gauge},
		{"tgi_batch_current_size", nil, RequestsRunning, Gauge},
		{"tgi_request_duration", nil, E2ESeconds, Histogram},
		// DCGM exporter (labels gpu, UUID, Hostname or hostname; the name
		// does not depend on them).
		{"DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0", "UUID": "GPU-1", "hostname": "n1"}, GPUFBUsedMiB, Gauge},
		{"DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0", "UUID": "GPU-1", "Hostname": "n1"}, GPUFBUsedMiB, Gauge},
		{"DCGM_FI_DEV_FB_FREE", nil, GPUFBFreeMiB, Gauge},
		{"DCGM_FI_DEV_FB_RESERVED", nil, GPUFBReservedMiB, Gauge},
		{"DCGM_FI_DEV_FB_TOTAL", nil, GPUFBTotalMiB, Gauge},
		{"DCGM_FI_DEV_GPU_UTIL", nil, GPUUtilPercent, Gauge},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", nil, GPUMemCopyUtilPercent, Gauge},
		{"DCGM_FI_PROF_PCIE_TX_BYTES", nil, PCIeTxBytes, Gauge},
		{"DCGM_FI_PROF_PCIE_RX_BYTES", nil, PCIeRxBytes, Gauge},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", nil, NVLinkBandwidthTotal, Counter},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL_total", nil, NVLinkBandwidthTotal, Counter},
		{"DCGM_FI_PROF_NVLINK_TX_BYTES", nil, NVLinkTxBytes, Gauge},
		{"DCGM_FI_PROF_NVLINK_RX_BYTES", nil, NVLinkRxBytes, Gauge},
		{"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", nil, NVLinkCRCFlitErrors, Counter},
		{"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", nil, NVLinkCRCDataErrors, Counter},
		{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", nil, NVLinkReplayErrors, Counter},
		{"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", nil, NVLinkRecoveryErrors, Counter},
		{"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL_total", nil, NVLinkReplayErrors, Counter},
		{"DCGM_FI_DEV_XID_ERRORS", nil, XidErrors, Gauge},
		{"kv_cache_fragmentation_ratio", nil, KVCacheFragmentation, Gauge},
		{"vllm:kv_cache_fragmentation_ratio", nil, KVCacheFragmentation, Gauge},
		{"sglang:kv_cache_fragmentation_ratio", nil, KVCacheFragmentation, Gauge},
		// OpenTelemetry GenAI conventions, OTLP and Prometheus spellings.
		{"gen_ai.server.time_to_first_token", nil, TTFTSeconds, Histogram},
		{"gen_ai.server.time_per_output_token", nil, ITLSeconds, Histogram},
		{"gen_ai.server.request.duration", nil, E2ESeconds, Histogram},
		{"gen_ai_server_time_to_first_token", nil, TTFTSeconds, Histogram},
		{"gen_ai_server_time_per_output_token", nil, ITLSeconds, Histogram},
		{"gen_ai_server_request_duration", nil, E2ESeconds, Histogram},
		{"gen_ai_server_time_to_first_token_seconds", nil, TTFTSeconds, Histogram},
		{"gen_ai_server_time_per_output_token_seconds", nil, ITLSeconds, Histogram},
		{"gen_ai_server_request_duration_seconds", nil, E2ESeconds, Histogram},
	}
	for _, c := range cases {
		label := func(k string) (string, bool) { v, ok := c.labels[k]; return v, ok }
		got, ok := NormalizeMetric(c.name, label)
		if !ok || got.Name != c.want || got.Kind != c.kind || got.Scale != 1 {
			t.Errorf("NormalizeMetric(%q, %v) = %+v, %v; want %s %s scale 1", c.name, c.labels, got, ok, c.want, c.kind)
		}
	}

	unknown := []tc{
		{name: "vllm:unknown_metric"},
		{name: "http_requests_total"},
		{name: ""},
		// _total only on counters.
		{name: "vllm:kv_cache_usage_perc_total"},
		{name: "vllm:num_requests_running_total"},
		{name: "vllm:time_to_first_token_seconds_total"},
		// Label-dependent names without (a known) label.
		{name: "nv_trt_llm_kv_cache_block_metrics"},
		{name: "nv_trt_llm_kv_cache_block_metrics", labels: map[string]string{"kv_cache_block_type": "tokens_per"}},
		// Case matters.
		{name: "dcgm_fi_dev_fb_used"},
		{name: "VLLM:kv_cache_usage_perc"},
	}
	for _, c := range unknown {
		label := func(k string) (string, bool) { v, ok := c.labels[k]; return v, ok }
		if got, ok := NormalizeMetric(c.name, label); ok {
			t.Errorf("NormalizeMetric(%q, %v) = %+v, want ok=false", c.name, c.labels, got)
		}
	}
	if _, ok := NormalizeMetric("nv_trt_llm_kv_cache_block_metrics", nil); ok {
		t.Error("nil label func: want ok=false for a label-dependent name")
	}

	// Every canonical metric is reachable from some source name of the
	// table, and the table in doc.go names every one.
	reached := map[string]bool{}
	for _, c := range cases {
		reached[c.want] = true
	}
	for _, m := range Metrics {
		if !reached[m.Name] {
			t.Errorf("canonical metric %s not covered by the table", m.Name)
		}
		if info, ok := MetricInfoOf(m.Name); !ok || info != m {
			t.Errorf("MetricInfoOf(%s) = %+v, %v", m.Name, info, ok)
		}
		if m.Unit == "" || m.Help == "" || m.Kind.String() == "unknown" {
			t.Errorf("metric %s: incomplete info %+v", m.Name, m)
		}
	}
	// Every source name of the package is in the table above.
	tested := map[string]bool{}
	for _, c := range cases {
		tested[c.name] = true
	}
	for src := range metricNames {
		if !tested[src] {
			t.Errorf("source name %s has no test case", src)
		}
	}
}

func TestDocTableListsEveryMetric(t *testing.T) {
	// The doc.go table is the user's reference; every canonical name and
	// source name must appear in it.
	doc := readDoc(t)
	for _, m := range Metrics {
		if !strings.Contains(doc, "//\t"+m.Name+" ") {
			t.Errorf("doc.go table lacks a row for %s", m.Name)
		}
	}
	for src := range metricNames {
		if strings.HasPrefix(src, "gen_ai_") || !strings.HasSuffix(src, "_seconds") && metricInfo[metricNames[src].Name].Kind == Histogram && strings.Contains(src, ":") {
			continue // described in prose
		}
		if !strings.Contains(doc, src) {
			t.Errorf("doc.go table lacks source name %s", src)
		}
	}
}

func TestNormalizeMetricNoAlloc(t *testing.T) {
	label := func(string) (string, bool) { return "free", true }
	n := testing.AllocsPerRun(100, func() {
		NormalizeMetric("vllm:prefix_cache_hits_total", label)
		NormalizeMetric("nv_trt_llm_kv_cache_block_metrics", label)
		NormalizeMetric("unknown_total", label)
	})
	if n != 0 {
		t.Errorf("allocs = %v, want 0", n)
	}
}
