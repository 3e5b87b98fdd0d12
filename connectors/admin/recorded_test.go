package admin

import (
	"fmt"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

var recT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func gatherRecorded(t *testing.T, c *RecordedCollector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series returns the family's series as "l1=v1,l2=v2" → value.
func series(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v := m.GetGauge().GetValue()
		if m.Counter != nil {
			v = m.GetCounter().GetValue()
		}
		out[strings.Join(ls, ",")] = v
	}
	return out
}

// TestRecordedExposition: the text exposition of recorded series, as
// Prometheus reads it: one gauge family per record with its help, the
// window end of each series, the eviction counter; several rules share
// a record by their labels; NaN is not exported.
func TestRecordedExposition(t *testing.T) {
	c := NewRecordedCollector(RecordedConfig{Help: map[string]string{
		"braid_llm_response_sensitivity": "Recorded by braid: p50(sensitivity); p99(sensitivity).",
	}})
	end := recT0 + int64(5*time.Minute)
	for q, v := range map[string]float64{"0.5": 0.25, "0.99": 0.75} {
		c.Set(RecordedSample{Record: "braid_llm_response_sensitivity", Labels: map[string]string{"model": "llama", "tenant": "acme", "quantile": q},
			Value: v, WindowEnd: end, Window: 5 * time.Minute})
	}
	c.Set(RecordedSample{Record: "braid_llm_success_ratio", Labels: map[string]string{"model": "llama", "tenant": "acme"},
		Value: math.NaN(), WindowEnd: end, Window: 5 * time.Minute})
	want := fmt.Sprintf(`# HELP braid_llm_response_sensitivity Recorded by braid: p50(sensitivity); p99(sensitivity).
# TYPE braid_llm_response_sensitivity gauge
braid_llm_response_sensitivity{model="llama",quantile="0.5",tenant="acme"} 0.25
braid_llm_response_sensitivity{model="llama",quantile="0.99",tenant="acme"} 0.75
# HELP braid_recorded_series_evicted_total Recording-rule series evicted because their record name held its maximum number of series (alerts.max_groups), least recently updated first.
# TYPE braid_recorded_series_evicted_total counter
braid_recorded_series_evicted_total{record="braid_llm_response_sensitivity"} 0
braid_recorded_series_evicted_total{record="braid_llm_success_ratio"} 0
# HELP braid_recorded_window_end_timestamp_seconds Event time, unix seconds, at which the window of each recording-rule series' value ends.
# TYPE braid_recorded_window_end_timestamp_seconds gauge
braid_recorded_window_end_timestamp_seconds{model="llama",quantile="0.5",record="braid_llm_response_sensitivity",tenant="acme"} %[1]s
braid_recorded_window_end_timestamp_seconds{model="llama",quantile="0.99",record="braid_llm_response_sensitivity",tenant="acme"} %[1]s
`, strconv.FormatFloat(float64(end)/1e9, 'g', -1, 64))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	rw := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
	if got := rw.Body.String(); got != want {
		t.Fatalf("exposition\n%s\nwant\n%s", got, want)
	}
	// A NaN removes a series that had a value; a value of an earlier
	// window than the one held is ignored.
	c.Set(RecordedSample{Record: "braid_llm_response_sensitivity", Labels: map[string]string{"model": "llama", "tenant": "acme", "quantile": "0.5"},
		Value: 0.9, WindowEnd: end - int64(15*time.Second), Window: 5 * time.Minute})
	c.Set(RecordedSample{Record: "braid_llm_response_sensitivity", Labels: map[string]string{"model": "llama", "tenant": "acme", "quantile": "0.99"},
		Value: math.NaN(), WindowEnd: end + int64(15*time.Second), Window: 5 * time.Minute})
	got := series(gatherRecorded(t, c)["braid_llm_response_sensitivity"])
	if len(got) != 1 || got["model=llama,quantile=0.5,tenant=acme"] != 0.25 {
		t.Errorf("after an older value and a NaN: %v", got)
	}
}

// TestRecordedEviction: at most MaxSeries series per record; a new one
// evicts the least recently updated, counted; other records are not
// touched.
func TestRecordedEviction(t *testing.T) {
	c := NewRecordedCollector(RecordedConfig{MaxSeries: 3})
	set := func(rec, tenant string, v float64, s int) {
		c.Set(RecordedSample{Record: rec, Labels: map[string]string{"tenant": tenant}, Value: v,
			WindowEnd: recT0 + int64(s)*int64(time.Second), Window: time.Minute})
	}
	set("a", "t1", 1, 15)
	set("a", "t2", 2, 15)
	set("a", "t3", 3, 15)
	set("b", "t1", 10, 15)
	set("a", "t1", 1.5, 30) // t1 is now the most recent; t2 the least
	set("a", "t4", 4, 30)   // evicts t2
	set("a", "t5", 5, 30)   // evicts t3
	fams := gatherRecorded(t, c)
	if got, want := fmt.Sprint(series(fams["a"])), fmt.Sprint(map[string]float64{"tenant=t1": 1.5, "tenant=t4": 4, "tenant=t5": 5}); got != want {
		t.Errorf("record a: %s, want %s", got, want)
	}
	if got := series(fams["b"]); len(got) != 1 || got["tenant=t1"] != 10 {
		t.Errorf("record b: %v", got)
	}
	ev := series(fams["braid_recorded_series_evicted_total"])
	if ev["record=a"] != 2 || ev["record=b"] != 0 {
		t.Errorf("evictions %v, want a 2, b 0", ev)
	}
	ends := series(fams["braid_recorded_window_end_timestamp_seconds"])
	if len(ends) != 4 || ends["record=a,tenant=t4"] != float64(recT0/1e9+30) || ends["record=b,tenant=t1"] != float64(recT0/1e9+15) {
		t.Errorf("window ends %v", ends)
	}
}

// TestRecordedStaleness: a series whose window end is more than twice its
// window behind the newest window end of its record is dropped at
// collection; one exactly twice behind is kept.
func TestRecordedStaleness(t *testing.T) {
	c := NewRecordedCollector(RecordedConfig{})
	at := func(s int) int64 { return recT0 + int64(s)*int64(time.Second) }
	c.Set(RecordedSample{Record: "r", Labels: map[string]string{"tenant": "quiet"}, Value: 1, WindowEnd: at(60), Window: time.Minute})
	c.Set(RecordedSample{Record: "r", Labels: map[string]string{"tenant": "edge"}, Value: 2, WindowEnd: at(120), Window: time.Minute})
	c.Set(RecordedSample{Record: "r", Labels: map[string]string{"tenant": "long"}, Value: 3, WindowEnd: at(60), Window: time.Hour})
	c.Set(RecordedSample{Record: "r", Labels: map[string]string{"tenant": "busy"}, Value: 4, WindowEnd: at(240), Window: time.Minute})
	// Another record's progress does not make r's series stale.
	c.Set(RecordedSample{Record: "other", Labels: map[string]string{"tenant": "x"}, Value: 5, WindowEnd: at(3600), Window: time.Minute})
	fams := gatherRecorded(t, c)
	got := series(fams["r"])
	if len(got) != 3 || got["tenant=edge"] != 2 || got["tenant=long"] != 3 || got["tenant=busy"] != 4 {
		t.Errorf("after collection: %v (quiet, 3 min behind a 1 min window, must be gone)", got)
	}
	if _, ok := series(fams["braid_recorded_window_end_timestamp_seconds"])["record=r,tenant=quiet"]; ok {
		t.Error("the stale series' window end is still exported")
	}
	// Dropped for good: it does not come back at the next collection.
	c.Set(RecordedSample{Record: "r", Labels: map[string]string{"tenant": "busy"}, Value: 4, WindowEnd: at(241), Window: time.Minute})
	got = series(gatherRecorded(t, c)["r"])
	if _, ok := got["tenant=edge"]; ok || len(got) != 2 {
		t.Errorf("second collection: %v (edge is now over twice its window behind)", got)
	}
}
