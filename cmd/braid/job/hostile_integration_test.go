package job

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// The hostile-input suite: each case runs a fresh job on the real broker
// over a known good workload mixed with one kind of hostile input, and
// checks that
//   - the job keeps running: Run does not return and no transaction is
//     aborted (no crash, no restart) until the test stops it;
//   - every good trace is fused exactly: its spans (by id), logs and points,
//     as the simulator's ground truth says, none late;
//   - every hostile record is accounted for: unchanged in braid.dlq, or its
//     members in braid.late, each with a braid.reason header, or fused under
//     its own trace id with valid protobuf (strings repaired);
//   - every record braid wrote decodes with proto.Unmarshal.
//
// The expected output is computed from the inputs the test built (the
// simulator's truth and the hostile records' own member counts), never from
// braid's code.

// hostileTimes are the event-time settings of the suite: short, so that
// a case takes seconds.
func hostileConfig(c *Config) {
	c.CheckpointInterval = time.Second
	c.EventTime.OutOfOrderness = time.Second
	c.EventTime.Idleness = 2 * time.Second
	c.EventTime.IdleGap = time.Second
	c.EventTime.AllowedLateness = 3 * time.Second
	// Above the two checkpoints a log joined by request id takes.
	c.EventTime.FlushAfter = 4 * time.Second
}

type hostileOpts struct {
	// maxMessageBytes raises max.message.bytes of the input topics (the
	// broker takes larger records as input); 0: the broker default.
	maxMessageBytes int
	mod             func(*Config)
}

// startHostileJob is startJob with the suite's settings and options.
func startHostileJob(t *testing.T, o hostileOpts) *testJob {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, 4, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, 4, "braid.fused", "braid.late", "braid.dlq", "hostile")
	// The pollution graph's outputs have one partition.
	out = append(out, kafkatest.NewTopics(t, brokers, 1, "braid.pollution", "braid.incidents")...)
	if o.maxMessageBytes > 0 {
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		v := fmt.Sprint(o.maxMessageBytes)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, in...)
		cancel()
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("raise max.message.bytes of %v: %v", in, err)
		}
	}
	cfg := &Config{}
	cfg.Kafka.Brokers = brokers
	cfg.Group = "it-" + out[3]
	cfg.InstanceID = "0"
	cfg.State.Dir = t.TempDir()
	cfg.Inputs.Spans = InputConfig{Topic: in[0], Encoding: simulator.EncodingProto}
	cfg.Inputs.Logs = InputConfig{Topic: in[1], Encoding: simulator.EncodingProto}
	cfg.Inputs.Metrics = InputConfig{Topic: in[2], Encoding: simulator.EncodingProto}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = out[0], out[1], out[2]
	cfg.Outputs.Pollution, cfg.Outputs.Incidents = out[4], out[5]
	hostileConfig(cfg)
	if o.mod != nil {
		o.mod(cfg)
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
	popts := []kgo.Opt{kgo.RecordPartitioner(simulator.Partitioner())}
	if o.maxMessageBytes > 0 {
		popts = append(popts, kgo.ProducerBatchMaxBytes(int32(o.maxMessageBytes)))
	}
	tj.prod = kafkatest.Client(t, brokers, popts...)
	go func() { tj.done <- j.Run(ctx) }()
	t.Cleanup(tj.stop)
	return tj
}

// alive fails the test if the job ended or aborted a transaction.
func (tj *testJob) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-tj.done:
		tj.cancel = nil // nothing left to stop
		t.Fatalf("job ended while input flowed: %v", err)
	default:
	}
	if n := tj.job.Engine().Stats().Aborts.Load(); n != 0 {
		t.Fatalf("job aborted %d transactions: a restart of its tasks", n)
	}
}

// hostileMsg is one hostile input record and what must become of it.
type hostileMsg struct {
	rec *kgo.Record
	// traces: trace id (hex) → members of this record with that trace id.
	traces map[string]int
	// requests: request id → trace-less logs naming it (no span ever
	// comes: late as unresolved, or in the DLQ).
	requests map[string]int
	// free: members that may legitimately leave no visible trace (KV
	// events, resource points, trace-less logs without a request id,
	// members cut by a per-trace cap when capped is set).
	free bool
	// capped: the trace's members beyond the per-trace caps are counted
	// (Counters.Truncated), not emitted.
	capped bool
	// group names a subset of a case's records.
	group string
}

// output is everything braid wrote to fused, late and DLQ, read
// read_committed.
type output struct {
	fused, late, dlq, pollution, incidents *reader
}

func (tj *testJob) outputs() *output {
	return &output{fused: tj.reader(tj.cfg.Outputs.Fused), late: tj.reader(tj.cfg.Outputs.Late), dlq: tj.reader(tj.cfg.Outputs.DLQ),
		pollution: tj.reader(tj.cfg.Outputs.Pollution), incidents: tj.reader(tj.cfg.Outputs.Incidents)}
}

