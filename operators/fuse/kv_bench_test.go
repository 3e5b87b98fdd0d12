package fuse

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/state"
)

// BenchmarkKVPath measures the job's path for KV-block events on one task:
// decode the Collector's log messages, recognise KV events, hold them in
// event-time order until the watermark passes, hand them to the kvgraph
// detector, checkpoint (the buffer and the block state go to Pebble). The
// input is the realistic simulator's logs topic with KV events (4 hosts, 8
// GPUs, 20 requests/s), generated before the clock starts. Reported:
// kv-events/s, and x-realtime — how many times faster than the simulated
// fleet produced them. In "spilled" the events are held for 30 s of event
// time in a 16 MiB buffer, so most of them go to state and are read back.
func BenchmarkKVPath(b *testing.B) {
	b.Run("held", func(b *testing.B) { benchmarkKVPath(b, 0, 2*time.Second) })
	b.Run("spilled", func(b *testing.B) { benchmarkKVPath(b, 16<<20, 30*time.Second) })
}

func benchmarkKVPath(b *testing.B, bufferBytes int64, outOfOrderness time.Duration) {
	const batches = 300 // 60s of event time at 200ms per batch
	sim, err := simulator.New(simulator.Config{Seed: 3, Realistic: true, Rate: 20, KVEvents: true})
	if err != nil {
		b.Fatal(err)
	}
	var msgs [][]*kgo.Record
	for range batches {
		var recs []*kgo.Record
		for _, m := range sim.Next() {
			if m.Topic == simulator.DefaultTopics.Logs {
				recs = append(recs, &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value})
			}
		}
		msgs = append(msgs, recs)
	}
	tr := sim.Truth()
	kvEvents := tr.KVEvents + tr.KVLines
	eventSeconds := float64(batches) * simulator.DefaultBatchInterval.Seconds()
	b.ResetTimer()
	var total int64
	for b.Loop() {
		b.StopTimer()
		cfg := Config{Partitions: 1}
		cfg.KVGraph.MaxKVBufferBytes = bufferBytes
		st, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		store, err := state.Open(state.Options{InMemory: true})
		if err != nil {
			b.Fatal(err)
		}
		now := simulator.DefaultStart
		h, err := engine.NewHarness(engine.Config{Store: store, Idleness: time.Second, OutOfOrderness: outOfOrderness}, st.Topology(), 0, now)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i, recs := range msgs {
			now = now.Add(simulator.DefaultBatchInterval)
			h.SetNow(now)
			if err := h.Process(1, recs...); err != nil {
				b.Fatal(err)
			}
			if i%25 == 24 { // a checkpoint every 5s of input
				if err := h.Checkpoint(); err != nil {
					b.Fatal(err)
				}
				h.Out = h.Out[:0]
			}
		}
		if err := h.Finish(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		total += st.Counters().KVLogs.Load()
		if bufferBytes > 0 && st.Counters().KVSpilled.Load() == 0 {
			b.Fatal("nothing spilled")
		}
		if st.Counters().KVLogs.Load() != int64(kvEvents) {
			b.Fatalf("%d KV events routed, the simulator wrote %d", st.Counters().KVLogs.Load(), kvEvents)
		}
		if n := st.KVCounters().Incidents.Load(); n != 0 {
			b.Fatalf("%d incidents on a clean run (%d KV events behind the watermark)", n, st.Counters().KVLateEvents.Load())
		}
		h.Close()
		store.Close()
		b.StartTimer()
	}
	perSec := float64(total) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "kv-events/s")
	b.ReportMetric(perSec/(float64(kvEvents)/eventSeconds), "x-realtime")
}
