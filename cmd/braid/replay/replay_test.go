package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/arrowexport"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/state"
)

func TestReplayParseBounds(t *testing.T) {
	b, err := ParseFrom("2026-01-02T15:04:05.5Z")
	if err != nil || !b.Time.Equal(time.Date(2026, 1, 2, 15, 4, 5, 5e8, time.UTC)) {
		t.Fatalf("time: %+v %v", b, err)
	}
	b, err = ParseFrom("otlp_spans:0:10, otlp_logs:3:0,my.topic-x:12:99")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]int64{"otlp_spans": {0: 10}, "otlp_logs": {3: 0}, "my.topic-x": {12: 99}}
	if fmt.Sprint(b.Offsets) != fmt.Sprint(want) {
		t.Fatalf("offsets %v, want %v", b.Offsets, want)
	}
	if s := b.String(); s != "my.topic-x:12:99,otlp_logs:3:0,otlp_spans:0:10" {
		t.Fatalf("String %q", s)
	}
	for _, s := range []string{"earliest"} {
		if b, err := ParseFrom(s); err != nil || !b.IsZero() {
			t.Errorf("ParseFrom(%q) = %+v, %v", s, b, err)
		}
	}
	for _, s := range []string{"", "latest"} {
		if b, err := ParseTo(s); err != nil || !b.IsZero() {
			t.Errorf("ParseTo(%q) = %+v, %v", s, b, err)
		}
	}
	for _, s := range []string{"", "yesterday", "2026-01-02 15:04", "2026-13-01T00:00:00Z", "t:0", "t:x:1", "t:0:-1", "t:-1:0", ":0:1", "t:0:1,t:0:2", "1969-12-31T00:00:00Z", "latest"} {
		if _, err := ParseFrom(s); err == nil {
			t.Errorf("ParseFrom(%q) accepted", s)
		}
	}
	if _, err := ParseTo("earliest"); err == nil {
		t.Error(`ParseTo("earliest") accepted`)
	}
}

