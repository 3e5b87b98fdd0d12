package job

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/nvml"
	"github.com/braidlabs/braid/connectors/nvml/fake"
	"github.com/braidlabs/braid/operators/braidpb"
)

// TestIntegrationGPUExporterFeedsResources: braid's NVML exporter, on fake
// GPUs, writes to the job's otlp_metrics topic on the real broker; the
// resources stage reads its points, and requests that ran on one of those
// GPUs carry its memory, utilisation and Xid in their FusedTrace — and not
// the other GPU's.
func TestIntegrationGPUExporterFeedsResources(t *testing.T) {
	t.Parallel() // its own job and topics
	tj := startJob(t, "otlp_proto", 4)
	lib := fake.New(2)
	for i, d := range lib.Devs {
		d.Update(func(s *fake.State) {
			s.Memory = nvml.Memory{Total: 80 << 30, Reserved: 512 << 20, Used: uint64(i+1) << 30, Free: 80<<30 - 512<<20 - uint64(i+1)<<30}
			s.Utilization = nvml.Utilization{GPU: uint32(40 + i), Memory: uint32(20 + i)}
		})
	}
	sink := nvml.NewKafkaSink(kafkatest.Client(t, tj.brokers), tj.cfg.Inputs.Metrics.Topic, nvml.EncodingProto)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nvml.Run(ctx, lib, sink, nvml.Options{Interval: 200 * time.Millisecond, Host: "gpu-node-7"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("service.instance.id", "gpu-node-7:8000"),
		str("host.name", "gpu-node-7"), str("gpu.uuid", "GPU-fake-0000"), str("gpu.index", "0")}}
	var ids [][]byte
	xidSent := false
	// Requests finish every 250ms of wall-clock (= event) time for 12s; an
	// Xid 43 hits GPU 0 halfway.
	for i := range 48 {
		end := time.Now()
		id := []byte{0x7e, byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, byte(i)}
		sp := &tracepb.Span{TraceId: id, SpanId: []byte{1, 2, 3, 4, 5, 6, 7, byte(i + 1)}, Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
			StartTimeUnixNano: uint64(end.Add(-2 * time.Second).UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
			Attributes: []*commonpb.KeyValue{str("gen_ai.request.id", "cmpl-gpu"+string(rune('a'+i%26))), str("gen_ai.response.model", "m")}}
		v, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{sp}}}}}})
		key := []byte(hex.EncodeToString(id))
		if err := tj.prod.ProduceSync(context.Background(), &kgo.Record{Topic: tj.cfg.Inputs.Spans.Topic, Key: key, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, key)
		if i == 24 && !xidSent {
			lib.InjectXid("GPU-fake-0000", 43)
			xidSent = true
		}
		time.Sleep(250 * time.Millisecond) // paces event time: the spans' times are wall-clock times
	}
	fused := tj.reader(tj.cfg.Outputs.Fused)
	check := ids[4 : len(ids)-8] // requests whose window has GPU samples before and after
	fused.until(t, 2*time.Minute, func(recs []*kgo.Record) bool {
		got := latest(t, recs)
		for _, id := range check {
			if got[string(id)] == nil {
				return false
			}
		}
		return true
	})
	got := latest(t, fused.recs)
	xid := 0
	for _, id := range check {
		ft := got[string(id)]
		series := map[string]*braidpb.SeriesWindow{}
		for _, w := range ft.GetResourceContext().GetSeries() {
			if seriesPlace(w.Resource) != "gpu=GPU-fake-0000" {
				t.Errorf("trace %s: series of another place attached: %s %s", id, w.Metric, w.Resource)
			}
			series[w.Metric] = w
		}
		if w := series["gpu_fb_used_mib"]; w == nil || w.AtEnd != 1024 || w.Min != 1024 || w.Max != 1024 || w.Samples == 0 {
			t.Errorf("trace %s: gpu_fb_used_mib %v, want 1024 MiB throughout", id, w)
		}
		if w := series["gpu_util_percent"]; w == nil || w.AtEnd != 40 {
			t.Errorf("trace %s: gpu_util_percent %v, want 40", id, w)
		}
		if w := series["xid_errors"]; w != nil && w.Max == 43 {
			xid++
		}
	}
	if xid == 0 {
		t.Error("no request carries the Xid 43 that hit its GPU")
	}
	t.Logf("%d requests carry GPU 0's series; %d saw Xid 43", len(check), xid)
}
