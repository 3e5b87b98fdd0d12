package kafkatest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalRoundTrip produces one committed and one aborted record in
// transactions and checks that a read_committed consumer sees only the first.
func TestTransactionalRoundTrip(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	t.Parallel()
	topic := kafkatest.NewTopics(t, brokers, 1, "kafkatest-tx")[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prod := kafkatest.Client(t, brokers,
		kgo.TransactionalID("kafkatest-"+topic),
		kgo.DefaultProduceTopic(topic),
	)
	for _, tc := range []struct {
		value  string
		commit kgo.TransactionEndTry
	}{{"aborted", kgo.TryAbort}, {"committed", kgo.TryCommit}} {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		if err := prod.ProduceSync(ctx, kgo.StringRecord(tc.value)).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", tc.value, err)
		}
		if err := prod.EndTransaction(ctx, tc.commit); err != nil {
			t.Fatalf("end transaction (%q): %v", tc.value, err)
		}
	}

	cons := kafkatest.Client(t, brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	got := poll(ctx, t, cons, 1)
	if got[0].Topic != topic || string(got[0].Value) != "committed" {
		t.Fatalf("read_committed consumer got %s=%q, want %s=%q", got[0].Topic, got[0].Value, topic, "committed")
	}
	// The high watermark is past both transactions and their markers (4
	// offsets); the last stable offset equals it once both are done.
	offs, err := kadm.NewClient(cons).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	if o, _ := offs.Lookup(topic, 0); o.Offset != 4 {
		t.Fatalf("end offset = %d, want 4 (two records, two transaction markers)", o.Offset)
	}
}

// TestConsumerGroups consumes in a classic group and in a KIP-848 (consumer
// protocol) group, and commits offsets in both.
func TestConsumerGroups(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	t.Parallel()
	topic := kafkatest.NewTopics(t, brokers, 4, "kafkatest-groups")[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	prod := kafkatest.Client(t, brokers, kgo.DefaultProduceTopic(topic))
	const n = 20
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte("v")})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	for _, proto := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"classic", nil},
		{"consumer", []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer())}},
	} {
		t.Run(proto.name, func(t *testing.T) {
			group := "kafkatest-" + proto.name + "-" + topic
			opts := append([]kgo.Opt{
				kgo.ConsumerGroup(group),
				kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.DisableAutoCommit(),
			}, proto.opts...)
			cons := kafkatest.Client(t, brokers, opts...)
			poll(ctx, t, cons, n)
			if err := cons.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			adm := kadm.NewClient(cons)
			listed, err := adm.ListGroups(ctx)
			if err != nil {
				t.Fatalf("list groups: %v", err)
			}
			if g, ok := listed[group]; !ok || g.GroupType != proto.name {
				t.Fatalf("group %s: listed %v with type %q, want type %q", group, ok, g.GroupType, proto.name)
			}
			committed, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatalf("fetch offsets: %v", err)
			}
			var sum int64
			committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
			if sum != n {
				t.Fatalf("committed offsets sum to %d, want %d", sum, n)
			}
			cons.Close() // leave the group before the topic is deleted
		})
	}
}

// poll consumes until it has n records.
func poll(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		got = append(got, fs.Records()...)
	}
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
	return got
}

// fakeTB records how Brokers ended a test.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	ended  string // "", "skip" or "fatal"
	reason string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.end("skip", args...)
}
func (f *fakeTB) Fatal(args ...any) {
	f.end("fatal", args...)
}
func (f *fakeTB) end(how string, args ...any) {
	f.mu.Lock()
	f.ended, f.reason = how, fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func callBrokers(tb *fakeTB) []string {
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = kafkatest.Brokers(tb)
	}()
	<-done
	return got
}

func TestBrokersFromEnv(t *testing.T) {
	t.Setenv("BRAID_KAFKA_BROKERS", " 127.0.0.1:1, 127.0.0.1:2 ,")
	tb := &fakeTB{TB: t}
	if got := callBrokers(tb); strings.Join(got, ",") != "127.0.0.1:1,127.0.0.1:2" || tb.ended != "" {
		t.Fatalf("Brokers = %q (ended %q), want [127.0.0.1:1 127.0.0.1:2]", got, tb.ended)
	}

	t.Setenv("BRAID_KAFKA_BROKERS", "")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		tb := &fakeTB{TB: t}
		callBrokers(tb)
		want := "skip"
		if ci != "" {
			want = "fatal"
		}
		if tb.ended != want || !strings.Contains(tb.reason, "deploy/local/kafka.sh") {
			t.Errorf("CI=%q: Brokers ended the test with %q (%q), want %s", ci, tb.ended, tb.reason, want)
		}
	}
}
