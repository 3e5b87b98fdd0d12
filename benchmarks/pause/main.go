// Command pause measures braid's checkpoint pause — how long tasks stop
// processing at a checkpoint, barrier to resume — under steady input at a
// given rate, and reports its percentiles.
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
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/simulator"
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

	st := j.Engine().Stats()
	var pauses []time.Duration
	seen := st.Checkpoints.Load()
	end := time.Now().Add(*duration)
	warm := time.Now().Add(2 * *interval) // skip start-up checkpoints
	for time.Now().Before(end) {
		if n := st.Checkpoints.Load(); n != seen {
			seen = n
			if time.Now().After(warm) {
				pauses = append(pauses, time.Duration(st.LastPauseNanos.Load()))
			}
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	c := j.Counters()
	msgs := c.Messages.Load()
	cancel()
	<-done
	sort.Slice(pauses, func(a, b int) bool { return pauses[a] < pauses[b] })
	pct := func(p float64) time.Duration {
		if len(pauses) == 0 {
			return 0
		}
		return pauses[min(len(pauses)-1, int(p*float64(len(pauses))))]
	}
	fmt.Printf("interval %v, %d requests/s (%d messages in %v): %d checkpoints, pause p50 %v, p99 %v, max %v\n",
		*interval, *rate, msgs, *duration, len(pauses), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond))
	if *out == "" {
		*out = filepath.Join("benchmarks", "results", "pause-"+interval.String()+".json")
	}
	ms := make([]float64, len(pauses))
	for i, p := range pauses {
		ms[i] = float64(p) / 1e6
	}
	b, _ := json.MarshalIndent(map[string]any{"interval": interval.String(), "rate_requests_per_s": *rate, "duration": duration.String(), "messages": msgs,
		"checkpoints": len(pauses), "p50_ms": float64(pct(0.5)) / 1e6, "p99_ms": float64(pct(0.99)) / 1e6, "max_ms": float64(pct(1)) / 1e6, "pauses_ms": ms}, "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
