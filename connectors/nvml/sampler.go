package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
)

// Metric names, DCGM exporter's (see the table in doc.go).
const (
	MetricFBTotal          = "DCGM_FI_DEV_FB_TOTAL"
	MetricFBUsed           = "DCGM_FI_DEV_FB_USED"
	MetricFBFree           = "DCGM_FI_DEV_FB_FREE"
	MetricFBReserved       = "DCGM_FI_DEV_FB_RESERVED"
	MetricGPUUtil          = "DCGM_FI_DEV_GPU_UTIL"
	MetricMemCopyUtil      = "DCGM_FI_DEV_MEM_COPY_UTIL"
	MetricPCIeTX           = "DCGM_FI_PROF_PCIE_TX_BYTES"
	MetricPCIeRX           = "DCGM_FI_PROF_PCIE_RX_BYTES"
	MetricNvLinkTX         = "DCGM_FI_PROF_NVLINK_TX_BYTES"
	MetricNvLinkRX         = "DCGM_FI_PROF_NVLINK_RX_BYTES"
	MetricNvLinkBandwidth  = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
	MetricNvLinkCRCFlit    = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
	MetricNvLinkCRCData    = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
	MetricNvLinkReplay     = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
	MetricNvLinkRecovery   = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
	MetricXidErrors        = "DCGM_FI_DEV_XID_ERRORS"
	ServiceName            = "braid-gpu-exporter"
	ScopeName              = "github.com/braidlabs/braid/connectors/nvml"
	mib                    = 1 << 20
	unitMiB, unitPercent   = "MiB", "%"
	unitBytesPerSec, unitB = "By/s", "By"
	unitErrors, unitXid    = "{error}", "1"
)

// Sampler turns one round of NVML reads into OTLP metrics. It keeps, per
// GPU, the previous NVLink byte counters (to turn them into rates) and the
// last Xid seen. It is not safe for concurrent use: the exporter calls it
// from one goroutine.
type Sampler struct {
	host  string
	start uint64 // start_time_unix_nano of the cumulative sums
	log   *slog.Logger
	gpus  []*gpu // by Index
	byID  map[string]*gpu
}

type gpu struct {
	dev      Device
	info     DeviceInfo
	resource *resourcepb.Resource
	labels   []*commonpb.KeyValue // DCGM's point labels

	prevNv   NvLinkBytes
	prevAt   time.Time
	havePrev bool
	lastXid  uint64
	failing  map[string]bool // query → failed last round (log on change only)
}

// NewSampler reads every device's Info once. host is the host.name
// resource attribute and DCGM's Hostname label; start is the start time of
// the cumulative sums (the exporter's start). log may be nil.
func NewSampler(devs []Device, host string, start time.Time, log *slog.Logger) (*Sampler, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{host: host, start: unixNano(start), log: log, byID: make(map[string]*gpu, len(devs))}
	for i, d := range devs {
		info, err := d.Info()
		if err != nil {
			return nil, fmt.Errorf("nvml: info of device %d: %w", i, err)
		}
		if _, dup := s.byID[info.UUID]; dup {
			return nil, fmt.Errorf("nvml: two devices with uuid %q", info.UUID)
		}
		g := &gpu{dev: d, info: info, failing: map[string]bool{}}
		g.resource = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			str("service.name", ServiceName),
			str("host.name", host),
			str("gpu.uuid", info.UUID),
			{Key: "gpu.index", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(info.Index)}}},
		}}
		g.labels = []*commonpb.KeyValue{
			str("gpu", strconv.Itoa(info.Index)),
			str("UUID", info.UUID),
			str("pci_bus_id", info.PCIBusID),
			str("modelName", info.Name),
			str("Hostname", host),
		}
		s.gpus = append(s.gpus, g)
		s.byID[info.UUID] = g
	}
	slices.SortStableFunc(s.gpus, func(a, b *gpu) int { return a.info.Index - b.info.Index })
	return s, nil
}

// GPUs returns the devices' infos in index order.
func (s *Sampler) GPUs() []DeviceInfo {
	out := make([]DeviceInfo, len(s.gpus))
	for i, g := range s.gpus {
		out[i] = g.info
	}
	return out
}

