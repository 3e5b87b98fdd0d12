package simulator

import (
	"math"
	"sort"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// scrapeTimes returns the scrape times of a target with the given phase in
// (lo, hi]: Start + phase + k*ScrapeInterval.
func (s *Simulator) scrapeTimes(phase time.Duration, lo, hi uint64) []uint64 {
	si := int64(s.cfg.ScrapeInterval)
	base := s.cfg.Start.UnixNano() + int64(phase)
	d := int64(lo) - base
	k := d / si
	if d < 0 && d%si != 0 {
		k-- // floor
	}
	k++ // the first time after lo
	var out []uint64
	for t := base + k*si; t <= int64(hi); t += si {
		out = append(out, uint64(t))
	}
	return out
}

// scrape samples every target whose scrape times fall in (lo, hi]: each
// server, then its host's DCGM exporter, one ResourceMetrics per scrape as
// the Prometheus receiver writes them. It records the samples for the
// resource truth.
func (s *Simulator) scrape(lo, hi uint64) []*metricspb.ResourceMetrics {
	var out []*metricspb.ResourceMetrics
	for i := 0; i < len(s.instances); i += 2 {
		gpus := s.instances[i : i+2]
		for _, in := range gpus {
			for _, t := range s.scrapeTimes(in.target.phase, lo, hi) {
				out = append(out, s.scrapeServer(in, t))
			}
		}
		for _, t := range s.scrapeTimes(gpus[0].dcgmTarget.phase, lo, hi) {
			out = append(out, s.scrapeDCGM(gpus, t))
		}
	}
	return out
}

// processStart is the servers' and exporters' start, before any event time:
// the start time of their cumulative points.
func (s *Simulator) processStart() uint64 {
	return uint64(s.cfg.Start.Add(-time.Hour).UnixNano())
}

func (s *Simulator) point(se *series, t uint64, v float64) *metricspb.Metric {
	se.samples = append(se.samples, sample{t, v})
	s.truth.ResourcePoints++
	s.observe(t)
	p := &metricspb.NumberDataPoint{
		Attributes: se.labels, TimeUnixNano: t,
		Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v},
	}
	m := &metricspb.Metric{Name: se.name, Description: se.desc}
	if se.counter {
		p.StartTimeUnixNano = s.processStart()
		m.Data = &metricspb.Metric_Sum{Sum: &metricspb.Sum{
			DataPoints:             []*metricspb.NumberDataPoint{p},
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
			IsMonotonic:            true,
		}}
	} else {
		m.Data = &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{p}}}
	}
	return m
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// scrapeServer samples in's state at t. KV usage is the running requests'
// footprint over the pool, capped at 1; above 95% of demand the engine
// preempts, so the preemption counter goes up; the prefix counters add the
// prompts (queries) and cached tokens (hits, whole blocks) of the requests
// started since the last scrape.
func (s *Simulator) scrapeServer(in *instance, t uint64) *metricspb.ResourceMetrics {
	running, waiting, demand := in.state(t)
	if demand > 0.95 {
		in.preempt += 1 + math.Floor((demand-0.95)*40)
	}
	k := 0
	for ; k < len(in.unstarted) && in.unstarted[k].start <= t; k++ {
		r := in.unstarted[k]
		in.queries += float64(r.prompt)
		in.hits += math.Floor(float64(r.prompt)*r.hit/blockSize) * blockSize
	}
	in.unstarted = append(in.unstarted[:0], in.unstarted[k:]...)
	if len(s.cfg.Leaks) > 0 {
		if mib, _ := s.leakMiB(in.index, t); mib > 0 {
			demand += mib / in.poolMiB()
		}
	}
	usage := round3(min(1, demand))
	var ms []*metricspb.Metric
	if in.sglang {
		rate := 0.0
		if in.queries > 0 {
			rate = round3(in.hits / in.queries)
		}
		ms = append(ms,
			s.point(in.sRunning, t, float64(running)),
			s.point(in.sWaiting, t, float64(waiting)),
			s.point(in.sKV, t, usage),
			s.point(in.sHitRate, t, rate))
	} else {
		ms = append(ms,
			s.point(in.sRunning, t, float64(running)),
			s.point(in.sWaiting, t, float64(waiting)),
			s.point(in.sKV, t, usage),
			s.point(in.sPreempt, t, in.preempt),
			s.point(in.sQueries, t, in.queries),
			s.point(in.sHits, t, in.hits),
			s.point(in.sConfig, t, 1))
	}
	return &metricspb.ResourceMetrics{
		Resource:     in.metricRes,
		ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: promScope, Metrics: ms}},
	}
}

