package job

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// testJob is a job running in-process against the real broker on fresh
// topics.
type testJob struct {
	t       *testing.T
	brokers []string
	cfg     *Config
	job     *Job
	prod    *kgo.Client
	cancel  context.CancelFunc
	done    chan error
}

func startJob(t *testing.T, encoding string, partitions int32) *testJob {
	t.Helper()
	return startJobWith(t, encoding, partitions, nil)
}

// startJobWith is startJob with mod applied to the configuration before
// defaults are filled and the job is prepared.
func startJobWith(t *testing.T, encoding string, partitions int32, mod func(*Config)) *testJob {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, partitions, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, partitions, "braid.fused", "braid.late", "braid.dlq", "repartition")
	cfg := &Config{}
	cfg.Kafka.Brokers = brokers
	cfg.Group = "it-" + out[3]
	cfg.InstanceID = "0"
	cfg.State.Dir = t.TempDir()
	cfg.Inputs.Spans = InputConfig{Topic: in[0], Encoding: encoding}
	cfg.Inputs.Logs = InputConfig{Topic: in[1], Encoding: encoding}
	cfg.Inputs.Metrics = InputConfig{Topic: in[2], Encoding: encoding}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = out[0], out[1], out[2]
	cfg.CheckpointInterval = time.Second
	cfg.EventTime.OutOfOrderness = time.Second
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EventTime.IdleGap = time.Second
	cfg.EventTime.AllowedLateness = 30 * time.Second
	// Above the two checkpoints a log joined by request id takes (two
	// hops), so that only the watermark closes traces while data flows.
	cfg.EventTime.FlushAfter = 10 * time.Second
	if mod != nil {
		mod(cfg)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	j, err := Prepare(ctx, cfg, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tj := &testJob{t: t, brokers: brokers, cfg: cfg, job: j, cancel: cancel, done: make(chan error, 1)}
	tj.prod = kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))
	go func() { tj.done <- j.Run(ctx) }()
	t.Cleanup(tj.stop)
	return tj
}

func (tj *testJob) stop() {
	if tj.cancel == nil {
		return
	}
	tj.cancel()
	tj.cancel = nil
	select {
	case err := <-tj.done:
		if err != nil {
			tj.t.Errorf("job: %v", err)
		}
	case <-time.After(60 * time.Second):
		tj.t.Errorf("job did not stop within 60s")
	}
}

func (tj *testJob) produce(msgs []simulator.Message) {
	tj.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := simulator.Produce(ctx, tj.prod, msgs); err != nil {
		tj.t.Fatal(err)
	}
}

// topicsOf maps simulator messages onto the job's input topics.
func (tj *testJob) simTopics() simulator.Topics {
	return simulator.Topics{Spans: tj.cfg.Inputs.Spans.Topic, Logs: tj.cfg.Inputs.Logs.Topic, Metrics: tj.cfg.Inputs.Metrics.Topic}
}

// reader reads a topic read_committed from the start, accumulating records.
type reader struct {
	cl   *kgo.Client
	recs []*kgo.Record
	job  *Job
}

func (r *reader) describe() string {
	c := r.job.Counters()
	st := r.job.Engine().Stats()
	return fmt.Sprintf("; job: messages %d members %d local %d repartitioned %d fused %d revisions %d late %d dlq %d open %d; engine: in %d out %d checkpoints %d aborts %d",
		c.Messages.Load(), c.Members.Load(), c.Local.Load(), c.Repartitioned.Load(), c.Fused.Load(), c.Revisions.Load(), c.Late.Load(), c.DLQ.Load(), c.OpenTraces.Load(),
		st.RecordsIn.Load(), st.RecordsOut.Load(), st.Checkpoints.Load(), st.Aborts.Load())
}

func (tj *testJob) reader(topic string) *reader {
	return &reader{job: tj.job, cl: kafkatest.Client(tj.t, tj.brokers, kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))}
}

// poll reads what arrives within half a second.
func (r *reader) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	fs := r.cl.PollFetches(ctx)
	cancel()
	fs.EachRecord(func(rec *kgo.Record) { r.recs = append(r.recs, rec) })
}

// until polls until cond holds or the deadline passes.
func (r *reader) until(t *testing.T, d time.Duration, cond func([]*kgo.Record) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond(r.recs) {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v (%d records read)%s", d, len(r.recs), r.describe())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := r.cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(rec *kgo.Record) { r.recs = append(r.recs, rec) })
	}
}

