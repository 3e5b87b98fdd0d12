// Command localfeed prepares a broker for a braid configuration and feeds
// it a few test traces: it creates the configuration's three input topics
// where they are missing (the local broker of deploy/local/kafka.sh does
// not create topics by itself), then writes --traces requests as the
// Collector's Kafka exporter would — a root span and a child span on the
// spans topic and a log record on the logs topic, keyed by the trace id in
// hex, as otlp_proto (the exporter's default encoding).
//
//	go run ./examples/localfeed --config examples/local.yaml [--traces 10] [--partitions 4]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
)

func main() {
	config := flag.String("config", "examples/local.yaml", "braid configuration file: brokers, input topics and encodings")
	traces := flag.Int("traces", 10, "test traces to write (0: only create the topics)")
	partitions := flag.Int("partitions", 4, "partitions of the input topics it creates")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *config, *traces, int32(*partitions)); err != nil {
		fmt.Fprintln(os.Stderr, "localfeed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, traces int, partitions int32) error {
	cfg, err := job.LoadConfig(path)
	if err != nil {
		return err
	}
	if traces > 0 && (cfg.Inputs.Spans.Encoding != "otlp_proto" || cfg.Inputs.Logs.Encoding != "otlp_proto") {
		return fmt.Errorf("%s: inputs.spans and inputs.logs are %s and %s: localfeed writes otlp_proto only", path, cfg.Inputs.Spans.Encoding, cfg.Inputs.Logs.Encoding)
	}
	if err := cfg.Kafka.Prepare(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(cfg.Kafka.Opts(),
		// The Collector's partitioner: fnv-1a of the key, Sarama-compatible.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(func(b []byte) uint32 {
			h := fnv.New32a()
			h.Write(b)
			return h.Sum32()
		}))))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ins := []job.InputConfig{cfg.Inputs.Spans, cfg.Inputs.Logs, cfg.Inputs.Metrics}
	var topics []kafka.Topic
	for _, in := range ins {
		topics = append(topics, kafka.Topic{Name: in.Topic, Partitions: partitions})
	}
	// Topics that exist keep their partition count: take it from the spans topic.
	if counts, err := kafka.PartitionCounts(ctx, kadm.NewClient(cl), ins[0].Topic); err == nil && counts[ins[0].Topic] > 0 {
		for i := range topics {
			topics[i].Partitions = counts[ins[0].Topic]
		}
	}
	if err := kafka.EnsureTopics(ctx, kadm.NewClient(cl), cfg.Kafka.Replication, topics...); err != nil {
		return err
	}
	fmt.Printf("input topics %s, %s, %s on %v (%d partitions)\n", ins[0].Topic, ins[1].Topic, ins[2].Topic, cfg.Kafka.Brokers, topics[0].Partitions)

	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
		str("service.name", "vllm"), str("host.name", "localfeed"), str("service.instance.id", "localfeed-0")}}
	now := time.Now()
	for i := range traces {
		var id [16]byte
		root, child := make([]byte, 8), make([]byte, 8)
		rand.Read(id[:])
		rand.Read(root)
		rand.Read(child)
		start := now.Add(time.Duration(i-traces) * 100 * time.Millisecond)
		end := start.Add(80 * time.Millisecond)
		td := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
			{TraceId: id[:], SpanId: root, Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: nanos(start), EndTimeUnixNano: nanos(end),
				Attributes: []*commonpb.KeyValue{str("gen_ai.request.model", "meta-llama/Llama-3.1-8B-Instruct")}},
			{TraceId: id[:], SpanId: child, ParentSpanId: root, Name: "decode",
				StartTimeUnixNano: nanos(start.Add(20 * time.Millisecond)), EndTimeUnixNano: nanos(end)},
		}}}}}}
		ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{
			{TimeUnixNano: nanos(end), TraceId: id[:], SpanId: root, SeverityText: "INFO",
				Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "request finished"}}},
		}}}}}}
		key := otlp.AppendTraceIDHex(nil, id)
		spans, err := proto.Marshal(td)
		if err != nil {
			return err
		}
		logs, err := proto.Marshal(ld)
		if err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx,
			&kgo.Record{Topic: cfg.Inputs.Spans.Topic, Key: key, Value: spans},
			&kgo.Record{Topic: cfg.Inputs.Logs.Topic, Key: key, Value: logs}).FirstErr(); err != nil {
			return err
		}
		fmt.Printf("trace %s\n", key)
	}
	return nil
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func nanos(t time.Time) uint64 { return uint64(t.UnixNano()) }
