package job

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/fuse"
)

func TestUndecodableMessage(t *testing.T) {
	cfg := &Config{}
	cfg.EnsureDefaults()
	u := fuse.Undecodable{Source: fuse.Source{Topic: "otlp_spans", Signal: otlp.SignalSpans, Encoding: otlp.EncodingProto},
		Failed: 51, Read: 60, Example: "top-level message: field 15: proto: cannot parse reserved wire type at byte 0", OtherEncoding: true}
	want := "most records of topic otlp_spans fail to decode as otlp_proto (51 of the first 60; e.g. top-level message: field 15: proto: cannot parse reserved wire type at byte 0) and go to braid.dlq; they decode as otlp_json; is inputs.spans.encoding right for this topic? (otlp_proto|otlp_json)"
	if got := undecodableMessage(cfg, u); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	cfg.Errors = map[string]string{"ingest": "skip"}
	u = fuse.Undecodable{Source: fuse.Source{Topic: "logs-in", Signal: otlp.SignalLogs, Encoding: otlp.EncodingJSON},
		Failed: 51, Read: 51, Example: "empty message at byte 0"}
	want = "most records of topic logs-in fail to decode as otlp_json (51 of the first 51; e.g. empty message at byte 0) and are dropped (errors.ingest: skip); is inputs.logs.encoding right for this topic? (otlp_proto|otlp_json)"
	if got := undecodableMessage(cfg, u); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// notifyBuffer is a log sink that signals every write.
type notifyBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case n.wrote <- struct{}{}:
	default:
	}
	return n.b.Write(p)
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

// A job whose spans topic holds OTLP/JSON while its configuration says
// otlp_proto warns once, naming the topic and the setting.
func TestUndecodableWarning(t *testing.T) {
	t.Parallel() // on kfake: beside the paced integration tests
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "otlp_spans", "otlp_logs", "otlp_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	now := time.Now().UnixNano()
	var recs []*kgo.Record
	for i := range 80 {
		recs = append(recs, &kgo.Record{Topic: "otlp_spans", Value: fmt.Appendf(nil,
			`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"%032x","spanId":"%016x","name":"llm_request","startTimeUnixNano":"%d","endTimeUnixNano":"%d"}]}]}]}`,
			i+1, i+1, now, now+1000)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := &Config{}
	cfg.Kafka.Brokers = brokers
	cfg.State.Dir = t.TempDir()
	cfg.InstanceID = "test"
	cfg.CheckpointInterval = time.Second
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &notifyBuffer{wrote: make(chan struct{}, 1)}
	j, err := Prepare(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	jctx, jcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(jctx) }()
	const want = "most records of topic otlp_spans fail to decode as otlp_proto"
	for !strings.Contains(logs.String(), want) {
		select {
		case <-logs.wrote:
		case err := <-done:
			t.Fatalf("job stopped: %v; log:\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("no warning within 60s; log:\n%s", logs.String())
		}
	}
	// All 80 read (and dead-lettered), still one warning.
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for j.Counters().DLQ.Load() < 80 {
		select {
		case <-poll.C:
		case <-ctx.Done():
			t.Fatalf("%d of 80 records dead-lettered within 60s", j.Counters().DLQ.Load())
		}
	}
	jcancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, want); n != 1 {
		t.Fatalf("%d warnings, want 1; log:\n%s", n, out)
	}
	for _, s := range []string{"they decode as otlp_json", "is inputs.spans.encoding right for this topic? (otlp_proto|otlp_json)", "level=WARN", "setting=inputs.spans.encoding"} {
		if !strings.Contains(out, s) {
			t.Errorf("warning lacks %q; log:\n%s", s, out)
		}
	}
}
