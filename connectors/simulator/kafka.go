package simulator

import (
	"context"
	"hash/fnv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitioner is the Collector Kafka exporter's default partitioner,
// kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a)): a keyed record
// goes to abs(int32(fnv1a_32(key)) % partitions), a null-key record to a
// sticky partition that changes between batches. Configure producers with
// kgo.RecordPartitioner(simulator.Partitioner()) so that records land where
// the Collector would put them.
func Partitioner() kgo.Partitioner {
	return kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a))
}

func fnv32a(b []byte) uint32 {
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32()
}

// KeyPartition returns the partition of n that Partitioner gives a record
// with the (non-nil) key.
func KeyPartition(key []byte, n int) int {
	return kgo.SaramaCompatHasher(fnv32a)(key, n)
}

// Produce writes msgs with client, synchronously, in order, and returns the
// first error. Records of one partition keep their order.
func Produce(ctx context.Context, client *kgo.Client, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value}
	}
	return client.ProduceSync(ctx, recs...).FirstErr()
}
