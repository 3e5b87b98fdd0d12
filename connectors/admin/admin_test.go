package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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
	eng *fakeEngine
	cps *Checkpoints
	fig figures
	srv *Server
}

// figures are a stage's counters, exported through testTable.
type figures struct {
	messages, fused, logs, points, open, shiftNanos atomic.Int64
}

// testTable is a stage's table of figures over f.
func testTable(f *figures) Table {
	return Table{
		{Name: "braid_input_messages_total", Help: "Messages read.", Log: "messages", Value: f.messages.Load},
		{Name: "braid_fused_records_total", Help: "Fused records.", Log: "fused", Value: f.fused.Load},
		{Name: "braid_unjoined_members_total", Help: "Members without a trace.", Label: "signal", LabelValue: "logs", Value: f.logs.Load},
		{Name: "braid_unjoined_members_total", Label: "signal", LabelValue: "metrics", Value: f.points.Load},
		{Name: "braid_open_traces", Help: "Traces open.", Gauge: true, Log: "open_traces", Value: f.open.Load},
		{Name: "braid_shift_max_seconds", Help: "Kept in ns.", Gauge: true, Scale: 1e-9, Value: f.shiftNanos.Load},
	}
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
		Engine:  f.eng,
		Metrics: append(testTable(&f.fig), EngineMetrics(f.eng)...),
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
	f.fig.messages.Store(100)
	f.fig.fused.Store(7)
	f.fig.logs.Store(3)
	f.fig.points.Store(4)
	f.fig.open.Store(11)
	f.fig.shiftNanos.Store(2_500_000_000)
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
		`braid_input_messages_total`:                     "100",
		`braid_fused_records_total`:                      "7",
		`braid_unjoined_members_total{signal="logs"}`:    "3",
		`braid_unjoined_members_total{signal="metrics"}`: "4",
		`braid_open_traces`:                              "11",
		`braid_shift_max_seconds`:                        "2.5",
		`braid_engine_records_in_total`:                  "123",
		`braid_engine_records_out_total`:                 "45",
		`braid_checkpoints_total{outcome="committed"}`:   "3",
		`braid_checkpoints_total{outcome="aborted"}`:     "1",
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

// TestCollectorOptionalViews: without stage figures or lag only the
// engine's metrics are exported.
func TestCollectorOptionalViews(t *testing.T) {
	eng := &fakeEngine{}
	col, err := NewCollector(CollectorConfig{Engine: eng, Metrics: EngineMetrics(eng)})
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
	if want := "braid_aligned_partitions braid_alignment_pauses_total braid_backpressure_total braid_checkpoints_total braid_clamped_event_times_total braid_early_checkpoints_total braid_engine_records_in_total braid_engine_records_out_total braid_exchange_records_total braid_fetch_bytes braid_followup_checkpoints_total braid_pending_state_peak_bytes braid_requested_checkpoints_total braid_tasks"; strings.Join(names, " ") != want {
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

// TestTable: a table's rows are exported as families with their labels
// and scale, its logged rows make the log and progress lines in table
// order, and a malformed table is refused with every fault named.
func TestTable(t *testing.T) {
	var f figures
	f.messages.Store(12)
	f.fused.Store(3)
	f.logs.Store(1)
	f.open.Store(5)
	tb := testTable(&f)
	if got, want := fmt.Sprint(tb.LogArgs()), "[messages 12 fused 3 open_traces 5]"; got != want {
		t.Errorf("LogArgs = %s, want %s", got, want)
	}
	if got, want := tb.Line(), "messages 12  fused 3  open traces 5"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
	if got, want := strings.Join(tb.Names(), " "), "braid_input_messages_total braid_fused_records_total braid_unjoined_members_total braid_open_traces braid_shift_max_seconds"; got != want {
		t.Errorf("Names = %s, want %s", got, want)
	}

	bad := Table{
		{Name: "braid_a_total", Value: f.fused.Load},                                                      // no help
		{Name: "braid_b", Help: "b", Gauge: true, Value: f.fused.Load},                                    // a gauge…
		{Name: "braid_b", Value: f.fused.Load},                                                            // …and a counter
		{Name: "braid_c_total", Help: "c", Label: "share", LabelValue: "x", Log: "c", Value: f.open.Load}, // …
		{Name: "braid_c_total", Label: "share", LabelValue: "x", Log: "c", Value: f.open.Load},            // twice, log key too
		{Name: "braid_d_total", Help: "d", Label: "share"},                                                // no value for the label, no Value
		{Help: "nothing"}, // neither name nor log key
	}
	err := bad.Validate()
	for _, want := range []string{"braid_a_total has no help", "rows of metric braid_b disagree", "braid_c_total{x} is in the table twice",
		"log key c is in the table twice", "braid_d_total has a label without a value", "(braid_d_total) has no Value", "metric 6 has neither a name nor a log key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to say %q", err, want)
		}
	}
	if _, err := NewCollector(CollectorConfig{Engine: &fakeEngine{}, Metrics: bad}); err == nil {
		t.Error("NewCollector took a malformed table")
	}
	if err := testTable(&f).Validate(); err != nil {
		t.Errorf("Validate of a good table: %v", err)
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
