package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/connectors/view"
)

const demoUsage = `Usage: braid demo [flags]

Runs an in-process Kafka (franz-go's kfake) on --addr, the telemetry
simulator with KV-cache faults, a TTFT regression, a GPU memory leak and a
jailbreak jump, the job, and the view; prints fused records on stdout and
incidents, alert changes and a stats line on stderr. README.md, "Set-up".

Flags:
`

// The demo's event-time settings that its tests reason with.
const (
	demoOutOfOrderness = 2 * time.Second
	demoIdleGap        = 2 * time.Second
)

// runDemo runs the demo: fused records on out, incidents, alerts and the
// stats line on errOut.
func runDemo(ctx context.Context, args []string, log *slog.Logger, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, demoUsage)
	addr := fs.String("addr", "127.0.0.1:19092", "loopback address of the in-process Kafka broker")
	partitions := fs.Int("partitions", 4, "partitions of the input topics")
	rate := fs.Float64("rate", 20, "simulated requests per second of event time: 0.2 is a trickle; from about 40 the two servers of gpu-node-02 saturate (their TTFT passes BraidTTFTHigh's 2.5s); a few hundred saturate the default fleet")
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
	viewAddr := fs.String("view-addr", view.DefaultAddr, "the drill-down view (braid view) in the browser; empty: none")
	regression := fs.String("regression", defaultRegression, "TTFT regression to inject (realistic fleet only): server=INDEX (host·2 + GPU index),factor=F (TTFT × F),from=D,to=D (event time after the start); \"\": none")
	leak := fs.String("leak", defaultLeak, "GPU memory leak to inject (realistic fleet only): gpu=INDEX (host·2 + GPU index),rate=MiB per minute,from=D,to=D (event time after the start); \"\": none")
	jump := fs.String("jailbreak-jump", defaultJump, "a tenant's jailbreak attempts to jump (realistic fleet only; its guardrails and evaluators report verdicts): tenant=NAME (acme, globex, initech, umbrella, hooli),rate=SHARE of its requests,from=D,to=D (event time after the start); \"\": none")
	speed := fs.Float64("speed", 5, "how many times faster than the wall clock event time runs during --fast-forward")
	seed := fs.Int64("seed", 0, "simulator seed (0: from the clock); the demo logs the one it uses, so that a run can be played again")
	fastForward := fs.Duration("fast-forward", 10*time.Minute, "play this much event time from the start at --speed times the wall clock (event time starts that much behind the wall clock and catches up with it), then follow the wall clock; 0: follow it from the start")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rate <= 0 || !*realistic && *rate < 5 {
		return fmt.Errorf("demo: --rate %v: want more than 0 (at least 5 with --realistic=false)", *rate)
	}
	if !(*speed >= 1 && *speed <= 100) || *fastForward < 0 {
		return fmt.Errorf("demo: --speed %v --fast-forward %v: want a speed from 1 to 100 and a duration of at least 0", *speed, *fastForward)
	}
	triggers, err := parseFaults(*faults)
	if err != nil {
		return err
	}
	regs, err := parseRegression(*regression)
	if err != nil {
		return err
	}
	leaks, err := parseLeak(*leak)
	if err != nil {
		return err
	}
	jumps, err := parseJump(*jump)
	if err != nil {
		return err
	}
	if !*realistic {
		if flagSet(fs, "regression") && len(regs) > 0 || flagSet(fs, "leak") && len(leaks) > 0 || flagSet(fs, "jailbreak-jump") && len(jumps) > 0 {
			return errors.New("demo: --regression, --leak and --jailbreak-jump need --realistic")
		}
		regs, leaks, jumps = nil, nil, nil
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

	clk := newDemoClock(time.Now(), *speed, *fastForward)
	sim := simOptions{rate: *rate, encoding: *encoding, keyed: *keyed, realistic: *realistic, hosts: *hosts,
		kvEvents: *kvEvents || len(triggers) > 0, faults: triggers, regressions: regs, leaks: leaks, jumps: jumps}
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}
	log.Info("demo simulator", "seed", *seed)
	sm, err := simulator.New(sim.simConfig(*seed, clk.start))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	topics := []string{"otlp_spans", "otlp_logs", "otlp_metrics"}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(int32(*partitions), topics...))
	if err != nil {
		return fmt.Errorf("demo: start in-process Kafka on %s: %w", *addr, err)
	}
	defer cluster.Close()

	cfg := &job.Config{}
	cfg.Kafka.Brokers = []string{*addr}
	cfg.Group = "braid-demo"
	cfg.InstanceID = "demo"
	cfg.State.Dir = *stateDir
	cfg.CheckpointInterval = time.Second
	cfg.Admin.Addr = *adminAddr
	cfg.EventTime.OutOfOrderness = demoOutOfOrderness
	cfg.EventTime.Idleness = 5 * time.Second
	cfg.EventTime.IdleGap = demoIdleGap
	cfg.EventTime.AllowedLateness = 30 * time.Second
	cfg.EventTime.FlushAfter = 5 * time.Second
	for _, in := range []*job.InputConfig{&cfg.Inputs.Spans, &cfg.Inputs.Logs, &cfg.Inputs.Metrics} {
		in.Encoding = *encoding
	}
	// The alerts stage runs with its default rules (alerts.default_rules);
	// a local Alertmanager (deploy/local/alertmanager.sh env) gets them.
	if u := os.Getenv("BRAID_ALERTMANAGER_URL"); u != "" {
		cfg.Alerts.Alertmanager.URLs = []string{u}
	}
	if *viewAddr != "" {
		cfg.Alerts.ViewURL = strings.TrimSuffix(view.URL(*viewAddr), "/")
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}

	fmt.Fprintf(out, "braid demo: in-process Kafka listening on %s\n", *addr)
	fmt.Fprintf(out, "  read fused records with: kcat -C -b %s -t %s   or   braid tail --brokers %s\n", *addr, cfg.Outputs.Fused, *addr)
	fmt.Fprintf(out, "  alert state changes (pending, firing, resolved) are printed as they are committed to %s (lines \"** ALERT\")\n", cfg.Outputs.Alerts)
	if *viewAddr != "" {
		fmt.Fprintf(out, "  view: open %s in a browser (latency heatmaps, spike explanation, layer heatmaps, incidents and traces as they are found)\n", view.URL(*viewAddr))
	}
	if *adminAddr != "" {
		fmt.Fprintf(out, "  metrics: curl http://%s/metrics   (braid_alerts_*, braid_llm_*; exemplars: -H 'Accept: application/openmetrics-text')\n", *adminAddr)
	}
	if urls := cfg.Alerts.Alertmanager.URLs; len(urls) > 0 {
		fmt.Fprintf(out, "  alerts go to Alertmanager at %s (BRAID_ALERTMANAGER_URL)\n", strings.Join(urls, ", "))
	} else {
		fmt.Fprintf(out, "  to send the alerts to a local Alertmanager: bash deploy/local/alertmanager.sh start && eval \"$(bash deploy/local/alertmanager.sh env)\", then run the demo again\n")
	}
	if clk.catchUp > 0 {
		fmt.Fprintf(out, "  event time starts %v behind the wall clock and runs %g× faster until it catches up, %v from now (--speed, --fast-forward)\n",
			clk.wall0.Sub(clk.start).Round(time.Second), *speed, clk.catchUp.Round(time.Second))
	}
	for _, line := range describeOps(sm.Truth(), clk.start) {
		fmt.Fprintln(out, "  "+line)
	}
	for _, jm := range jumps {
		fmt.Fprintf(out, "  jailbreak attempts of tenant %s jump to %g%% of its requests from +%v to +%v of event time (a tenth get past the guardrail): expect BraidGuardrailBypass on tenant=%q, braid_llm_jailbreak_ratio and braid_llm_compliance_drift{kind=\"jailbreak\"} up\n",
			jm.Tenant, 100*jm.JailbreakRate, jm.From, jm.To, jm.Tenant)
	}
	fmt.Fprintln(out)

	j, err := job.Prepare(ctx, cfg, log)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 5)
	go func() { errc <- j.Run(ctx) }()
	go func() { errc <- simulate(ctx, *addr, sm, clk, *truthFile) }()
	go func() { errc <- watchIncidents(ctx, *addr, cfg.Outputs.Incidents, errOut, clk.now) }()
	go func() { errc <- watchAlerts(ctx, *addr, cfg.Outputs.Alerts, errOut) }()
	workers := 4 // job, simulator, incidents, alerts
	if *viewAddr != "" {
		workers++
		vo := viewOptions{addr: *viewAddr, stateDir: filepath.Join(*stateDir, "view")}
		go func() {
			errc <- runView(ctx, vo, view.Topics{Fused: cfg.Outputs.Fused, Incidents: cfg.Outputs.Incidents, Alerts: cfg.Outputs.Alerts},
				[]kgo.Opt{kgo.SeedBrokers(*addr)}, log, nil)
		}()
	}
	if !*quiet {
		workers++
		go func() {
			errc <- cmdTail(ctx, demoTailArgs(*addr, cfg.Outputs.Fused), out)
		}()
	}

	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
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
			fmt.Fprintf(errOut, "-- event time %s  %s  last pause %v\n", clk.now().Format("15:04:05"), j.Metrics().Line(),
				time.Duration(j.Engine().Stats().LastPauseNanos.Load()).Round(time.Microsecond))
		}
	}
}

