package admin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/braidlabs/braid/engine"
)

// fakeEngine is an EngineView whose tasks the test sets.
type fakeEngine struct {
	stats engine.Stats
	mu    sync.Mutex
	tasks []engine.TaskStat
}

func (f *fakeEngine) Stats() *engine.Stats { return &f.stats }

func (f *fakeEngine) Tasks() []engine.TaskStat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.TaskStat(nil), f.tasks...)
}

func (f *fakeEngine) setTasks(ts ...engine.TaskStat) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tasks = ts
}

// fakeLag is a LagView with fixed figures.
type fakeLag struct {
	lags []PartitionLag
	at   time.Time
}

func (f fakeLag) Lags() ([]PartitionLag, time.Time) { return f.lags, f.at }

// fixture is a server over fake views, exercised through httptest.
type fixture struct {
	eng      *fakeEngine
	cps      *Checkpoints
	counters Counters
	srv      *Server
}

var testNow = time.Unix(1_000, 0)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{eng: &fakeEngine{}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cps, err := NewCheckpoints(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.cps = cps
	col, err := NewCollector(CollectorConfig{
		Engine:   f.eng,
		Counters: func() Counters { return f.counters },
		Lag: fakeLag{at: time.Unix(990, 0), lags: []PartitionLag{
			{Topic: "otlp_spans", Partition: 0, Records: 0},
			{Topic: "otlp_spans", Partition: 1, Records: 12},
		}},
		Now: func() time.Time { return testNow },
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(col)
	srv, err := New(Config{Addr: "127.0.0.1:0", Gatherer: reg, Ready: Readiness(f.eng, cps)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	f.srv = srv
	return f
}

// get serves one GET through the server's handler.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.srv.srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestReadiness(t *testing.T) {
	f := newFixture(t)
	expect := func(step string, wantCode int, wantBody string) {
		t.Helper()
		code, body := f.get(t, "/healthz")
		if code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: /healthz = %d %q, want 200 ok", step, code, body)
		}
		code, body = f.get(t, "/readyz")
		if code != wantCode || !strings.Contains(body, wantBody) {
			t.Errorf("%s: /readyz = %d %q, want %d containing %q", step, code, body, wantCode, wantBody)
		}
	}
	expect("start", http.StatusServiceUnavailable, "no input partitions assigned")

	f.eng.setTasks(engine.TaskStat{Partition: 0, Watermark: math.MinInt64})
	expect("assigned", http.StatusServiceUnavailable, "no checkpoint committed yet")

	f.eng.stats.Checkpoints.Add(1)
	f.cps.Observe(engine.CheckpointInfo{Pause: time.Millisecond, Commit: time.Millisecond, Committed: true, Tasks: 1})
	expect("committed", http.StatusOK, "ok")

	f.eng.stats.Aborts.Add(1)
	f.cps.Observe(engine.CheckpointInfo{Pause: time.Millisecond, Commit: time.Millisecond, Committed: false, Tasks: 1})
	expect("aborted", http.StatusServiceUnavailable, "the last checkpoint aborted")

	f.eng.stats.Checkpoints.Add(1)
	f.cps.Observe(engine.CheckpointInfo{Pause: time.Millisecond, Commit: time.Millisecond, Committed: true, Tasks: 1})
	expect("committed again", http.StatusOK, "ok")

	f.eng.setTasks() // revoked in a rebalance
	expect("revoked", http.StatusServiceUnavailable, "no input partitions assigned")

	code, _ := f.get(t, "/nope")
	if code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}
}

// parseText reads Prometheus text format into series → value.
func parseText(t *testing.T, body string) map[string]string {
	t.Helper()
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad line %q", line)
		}
		m[line[:i]] = line[i+1:]
	}
	return m
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.counters = Counters{
		Messages: 100, Members: 900, Local: 40, Repartitioned: 9, Fused: 7, Revisions: 2, IncidentTags: 6, TagsLate: 1, Late: 5, DLQ: 1,
		UnjoinedLogs: 3, UnjoinedPoints: 4, Truncated: 6, OpenTraces: 11,
	}
	f.eng.stats.RecordsIn.Store(123)
	f.eng.stats.RecordsOut.Store(45)
	f.eng.stats.Checkpoints.Store(3)
	f.eng.stats.Aborts.Store(1)
	f.eng.setTasks(
		engine.TaskStat{Partition: 0, Watermark: 990_000_000_000, StateBytes: 4096},
		engine.TaskStat{Partition: 1, Watermark: math.MinInt64, StateBytes: 0},
	)
	for _, d := range []time.Duration{2 * time.Millisecond, 30 * time.Millisecond, 3 * time.Second} {
		f.cps.Observe(engine.CheckpointInfo{Pause: d, Commit: d / 2, Committed: true, Tasks: 2})
	}

	code, body := f.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d: %s", code, body)
	}
	got := parseText(t, body)
	want := map[string]string{
		`braid_input_messages_total`:                                   "100",
		`braid_members_total`:                                          "900",
		`braid_local_groups_total`:                                     "40",
		`braid_repartitioned_groups_total`:                             "9",
		`braid_fused_records_total`:                                    "7",
		`braid_fused_revisions_total`:                                  "2",
		`braid_incident_tags_total`:                                    "6",
		`braid_incident_tags_late_total`:                               "1",
		`braid_late_members_total`:                                     "5",
		`braid_dlq_messages_total`:                                     "1",
		`braid_unjoined_members_total{signal="logs"}`:                  "3",
		`braid_unjoined_members_total{signal="metrics"}`:               "4",
		`braid_truncated_members_total`:                                "6",
		`braid_open_traces`:                                            "11",
		`braid_timers_pending`:                                         "11",
		`braid_engine_records_in_total`:                                "123",
		`braid_engine_records_out_total`:                               "45",
		`braid_checkpoints_total{outcome="committed"}`:                 "3",
		`braid_checkpoints_total{outcome="aborted"}`:                   "1",
		`braid_tasks`:                                                  "2",
		`braid_state_bytes{partition="0"}`:                             "4096",
		`braid_state_bytes{partition="1"}`:                             "0",
		`braid_watermark_unix_seconds{partition="0"}`:                  "990",
		`braid_watermark_lag_seconds{partition="0"}`:                   "10",
		`braid_consumer_lag_records{partition="0",topic="otlp_spans"}`: "0",
		`braid_consumer_lag_records{partition="1",topic="otlp_spans"}`: "12",
		`braid_consumer_lag_refreshed_unix_seconds`:                    "990",
		`braid_checkpoint_pause_seconds_count`:                         "3",
		`braid_checkpoint_pause_seconds_bucket{le="0.0025"}`:           "1",
		`braid_checkpoint_pause_seconds_bucket{le="0.05"}`:             "2",
		`braid_checkpoint_pause_seconds_bucket{le="10"}`:               "3",
		`braid_checkpoint_commit_seconds_count`:                        "3",
		`braid_checkpoint_commit_seconds_bucket{le="0.001"}`:           "1",
		`braid_checkpoint_commit_seconds_bucket{le="1"}`:               "2",
		`braid_checkpoint_commit_seconds_bucket{le="2.5"}`:             "3",
	}
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %q, want %q", series, got[series], v)
		}
	}
	for _, absent := range []string{`braid_watermark_unix_seconds{partition="1"}`, `braid_watermark_lag_seconds{partition="1"}`} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s exported for an unknown watermark", absent)
		}
	}
	for _, std := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := got[std]; !ok {
			t.Errorf("standard metric %s missing", std)
		}
	}
	for _, help := range []string{"# HELP braid_watermark_lag_seconds Seconds", "# TYPE braid_fused_records_total counter", "# TYPE braid_checkpoint_pause_seconds histogram"} {
		if !strings.Contains(body, help) {
			t.Errorf("metrics lack %q", help)
		}
	}
}

