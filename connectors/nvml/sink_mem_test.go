package nvml_test

import (
	"context"
	"sync"
	"testing"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// memSink keeps what it receives; wait polls for it.
type memSink struct {
	mu  sync.Mutex
	got []*metricspb.MetricsData
	err error // returned by Export when set
}

func (s *memSink) Export(_ context.Context, md *metricspb.MetricsData) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.got = append(s.got, proto.Clone(md).(*metricspb.MetricsData))
	return nil
}

func (s *memSink) snapshot() []*metricspb.MetricsData {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*metricspb.MetricsData(nil), s.got...)
}

// wait returns the first n exports, failing after 10s.
func (s *memSink) wait(t *testing.T, n int) []*metricspb.MetricsData {
	t.Helper()
	return s.waitFor(t, func(got []*metricspb.MetricsData) bool { return len(got) >= n })
}

func (s *memSink) waitFor(t *testing.T, cond func([]*metricspb.MetricsData) bool) []*metricspb.MetricsData {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.snapshot()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d exports, condition not met", len(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
