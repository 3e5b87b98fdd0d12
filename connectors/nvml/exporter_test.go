package nvml_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/nvml"
	"github.com/braidlabs/braid/connectors/nvml/fake"
)

// logBuf collects log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func TestInitRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fake.New(1)
		l.FailInit(nvml.ErrLibraryNotFound, nvml.ErrLibraryNotFound, nvml.ErrDriverNotLoaded, nvml.ErrDriverNotLoaded, nvml.ErrDriverNotLoaded)
		var log logBuf
		opts := nvml.Options{Retry: true, RetryInitial: time.Second, RetryMax: 3 * time.Second, Logger: log.logger()}
		opts.EnsureDefaults()
		start := time.Now()
		if err := nvml.Init(t.Context(), l, opts); err != nil {
			t.Fatal(err)
		}
		// Backoffs 1, 2, 3 (capped), 3, 3.
		if d := time.Since(start); d != 12*time.Second {
			t.Errorf("retried for %v, want 12s", d)
		}
		if l.Inits() != 6 {
			t.Errorf("%d Init calls, want 6", l.Inits())
		}
		if n := strings.Count(log.String(), "nvml init failed; retrying"); n != 5 {
			t.Errorf("%d retry log lines, want 5:\n%s", n, log.String())
		}
		if !strings.Contains(log.String(), "attempt=5") || !strings.Contains(log.String(), "backoff=3s") {
			t.Errorf("log lacks attempt/backoff:\n%s", log.String())
		}
	})
}

func TestInitNoRetry(t *testing.T) {
	l := fake.New(1)
	l.FailInit(nvml.ErrLibraryNotFound)
	err := nvml.Run(t.Context(), l, &memSink{}, nvml.Options{})
	if !errors.Is(err, nvml.ErrLibraryNotFound) || l.Inits() != 1 || l.Shutdowns() != 0 {
		t.Errorf("err %v after %d inits, %d shutdowns; want ErrLibraryNotFound after 1, 0", err, l.Inits(), l.Shutdowns())
	}
}

// ErrNoCgo is final even with Retry.
func TestInitNoCgoNotRetried(t *testing.T) {
	l := fake.New(1)
	l.FailInit(nvml.ErrNoCgo)
	err := nvml.Run(t.Context(), l, &memSink{}, nvml.Options{Retry: true})
	if !errors.Is(err, nvml.ErrNoCgo) || l.Inits() != 1 {
		t.Errorf("err %v after %d inits", err, l.Inits())
	}
}

func TestInitRetryCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fake.New(1)
		for range 100 {
			l.FailInit(nvml.ErrLibraryNotFound)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := nvml.Run(ctx, l, &memSink{}, nvml.Options{Retry: true})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "library not found") {
			t.Errorf("got %v", err)
		}
	})
}

func TestOptionsValidate(t *testing.T) {
	o := nvml.Options{Interval: -1, RetryInitial: time.Minute, RetryMax: time.Second}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "interval") || !strings.Contains(err.Error(), "max backoff") {
		t.Errorf("got %v", err)
	}
}

// Run samples at once and then every interval, sends an Xid at once,
// carries it in the following rounds, and shuts NVML down at the end.
func TestRunFake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fake.New(2)
		busy(l)
		sink := &memSink{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- nvml.Run(ctx, l, sink, nvml.Options{Interval: 10 * time.Second, Host: "h"}) }()
		synctest.Wait()
		if n := len(sink.snapshot()); n != 1 {
			t.Fatalf("%d exports at start, want 1", n)
		}
		time.Sleep(15 * time.Second)
		l.InjectXid("GPU-fake-0001", 43)
		synctest.Wait()
		got := sink.snapshot()
		if len(got) != 3 {
			t.Fatalf("%d exports at 15s after an xid, want 3 (rounds at 0s and 10s, then the xid)", len(got))
		}
		xid := split(t, got[2])
		if len(xid) != 1 || xid[0].resource["gpu.uuid"] != "GPU-fake-0001" || xid[0].points[nvml.MetricXidErrors].GetAsDouble() != 43 {
			t.Fatalf("xid export: %v", got[2])
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got = sink.snapshot()
		if len(got) != 4 {
			t.Fatalf("%d exports at 20s, want 4", len(got))
		}
		round := split(t, got[3])
		if round[0].points[nvml.MetricXidErrors].GetAsDouble() != 0 || round[1].points[nvml.MetricXidErrors].GetAsDouble() != 43 {
			t.Errorf("last xid not carried: %v", got[3])
		}
		if ts := round[0].points[nvml.MetricFBUsed].GetTimeUnixNano(); ts != uint64(start.Add(20*time.Second).UnixNano()) {
			t.Errorf("round at %d, want start+20s", ts)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if l.Shutdowns() != 1 {
			t.Errorf("%d shutdowns", l.Shutdowns())
		}
	})
}

