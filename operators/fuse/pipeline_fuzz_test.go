package fuse

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/state"
)

// FuzzPipeline runs arbitrary input records through decode and the whole
// fuse topology (ingest, resolve, fuse, kvgraph, resources) on two tasks
// driven by engine.Harness, the internal topics routed between them, with
// checkpoints along the way and the watermark at the end of time at the
// end. Nothing may stop a task (no error, no panic), and every record it
// writes must decode with proto.Unmarshal: fused traces, pollution edges,
// incidents, and the one-item OTLP messages of the late topic; DLQ records
// carry a valid UTF-8 reason.
//
// The input is a sequence of records, each: a byte choosing the source
// (spans, logs, metrics) and its key (none or the first 16 bytes of the
// value, hex), a uvarint length, the value. The first byte of the whole
// input chooses the sources' encoding (proto or JSON).
func FuzzPipeline(f *testing.F) {
	for _, seed := range pipelineSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		enc := otlp.EncodingProto
		if in[0]&1 == 1 {
			enc = otlp.EncodingJSON
		}
		recs := splitPipelineInput(in[1:])
		if len(recs) == 0 {
			return
		}
		runPipeline(t, enc, recs)
	})
}

type pipelineRecord struct {
	source int // 0 spans, 1 logs, 2 metrics
	keyed  bool
	key    []byte // 16 bytes, written as 32 hex characters (a trace id)
	value  []byte
}

// splitPipelineInput parses the fuzz input's framing, stopping at the
// first incomplete record; at most 64 records.
func splitPipelineInput(b []byte) []pipelineRecord {
	var out []pipelineRecord
	for len(b) > 1 && len(out) < 64 {
		sel := b[0]
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n > uint64(len(b)-1-k) {
			break
		}
		r := pipelineRecord{source: int(sel%6) % 3, keyed: sel%6 >= 3, value: b[1+k : 1+k+int(n)]}
		if r.keyed && len(r.value) >= 16 {
			r.key, r.value = r.value[:16], r.value[16:]
		} else {
			r.keyed = false
		}
		out = append(out, r)
		b = b[1+k+int(n):]
	}
	return out
}

// joinPipelineInput is the inverse of splitPipelineInput.
func joinPipelineInput(json bool, recs []pipelineRecord) []byte {
	out := []byte{0}
	if json {
		out[0] = 1
	}
	for _, r := range recs {
		sel := byte(r.source)
		if r.keyed {
			sel += 3
		}
		out = append(out, sel)
		if r.keyed {
			out = binary.AppendUvarint(out, uint64(16+len(r.value)))
			out = append(out, r.key...)
		} else {
			out = binary.AppendUvarint(out, uint64(len(r.value)))
		}
		out = append(out, r.value...)
	}
	return out
}