// kvgraphDecodes fails on a pollution edge or incident that does not
// decode, or that names a request by a repaired id (U+FFFD in it: the
// input's ids are ASCII): an identity that was invalid UTF-8 is rejected,
// never taken repaired.
func (o *output) kvgraphDecodes(t *testing.T) {
	t.Helper()
	repaired := func(id string) bool { return strings.ContainsRune(id, utf8.RuneError) }
	for _, r := range o.pollution.recs {
		e := &braidpb.PollutionEdge{}
		if err := proto.Unmarshal(r.Value, e); err != nil {
			t.Fatalf("pollution edge %d/%d does not decode: %v", r.Partition, r.Offset, err)
		}
		if repaired(e.SourceRequest) || repaired(e.TargetRequest) {
			t.Fatalf("pollution edge %d/%d names a repaired request id: %q -> %q", r.Partition, r.Offset, e.SourceRequest, e.TargetRequest)
		}
	}
	for _, r := range o.incidents.recs {
		inc := &braidpb.Incident{}
		if err := proto.Unmarshal(r.Value, inc); err != nil {
			t.Fatalf("incident %d/%d does not decode: %v", r.Partition, r.Offset, err)
		}
		if repaired(inc.GetRoot().GetRequestId()) {
			t.Fatalf("incident %d/%d: root request id %q is repaired", r.Partition, r.Offset, inc.GetRoot().GetRequestId())
		}
		for _, p := range inc.Polluted {
			if repaired(p.RequestId) {
				t.Fatalf("incident %d/%d: polluted request id %q is repaired", r.Partition, r.Offset, p.RequestId)
			}
		}
	}
}

func (o *output) poll() {
	for _, r := range []*reader{o.fused, o.late, o.dlq, o.pollution, o.incidents} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := r.cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(rec *kgo.Record) { r.recs = append(r.recs, rec) })
	}
}

// fusedTrace is the latest revision of one trace, its parts joined.
type fusedTrace struct {
	revision            uint32
	spans, logs, points int
	spanIDs             []string
	parts               map[int64]bool
	nparts              int64
}

// partOf reads the part and parts fields of a FusedTrace where the schema
// has them (a fused trace over the record limit is split into parts); 0, 1
// otherwise.
func partOf(ft *braidpb.FusedTrace) (part, parts int64) {
	m := ft.ProtoReflect()
	get := func(name protoreflect.Name) (int64, bool) {
		fd := m.Descriptor().Fields().ByName(name)
		if fd == nil {
			return 0, false
		}
		switch fd.Kind() {
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			return int64(m.Get(fd).Uint()), true
		default:
			return m.Get(fd).Int(), true
		}
	}
	part, _ = get("part")
	parts, ok := get("parts")
	if !ok || parts == 0 {
		parts = 1
	}
	return part, parts
}

// fusedTraces decodes the fused records: per trace the latest revision,
// its parts joined. It fails on a (trace, revision, part) emitted twice and
// on a record that does not decode.
func fusedTraces(t *testing.T, recs []*kgo.Record) map[string]*fusedTrace {
	t.Helper()
	m := map[string]*fusedTrace{}
	seen := map[string]bool{}
	for _, r := range recs {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			t.Fatalf("fused record %d/%d (%d bytes) does not decode: %v", r.Partition, r.Offset, len(r.Value), err)
		}
		part, parts := partOf(&ft)
		id := fmt.Sprintf("%s/%d/%d", r.Key, ft.Revision, part)
		if seen[id] {
			t.Fatalf("fused record %s emitted twice", id)
		}
		seen[id] = true
		if hex.EncodeToString(ft.TraceId) != string(r.Key) {
			t.Fatalf("fused record key %s holds trace %x", r.Key, ft.TraceId)
		}
		k := string(r.Key)
		old := m[k]
		if old == nil || old.revision < ft.Revision {
			old = &fusedTrace{revision: ft.Revision, parts: map[int64]bool{}, nparts: parts}
			m[k] = old
		} else if old.revision > ft.Revision {
			continue
		}
		old.parts[part] = true
		old.spans += len(ft.Spans)
		old.logs += len(ft.Logs)
		old.points += len(ft.Points)
		for _, s := range ft.Spans {
			old.spanIDs = append(old.spanIDs, hex.EncodeToString(s.Span.SpanId))
		}
	}
	return m
}

// whole reports whether every part of the trace's latest revision is in.
func (f *fusedTrace) whole() bool { return int64(len(f.parts)) == f.nparts }

