package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/simulator"
)

func cmdDemo(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:19092", "loopback address of the in-process Kafka broker")
	partitions := fs.Int("partitions", 4, "partitions of the input topics")
	rate := fs.Float64("rate", 40, "simulated requests per second of event time: 0.2 is a trickle; a few hundred saturate the default fleet")
	realistic := fs.Bool("realistic", true, "simulate the realistic fleet (FORMAT.md: engine logs without trace ids, aborted requests, Prometheus and DCGM scrapes); false: the original four servers")
	hosts := fs.Int("hosts", 0, "hosts of the realistic fleet, two GPUs each (0: the simulator's default, 4)")
	kvEvents := fs.Bool("kv-events", false, "write KV-block events (KV.md) of every request on the logs topic (realistic fleet only)")
	faults := fs.String("faults", "all", "KV faults to inject, comma-separated triggers or \"all\" ("+triggerNames()+"), the first 10s after the start, then one every 20s of event time; implies --kv-events; \"\": none")
	truthFile := fs.String("truth", "", "write the simulator's ground truth (JSON Lines, FORMAT.md) to this file on exit")
	encoding := fs.String("encoding", "otlp_proto", "encoding the simulated Collector writes: otlp_proto or otlp_json")
	keyed := fs.Bool("keyed", true, "simulate partition_traces_by_id (false: whole unkeyed batches)")
	stateDir := fs.String("state-dir", "", "state directory (default: a temporary one)")
	quiet := fs.Bool("quiet", false, "do not print fused records, only the stats line")
	adminAddr := fs.String("admin-addr", "127.0.0.1:9464", "admin HTTP server (/metrics, /healthz, /readyz); empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 || !*realistic && *rate < 5 {
		return fmt.Errorf("demo: --rate %v: want more than 0 (at least 5 with --realistic=false)", *rate)
	}
	triggers, err := parseFaults(*faults)
	if err != nil {
		return err
	}
	if (*kvEvents || len(triggers) > 0) && !*realistic {
		return errors.New("demo: --kv-events and --faults need --realistic")
	}
	host, portStr, ok := strings.Cut(*addr, ":")
	port, perr := strconv.Atoi(portStr)
	if !ok || host != "127.0.0.1" || perr != nil {
		return fmt.Errorf("demo: --addr must be 127.0.0.1:PORT, got %q", *addr)
	}
	if *stateDir == "" {
		d, err := os.MkdirTemp("", "braid-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*stateDir = d
	}

	topics := []string{"otlp_spans", "otlp_logs", "otlp_metrics"}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(int32(*partitions), topics...))
	if err != nil {
		return fmt.Errorf("demo: start in-process Kafka on %s: %w", *addr, err)
	}
	defer cluster.Close()
	fmt.Printf("braid demo: in-process Kafka listening on %s\n", *addr)
	fmt.Printf("  read fused records with: kcat -C -b %s -t braid.fused   or   braid tail --brokers %s\n", *addr, *addr)
	if *adminAddr != "" {
		fmt.Printf("  metrics: curl http://%s/metrics\n", *adminAddr)
	}
	fmt.Println()

	cfg := &job.Config{}
	cfg.Kafka.Brokers = []string{*addr}
	cfg.Group = "braid-demo"
	cfg.InstanceID = "demo"
	cfg.State.Dir = *stateDir
	cfg.CheckpointInterval = time.Second
	cfg.Admin.Addr = *adminAddr
	cfg.EventTime.OutOfOrderness = 2 * time.Second
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EventTime.IdleGap = 2 * time.Second
	cfg.EventTime.AllowedLateness = 30 * time.Second
	cfg.EventTime.FlushAfter = 5 * time.Second
	for _, in := range []*job.InputConfig{&cfg.Inputs.Spans, &cfg.Inputs.Logs, &cfg.Inputs.Metrics} {
		in.Encoding = *encoding
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	j, err := job.Prepare(ctx, cfg, log)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	go func() { errc <- j.Run(ctx) }()
	sim := simOptions{rate: *rate, encoding: *encoding, keyed: *keyed, realistic: *realistic, hosts: *hosts, truth: *truthFile,
		kvEvents: *kvEvents || len(triggers) > 0, faults: triggers}
	go func() { errc <- simulate(ctx, *addr, sim) }()
	go func() { errc <- watchIncidents(ctx, *addr, cfg.Outputs.Incidents, os.Stderr) }()
	workers := 3 // job, simulator, incidents
	if !*quiet {
		workers++
		go func() { errc <- cmdTail(ctx, []string{"--brokers", *addr, "--from-beginning"}, os.Stdout) }()
	}

	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	c := j.Counters()
	for {
		select {
		case <-ctx.Done():
			return drain(errc, workers)
		case err := <-errc:
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return drain(errc, workers-1)
		case <-tick.C:
			st := j.Engine().Stats()
			kc := j.KVCounters()
			fmt.Fprintf(os.Stderr, "-- messages %d  members %d  fused %d (revisions %d)  late %d  dlq %d  logs joined by request id %d (unresolved %d)  resource points %d  KV events %d  incidents %d  open traces %d  checkpoints %d  last pause %v\n",
				c.Messages.Load(), c.Members.Load(), c.Fused.Load(), c.Revisions.Load(), c.Late.Load(), c.DLQ.Load(),
				c.Resolved.Load(), c.Unresolved.Load(), c.ResourcePoint.Load(), c.KVLogs.Load(), kc.Incidents.Load(), c.OpenTraces.Load(), st.Checkpoints.Load(),
				time.Duration(st.LastPauseNanos.Load()).Round(time.Microsecond))
		}
	}
}

// drain waits for n workers to report, at most 15s each.
func drain(errc chan error, n int) error {
	var first error
	for range n {
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) && first == nil {
				first = err
			}
		case <-time.After(15 * time.Second):
			return first
		}
	}
	return first
}