func runPipeline(t *testing.T, enc otlp.Encoding, recs []pipelineRecord) map[string]int {
	const partitions = 2
	st, err := New(Config{
		Partitions: partitions, IdleGap: time.Second, AllowedLateness: 10 * time.Second,
		ResourcesTopic: "braid.resources",
		Sources: []Source{
			{Topic: "otlp_spans", Signal: otlp.SignalSpans, Encoding: enc},
			{Topic: "otlp_logs", Signal: otlp.SignalLogs, Encoding: enc},
			{Topic: "otlp_metrics", Signal: otlp.SignalMetrics, Encoding: enc},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.Config()
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	topo := st.Topology()
	internal := map[string]int{}
	for i, in := range topo.Inputs {
		if in.Internal {
			internal[in.Topic] = i
		}
	}
	// Processing time (and so the records' broker timestamps) after every
	// seed's event time: the simulator's start and the real fixtures'
	// capture (2026-11-29); a mutated time beyond it is "future".
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hs := make([]*engine.Harness, partitions)
	for p := range hs {
		h, err := engine.NewHarness(engine.Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Second}, topo, int32(p), now)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hs[p] = h
	}
	var out []*kgo.Record
	var drain func(p int)
	drain = func(p int) {
		h := hs[p]
		for len(h.Out) > 0 {
			batch := h.Out
			h.Out = nil
			for _, r := range batch {
				in, ok := internal[r.Topic]
				if !ok {
					out = append(out, r)
					continue
				}
				q := int(r.Partition)
				if q < 0 || q >= partitions {
					t.Fatalf("task %d wrote %s partition %d of %d", p, r.Topic, q, partitions)
				}
				if err := hs[q].Process(in, r); err != nil {
					t.Fatalf("task %d, internal record of %s: %v", q, r.Topic, err)
				}
				drain(q)
			}
		}
	}
	checkpoint := func() {
		for p, h := range hs {
			if err := h.Checkpoint(); err != nil {
				t.Fatalf("checkpoint task %d: %v", p, err)
			}
			drain(p)
		}
	}
	for i, r := range recs {
		now = now.Add(10 * time.Millisecond)
		for _, h := range hs {
			h.SetNow(now)
		}
		rec := &kgo.Record{Value: r.value, Offset: int64(i), Timestamp: now}
		p := i % partitions
		if r.keyed {
			rec.Key = []byte(hex.EncodeToString(r.key))
			p = simulator.KeyPartition(rec.Key, partitions)
		}
		rec.Partition = int32(p)
		if err := hs[p].Process(r.source, rec); err != nil {
			t.Fatalf("task %d, record %d of source %d: %v", p, i, r.source, err)
		}
		drain(p)
		if i%4 == 3 {
			checkpoint()
		}
	}
	checkpoint()
	for p, h := range hs {
		if err := h.Finish(); err != nil {
			t.Fatalf("finish task %d: %v", p, err)
		}
		drain(p)
	}
	checkpoint()
	pipelineCheckOutputs(t, cfg, out)
	n := map[string]int{}
	for _, r := range out {
		n[r.Topic]++
	}
	return n
}

// pipelineCheckOutputs fails on a written record that a consumer could not decode.
func pipelineCheckOutputs(t *testing.T, cfg Config, out []*kgo.Record) {
	t.Helper()
	hdr := func(r *kgo.Record, k string) (string, bool) {
		for _, h := range r.Headers {
			if h.Key == k {
				return string(h.Value), true
			}
		}
		return "", false
	}
	for _, r := range out {
		var err error
		switch r.Topic {
		case cfg.FusedTopic:
			err = proto.Unmarshal(r.Value, &braidpb.FusedTrace{})
		case cfg.KVGraph.PollutionTopic:
			err = proto.Unmarshal(r.Value, &braidpb.PollutionEdge{})
		case cfg.KVGraph.IncidentsTopic:
			err = proto.Unmarshal(r.Value, &braidpb.Incident{})
		case cfg.LateTopic:
			reason, _ := hdr(r, "braid.reason")
			if reason == "" || !utf8.ValidString(reason) {
				t.Fatalf("late record reason %q", reason)
			}
			sig, _ := hdr(r, "braid.signal")
			switch sig {
			case "spans":
				err = proto.Unmarshal(r.Value, &tracepb.TracesData{})
			case "logs":
				err = proto.Unmarshal(r.Value, &logspb.LogsData{})
			case "metrics":
				err = proto.Unmarshal(r.Value, &metricspb.MetricsData{})
			default:
				t.Fatalf("late record with braid.signal %q", sig)
			}
		case cfg.DLQTopic:
			// The unchanged input: it need not decode, but says why.
			reason, _ := hdr(r, "braid.reason")
			if reason == "" || !utf8.ValidString(reason) {
				t.Fatalf("DLQ record reason %q", reason)
			}
		}
		if err != nil {
			t.Fatalf("%s record (%d bytes, key %q) does not decode: %v", r.Topic, len(r.Value), r.Key, err)
		}
	}
}

// pipelineSeeds are real Collector records (the fixtures of
// connectors/otlp, each folder one input) and the realistic simulator's
// fleet with KV events and faults, in proto and JSON.
func pipelineSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	dir := filepath.Join("..", "..", "connectors", "otlp", "testdata", "collector")
	folders, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatalf("fixtures: %v", err)
	}
	for _, fo := range folders {
		if !fo.IsDir() {
			continue
		}
		names, err := filepath.Glob(filepath.Join(dir, fo.Name(), "otlp_*.value"))
		if err != nil || len(names) == 0 {
			tb.Fatalf("fixtures in %s: %v", fo.Name(), err)
		}
		sort.Strings(names)
		var recs []pipelineRecord
		for _, n := range names {
			v, err := os.ReadFile(n)
			if err != nil {
				tb.Fatal(err)
			}
			base := filepath.Base(n)
			src := 0
			switch {
			case strings.HasPrefix(base, "otlp_logs"):
				src = 1
			case strings.HasPrefix(base, "otlp_metrics"):
				src = 2
			}
			recs = append(recs, pipelineRecord{source: src, value: v})
		}
		seeds = append(seeds, joinPipelineInput(strings.HasPrefix(fo.Name(), "json"), recs))
	}
	for _, enc := range []string{simulator.EncodingProto, simulator.EncodingJSON} {
		sim, err := simulator.New(simulator.Config{Seed: 5, Encoding: enc, Realistic: true, KVEvents: true, Hosts: 1, Rate: 4,
			KV: simulator.KVConfig{Faults: []simulator.KVFault{{Trigger: simulator.DoubleFree, At: simulator.DefaultStart.Add(500 * time.Millisecond), GPU: -1}}}})
		if err != nil {
			tb.Fatal(err)
		}
		// Up to 20 span records, 20 KV-event records, 10 engine-log
		// records and 10 scrapes, in order.
		var recs []pipelineRecord
		quota := map[string]int{"spans": 20, "kv": 20, "logs": 10, "metrics": 10}
		for range 40 {
			for _, m := range sim.Next() {
				src, kind := 0, "spans"
				switch {
				case m.Topic == simulator.DefaultTopics.Logs && m.Key != nil:
					src, kind = 1, "kv"
				case m.Topic == simulator.DefaultTopics.Logs:
					src, kind = 1, "logs"
				case m.Topic == simulator.DefaultTopics.Metrics:
					src, kind = 2, "metrics"
				}
				if quota[kind] == 0 || len(m.Value) > 64<<10 {
					continue
				}
				quota[kind]--
				r := pipelineRecord{source: src, value: m.Value}
				if k, err := hex.DecodeString(string(m.Key)); err == nil && len(k) == 16 {
					r.keyed, r.key = true, k
				}
				recs = append(recs, r)
			}
		}
		seeds = append(seeds, joinPipelineInput(enc == simulator.EncodingJSON, recs))
	}
	return seeds
}