// goodExact reports whether every trace of truth is fused with exactly its
// members; why says what differs.
func goodExact(truth simulator.Truth, got map[string]*fusedTrace) (ok bool, why string) {
	ids := make([]string, 0, len(truth.Traces))
	for id := range truth.Traces {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	missing := 0
	for _, id := range ids {
		tt := truth.Traces[id]
		f := got[id]
		if f == nil {
			missing++
			continue
		}
		if !f.whole() || f.spans != tt.Spans || f.logs != tt.Logs+tt.RequestIDLogs || f.points != tt.ExemplarPoints {
			return false, fmt.Sprintf("trace %s: spans/logs/points %d/%d/%d (parts %d of %d), want %d/%d/%d",
				id, f.spans, f.logs, f.points, len(f.parts), f.nparts, tt.Spans, tt.Logs+tt.RequestIDLogs, tt.ExemplarPoints)
		}
	}
	if missing > 0 {
		return false, fmt.Sprintf("%d of %d good traces not fused", missing, len(ids))
	}
	return true, ""
}

// lateMembers counts the members of late records by key (trace id or
// request id), failing on a record without a reason or one that does not
// decode.
func lateMembers(t *testing.T, recs []*kgo.Record) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, r := range recs {
		if hdrValue(r, "braid.reason") == "" {
			t.Fatalf("late record %s without braid.reason: %v", r.Key, r.Headers)
		}
		m[string(r.Key)] += countLate(t, []*kgo.Record{r})
	}
	return m
}

// lateReasons counts late records by braid.reason, digits elided (a
// lateness reason names the event time and the watermark).
func lateReasons(recs []*kgo.Record) map[string]int {
	m := map[string]int{}
	for _, r := range recs {
		reason := strings.Map(func(c rune) rune {
			if c >= '0' && c <= '9' {
				return -1
			}
			return c
		}, hdrValue(r, "braid.reason"))
		m[reason]++
	}
	return m
}

// dlqByValue indexes the DLQ records by a hash of their value, failing on
// one without the headers.
func dlqByValue(t *testing.T, recs []*kgo.Record) map[[32]byte]*kgo.Record {
	t.Helper()
	m := map[[32]byte]*kgo.Record{}
	for _, r := range recs {
		reason := hdrValue(r, "braid.reason")
		if reason == "" || hdrValue(r, "braid.topic") == "" || hdrValue(r, "braid.partition") == "" || hdrValue(r, "braid.offset") == "" {
			t.Fatalf("DLQ record %s headers: %v", r.Key, r.Headers)
		}
		if !utf8.ValidString(reason) {
			t.Fatalf("DLQ reason %q is not valid UTF-8", reason)
		}
		// "<stage>: <cause>".
		stage, _, _ := strings.Cut(reason, ": ")
		switch stage {
		case "ingest", "resolve", "fuse", "kvgraph", "resources":
		default:
			t.Fatalf("DLQ reason %q does not name a stage (ingest, resolve, fuse, kvgraph, resources)", reason)
		}
		m[sha256.Sum256(r.Value)] = r
	}
	return m
}

func hasReason(recs []*kgo.Record, reason string) bool {
	for _, r := range recs {
		if hdrValue(r, "braid.reason") == reason {
			return true
		}
	}
	return false
}

// accounted reports whether hostile record h is accounted for in the
// output; why says what is missing.
func accounted(h hostileMsg, fused map[string]*fusedTrace, late map[string]int, dlq map[[32]byte]*kgo.Record, truncated int) (bool, string) {
	if _, ok := dlq[sha256.Sum256(h.rec.Value)]; ok {
		return true, ""
	}
	if h.free {
		return true, ""
	}
	for id, n := range h.traces {
		got := late[id]
		if f := fused[id]; f != nil && f.whole() {
			got += f.spans + f.logs + f.points
		}
		if h.capped {
			got += truncated
		}
		if got != n {
			return false, fmt.Sprintf("trace %s: %d of %d members in fused/late (%d truncated), record not in DLQ", id, got, n, truncated)
		}
	}
	for rid, n := range h.requests {
		if late[rid] != n {
			return false, fmt.Sprintf("request %s: %d of %d logs late, record not in DLQ", rid, late[rid], n)
		}
	}
	return true, ""
}

// goodInput is the known good workload: 40 batches (8 s of event time) of
// 4 requests, keyed by trace id, some traces split, logs joined by request
// id, exemplar points; the records of each batch, the last with the
// simulator's flush.
func goodInput(t *testing.T, tj *testJob, seed int64, start time.Time) ([][]*kgo.Record, simulator.Truth) {
	t.Helper()
	sim, err := simulator.New(simulator.Config{Seed: seed, Topics: tj.simTopics(), RequestsPerBatch: 4, SplitRatio: 0.25, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	var batches [][]*kgo.Record
	for range 40 {
		batches = append(batches, toRecords(sim.Next()))
	}
	last := &batches[len(batches)-1]
	*last = append(*last, toRecords(sim.Flush())...)
	return batches, sim.Truth()
}

// producePaced produces one batch per simulator batch interval, as a
// Collector exporting live does: event time advances no faster than the
// record clock. (Many seconds of event time at once is a backlog after a
// lull: an upstream task whose last marker said it was idle does not hold
// a watermark back until its next one, and what it forwards of the burst
// may be behind the watermark.)
func (tj *testJob) producePaced(t *testing.T, batches [][]*kgo.Record) {
	t.Helper()
	next := time.Now()
	for _, b := range batches {
		for time.Now().Before(next) {
			tj.alive(t)
			time.Sleep(time.Until(next)) // the producer's pace, not synchronisation
		}
		tj.produceRecords(t, b)
		next = next.Add(simulator.DefaultBatchInterval)
	}
}

func toRecords(msgs []simulator.Message) []*kgo.Record {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value}
	}
	return recs
}

