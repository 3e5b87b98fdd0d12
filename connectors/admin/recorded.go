package admin

import (
	"container/list"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RecordedConfig configures a RecordedCollector.
type RecordedConfig struct {
	// MaxSeries bounds the series kept per record name: a new series
	// beyond it evicts the least recently updated one (counted in
	// braid_recorded_series_evicted_total). Default 10000.
	MaxSeries int
	// Help is the HELP text of each record name's family (see
	// alerts.Stage.RecordHelp). Default: "Recorded by braid."
	Help map[string]string
}

// RecordedSample is one value of a recording rule.
type RecordedSample struct {
	// Record is the metric name.
	Record string
	// Labels: the series' labels (valid Prometheus label names, not
	// "record").
	Labels map[string]string
	// Value; NaN: the series has no value now (it is removed).
	Value float64
	// WindowEnd: event time the value's window ends, unix ns.
	WindowEnd int64
	// Window: the rule's window; a series whose WindowEnd is more than
	// twice it behind the newest WindowEnd of its record is stale.
	Window time.Duration
}

// RecordedCollector keeps the latest value of each recording-rule series
// and exports them at every scrape: one gauge family per record name, and
// braid_recorded_window_end_timestamp_seconds{record, <labels>}, the event
// time (unix seconds) each series' window ends. A series not updated for
// twice its rule's window of event time, compared with the newest window
// end of its record, is dropped at collection. It is an unchecked
// collector (its families are known only as values arrive). Safe for
// concurrent use.
type RecordedCollector struct {
	cfg     RecordedConfig
	mu      sync.Mutex
	records map[string]*recordSeries
}

// recordSeries is the series of one record name, least recently updated
// at the back of lru.
type recordSeries struct {
	byKey   map[string]*list.Element // of *recordedSeries
	lru     list.List
	newest  int64
	evicted uint64
	descs   map[string]*prometheus.Desc // by label names, for the value and the window end
}

type recordedSeries struct {
	key    string
	names  []string // sorted
	values []string
	value  float64
	end    int64
	window int64
}

// NewRecordedCollector returns an empty collector.
func NewRecordedCollector(cfg RecordedConfig) *RecordedCollector {
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = 10000
	}
	return &RecordedCollector{cfg: cfg, records: map[string]*recordSeries{}}
}

var (
	descRecordedEvicted = desc("braid_recorded_series_evicted_total",
		"Recording-rule series evicted because their record name held its maximum number of series (alerts.max_groups), least recently updated first.",
		"record")
	helpRecordedWindowEnd = "Event time, unix seconds, at which the window of each recording-rule series' value ends."
)

// Set records s: it replaces the series' value unless the series holds one
// of a later window.
func (c *RecordedCollector) Set(s RecordedSample) {
	names := make([]string, 0, len(s.Labels))
	for n := range s.Labels {
		names = append(names, n)
	}
	sort.Strings(names)
	var kb strings.Builder
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = s.Labels[n]
		kb.WriteString(n)
		kb.WriteByte(0)
		kb.WriteString(values[i])
		kb.WriteByte(0)
	}
	key := kb.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.records[s.Record]
	if rs == nil {
		rs = &recordSeries{byKey: map[string]*list.Element{}, descs: map[string]*prometheus.Desc{}}
		c.records[s.Record] = rs
	}
	rs.newest = max(rs.newest, s.WindowEnd)
	el := rs.byKey[key]
	if el != nil {
		cur := el.Value.(*recordedSeries)
		if s.WindowEnd < cur.end {
			return
		}
		if math.IsNaN(s.Value) {
			rs.lru.Remove(el)
			delete(rs.byKey, key)
			return
		}
		cur.value, cur.end, cur.window = s.Value, s.WindowEnd, int64(s.Window)
		rs.lru.MoveToFront(el)
		return
	}
	if math.IsNaN(s.Value) {
		return
	}
	if rs.lru.Len() >= c.cfg.MaxSeries {
		old := rs.lru.Back()
		rs.lru.Remove(old)
		delete(rs.byKey, old.Value.(*recordedSeries).key)
		rs.evicted++
	}
	rs.byKey[key] = rs.lru.PushFront(&recordedSeries{key: key, names: names, values: values,
		value: s.Value, end: s.WindowEnd, window: int64(s.Window)})
}

// Describe sends nothing: the collector is unchecked.
func (c *RecordedCollector) Describe(chan<- *prometheus.Desc) {}

// Collect drops the stale series and sends the others.
func (c *RecordedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	records := make([]string, 0, len(c.records))
	for r := range c.records {
		records = append(records, r)
	}
	slices.Sort(records)
	for _, rec := range records {
		rs := c.records[rec]
		for el := rs.lru.Front(); el != nil; {
			next := el.Next()
			s := el.Value.(*recordedSeries)
			if rs.newest-s.end > 2*s.window {
				rs.lru.Remove(el)
				delete(rs.byKey, s.key)
				el = next
				continue
			}
			vd, ed := rs.desc(rec, c.help(rec), s.names)
			if m, err := prometheus.NewConstMetric(vd, prometheus.GaugeValue, s.value, s.values...); err == nil {
				ch <- m
			}
			ev := append([]string{rec}, s.values...)
			if m, err := prometheus.NewConstMetric(ed, prometheus.GaugeValue, float64(s.end)/1e9, ev...); err == nil {
				ch <- m
			}
			el = next
		}
		ch <- prometheus.MustNewConstMetric(descRecordedEvicted, prometheus.CounterValue, float64(rs.evicted), rec)
	}
}

func (c *RecordedCollector) help(rec string) string {
	if h := c.cfg.Help[rec]; h != "" {
		return h
	}
	return "Recorded by braid."
}

// desc returns the descriptors of a series of rec with the label names:
// its value's and its window end's.
func (rs *recordSeries) desc(rec, help string, names []string) (value, end *prometheus.Desc) {
	k := strings.Join(names, ",")
	if d := rs.descs[k]; d != nil {
		return d, rs.descs[k+",\x00end"]
	}
	value = prometheus.NewDesc(rec, help, names, nil)
	end = prometheus.NewDesc("braid_recorded_window_end_timestamp_seconds", helpRecordedWindowEnd, append([]string{"record"}, names...), nil)
	rs.descs[k], rs.descs[k+",\x00end"] = value, end
	return value, end
}
