package job

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/admin"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
)

// TestAdminConfig: LoadConfig defaults admin.addr to loopback, an explicit
// "" disables the server and a bad address is named.
func TestAdminConfig(t *testing.T) {
	load := func(yaml string) (*Config, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "braid.yaml")
		if err := os.WriteFile(path, []byte("kafka: {brokers: [127.0.0.1:9092]}\ninstance_id: i\n"+yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadConfig(path)
	}
	cfg, err := load("")
	if err != nil || cfg.Admin.Addr != admin.DefaultAddr {
		t.Errorf("default admin.addr = %q (%v), want %s", cfg.Admin.Addr, err, admin.DefaultAddr)
	}
	cfg, err = load("admin: {addr: \"\"}\n")
	if err != nil || cfg.Admin.Addr != "" {
		t.Errorf(`admin.addr "" = %q (%v), want disabled`, cfg.Admin.Addr, err)
	}
	cfg, err = load("admin: {addr: \"0.0.0.0:9464\"}\n")
	if err != nil || cfg.Admin.Addr != "0.0.0.0:9464" {
		t.Errorf("admin.addr 0.0.0.0:9464 = %q (%v)", cfg.Admin.Addr, err)
	}
	for _, bad := range []string{"9464", "127.0.0.1:http", "127.0.0.1:70000"} {
		if _, err := load("admin: {addr: \"" + bad + "\"}\n"); err == nil || !strings.Contains(err.Error(), "admin.addr") {
			t.Errorf("admin.addr %q: %v, want an error naming admin.addr", bad, err)
		}
	}
	// A Config built in code has the server off.
	var c Config
	c.EnsureDefaults()
	if c.Admin.Addr != "" {
		t.Errorf("Config{} has admin.addr %q after EnsureDefaults", c.Admin.Addr)
	}
}

// scrape reads /metrics into series → value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func getStatus(base, path string) (int, string, error) {
	resp, err := http.Get(base + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestAdminIntegration runs the job with its admin server on a free port
// against the real broker, produces simulator data and scrapes until the
// job has fused records, its consumer lag is 0 and it is ready.
func TestAdminIntegration(t *testing.T) {
	t.Parallel() // its own job, topics and admin port
	const partitions = 4
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, partitions, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, partitions, "braid.fused", "braid.late", "braid.dlq", "repartition")
	cfg := &Config{}
	cfg.Kafka.Brokers = brokers
	cfg.Group = "it-" + out[3]
	cfg.InstanceID = "0"
	cfg.State.Dir = t.TempDir()
	cfg.Inputs.Spans = InputConfig{Topic: in[0]}
	cfg.Inputs.Logs = InputConfig{Topic: in[1]}
	cfg.Inputs.Metrics = InputConfig{Topic: in[2]}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = out[0], out[1], out[2]
	cfg.CheckpointInterval = time.Second
	cfg.EventTime.OutOfOrderness = time.Second
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EventTime.IdleGap = time.Second
	cfg.EventTime.FlushAfter = 2 * time.Second
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := Prepare(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := j.AdminAddr()
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("admin address %q, want a bound port", addr)
	}
	base := "http://" + addr
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("job: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("job did not stop within 60s")
		}
	}
	defer stop()

	sim, err := simulator.New(simulator.Config{Seed: 11, Topics: simulator.Topics{Spans: in[0], Logs: in[1], Metrics: in[2]},
		RequestsPerBatch: 8, SplitRatio: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []simulator.Message
	for range 10 {
		msgs = append(msgs, sim.Next()...)
	}
	msgs = append(msgs, sim.Flush()...)
	prod := kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := simulator.Produce(pctx, prod, msgs); err != nil {
		t.Fatal(err)
	}
	produced := time.Now()

	// Poll until fused > 0, every source partition's lag is 0 in a refresh
	// after the data was produced (the lag is refreshed every 10s), every
	// task's watermark is known and /readyz is 200.
	deadline := time.Now().Add(90 * time.Second)
	var (
		m       map[string]float64
		ready   int
		readyBy string
	)
	for {
		code, body, err := getStatus(base, "/healthz")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/healthz while running = %d %q (%v)", code, body, err)
		}
		m = scrape(t, base)
		ready, readyBy, _ = getStatus(base, "/readyz")
		lagged, lags, wms := 0, 0, 0
		for series, v := range m {
			if strings.HasPrefix(series, "braid_consumer_lag_records{") {
				lags++
				if v != 0 {
					lagged++
				}
			}
			if strings.HasPrefix(series, "braid_watermark_unix_seconds{") {
				wms++
			}
		}
		if m["braid_fused_records_total"] > 0 && lags == 3*partitions && lagged == 0 &&
			m["braid_consumer_lag_refreshed_unix_seconds"] > float64(produced.UnixNano())/1e9 && wms == partitions && ready == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 90s: fused %v, %d lag series of %d with %d > 0 (refreshed at %v, produced at %v), %d watermarks of %d, /readyz %d %q",
				m["braid_fused_records_total"], lags, 3*partitions, lagged, m["braid_consumer_lag_refreshed_unix_seconds"],
				float64(produced.UnixNano())/1e9, wms, partitions, ready, readyBy)
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not synchronisation
	}

	if got := m["braid_input_messages_total"]; int(got) != len(msgs) {
		t.Errorf("braid_input_messages_total %v, produced %d", got, len(msgs))
	}
	for _, series := range []string{
		`braid_checkpoints_total{outcome="committed"}`, "braid_checkpoint_pause_seconds_count",
		"braid_checkpoint_commit_seconds_count", "braid_members_total", "braid_engine_records_in_total",
		"braid_engine_records_out_total", "go_goroutines",
	} {
		if m[series] <= 0 {
			t.Errorf("%s = %v, want > 0", series, m[series])
		}
	}
	if m["braid_tasks"] != partitions {
		t.Errorf("braid_tasks %v, want %d", m["braid_tasks"], partitions)
	}
	for p := range partitions {
		l := `{partition="` + strconv.Itoa(p) + `"}`
		for _, series := range []string{"braid_watermark_unix_seconds" + l, "braid_watermark_lag_seconds" + l, "braid_state_bytes" + l} {
			if _, ok := m[series]; !ok {
				t.Errorf("%s missing", series)
			}
		}
		if wm := m["braid_watermark_unix_seconds"+l]; wm < float64(simulator.DefaultStart.Unix()) {
			t.Errorf("watermark of partition %d is %v, before the simulated data", p, wm)
		}
		for _, topic := range in {
			if v, ok := m[`braid_consumer_lag_records{partition="`+strconv.Itoa(p)+`",topic="`+topic+`"}`]; !ok || v != 0 {
				t.Errorf("consumer lag of %s/%d = %v (present %v)", topic, p, v, ok)
			}
		}
	}
	if m["braid_open_traces"] != m["braid_timers_pending"] {
		t.Errorf("braid_open_traces %v != braid_timers_pending %v", m["braid_open_traces"], m["braid_timers_pending"])
	}

	// The server stops with the job.
	stop()
	if code, _, err := getStatus(base, "/healthz"); err == nil {
		t.Errorf("/healthz after the job stopped = %d, want no server", code)
	}
}