func (tj *testJob) produceRecords(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Sequentially in batches, so that the records keep their order.
	for len(recs) > 0 {
		n := min(len(recs), 500)
		if err := tj.prod.ProduceSync(ctx, recs[:n]...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		recs = recs[n:]
	}
}

// hostileCase is one kind of hostile input.
type hostileCase struct {
	name string
	opts hostileOpts
	// bad builds the hostile records for the job's topics.
	bad func(t *testing.T, tj *testJob) []hostileMsg
	// lull: the hostile records go first, then nothing for a while (every
	// partition idle), then the good input.
	lull bool
	// within bounds how long the case may take to settle.
	within time.Duration
	// dlqReasons: braid.reason values the DLQ must hold once settled.
	dlqReasons []string
}

func TestIntegrationHostileInput(t *testing.T) {
	cases := []hostileCase{
		{name: "invalid-utf8-in-spans", bad: invalidUTF8("spans")},
		{name: "invalid-utf8-in-kv-events", bad: invalidUTF8("kv"), dlqReasons: []string{"kvgraph: invalid UTF-8 in gen_ai.request.id"}},
		{name: "invalid-utf8-in-logs", bad: invalidUTF8("logs")},
		{name: "future-event-time-then-lull", bad: futureInput, lull: true},
		{name: "extreme-timestamps-then-lull", bad: extremeTimesInput, lull: true},
		{name: "trace-of-50000-spans", bad: hugeTraceInput, within: 2 * time.Minute},
		// Per-trace byte cap raised above the message: the traces are
		// fused whole, in parts over the record limit.
		{name: "message-of-5MB", bad: bigMessageInput, within: 2 * time.Minute,
			opts: hostileOpts{maxMessageBytes: 8 << 20, mod: func(c *Config) { c.Caps.Bytes = 8 << 20 }}},
		{name: "10000-logs-of-a-request-without-span", bad: waitingLogsInput},
		{name: "nested-anyvalue-depth-10000", bad: deepInput},
		{name: "1M-resource-identities", bad: resourceChurnInput, within: 3 * time.Minute},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each case its own job and topics, mostly waiting on the paced producer
			runHostile(t, c, int64(300+i))
		})
	}
}

func runHostile(t *testing.T, c hostileCase, seed int64) {
	tj := startHostileJob(t, c.opts)
	within := c.within
	if within == 0 {
		within = 90 * time.Second
	}
	good, truth := goodInput(t, tj, seed, simulator.DefaultStart)
	bad := c.bad(t, tj)
	var badRecs []*kgo.Record
	for _, b := range bad {
		badRecs = append(badRecs, b.rec)
	}
	if c.lull {
		tj.produceRecords(t, badRecs)
		// The lull: every partition idle for several idleness periods,
		// so that the all-idle rule applies.
		lullUntil := time.Now().Add(3*tj.cfg.EventTime.Idleness + 2*tj.cfg.CheckpointInterval)
		for time.Now().Before(lullUntil) {
			tj.alive(t)
			time.Sleep(100 * time.Millisecond) // the scenario's idle time, polled for liveness
		}
		tj.producePaced(t, good)
	} else {
		// Hostile records in the middle of the good input.
		half := len(good) / 2
		tj.producePaced(t, good[:half])
		tj.produceRecords(t, badRecs)
		tj.producePaced(t, good[half:])
	}

	out := tj.outputs()
	deadline := time.Now().Add(within)
	for {
		tj.alive(t)
		out.poll()
		out.kvgraphDecodes(t)
		fused := fusedTraces(t, out.fused.recs)
		late := lateMembers(t, out.late.recs)
		dlq := dlqByValue(t, out.dlq.recs)
		ok, why := goodExact(truth, fused)
		for _, reason := range c.dlqReasons {
			if ok && !hasReason(out.dlq.recs, reason) {
				ok, why = false, "no DLQ record with reason "+strconv.Quote(reason)
			}
		}
		if ok {
			for _, b := range bad {
				if ok, why = accounted(b, fused, late, dlq, int(tj.job.Counters().Truncated.Load())); !ok {
					break
				}
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within %v: %s (fused %d, late %d, dlq %d records; late reasons %v)%s",
				within, why, len(out.fused.recs), len(out.late.recs), len(out.dlq.recs), lateReasons(out.late.recs), out.fused.describe())
		}
	}

	// Settled: the good traces are exact, none of their members late, the
	// spans by id.
	fused := fusedTraces(t, out.fused.recs)
	late := lateMembers(t, out.late.recs)
	for id, tt := range truth.Traces {
		if late[id] != 0 {
			t.Errorf("good trace %s: %d members late", id, late[id])
		}
		got := append([]string(nil), fused[id].spanIDs...)
		want := append([]string(nil), tt.SpanIDs...)
		sort.Strings(got)
		sort.Strings(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("good trace %s spans %v, want %v", id, got, want)
		}
	}
	for _, r := range out.dlq.recs {
		t.Logf("DLQ %s/%s@%s: %s", hdrValue(r, "braid.topic"), hdrValue(r, "braid.partition"), hdrValue(r, "braid.offset"), hdrValue(r, "braid.reason"))
	}
	reasons := map[string]int{}
	for _, r := range out.late.recs {
		reasons[hdrValue(r, "braid.reason")]++
	}
	tj.alive(t)
	t.Logf("%d good traces exact; %d hostile records accounted; late reasons %v; %d pollution edges, %d incidents",
		len(truth.Traces), len(bad), reasons, len(out.pollution.recs), len(out.incidents.recs))
}

