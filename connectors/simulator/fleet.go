package simulator

import (
	"fmt"
	"sort"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
)

// Server flavours of the realistic fleet.
type flavour uint8

const (
	flavourVLLM       flavour = iota // vLLM v1: vllm:kv_cache_usage_perc, vllm:prefix_cache_*
	flavourVLLMLegacy                // vLLM v0 names: vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*
	flavourSGLang
)

// modelSpec is one served model: its name, how slow it is relative to an 8B
// model, its weights in GPU memory and its KV pool.
type modelSpec struct {
	name       string
	slowdown   float64
	weightsMiB float64
	numBlocks  int // KV blocks of blockSize tokens
}

var (
	// KV pools: what vLLM finds at gpu_memory_utilization 0.9 on an H100
	// (128 KiB per token for the 8B and Mixtral, 256 KiB for the 32B).
	modelLlama   = modelSpec{"meta-llama/Llama-3.1-8B-Instruct", 1, 15_320, 28_672}
	modelQwen    = modelSpec{"Qwen/Qwen2.5-32B-Instruct-AWQ", 1.8, 19_100, 13_824}
	modelMixtral = modelSpec{"mistralai/Mixtral-8x7B-Instruct-v0.1-AWQ", 1.4, 24_700, 23_040}
)

const (
	blockSize = 16 // tokens per KV block
	// maxQueueTime is how long a client waits for its request to start
	// before it gives up: the request is aborted (an orphan).
	maxQueueTime = 30 * time.Second
	gpuTotalMiB  = 81_559 // H100 80GB HBM3
	gpuResvMiB   = 577    // FB_RESERVED
	kvPoolMiB    = 0.9*gpuTotalMiB - gpuResvMiB - 2_048
	gpuModel     = "NVIDIA H100 80GB HBM3"
)

// serverSpec is the server of GPU g (0 or 1) on host h: the fleet repeats a
// pattern of three hosts.
func serverSpec(h, g int) (flavour, modelSpec) {
	switch (h%3)*2 + g {
	case 0, 1:
		return flavourVLLM, modelLlama
	case 2:
		return flavourVLLMLegacy, modelQwen
	case 3:
		return flavourSGLang, modelQwen
	case 4:
		return flavourVLLM, modelMixtral
	default:
		return flavourSGLang, modelLlama
	}
}

// Canonical metric names of the resource truth (operators/semconv maps the
// raw names onto these).
const (
	MetricKVCacheUsage       = "kv_cache_usage"
	MetricRequestsRunning    = "requests_running"
	MetricRequestsWaiting    = "requests_waiting"
	MetricPreemptions        = "preemptions"
	MetricPrefixCacheQueries = "prefix_cache_queries"
	MetricPrefixCacheHits    = "prefix_cache_hits"
	MetricPrefixCacheHitRate = "prefix_cache_hit_rate"
	MetricCacheConfigInfo    = "cache_config_info"
	MetricGPUFBUsed          = "gpu_fb_used_mib"
	MetricGPUFBFree          = "gpu_fb_free_mib"
	MetricGPUFBReserved      = "gpu_fb_reserved_mib"
	MetricGPUUtil            = "gpu_util_percent"
	MetricPCIeTx             = "pcie_tx_bytes"
	MetricPCIeRx             = "pcie_rx_bytes"
	MetricNVLinkTotal        = "nvlink_bandwidth_total"
	MetricXidErrors          = "xid_errors"
)

// series is one scraped time series: a metric of a target with fixed point
// labels, and every sample written so far (pruned to those still needed by
// requests in flight).
type series struct {
	metric  string // canonical
	name    string // as written
	desc    string
	counter bool
	target  *target
	labels  []*commonpb.KeyValue
	id      string // identity: name{labels} at instance
	samples []sample
}

type sample struct {
	t uint64
	v float64
}

// target is one scrape target: a server's metrics endpoint or a host's DCGM
// exporter (one target per host, its series per GPU).
type target struct {
	job, instance, host string
	resource            *resourcepb.Resource
	phase               time.Duration // scrape offset in the interval
}

