// Command scale measures braid's throughput with 2 instances against 1, each
// instance a separate `braid run` process limited to one core
// (GOMAXPROCS=1), on the same pre-produced Collector-shaped input on the
// same broker. Throughput is input messages over the time until the group
// has committed every input offset (lag 0), start-up included; checkpoints
// every second so that the commit of the last offsets adds little.
//
//	BRAID_KAFKA_BROKERS=127.0.0.1:39092 go run ./benchmarks/scale
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/simulator"
)

func main() {
	requests := flag.Int("requests", 40000, "requests to simulate")
	rounds := flag.Int("rounds", 2, "rounds of (1 instance, 2 instances)")
	out := flag.String("out", "benchmarks/results/scale.json", "result file")
	flag.Parse()
	brokers := strings.Split(os.Getenv("BRAID_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		log.Fatal("BRAID_KAFKA_BROKERS is not set (make bench-scale starts a broker)")
	}
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(simulator.Partitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	run := fmt.Sprintf("scale-%d", time.Now().UnixNano())
	topics := simulator.Topics{Spans: run + "-spans", Logs: run + "-logs", Metrics: run + "-metrics"}
	if err := kafka.EnsureTopics(ctx, adm, 1, kafka.Topic{Name: topics.Spans, Partitions: 4}, kafka.Topic{Name: topics.Logs, Partitions: 4}, kafka.Topic{Name: topics.Metrics, Partitions: 4}); err != nil {
		log.Fatal(err)
	}
	sim, err := simulator.New(simulator.Config{Seed: 1, Topics: topics, RequestsPerBatch: 8})
	if err != nil {
		log.Fatal(err)
	}
	messages := 0
	for n := 0; n < *requests; n += 8 {
		msgs := sim.Next()
		messages += len(msgs)
		if err := simulator.Produce(ctx, cl, msgs); err != nil {
			log.Fatal(err)
		}
	}
	messages += len(sim.Flush())
	log.Printf("workload: %d requests in %d messages on 4 partitions", *requests, messages)

	dir, err := os.MkdirTemp("", "braid-scale-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "braid")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/braid").CombinedOutput(); err != nil {
		log.Fatalf("build: %v\n%s", err, out)
	}
	results := map[int][]float64{}
	for r := 0; r < *rounds; r++ {
		for _, n := range []int{1, 2} {
			secs := measure(ctx, adm, bin, dir, brokers, topics, fmt.Sprintf("%s-r%d-n%d", run, r, n), n)
			results[n] = append(results[n], float64(messages)/secs)
			log.Printf("round %d, %d instance(s): %.1fs, %.0f msgs/s", r+1, n, secs, float64(messages)/secs)
		}
	}
	m1, m2 := median(results[1]), median(results[2])
	fmt.Printf("1 instance: %.0f msgs/s   2 instances: %.0f msgs/s   ratio %.2f (medians of %d rounds)\n", m1, m2, m2/m1, *rounds)
	b, _ := json.MarshalIndent(map[string]any{"messages": messages, "requests": *requests, "msgs_per_s": results, "median_1": m1, "median_2": m2, "ratio": m2 / m1}, "", "  ")
	os.MkdirAll(filepath.Dir(*out), 0o755)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}

// measure runs n instances as a fresh group and returns the seconds until
// every input offset is committed.
func measure(ctx context.Context, adm *kadm.Client, bin, dir string, brokers []string, topics simulator.Topics, group string, n int) float64 {
	var procs []*exec.Cmd
	start := time.Now()
	for i := 0; i < n; i++ {
		cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
group: %s
instance_id: i%d
inputs: {spans: {topic: %s}, logs: {topic: %s}, metrics: {topic: %s}}
outputs: {fused: %s-fused, late: %s-late, dlq: %s-dlq}
state: {dir: %s}
admin: {addr: ""}
checkpoint_interval: 1s
`, strings.Join(brokers, ","), group, i, topics.Spans, topics.Logs, topics.Metrics, group, group, group, filepath.Join(dir, group, fmt.Sprint(i)))
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", group, i))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			log.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "--config", path)
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		logf, _ := os.Create(path + ".log")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	for {
		lags, err := adm.Lag(ctx, group)
		if err == nil {
			total, known := int64(0), 0
			for _, l := range lags[group].Lag {
				for _, pl := range l {
					if pl.Topic == topics.Spans || pl.Topic == topics.Logs || pl.Topic == topics.Metrics {
						known++
						total += pl.Lag
					}
				}
			}
			if known == 12 && total == 0 {
				return time.Since(start).Seconds()
			}
		}
		if time.Since(start) > 10*time.Minute {
			log.Fatalf("%s did not catch up within 10 minutes", group)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