// ---- building hostile records ----

var hostileRand = rand.New(rand.NewPCG(12, 34))

func newTraceID() []byte {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(hostileRand.UintN(256))
	}
	return b
}

func newSpanID() []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(hostileRand.UintN(256))
	}
	return b
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// spansRecord is one TracesData record of n spans of trace tid, keyed by
// the trace id, ending at end; mod edits each span.
func spansRecord(topic string, tid []byte, n int, end time.Time, mod func(i int, s *tracepb.Span)) *kgo.Record {
	spans := make([]*tracepb.Span, n)
	for i := range spans {
		s := &tracepb.Span{
			TraceId: tid, SpanId: newSpanID(), Name: "hostile.op", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: uint64(end.Add(-time.Millisecond).UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
			Attributes: []*commonpb.KeyValue{str("hostile.case", "x")},
		}
		if mod != nil {
			mod(i, s)
		}
		spans[i] = s
	}
	td := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "hostile"), str("service.instance.id", "hostile-0")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "hostile"}, Spans: spans}},
	}}}
	b, err := proto.Marshal(td)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(hex.EncodeToString(tid)), Value: b}
}

// corrupt returns value with every occurrence of s replaced by s with its
// first two bytes made invalid UTF-8 (same length: the protobuf framing
// stays valid). It fails if s does not occur.
func corrupt(t *testing.T, value []byte, s string) []byte {
	t.Helper()
	if len(s) < 2 || !bytes.Contains(value, []byte(s)) {
		t.Fatalf("corrupt: %q not in the record", s)
	}
	bad := []byte(s)
	bad[0], bad[1] = 0xff, 0xfe
	return bytes.ReplaceAll(value, []byte(s), bad)
}