// latest decodes fused records, keeping the highest revision per key, and
// fails on a (key, revision) seen twice.
func latest(t *testing.T, recs []*kgo.Record) map[string]*braidpb.FusedTrace {
	t.Helper()
	m := map[string]*braidpb.FusedTrace{}
	seen := map[string]bool{}
	for _, r := range recs {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			t.Fatalf("fused record %d/%d: %v", r.Partition, r.Offset, err)
		}
		id := fmt.Sprintf("%s/%d", r.Key, ft.Revision)
		if seen[id] {
			t.Fatalf("fused record %s emitted twice", id)
		}
		seen[id] = true
		if hex.EncodeToString(ft.TraceId) != string(r.Key) {
			t.Fatalf("fused record key %s holds trace %x", r.Key, ft.TraceId)
		}
		if old := m[string(r.Key)]; old == nil || old.Revision < ft.Revision {
			m[string(r.Key)] = &ft
		}
	}
	return m
}

func complete(truth simulator.Truth, got map[string]*braidpb.FusedTrace) bool {
	for id, tt := range truth.Traces {
		ft := got[id]
		if ft == nil || len(ft.Spans) != tt.Spans || len(ft.Logs) != tt.Logs+tt.RequestIDLogs || len(ft.Points) != tt.ExemplarPoints {
			return false
		}
	}
	return true
}

