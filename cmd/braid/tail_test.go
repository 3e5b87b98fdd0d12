package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

// lineWriter sends every line written to it on lines.
type lineWriter struct {
	mu    sync.Mutex
	part  []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.part[:i])
		w.part = w.part[i+1:]
	}
}

// tailCluster is an in-process Kafka with topic braid.fused (3
// partitions) and a transactional producer of fused records, partitioned
// as braid writes them.
type tailCluster struct {
	t     *testing.T
	addr  string
	prod  *kgo.Client
	topic string
}

func newTailCluster(t *testing.T) *tailCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "braid.fused", "empty"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tail-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &tailCluster{t: t, addr: addr, prod: prod, topic: "braid.fused"}
}

// produce writes n fused records in one transaction, committed unless
// abort, and returns their trace ids.
func (c *tailCluster) produce(n int, abort bool) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	if err := c.prod.BeginTransaction(); err != nil {
		c.t.Fatal(err)
	}
	var ids []string
	for range n {
		var id [16]byte
		rand.Read(id[:])
		hex := string(otlp.AppendTraceIDHex(nil, id))
		v, err := proto.Marshal(&braidpb.FusedTrace{TraceId: id[:], Summary: &braidpb.Summary{SpanCount: 1}})
		if err != nil {
			c.t.Fatal(err)
		}
		if err := c.prod.ProduceSync(ctx, &kgo.Record{Topic: c.topic, Partition: otlp.HashPartition([]byte(hex), 3), Key: []byte(hex), Value: v}).FirstErr(); err != nil {
			c.t.Fatal(err)
		}
		ids = append(ids, hex)
	}
	if err := c.prod.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
		c.t.Fatal(err)
	}
	return ids
}

// tail runs braid tail with args to its end.
func (c *tailCluster) tail(args ...string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := cmdTail(ctx, append([]string{"--brokers", c.addr}, args...), &out)
	if ctx.Err() != nil {
		c.t.Fatalf("tail %q did not stop by itself within 30s", args)
	}
	return out.String(), err
}

// With --from-beginning, tail prints every committed record there was
// when it started, exactly once, and exits; aborted ones it skips.
func TestTailFromBeginningStopsAtEnd(t *testing.T) {
	c := newTailCluster(t)
	want := c.produce(20, false)
	c.produce(5, true)
	want = append(want, c.produce(7, false)...)

	out, err := c.tail("--from-beginning")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("printed %d records, want %d:\n%s", len(lines), len(want), out)
	}
	for _, id := range want {
		if strings.Count(out, "trace "+id+" ") != 1 {
			t.Errorf("trace %s printed %d times", id, strings.Count(out, "trace "+id+" "))
		}
	}

	out, err = c.tail("--from-beginning", "-n", "5")
	if err != nil || strings.Count(out, "\n") != 5 {
		t.Errorf("-n 5: %v, printed %d records", err, strings.Count(out, "\n"))
	}
	// --trace stops at the end too, with the one record of its trace.
	out, err = c.tail("--trace", want[3], "--json")
	if err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"trace_id":"`+want[3]+`"`) {
		t.Errorf("--trace: %v, printed %q", err, out)
	}
	if out, err := c.tail("--from-beginning", "--topic", "empty"); err != nil || out != "" {
		t.Errorf("empty topic: %v, printed %q", err, out)
	}
	if _, err := c.tail("--from-beginning", "--topic", "nonesuch"); err == nil || !strings.Contains(err.Error(), "topic nonesuch does not exist") {
		t.Errorf("missing topic: got %v", err)
	}
}

// With --follow, tail prints what there was and then what comes, until
// interrupted.
func TestTailFollow(t *testing.T) {
	c := newTailCluster(t)
	first := c.produce(4, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &lineWriter{lines: make(chan string, 100)}
	done := make(chan error, 1)
	go func() { done <- cmdTail(ctx, []string{"--brokers", c.addr, "--from-beginning", "--follow"}, w) }()
	deadline := time.After(30 * time.Second)
	read := func(ids []string) {
		t.Helper()
		got := map[string]bool{}
		for range ids {
			select {
			case l := <-w.lines:
				got[strings.Fields(l)[1]] = true
			case err := <-done:
				t.Fatalf("tail --follow returned %v before interrupted", err)
			case <-deadline:
				t.Fatalf("tail --follow: %d of %d records within 30s", len(got), len(ids))
			}
		}
		for _, id := range ids {
			if !got[id] {
				t.Errorf("trace %s not printed", id)
			}
		}
	}
	read(first)
	read(c.produce(3, false))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("interrupted tail --follow: %v", err)
		}
	case <-deadline:
		t.Fatal("tail --follow did not return after its context ended")
	}
}

// Where no broker answers, tail fails within seconds naming the address.
func TestTailNoBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	for _, args := range [][]string{{}, {"--from-beginning"}} {
		done := make(chan error, 1)
		go func() { done <- cmdTail(t.Context(), append([]string{"--brokers", addr}, args...), &bytes.Buffer{}) }()
		select {
		case err := <-done:
			want := "no Kafka broker answers at " + addr + " (is `make run` or deploy/local/kafka.sh running?)"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("tail %q: got %v, want an error with %q", args, err, want)
			}
		case <-time.After(pingTimeout + 5*time.Second):
			t.Fatalf("tail %q against a closed port still runs after %v", args, pingTimeout+5*time.Second)
		}
	}
}

// The demo's tail starts on an empty fused topic and prints what the job
// writes later: it does not stop at the end the topic had at its start.
func TestDemoTailFollows(t *testing.T) {
	c := newTailCluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &lineWriter{lines: make(chan string, 100)}
	done := make(chan error, 1)
	go func() { done <- cmdTail(ctx, demoTailArgs(c.addr, c.topic), w) }()
	ids := c.produce(2, false)
	deadline := time.After(30 * time.Second)
	for i := range ids {
		select {
		case <-w.lines:
		case err := <-done:
			t.Fatalf("the demo's tail returned %v after %d of %d records", err, i, len(ids))
		case <-deadline:
			t.Fatalf("the demo's tail printed %d of %d records within 30s", i, len(ids))
		}
	}
}
