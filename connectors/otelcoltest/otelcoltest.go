package otelcoltest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
)

// Options says what the Collector reads.
type Options struct {
	// Brokers are the bootstrap brokers. Default: [kafkatest.Brokers], which
	// skips the test (fails it in CI) without BRAID_KAFKA_BROKERS.
	Brokers []string
	// TracesTopic is the topic of OTLP protobuf TracesData records; empty: no
	// traces pipeline. At least one of TracesTopic and LogsTopic is needed.
	TracesTopic string
	// LogsTopic is the topic of OTLP protobuf LogsData records; empty: no
	// logs pipeline.
	LogsTopic string
	// Group is the Collector's consumer group. Default: otelcoltest-<random>.
	Group string
}

// Collector is a running Collector of the test's own, stopped when the test
// ends.
type Collector struct {
	// Dir is its directory: otelcol.yaml (the config), otelcol.log,
	// traces.json and logs.json (the file exporters' output).
	Dir    string
	script string
	env    []string
}

// Script returns the path of deploy/local/otelcol.sh, found from the
// working directory up to the module root.
func Script(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "deploy", "local", "otelcol.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("otelcoltest: no go.mod above the working directory: cannot find deploy/local/otelcol.sh")
		}
		dir = parent
	}
}

// unavailable ends a test that lacks a tool: it fails in CI (CI set), so
// that CI never passes by skipping, and is skipped elsewhere.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "otelcoltest: " + fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Build builds the Collector with deploy/local/otelcol.sh (once: later
// calls find it in the cache) and returns the binary's path. When it
// cannot be built the test fails in CI and is skipped elsewhere, with the
// tail of the build log.
func Build(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		unavailable(t, "bash not found: deploy/local/otelcol.sh needs it")
	}
	script := Script(t)
	t0 := time.Now()
	var stdout, stderr bytes.Buffer
	c := exec.Command("bash", script, "build")
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		unavailable(t, "cannot build the OpenTelemetry Collector (%s build: %v):\n%s", script, err, tail(stderr.String(), 40))
	}
	if d := time.Since(t0); d > time.Second {
		t.Logf("otelcoltest: built the Collector in %v", d.Round(100*time.Millisecond))
	}
	return strings.TrimSpace(stdout.String())
}

// Start builds the Collector if needed and starts one of the test's own
// with a directory of the test's own, reading o's topics. It returns once
// the Collector says it is ready (its Kafka consumers started: joining the
// group and fetching come after; wait for output with [WaitFor]) and stops
// it when the test ends, logging the tail of its log if the test failed.
func Start(t testing.TB, o Options) *Collector {
	t.Helper()
	if o.TracesTopic == "" && o.LogsTopic == "" {
		t.Fatal("otelcoltest: Options has neither TracesTopic nor LogsTopic")
	}
	brokers := o.Brokers
	if len(brokers) == 0 {
		brokers = kafkatest.Brokers(t)
	}
	if o.Group == "" {
		o.Group = "otelcoltest-" + randomSuffix()
	}
	Build(t)
	c := &Collector{Dir: filepath.Join(t.TempDir(), "otelcol"), script: Script(t)}
	c.env = append(os.Environ(),
		"BRAID_OTELCOL_DIR="+c.Dir,
		"BRAID_OTELCOL_BROKERS="+strings.Join(brokers, ","),
		"BRAID_OTELCOL_TRACES_TOPIC="+o.TracesTopic,
		"BRAID_OTELCOL_LOGS_TOPIC="+o.LogsTopic,
		"BRAID_OTELCOL_GROUP="+o.Group,
		"BRAID_OTELCOL_METRICS_PORT=0")
	if _, err := c.run("start"); err != nil {
		t.Fatalf("otelcoltest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("otelcoltest: the Collector's log (%s):\n%s", filepath.Join(c.Dir, "otelcol.log"), tail(c.Log(t), 40))
		}
		t0 := time.Now()
		if _, err := c.run("stop"); err != nil {
			t.Errorf("otelcoltest: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Logf("otelcoltest: stopping the Collector took %v", d.Round(100*time.Millisecond))
		}
	})
	return c
}

// run runs otelcol.sh cmd with the Collector's settings and returns its
// standard output.
func (c *Collector) run(cmd string) (string, error) {
	x := exec.Command("bash", c.script, cmd)
	x.Env = c.env
	var stdout, stderr bytes.Buffer
	x.Stdout, x.Stderr = &stdout, &stderr
	if err := x.Run(); err != nil {
		return stdout.String(), fmt.Errorf("otelcol.sh %s: %w\n%s%s", cmd, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Running reports whether the Collector still runs (otelcol.sh status).
func (c *Collector) Running() bool {
	_, err := c.run("status")
	return err == nil
}

// Log returns the Collector's own log so far.
func (c *Collector) Log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "otelcol.log"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("otelcoltest: %v", err)
	}
	return string(b)
}

// Traces returns what the traces pipeline has written so far: one
// TracesData per Kafka record it read, in the order written. A line the
// exporter is still writing is left for a later call.
func (c *Collector) Traces(t testing.TB) []*tracepb.TracesData {
	t.Helper()
	return readLines(t, filepath.Join(c.Dir, "traces.json"), func() *tracepb.TracesData { return new(tracepb.TracesData) })
}

// Logs returns what the logs pipeline has written so far: one LogsData per
// Kafka record it read, in the order written.
func (c *Collector) Logs(t testing.TB) []*logspb.LogsData {
	t.Helper()
	return readLines(t, filepath.Join(c.Dir, "logs.json"), func() *logspb.LogsData { return new(logspb.LogsData) })
}

// readLines decodes each complete line of the file exporter's output at
// path (nothing when there is no file yet).
func readLines[M proto.Message](t testing.TB, path string, newMsg func() M) []M {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("otelcoltest: %v", err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	var out []M
	for n, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		m := newMsg()
		if err := DecodeJSON(line, m); err != nil {
			t.Fatalf("otelcoltest: %s line %d: %v", path, n+1, err)
		}
		out = append(out, m)
	}
	return out
}

// DecodeJSON decodes one OTLP JSON message (an export request, or the
// TracesData, LogsData or MetricsData of the same shape) into m. OTLP JSON
// differs from protojson in one point: trace and span ids are hex, not
// base64; they are rewritten before protojson decodes the rest. Unknown
// fields are errors.
func DecodeJSON(b []byte, m proto.Message) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("otelcoltest: decode OTLP JSON: %w", err)
	}
	if err := hexIDsToBase64(v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("otelcoltest: decode OTLP JSON: %w", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("otelcoltest: decode OTLP JSON into %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// idFields are the OTLP JSON fields that hold hex ids.
var idFields = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true,
	"trace_id": true, "span_id": true, "parent_span_id": true}

// hexIDsToBase64 rewrites, in place, every id field of a decoded JSON
// value from hex to base64.
func hexIDsToBase64(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && idFields[k] {
				id, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("otelcoltest: %s %q is not hex: %w", k, s, err)
				}
				v[k] = base64.StdEncoding.EncodeToString(id)
				continue
			}
			if err := hexIDsToBase64(x); err != nil {
				return err
			}
		}
	case []any:
		for _, x := range v {
			if err := hexIDsToBase64(x); err != nil {
				return err
			}
		}
	}
	return nil
}

// WaitFor polls cond every 50 ms until it holds and fails the test if it
// does not within timeout.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("otelcoltest: condition not met within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func randomSuffix() string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
