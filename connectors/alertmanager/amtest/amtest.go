// Package amtest runs a real Prometheus Alertmanager for tests
// (deploy/local/alertmanager.sh, on a free port, with a data directory of
// the test's own) and receives its webhook notifications.
package amtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Unavailable ends a test that lacks a tool: it fails in CI (CI set), so
// that CI never passes by skipping, and is skipped elsewhere.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Binary returns the Alertmanager binary that deploy/local/alertmanager.sh
// would run.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("BRAID_ALERTMANAGER_BIN"); b != "" {
		return b
	}
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Unavailable(t, "no Alertmanager binary (prometheus-alertmanager or alertmanager on PATH, or BRAID_ALERTMANAGER_BIN): "+
		"this test runs a real one with deploy/local/alertmanager.sh (Debian: apt-get install prometheus-alertmanager)")
	return ""
}

// Script returns the path of deploy/local/<name>, found from the working
// directory up to the module root.
func Script(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "deploy", "local", name)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory: cannot find deploy/local/%s", name)
		}
		dir = parent
	}
}

// Start starts an Alertmanager of the test's own with
// deploy/local/alertmanager.sh, on a free port, notifying webhook; it
// returns its URL and stops it when the test ends.
func Start(t testing.TB, webhook string) string {
	t.Helper()
	bin := Binary(t)
	if _, err := exec.LookPath("bash"); err != nil {
		Unavailable(t, "bash not found: deploy/local/alertmanager.sh needs it")
	}
	script := Script(t, "alertmanager.sh")
	dir := filepath.Join(t.TempDir(), "alertmanager")
	run := func(port int, cmd string) (string, error) {
		c := exec.Command("bash", script, cmd)
		c.Env = append(os.Environ(),
			fmt.Sprintf("BRAID_ALERTMANAGER_PORT=%d", port),
			"BRAID_ALERTMANAGER_DIR="+dir,
			"BRAID_ALERTMANAGER_WEBHOOK="+webhook,
			"BRAID_ALERTMANAGER_BIN="+bin)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if err != nil {
			return "", fmt.Errorf("alertmanager.sh %s: %w\n%s", cmd, err, stderr.String())
		}
		t.Logf("alertmanager.sh %s: %s", cmd, strings.TrimSpace(stderr.String()))
		return strings.TrimSpace(stdout.String()), nil
	}
	var u string
	port := onFreePort(t, func(port int) (err error) {
		u, err = run(port, "start")
		return err
	}, func(err error) bool { return strings.Contains(err.Error(), "is taken") })
	t.Cleanup(func() {
		if _, err := run(port, "stop"); err != nil {
			t.Errorf("stop the Alertmanager: %v", err)
		}
	})
	return u
}

// onFreePort calls start with a free port until it succeeds and returns
// that port. A free port may be taken between the check and the server
// binding it: an error retry accepts is tried again, on another port, up
// to three times in all; any other fails the test.
func onFreePort(t testing.TB, start func(port int) error, retry func(error) bool) int {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := FreePort(t)
		err := start(port)
		if err == nil {
			return port
		}
		if attempt == 3 || !retry(err) {
			t.Fatal(err)
		}
		t.Logf("port %d: %v; trying another port", port, err)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Alert is an alert of Alertmanager's webhook payload.
type Alert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Fingerprint string            `json:"fingerprint"`
	// Arrived is when the notification came.
	Arrived time.Time `json:"-"`
}

// Webhook is a receiver of Alertmanager notifications at URL()+"/hook".
type Webhook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []Alert // every alert of every notification, in arrival order
}

// NewWebhook starts a receiver, closed when the test ends.
func NewWebhook(t testing.TB) *Webhook {
	w := &Webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var msg struct {
			Version string  `json:"version"`
			Status  string  `json:"status"`
			Alerts  []Alert `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || r.URL.Path != "/hook" {
			t.Errorf("webhook got %s %s: %v", r.Method, r.URL.Path, err)
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		now := time.Now()
		for i := range msg.Alerts {
			msg.Alerts[i].Arrived = now
		}
		w.mu.Lock()
		w.got = append(w.got, msg.Alerts...)
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// URL is the receiver's base URL; Alertmanager posts to URL()+"/hook".
func (w *Webhook) URL() string { return w.srv.URL }

// Notified returns the notifications of alertname with status ("firing",
// "resolved"); alertname "" matches any.
func (w *Webhook) Notified(alertname, status string) []Alert {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Alert
	for _, a := range w.got {
		if (alertname == "" || a.Labels["alertname"] == alertname) && a.Status == status {
			out = append(out, a)
		}
	}
	return out
}

// StartPrometheus starts a real Prometheus of the test's own with
// deploy/local/prometheus.sh (exemplar storage on, scraping targets —
// host:port of /metrics — every second) on a free port and returns its
// URL; it stops when the test ends.
func StartPrometheus(t testing.TB, targets ...string) string {
	t.Helper()
	if _, err := exec.LookPath("prometheus"); err != nil {
		Unavailable(t, "prometheus not found (Debian: apt-get install -y prometheus): this test runs a real one with deploy/local/prometheus.sh")
	}
	script := Script(t, "prometheus.sh")
	dir := filepath.Join(t.TempDir(), "prometheus")
	sh := func(port int, arg string) (string, error) {
		cmd := exec.Command("bash", script, arg)
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("BRAID_PROMETHEUS_PORT=%d", port),
			"BRAID_PROMETHEUS_DIR="+dir,
			"BRAID_PROMETHEUS_TARGETS="+strings.Join(targets, ","))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Prometheus exits at once when its port was taken before it bound it.
	port := onFreePort(t, func(port int) error {
		if out, err := sh(port, "start"); err != nil {
			return fmt.Errorf("prometheus.sh start: %w\n%s", err, out)
		}
		return nil
	}, func(err error) bool {
		return strings.Contains(err.Error(), "exited") || strings.Contains(err.Error(), "is taken")
	})
	t.Cleanup(func() {
		if out, err := sh(port, "stop"); err != nil {
			t.Errorf("prometheus.sh stop: %v\n%s", err, out)
		}
	})
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// PromAPI gets path (e.g. /api/v1/query) with query q from the Prometheus
// at base and decodes its JSON answer into v.
func PromAPI(base, path string, q url.Values, v any) error {
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}