// demoTailArgs are the arguments of the demo's braid tail of the fused
// topic: everything from the start, and then what comes, until the demo
// stops.
func demoTailArgs(addr, topic string) []string {
	return []string{"--brokers", addr, "--from-beginning", "--follow", "--topic", topic}
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
	rate        float64
	encoding    string
	keyed       bool
	realistic   bool
	hosts       int
	kvEvents    bool
	faults      []simulator.KVTrigger
	regressions []simulator.Regression
	leaks       []simulator.Leak
	jumps       []simulator.VerdictJump
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

// The demo's operational faults. The regression takes server 1's TTFT
// p99 from about 0.2s to 4.5s for 5 minutes, long enough for
// BraidTTFTHigh (p99 > 2.5s for 3m over 1m windows) to fire and resolve.
// The leak is fast enough for BraidKVMemoryGrowth (more than 1.2 GB/min
// for 5m, from the first and last sample of 1m windows) to hold through
// the framebuffer's swings with the KV cache's use (several GB/min from
// one minute to the next), and stops before the framebuffer is full.
const (
	defaultRegression = "server=1,factor=20,from=1m,to=6m"
	defaultLeak       = "gpu=0,rate=8000,from=90s,to=8m"
	defaultJump       = "tenant=umbrella,rate=0.8,from=2m,to=6m"
)

// parseOps reads "name=value,…" with exactly the names of want (an index,
// a number and two durations from and to).
func parseOps(flagName, v string, index, number string) (idx int, num float64, from, to time.Duration, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("demo: --%s %q: %s (want %s=N,%s=X,from=D,to=D, or \"\")", flagName, v, fmt.Sprintf(format, args...), index, number)
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return 0, 0, 0, 0, bad("%q is not name=value", kv)
		}
		if seen[k] {
			return 0, 0, 0, 0, bad("%s given twice", k)
		}
		seen[k] = true
		var perr error
		switch k {
		case index:
			idx, perr = strconv.Atoi(val)
		case number:
			num, perr = strconv.ParseFloat(val, 64)
		case "from":
			from, perr = time.ParseDuration(val)
		case "to":
			to, perr = time.ParseDuration(val)
		default:
			return 0, 0, 0, 0, bad("unknown name %q", k)
		}
		if perr != nil {
			return 0, 0, 0, 0, bad("%s: %v", k, perr)
		}
	}
	for _, k := range []string{index, number, "from", "to"} {
		if !seen[k] {
			return 0, 0, 0, 0, bad("%s is missing", k)
		}
	}
	return idx, num, from, to, nil
}

