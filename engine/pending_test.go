package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
)

// TestPendingStateBringsCheckpointForward: with a checkpoint interval of a
// minute, tasks that write more state than PendingStateBytes get
// checkpoints long before the interval, and the output is exactly once.
func TestPendingStateBringsCheckpointForward(t *testing.T) {
	b := newBrokerEnv(t, 2)
	const n, size = 1200, 8 << 10
	cl := kafkatest.Client(t, b.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	var recs []*kgo.Record
	for i := range n {
		k := fmt.Sprintf("p%04d", i)
		recs = append(recs, &kgo.Record{Topic: b.in, Partition: int32(i) % b.partitions, Key: []byte(k), Value: make([]byte, size), Timestamp: time.Now()})
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer pcancel()
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e := b.engine(t, t.TempDir(), func(c *Config) {
		c.CheckpointInterval = time.Minute
		c.PendingStateBytes = 1 << 20
	})
	// The interval alone would bring the output after two minutes (input
	// → internal topic, internal topic → output): runUntil gives up after
	// 90 s. The engine's records-in count cannot say when the relay is
	// done: it counts the watermark markers on the internal topic, and
	// every early checkpoint writes more of them.
	if err := b.runUntil(t, e, n); err != nil {
		t.Fatal(err)
	}
	if early, all := e.Stats().EarlyCheckpoints.Load(), e.Stats().Checkpoints.Load(); early < 2 || all < 2 {
		t.Errorf("%d early checkpoints of %d, want at least 2 of at least 2", early, all)
	}
	got := b.readOut(t)
	for i := range n {
		if k := fmt.Sprintf("p%04d", i); got[k] != 1 {
			t.Fatalf("key %s out %d times", k, got[k])
		}
	}
}