// TestCollectorOptionalViews: without counters or lag only the engine's
// metrics are exported.
func TestCollectorOptionalViews(t *testing.T) {
	eng := &fakeEngine{}
	col, err := NewCollector(CollectorConfig{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if want := "braid_backpressure_total braid_checkpoints_total braid_clamped_event_times_total braid_early_checkpoints_total braid_engine_records_in_total braid_engine_records_out_total braid_followup_checkpoints_total braid_pending_state_peak_bytes braid_requested_checkpoints_total braid_tasks"; strings.Join(names, " ") != want {
		t.Errorf("gathered %v, want %s", names, want)
	}
	if _, err := NewCollector(CollectorConfig{}); err == nil || !strings.Contains(err.Error(), "CollectorConfig.Engine") {
		t.Errorf("NewCollector without engine: %v", err)
	}
}

func TestServerRunAndClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, err := New(Config{Addr: "127.0.0.1:0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	url := "http://" + srv.Addr().String()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("/readyz with the default check = %d %q", resp.StatusCode, b)
	}

	// The address is taken while the server runs.
	if _, err := New(Config{Addr: srv.Addr().String(), Gatherer: reg}); err == nil || !strings.Contains(err.Error(), "admin: listen") {
		t.Errorf("second server on %s: %v", srv.Addr(), err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close after Run: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("server still answers after Run returned")
	}
}

func TestServerCloseBeforeRun(t *testing.T) {
	srv, err := New(Config{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Run(context.Background()); err != nil {
		t.Errorf("Run after Close: %v", err)
	}
	// The port is free again.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("port not released by Close: %v", err)
	} else {
		ln.Close()
	}
}

func TestConfigValidate(t *testing.T) {
	_, err := New(Config{Addr: "localhost", ShutdownTimeout: -1})
	for _, want := range []string{"Config.Addr", "Config.Gatherer", "Config.ShutdownTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v, want it to name %s", err, want)
		}
	}
	_, err = NewLagMonitor(LagConfig{Interval: -1})
	for _, want := range []string{"LagConfig.Admin", "LagConfig.Group", "LagConfig.Topics", "LagConfig.Interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewLagMonitor: %v, want it to name %s", err, want)
		}
	}
	if _, err := NewCheckpoints(nil); err == nil {
		t.Error("NewCheckpoints(nil) succeeded")
	}
	if !errors.Is(Readiness(&fakeEngine{}, nil)(), ErrNoAssignment) {
		t.Error("Readiness of an engine without tasks is not ErrNoAssignment")
	}
}