// A failing sink drops the round; Run goes on. Without Xid support Run goes
// on too.
func TestRunSinkFailsNoXid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fake.New(1)
		l.FailWatch(nvml.ErrNotSupported)
		sink := &memSink{err: errors.New("broker down")}
		var log logBuf
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- nvml.Run(ctx, l, sink, nvml.Options{Interval: time.Second, Host: "h", Logger: log.logger()})
		}()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		sink.mu.Lock()
		sink.err = nil
		sink.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := len(sink.snapshot()); n != 1 {
			t.Errorf("%d exports, want 1", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"export failed; dropped", "broker down", "xid events unavailable"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, log.String())
			}
		}
	})
}

func TestRunNoGPUs(t *testing.T) {
	if err := nvml.Run(t.Context(), fake.New(0), &memSink{}, nvml.Options{}); err == nil || !strings.Contains(err.Error(), "no GPUs") {
		t.Errorf("got %v", err)
	}
}

func TestHTTPSink(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []*metricspb.MetricsData
		fail bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			http.Error(w, "quota exceeded", http.StatusTooManyRequests)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		md := &metricspb.MetricsData{}
		if err := proto.Unmarshal(b, md); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, md)
	}))
	defer srv.Close()
	sink := nvml.NewHTTPSink(srv.URL, srv.Client())
	if sink.URL() != srv.URL+"/v1/metrics" {
		t.Errorf("url %s", sink.URL())
	}
	if nvml.NewHTTPSink("http://c:4318/custom/path", nil).URL() != "http://c:4318/custom/path" {
		t.Error("explicit path replaced")
	}
	l := fake.New(2)
	devs, _ := l.Devices()
	s, _ := nvml.NewSampler(devs, "h", time.Now(), nil)
	md := s.Sample(time.Now())
	if err := sink.Export(t.Context(), md); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 || !proto.Equal(got[0], md) {
		t.Errorf("received %v", got)
	}
	fail = true
	mu.Unlock()
	if err := sink.Export(t.Context(), md); err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "quota exceeded") {
		t.Errorf("got %v", err)
	}
}

// OTLP/JSON as the Collector writes it: lowerCamelCase keys, enums as
// integers, 64-bit integers as strings.
func TestEncodingJSON(t *testing.T) {
	l := fake.New(1)
	busy(l)
	devs, _ := l.Devices()
	s, _ := nvml.NewSampler(devs, "h", time.Unix(1_800_000_000, 0), nil)
	md := s.Sample(time.Unix(1_800_000_010, 0))
	b, err := nvml.EncodingJSON.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{`"resourceMetrics"`, `"aggregationTemporality":2`, `"isMonotonic":true`, `"timeUnixNano":"1800000010000000000"`, `"gpu.index"`, `"intValue":"0"`} {
		if !strings.Contains(strings.ReplaceAll(js, " ", ""), want) {
			t.Errorf("json lacks %s:\n%.400s", want, js)
		}
	}
	back := &metricspb.MetricsData{}
	if err := protojson.Unmarshal(b, back); err != nil || !proto.Equal(back, md) {
		t.Errorf("json round trip: %v", err)
	}
	if _, err := nvml.ParseEncoding("otlp_avro"); err == nil {
		t.Error("otlp_avro accepted")
	}
}
