// Command pause measures braid's checkpoint pause — how long tasks stop
// processing at a checkpoint — under steady input at a given rate, and
// reports its percentiles, regular checkpoints and follow-ups apart, with
// the parts of a checkpoint: the barrier (tasks finish their queued input
// and hand over state and output), the end of the Kafka transaction
// (flush, offset commit, EndTxn) and the apply (tasks commit their state
// batch and resume).
//
// It runs braid with tasks running on past the barrier while the
// transaction ends (checkpoint_run_on, braid's default, engine.Config.RunOn:
// their output held, the pause is the barrier and the apply) and, side by
// side on the same broker and input, with tasks held from the barrier to
// the end of the transaction (checkpoint_run_on: false: the pause is the
// whole checkpoint), in interleaved rounds.
//
//	BRAID_KAFKA_BROKERS=127.0.0.1:39092 go run ./benchmarks/pause -interval 5s -duration 1m -rounds 2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
)

func main() {
	interval := flag.Duration("interval", 5*time.Second, "checkpoint interval")
	duration := flag.Duration("duration", time.Minute, "how long to measure each contender in each round")
	rate := flag.Int("rate", 400, "simulated requests per second (steady)")
	rounds := flag.Int("rounds", 2, "interleaved rounds of both contenders")
	out := flag.String("out", "", "result file (default benchmarks/results/pause-<interval>.json)")
	held := flag.Bool("held", true, "also measure tasks held from the barrier to the end of the transaction (checkpoint_run_on: false)")
	flag.Parse()
	brokers := strings.Split(os.Getenv("BRAID_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		log.Fatal("BRAID_KAFKA_BROKERS is not set")
	}
	infos := map[bool][]engine.CheckpointInfo{}
	msgs := map[bool]int64{}
	for r := range *rounds {
		for _, hold := range contenders(*held) {
			ci, n := measure(brokers, *interval, *duration, *rate, hold)
			infos[hold] = append(infos[hold], ci...)
			msgs[hold] += n
			fmt.Printf("round %d, %s: %d checkpoints, %d messages\n", r+1, name(hold), len(ci), n)
		}
	}
	res := map[string]any{"interval": interval.String(), "rate_requests_per_s": *rate, "duration_each": duration.String(), "rounds": *rounds}
	fmt.Printf("interval %v, %d requests/s, %d rounds of %v each\n", *interval, *rate, *rounds, *duration)
	for _, hold := range contenders(*held) {
		regular, follow := summarize(infos[hold], false), summarize(infos[hold], true)
		for _, x := range []struct {
			name string
			d    dist
		}{{"regular", regular}, {"follow-up", follow}} {
			fmt.Printf("  %-5s %-9s %3d checkpoints: pause p50 %.1f ms, p99 %.1f ms, max %.1f ms; barrier p50/p99 %.1f/%.1f ms, end of transaction %.1f/%.1f ms, apply %.1f/%.1f ms, whole checkpoint %.1f/%.1f ms\n",
				name(hold), x.name, x.d.N, x.d.P50MS, x.d.P99MS, x.d.MaxMS, x.d.BarrierP50MS, x.d.BarrierP99MS, x.d.EndP50MS, x.d.EndP99MS, x.d.ApplyP50MS, x.d.ApplyP99MS, x.d.CycleP50MS, x.d.CycleP99MS)
		}
		res[name(hold)] = map[string]any{"messages": msgs[hold], "checkpoints": regular.N, "p50_ms": regular.P50MS, "p99_ms": regular.P99MS, "max_ms": regular.MaxMS,
			"regular": regular, "follow_up": follow}
	}
	if *out == "" {
		*out = filepath.Join("benchmarks", "results", "pause-"+interval.String()+".json")
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}

// contenders: running on, and held too where held.
func contenders(held bool) []bool {
	if held {
		return []bool{false, true}
	}
	return []bool{false}
}

func name(hold bool) string {
	if hold {
		return "held"
	}
	return "runon"
}

// measure runs a job on fresh topics under steady input for duration (after
// two intervals of start-up) and returns the checkpoints it took meanwhile
// and the messages it read.
func measure(brokers []string, interval, duration time.Duration, rate int, hold bool) ([]engine.CheckpointInfo, int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(simulator.Partitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	run := fmt.Sprintf("pause-%d", time.Now().UnixNano())
	topics := simulator.Topics{Spans: run + "-spans", Logs: run + "-logs", Metrics: run + "-metrics"}
	if err := kafka.EnsureTopics(ctx, kadm.NewClient(cl), 1, kafka.Topic{Name: topics.Spans, Partitions: 4}, kafka.Topic{Name: topics.Logs, Partitions: 4}, kafka.Topic{Name: topics.Metrics, Partitions: 4}); err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "braid-pause-")
	defer os.RemoveAll(dir)
	cfg := &job.Config{}
	cfg.Kafka.Brokers = brokers
	cfg.Group = run
	cfg.InstanceID = "0"
	cfg.State.Dir = dir
	cfg.Inputs.Spans.Topic, cfg.Inputs.Logs.Topic, cfg.Inputs.Metrics.Topic = topics.Spans, topics.Logs, topics.Metrics
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = run+"-fused", run+"-late", run+"-dlq"
	cfg.CheckpointInterval = interval
	runOn := !hold
	cfg.CheckpointRunOn = &runOn
	// Every checkpoint, as it ends: the pause and its parts.
	var mu sync.Mutex
	var infos []engine.CheckpointInfo
	var measuring atomic.Bool
	cfg.OnCheckpoint = func(ci engine.CheckpointInfo) {
		if measuring.Load() {
			mu.Lock()
			infos = append(infos, ci)
			mu.Unlock()
		}
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		log.Fatal(err)
	}
	// The runtime as braid run sets it: the memory limit at the budget,
	// GOGC at job.GCPercent.
	defer job.TuneRuntime(cfg.State.MemoryBudget)()
	j, err := job.Prepare(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()

	// Steady input with event times following the wall clock.
	go func() {
		batch := 200 * time.Millisecond
		sim, _ := simulator.New(simulator.Config{Seed: 1, Topics: topics, Start: time.Now(), BatchInterval: batch, RequestsPerBatch: max(1, rate/5)})
		tick := time.NewTicker(batch)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			simulator.Produce(ctx, cl, sim.Next())
			sim.ForgetTraces()
		}
	}()

	time.Sleep(2 * interval) // skip start-up checkpoints
	measuring.Store(true)
	time.Sleep(duration)
	measuring.Store(false)
	msgs := j.Counters().Messages.Load()
	cancel()
	if err := <-done; err != nil {
		log.Fatalf("%s: %v", name(hold), err)
	}
	mu.Lock()
	defer mu.Unlock()
	return infos, msgs
}

type dist struct {
	N                          int
	P50MS, P99MS, MaxMS        float64
	BarrierP50MS, BarrierP99MS float64
	EndP50MS, EndP99MS         float64
	ApplyP50MS, ApplyP99MS     float64
	CycleP50MS, CycleP99MS     float64
	PausesMS                   []float64
}

// summarize is the distribution of the committed regular checkpoints, or
// of the follow-ups (a follow-up commits what the markers of the one
// before released, a few records).
func summarize(infos []engine.CheckpointInfo, follow bool) dist {
	var pause, barrier, end, apply, cycle []time.Duration
	for _, ci := range infos {
		if ci.FollowUp != follow || !ci.Committed {
			continue
		}
		pause, barrier, cycle = append(pause, ci.Pause), append(barrier, ci.Barrier), append(cycle, ci.Cycle)
		end, apply = append(end, ci.Commit-ci.Barrier), append(apply, ci.Cycle-ci.Commit)
	}
	ms := func(ds []time.Duration, p float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))]) / 1e6
	}
	d := dist{N: len(pause), P50MS: ms(pause, 0.5), P99MS: ms(pause, 0.99), MaxMS: ms(pause, 1),
		BarrierP50MS: ms(barrier, 0.5), BarrierP99MS: ms(barrier, 0.99), EndP50MS: ms(end, 0.5), EndP99MS: ms(end, 0.99),
		ApplyP50MS: ms(apply, 0.5), ApplyP99MS: ms(apply, 0.99), CycleP50MS: ms(cycle, 0.5), CycleP99MS: ms(cycle, 0.99)}
	for _, p := range pause {
		d.PausesMS = append(d.PausesMS, float64(p)/1e6)
	}
	return d
}