// parseRegression reads --regression.
func parseRegression(v string) ([]simulator.Regression, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	i, f, from, to, err := parseOps("regression", v, "server", "factor")
	if err != nil {
		return nil, err
	}
	return []simulator.Regression{{Instance: i, Factor: f, From: from, To: to}}, nil
}

// parseJump reads --jailbreak-jump.
func parseJump(v string) ([]simulator.VerdictJump, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("demo: --jailbreak-jump %q: %s (want tenant=NAME,rate=SHARE,from=D,to=D)", v, fmt.Sprintf(format, args...))
	}
	var j simulator.VerdictJump
	seen := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return nil, bad("%q is not one name=value", kv)
		}
		seen[k] = true
		var err error
		switch k {
		case "tenant":
			j.Tenant = val
		case "rate":
			j.JailbreakRate, err = strconv.ParseFloat(val, 64)
			if err == nil && !(j.JailbreakRate >= 0 && j.JailbreakRate <= 1) {
				err = errors.New("not a share from 0 to 1")
			}
		case "from":
			j.From, err = time.ParseDuration(val)
		case "to":
			j.To, err = time.ParseDuration(val)
		default:
			return nil, bad("unknown name %q", k)
		}
		if err != nil {
			return nil, bad("%s: %v", k, err)
		}
	}
	for _, k := range []string{"tenant", "rate", "from", "to"} {
		if !seen[k] {
			return nil, bad("%s is missing", k)
		}
	}
	if j.To <= j.From {
		return nil, bad("to is not after from")
	}
	return []simulator.VerdictJump{j}, nil
}