// TestIntegrationEveryCollectorForm runs the job on the real broker over
// Collector output in every form of INPUTS.md §1 and checks that each trace's
// fused record holds exactly its spans, logs and points, and that every
// member read is accounted for exactly once.
func TestIntegrationEveryCollectorForm(t *testing.T) {
	forms := []struct {
		encoding string
		keying   simulator.Keying
	}{
		{simulator.EncodingProto, simulator.KeyByTraceID},
		{simulator.EncodingProto, simulator.Unkeyed},
		{simulator.EncodingJSON, simulator.KeyByTraceID},
		{simulator.EncodingJSON, simulator.Unkeyed},
	}
	for i, f := range forms {
		t.Run(fmt.Sprintf("encoding=%s/keying=%s", f.encoding, f.keying), func(t *testing.T) {
			t.Parallel() // each form its own job and topics
			tj := startJob(t, f.encoding, 4)
			sim, err := simulator.New(simulator.Config{
				Seed: int64(100 + i), Encoding: f.encoding, Keying: f.keying, Topics: tj.simTopics(),
				RequestsPerBatch: 12, SplitRatio: 0.25,
			})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []simulator.Message
			for range 25 {
				msgs = append(msgs, sim.Next()...)
			}
			msgs = append(msgs, sim.Flush()...)
			tj.produce(msgs)
			truth := sim.Truth()
			split := 0
			for _, tt := range truth.Traces {
				if tt.Split {
					split++
				}
			}
			if split == 0 || truth.TracelessLogs == 0 || truth.ResourcePoints == 0 {
				t.Fatalf("workload lacks a form: %d split traces, %d traceless logs, %d resource points", split, truth.TracelessLogs, truth.ResourcePoints)
			}

			fused := tj.reader(tj.cfg.Outputs.Fused)
			fused.until(t, 90*time.Second, func(recs []*kgo.Record) bool { return complete(truth, latest(t, recs)) })
			got := latest(t, fused.recs)
			for id, tt := range truth.Traces {
				ft := got[id]
				var ids []string
				for _, s := range ft.Spans {
					ids = append(ids, hex.EncodeToString(s.Span.SpanId))
					if hex.EncodeToString(s.Span.TraceId) != id {
						t.Errorf("trace %s holds a span of trace %x", id, s.Span.TraceId)
					}
				}
				want := append([]string(nil), tt.SpanIDs...)
				sort.Strings(ids)
				sort.Strings(want)
				if fmt.Sprint(ids) != fmt.Sprint(want) {
					t.Errorf("trace %s spans %v, want %v", id, ids, want)
				}
				resolved := 0
				for _, l := range ft.Logs {
					if len(l.Log.TraceId) == 0 {
						// Joined by request id (resolve stage).
						resolved++
						if !strings.Contains(l.Log.Body.GetStringValue(), strings.TrimPrefix(tt.RequestID, "cmpl-")) {
							t.Errorf("trace %s (request %s) holds trace-less log %q", id, tt.RequestID, l.Log.Body.GetStringValue())
						}
						continue
					}
					if hex.EncodeToString(l.Log.TraceId) != id {
						t.Errorf("trace %s holds a log of trace %x", id, l.Log.TraceId)
					}
				}
				if resolved != tt.RequestIDLogs {
					t.Errorf("trace %s: %d logs joined by request id, want %d", id, resolved, tt.RequestIDLogs)
				}
			}
			if len(got) != len(truth.Traces) {
				t.Errorf("fused %d traces, want %d", len(got), len(truth.Traces))
			}

			// Late data: an old request, after the watermark moved on.
			old, err := simulator.New(simulator.Config{Seed: 7, Encoding: f.encoding, Keying: f.keying, Topics: tj.simTopics(),
				Start: simulator.DefaultStart.Add(-time.Hour), RequestsPerBatch: 2, SplitRatio: -1})
			if err != nil {
				t.Fatal(err)
			}
			lateMsgs := old.Next()
			// Late means behind the watermark: wait until every task's
			// watermark is past the old data plus allowed lateness.
			tj.waitWatermark(simulator.DefaultStart.Add(-time.Hour).Add(tj.cfg.EventTime.AllowedLateness + time.Second))
			tj.produce(lateMsgs)
			lt := old.Truth()
			// The old request's engine log names its request id: it is
			// resolved, and late too.
			wantLate := lt.Spans + lt.TraceLogs + lt.ExemplarPoints + requestIDLogs(lt)
			late := tj.reader(tj.cfg.Outputs.Late)
			late.until(t, 60*time.Second, func(recs []*kgo.Record) bool { return len(recs) >= wantLate })
			oldRequests := map[string]bool{}
			for _, tt := range lt.Traces {
				oldRequests[tt.RequestID] = true
			}
			for _, r := range late.recs {
				// Keyed by trace id; a log that reached the resolve stage
				// late and before its request's span is keyed by its request
				// id ("unresolved request id").
				if lt.Traces[string(r.Key)].TraceID == "" && !oldRequests[string(r.Key)] {
					t.Errorf("late record for unexpected trace %s", r.Key)
				}
				if hdrValue(r, "braid.reason") == "" || hdrValue(r, "braid.topic") == "" {
					t.Errorf("late record without reason/topic headers: %v", r.Headers)
				}
			}

			// Malformed input: each lands in the DLQ with its headers; the
			// job keeps running (checked by the conservation below).
			bad := []*kgo.Record{
				{Topic: tj.cfg.Inputs.Spans.Topic, Key: []byte("truncated"), Value: msgs[0].Value[:len(msgs[0].Value)/2]},
				{Topic: tj.cfg.Inputs.Logs.Topic, Key: []byte("invalid-json"), Value: []byte(`{"resourceLogs":[{"scopeLogs":`)},
				{Topic: tj.cfg.Inputs.Spans.Topic, Key: []byte("wrong-type"), Value: metricsValue(t, msgs, tj.cfg.Inputs.Metrics.Topic)},
				{Topic: tj.cfg.Inputs.Metrics.Topic, Key: []byte("empty"), Value: []byte{}},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tj.prod.ProduceSync(ctx, bad...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			dlq := tj.reader(tj.cfg.Outputs.DLQ)
			dlq.until(t, 60*time.Second, func(recs []*kgo.Record) bool { return len(recs) >= len(bad) })
			for _, r := range dlq.recs {
				var src *kgo.Record
				for _, b := range bad {
					if string(b.Key) == string(r.Key) {
						src = b
					}
				}
				if src == nil || string(src.Value) != string(r.Value) {
					t.Errorf("DLQ record %s is not an unchanged bad input", r.Key)
					continue
				}
				if hdrValue(r, "braid.topic") != src.Topic || hdrValue(r, "braid.reason") == "" ||
					hdrValue(r, "braid.partition") == "" || hdrValue(r, "braid.offset") == "" {
					t.Errorf("DLQ record %s headers: %v", r.Key, r.Headers)
				}
			}

			// Conservation: every member read is in exactly one of fused /
			// late / unjoined (counted), and every message decoded or in DLQ.
			tj.stop()
			c := tj.job.Counters()
			fusedMembers := 0
			for _, ft := range latest(t, fused.recs) {
				fusedMembers += len(ft.Spans) + len(ft.Logs) + len(ft.Points)
			}
			lateMembers := countLate(t, late.recs)
			// Points without exemplars feed the resources table; logs
			// without trace or request id stay unjoined.
			unjoined := int(c.UnjoinedLogs.Load() + c.UnjoinedPoint.Load() + c.ResourcePoint.Load())
			if int(c.Members.Load()) != fusedMembers+lateMembers+unjoined+int(c.Truncated.Load()) {
				t.Errorf("members read %d != fused %d + late %d + unjoined %d + truncated %d",
					c.Members.Load(), fusedMembers, lateMembers, unjoined, c.Truncated.Load())
			}
			wantMembers := truth.Spans + truth.TraceLogs + truth.ExemplarPoints + truth.TracelessLogs + truth.ResourcePoints +
				lt.Spans + lt.TraceLogs + lt.ExemplarPoints + lt.TracelessLogs + lt.ResourcePoints
			if int(c.Members.Load()) != wantMembers {
				t.Errorf("members read %d, generated %d", c.Members.Load(), wantMembers)
			}
			wantUnjoined := truth.TracelessLogs - requestIDLogs(truth) + truth.ResourcePoints + lt.TracelessLogs - requestIDLogs(lt) + lt.ResourcePoints
			if unjoined != wantUnjoined {
				t.Errorf("unjoined %d, want %d", unjoined, wantUnjoined)
			}
			if r, u := int(c.Resolved.Load()), int(c.Unresolved.Load()); r+u != requestIDLogs(truth)+requestIDLogs(lt) || u > requestIDLogs(lt) {
				t.Errorf("resolved %d and unresolved %d logs by request id, want %d of which at most %d (the old request's) unresolved",
					r, u, requestIDLogs(truth)+requestIDLogs(lt), requestIDLogs(lt))
			}
			if lateMembers != wantLate {
				t.Errorf("late members %d, want %d", lateMembers, wantLate)
			}
			if int(c.DLQ.Load()) != len(bad) || len(dlq.recs) != len(bad) {
				t.Errorf("DLQ counter %d, records %d, want %d", c.DLQ.Load(), len(dlq.recs), len(bad))
			}
			if int(c.Messages.Load()) != len(msgs)+len(lateMsgs)+len(bad) {
				t.Errorf("messages read %d, produced %d", c.Messages.Load(), len(msgs)+len(lateMsgs)+len(bad))
			}
			t.Logf("traces %d (split %d), members %d: fused %d late %d unjoined %d; fast path %d groups, repartitioned %d",
				len(truth.Traces), split, c.Members.Load(), fusedMembers, lateMembers, unjoined, c.Local.Load(), c.Repartitioned.Load())
		})
	}
}

// requestIDLogs is the number of trace-less logs that name a request.
func requestIDLogs(truth simulator.Truth) int {
	n := 0
	for _, tt := range truth.Traces {
		n += tt.RequestIDLogs
	}
	return n
}

func (tj *testJob) waitWatermark(ts time.Time) {
	tj.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		wms := tj.job.Engine().Watermarks()
		ok := len(wms) > 0
		for _, wm := range wms {
			if wm < ts.UnixNano() {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tj.t.Fatalf("task watermarks %v did not pass %v within 60s", wms, ts)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

func hdrValue(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// metricsValue returns a metrics message value from msgs (a wrong type on
// the spans topic).
func metricsValue(t *testing.T, msgs []simulator.Message, topic string) []byte {
	for _, m := range msgs {
		if m.Topic == topic {
			return m.Value
		}
	}
	t.Fatal("no metrics message generated")
	return nil
}

// countLate counts the members in late records (one-item OTLP messages).
func countLate(t *testing.T, recs []*kgo.Record) int {
	n := 0
	for _, r := range recs {
		switch hdrValue(r, "braid.signal") {
		case "spans":
			var m tracepb.TracesData
			if err := proto.Unmarshal(r.Value, &m); err != nil {
				t.Fatal(err)
			}
			n += len(m.ResourceSpans[0].ScopeSpans[0].Spans)
		case "logs":
			var m logspb.LogsData
			if err := proto.Unmarshal(r.Value, &m); err != nil {
				t.Fatal(err)
			}
			n += len(m.ResourceLogs[0].ScopeLogs[0].LogRecords)
		case "metrics":
			var m metricspb.MetricsData
			if err := proto.Unmarshal(r.Value, &m); err != nil {
				t.Fatal(err)
			}
			n += len(m.ResourceMetrics[0].ScopeMetrics[0].Metrics)
		default:
			t.Fatalf("late record without braid.signal: %v", r.Headers)
		}
	}
	return n
}
