package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/nvml"
	"github.com/braidlabs/braid/connectors/nvml/fake"
)

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestGPUExporterFlags(t *testing.T) {
	t.Setenv("BRAID_KAFKA_BROKERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no output"},
		{[]string{"--otlp-endpoint", "http://c:4318", "--brokers", "k:9092"}, "exclusive"},
		{[]string{"--brokers", "k:9092", "--encoding", "otlp_avro"}, "otlp_avro"},
		{[]string{"--brokers", "k9092"}, "not host:port"},
		{[]string{"--brokers", "k:9092", "--interval", "0s"}, "interval"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		l := fake.New(1)
		err := gpuExporter(t.Context(), tc.args, l, quietLog())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// With the host's NVML: without cgo the command fails with the no-cgo
// message; with cgo on a host without a driver, it fails naming the
// missing library and --retry; on a GPU host it samples and posts.
func TestGPUExporterHostNVML(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	posted := make(chan *metricspb.MetricsData, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		md := &metricspb.MetricsData{}
		if proto.Unmarshal(b, md) == nil {
			select {
			case posted <- md:
			default:
			}
		}
	}))
	defer srv.Close()
	done := make(chan error, 1)
	go func() { done <- gpuExporter(ctx, []string{"--otlp-endpoint", srv.URL}, nvml.Open(), quietLog()) }()
	select {
	case err := <-done:
		switch {
		case errors.Is(err, nvml.ErrNoCgo):
			if !strings.Contains(err.Error(), "built without cgo: NVML unavailable; rebuild with CGO_ENABLED=1") {
				t.Errorf("message: %v", err)
			}
		case errors.Is(err, nvml.ErrLibraryNotFound), errors.Is(err, nvml.ErrDriverNotLoaded):
			if !strings.Contains(err.Error(), "--retry") {
				t.Errorf("message lacks the --retry hint: %v", err)
			}
		default:
			t.Fatalf("got %v", err)
		}
		t.Logf("no GPU here: %v", err)
	case md := <-posted:
		if len(md.GetResourceMetrics()) == 0 {
			t.Error("posted no GPU")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// The command on fake GPUs writes to the real broker.
func TestGPUExporterKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopics(t, brokers, 1, "otlp_metrics")[0]
	l := fake.New(2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- gpuExporter(ctx, []string{"--brokers", strings.Join(brokers, ","), "--topic", topic, "--interval", "1h", "--host", "node-c"}, l, quietLog())
	}()
	rd := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pctx, pcancel := context.WithTimeout(t.Context(), kafkatest.Timeout)
	defer pcancel()
	var recs []*kgo.Record
	for len(recs) == 0 && pctx.Err() == nil {
		recs = append(recs, rd.PollFetches(pctx).Records()...)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatalf("no record on %s within %v", topic, kafkatest.Timeout)
	}
	md := &metricspb.MetricsData{}
	if err := proto.Unmarshal(recs[0].Value, md); err != nil {
		t.Fatal(err)
	}
	if recs[0].Key != nil || len(md.GetResourceMetrics()) != 2 {
		t.Fatalf("key %q, %d resources", recs[0].Key, len(md.GetResourceMetrics()))
	}
	found := false
	for _, kv := range md.GetResourceMetrics()[1].GetResource().GetAttributes() {
		if kv.GetKey() == "host.name" && kv.GetValue().GetStringValue() == "node-c" {
			found = true
		}
	}
	if !found {
		t.Errorf("resource %v lacks host.name node-c", md.GetResourceMetrics()[1].GetResource())
	}
	if name := md.GetResourceMetrics()[0].GetScopeMetrics()[0].GetMetrics()[0].GetName(); name != nvml.MetricFBTotal {
		t.Errorf("first metric %s", name)
	}
}