func TestReplayParseOutput(t *testing.T) {
	for s, want := range map[string]Output{
		"topic:replay.out":  {Topic: "replay.out"},
		"/tmp/x.parquet":    {Path: "/tmp/x.parquet", Format: arrowexport.FormatParquet},
		"inc-42.arrow":      {Path: "inc-42.arrow", Format: arrowexport.FormatArrow},
		"dir/INC.PARQUET":   {Path: "dir/INC.PARQUET", Format: arrowexport.FormatParquet},
		"dir/trace.feather": {Path: "dir/trace.feather", Format: arrowexport.FormatArrow},
	} {
		got, err := ParseOutput(s)
		if err != nil || got != want {
			t.Errorf("ParseOutput(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "topic:", "topic:a b", "out.csv", "out"} {
		if _, err := ParseOutput(s); err == nil {
			t.Errorf("ParseOutput(%q) accepted", s)
		}
	}
}

// fakeFetcher serves records of several partitions in random chunks, as
// fetches arrive from several brokers in any order. Pausing a partition
// drops what it would have served next and rewinds it a little, as
// franz-go drops buffered data of a paused partition and fetches it again.
type fakeFetcher struct {
	rng      *rand.Rand
	maxChunk int // records per partition per poll, default 300
	parts    []*fakePart
	paused   map[tp]bool
	polls    int
	pauses   int
}

type fakePart struct {
	tp   tp
	recs []*kgo.Record
	at   int
}

func (f *fakeFetcher) poll(ctx context.Context) ([]fetched, error) {
	f.polls++
	var ready []*fakePart
	for _, p := range f.parts {
		if p.at < len(p.recs) && !f.paused[p.tp] {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.rng.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
	var out []fetched
	for _, p := range ready[:1+f.rng.IntN(len(ready))] {
		n := min(1+f.rng.IntN(cmp.Or(f.maxChunk, 300)), len(p.recs)-p.at)
		out = append(out, fetched{topic: p.tp.topic, partition: p.tp.partition, recs: p.recs[p.at : p.at+n]})
		p.at += n
	}
	return out, nil
}

func (f *fakeFetcher) pause(topic string, p int32) {
	f.pauses++
	f.paused[tp{topic, p}] = true
	for _, fp := range f.parts {
		if fp.tp == (tp{topic, p}) {
			fp.at = max(0, fp.at-f.rng.IntN(50)) // refetched later
		}
	}
}

func (f *fakeFetcher) resume(topic string, p int32) { delete(f.paused, tp{topic, p}) }

// offlineInput lays simulator messages out on partitions as the Collector
// and Kafka would: keyed messages by the key's hash, unkeyed ones sticky
// per batch; record timestamps = the batch's export time.
type offlineInput struct {
	topics     []string
	partitions int32
	recs       map[tp][]*kgo.Record
}

func newOfflineInput(topics []string, partitions int32) *offlineInput {
	return &offlineInput{topics: topics, partitions: partitions, recs: map[tp][]*kgo.Record{}}
}

func (in *offlineInput) add(msgs []simulator.Message, ts time.Time, sticky int32) {
	for _, m := range msgs {
		p := sticky % in.partitions
		if m.Key != nil {
			p = int32(simulator.KeyPartition(m.Key, int(in.partitions)))
		}
		k := tp{m.Topic, p}
		in.recs[k] = append(in.recs[k], &kgo.Record{Topic: m.Topic, Partition: p, Key: m.Key, Value: m.Value,
			Offset: int64(len(in.recs[k])), Timestamp: ts})
	}
}

func (in *offlineInput) ranges() []PartitionRange {
	var out []PartitionRange
	for i, t := range in.topics {
		for p := range in.partitions {
			out = append(out, PartitionRange{Topic: t, Input: i, Partition: p, From: 0, To: int64(len(in.recs[tp{t, p}]))})
		}
	}
	return out
}

// fetcher serves copies of the records (the pipeline sets fields).
func (in *offlineInput) fetcher(seed uint64) *fakeFetcher {
	f := &fakeFetcher{rng: rand.New(rand.NewPCG(seed, 1)), paused: map[tp]bool{}}
	for _, t := range in.topics {
		for p := range in.partitions {
			var recs []*kgo.Record
			for _, r := range in.recs[tp{t, p}] {
				c := *r
				recs = append(recs, &c)
			}
			f.parts = append(f.parts, &fakePart{tp: tp{t, p}, recs: recs})
		}
	}
	return f
}

// runOffline runs the reader and the pipeline over in, as Run does with
// Kafka, and returns the fused records.
func runOffline(t *testing.T, in *offlineInput, f fetcher, checkpointRecords int) ([]*kgo.Record, *fuse.Counters) {
	t.Helper()
	stage, err := fuse.New(fuse.Config{
		Sources: []fuse.Source{
			{Topic: in.topics[0], Signal: otlp.SignalSpans, Encoding: otlp.EncodingProto},
			{Topic: in.topics[1], Signal: otlp.SignalLogs, Encoding: otlp.EncodingProto},
			{Topic: in.topics[2], Signal: otlp.SignalMetrics, Encoding: otlp.EncodingProto},
		},
		Partitions:     in.partitions,
		IdleGap:        time.Second,
		FlushAfter:     -1,
		RequestIDs:     semconv.DefaultRequestIDs(),
		ResourcesTopic: "replay.resources",
	})
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(state.Options{Dir: t.TempDir(), MemoryBudget: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var out []*kgo.Record
	pl := newPipeline(pipelineConfig{
		stage: stage, store: store, outOfOrderness: time.Second, idleness: 5 * time.Second,
		checkpointRecords: checkpointRecords, checkpointEvery: time.Second,
		sink: func(r *kgo.Record) error {
			if r.Topic == stage.Config().FusedTopic {
				out = append(out, r)
			}
			return nil
		},
	})
	defer pl.close()
	rd := newReader(f, in.ranges(), 5*time.Second)
	for {
		rec, input, err := rd.next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rec == nil {
			break
		}
		if err := pl.feed(input, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := pl.finish(); err != nil {
		t.Fatal(err)
	}
	if d, total := rd.progress(); d != total {
		t.Errorf("progress %d of %d at the end", d, total)
	}
	return out, stage.Counters()
}

func simulate(t *testing.T, in *offlineInput, seed int64, keying simulator.Keying, start time.Time, batches int) simulator.Truth {
	t.Helper()
	sim, err := simulator.New(simulator.Config{Seed: seed, Keying: keying, Start: start, RequestsPerBatch: 10, SplitRatio: 0.3,
		Disorder: 300 * time.Millisecond, Topics: simulator.Topics{Spans: in.topics[0], Logs: in.topics[1], Metrics: in.topics[2]}})
	if err != nil {
		t.Fatal(err)
	}
	for b := range batches {
		msgs := sim.Next()
		in.add(msgs, sim.EventTime(), int32(b))
	}
	in.add(sim.Flush(), sim.EventTime().Add(200*time.Millisecond), int32(batches))
	return sim.Truth()
}

func checkComplete(t *testing.T, truth simulator.Truth, recs []*kgo.Record) {
	t.Helper()
	got := map[string]*braidpb.FusedTrace{}
	for _, r := range recs {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(ft.TraceId) != string(r.Key) {
			t.Fatalf("key %s holds trace %x", r.Key, ft.TraceId)
		}
		if old := got[string(r.Key)]; old == nil || old.Revision < ft.Revision {
			got[string(r.Key)] = &ft
		}
	}
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
	if len(got) != len(truth.Traces) {
		t.Errorf("%d traces fused, want %d", len(got), len(truth.Traces))
	}
}

// TestReplayOfflineDeterministic runs the merge and the pipeline without
// Kafka over Collector-shaped input, keyed and unkeyed (so trace groups and
// watermark markers go through the in-memory repartitioning), with fetches
// arriving in different random chunks and orders, pauses and refetches:
// the fused records are identical, byte for byte and in order, and every
// trace is complete.
func TestReplayOfflineDeterministic(t *testing.T) {
	topics := []string{"spans", "logs", "metrics"}
	in := newOfflineInput(topics, 4)
	truth := simulate(t, in, 1, simulator.Unkeyed, simulator.DefaultStart, 60)
	// A second workload, keyed, an hour later: sparse record time in between.
	truth2 := simulate(t, in, 2, simulator.KeyByTraceID, simulator.DefaultStart.Add(time.Hour), 60)
	for id, tt := range truth2.Traces {
		truth.Traces[id] = tt
	}
	// Pausing must happen: make one partition's queue long.
	var ref []*kgo.Record
	for i, seed := range []uint64{1, 2, 3} {
		f := in.fetcher(seed)
		f.maxChunk = []int{300, 3, 20}[i]
		got, c := runOffline(t, in, f, 1000)
		if i == 0 {
			checkComplete(t, truth, got)
			if c.Repartitioned.Load() == 0 || c.Local.Load() == 0 {
				t.Fatalf("workload does not repartition: local %d repartitioned %d", c.Local.Load(), c.Repartitioned.Load())
			}
			if c.Late.Load() != 0 || c.DLQ.Load() != 0 {
				t.Errorf("late %d dlq %d", c.Late.Load(), c.DLQ.Load())
			}
			ref = got
			t.Logf("%d fused records (%d revisions), %d polls", len(got), c.Revisions.Load(), f.polls)
			continue
		}
		t.Logf("run %d: %d polls", i, f.polls)
		if len(got) != len(ref) {
			t.Fatalf("run %d: %d fused records, want %d", i, len(got), len(ref))
		}
		for j := range got {
			if !bytes.Equal(got[j].Key, ref[j].Key) || !bytes.Equal(got[j].Value, ref[j].Value) || fmt.Sprint(got[j].Headers) != fmt.Sprint(ref[j].Headers) {
				t.Fatalf("run %d: record %d differs (%s vs %s)", i, j, got[j].Key, ref[j].Key)
			}
		}
	}
}

// TestReplayMergeOrder checks the merge alone: the order is (timestamp,
// topic index, partition, offset) whatever the fetch chunking and pauses;
// control records are skipped but end a range; records past the range are
// dropped.
func TestReplayMergeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	base := time.Unix(1_800_000_000, 0)
	in := newOfflineInput([]string{"a", "b", "c"}, 3)
	var ranges []PartitionRange
	for i, topic := range in.topics {
		for p := range in.partitions {
			k := tp{topic, p}
			n := 2000 + rng.IntN(6000)
			ts := base
			for o := range n {
				// Timestamps mostly rising, sometimes going back.
				ts = ts.Add(time.Duration(rng.IntN(5)-1) * time.Millisecond)
				in.recs[k] = append(in.recs[k], &kgo.Record{Topic: topic, Partition: p, Offset: int64(o), Timestamp: ts, Value: make([]byte, rng.IntN(2000))})
			}
			to := int64(n)
			switch (i*3 + int(p)) % 3 {
			case 0: // the range ends with a commit marker
				in.recs[k] = append(in.recs[k], &kgo.Record{Topic: topic, Partition: p, Offset: int64(n), Timestamp: ts, Attrs: controlAttrs()})
				to = int64(n) + 1
			case 1: // more records after the range
				to = int64(n - 500)
			}
			ranges = append(ranges, PartitionRange{Topic: topic, Input: i, Partition: p, From: 100, To: to})
		}
	}
	// Not a sort: records of one partition whose timestamps go back stay
	// in offset order. The reference merge takes the smallest head.
	want := referenceMerge(in, ranges)
	for seed := range uint64(4) {
		f := &fakeFetcher{rng: rand.New(rand.NewPCG(seed, 2)), paused: map[tp]bool{}}
		for _, r := range ranges {
			// Fetching starts at From, as ConsumePartitions does.
			f.parts = append(f.parts, &fakePart{tp: tp{r.Topic, r.Partition}, recs: in.recs[tp{r.Topic, r.Partition}][r.From:]})
		}
		rd := newReader(f, ranges, 5*time.Second)
		var got []*kgo.Record
		for {
			rec, input, err := rd.next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rec == nil {
				break
			}
			if in.topics[input] != rec.Topic {
				t.Fatalf("input %d for a record of %s", input, rec.Topic)
			}
			got = append(got, rec)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d records, want %d", seed, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("seed %d: record %d is %s/%d@%d, want %s/%d@%d", seed, i, got[i].Topic, got[i].Partition, got[i].Offset, want[i].Topic, want[i].Partition, want[i].Offset)
			}
		}
		if f.pauses == 0 {
			t.Errorf("seed %d: no partition was paused", seed)
		}
		if d, total := rd.progress(); d != total {
			t.Errorf("progress %d of %d at the end", d, total)
		}
	}
}

func controlAttrs() kgo.RecordAttrs {
	return kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true, Transactional: true})
}

// referenceMerge merges the ranges' sequences by repeatedly taking the
// smallest head: the definition the reader implements.
func referenceMerge(in *offlineInput, ranges []PartitionRange) []*kgo.Record {
	type seq struct {
		input int
		recs  []*kgo.Record
	}
	var seqs []*seq
	for _, r := range ranges {
		s := &seq{input: r.Input}
		for _, rec := range in.recs[tp{r.Topic, r.Partition}] {
			if rec.Offset >= r.From && rec.Offset < r.To && !rec.Attrs.IsControl() {
				s.recs = append(s.recs, rec)
			}
		}
		seqs = append(seqs, s)
	}
	var out []*kgo.Record
	for {
		var best *seq
		for _, s := range seqs {
			if len(s.recs) == 0 {
				continue
			}
			if best == nil {
				best = s
				continue
			}
			a, b := s.recs[0], best.recs[0]
			if a.Timestamp.Before(b.Timestamp) || a.Timestamp.Equal(b.Timestamp) && (s.input < best.input || s.input == best.input && a.Partition < b.Partition) {
				best = s
			}
		}
		if best == nil {
			return out
		}
		out = append(out, best.recs[0])
		best.recs = best.recs[1:]
	}
}

// TestReplayStall: a partition that cannot deliver the end of its range
// fails with a message naming it instead of hanging.
func TestReplayStall(t *testing.T) {
	in := newOfflineInput([]string{"a", "b", "c"}, 1)
	in.recs[tp{"a", 0}] = []*kgo.Record{{Topic: "a", Offset: 0, Timestamp: time.Unix(1, 0)}}
	ranges := []PartitionRange{{Topic: "a", Partition: 0, From: 0, To: 5}, {Topic: "b", Input: 1}, {Topic: "c", Input: 2}}
	f := in.fetcher(1)
	rd := newReader(f, ranges, 300*time.Millisecond)
	_, _, err := rd.next(context.Background())
	if err != nil {
		t.Fatalf("first record: %v", err)
	}
	_, _, err = rd.next(context.Background())
	if err == nil || !strings.Contains(err.Error(), "a:0 at offset 1 of [0, 5)") {
		t.Fatalf("err = %v", err)
	}
}
