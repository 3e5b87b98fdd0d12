package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
)

// Instances that start at the same time all ensure the same topics: every
// one succeeds, whichever creates them; a topic that exists with other
// partitions is still an error.
func TestEnsureTopicsConcurrently(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	t.Parallel()
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	name := fmt.Sprintf("ensure-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm.DeleteTopics(ctx, name, name+"-c")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := []kafka.Topic{{Name: name, Partitions: 3}, {Name: name + "-c", Partitions: 3, Compacted: true}}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = kafka.EnsureTopics(ctx, adm, 1, topics...) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	counts, err := kafka.PartitionCounts(ctx, adm, name, name+"-c")
	if err != nil || counts[name] != 3 || counts[name+"-c"] != 3 {
		t.Fatalf("partition counts %v, %v", counts, err)
	}
	if err := kafka.EnsureTopics(ctx, adm, 1, kafka.Topic{Name: name, Partitions: 4}); err == nil {
		t.Error("a topic with 3 partitions passed for 4")
	}
}