// parseLeak reads --leak.
func parseLeak(v string) ([]simulator.Leak, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	i, r, from, to, err := parseOps("leak", v, "gpu", "rate")
	if err != nil {
		return nil, err
	}
	return []simulator.Leak{{GPU: i, MiBPerMinute: r, From: from, To: to}}, nil
}

// describeOps says which fault is injected where and when, and which
// alert it should raise.
func describeOps(tr simulator.Truth, start time.Time) []string {
	var out []string
	clock := func(t time.Time) string { return t.Local().Format("15:04:05") }
	for _, r := range tr.Regressions {
		out = append(out, fmt.Sprintf("TTFT regression ×%g on %s (%s) from %s to %s of event time (+%v to +%v): expect BraidTTFTHigh on instance=%q",
			r.Factor, r.Instance, r.Model, clock(r.From), clock(r.To), r.From.Sub(start), r.To.Sub(start), r.Instance))
	}
	for _, l := range tr.Leaks {
		out = append(out, fmt.Sprintf("GPU memory leak of %g MiB/min on GPU %s (%s) from %s to %s of event time (+%v to +%v): expect BraidKVMemoryGrowth on gpu=%q",
			l.MiBPerMinute, l.UUID, l.Host, clock(l.From), clock(l.To), l.From.Sub(start), l.To.Sub(start), l.UUID))
	}
	return out
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
		scfg.Regressions = slices.Clone(o.regressions)
		scfg.Leaks = slices.Clone(o.leaks)
		// Responses leak PII rarely (every leak pages: BraidPIILeak).
		scfg.Verdicts = &simulator.VerdictConfig{PIIFlagged: 0.002, Jumps: slices.Clone(o.jumps)}
	} else {
		scfg.RequestsPerBatch = max(1, int(o.rate/5))
	}
	if !o.keyed {
		scfg.Keying = simulator.Unkeyed
	}
	return scfg
}

// demoClock maps the wall clock onto the demo's event time: the first
// fastForward of event time runs speed times faster than the wall clock,
// from start (that far behind the wall clock), until it catches up with
// the wall clock; from then on event time is the wall clock.
type demoClock struct {
	wall0, start time.Time
	speed        float64
	// catchUp: wall time from wall0 until event time is the wall clock.
	catchUp time.Duration
}

func newDemoClock(wall0 time.Time, speed float64, fastForward time.Duration) *demoClock {
	c := &demoClock{wall0: wall0, start: wall0, speed: speed}
	if speed > 1 && fastForward > 0 {
		c.catchUp = time.Duration(float64(fastForward) / speed)
		c.start = wall0.Add(c.catchUp - fastForward)
	}
	return c
}

// at is the event time at wall time w.
func (c *demoClock) at(w time.Time) time.Time {
	if d := w.Sub(c.wall0); d < c.catchUp {
		return c.start.Add(time.Duration(float64(d) * c.speed))
	}
	return w
}

// now is the event time now.
func (c *demoClock) now() time.Time { return c.at(time.Now()) }

// simulate writes sim's Collector-shaped telemetry, each batch once clk's
// event time has reached it, and the ground truth to truth (if set) when
// ctx ends.
func simulate(ctx context.Context, addr string, sim *simulator.Simulator, clk *demoClock, truth string) error {
	if truth != "" {
		defer func() {
			f, err := os.Create(truth)
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
	const interval = 200 * time.Millisecond // simConfig's BatchInterval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for batch := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			for et := clk.at(now); !clk.start.Add(time.Duration(batch) * interval).After(et); batch++ {
				if err := simulator.Produce(ctx, cl, sim.Next()); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("simulator: %w", err)
				}
				if truth == "" && sim.EventTime().Unix()%60 == 0 {
					sim.ForgetTraces()
				}
			}
		}
	}
}
