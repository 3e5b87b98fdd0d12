// Package nvml samples NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml)
// and turns the readings into OTLP metrics named as DCGM exporter names
// them, so that braid joins them to traces by resource exactly as it joins
// a real DCGM exporter's metrics scraped by the Collector. It is the core
// of `braid gpu-exporter`.
//
// # Build
//
// go-nvml loads libnvidia-ml.so.1 through cgo. The adapter onto it
// (adapter_cgo.go) is built only with cgo; with CGO_ENABLED=0, [Open]
// returns a [Library] whose Init fails with [ErrNoCgo], so the engine
// binary stays pure Go. Everything else here — [Library] and [Device], the
// [Sampler], [Run], the sinks, and the fake in package
// [github.com/braidlabs/braid/connectors/nvml/fake] — is pure Go.
//
// Where there is no driver, Init fails with [ErrLibraryNotFound]; [Run]
// with [Options.Retry] keeps trying with capped exponential backoff.
//
// # Output
//
// One ResourceMetrics per GPU, in index order, with the resource attributes
// service.name "braid-gpu-exporter", host.name, gpu.uuid and gpu.index
// (int), one scope ([ScopeName]), and the metrics in the order of the table
// below. Every point carries DCGM exporter's labels: gpu (the index as a
// string), UUID, pci_bus_id, modelName, Hostname. Values are doubles, as
// the Collector's Prometheus receiver produces from a real DCGM exporter.
// Gauges have no start time; the cumulative sums start at the exporter's
// start.
//
//	metric                                         kind             unit     from NVML
//	DCGM_FI_DEV_FB_TOTAL                           gauge            MiB      GetMemoryInfo_v2 .Total / 2^20 (v1 on old drivers)
//	DCGM_FI_DEV_FB_USED                            gauge            MiB      GetMemoryInfo_v2 .Used
//	DCGM_FI_DEV_FB_FREE                            gauge            MiB      GetMemoryInfo_v2 .Free
//	DCGM_FI_DEV_FB_RESERVED                        gauge            MiB      GetMemoryInfo_v2 .Reserved (0 with v1)
//	DCGM_FI_DEV_GPU_UTIL                           gauge            %        GetUtilizationRates .Gpu
//	DCGM_FI_DEV_MEM_COPY_UTIL                      gauge            %        GetUtilizationRates .Memory
//	DCGM_FI_PROF_PCIE_TX_BYTES                     gauge            By/s     GetPcieThroughput(TX) KiB/s × 1024
//	DCGM_FI_PROF_PCIE_RX_BYTES                     gauge            By/s     GetPcieThroughput(RX) KiB/s × 1024
//	DCGM_FI_PROF_NVLINK_TX_BYTES                   gauge            By/s     Δ NVLink TX data bytes / Δt, all links (from the 2nd round)
//	DCGM_FI_PROF_NVLINK_RX_BYTES                   gauge            By/s     Δ NVLink RX data bytes / Δt, all links (from the 2nd round)
//	DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL             cumulative sum   By       NVLink TX + RX data bytes, all links
//	DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL  cumulative sum   {error}  GetNvLinkErrorCounter(DL_CRC_FLIT), summed over links
//	DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL  cumulative sum   {error}  GetNvLinkErrorCounter(DL_CRC_DATA), summed over links
//	DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL    cumulative sum   {error}  GetNvLinkErrorCounter(DL_REPLAY), summed over links
//	DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL  cumulative sum   {error}  GetNvLinkErrorCounter(DL_RECOVERY), summed over links
//	DCGM_FI_DEV_XID_ERRORS                         gauge            1        last Xid code (0: none since start), EventTypeXidCriticalError
//
// NVLink data bytes are the field values FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX
// per active link (Hopper and later, KiB), or else
// GetNvLinkUtilizationCounter(link, 0) when counter 0 counts bytes. A GPU
// without active NVLinks has no NVLink metrics; any query a GPU does not
// support leaves its metrics out, logged once.
//
// Besides the gauge in every round, each Xid event is sent at once as its
// own MetricsData: one DCGM_FI_DEV_XID_ERRORS point at the event's time,
// with the extra label err_code.
//
// # Sinks
//
// [KafkaSink] writes one record per MetricsData to otlp_metrics with a null
// key, otlp_proto (default) or otlp_json, as the Collector's Kafka exporter
// does; [HTTPSink] posts to an OTLP/HTTP receiver (POST /v1/metrics,
// application/x-protobuf).
package nvml