// scrapeDCGM samples the GPUs of one host at t: framebuffer use follows the
// KV cache (weights, activations while running, the used part of the KV
// pool), utilisation and PCIe traffic follow the running requests, the
// NVLink counter grows with them, and XID_ERRORS holds the last Xid.
func (s *Simulator) scrapeDCGM(gpus []*instance, t uint64) *metricspb.ResourceMetrics {
	var ms []*metricspb.Metric
	for _, in := range gpus {
		running, _, demand := in.state(t)
		used := in.spec.weightsMiB + 1024 + math.Round(min(1, demand)*in.poolMiB())
		if running > 0 {
			used += 1024
		}
		used = s.fbLeak(in.index, t, used)
		util, tx, rx := 0.0, float64(180_000+s.rng.IntN(40_000)), float64(220_000+s.rng.IntN(40_000))
		if running > 0 {
			util = float64(min(100, 30+2*running+s.rng.IntN(6)))
			tx += float64(running)*410_000 + float64(s.rng.IntN(100_000))
			rx += float64(running)*1_230_000 + float64(s.rng.IntN(100_000))
		}
		in.nvlink += math.Round(float64(running) * 2.5e8 * s.cfg.ScrapeInterval.Seconds())
		ms = append(ms,
			s.point(in.dFBUsed, t, used),
			s.point(in.dFBFree, t, gpuTotalMiB-gpuResvMiB-used),
			s.point(in.dFBResv, t, gpuResvMiB),
			s.point(in.dUtil, t, util),
			s.point(in.dPCIeTx, t, tx),
			s.point(in.dPCIeRx, t, rx),
			s.point(in.dNVLink, t, in.nvlink),
			s.point(in.dXid, t, in.xidAt(t)))
	}
	return &metricspb.ResourceMetrics{
		Resource:     gpus[0].dcgmTarget.resource,
		ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: promScope, Metrics: ms}},
	}
}

// poolMiB is the framebuffer of in's KV pool, in MiB.
func (in *instance) poolMiB() float64 { return 0.9*gpuTotalMiB - in.spec.weightsMiB - 2048 }

// ResourceWindow is the ground truth of one scraped series over one
// request's window [Arrival, Finish] (root span start and end; for an
// orphan, arrival and abort).
type ResourceWindow struct {
	// Metric is the canonical name (Metric* constants); Name the name as
	// written (vllm:kv_cache_usage_perc, DCGM_FI_DEV_FB_USED...).
	Metric string `json:"metric"`
	Name   string `json:"name"`
	// Counter is true for cumulative monotonic sums (Delta is set).
	Counter bool `json:"counter,omitempty"`
	// Series identifies the series: Name{sorted point labels}@Instance.
	Series string `json:"series"`
	// Service and Instance are the scrape target's resource service.name
	// (job) and service.instance.id; Host its host.name.
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Host     string `json:"host"`
	// Labels are the point labels.
	Labels map[string]string `json:"labels"`
	// AtStart is the last sample at or before Arrival, AtEnd the last at or
	// before Finish; nil when there is none.
	AtStart *float64 `json:"at_start,omitempty"`
	AtEnd   *float64 `json:"at_end,omitempty"`
	// Min and Max are over the AtStart sample and the samples in
	// (Arrival, Finish]; nil when there is none.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
	// Delta is AtEnd − AtStart for counters with both.
	Delta *float64 `json:"delta,omitempty"`
	// Samples is the number of samples in (Arrival, Finish].
	Samples int `json:"samples"`
}

// Window computes the window of samples (sorted by time) over [arrival,
// finish]: the definition of ResourceWindow's values.
func window(samples []sample, arrival, finish uint64, counter bool) (w ResourceWindow) {
	i := sort.Search(len(samples), func(i int) bool { return samples[i].t > arrival })
	j := sort.Search(len(samples), func(i int) bool { return samples[i].t > finish })
	w.Samples = j - i
	from := i
	if i > 0 {
		v := samples[i-1].v
		w.AtStart = &v
		from = i - 1
	}
	if j > 0 {
		v := samples[j-1].v
		w.AtEnd = &v
	}
	for k := from; k < j; k++ {
		v := samples[k].v
		if w.Min == nil || v < *w.Min {
			w.Min = &v
		}
		if w.Max == nil || v > *w.Max {
			w.Max = &v
		}
	}
	if counter && w.AtStart != nil && w.AtEnd != nil {
		d := *w.AtEnd - *w.AtStart
		w.Delta = &d
	}
	return w
}

// resourceTruth returns r's resource windows over every series at its
// place (its server's and its GPU's), sorted by metric then series.
func (s *Simulator) resourceTruth(r *request) []ResourceWindow {
	in := r.inst
	var out []ResourceWindow
	for _, se := range append(append([]*series(nil), in.series...), in.dcgmSeries...) {
		w := window(se.samples, r.arrival, r.end, se.counter)
		w.Metric, w.Name, w.Counter, w.Series = se.metric, se.name, se.counter, se.id
		w.Service, w.Instance, w.Host = se.target.job, se.target.instance, se.target.host
		w.Labels = labelMap(se.labels)
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Metric != out[j].Metric {
			return out[i].Metric < out[j].Metric
		}
		return out[i].Series < out[j].Series
	})
	return out
}

func labelMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}
