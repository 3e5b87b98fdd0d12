package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// replayEnv is a set of fresh input and output topics on the real broker,
// the job configuration over them (as a Config and as a YAML file for the
// command) and a producer that places records as the Collector does.
type replayEnv struct {
	t          *testing.T
	brokers    []string
	partitions int32
	cfg        *job.Config
	configPath string
	prod       *kgo.Client
}

func newReplayEnv(t *testing.T, partitions int32) *replayEnv {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, partitions, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, partitions, "braid.fused", "braid.late", "braid.dlq", "rp")
	cfg := &job.Config{}
	cfg.Kafka.Brokers = brokers
	cfg.Group = "replay-" + out[3]
	cfg.InstanceID = "0"
	cfg.State.Dir = t.TempDir()
	cfg.Inputs.Spans = job.InputConfig{Topic: in[0], Encoding: simulator.EncodingProto}
	cfg.Inputs.Logs = job.InputConfig{Topic: in[1], Encoding: simulator.EncodingProto}
	cfg.Inputs.Metrics = job.InputConfig{Topic: in[2], Encoding: simulator.EncodingProto}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = out[0], out[1], out[2]
	cfg.CheckpointInterval = time.Second
	cfg.EventTime.OutOfOrderness = time.Second
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EventTime.IdleGap = time.Second
	cfg.EventTime.AllowedLateness = 30 * time.Second
	cfg.EventTime.FlushAfter = 2 * time.Second
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`kafka:
  brokers: [%s]
group: %s
instance_id: "0"
inputs:
  spans: {topic: %s}
  logs: {topic: %s}
  metrics: {topic: %s}
outputs: {fused: %s, late: %s, dlq: %s}
state: {dir: %s}
checkpoint_interval: 1s
event_time: {out_of_orderness: 1s, idleness: 5s, idle_gap: 1s, allowed_lateness: 30s, flush_after: 2s}
admin: {addr: ""}
`, strings.Join(brokers, ", "), cfg.Group, in[0], in[1], in[2], out[0], out[1], out[2], cfg.State.Dir)
	path := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return &replayEnv{t: t, brokers: brokers, partitions: partitions, cfg: cfg, configPath: path,
		prod: kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))}
}

func (e *replayEnv) simTopics() simulator.Topics {
	return simulator.Topics{Spans: e.cfg.Inputs.Spans.Topic, Logs: e.cfg.Inputs.Logs.Topic, Metrics: e.cfg.Inputs.Metrics.Topic}
}

// produceWorkload writes batches of simulated Collector output (unkeyed, so
// that trace groups are repartitioned, with split traces), each batch's
// records stamped recordTime + its event-time offset from start.
func (e *replayEnv) produceWorkload(seed int64, start, recordTime time.Time, batches int) simulator.Truth {
	return e.produceWorkloadPausing(seed, simulator.Unkeyed, start, recordTime, batches, -1)
}

// produceWorkloadPausing is produceWorkload with the keying given, and a
// wall-clock pause of 3s after batch pauseAt (-1: none).
func (e *replayEnv) produceWorkloadPausing(seed int64, keying simulator.Keying, start, recordTime time.Time, batches, pauseAt int) simulator.Truth {
	e.t.Helper()
	sim, err := simulator.New(simulator.Config{Seed: seed, Keying: keying, Start: start, Topics: e.simTopics(),
		RequestsPerBatch: 10, SplitRatio: 0.25})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produce := func(msgs []simulator.Message, at time.Time) {
		recs := make([]*kgo.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Timestamp: at}
		}
		if err := e.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
	for b := range batches {
		msgs := sim.Next()
		produce(msgs, recordTime.Add(sim.EventTime().Sub(start)))
		if b == pauseAt {
			time.Sleep(3 * time.Second)
		}
	}
	produce(sim.Flush(), recordTime.Add(sim.EventTime().Sub(start)+200*time.Millisecond))
	return sim.Truth()
}

// replay runs the command and returns its summary.
func (e *replayEnv) replay(args ...string) string {
	e.t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := cmdReplay(ctx, append([]string{"--config", e.configPath}, args...), &out, log); err != nil {
		e.t.Fatalf("braid replay %s: %v", strings.Join(args, " "), err)
	}
	e.t.Logf("braid replay %s (%v):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	return out.String()
}

// replayTopic returns a fresh topic name that the replay creates, deleted
// when the test ends.
func (e *replayEnv) replayTopic(name string) string {
	e.t.Helper()
	topic := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	adm := kadm.NewClient(kafkatest.Client(e.t, e.brokers))
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteTopics(ctx, topic)
	})
	return topic
}

