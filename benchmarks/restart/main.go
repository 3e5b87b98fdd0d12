// Command restart measures how long a fuse task takes to restart from local
// Pebble state of a given size: it builds the state through the real stage
// (engine.Harness, no Kafka), closes it, and times opening the keyspace and
// reloading every open trace.
//
//	go run ./benchmarks/restart -state-bytes 1073741824
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/state"
)

func main() {
	target := flag.Int64("state-bytes", 1<<30, "state size on disk to build before the restart")
	dir := flag.String("dir", "", "state directory (default: a temporary one, removed at the end)")
	flag.Parse()
	if *dir == "" {
		d, err := os.MkdirTemp("", "braid-restart-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	cfg := fuse.Config{Partitions: 1, IdleGap: 24 * time.Hour, AllowedLateness: time.Hour, FlushAfter: -1}
	stage, err := fuse.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ecfg := engine.Config{OutOfOrderness: time.Second, Idleness: time.Hour}
	now := time.Unix(1e9, 0)

	store, err := state.Open(state.Options{Dir: *dir})
	if err != nil {
		log.Fatal(err)
	}
	ecfg.Store = store
	h, err := engine.NewHarness(ecfg, stage.Topology(), 0, now)
	if err != nil {
		log.Fatal(err)
	}
	sim, err := simulator.New(simulator.Config{Seed: 1, RequestsPerBatch: 64})
	if err != nil {
		log.Fatal(err)
	}
	inputs := map[string]int{"otlp_spans": 0, "otlp_logs": 1, "otlp_metrics": 2}
	start := time.Now()
	var off int64
	for b := 0; ; b++ {
		for _, m := range sim.Next() {
			if err := h.Process(inputs[m.Topic], &kgo.Record{Key: m.Key, Value: m.Value, Offset: off}); err != nil {
				log.Fatal(err)
			}
			off++
		}
		sim.ForgetTraces()
		h.Out = h.Out[:0]
		if b%50 == 49 {
			if err := h.Checkpoint(); err != nil {
				log.Fatal(err)
			}
			if int64(h.Task().State.Size()) >= *target {
				break
			}
		}
	}
	size := h.Task().State.Size()
	open := stage.Counters().OpenTraces.Load()
	build := time.Since(start)
	h.Close()
	if err := store.Close(); err != nil {
		log.Fatal(err)
	}

	// The restart: open the store and the task, reload every open trace.
	t0 := time.Now()
	store, err = state.Open(state.Options{Dir: *dir})
	if err != nil {
		log.Fatal(err)
	}
	stage2, _ := fuse.New(cfg)
	ecfg.Store = store
	h2, err := engine.NewHarness(ecfg, stage2.Topology(), 0, now)
	if err != nil {
		log.Fatal(err)
	}
	restart := time.Since(t0)
	reopened := stage2.Counters().OpenTraces.Load()
	h2.Close()
	store.Close()
	if reopened != open {
		log.Fatalf("restart reloaded %d open traces, had %d", reopened, open)
	}
	fmt.Printf("state on disk %.2f GiB, %d open traces (built in %v)\n", float64(size)/(1<<30), open, build.Round(time.Second))
	fmt.Printf("restart from local Pebble: %v\n", restart.Round(time.Millisecond))
}