// promResource is the resource the Collector's Prometheus receiver gives a
// scrape target (plus host.name from the resourcedetection processor).
func promResource(job, host string, port int) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
		kvStr("service.name", job),
		kvStr("service.instance.id", fmt.Sprintf("%s:%d", host, port)),
		kvStr("server.address", host),
		kvStr("server.port", fmt.Sprint(port)),
		kvStr("url.scheme", "http"),
		kvStr("host.name", host),
	}}
}

func (t *target) newSeries(metric, name, desc string, counter bool, labels ...*commonpb.KeyValue) *series {
	pairs := make([]string, len(labels))
	for i, l := range labels {
		pairs[i] = l.Key + "=" + l.Value.GetStringValue()
	}
	sort.Strings(pairs)
	return &series{
		metric: metric, name: name, desc: desc, counter: counter, target: t, labels: labels,
		id: name + "{" + strings.Join(pairs, ",") + "}@" + t.instance,
	}
}

// makeFleet builds the realistic fleet: Hosts hosts, two GPUs each, one
// server per GPU.
func (s *Simulator) makeFleet() {
	si := s.cfg.ScrapeInterval
	for h := 0; h < s.cfg.Hosts; h++ {
		host := fmt.Sprintf("gpu-node-%02d", h+1)
		dcgm := &target{job: "dcgm-exporter", instance: host + ":9400", host: host,
			phase: time.Duration(h*7919+500) * time.Millisecond % si}
		dcgm.resource = promResource(dcgm.job, host, 9400)
		for g := 0; g < 2; g++ {
			fl, m := serverSpec(h, g)
			in := &instance{
				host: host, gpuIndex: g, index: len(s.instances), gpuUUID: "GPU-" + s.uuid(),
				pciBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+g*0x20),
				model:    m.name, spec: m, flavour: fl, sglang: fl == flavourSGLang,
				noTotal: (h+g)%3 == 2,
				hints:   (h+g)%2 == 1,
				buckets: make([]uint64, len(e2eBounds)+1),
				maxSeqs: 256,
				dcgm:    dcgm.resource,
			}
			in.service, in.port = "vllm", 8000+g
			if in.sglang {
				in.service, in.port = "sglang", 30000+g
			}
			in.id = fmt.Sprintf("%s:%d", host, in.port)
			in.resource = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
				kvStr("service.name", in.service),
				kvStr("service.instance.id", in.id),
				kvStr("host.name", host),
				kvStr("gpu.uuid", in.gpuUUID),
				kvInt("gpu.index", int64(g)),
			}}
			if in.sglang {
				in.traceScope = &commonpb.InstrumentationScope{Name: "sglang", Version: "0.5.4"}
				in.logScope = &commonpb.InstrumentationScope{Name: "sglang.srt.managers.tokenizer_manager"}
			} else {
				in.traceScope = &commonpb.InstrumentationScope{Name: "vllm.llm_engine", Version: "0.11.0"}
				in.logScope = &commonpb.InstrumentationScope{Name: "vllm.v1.engine.async_llm"}
				if fl == flavourVLLMLegacy {
					in.traceScope.Version = "0.7.3"
					in.logScope.Name = "vllm.engine.llm_engine"
				}
			}
			in.target = &target{job: in.service, instance: in.id, host: host,
				phase: time.Duration(len(s.instances)*137) * time.Millisecond % si}
			in.target.resource = promResource(in.service, host, in.port)
			in.metricRes = in.target.resource
			s.makeServerSeries(in)
			s.makeDCGMSeries(in, dcgm, h%2 == 0)
			s.instances = append(s.instances, in)
		}
	}
}