// readAll reads every record of topic up to its current end offsets,
// read_committed, partition by partition in offset order.
func readAll(t *testing.T, brokers []string, topic string) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	out := map[int32][]*kgo.Record{}
	// Control records are kept to see the end of a transactional topic
	// (its last offset is a commit marker), and not returned.
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d partitions not read to their end", topic, len(left))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
			if end, ok := left[r.Partition]; ok && r.Offset >= end-1 {
				delete(left, r.Partition)
			}
		})
	}
	return out
}

// decodeLatest decodes fused records, keeping the highest revision per key.
func decodeLatest(t *testing.T, recs []*kgo.Record) map[string]*braidpb.FusedTrace {
	t.Helper()
	m := map[string]*braidpb.FusedTrace{}
	for _, r := range recs {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			t.Fatalf("fused record %s: %v", r.Key, err)
		}
		if hex.EncodeToString(ft.TraceId) != string(r.Key) {
			t.Fatalf("fused record key %s holds trace %x", r.Key, ft.TraceId)
		}
		if old := m[string(r.Key)]; old == nil || old.Revision < ft.Revision {
			m[string(r.Key)] = &ft
		}
	}
	return m
}

func flatten(parts map[int32][]*kgo.Record) []*kgo.Record {
	var all []*kgo.Record
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		all = append(all, parts[p]...)
	}
	return all
}

// checkTraces checks that got holds exactly the traces of truth, each
// complete.
func checkTraces(t *testing.T, truth simulator.Truth, got map[string]*braidpb.FusedTrace) {
	t.Helper()
	for id, tt := range truth.Traces {
		ft := got[id]
		if ft == nil {
			t.Errorf("trace %s missing", id)
			continue
		}
		if len(ft.Spans) != tt.Spans || len(ft.Logs) != tt.Logs+tt.RequestIDLogs || len(ft.Points) != tt.ExemplarPoints {
			t.Errorf("trace %s: spans %d logs %d points %d, want %d %d %d", id, len(ft.Spans), len(ft.Logs), len(ft.Points), tt.Spans, tt.Logs+tt.RequestIDLogs, tt.ExemplarPoints)
		}
	}
	for id := range got {
		if _, ok := truth.Traces[id]; !ok {
			t.Errorf("unexpected trace %s", id)
		}
	}
}