// Sample reads every GPU and returns one ResourceMetrics per GPU, in index
// order, each with one scope whose metrics follow the order of the table
// in doc.go. A query that fails leaves its metrics out for that GPU (and
// is logged when it starts or stops failing); NVLink rates appear from the
// second round on.
func (s *Sampler) Sample(now time.Time) *metricspb.MetricsData {
	md := &metricspb.MetricsData{}
	ts := unixNano(now)
	for _, g := range s.gpus {
		var ms []*metricspb.Metric
		if m, err := g.dev.Memory(); s.ok(g, "memory", err) {
			ms = append(ms,
				s.gauge(g, MetricFBTotal, "Frame buffer memory total.", unitMiB, ts, float64(m.Total/mib)),
				s.gauge(g, MetricFBUsed, "Frame buffer memory used.", unitMiB, ts, float64(m.Used/mib)),
				s.gauge(g, MetricFBFree, "Frame buffer memory free.", unitMiB, ts, float64(m.Free/mib)),
				s.gauge(g, MetricFBReserved, "Frame buffer memory reserved by the driver.", unitMiB, ts, float64(m.Reserved/mib)))
		}
		if u, err := g.dev.Utilization(); s.ok(g, "utilization", err) {
			ms = append(ms,
				s.gauge(g, MetricGPUUtil, "GPU utilization.", unitPercent, ts, float64(u.GPU)),
				s.gauge(g, MetricMemCopyUtil, "Memory utilization.", unitPercent, ts, float64(u.Memory)))
		}
		if p, err := g.dev.PCIeThroughput(); s.ok(g, "pcie", err) {
			ms = append(ms,
				s.gauge(g, MetricPCIeTX, "PCIe bytes transmitted per second.", unitBytesPerSec, ts, float64(p.TX)),
				s.gauge(g, MetricPCIeRX, "PCIe bytes received per second.", unitBytesPerSec, ts, float64(p.RX)))
		}
		if nv, err := g.dev.NvLinkThroughput(); s.ok(g, "nvlink throughput", err) {
			if g.havePrev && now.After(g.prevAt) && nv.TX >= g.prevNv.TX && nv.RX >= g.prevNv.RX {
				dt := now.Sub(g.prevAt).Seconds()
				ms = append(ms,
					s.gauge(g, MetricNvLinkTX, "NVLink data bytes transmitted per second.", unitBytesPerSec, ts, float64(nv.TX-g.prevNv.TX)/dt),
					s.gauge(g, MetricNvLinkRX, "NVLink data bytes received per second.", unitBytesPerSec, ts, float64(nv.RX-g.prevNv.RX)/dt))
			}
			// A counter that went down (driver reload) restarts the rate.
			g.prevNv, g.prevAt, g.havePrev = nv, now, true
			ms = append(ms, s.sum(g, MetricNvLinkBandwidth, "NVLink data bytes transmitted and received, all links.", unitB, ts, float64(nv.TX+nv.RX)))
		}
		if e, err := g.dev.NvLinkErrors(); s.ok(g, "nvlink errors", err) {
			ms = append(ms,
				s.sum(g, MetricNvLinkCRCFlit, "NVLink flow-control CRC errors, all links.", unitErrors, ts, float64(e.CRCFlit)),
				s.sum(g, MetricNvLinkCRCData, "NVLink data CRC errors, all links.", unitErrors, ts, float64(e.CRCData)),
				s.sum(g, MetricNvLinkReplay, "NVLink replay errors, all links.", unitErrors, ts, float64(e.Replay)),
				s.sum(g, MetricNvLinkRecovery, "NVLink recovery errors, all links.", unitErrors, ts, float64(e.Recovery)))
		}
		ms = append(ms, s.xidGauge(g, ts, nil))
		md.ResourceMetrics = append(md.ResourceMetrics, s.wrap(g, ms))
	}
	return md
}

// ObserveXid records ev as its GPU's last Xid and returns the point to
// send at once: DCGM_FI_DEV_XID_ERRORS for that GPU at the event's time,
// with the label err_code. ok is false for an event of an unknown GPU or
// one that carries an error.
func (s *Sampler) ObserveXid(ev XidEvent) (md *metricspb.MetricsData, ok bool) {
	g := s.byID[ev.UUID]
	if g == nil || ev.Err != nil {
		return nil, false
	}
	g.lastXid = ev.Code
	m := s.xidGauge(g, unixNano(ev.Time), str("err_code", strconv.FormatUint(ev.Code, 10)))
	return &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{s.wrap(g, []*metricspb.Metric{m})}}, true
}

func (s *Sampler) xidGauge(g *gpu, ts uint64, extra *commonpb.KeyValue) *metricspb.Metric {
	m := s.gauge(g, MetricXidErrors, "Value of the last Xid error encountered (0: none since start).", unitXid, ts, float64(g.lastXid))
	if extra != nil {
		dp := m.GetGauge().DataPoints[0]
		dp.Attributes = append(dp.Attributes, extra)
	}
	return m
}

// ok reports whether err is nil, logging a query that starts failing (Info
// for not supported, Warn otherwise) or recovers.
func (s *Sampler) ok(g *gpu, query string, err error) bool {
	was := g.failing[query]
	g.failing[query] = err != nil
	switch {
	case err != nil && !was:
		lvl := slog.LevelWarn
		if errors.Is(err, ErrNotSupported) {
			lvl = slog.LevelInfo
		}
		s.log.Log(context.Background(), lvl, "gpu query failed; its metrics are left out", "gpu", g.info.Index, "uuid", g.info.UUID, "query", query, "err", err)
	case err != nil:
		s.log.Debug("gpu query failed", "gpu", g.info.Index, "query", query, "err", err)
	case was:
		s.log.Info("gpu query works again", "gpu", g.info.Index, "uuid", g.info.UUID, "query", query)
	}
	return err == nil
}

func (s *Sampler) wrap(g *gpu, ms []*metricspb.Metric) *metricspb.ResourceMetrics {
	return &metricspb.ResourceMetrics{
		Resource: g.resource,
		ScopeMetrics: []*metricspb.ScopeMetrics{{
			Scope:   &commonpb.InstrumentationScope{Name: ScopeName},
			Metrics: ms,
		}},
	}
}

func (s *Sampler) point(g *gpu, ts uint64, v float64) *metricspb.NumberDataPoint {
	return &metricspb.NumberDataPoint{
		Attributes:   slices.Clone(g.labels),
		TimeUnixNano: ts,
		Value:        &metricspb.NumberDataPoint_AsDouble{AsDouble: v},
	}
}

func (s *Sampler) gauge(g *gpu, name, desc, unit string, ts uint64, v float64) *metricspb.Metric {
	return &metricspb.Metric{Name: name, Description: desc, Unit: unit, Data: &metricspb.Metric_Gauge{
		Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{s.point(g, ts, v)}},
	}}
}

func (s *Sampler) sum(g *gpu, name, desc, unit string, ts uint64, v float64) *metricspb.Metric {
	p := s.point(g, ts, v)
	p.StartTimeUnixNano = s.start
	return &metricspb.Metric{Name: name, Description: desc, Unit: unit, Data: &metricspb.Metric_Sum{
		Sum: &metricspb.Sum{
			DataPoints:             []*metricspb.NumberDataPoint{p},
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
			IsMonotonic:            true,
		},
	}}
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}