// TestCollectorExportsBudgetShares: memory, evictions and drops are
// exported per share and reason.
func TestCollectorExportsBudgetShares(t *testing.T) {
	col, err := NewCollector(CollectorConfig{Engine: &fakeEngine{}, Counters: func() Counters {
		return Counters{MemoryBytes: map[string]int64{"open_traces": 4096, "kv_state": 10},
			Evictions: map[string]int64{"waiting_logs": 3}, Dropped: map[string]int64{"skip policy": 2}, Future: 5}
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"braid_memory_bytes{open_traces}": 4096, "braid_memory_bytes{kv_state}": 10,
		"braid_evictions_total{waiting_logs}": 3, "braid_dropped_total{skip policy}": 2, "braid_future_members_total": 5,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}

// TestPprof: the runtime's profiles are served under /debug/pprof/ (a heap
// profile in the pprof format, the index in text).
func TestPprof(t *testing.T) {
	f := newFixture(t)
	code, body := f.get(t, "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("/debug/pprof/ = %d, body without a heap profile link:\n%.300s", code, body)
	}
	code, body = f.get(t, "/debug/pprof/heap?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("/debug/pprof/heap?debug=1 = %d %.200q, want a heap profile", code, body)
	}
	code, body = f.get(t, "/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine?debug=1 = %d %.200q, want a goroutine profile", code, body)
	}
}
