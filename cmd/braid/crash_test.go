package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// buildBraid builds the binary with failpoints and the race detector.
func buildBraid(t *testing.T) string { return buildOnce(t, "braid-race", "-race") }

// builds are the binaries the tests built, by name, in one directory
// that TestMain removes: each is built once, whichever tests run.
var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// buildOnce builds braid with failpoints and flags into name, once per
// test process; tests running in parallel wait for the one build.
func buildOnce(t *testing.T, name string, flags ...string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if bin, ok := builds.bins[name]; ok {
		return bin
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "braid-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = dir, map[string]string{}
	}
	bin := filepath.Join(builds.dir, name)
	args := append(append([]string{"build"}, flags...), "-tags", "failpoints", "-o", bin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("build braid: %v\n%s", err, out)
	}
	builds.bins[name] = bin
	return bin
}

// removeBuilds removes what buildOnce built.
func removeBuilds() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
}

// child is one braid run process.
type child struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(t *testing.T, bin, config string, env ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, "run", "--config", config), log: &syncBuffer{}, done: make(chan error, 1)}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	return c
}

// waitLog polls the child's log until it contains s.
func (c *child) waitLog(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(c.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("child did not log %q within %v; log:\n%s", s, d, headTail(c.log.String(), 3000))
		}
		select {
		case err := <-c.done:
			t.Fatalf("child exited (%v) before logging %q; log:\n%s", err, s, tail(c.log.String(), 3000))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// headTail is the first and the last n bytes of a log (its start says
// how far the child got: prepared, assigned, restored).
func headTail(s string, n int) string {
	if len(s) <= 2*n {
		return s
	}
	return s[:n] + "\n…\n" + s[len(s)-n:]
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// crashEnv is a job configuration on fresh topics of the real broker.
type crashEnv struct {
	template       string
	dir            string
	brokers        []string
	in             []string
	fused          string
	late           string
	config         string
	stateDir       string
	prod           *kgo.Client
	simTopics      simulator.Topics
	fusedPartition int32
	// watch, when set, is the child verifyExactlyOnce waits on: its exit
	// ends the wait at once.
	watch *child
	// kvEvents: the input has KV-block events, which the truth counts in
	// a trace's logs but are not trace members (they go to kvgraph).
	kvEvents bool
}

// wantMembers is what the last revision of trace tt holds: spans, logs
// (its request id's included), points.
func (e *crashEnv) wantMembers(tt simulator.TraceTruth) [3]int {
	logs := tt.Logs + tt.RequestIDLogs
	if e.kvEvents {
		logs -= tt.KVEvents
	}
	return [3]int{tt.Spans, logs, tt.ExemplarPoints}
}

func newCrashEnv(t *testing.T) *crashEnv {
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, 4, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, 4, "braid.fused", "braid.late", "braid.dlq", "group")
	dir := t.TempDir()
	e := &crashEnv{brokers: brokers, in: in, fused: out[0], late: out[1], stateDir: filepath.Join(dir, "state"),
		simTopics: simulator.Topics{Spans: in[0], Logs: in[1], Metrics: in[2]}}
	e.template = fmt.Sprintf(`kafka:
  brokers: [%s]
group: %s
instance_id: %%s
session_timeout: 10s
inputs:
  spans: {topic: %s}
  logs: {topic: %s}
  metrics: {topic: %s}
outputs: {fused: %s, late: %s, dlq: %s}
state: {dir: %%s}
checkpoint_interval: 1s
admin: {addr: "127.0.0.1:0"}
event_time:
  out_of_orderness: 2s
  idleness: 30s
  idle_gap: 1s
  allowed_lateness: 60s
  flush_after: -1s
`, strings.Join(brokers, ","), out[3], in[0], in[1], in[2], out[0], out[1], out[2])
	e.dir = dir
	e.config = e.configFor(t, "crash-0", e.stateDir)
	e.prod = kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))
	return e
}

