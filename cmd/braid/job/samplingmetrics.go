package job

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/operators/sampling"
)

// samplingCollector exports the sampling stage's counters on /metrics.
type samplingCollector struct {
	s                            *sampling.Stage
	seen, dropped, revised, kept *prometheus.Desc
	records, bytes, unwritable   *prometheus.Desc
	untracked                    *prometheus.Desc
}

func newSamplingCollector(s *sampling.Stage) *samplingCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &samplingCollector{s: s,
		seen:       d("braid_sampling_seen_total", "Traces the sampling stage decided on, counted once at their first emission, per tenant.", "tenant"),
		dropped:    d("braid_sampling_dropped_total", "Traces dropped at their first decision, per tenant (braid_sampling_revised_total of them were kept by a later revision).", "tenant"),
		revised:    d("braid_sampling_revised_total", "Traces dropped at first and kept by a later revision (a late error, incident tag or verdict), per tenant.", "tenant"),
		kept:       d("braid_sampling_kept_total", "Traces kept for trace stores, per tenant and reason (rate, or the rule that kept it: error, polluted, quality, slow).", "tenant", "reason"),
		records:    d("braid_sampling_records_total", "Records written to the sampled topics (OTLP TracesData and LogsData)."),
		bytes:      d("braid_sampling_bytes_total", "Bytes of the record values written to the sampled topics."),
		unwritable: d("braid_sampling_unwritable_total", "Members of kept traces left out of the sampled topics: with the sampling attributes they fit no record."),
		untracked:  d("braid_sampling_slow_untracked_total", "Traces whose model had no latency window (more models than sampling.max_models): the slow rule could not judge them."),
	}
}

func (c *samplingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.seen, c.dropped, c.revised, c.kept, c.records, c.bytes, c.unwritable, c.untracked} {
		ch <- d
	}
}

func (c *samplingCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.s.Counts()
	for _, t := range n.Tenants {
		ch <- prometheus.MustNewConstMetric(c.seen, prometheus.CounterValue, float64(t.Seen), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(t.Dropped), t.Tenant)
		ch <- prometheus.MustNewConstMetric(c.revised, prometheus.CounterValue, float64(t.Revised), t.Tenant)
		for _, r := range sampling.Reasons() {
			ch <- prometheus.MustNewConstMetric(c.kept, prometheus.CounterValue, float64(t.Kept[r]), t.Tenant, r)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.CounterValue, float64(n.Records))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(n.Bytes))
	ch <- prometheus.MustNewConstMetric(c.unwritable, prometheus.CounterValue, float64(n.Unwritable))
	ch <- prometheus.MustNewConstMetric(c.untracked, prometheus.CounterValue, float64(n.Untracked))
}
