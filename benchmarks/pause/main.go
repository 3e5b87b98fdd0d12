// Command pause measures braid's checkpoint pause — how long tasks stop
// processing at a checkpoint, barrier to resume — under steady input at a
// given rate, and reports its percentiles, regular checkpoints and
// follow-ups apart, with the parts of the pause: the barrier (tasks
// finish their queued input and hand over state and output), the end of
// the Kafka transaction (flush, offset commit, EndTxn) and the apply
// (tasks commit their state batch, with its sync, and resume).
//
//	BRAID_KAFKA_BROKERS=127.0.0.1:39092 go run ./benchmarks/pause -interval 5s -duration 2m
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
	duration := flag.Duration("duration", 2*time.Minute, "how long to measure")
	rate := flag.Int("rate", 400, "simulated requests per second (steady)")
	out := flag.String("out", "", "result file (default benchmarks/results/pause-<interval>.json)")
	flag.Parse()
	brokers := strings.Split(os.Getenv("BRAID_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		log.Fatal("BRAID_KAFKA_BROKERS is not set")
	}
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
	cfg.CheckpointInterval = *interval
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
	j, err := job.Prepare(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()

	// Steady input with event times following the wall clock.
	go func() {
		batch := 200 * time.Millisecond
		sim, _ := simulator.New(simulator.Config{Seed: 1, Topics: topics, Start: time.Now(), BatchInterval: batch, RequestsPerBatch: max(1, *rate/5)})
		tick := time.NewTicker(batch)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			simulator.Produce(ctx, cl, sim.Next())
			sim.ForgetTraces()
		}
	}()

	time.Sleep(2 * *interval) // skip start-up checkpoints
	measuring.Store(true)
	time.Sleep(*duration)
	measuring.Store(false)
	c := j.Counters()
	msgs := c.Messages.Load()
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// Regular checkpoints and follow-ups apart: a follow-up commits what
	// the markers of the one before released, a few records.
	type dist struct {
		N                          int
		P50MS, P99MS, MaxMS        float64
		BarrierP50MS, BarrierP99MS float64
		EndP50MS, EndP99MS         float64
		ApplyP50MS, ApplyP99MS     float64
		PausesMS                   []float64
	}
	summarize := func(follow bool) dist {
		var pause, barrier, end, apply []time.Duration
		for _, ci := range infos {
			if ci.FollowUp != follow || !ci.Committed {
				continue
			}
			pause, barrier = append(pause, ci.Pause), append(barrier, ci.Barrier)
			end, apply = append(end, ci.Commit-ci.Barrier), append(apply, ci.Pause-ci.Commit)
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
			ApplyP50MS: ms(apply, 0.5), ApplyP99MS: ms(apply, 0.99)}
		for _, p := range pause {
			d.PausesMS = append(d.PausesMS, float64(p)/1e6)
		}
		return d
	}
	regular, follow := summarize(false), summarize(true)
	fmt.Printf("interval %v, %d requests/s (%d messages in %v)\n", *interval, *rate, msgs, *duration)
	for _, x := range []struct {
		name string
		d    dist
	}{{"regular", regular}, {"follow-up", follow}} {
		fmt.Printf("  %-9s %3d checkpoints: pause p50 %.1f ms, p99 %.1f ms, max %.1f ms; barrier p50/p99 %.1f/%.1f ms, end of transaction %.1f/%.1f ms, apply %.1f/%.1f ms\n",
			x.name, x.d.N, x.d.P50MS, x.d.P99MS, x.d.MaxMS, x.d.BarrierP50MS, x.d.BarrierP99MS, x.d.EndP50MS, x.d.EndP99MS, x.d.ApplyP50MS, x.d.ApplyP99MS)
	}
	if *out == "" {
		*out = filepath.Join("benchmarks", "results", "pause-"+interval.String()+".json")
	}
	b, _ := json.MarshalIndent(map[string]any{"interval": interval.String(), "rate_requests_per_s": *rate, "duration": duration.String(), "messages": msgs,
		"checkpoints": regular.N, "p50_ms": regular.P50MS, "p99_ms": regular.P99MS, "max_ms": regular.MaxMS, "regular": regular, "follow_up": follow}, "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