// TestReplayFilesDeterministic replays the same range twice to Parquet and
// twice to Arrow: the files are byte-identical, and read back they hold
// one row per fused trace.
func TestReplayFilesDeterministic(t *testing.T) {
	e := newReplayEnv(t, 4)
	truth := e.produceWorkload(11, simulator.DefaultStart, time.Now().Add(-time.Hour).Truncate(time.Second), 40)
	dir := t.TempDir()
	for _, ext := range []string{"parquet", "arrow"} {
		a, b := filepath.Join(dir, "a."+ext), filepath.Join(dir, "b."+ext)
		e.replay("--from", "earliest", "--out", a)
		e.replay("--from", "earliest", "--out", b)
		ba, err1 := os.ReadFile(a)
		bb, err2 := os.ReadFile(b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(ba, bb) {
			t.Fatalf("%s: two replays of the same range differ (%d and %d bytes)", ext, len(ba), len(bb))
		}
		ids := readTraceIDs(t, a)
		t.Logf("%s: %d bytes, %d rows", ext, len(ba), len(ids))
		seen := map[string]bool{}
		for _, id := range ids {
			if _, ok := truth.Traces[id]; !ok {
				t.Errorf("%s: row of unexpected trace %s", ext, id)
			}
			seen[id] = true
		}
		if len(seen) != len(truth.Traces) || len(ids) < len(truth.Traces) {
			t.Errorf("%s: %d rows, %d distinct traces; want %d traces", ext, len(ids), len(seen), len(truth.Traces))
		}
	}
}

// readTraceIDs reads the trace_id column of an Arrow IPC or Parquet file.
func readTraceIDs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []string
	col := func(rec arrow.Record) {
		if rec.Schema().Field(0).Name != "trace_id" {
			t.Fatalf("first column is %s", rec.Schema().Field(0).Name)
		}
		c := rec.Column(0).(*array.String)
		for i := range c.Len() {
			ids = append(ids, c.Value(i))
		}
	}
	if strings.HasSuffix(path, ".arrow") {
		r, err := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for i := range r.NumRecords() {
			rec, err := r.Record(i)
			if err != nil {
				t.Fatal(err)
			}
			col(rec)
		}
		return ids
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := fr.GetRecordReader(context.Background(), []int{0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	for rr.Next() {
		col(rr.Record())
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if int64(len(ids)) != pf.NumRows() {
		t.Fatalf("read %d trace ids of %d rows", len(ids), pf.NumRows())
	}
	return ids
}

// TestReplayTopicDeterministic replays the same range twice to topics, one
// created by the replay and one that exists: the same (key, value, header)
// sequence in each partition, partitioned by otlp.HashPartition.
func TestReplayTopicDeterministic(t *testing.T) {
	e := newReplayEnv(t, 4)
	truth := e.produceWorkload(12, simulator.DefaultStart, time.Now().Add(-time.Hour).Truncate(time.Second), 40)
	created := e.replayTopic("replay-created")
	existing := kafkatest.NewTopics(t, e.brokers, 4, "replay-existing")[0]
	e.replay("--from", "earliest", "--out", "topic:"+created)
	e.replay("--from", "earliest", "--to", "latest", "--out", "topic:"+existing)
	a, b := readAll(t, e.brokers, created), readAll(t, e.brokers, existing)
	if len(a) != 4 {
		t.Errorf("created topic: records in %d partitions, want 4", len(a))
	}
	n := 0
	for p := range int32(4) {
		ra, rb := a[p], b[p]
		if len(ra) != len(rb) {
			t.Fatalf("partition %d: %d and %d records", p, len(ra), len(rb))
		}
		for i := range ra {
			if !bytes.Equal(ra[i].Key, rb[i].Key) || !bytes.Equal(ra[i].Value, rb[i].Value) || fmt.Sprint(ra[i].Headers) != fmt.Sprint(rb[i].Headers) {
				t.Fatalf("partition %d record %d differs: %s vs %s", p, i, ra[i].Key, rb[i].Key)
			}
			if q := otlp.HashPartition(ra[i].Key, 4); q != p {
				t.Errorf("trace %s in partition %d, want %d", ra[i].Key, p, q)
			}
			if len(ra[i].Headers) != 1 || ra[i].Headers[0].Key != "braid.revision" {
				t.Errorf("headers %v", ra[i].Headers)
			}
		}
		n += len(ra)
	}
	checkTraces(t, truth, decodeLatest(t, flatten(a)))
	t.Logf("%d fused records, %d traces", n, len(truth.Traces))

	// The live job's topics are refused.
	var out bytes.Buffer
	err := cmdReplay(context.Background(), []string{"--config", e.configPath, "--from", "earliest", "--out", "topic:" + e.cfg.Outputs.Fused}, &out, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "live job") {
		t.Errorf("replay into the live fused topic: %v", err)
	}
}

// TestReplayMatchesLiveJob runs the live job in-process over simulated
// Collector output until it has fused every trace, then replays the whole
// range to a topic: the same traces, and each replayed record equals the
// live job's last revision of it.
func TestReplayMatchesLiveJob(t *testing.T) {
	e := newReplayEnv(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := job.Prepare(ctx, e.cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("job: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("job did not stop within 60s")
		}
	}
	defer stop()

	// Unkeyed batches with a pause longer than flush_after in the middle
	// (the live job emits the first halves of split traces, then revises
	// them), then keyed batches (the fast path).
	rt := time.Now().Add(-time.Hour).Truncate(time.Second)
	truth := e.produceWorkloadPausing(13, simulator.Unkeyed, simulator.DefaultStart, rt, 30, 14)
	keyed := e.produceWorkloadPausing(14, simulator.KeyByTraceID, simulator.DefaultStart.Add(6*time.Second), rt.Add(6*time.Second), 20, -1)
	for id, tt := range keyed.Traces {
		truth.Traces[id] = tt
	}
	live := kafkatest.Client(t, e.brokers, kgo.ConsumeTopics(e.cfg.Outputs.Fused), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var liveRecs []*kgo.Record
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := decodeLatest(t, liveRecs)
		complete := len(got) == len(truth.Traces)
		for id, tt := range truth.Traces {
			if ft := got[id]; ft == nil || len(ft.Spans) != tt.Spans || len(ft.Logs) != tt.Logs+tt.RequestIDLogs || len(ft.Points) != tt.ExemplarPoints {
				complete = false
			}
		}
		if complete {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live job fused %d of %d traces within 90s", len(got), len(truth.Traces))
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		live.PollFetches(pctx).EachRecord(func(r *kgo.Record) { liveRecs = append(liveRecs, r) })
		pcancel()
	}
	stop()
	c := j.Counters()
	if c.Late.Load() != 0 || c.DLQ.Load() != 0 {
		t.Fatalf("live job: late %d dlq %d; the comparison needs neither", c.Late.Load(), c.DLQ.Load())
	}
	// Everything the job wrote, now that it has stopped.
	liveLatest := decodeLatest(t, flatten(readAll(t, e.brokers, e.cfg.Outputs.Fused)))

	out := e.replayTopic("replay-vs-live")
	e.replay("--from", "earliest", "--out", "topic:"+out)
	replayed := decodeLatest(t, flatten(readAll(t, e.brokers, out)))
	checkTraces(t, truth, replayed)
	if len(replayed) != len(liveLatest) {
		t.Errorf("replay fused %d traces, the live job %d", len(replayed), len(liveLatest))
	}
	// The watermark at emission, the revision and the REVISED flag say when
	// and how often a trace was emitted, which differs between the live
	// job (processing-time flushes, then revisions) and the replay (event
	// time only): clear them. Everything else must be equal.
	norm := func(ft *braidpb.FusedTrace) *braidpb.FusedTrace {
		ft = proto.Clone(ft).(*braidpb.FusedTrace)
		ft.WatermarkUnixNano, ft.Revision = 0, 0
		ft.Flags = slices.DeleteFunc(ft.Flags, func(f braidpb.Flag) bool { return f == braidpb.Flag_FLAG_REVISED })
		return ft
	}
	revised := 0
	for id, l := range liveLatest {
		if l.Revision > 0 {
			revised++
		}
		r := replayed[id]
		if r == nil {
			t.Errorf("trace %s: not replayed", id)
			continue
		}
		if nl, nr := norm(l), norm(r); !proto.Equal(nl, nr) {
			t.Errorf("trace %s: replay differs from the live job's revision %d in %s", id, l.Revision, differingFields(nl, nr))
		}
	}
	t.Logf("%d traces equal; %d of them revised by the live job; live: messages %d members %d repartitioned %d",
		len(liveLatest), revised, c.Messages.Load(), c.Members.Load(), c.Repartitioned.Load())
}

// TestReplayTimeRange writes two phases an hour apart in record time and
// replays by --from and --to times: only the phase asked for comes out.
// Then braid tail --trace finds one of the replayed traces.
func TestReplayTimeRange(t *testing.T) {
	e := newReplayEnv(t, 3)
	t1 := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	t2 := t1.Add(time.Hour)
	phase1 := e.produceWorkload(21, simulator.DefaultStart, t1, 20)
	phase2 := e.produceWorkload(22, simulator.DefaultStart.Add(time.Hour), t2, 20)
	cut := t2.Add(-time.Minute).UTC().Format(time.RFC3339)

	second := e.replayTopic("replay-phase2")
	sum := e.replay("--from", cut, "--out", "topic:"+second)
	got2 := decodeLatest(t, flatten(readAll(t, e.brokers, second)))
	checkTraces(t, phase2, got2)
	if !strings.Contains(sum, fmt.Sprintf("fused %d traces", len(phase2.Traces))) {
		t.Errorf("summary does not count %d traces:\n%s", len(phase2.Traces), sum)
	}

	first := filepath.Join(t.TempDir(), "phase1.parquet")
	e.replay("--from", "earliest", "--to", cut, "--out", first)
	ids := readTraceIDs(t, first)
	got1 := map[string]bool{}
	for _, id := range ids {
		got1[id] = true
	}
	for id := range phase1.Traces {
		if !got1[id] {
			t.Errorf("phase-1 trace %s missing from --to %s", id, cut)
		}
	}
	if len(got1) != len(phase1.Traces) {
		t.Errorf("--to %s: %d traces, want the %d of phase 1", cut, len(got1), len(phase1.Traces))
	}

	// A range with nothing in it gives a valid, empty file.
	empty := filepath.Join(t.TempDir(), "empty.arrow")
	e.replay("--from", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--out", empty)
	if ids := readTraceIDs(t, empty); len(ids) != 0 {
		t.Errorf("empty range: %d rows", len(ids))
	}

	// braid tail --trace reads only the trace's partition and prints it.
	id := phase2.TraceIDs[len(phase2.TraceIDs)/2]
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := cmdTail(ctx, []string{"--brokers", strings.Join(e.brokers, ","), "--topic", second, "--trace", strings.ToUpper(id), "-n", "1", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"trace_id":"`+id+`"`) || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("tail --trace %s printed:\n%s", id, out.String())
	}
	t.Logf("tail --trace found %s in %v", id, time.Since(start).Round(time.Millisecond))
	if err := cmdTail(ctx, []string{"--trace", "xyz"}, &out); err == nil {
		t.Error("tail --trace xyz accepted")
	}
}

// differingFields names the top-level fields in which a and b differ, with
// both values when they are short.
func differingFields(a, b proto.Message) string {
	var out []string
	ra, rb := a.ProtoReflect(), b.ProtoReflect()
	fields := ra.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		va, vb := ra.Get(f), rb.Get(f)
		if va.Equal(vb) {
			continue
		}
		sa, sb := fmt.Sprint(va), fmt.Sprint(vb)
		if len(sa)+len(sb) > 400 {
			sa, sb = fmt.Sprintf("(%d chars)", len(sa)), fmt.Sprintf("(%d chars)", len(sb))
		}
		out = append(out, fmt.Sprintf("%s: live %s, replay %s", f.Name(), sa, sb))
	}
	return strings.Join(out, "; ")
}
