package job

import (
	"context"
	"crypto/rand"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

func TestKfakeSmoke(t *testing.T) {
	t.Parallel() // on kfake: beside the paced integration tests
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "otlp_spans", "otlp_logs", "otlp_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(func(b []byte) uint32 { h := fnv.New32a(); h.Write(b); return h.Sum32() }))))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	base := time.Now().Add(-time.Minute).UnixNano()
	want := map[string]bool{}
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}}}}
	for i := 0; i < 20; i++ {
		var tid [16]byte
		rand.Read(tid[:])
		hex := string(otlp.AppendTraceIDHex(nil, tid))
		want[hex] = true
		var spans []*tracepb.Span
		root := make([]byte, 8)
		rand.Read(root)
		for s := 0; s < 3; s++ {
			sid := make([]byte, 8)
			rand.Read(sid)
			sp := &tracepb.Span{TraceId: tid[:], SpanId: sid, Name: "llm_request", StartTimeUnixNano: uint64(base + int64(i)*1e6), EndTimeUnixNano: uint64(base + int64(i)*1e6 + int64(s)*1000)}
			if s == 0 {
				sp.SpanId = root
			} else {
				sp.ParentSpanId = root
			}
			spans = append(spans, sp)
		}
		td := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
		v, _ := proto.Marshal(td)
		ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TimeUnixNano: uint64(base + int64(i)*1e6), TraceId: tid[:], Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "hello"}}}}}}}}}
		lv, _ := proto.Marshal(ld)
		key := []byte(hex)
		if i%2 == 1 {
			key = nil // unkeyed: goes through the repartition topic
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "otlp_spans", Key: key, Value: v}, &kgo.Record{Topic: "otlp_logs", Key: key, Value: lv}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	prod.ProduceSync(ctx, &kgo.Record{Topic: "otlp_spans", Value: []byte{0xff, 0x01}})

	cfg := kfakeConfig(t, brokers)
	cfg.EventTime.Idleness = 2 * time.Second
	cfg.EventTime.FlushAfter = time.Second
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	j, cons, stop := runKfakeJob(ctx, t, cfg)
	got := map[string]*braidpb.FusedTrace{}
	// Until every trace's latest revision is whole: under load a trace may
	// be flushed (flush_after) before its log arrives, and then revised.
	complete := func() bool {
		for k := range want {
			if ft := got[k]; ft == nil || len(ft.Spans) != 3 || len(ft.Logs) != 1 {
				return false
			}
		}
		return true
	}
	for !complete() && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			var ft braidpb.FusedTrace
			if err := proto.Unmarshal(r.Value, &ft); err != nil {
				t.Errorf("unmarshal: %v", err)
				return
			}
			got[string(r.Key)] = &ft
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	for k := range want {
		ft := got[k]
		if ft == nil {
			t.Errorf("trace %s not fused", k)
			continue
		}
		if len(ft.Spans) != 3 || len(ft.Logs) != 1 {
			t.Errorf("trace %s: %d spans %d logs", k, len(ft.Spans), len(ft.Logs))
		}
	}
	t.Logf("counters: local=%d repart=%d dlq=%d fused=%d", j.Counters().Local.Load(), j.Counters().Repartitioned.Load(), j.Counters().DLQ.Load(), j.Counters().Fused.Load())
}

func TestConfigRefusesIdlenessBelowTwoCheckpoints(t *testing.T) {
	cfg := &Config{}
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	cfg.InstanceID = "x"
	cfg.CheckpointInterval = 5 * time.Second
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "event_time.idleness") {
		t.Fatalf("Validate() = %v, want an error naming event_time.idleness", err)
	}
	cfg.EventTime.Idleness = 10 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatalf("idleness of twice the interval refused: %v", err)
	}
}

func TestConfigRefusesCaughtUpIdlenessAboveIdleness(t *testing.T) {
	cfg := &Config{}
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	cfg.InstanceID = "x"
	cfg.EnsureDefaults()
	cfg.EventTime.CaughtUpIdleness = time.Minute // above the default idleness, 30s
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "event_time.caught_up_idleness") {
		t.Fatalf("Validate() = %v, want an error naming event_time.caught_up_idleness", err)
	}
	for _, ok := range []time.Duration{0, -1, 500 * time.Millisecond, 30 * time.Second} {
		cfg.EventTime.CaughtUpIdleness = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("caught_up_idleness %v refused: %v", ok, err)
		}
	}
}