// configFor writes the configuration of one instance and returns its path.
func (e *crashEnv) configFor(t *testing.T, instance, stateDir string) string {
	t.Helper()
	path := filepath.Join(e.dir, instance+".yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(e.template, instance, stateDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// produceSteady writes batches Collector batches at 5 a second, then a
// sentinel at a later event time on every partition that moves the
// watermark past every real trace. The truth of the real traces comes on
// the channel when all is written.
func (e *crashEnv) produceSteady(t *testing.T, seed int64, batches int) <-chan simulator.Truth {
	sim, err := simulator.New(simulator.Config{Seed: seed, Topics: e.simTopics, RequestsPerBatch: 8, SplitRatio: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan simulator.Truth, 1)
	go func() {
		ctx := context.Background()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < batches; i++ {
			<-tick.C
			if err := simulator.Produce(ctx, e.prod, sim.Next()); err != nil {
				t.Error(err)
				close(out)
				return
			}
		}
		if err := e.produceEnd(ctx, sim, seed); err != nil {
			t.Error(err)
			close(out)
			return
		}
		out <- sim.Truth()
	}()
	return out
}

// verifyExactlyOnce reads the committed fused output until every trace of
// truth is there and checks that no (trace, revision) is there twice, that
// revisions count up from 0, and that each trace's last revision holds
// exactly its spans, logs and points. strict also requires a single
// revision 0 per trace: no trace was emitted early. Sentinel traces may be
// there at most once.
func (e *crashEnv) verifyExactlyOnce(t *testing.T, truth simulator.Truth, d time.Duration, strict bool, logs func() string) {
	t.Helper()
	rd := kafkatest.Client(t, e.brokers, kgo.ConsumeTopics(e.fused), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	revs := map[string][]uint32{}
	counts := map[string][3]int{}
	deadline := time.Now().Add(d)
	missing := func() int {
		n := 0
		for id := range truth.Traces {
			if seen[id] == 0 {
				n++
			}
		}
		return n
	}
	complete := func() bool {
		if missing() > 0 {
			return false
		}
		for id, tt := range truth.Traces {
			if counts[id] != e.wantMembers(tt) {
				return false // a later revision is still to come
			}
		}
		return true
	}
	// differ describes up to 5 traces whose latest revision lacks members.
	differ := func() string {
		var out []string
		for id, tt := range truth.Traces {
			want := e.wantMembers(tt)
			if seen[id] > 0 && counts[id] != want {
				out = append(out, fmt.Sprintf("%s: spans/logs/points %v, want %v (revisions %v)", id, counts[id], want, revs[id]))
			}
		}
		n := len(out)
		sort.Strings(out)
		return fmt.Sprintf("%d differ: %s", n, strings.Join(out[:min(5, n)], "; "))
	}
	for !complete() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d traces missing, %s; logs:\n%s", missing(), len(truth.Traces), differ(), logs())
		}
		if e.watch != nil {
			select {
			case err := <-e.watch.done:
				e.watch.done <- err
				t.Fatalf("braid exited (%v) with %d of %d traces missing, %s; logs:\n%s", err, missing(), len(truth.Traces), differ(), logs())
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := rd.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(rec *kgo.Record) {
			var ft braidpb.FusedTrace
			if err := proto.Unmarshal(rec.Value, &ft); err != nil {
				t.Fatalf("fused record: %v", err)
			}
			id := string(rec.Key)
			seen[id]++
			revs[id] = append(revs[id], ft.Revision)
			counts[id] = [3]int{len(ft.Spans), len(ft.Logs), len(ft.Points)}
		})
	}
	revised := 0
	for id, tt := range truth.Traces {
		for i, r := range revs[id] {
			if r != uint32(i) {
				t.Errorf("trace %s revisions %v: a (trace, revision) repeated or skipped", id, revs[id])
				break
			}
		}
		if len(revs[id]) > 1 {
			revised++
			if strict {
				t.Errorf("trace %s emitted %d times, revisions %v; want once at revision 0", id, seen[id], revs[id])
			}
		}
		if got, want := counts[id], e.wantMembers(tt); got != want {
			t.Errorf("trace %s holds %v spans/logs/points, want %v (logs with its request id included)", id, got, want)
		}
	}
	for id, n := range seen {
		if _, ok := truth.Traces[id]; !ok && n != 1 {
			t.Errorf("sentinel trace %s emitted %d times", id, n)
		}
	}
	t.Logf("%d traces, %d of them revised", len(truth.Traces), revised)
}

// TestCrashExactlyOnce runs braid as a child process under steady input,
// kills it with SIGKILL at random moments and at failpoints inside the
// checkpoint protocol, once with its local state deleted, restarts it each
// time, and checks that the committed fused output holds every expected
// (trace, revision) exactly once and nothing else.
func TestCrashExactlyOnce(t *testing.T) {
	t.Parallel() // waits on paced input and restarts, mostly idle
	env := newCrashEnv(t)
	bin := buildBraid(t)

	// Steady input: 60 Collector batches of 8 requests, 5 batches a second.
	truthc := env.produceSteady(t, 42, 60)

	r := rand.New(rand.NewPCG(1, 2))
	kills := 0
	// Random kills while input flows.
	for i := 0; i < 10; i++ {
		c := startChild(t, bin, env.config)
		c.waitLog(t, "braid job prepared", 60*time.Second)
		time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond) // a random kill moment
		c.kill(t)
		kills++
	}
	// Kills inside the checkpoint protocol.
	for _, fp := range []string{"before-end-txn:3", "after-end-txn:2", "before-local-checkpoint:2", "local-commit-in-flight:3", "after-end-txn:5"} {
		c := startChild(t, bin, env.config, "BRAID_FAILPOINT="+fp)
		select {
		case err := <-c.done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child with failpoint %s ended with %v, not killed at the failpoint; log:\n%s", fp, err, tail(c.log.String(), 3000))
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("failpoint %s never reached; log:\n%s", fp, tail(c.log.String(), 3000))
		}
		if !strings.Contains(c.log.String(), "braid job prepared") {
			t.Fatalf("child with failpoint %s exited early:\n%s", fp, tail(c.log.String(), 3000))
		}
		kills++
	}
	// A restart with the local state gone: rebuilt from the changelog.
	if err := os.RemoveAll(env.stateDir); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, bin, env.config)
	c.waitLog(t, "restored state from changelog", 90*time.Second)
	c.kill(t)
	kills++

	truth, ok := <-truthc
	if !ok {
		t.Fatal("producing the input failed")
	}
	// The last run goes on until every expected trace is out.
	final := startChild(t, bin, env.config)
	defer final.kill(t)
	env.verifyExactlyOnce(t, truth, 3*time.Minute, true, func() string { return tail(final.log.String(), 3000) })
	t.Logf("%d kills; %d traces each fused exactly once", kills, len(truth.Traces))
}

// TestSigtermFinalCheckpoint checks that SIGTERM makes a final checkpoint
// and that a restart then reads no input again. The checkpoint interval is
// 60s, so the only checkpoint before SIGTERM is the final one.
func TestSigtermFinalCheckpoint(t *testing.T) {
	t.Parallel() // waits on paced input and restarts, mostly idle
	env := newCrashEnv(t)
	cfg, err := os.ReadFile(env.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte("checkpoint_interval: 1s"), []byte("checkpoint_interval: 60s\nlog_interval: 100ms"), 1)
	cfg = bytes.Replace(cfg, []byte("idleness: 30s"), []byte("idleness: 120s"), 1) // ≥ 2 × the interval
	if err := os.WriteFile(env.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildBraid(t)
	sim, _ := simulator.New(simulator.Config{Seed: 7, Topics: env.simTopics})
	var msgs []simulator.Message
	for range 20 {
		msgs = append(msgs, sim.Next()...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := simulator.Produce(ctx, env.prod, msgs); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, bin, env.config)
	c.waitLog(t, fmt.Sprintf("braid progress\" messages=%d ", len(msgs)), 60*time.Second)
	if strings.Contains(c.log.String(), "first checkpoint committed") {
		t.Fatal("a periodic checkpoint ran before SIGTERM; the test needs only the final one")
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-c.done; err != nil {
		t.Fatalf("braid exited with %v after SIGTERM; log:\n%s", err, tail(c.log.String(), 3000))
	}
	if got := stoppedField(t, c.log.String(), "checkpoints"); got != "1" {
		t.Fatalf("first run made %s checkpoints, want 1 (the final one)", got)
	}
	// New input after the stop: the restart must read exactly that.
	more := sim.Next()
	if err := simulator.Produce(ctx, env.prod, more); err != nil {
		t.Fatal(err)
	}
	again := startChild(t, bin, env.config)
	again.waitLog(t, fmt.Sprintf("braid progress\" messages=%d ", len(more)), 60*time.Second)
	n := strings.Count(again.log.String(), "braid progress")
	for strings.Count(again.log.String(), "braid progress") < n+5 { // 5 more progress lines: nothing else comes
		again.waitLog(t, "braid progress", time.Second)
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	again.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-again.done; err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got := stoppedField(t, again.log.String(), "messages"); got != fmt.Sprint(len(more)) {
		t.Fatalf("restart after SIGTERM read %s messages, want only the %d new ones; log:\n%s", got, len(more), tail(again.log.String(), 3000))
	}
}

// stoppedField returns a field of the "braid job stopped" log line.
func stoppedField(t *testing.T, log, field string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "braid job stopped") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("no %q in a stop line of:\n%s", field, tail(log, 2000))
	return ""
}

// produceEnd flushes sim's open requests, then writes three batches of a
// sentinel fleet a minute later in event time, so that the watermark passes
// every request of sim.
func (e *crashEnv) produceEnd(ctx context.Context, sim *simulator.Simulator, seed int64) error {
	if err := simulator.Produce(ctx, e.prod, sim.Flush()); err != nil {
		return err
	}
	sentinel, err := simulator.New(simulator.Config{Seed: seed + 1, Topics: e.simTopics, RequestsPerBatch: 40, Start: sim.EventTime().Add(time.Minute)})
	if err != nil {
		return err
	}
	for range 3 {
		if err := simulator.Produce(ctx, e.prod, sentinel.Next()); err != nil {
			return err
		}
	}
	return nil
}
