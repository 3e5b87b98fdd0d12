package admin

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/operators/llmmetrics"
)

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	// Engine is read at every scrape: its tasks' watermarks and state.
	// Required.
	Engine EngineView
	// Metrics is the job's table of figures (EngineMetrics, the stages'),
	// read at every scrape. Optional.
	Metrics Table
	// Lag is the consumer lag, refreshed elsewhere. Optional: without it
	// braid_consumer_lag_records is not exported.
	Lag LagView
	// Now is the clock for braid_watermark_lag_seconds. Default time.Now.
	Now func() time.Time
	// LLM is the fuse stage's derived LLM metrics, read at every scrape
	// (see LLMCollector). Optional: without it those metrics are not
	// exported. braid_pollution_incidents_total{pattern} is among them:
	// the table must then not have braid_pollution_incidents_total.
	LLM *llmmetrics.Recorder
}

// Collector is a prometheus.Collector that reads the engine's tasks, the
// job's table of figures and the consumer lag at scrape time. Create with
// NewCollector and register it on the job's registry. Safe for concurrent
// scrapes.
type Collector struct {
	cfg   CollectorConfig
	descs map[string]*prometheus.Desc // of cfg.Metrics, by name
	llm   *LLMCollector               // nil without CollectorConfig.LLM
}

// NewCollector validates cfg.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	var errs []error
	if cfg.Engine == nil {
		errs = append(errs, errors.New("admin: CollectorConfig.Engine is required"))
	}
	errs = append(errs, cfg.Metrics.Validate())
	if cfg.LLM != nil && slices.Contains(cfg.Metrics.Names(), "braid_pollution_incidents_total") {
		errs = append(errs, errors.New("admin: braid_pollution_incidents_total is both in CollectorConfig.Metrics and, by pattern, in CollectorConfig.LLM"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Collector{cfg: cfg, descs: cfg.Metrics.families()}
	if cfg.LLM != nil {
		c.llm = NewLLMCollector(cfg.LLM)
	}
	return c, nil
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics the Collector exports.
var (
	descConsumerLag = desc("braid_consumer_lag_records",
		"Records between the job's committed offset and the end offset (high watermark) of a source topic partition, "+
			"as of the last background refresh (every 10s by default; see braid_consumer_lag_refreshed_unix_seconds).",
		"topic", "partition")
	descLagRefreshed = desc("braid_consumer_lag_refreshed_unix_seconds",
		"Unix time, in seconds, of the last successful refresh of braid_consumer_lag_records.")
	descWatermarkLag = desc("braid_watermark_lag_seconds",
		"Seconds between now (processing time) and the task's event-time watermark; absent until the watermark is known.",
		"partition")
	descWatermark = desc("braid_watermark_unix_seconds",
		"The task's event-time watermark, unix seconds; absent until it is known.",
		"partition")
	descTasks = desc("braid_tasks",
		"Tasks open in this instance: one per assigned input partition.")
	descStateBytes = desc("braid_state_bytes",
		"Bytes on disk of the task's state keyspace at its last checkpoint.",
		"partition")
)

// Describe sends the descriptors of every metric the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConsumerLag, descLagRefreshed, descWatermarkLag, descWatermark, descTasks, descStateBytes} {
		ch <- d
	}
	for _, name := range c.cfg.Metrics.Names() {
		ch <- c.descs[name]
	}
	if c.llm != nil {
		c.llm.Describe(ch)
	}
}

// Collect reads the views and sends the current values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.llm != nil {
		c.llm.Collect(ch)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, m := range c.cfg.Metrics {
		if m.Name == "" {
			continue
		}
		v := m.Value()
		typ := prometheus.CounterValue
		if m.Gauge {
			typ = prometheus.GaugeValue
		}
		var labels []string
		if m.Label != "" {
			labels = []string{m.LabelValue}
		}
		f := float64(v)
		if m.Scale != 0 {
			f *= m.Scale
		}
		ch <- prometheus.MustNewConstMetric(c.descs[m.Name], typ, f, labels...)
	}

	tasks := c.cfg.Engine.Tasks()
	gauge(descTasks, float64(len(tasks)))
	now := c.cfg.Now()
	for _, t := range tasks {
		p := strconv.Itoa(int(t.Partition))
		gauge(descStateBytes, float64(t.StateBytes), p)
		if t.Watermark == math.MinInt64 {
			continue
		}
		gauge(descWatermark, float64(t.Watermark)/1e9, p)
		gauge(descWatermarkLag, float64(now.UnixNano())/1e9-float64(t.Watermark)/1e9, p)
	}

	if c.cfg.Lag != nil {
		lags, at := c.cfg.Lag.Lags()
		if !at.IsZero() {
			gauge(descLagRefreshed, float64(at.UnixNano())/1e9)
		}
		for _, l := range lags {
			gauge(descConsumerLag, float64(l.Records), l.Topic, strconv.Itoa(int(l.Partition)))
		}
	}
}
