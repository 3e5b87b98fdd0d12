package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// edit replaces, in the instance configuration, each old string of pairs
// with the new one that follows it.
func (e *crashEnv) edit(t *testing.T, pairs ...string) {
	t.Helper()
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if !bytes.Contains(cfg, []byte(pairs[i])) {
			t.Fatalf("configuration lacks %q", pairs[i])
		}
		cfg = bytes.Replace(cfg, []byte(pairs[i]), []byte(pairs[i+1]), 1)
	}
	if err := os.WriteFile(e.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readCommitted returns every committed record of topic, in partition
// order: it reads until a poll of two seconds brings nothing.
func (e *crashEnv) readCommitted(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	rd := kafkatest.Client(t, e.brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer rd.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := rd.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

// progress is field of the child's last "braid progress" line, -1 if none.
func (c *child) progress(field string) int64 {
	lines := strings.Split(c.log.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], "braid progress") {
			continue
		}
		for _, f := range strings.Fields(lines[i]) {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		break
	}
	return -1
}

// progressAtLeast waits for a "braid progress" line whose field holds at
// least want.
func (c *child) progressAtLeast(t *testing.T, field string, want int64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.progress(field) < want {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line with %s ≥ %d within %v; log:\n%s", field, want, d, tail(c.log.String(), 3000))
		}
		select {
		case err := <-c.done:
			t.Fatalf("child exited (%v) before %s reached %d; log:\n%s", err, field, want, tail(c.log.String(), 3000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRestartEmitsOpenTraces stops braid (SIGKILL after a checkpoint, or
// SIGTERM) while traces are open and no more input will come, restarts it,
// and requires every trace of the input in the fused output within
// flush_after of the restart (a task assigned) plus restartSlack, each
// simulated member exactly once in its trace's highest revision. (A
// restored trace that changed since its last emission counts as touched at
// the restore: flush_after runs from there.)
func TestRestartEmitsOpenTraces(t *testing.T) {
	// restartSlack is the restore, the 1s checkpoint that commits the
	// emission, the engine's tick and the reader's poll, on a machine that
	// runs three other passes of the suite beside this one: 12s of the
	// 13s this test once allowed went by with three busy loops beside it.
	const restartSlack = 10 * time.Second
	if raceEnabled {
		// The braid it stops and restarts is built without the detector
		// either way; the test process only produces and reads.
		t.Skip("runs without -race, in make test's procs pass")
	}
	t.Parallel() // waits on paced input and restarts, mostly idle
	bin := buildBraidFast(t)
	const flushAfter = 10 * time.Second
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			env := newCrashEnv(t)
			env.edit(t, "flush_after: -1s", "flush_after: "+flushAfter.String(),
				"checkpoint_interval: 1s", "checkpoint_interval: 1s\nlog_interval: 100ms")
			sim, err := simulator.New(simulator.Config{Seed: int64(91 + i), Topics: env.simTopics, RequestsPerBatch: 8, SplitRatio: 0.2})
			if err != nil {
				t.Fatal(err)
			}
			// 4s of event time, all written before braid starts: the
			// watermark (the largest event time less out_of_orderness)
			// leaves the last traces open, and nothing more comes.
			var msgs []simulator.Message
			for range 20 {
				msgs = append(msgs, sim.Next()...)
			}
			msgs = append(msgs, sim.Flush()...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := simulator.Produce(ctx, env.prod, msgs); err != nil {
				t.Fatal(err)
			}
			truth := sim.Truth()

			c := startChild(t, bin, env.config)
			c.progressAtLeast(t, "messages", int64(len(msgs)), 60*time.Second)
			if sig == syscall.SIGKILL {
				// A checkpoint after the input is read: the open traces
				// are in the committed state the restart restores.
				c.progressAtLeast(t, "checkpoints", c.progress("checkpoints")+2, 30*time.Second)
				c.kill(t)
			} else {
				c.stopTerm(t, "SIGTERM with open traces")
			}
			emitted := map[string]bool{}
			for _, r := range env.readCommitted(t, env.fused) {
				emitted[string(r.Key)] = true
			}
			open := 0
			for id := range truth.Traces {
				if !emitted[id] {
					open++
				}
			}
			if open == 0 {
				t.Fatal("every trace was emitted before the stop; the test needs open ones")
			}

			final := startChild(t, bin, env.config)
			defer final.kill(t)
			final.waitLog(t, "task assigned", 60*time.Second) // about to restore: flush_after starts there
			restarted := time.Now()
			env.watch = final
			env.verifyExactlyOnce(t, truth, flushAfter+restartSlack, false, func() string { return tail(final.log.String(), 3000) })
			t.Logf("%s: %d of %d traces open at the stop; all %d emitted and committed %v after the first task was assigned (flush_after %v)",
				sig, open, len(truth.Traces), len(truth.Traces), time.Since(restarted).Round(100*time.Millisecond), flushAfter)
		})
	}
}

// TestLateLogsAfterPurge writes, after every trace was emitted and
// purged and braid restarted without its local state, log records for
// some of them: stamped at the current watermark
// (within allowed lateness, but after their trace closed) and stamped at
// their trace's time (beyond allowed lateness). Each goes to braid.late
// once — the first kind with reason "trace already closed" and
// braid.revision the trace's last revision, the second with the
// event-time reason — and no key of the fused topic has two records with
// the same revision.
func TestLateLogsAfterPurge(t *testing.T) {
	if raceEnabled {
		// The braid it stops and restarts is built without the detector
		// either way; the test process only produces and reads.
		t.Skip("runs without -race, in make test's procs pass")
	}
	t.Parallel() // waits on paced input and restarts, mostly idle
	env := newCrashEnv(t)
	env.edit(t, "allowed_lateness: 60s", "allowed_lateness: 3s")
	bin := buildBraidFast(t)
	sim, err := simulator.New(simulator.Config{Seed: 95, Topics: env.simTopics, RequestsPerBatch: 8, SplitRatio: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	// Each production has a limit of its own: the runs and the restart
	// between them take what they take.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 15 {
		if err := simulator.Produce(ctx, env.prod, sim.Next()); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.produceEnd(ctx, sim, 95); err != nil { // the watermark moves a minute on: every trace purged
		t.Fatal(err)
	}
	truth := sim.Truth()
	sentinel := sim.EventTime().Add(time.Minute)

	first := startChild(t, bin, env.config)
	env.watch = first
	env.verifyExactlyOnce(t, truth, 2*time.Minute, false, func() string { return tail(first.log.String(), 3000) })
	// The tombstones survive a stop, and the loss of the local state: the
	// restart rebuilds them from the changelog.
	first.stopTerm(t, "SIGTERM after the purge")
	if err := os.RemoveAll(env.stateDir); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, bin, env.config)
	defer c.kill(t)
	c.waitLog(t, "restored state from changelog", 90*time.Second)
	c.waitLog(t, "first checkpoint committed", 60*time.Second)

	// Some traces get a log stamped at the sentinel's time (~1 minute
	// after their spans: past idle_gap + allowed_lateness of them, within
	// allowed_lateness of the watermark), others one stamped at their own
	// time.
	const closedLogs, oldLogs = 20, 5
	want := map[string]string{} // trace id → reason prefix
	var recs []*kgo.Record
	for i, id := range truth.TraceIDs[:closedLogs+oldLogs] {
		at, reason := sentinel, "trace already closed"
		if i >= closedLogs {
			at, reason = truth.Traces[id].Finish, "event time "
		}
		tid, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := proto.Marshal(&logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
			TimeUnixNano: uint64(at.UnixNano()), TraceId: tid,
			Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "after purge " + strconv.Itoa(i)}},
		}}}}}}})
		recs = append(recs, &kgo.Record{Topic: env.simTopics.Logs, Key: []byte(id), Value: v})
		want[id] = reason
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer lcancel()
	if err := env.prod.ProduceSync(lctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rd := kafkatest.Client(t, env.brokers, kgo.ConsumeTopics(env.late), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	late := map[string][]*kgo.Record{}
	deadline := time.Now().Add(time.Minute)
	for n := 0; n < len(want); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d late logs in the late topic; log:\n%s", n, len(want), tail(c.log.String(), 3000))
		}
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		fs := rd.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			late[string(r.Key)] = append(late[string(r.Key)], r)
			n++
		})
	}

	// The fused topic as it stands once the late logs were handled (their
	// checkpoint committed both).
	revs := map[string]map[uint32]int{}
	last := map[string]uint32{}
	for _, r := range env.readCommitted(t, env.fused) {
		var ft braidpb.FusedTrace
		if err := proto.Unmarshal(r.Value, &ft); err != nil {
			t.Fatal(err)
		}
		id := string(r.Key)
		if revs[id] == nil {
			revs[id] = map[uint32]int{}
		}
		revs[id][ft.Revision]++
		last[id] = max(last[id], ft.Revision)
	}
	for id, rs := range revs {
		for rev, n := range rs {
			if n > 1 {
				t.Errorf("trace %s has %d records of revision %d", id, n, rev)
			}
		}
		for rev := range last[id] + 1 {
			if rs[rev] == 0 {
				t.Errorf("trace %s lacks revision %d of 0..%d", id, rev, last[id])
			}
		}
	}
	for id, reason := range want {
		rs := late[id]
		if len(rs) != 1 {
			t.Errorf("trace %s: %d late records, want 1", id, len(rs))
			continue
		}
		if got := lateHeader(rs[0], "braid.reason"); !strings.HasPrefix(got, reason) {
			t.Errorf("trace %s: late reason %q, want %q", id, got, reason)
		}
		if reason == "trace already closed" {
			if got := lateHeader(rs[0], "braid.revision"); got != fmt.Sprint(last[id]) {
				t.Errorf("trace %s: braid.revision %q, want its last revision %d", id, got, last[id])
			}
		}
	}
	t.Logf("%d logs after purge: %d late as \"trace already closed\", %d late by event time; no key has a revision twice (%d keys)",
		len(want), closedLogs, oldLogs, len(revs))
}

func lateHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