// realistic is a realistic fleet's batches with KV events, on the job's
// topics, event time at the good input's start.
func realistic(t *testing.T, tj *testJob, seed int64) []simulator.Message {
	t.Helper()
	sim, err := simulator.New(simulator.Config{Seed: seed, Realistic: true, KVEvents: true, Hosts: 1, AbortRatio: -1, Topics: tj.simTopics(),
		// Faults, so that the pollution graph writes edges and incidents
		// naming the requests.
		KV: simulator.KVConfig{Faults: []simulator.KVFault{
			{Trigger: simulator.DoubleFree, At: simulator.DefaultStart.Add(time.Second), GPU: -1},
			{Trigger: simulator.PaddingSlotMinus1, At: simulator.DefaultStart, GPU: 1},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []simulator.Message
	for range 60 {
		msgs = append(msgs, sim.Next()...)
	}
	return msgs
}

func attr(kvs []*commonpb.KeyValue, k string) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// invalidUTF8Input corrupts, in real records of the realistic fleet, every
// string field a stage reads: span names, attribute keys and values,
// gen_ai.request.id and gen_ai.request.model on spans, resource attributes,
// gen_ai.request.id on KV-event logs, log bodies and the request ids of
// engine logs.
func invalidUTF8(which string) func(t *testing.T, tj *testJob) []hostileMsg {
	return func(t *testing.T, tj *testJob) []hostileMsg {
		var out []hostileMsg
		for _, h := range invalidUTF8Input(t, tj) {
			if h.group == which {
				out = append(out, h)
			}
		}
		return out
	}
}

func invalidUTF8Input(t *testing.T, tj *testJob) []hostileMsg {
	msgs := realistic(t, tj, 901)
	var out []hostileMsg
	var spanMsgs, kvMsgs, engineMsgs []simulator.Message
	for _, m := range msgs {
		switch {
		case m.Topic == tj.cfg.Inputs.Spans.Topic && m.Key != nil:
			spanMsgs = append(spanMsgs, m)
		case m.Topic == tj.cfg.Inputs.Logs.Topic && m.Key != nil:
			kvMsgs = append(kvMsgs, m)
		case m.Topic == tj.cfg.Inputs.Logs.Topic:
			engineMsgs = append(engineMsgs, m)
		}
	}
	// A span message each: the corruption and the string it picks.
	pick := []struct {
		what string
		str  func(td *tracepb.TracesData) string
	}{
		{"span name", func(td *tracepb.TracesData) string { return td.ResourceSpans[0].ScopeSpans[0].Spans[0].Name }},
		{"attribute key", func(td *tracepb.TracesData) string {
			for _, s := range td.ResourceSpans[0].ScopeSpans[0].Spans {
				if len(s.Attributes) > 0 {
					return s.Attributes[0].Key
				}
			}
			return ""
		}},
		{"gen_ai.request.model", func(td *tracepb.TracesData) string { return spanAttr(td, "gen_ai.request.model") }},
		{"gen_ai.request.id on a span", func(td *tracepb.TracesData) string { return spanAttr(td, "gen_ai.request.id") }},
		{"gen_ai.operation.name value", func(td *tracepb.TracesData) string { return spanAttr(td, "gen_ai.operation.name") }},
		{"resource service.instance.id", func(td *tracepb.TracesData) string {
			return attr(td.ResourceSpans[0].Resource.Attributes, "service.instance.id")
		}},
		{"resource gpu.uuid", func(td *tracepb.TracesData) string {
			return attr(td.ResourceSpans[0].Resource.Attributes, "gpu.uuid")
		}},
	}
	if len(spanMsgs) < len(pick) || len(kvMsgs) == 0 || len(engineMsgs) == 0 {
		t.Fatalf("realistic fleet: %d span, %d KV, %d engine-log messages", len(spanMsgs), len(kvMsgs), len(engineMsgs))
	}
	for i, p := range pick {
		m := spanMsgs[i]
		var td tracepb.TracesData
		if err := proto.Unmarshal(m.Value, &td); err != nil {
			t.Fatal(err)
		}
		s := p.str(&td)
		if s == "" {
			t.Fatalf("span message %s has no %s", m.Key, p.what)
		}
		n := 0
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: m.Topic, Key: m.Key, Value: corrupt(t, m.Value, s)},
			traces: map[string]int{string(m.Key): n}, group: "spans"})
	}
	// KV events: every request id of every KV-event record, and an op
	// name. A KV event need not reach the fused output, but the pollution
	// edges and incidents naming those requests must decode.
	for i, m := range kvMsgs {
		var ld logspb.LogsData
		if err := proto.Unmarshal(m.Value, &ld); err != nil {
			t.Fatal(err)
		}
		v := m.Value
		rids := map[string]bool{}
		for _, rl := range ld.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					if rid := attr(lr.Attributes, "gen_ai.request.id"); len(rid) >= 2 {
						rids[rid] = true
					}
				}
			}
		}
		for rid := range rids {
			v = corrupt(t, v, rid)
		}
		if i == 0 {
			v = corrupt(t, v, "alloc")
		}
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: m.Topic, Key: m.Key, Value: v}, free: true, group: "kv"})
	}
	// Engine logs (no trace id): the request id in the first record that
	// names one, and every body. Those naming a request whose span never
	// comes end late; the others stay unjoined.
	{
		m := engineMsgs[0]
		var ld logspb.LogsData
		if err := proto.Unmarshal(m.Value, &ld); err != nil {
			t.Fatal(err)
		}
		v := m.Value
		var body string
		for _, rl := range ld.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					if b := lr.Body.GetStringValue(); len(b) >= 2 && body == "" {
						body = b
					}
				}
			}
		}
		if body == "" {
			t.Fatal("engine logs without a body")
		}
		v = corrupt(t, v, body)
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: m.Topic, Key: m.Key, Value: v}, free: true, group: "logs"})
	}
	// A hand-made log with a trace id: body, attribute key and value and
	// resource attribute invalid.
	{
		tid := newTraceID()
		ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "RESOURCEVALUE")}},
			ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "SCOPENAME"}, LogRecords: []*logspb.LogRecord{{
				TimeUnixNano: uint64(simulator.DefaultStart.Add(time.Second).UnixNano()), TraceId: tid, SpanId: newSpanID(),
				Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "LOGBODY"}},
				Attributes: []*commonpb.KeyValue{str("ATTRKEY", "ATTRVALUE"), str("gen_ai.request.id", "REQUESTID")},
			}}}},
		}}}
		v, err := proto.Marshal(ld)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"RESOURCEVALUE", "SCOPENAME", "LOGBODY", "ATTRKEY", "ATTRVALUE", "REQUESTID"} {
			v = corrupt(t, v, s)
		}
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: tj.cfg.Inputs.Logs.Topic, Key: []byte(hex.EncodeToString(tid)), Value: v},
			traces: map[string]int{hex.EncodeToString(tid): 1}, group: "logs"})
	}
	return out
}

func spanAttr(td *tracepb.TracesData, k string) string {
	for _, rs := range td.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if v := attr(s.Attributes, k); v != "" {
					return v
				}
			}
		}
	}
	return ""
}

