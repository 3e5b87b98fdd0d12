package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnvBrokers names the environment variable with the comma separated
// bootstrap brokers of the test broker.
const EnvBrokers = "BRAID_KAFKA_BROKERS"

// Why a test without a broker is skipped (or fails, in CI).
const noBrokerReason = "BRAID_KAFKA_BROKERS is not set: integration tests need the real broker started by deploy/local/kafka.sh (make test does this)"

// Timeout bounds each of this package's waits on the broker.
var Timeout = 30 * time.Second

// Brokers returns the bootstrap brokers from BRAID_KAFKA_BROKERS. When that is
// unset or empty it fails the test if the environment variable CI is set and
// skips it otherwise.
func Brokers(t testing.TB) []string {
	t.Helper()
	var brokers []string
	for _, b := range strings.Split(os.Getenv(EnvBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal(noBrokerReason)
		}
		t.Skip(noBrokerReason)
	}
	return brokers
}

// Client returns a client for brokers with opts, closed when the test ends.
func Client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// NewTopics creates one topic for each name, named name-<random suffix>, with
// the given partitions and replication factor 1. It returns the real names in
// the order of names once all are in the metadata with a leader for every
// partition, and deletes the topics when the test ends.
func NewTopics(t testing.TB, brokers []string, partitions int32, names ...string) []string {
	t.Helper()
	if len(names) == 0 {
		return nil
	}
	adm := kadm.NewClient(Client(t, brokers))
	topics := make([]string, len(names))
	for i, n := range names {
		topics[i] = n + "-" + suffix()
	}

	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	// Register the deletion first, so that topics created before a failure
	// below are removed too. Deleting a topic that does not exist is harmless.
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), Timeout)
		defer dcancel()
		resps, err := adm.DeleteTopics(dctx, topics...)
		if err == nil {
			err = resps.Error()
		}
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Logf("kafkatest: delete topics %v: %v", topics, err)
		}
	})
	resps, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: create topics %v: %v", topics, err)
	}

	if err := waitVisible(ctx, adm, partitions, topics); err != nil {
		t.Fatalf("kafkatest: topics %v: %v", topics, err)
	}
	return topics
}

// waitVisible polls the metadata until every topic has all its partitions,
// each with a leader, or ctx ends.
func waitVisible(ctx context.Context, adm *kadm.Client, partitions int32, topics []string) error {
	var last error
	for {
		td, err := adm.ListTopics(ctx, topics...)
		if err == nil {
			last = ready(td, partitions, topics)
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not visible in metadata: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ready(td kadm.TopicDetails, partitions int32, topics []string) error {
	for _, topic := range topics {
		d, ok := td[topic]
		if !ok {
			return fmt.Errorf("%s: missing", topic)
		}
		if d.Err != nil {
			return fmt.Errorf("%s: %w", topic, d.Err)
		}
		if int32(len(d.Partitions)) != partitions {
			return fmt.Errorf("%s: %d of %d partitions", topic, len(d.Partitions), partitions)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("%s/%d: no leader yet (%v)", topic, p.Partition, p.Err)
			}
		}
	}
	return nil
}

func suffix() string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