func (s *Simulator) makeServerSeries(in *instance) {
	t := in.target
	total := "_total"
	if in.noTotal {
		total = ""
	}
	model := kvStr("model_name", in.model)
	if in.sglang {
		lb := []*commonpb.KeyValue{model, kvStr("engine_type", "unified"), kvStr("tp_rank", "0"), kvStr("pp_rank", "0")}
		in.sKV = t.newSeries(MetricKVCacheUsage, "sglang:token_usage", "The token usage.", false, lb...)
		in.sRunning = t.newSeries(MetricRequestsRunning, "sglang:num_running_reqs", "The number of running requests.", false, lb...)
		in.sWaiting = t.newSeries(MetricRequestsWaiting, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", false, lb...)
		in.sHitRate = t.newSeries(MetricPrefixCacheHitRate, "sglang:cache_hit_rate", "The prefix cache hit rate.", false, lb...)
		in.series = []*series{in.sKV, in.sRunning, in.sWaiting, in.sHitRate}
		return
	}
	lb := []*commonpb.KeyValue{model, kvStr("engine", "0")}
	kvName, prefix := "vllm:kv_cache_usage_perc", "vllm:prefix_cache_"
	if in.flavour == flavourVLLMLegacy {
		kvName, prefix = "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_"
	}
	in.sKV = t.newSeries(MetricKVCacheUsage, kvName, "KV-cache usage. 1 means 100 percent usage.", false, lb...)
	in.sRunning = t.newSeries(MetricRequestsRunning, "vllm:num_requests_running", "Number of requests in model execution batches.", false, lb...)
	in.sWaiting = t.newSeries(MetricRequestsWaiting, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", false, lb...)
	in.sPreempt = t.newSeries(MetricPreemptions, "vllm:num_preemptions"+total, "Cumulative number of preemption from the engine.", true, lb...)
	in.sQueries = t.newSeries(MetricPrefixCacheQueries, prefix+"queries"+total, "Prefix cache queries, in terms of number of queried tokens.", true, lb...)
	in.sHits = t.newSeries(MetricPrefixCacheHits, prefix+"hits"+total, "Prefix cache hits, in terms of number of cached tokens.", true, lb...)
	in.sConfig = t.newSeries(MetricCacheConfigInfo, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", false,
		kvStr("block_size", fmt.Sprint(blockSize)), kvStr("cache_dtype", "auto"), kvStr("enable_prefix_caching", "True"),
		kvStr("gpu_memory_utilization", "0.9"), kvStr("num_gpu_blocks", fmt.Sprint(in.spec.numBlocks)))
	in.series = []*series{in.sKV, in.sRunning, in.sWaiting, in.sPreempt, in.sQueries, in.sHits, in.sConfig}
}

// makeDCGMSeries adds the DCGM exporter's series of in's GPU: older
// exporters label the host Hostname, newer ones hostname.
func (s *Simulator) makeDCGMSeries(in *instance, t *target, oldLabel bool) {
	hl := "hostname"
	if oldLabel {
		hl = "Hostname"
	}
	lb := []*commonpb.KeyValue{
		kvStr("gpu", fmt.Sprint(in.gpuIndex)), kvStr("UUID", in.gpuUUID), kvStr("pci_bus_id", in.pciBusID),
		kvStr("device", fmt.Sprintf("nvidia%d", in.gpuIndex)), kvStr("modelName", gpuModel), kvStr(hl, in.host),
	}
	in.dcgmTarget = t
	in.dFBUsed = t.newSeries(MetricGPUFBUsed, "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", false, lb...)
	in.dFBFree = t.newSeries(MetricGPUFBFree, "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", false, lb...)
	in.dFBResv = t.newSeries(MetricGPUFBReserved, "DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", false, lb...)
	in.dUtil = t.newSeries(MetricGPUUtil, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", false, lb...)
	in.dPCIeTx = t.newSeries(MetricPCIeTx, "DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", false, lb...)
	in.dPCIeRx = t.newSeries(MetricPCIeRx, "DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", false, lb...)
	in.dNVLink = t.newSeries(MetricNVLinkTotal, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes.", true, lb...)
	in.dXid = t.newSeries(MetricXidErrors, "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", false, lb...)
	in.dcgmSeries = []*series{in.dFBUsed, in.dFBFree, in.dFBResv, in.dUtil, in.dPCIeTx, in.dPCIeRx, in.dNVLink, in.dXid}
}