// TestKfakeSpansOnly: with logs and metrics disabled the job reads the
// spans topic alone — their topics need not exist (with an input still
// read from one that does not, nothing comes out) — and event time closes
// the traces of a backlog with nothing flushed in processing time
// (flush_after and idleness are an hour).
func TestKfakeSpansOnly(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "otlp_spans"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := kfakeConfig(t, brokers)
	cfg.EventTime.Idleness = time.Hour
	cfg.EventTime.FlushAfter = time.Hour
	cfg.Inputs.Logs.Disabled, cfg.Inputs.Metrics.Disabled = true, true
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if topics := cfg.InputTopics(); len(topics) != 1 || topics[0] != "otlp_spans" {
		t.Fatalf("InputTopics() = %v, want the spans topic alone", topics)
	}

	// A backlog an hour old: 40 traces of 3 spans, 2 s of event time apart.
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	base := time.Now().Add(-time.Hour).UnixNano()
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}}}}
	var order []string
	for i := range 40 {
		var tid [16]byte
		rand.Read(tid[:])
		hex := string(otlp.AppendTraceIDHex(nil, tid))
		order = append(order, hex)
		var spans []*tracepb.Span
		for s := range 3 {
			sid := make([]byte, 8)
			rand.Read(sid)
			start := base + int64(i)*2e9 + int64(s)*1e6
			spans = append(spans, &tracepb.Span{TraceId: tid[:], SpanId: sid, Name: "llm_request", StartTimeUnixNano: uint64(start), EndTimeUnixNano: uint64(start + 1e6)})
		}
		v, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "otlp_spans", Key: []byte(hex), Value: v, Timestamp: time.Unix(0, base+int64(i)*2e9+1e9)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	j, cons, stop := runKfakeJob(ctx, t, cfg)
	// The first half: the watermark (each partition's newest event less
	// out_of_orderness) passes them, whichever partition each one is on.
	want := order[:20]
	got := map[string]int{}
	complete := func() bool {
		for _, k := range want {
			if got[k] != 3 {
				return false
			}
		}
		return true
	}
	for !complete() && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ft braidpb.FusedTrace
			if err := proto.Unmarshal(r.Value, &ft); err != nil {
				t.Errorf("unmarshal: %v", err)
				return
			}
			got[string(r.Key)] = len(ft.Spans)
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !complete() {
		t.Fatalf("fused %d of the first %d traces whole before the deadline (%v)", len(got), len(want), got)
	}
	if n := j.Counters().IdleFlushed.Load(); n != 0 {
		t.Errorf("%d traces flushed in processing time; want event time to close them", n)
	}
}

// TestConfigRefusesDisabledSpans: spans are what the job fuses.
func TestConfigRefusesDisabledSpans(t *testing.T) {
	cfg := &Config{}
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	cfg.InstanceID = "x"
	cfg.Inputs.Spans.Disabled = true
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "inputs.spans.disabled") {
		t.Fatalf("Validate() = %v, want an error naming inputs.spans.disabled", err)
	}
}

// runKfakeJob prepares cfg's job and runs it until stop, which returns
// what Run returned; cons reads its fused topic from the start, committed
// records only.
func runKfakeJob(ctx context.Context, t *testing.T, cfg *Config) (j *Job, cons *kgo.Client, stop func() error) {
	t.Helper()
	j, err := Prepare(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	jctx, jcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(jctx) }()
	cons, err = kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ConsumeTopics(cfg.Outputs.Fused), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		jcancel()
		<-done
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	return j, cons, func() error {
		jcancel()
		return <-done
	}
}

// kfakeConfig is a job on brokers with short event-time settings: 1 s
// checkpoints, out-of-orderness and idle gap.
func kfakeConfig(t *testing.T, brokers []string) *Config {
	cfg := &Config{}
	cfg.Kafka.Brokers = brokers
	cfg.State.Dir = t.TempDir()
	cfg.InstanceID = "test"
	cfg.CheckpointInterval = time.Second
	cfg.EventTime.OutOfOrderness = time.Second
	cfg.EventTime.IdleGap = time.Second
	return cfg
}
