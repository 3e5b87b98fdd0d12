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
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-errc
		}
	}()
	// Well inside the minute the interval alone would take.
	deadline := time.Now().Add(40 * time.Second)
	// Two checkpoints (input → internal topic, internal topic → output)
	// within 40s can only be early ones.
	for e.Stats().EarlyCheckpoints.Load() < 2 || e.Stats().Checkpoints.Load() < 2 || e.Stats().RecordsIn.Load() < 2*n {
		select {
		case err := <-errc:
			t.Fatalf("run ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 40s: %d early checkpoints, %d checkpoints, %d records in", e.Stats().EarlyCheckpoints.Load(), e.Stats().Checkpoints.Load(), e.Stats().RecordsIn.Load())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	cancel()
	stopped = true
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got := b.readOut(t)
	for i := range n {
		if k := fmt.Sprintf("p%04d", i); got[k] != 1 {
			t.Fatalf("key %s out %d times", k, got[k])
		}
	}
}
