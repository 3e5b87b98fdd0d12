package simulator

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPartitionerMatchesCollector: every keyed record of the real Collector
// (4 partitions) is on the partition Partitioner picks for its key.
func TestPartitionerMatchesCollector(t *testing.T) {
	keyed := 0
	for _, f := range loadFixtures(t) {
		if f.meta.KeyHex == nil {
			continue
		}
		key, err := hex.DecodeString(*f.meta.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		keyed++
		if got := KeyPartition(key, 4); got != f.meta.Partition {
			t.Errorf("%s: KeyPartition = %d, Collector wrote to %d", f.name, got, f.meta.Partition)
		}
		tp := Partitioner().ForTopic(f.meta.Topic)
		if got := tp.Partition(&kgo.Record{Topic: f.meta.Topic, Key: key}, 4); got != f.meta.Partition {
			t.Errorf("%s: Partitioner = %d, Collector wrote to %d", f.name, got, f.meta.Partition)
		}
	}
	if keyed < 20 {
		t.Fatalf("only %d keyed fixtures", keyed)
	}
}

// TestProduce writes a run to an in-memory Kafka and reads it back: every
// record arrives unchanged, keyed records on their key's partition, so a
// trace's spans and logs share a partition number.
func TestProduce(t *testing.T) {
	const partitions = 4
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "otlp_spans", "otlp_logs", "otlp_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	s, err := New(Config{Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	var sent []Message
	for i := 0; i < 5; i++ {
		msgs := s.Next()
		if err := Produce(ctx, producer, msgs); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, msgs...)
	}
	msgs := s.Flush()
	if err := Produce(ctx, producer, msgs); err != nil {
		t.Fatal(err)
	}
	sent = append(sent, msgs...)
	if err := Produce(ctx, producer, nil); err != nil {
		t.Fatal(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("otlp_spans", "otlp_logs", "otlp_metrics"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []*kgo.Record
	for len(got) < len(sent) {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != len(sent) {
		t.Fatalf("read %d records, sent %d", len(got), len(sent))
	}
	want := map[string]int{}
	for _, m := range sent {
		want[m.Topic+"|"+string(m.Key)+"|"+string(m.Value)]++
	}
	for _, r := range got {
		k := r.Topic + "|" + string(r.Key) + "|" + string(r.Value)
		if want[k] == 0 {
			t.Fatalf("unexpected record on %s key %q", r.Topic, r.Key)
		}
		want[k]--
		if r.Key != nil && int(r.Partition) != KeyPartition(r.Key, partitions) {
			t.Fatalf("record keyed %q on partition %d, want %d", r.Key, r.Partition, KeyPartition(r.Key, partitions))
		}
		if r.Key != nil && len(r.Headers) != 0 {
			t.Fatal("records carry headers")
		}
	}
	// A split trace's two span records share a partition, first part first.
	tr := s.Truth()
	type rec struct {
		partition int32
		offset    int64
		spans     int
	}
	parts := map[string][]rec{}
	for _, r := range got {
		if r.Topic != "otlp_spans" {
			continue
		}
		ids, _ := traceIDsIn(t, s.cfg, Message{Topic: r.Topic, Key: r.Key, Value: r.Value})
		parts[string(r.Key)] = append(parts[string(r.Key)], rec{r.Partition, r.Offset, len(ids)})
	}
	splits := 0
	for id, tt := range tr.Traces {
		if !tt.Split {
			continue
		}
		splits++
		ps := parts[id]
		if len(ps) != 2 || ps[0].partition != ps[1].partition {
			t.Fatalf("split trace %s: records %+v", id, ps)
		}
		first, second := ps[0], ps[1]
		if first.offset > second.offset {
			first, second = second, first
		}
		if first.spans != 1 || second.spans != tt.Spans-1 {
			t.Fatalf("split trace %s: parts in offset order hold %d then %d spans", id, first.spans, second.spans)
		}
	}
	if splits == 0 {
		t.Fatal("no split trace produced")
	}
}
