package nvml_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/nvml"
	"github.com/braidlabs/braid/connectors/nvml/fake"
)

// readRecords consumes topic from the start until done accepts what was
// read, failing after kafkatest.Timeout.
func readRecords(t *testing.T, brokers []string, topic string, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	var recs []*kgo.Record
	for !done(recs) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after %v: %d records from %s, not all expected", kafkatest.Timeout, len(recs), topic)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// The exporter, on fake GPUs, writes to the real broker's otlp_metrics as
// the Collector would: null keys, one serialized MetricsData per record,
// one ResourceMetrics per GPU; rounds, and an Xid sent at once.
func TestKafkaIntegration(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopics(t, brokers, 3, "otlp_metrics")[0]
	l := fake.New(2)
	busy(l)
	sink := nvml.NewKafkaSink(kafkatest.Client(t, brokers), topic, nvml.EncodingProto)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nvml.Run(ctx, l, sink, nvml.Options{Interval: 200 * time.Millisecond, Host: "node-k"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	decode := func(r *kgo.Record) *metricspb.MetricsData {
		t.Helper()
		if r.Key != nil {
			t.Fatalf("record key %q, want null", r.Key)
		}
		md := &metricspb.MetricsData{}
		if err := proto.Unmarshal(r.Value, md); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		return md
	}
	// Two rounds, then an Xid on GPU 1, then a round that carries it.
	// Records of the three partitions come in any order, so "after" is
	// told by time: a round sampled two intervals after the Xid was
	// received is surely sampled after Run handled it.
	readRecords(t, brokers, topic, func(rs []*kgo.Record) bool { return len(rs) >= 2 })
	l.InjectXid("GPU-fake-0001", 31)
	var xid, after *metricspb.MetricsData
	when := func(md *metricspb.MetricsData) uint64 {
		return md.GetResourceMetrics()[0].GetScopeMetrics()[0].GetMetrics()[0].GetGauge().GetDataPoints()[0].GetTimeUnixNano()
	}
	readRecords(t, brokers, topic, func(rs []*kgo.Record) bool {
		xid, after = nil, nil
		var rounds []*metricspb.MetricsData
		for _, r := range rs {
			if md := decode(r); len(md.GetResourceMetrics()) == 1 {
				xid = md
			} else {
				rounds = append(rounds, md)
			}
		}
		for _, md := range rounds {
			if xid != nil && when(md) >= when(xid)+uint64(400*time.Millisecond) {
				after = md
			}
		}
		return after != nil
	})

	gs := split(t, xid)
	checkResource(t, gs[0], 1, "GPU-fake-0001", "node-k")
	if p := gs[0].points[nvml.MetricXidErrors]; p.GetAsDouble() != 31 || attrs(p.GetAttributes())["err_code"] != "31" {
		t.Errorf("xid record: %v", xid)
	}
	gs = split(t, after)
	if len(gs) != 2 {
		t.Fatalf("%d resources in a round, want 2", len(gs))
	}
	for i, g := range gs {
		uuid := []string{"GPU-fake-0000", "GPU-fake-0001"}[i]
		checkResource(t, g, int64(i), uuid, "node-k")
		checkLabels(t, g, []string{"0", "1"}[i], uuid, []string{"00000000:00:00.0", "00000001:00:00.0"}[i], "NVIDIA H100 80GB HBM3", "node-k")
		// The fake's NVLink counters stand still: rate 0.
		want := map[string]float64{
			nvml.MetricFBTotal: 80 << 10, nvml.MetricFBUsed: float64((i + 1) << 10), nvml.MetricFBReserved: 512,
			nvml.MetricGPUUtil: float64(50 + i), nvml.MetricPCIeRX: 2e6 * float64(i+1),
			nvml.MetricNvLinkTX: 0, nvml.MetricNvLinkBandwidth: 3 << 30, nvml.MetricNvLinkCRCData: 2,
			nvml.MetricXidErrors: []float64{0, 31}[i],
		}
		if !equalStrings(g.names, allMetrics) {
			t.Errorf("gpu %d: %v", i, g.names)
		}
		for name, w := range want {
			if got := g.points[name].GetAsDouble(); got != w {
				t.Errorf("gpu %d %s = %v, want %v", i, name, got, w)
			}
		}
	}
}

func TestKafkaJSON(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopics(t, brokers, 1, "otlp_metrics")[0]
	l := fake.New(1)
	devs, _ := l.Devices()
	s, _ := nvml.NewSampler(devs, "h", time.Now(), nil)
	md := s.Sample(time.Now())
	sink := nvml.NewKafkaSink(kafkatest.Client(t, brokers), topic, nvml.EncodingJSON)
	if err := sink.Export(t.Context(), md); err != nil {
		t.Fatal(err)
	}
	rs := readRecords(t, brokers, topic, func(rs []*kgo.Record) bool { return len(rs) >= 1 })
	back := &metricspb.MetricsData{}
	if err := protojson.Unmarshal(rs[0].Value, back); err != nil || !proto.Equal(back, md) || rs[0].Key != nil {
		t.Fatalf("json record: key %q, %v", rs[0].Key, err)
	}
}

// An unreachable cluster does not hold Export past its context: the
// exporter's loop must go on sampling and sending Xids.
func TestKafkaSinkUnreachable(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sink := nvml.NewKafkaSink(cl, "", "")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- sink.Export(ctx, &metricspb.MetricsData{}) }()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), nvml.DefaultTopic) {
			t.Errorf("got %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Export still waiting 20s after its 200ms deadline")
	}
}
