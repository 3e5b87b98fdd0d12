package fuse

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/state"
)

// Benchmark shape. One iteration is one Collector export batch of the
// simulator (8 requests: ≈48 spans, 17 log records, 10 metric points, all
// otlp_proto), fed to task 0 of the stage through engine.Harness, one
// Process call per input topic as the engine does per polled batch.
// Processing time moves by the simulator's batch interval per batch, so
// event time and processing time advance together, as on a live feed.
const (
	// benchCheckpointEvery batches, the task checkpoints (prepare + Pebble
	// commit): 25 batches are 5s of processing time here, the engine's
	// default CheckpointInterval (≈470 records with keying=trace, 75 with
	// keying=none; ≈1,900 members either way).
	benchCheckpointEvery = 25
	// benchRefill batches are generated at a time, outside the timer.
	benchRefill = 256
)

// BenchmarkFuse measures the fuse stage without Kafka: decode, cut into
// members, fuse in state (real Pebble in a temporary directory), emit
// FusedTrace records when traces close, purge them after the allowed
// lateness, checkpoint every benchCheckpointEvery batches (with the stage's
// changelog records, collected like every emitted record), and at the end
// Finish (every open trace emitted and purged) plus a last checkpoint.
// ns/op and the rates cover the loop; the end is reported as finish-ms.
// fused/op counts FusedTrace records, emitted/op every record the task
// produced (fused, repartitioned groups, changelog, watermark markers).
//
//   - keying=trace: the Collector's partition_traces_by_id; the stage has one
//     partition, so every trace group is fused in place (the fast path).
//   - keying=none: the exporter's default, one null-key message per signal
//     per batch; the stage has 4 partitions and task 0 receives the whole
//     batch, so about 3/4 of the trace groups are repartitioned (emitted to
//     the repartition topic, not fed back) and 1/4 are fused in place.
func BenchmarkFuse(b *testing.B) {
	for _, bc := range []struct {
		name       string
		keying     simulator.Keying
		partitions int32
	}{
		{"keying=trace", simulator.KeyByTraceID, 1},
		{"keying=none", simulator.Unkeyed, 4},
	} {
		// correlation=off: trace-id joins only; on: the job's default —
		// request-id resolution and derived figures.
		b.Run(bc.name+"/correlation=off", func(b *testing.B) {
			benchFuse(b, bc.keying, bc.partitions, func(c *Config) { c.NoDerive = true })
		})
		b.Run(bc.name+"/correlation=on", func(b *testing.B) {
			benchFuse(b, bc.keying, bc.partitions, func(c *Config) { c.RequestIDs = semconv.DefaultRequestIDs() })
		})
	}
}

// benchBatch is one simulator batch as records, grouped by input.
type benchBatch struct {
	inputs [3][]*kgo.Record
	bytes  int
	spans  int
}

func benchFuse(b *testing.B, keying simulator.Keying, partitions int32, mod func(*Config)) {
	sim, err := simulator.New(simulator.Config{Seed: 1, Keying: keying})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Partitions: partitions}
	mod(&cfg)
	st, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	now := simulator.DefaultStart
	// Idleness 1s: with 4 partitions the upstream tasks never send a
	// watermark marker here, and must stop holding the watermark back.
	h, err := engine.NewHarness(engine.Config{Store: store, Idleness: time.Second}, st.Topology(), 0, now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)

	input := map[string]int{
		simulator.DefaultTopics.Spans:   0,
		simulator.DefaultTopics.Logs:    1,
		simulator.DefaultTopics.Metrics: 2,
	}
	var offsets [3]int64
	var spansBefore int
	var pool []benchBatch
	refill := func() {
		pool = pool[:0]
		for range benchRefill {
			sim.ForgetTraces() // keeps Truth small: it copies every trace
			var bb benchBatch
			for _, m := range sim.Next() {
				i := input[m.Topic]
				bb.inputs[i] = append(bb.inputs[i], &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Offset: offsets[i]})
				offsets[i]++
				bb.bytes += len(m.Key) + len(m.Value)
			}
			tr := sim.Truth()
			bb.spans, spansBefore = tr.Spans-spansBefore, tr.Spans
			pool = append(pool, bb)
		}
	}
	refill()

	var (
		next, batches int
		records       int
		bytes, spans  int
		out           int
	)
	drain := func() {
		out += len(h.Out)
		clear(h.Out)
		h.Out = h.Out[:0]
	}
	b.ReportAllocs()
	for b.Loop() {
		if next == len(pool) {
			b.StopTimer()
			refill()
			next = 0
			b.StartTimer()
		}
		bb := &pool[next]
		next++
		now = now.Add(simulator.DefaultBatchInterval)
		h.SetNow(now)
		for i, recs := range bb.inputs {
			if len(recs) == 0 {
				continue
			}
			if err := h.Process(i, recs...); err != nil {
				b.Fatal(err)
			}
			records += len(recs)
		}
		bytes += bb.bytes
		spans += bb.spans
		if batches++; batches%benchCheckpointEvery == 0 {
			if err := h.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			drain()
		}
	}
	// The end of the input: every open trace is emitted and committed.
	// Untimed, so that ns/op does not depend on b.N: its cost (the open
	// traces of ≈75s of event time, ≈3,000) is reported as finish-ms.
	loopMembers, loopFused, loopOut := st.Counters().Members.Load(), st.Counters().Fused.Load(), out+len(h.Out)
	sec := b.Elapsed().Seconds()
	start := time.Now()
	if err := h.Finish(); err != nil {
		b.Fatal(err)
	}
	if err := h.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	finish := time.Since(start)
	drain()

	c := st.Counters()
	if c.Messages.Load() != int64(records) || c.DLQ.Load() != 0 || c.OpenTraces.Load() != 0 {
		b.Fatalf("messages %d (fed %d), dlq %d, open traces %d after Finish",
			c.Messages.Load(), records, c.DLQ.Load(), c.OpenTraces.Load())
	}
	if c.Fused.Load() == 0 {
		b.Fatal("no trace was fused")
	}
	b.ReportMetric(float64(loopMembers)/sec, "members/s")
	b.ReportMetric(float64(spans)/sec, "spans/s")
	b.ReportMetric(float64(records)/sec, "msgs/s")
	b.ReportMetric(float64(bytes)/sec/1e6, "MB/s")
	b.ReportMetric(float64(loopFused)/float64(b.N), "fused/op")
	b.ReportMetric(float64(loopOut)/float64(b.N), "emitted/op")
	b.ReportMetric(float64(finish.Milliseconds()), "finish-ms")
}