// futureInput is one span stamped a year after the broker's clock.
func futureInput(t *testing.T, tj *testJob) []hostileMsg {
	tid := newTraceID()
	r := spansRecord(tj.cfg.Inputs.Spans.Topic, tid, 1, time.Now().AddDate(1, 0, 0), nil)
	return []hostileMsg{{rec: r, traces: map[string]int{hex.EncodeToString(tid): 1}}}
}

// extremeTimesInput: spans at event time 0, at the largest int64, at the
// largest uint64, far in the past, and a span ending before it starts.
func extremeTimesInput(t *testing.T, tj *testJob) []hostileMsg {
	var out []hostileMsg
	add := func(start, end uint64) {
		tid := newTraceID()
		r := spansRecord(tj.cfg.Inputs.Spans.Topic, tid, 1, simulator.DefaultStart, func(_ int, s *tracepb.Span) {
			s.StartTimeUnixNano, s.EndTimeUnixNano = start, end
		})
		out = append(out, hostileMsg{rec: r, traces: map[string]int{hex.EncodeToString(tid): 1}})
	}
	add(0, 0)
	add(math.MaxInt64, math.MaxInt64)
	add(math.MaxUint64, math.MaxUint64)
	add(uint64(time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()), uint64(time.Date(1971, 1, 1, 0, 0, 1, 0, time.UTC).UnixNano()))
	// Ending before it starts (no later than the good input's start, so
	// that it cannot hold the watermark ahead of it).
	ds := uint64(simulator.DefaultStart.UnixNano())
	add(ds, ds-uint64(time.Second))
	// A log at the largest int64 and one at 0 with their trace ids.
	for _, ts := range []uint64{math.MaxInt64, 0} {
		tid := newTraceID()
		ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
			TimeUnixNano: ts, ObservedTimeUnixNano: ts, TraceId: tid,
			Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "extreme"}},
		}}}}}}}
		v, _ := proto.Marshal(ld)
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: tj.cfg.Inputs.Logs.Topic, Key: []byte(hex.EncodeToString(tid)), Value: v},
			traces: map[string]int{hex.EncodeToString(tid): 1}})
	}
	return out
}

// hugeTraceInput is one trace of 50,000 spans in 50 records of 1,000
// (Collector batches). Members beyond the per-trace caps are counted, not
// emitted.
func hugeTraceInput(t *testing.T, tj *testJob) []hostileMsg {
	tid := newTraceID()
	var out []hostileMsg
	for i := range 50 {
		r := spansRecord(tj.cfg.Inputs.Spans.Topic, tid, 1000, simulator.DefaultStart.Add(time.Duration(i)*10*time.Millisecond), nil)
		h := hostileMsg{rec: r}
		if i == 0 {
			// The whole trace is checked once, on its first record.
			h.traces = map[string]int{hex.EncodeToString(tid): 50_000}
			h.capped = true
		} else {
			h.free = true
		}
		out = append(out, h)
	}
	return out
}

// bigMessageInput is one 5 MB unkeyed record (the exporter's default)
// holding two traces of 250 spans of 10 KB each whose home partitions
// differ, so that at least one is repartitioned whole, on a topic that
// accepts the record. The traces are good input: fused whole.
func bigMessageInput(t *testing.T, tj *testJob) []hostileMsg {
	a, b := newTraceID(), newTraceID()
	for simulator.KeyPartition([]byte(hex.EncodeToString(a)), 4) == simulator.KeyPartition([]byte(hex.EncodeToString(b)), 4) {
		b = newTraceID()
	}
	pad := strings.Repeat("p", 10_000)
	payload := func(_ int, s *tracepb.Span) { s.Attributes = append(s.Attributes, str("payload", pad)) }
	ra := spansRecord(tj.cfg.Inputs.Spans.Topic, a, 250, simulator.DefaultStart.Add(time.Second), payload)
	rb := spansRecord(tj.cfg.Inputs.Spans.Topic, b, 250, simulator.DefaultStart.Add(time.Second), payload)
	var ta, tb tracepb.TracesData
	if err := proto.Unmarshal(ra.Value, &ta); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(rb.Value, &tb); err != nil {
		t.Fatal(err)
	}
	ta.ResourceSpans = append(ta.ResourceSpans, tb.ResourceSpans...)
	v, err := proto.Marshal(&ta)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) < 5_000_000 {
		t.Fatalf("big message is %d bytes", len(v))
	}
	return []hostileMsg{{rec: &kgo.Record{Topic: tj.cfg.Inputs.Spans.Topic, Value: v},
		traces: map[string]int{hex.EncodeToString(a): 250, hex.EncodeToString(b): 250}}}
}