// TestPipelineSeeds runs the fuzz target's seeds as a test: the real
// fixtures and the simulator's fleet pass the pipeline.
func TestPipelineSeeds(t *testing.T) {
	for _, s := range pipelineSeeds(t) {
		recs := splitPipelineInput(s[1:])
		if len(recs) == 0 {
			t.Fatal("seed without records")
		}
		enc := otlp.EncodingProto
		if s[0]&1 == 1 {
			enc = otlp.EncodingJSON
		}
		n := runPipeline(t, enc, recs)
		if n["braid.fused"] == 0 {
			t.Errorf("seed of %d records fused nothing: %v", len(recs), n)
		}
		t.Logf("%d records (%v): %v", len(recs), enc, n)
	}
}

// FuzzKVEvent runs one arbitrary log record value, keyed by a trace id of
// the simulator's fleet, through the pipeline in the middle of that fleet's
// records (spans, KV events with a fault, engine logs, scrapes): the
// kvgraph and fuse state it meets is deep. The contract is FuzzPipeline's.
func FuzzKVEvent(f *testing.F) {
	ctx := kvContext(f)
	for _, r := range ctx {
		if r.source == 1 && r.keyed {
			f.Add(r.key, r.value)
		}
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		recs := append([]pipelineRecord(nil), ctx[:len(ctx)/2]...)
		r := pipelineRecord{source: 1, value: value}
		if len(key) == 16 {
			r.keyed, r.key = true, key
		}
		recs = append(recs, r)
		recs = append(recs, ctx[len(ctx)/2:]...)
		runPipeline(t, otlp.EncodingProto, recs)
	})
}

// kvContext is the proto simulator seed of pipelineSeeds.
func kvContext(tb testing.TB) []pipelineRecord {
	seeds := pipelineSeeds(tb)
	for _, s := range seeds {
		if s[0] == 0 {
			if recs := splitPipelineInput(s[1:]); len(recs) > 40 {
				return recs[:24] // spans, KV events and a fault: cheap enough to fuzz
			}
		}
	}
	tb.Fatal("no simulator seed")
	return nil
}
