// Command kafkaready waits until a Kafka broker really serves clients.
//
// It is used by deploy/local/kafka.sh after it started the broker. Until the
// deadline it retries: list the brokers, create a scratch topic, wait until
// the topic is in the metadata, produce a record in a transaction, consume it
// with read_committed in a consumer group and commit its offset, then delete
// the topic. Besides checking the broker, this creates the internal topics
// __transaction_state and __consumer_offsets, so that the first test that uses
// transactions or groups does not pay for (and time out on) their creation.
//
// With -pid it gives up as soon as that process is gone.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:39092", "comma separated bootstrap brokers")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	pid := flag.Int("pid", 0, "give up as soon as this process is gone (0: do not watch)")
	quick := flag.Bool("quick", false, "only check that the broker answers a metadata request")
	verbose := flag.Bool("v", false, "print each failed attempt")
	flag.Parse()

	seeds := strings.Split(*brokers, ",")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var last error
	for attempt := 1; ; attempt++ {
		if *pid > 0 && !alive(*pid) {
			fail("broker process %d exited (last error: %v)", *pid, last)
		}
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		if *quick {
			last = ping(actx, seeds)
		} else {
			last = check(actx, seeds)
		}
		acancel()
		if last == nil {
			return
		}
		if *verbose {
			fmt.Fprintf(os.Stderr, "kafkaready: attempt %d: %v\n", attempt, last)
		}
		select {
		case <-ctx.Done():
			fail("broker at %s not ready after %v: %v", *brokers, *timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kafkaready: "+format+"\n", args...)
	os.Exit(1)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ping(ctx context.Context, seeds []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	bs, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("list brokers: %w", err)
	}
	if len(bs) == 0 {
		return errors.New("metadata lists no brokers")
	}
	return nil
}

func check(ctx context.Context, seeds []string) error {
	if err := ping(ctx, seeds); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	topic := "__braid_ready-" + suffix()
	res, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = adm.DeleteTopics(dctx, topic)
	}()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil && td.Has(topic) && td[topic].Err == nil && len(td[topic].Partitions) == 1 &&
			td[topic].Partitions[0].Leader >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s not in metadata: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}

	// A transaction: creates __transaction_state.
	tx, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.TransactionalID("braid-ready-"+suffix()),
		kgo.DefaultProduceTopic(topic),
	)
	if err != nil {
		return err
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("ready")}).FirstErr(); err != nil {
		_ = tx.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("transactional produce: %w", err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}

	// A group consumer with read_committed: creates __consumer_offsets.
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup("braid-ready-"+suffix()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return err
	}
	defer cons.Close()
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("consume: %w", ferr)
		}
		got := false
		fs.EachRecord(func(r *kgo.Record) { got = got || string(r.Value) == "ready" })
		if got {
			break
		}
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}