// waitingLogsInput: 10,000 engine logs (10 records of 1,000) naming one
// request id whose span never comes. They wait for it, then go late
// ("unresolved request id") or are evicted late ("memory budget").
func waitingLogsInput(t *testing.T, tj *testJob) []hostileMsg {
	rid := "cmpl-" + hex.EncodeToString(newTraceID())
	var out []hostileMsg
	for i := range 10 {
		lrs := make([]*logspb.LogRecord, 1000)
		for j := range lrs {
			ts := uint64(simulator.DefaultStart.Add(time.Duration(i*1000+j) * 50 * time.Microsecond).UnixNano())
			lrs[j] = &logspb.LogRecord{TimeUnixNano: ts, ObservedTimeUnixNano: ts,
				Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: fmt.Sprintf("Finished request %s step %d", rid, i*1000+j)}},
				Attributes: []*commonpb.KeyValue{str("gen_ai.request.id", rid)},
			}
		}
		ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{
			Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "vllm"), str("service.instance.id", "gpu-node-09:8000")}},
			ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "vllm"}, LogRecords: lrs}},
		}}}
		v, err := proto.Marshal(ld)
		if err != nil {
			t.Fatal(err)
		}
		h := hostileMsg{rec: &kgo.Record{Topic: tj.cfg.Inputs.Logs.Topic, Value: v}, free: true}
		if i == 0 {
			h.free = false
			h.requests = map[string]int{rid: 10_000}
		}
		out = append(out, h)
	}
	// Accounted as a whole on the first record unless every record is in
	// the DLQ.
	return out
}

// deepInput is a span with an attribute whose AnyValue nests 10,000
// arrays deep, and a log whose body does the same with key-value lists.
func deepInput(t *testing.T, tj *testJob) []hostileMsg {
	tid := newTraceID()
	base := spansRecord(tj.cfg.Inputs.Spans.Topic, tid, 1, simulator.DefaultStart.Add(time.Second), nil)
	var td tracepb.TracesData
	if err := proto.Unmarshal(base.Value, &td); err != nil {
		t.Fatal(err)
	}
	span, err := proto.Marshal(td.ResourceSpans[0].ScopeSpans[0].Spans[0])
	if err != nil {
		t.Fatal(err)
	}
	// AnyValue: string_value = 1, array_value = 5, kvlist_value = 6;
	// ArrayValue.values = 1; KeyValueList.values = 1 (KeyValue: key 1,
	// value 2).
	deepArray := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "leaf")
	deepList := deepArray
	for range 10_000 {
		arr := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), deepArray)
		deepArray = protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), arr)
		kv := protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k"), 2, protowire.BytesType), deepList)
		list := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), kv)
		deepList = protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), list)
	}
	kv := protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "deep"), 2, protowire.BytesType), deepArray)
	span = protowire.AppendBytes(protowire.AppendTag(span, 9, protowire.BytesType), kv) // Span.attributes = 9
	wrap := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	// TracesData.resource_spans 1 → ResourceSpans.scope_spans 2 →
	// ScopeSpans.spans 2.
	spansV := wrap(1, wrap(2, wrap(2, span)))

	ltid := newTraceID()
	lr := &logspb.LogRecord{TimeUnixNano: uint64(simulator.DefaultStart.Add(time.Second).UnixNano()), TraceId: ltid}
	lb, err := proto.Marshal(lr)
	if err != nil {
		t.Fatal(err)
	}
	lb = protowire.AppendBytes(protowire.AppendTag(lb, 5, protowire.BytesType), deepList) // LogRecord.body = 5
	// LogsData.resource_logs 1 → ResourceLogs.scope_logs 2 →
	// ScopeLogs.log_records 2.
	logsV := wrap(1, wrap(2, wrap(2, lb)))
	return []hostileMsg{
		{rec: &kgo.Record{Topic: tj.cfg.Inputs.Spans.Topic, Key: []byte(hex.EncodeToString(tid)), Value: spansV}, traces: map[string]int{hex.EncodeToString(tid): 1}},
		{rec: &kgo.Record{Topic: tj.cfg.Inputs.Logs.Topic, Key: []byte(hex.EncodeToString(ltid)), Value: logsV}, traces: map[string]int{hex.EncodeToString(ltid): 1}},
	}
}

// resourceChurnInput is 1,000,000 distinct resource identities (pods
// coming and going), each with one KV-cache usage gauge point, in records
// of 10,000 resources.
func resourceChurnInput(t *testing.T, tj *testJob) []hostileMsg {
	var out []hostileMsg
	ts := uint64(simulator.DefaultStart.Add(time.Second).UnixNano())
	for r := range 100 {
		rms := make([]*metricspb.ResourceMetrics, 10_000)
		for i := range rms {
			id := r*10_000 + i
			rms[i] = &metricspb.ResourceMetrics{
				Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.instance.id", fmt.Sprintf("pod-%07d:8000", id))}},
				ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{{
					Name: "vllm:kv_cache_usage_perc",
					Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
						TimeUnixNano: ts, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 0.5},
					}}}},
				}}}},
			}
		}
		v, err := proto.Marshal(&metricspb.MetricsData{ResourceMetrics: rms})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, hostileMsg{rec: &kgo.Record{Topic: tj.cfg.Inputs.Metrics.Topic, Value: v}, free: true})
	}
	return out
}