// simOptions are the demo's simulator flags.
type simOptions struct {
	rate            float64
	encoding, truth string
	keyed           bool
	realistic       bool
	hosts           int
	kvEvents        bool
	faults          []simulator.KVTrigger
}

func triggerNames() string {
	names := make([]string, len(simulator.KVTriggers))
	for i, t := range simulator.KVTriggers {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// parseFaults reads --faults: "" (none), "all", or comma-separated
// triggers.
func parseFaults(v string) ([]simulator.KVTrigger, error) {
	if v == "" {
		return nil, nil
	}
	if v == "all" {
		return slices.Clone(simulator.KVTriggers), nil
	}
	var out []simulator.KVTrigger
	for _, name := range strings.Split(v, ",") {
		t := simulator.KVTrigger(strings.TrimSpace(name))
		if t.Pattern() == "" {
			return nil, fmt.Errorf("demo: --faults: unknown trigger %q (want all or some of %s)", name, triggerNames())
		}
		out = append(out, t)
	}
	return out, nil
}

// simConfig returns the simulator configuration for the demo's flags, with
// event time starting at start.
func (o simOptions) simConfig(seed int64, start time.Time) simulator.Config {
	scfg := simulator.Config{
		Seed:          seed,
		Start:         start,
		Encoding:      o.encoding,
		BatchInterval: 200 * time.Millisecond,
	}
	if o.realistic {
		scfg.Realistic = true
		scfg.Rate = o.rate
		scfg.Hosts = o.hosts
		scfg.KVEvents = o.kvEvents
		for i, t := range o.faults {
			scfg.KV.Faults = append(scfg.KV.Faults, simulator.KVFault{Trigger: t, At: start.Add(10*time.Second + time.Duration(i)*20*time.Second), GPU: -1})
		}
	} else {
		scfg.RequestsPerBatch = max(1, int(o.rate/5))
	}
	if !o.keyed {
		scfg.Keying = simulator.Unkeyed
	}
	return scfg
}

// simulate writes Collector-shaped telemetry at o.rate requests per second,
// with event times following the wall clock, and the ground truth to
// o.truth (if set) when ctx ends.
func simulate(ctx context.Context, addr string, o simOptions) error {
	sim, err := simulator.New(o.simConfig(time.Now().UnixNano(), time.Now()))
	if err != nil {
		return err
	}
	if o.truth != "" {
		defer func() {
			f, err := os.Create(o.truth)
			if err == nil {
				err = errors.Join(sim.WriteTruth(f), f.Close())
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "demo: write truth: %v\n", err)
			}
		}()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(simulator.Partitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := simulator.Produce(ctx, cl, sim.Next()); err != nil && ctx.Err() == nil {
				return fmt.Errorf("simulator: %w", err)
			}
			if o.truth == "" && sim.EventTime().Unix()%60 == 0 {
				sim.ForgetTraces()
			}
		}
	}
}
