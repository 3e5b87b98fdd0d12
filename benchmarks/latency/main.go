// Command latency measures braid's live latency on a real Kafka broker (see
// benchmarks/README.md): how long after its input is written a trace's
// fused record, and a KV-cache fault's incident, can be read.
//
// For each rate of -rates it runs the braid binary (built from ./cmd/braid
// unless -braid names one) with `braid run --config` on fresh topics and
// produces the simulator's realistic fleet (connectors/simulator: KV-block
// events on the servers of the first -kv-hosts hosts, every host of the
// default fleet; a KV fault every -fault-every) live: one Collector
// batch every 200 ms of wall time, event time = wall time, for -warmup and
// then -duration, the measurement window; production goes on during the
// drain (up to -drain) until every trace of the window has been read.
//
// Fused-record latency, per trace first written in the window: from the
// broker's ack of the last input record carrying one of its members (spans,
// log records with its trace id other than KV events, exemplar points) to
// the moment a read_committed consumer reads the first FusedTrace revision
// holding all of them (all its parts); also to the first record of any
// revision. Incident latency, per KV fault realised in the window: from the
// ack of the last input record the detector needed (the latest written of
// the records named as evidence of the first pollution edge that involves
// one of the fault's requests) to the read of the first Incident record
// holding that edge.
//
// Two runs per rate: "fused" with braid's default checkpoint interval (or
// -checkpoint), "incidents" with -incident-checkpoint (1s). Each writes
// benchmarks/results/latency-<run>-<rate>rps.json with both figures, the
// configuration's bounds (idle_gap + out_of_orderness +
// checkpoint_interval + 1 s for fused records, 5 s for incidents) and
// pass/fail. BRAID_KAFKA_BROKERS names the broker.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/benchmarks/internal/braidproc"
	"github.com/braidlabs/braid/benchmarks/internal/machine"
	"github.com/braidlabs/braid/benchmarks/internal/outputs"
	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

type options struct {
	brokers            []string
	rates              []float64
	runs               []string
	hosts              int
	kvHosts            int
	partitions         int32
	seed               int64
	warmup             time.Duration
	duration           time.Duration
	drain              time.Duration
	faultEvery         time.Duration
	checkpoint         time.Duration
	incidentCheckpoint time.Duration
	braid              string
	resultsDir         string
	keepTopics         bool
	verbose            bool
	note               string
	admin              string
}

// incidentBound is the incident latency the job must keep (p99).
const incidentBound = 5 * time.Second

func main() {
	var o options
	rates := flag.String("rates", "1,500", "request rates (requests a second), comma separated: one fused and one incidents run each")
	runs := flag.String("runs", "fused,incidents", "which runs: fused (braid's defaults), incidents (-incident-checkpoint)")
	flag.IntVar(&o.hosts, "hosts", 0, "simulated hosts, two GPUs each (0: 4, or rate/25 when more)")
	flag.IntVar(&o.kvHosts, "kv-hosts", 4, "hosts whose servers publish KV-block events, the first ones (0: every host)")
	p := flag.Int("partitions", 4, "partitions of the input topics")
	flag.Int64Var(&o.seed, "seed", 1, "simulator seed")
	flag.DurationVar(&o.warmup, "warmup", 30*time.Second, "production before the measurement window")
	flag.DurationVar(&o.duration, "duration", 3*time.Minute, "measurement window per run: traces first written in it are measured")
	flag.DurationVar(&o.drain, "drain", 2*time.Minute, "how long production goes on after the window, at most, until every measured trace was read")
	flag.DurationVar(&o.faultEvery, "fault-every", 20*time.Second, "a KV fault is scheduled this often in the window (the triggers in turn)")
	flag.DurationVar(&o.checkpoint, "checkpoint", 0, "checkpoint_interval of the fused run (0: braid's default)")
	flag.DurationVar(&o.incidentCheckpoint, "incident-checkpoint", time.Second, "checkpoint_interval of the incidents run")
	flag.StringVar(&o.braid, "braid", "", "braid binary to run (default: go build ./cmd/braid into a temporary directory)")
	flag.StringVar(&o.resultsDir, "results", filepath.Join("benchmarks", "results"), "directory of the JSON results; empty: do not write them")
	flag.BoolVar(&o.keepTopics, "keep-topics", false, "do not delete the topics at the end")
	flag.BoolVar(&o.verbose, "v", false, "pass braid's log through and print progress")
	flag.StringVar(&o.admin, "admin", "", "braid's admin address (/metrics, /debug/pprof/; default: a free port)")
	flag.StringVar(&o.note, "note", "", "free text stored in the results")
	brokers := flag.String("brokers", os.Getenv("BRAID_KAFKA_BROKERS"), "bootstrap brokers, comma separated (default $BRAID_KAFKA_BROKERS)")
	flag.Parse()
	o.partitions = int32(*p)
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	var errs []error
	for _, r := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 || v > 1e5 {
			errs = append(errs, fmt.Errorf("-rates: %q is not a rate in (0, 100000]", r))
			continue
		}
		o.rates = append(o.rates, v)
	}
	for _, r := range strings.Split(*runs, ",") {
		switch r = strings.TrimSpace(r); r {
		case "fused", "incidents":
			o.runs = append(o.runs, r)
		default:
			errs = append(errs, fmt.Errorf("-runs: unknown run %q (want fused, incidents)", r))
		}
	}
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("no broker: set BRAID_KAFKA_BROKERS or -brokers"))
	}
	if o.duration <= 0 || o.warmup < 0 || o.drain <= 0 || o.faultEvery <= 0 {
		errs = append(errs, errors.New("-duration, -drain and -fault-every must be positive, -warmup not negative"))
	}
	if o.partitions < 1 {
		errs = append(errs, errors.New("-partitions must be at least 1"))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	bin := o.braid
	if bin == "" {
		dir, err := os.MkdirTemp("", "braid-lat-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = braidproc.Build(dir, false); err != nil {
			return err
		}
	}
	var failed []string
	for _, rate := range o.rates {
		for _, mode := range o.runs {
			ck := o.checkpoint
			if mode == "incidents" {
				ck = o.incidentCheckpoint
			}
			res, err := runOne(o, bin, rate, mode, ck)
			if err != nil {
				return fmt.Errorf("%s run at %g requests/s: %w", mode, rate, err)
			}
			report(res)
			if o.resultsDir != "" {
				b, _ := json.MarshalIndent(res, "", "  ")
				path := filepath.Join(o.resultsDir, fmt.Sprintf("latency-%s-%grps.json", mode, rate))
				if err := os.MkdirAll(o.resultsDir, 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					return err
				}
				fmt.Println("wrote", path)
			}
			if !res.Pass.Passed {
				failed = append(failed, fmt.Sprintf("%s at %g requests/s", mode, rate))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Println("FAIL:", strings.Join(failed, "; "))
	} else {
		fmt.Println("PASS")
	}
	return nil
}

// Result is the JSON written to benchmarks/results.
type Result struct {
	Benchmark string       `json:"benchmark"`
	Run       string       `json:"run"` // fused or incidents
	Time      time.Time    `json:"time"`
	Note      string       `json:"note,omitempty"`
	Command   string       `json:"command"`
	Machine   machine.Info `json:"machine"`
	Config    Bounds       `json:"config"`
	Workload  Workload     `json:"workload"`
	Fused     Fused        `json:"fused"`
	Incidents Incidents    `json:"incidents"`
	Pass      Pass         `json:"pass"`
	// Lag samples: records of the input topics braid's group had not
	// committed, every 5 s from the first batch.
	Lag       []LagSample `json:"lag"`
	BraidExit string      `json:"braid_exit,omitempty"`
}

// Bounds are the job's settings that bound its latency, as braid runs
// them (its configuration file with braid's defaults filled in).
type Bounds struct {
	IdleGapS            float64 `json:"idle_gap_s"`
	OutOfOrdernessS     float64 `json:"out_of_orderness_s"`
	CheckpointIntervalS float64 `json:"checkpoint_interval_s"`
	IdlenessS           float64 `json:"idleness_s"`
	FlushAfterS         float64 `json:"flush_after_s"`
	// FusedBoundS = idle_gap + out_of_orderness + checkpoint_interval + 1 s.
	FusedBoundS    float64 `json:"fused_bound_s"`
	IncidentBoundS float64 `json:"incident_bound_s"`
}

type Workload struct {
	RequestsPerSec float64 `json:"requests_per_s"`
	Hosts          int     `json:"hosts"`
	GPUs           int     `json:"gpus"`
	Partitions     int32   `json:"partitions"`
	KVEvents       bool    `json:"kv_events"`
	KVHosts        int     `json:"kv_hosts"` // hosts with KV events
	KVGPUs         int     `json:"kv_gpus"`
	WarmupS        float64 `json:"warmup_s"`
	DurationS      float64 `json:"duration_s"`
	DrainS         float64 `json:"drain_s"` // production after the window
	Batches        int     `json:"batches"`
	Messages       int64   `json:"messages"`
	Bytes          int64   `json:"bytes"`
	MBPerSec       float64 `json:"mb_per_s"`
	MessagesPerSec float64 `json:"messages_per_s"`
	// ProducerBehind: how long after its event time each batch of the
	// window had been handed to the producer (generation and the
	// producer's buffer); ProducerMaxBehindMs the most over the run.
	ProducerBehind      Latency `json:"producer_behind"`
	ProducerMaxBehindMs float64 `json:"producer_max_behind_ms"`
	// EndLag is braid's uncommitted input at the end of the window (the
	// mean of the last three samples); LagAllowance the most a job that
	// keeps up leaves uncommitted: the messages of 2 checkpoint intervals
	// + 5 s.
	EndLag       int64 `json:"end_lag"`
	LagAllowance int64 `json:"lag_allowance"`
	// Sustained: the producer kept the rate live (p99 of ProducerBehind
	// under 1 s) and braid's input lag at the end of the window was within
	// LagAllowance.
	Sustained bool `json:"sustained"`
	// BraidCPUPerSec and BrokerCPUPerSec: CPU-seconds the braid process
	// and the local broker (machine.BrokerPID; 0 when not found) spent
	// per second of the measurement window, from /proc.
	BraidCPUPerSec  float64 `json:"braid_cpu_per_s"`
	BrokerCPUPerSec float64 `json:"broker_cpu_per_s"`
}

type LagSample struct {
	AtS    float64 `json:"at_s"`
	Behind int64   `json:"behind"`
}

type Fused struct {
	// Traces first written in the window, with a member; Measured those
	// for which a revision holding all their members was read, Missed the
	// others.
	Traces   int `json:"traces"`
	Measured int `json:"measured"`
	Missed   int `json:"missed"`
	// Complete: last input ack → first revision holding every member.
	Complete Latency `json:"complete"`
	// First: last input ack → first record of any revision (negative when
	// braid emitted before the last member was written).
	First Latency `json:"first_any_revision"`
	// FirstIncomplete: traces whose first revision read lacked members.
	FirstIncomplete int      `json:"first_incomplete"`
	MissedExamples  []string `json:"missed_examples,omitempty"`
	FusedRecords    int      `json:"fused_records_read"`
	Undecoded       int      `json:"undecoded_records"`
}

type Incidents struct {
	FaultsScheduled int `json:"faults_scheduled"`
	// FaultsRealised: the simulator's realised faults whose first faulty
	// event is in the window; Measured those with an incident read.
	FaultsRealised int        `json:"faults_realised"`
	Measured       int        `json:"measured"`
	Missed         int        `json:"missed"`
	IncidentsRead  int        `json:"incidents_read"` // distinct ids
	Latency        Latency    `json:"latency"`
	Faults         []FaultLat `json:"faults"`
	// Victims: the requests the simulator's truth says were polluted in
	// the window and whose traces were first written in it, with spans
	// (a cancelled request's retry has none), as the fused figures
	// count them (the drain waits for those); Flagged: those whose
	// highest FusedTrace revision read carries FLAG_POLLUTED.
	Victims int `json:"victims"`
	Flagged int `json:"victims_flagged"`
	// Unflagged: the victims without the flag (at most 10).
	Unflagged []string `json:"unflagged,omitempty"`
	// The same against the independent reference model (kvaccuracy/kvref)
	// replaying the logs topic's KV events: the requests it finds
	// polluted in the window, counted as Victims are.
	RefPolluted  int      `json:"ref_polluted"` // in the whole run
	RefVictims   int      `json:"ref_victims"`
	RefFlagged   int      `json:"ref_victims_flagged"`
	RefUnflagged []string `json:"ref_unflagged,omitempty"`
}

// FaultLat is one realised fault and its incident.
type FaultLat struct {
	Trigger   string    `json:"trigger"`
	GPU       string    `json:"gpu"`
	FaultTime time.Time `json:"fault_time"` // its first faulty event (event time)
	Incident  string    `json:"incident,omitempty"`
	// Edge: the first edge involving the fault's requests; EdgeAfterFaultMs
	// its event time after FaultTime (detection in event time, see
	// benchmarks/kvaccuracy); Evidence the input record whose ack starts the
	// latency.
	EdgeKind         string  `json:"edge_kind,omitempty"`
	EdgeAfterFaultMs float64 `json:"edge_after_fault_ms,omitempty"`
	Evidence         string  `json:"evidence,omitempty"`
	LatencyMs        float64 `json:"latency_ms,omitempty"`
	Missed           string  `json:"missed,omitempty"`
}

// Pass: the run's check. The fused run (braid's defaults, or -checkpoint)
// checks the fused-record p99 against FusedBoundS and the incident p99
// against 5 s, the incidents run the incident p99; both also need
// something measured and nothing missed.
type Pass struct {
	FusedWithinBound    bool   `json:"fused_p99_within_bound"`
	IncidentWithinBound bool   `json:"incident_p99_within_5s"`
	Checked             string `json:"checked"`
	Passed              bool   `json:"passed"`
}

func runOne(o options, bin string, rate float64, mode string, ck time.Duration) (*Result, error) {
	hosts := o.hosts
	if hosts == 0 {
		hosts = min(max(4, int(math.Ceil(rate/25))), simulator.MaxHosts)
	}
	kvHosts := hosts
	if o.kvHosts > 0 {
		kvHosts = min(o.kvHosts, hosts)
	}
	res := &Result{Benchmark: "latency", Run: mode, Time: time.Now().UTC(), Note: o.note, Machine: machine.Read(),
		Command: commandLine()}
	res.Workload = Workload{RequestsPerSec: rate, Hosts: hosts, GPUs: 2 * hosts, Partitions: o.partitions, KVEvents: true,
		KVHosts: kvHosts, KVGPUs: 2 * kvHosts,
		WarmupS: o.warmup.Seconds(), DurationS: o.duration.Seconds()}
	deadline := time.Now().Add(o.warmup + o.duration + o.drain + 5*time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	suffix := randSuffix()
	prefix := "lat-" + suffix
	group := "braid-lat-" + suffix
	inputs := []string{prefix + "-spans", prefix + "-logs", prefix + "-metrics"}
	outTopics := []string{prefix + "-fused", prefix + "-late", prefix + "-dlq", prefix + "-pollution", prefix + "-incidents"}

	tr := newTracker()
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.RecordPartitioner(simulator.Partitioner()),
		kgo.ProducerBatchMaxBytes(1_000_000), kgo.MaxBufferedBytes(256<<20), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopics(ctx, o.partitions, 1, nil, inputs...); err != nil || resp.Error() != nil {
		return nil, fmt.Errorf("create input topics: %w", errors.Join(err, resp.Error()))
	}
	if !o.keepTopics {
		defer func() {
			if err := braidproc.DeleteTopics(adm, prefix, group, inputs...); err != nil {
				fmt.Fprintln(os.Stderr, "latency: delete topics:", err)
			}
		}()
	}

	stateDir, err := os.MkdirTemp("", "braid-lat-state")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stateDir)
	cfgPath := filepath.Join(stateDir, "braid.yaml")
	cfg := braidproc.Config{Brokers: o.brokers, Group: group, Instance: "lat-0",
		Inputs: [3]string(inputs), Outputs: [5]string(outTopics),
		StateDir: filepath.Join(stateDir, "data"), CheckpointInterval: ck, Admin: o.admin}.YAML()
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	bounds, err := readBounds(cfgPath, o.partitions)
	if err != nil {
		return nil, err
	}
	res.Config = bounds

	if err := waitTopics(ctx, adm, o.partitions, inputs...); err != nil {
		return nil, err
	}
	b, err := braidproc.Start(bin, cfgPath, o.verbose)
	if err != nil {
		return nil, err
	}
	defer b.Kill()
	if err := waitReady(ctx, adm, b, group, outTopics[0], outTopics[4]); err != nil {
		return nil, err
	}

	// The reader: read_committed, from the start of the fused and incidents
	// topics; a record's time is when its fetch returned.
	rd, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.ConsumeTopics(outTopics[0], outTopics[4]),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	readCtx, stopRead := context.WithCancel(ctx)
	var readWG sync.WaitGroup
	readWG.Add(1)
	go func() {
		defer readWG.Done()
		for {
			fs := rd.PollFetches(readCtx)
			now := time.Now()
			if readCtx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Topic == outTopics[0] {
					tr.readFused(now, r.Value)
				} else {
					tr.readIncident(now, r.Value)
				}
			})
		}
	}()
	defer func() {
		stopRead()
		readWG.Wait()
		rd.Close()
	}()

	// The fleet, event time = wall time, a fault every faultEvery in the
	// window, each moved by up to a quarter of faultEvery either way
	// (seeded): at a fixed period the faults would all fall at one phase
	// of braid's checkpoint schedule, and the figure would be that
	// phase's, not the distribution's.
	t0 := time.Now().Truncate(time.Millisecond)
	winFrom, winTo := t0.Add(o.warmup), t0.Add(o.warmup+o.duration)
	var faults []simulator.KVFault
	jitter := mrand.New(mrand.NewPCG(uint64(o.seed), uint64(rate)))
	for i := 0; ; i++ {
		at := winFrom.Add(time.Duration(i)*o.faultEvery + o.faultEvery/4 + time.Duration(jitter.Int64N(int64(o.faultEvery/2))))
		if !at.Before(winTo) {
			break
		}
		faults = append(faults, simulator.KVFault{Trigger: simulator.KVTriggers[i%len(simulator.KVTriggers)], At: at, GPU: -1})
	}
	res.Incidents.FaultsScheduled = len(faults)
	sim, err := simulator.New(simulator.Config{Seed: o.seed, Start: t0, Realistic: true, KVEvents: true, Hosts: hosts, KVHosts: kvHosts, Rate: rate,
		Topics: simulator.Topics{Spans: inputs[0], Logs: inputs[1], Metrics: inputs[2]},
		KV:     simulator.KVConfig{Faults: faults}})
	if err != nil {
		return nil, err
	}

	lag := &lagSampler{}
	lagCtx, stopLag := context.WithCancel(ctx)
	var lagWG sync.WaitGroup
	lagWG.Add(1)
	go func() { defer lagWG.Done(); lag.run(lagCtx, adm, group, inputs, t0) }()
	defer func() {
		stopLag()
		lagWG.Wait()
	}()

	gen := &generator{sim: sim, out: make(chan genBatch, int(generatorLead/simulator.DefaultBatchInterval))}
	genCtx, stopGen := context.WithCancel(ctx)
	var genWG sync.WaitGroup
	genWG.Add(1)
	go func() { defer genWG.Done(); gen.run(genCtx) }()
	defer func() {
		stopGen()
		genWG.Wait()
	}()

	prod := &producer{cl: cl, tr: tr, logs: inputs[1], spans: inputs[0], errc: make(chan error, 1)}
	// fail reports what ends production early.
	fail := make(chan error, 1)
	loopDone := make(chan struct{})
	go func() {
		select {
		case err := <-b.Done:
			b.Done <- err
			fail <- fmt.Errorf("braid exited (%v); log:\n%s", err, b.Tail())
		case err := <-prod.errc:
			fail <- fmt.Errorf("produce: %w", err)
		case <-ctx.Done():
			fail <- ctx.Err()
		case <-loopDone:
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	cpu := &cpuMeter{braid: b.Pid(), broker: machine.BrokerPID()}
	var truth simulator.Truth
	var behinds []time.Duration
	drainEnd := winTo.Add(o.drain)
	var produceErr error
loop:
	for n := 0; ; n++ {
		var gb genBatch
		select {
		case gb = <-gen.out:
		case produceErr = <-fail:
			break loop
		}
		timer.Reset(time.Until(gb.at))
		select {
		case <-timer.C:
		case produceErr = <-fail:
			break loop
		}
		prod.batch(gb.msgs, &res.Workload)
		cpu.at(gb.at, winFrom, winTo)
		behind := time.Since(gb.at)
		res.Workload.ProducerMaxBehindMs = max(res.Workload.ProducerMaxBehindMs, float64(behind.Microseconds())/1e3)
		if in(gb.at, winFrom, winTo) {
			behinds = append(behinds, behind)
		}
		now := time.Now()
		if now.Before(winTo) || n%5 != 0 {
			continue
		}
		if now.After(drainEnd) {
			break
		}
		// Drain: every measured trace read, and (incidents run) an incident
		// on the GPU of every fault realised in the window.
		if tr.pending(winFrom, winTo) > 0 {
			continue
		}
		if mode == "incidents" {
			truth = gen.truth()
			waiting := false
			for _, f := range truth.KV.Faults {
				if in(f.Time, winFrom, winTo) && !tr.incidentOn(f.GPU, f.Time) {
					waiting = true
					break
				}
			}
			if waiting {
				continue
			}
		}
		break
	}
	close(loopDone)
	stopGen()
	genWG.Wait()
	end := time.Now()
	res.Workload.DrainS = max(0, end.Sub(winTo).Seconds())
	if produceErr != nil {
		return nil, produceErr
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush the producer: %w", err)
	}
	truth = sim.Truth()
	stopLag()
	lagWG.Wait()
	res.Lag = lag.samples()
	res.Machine.LoadAvgEnd = machine.LoadAvg()
	res.BraidExit = b.Stop()
	stopRead()
	readWG.Wait()

	w := &res.Workload
	elapsed := end.Sub(t0).Seconds()
	w.MBPerSec = float64(w.Bytes) / 1e6 / elapsed
	w.MessagesPerSec = float64(w.Messages) / elapsed
	ckS := bounds.CheckpointIntervalS
	w.LagAllowance = int64(w.MessagesPerSec * (2*ckS + 5))
	w.EndLag = endLag(res.Lag, winTo.Sub(t0).Seconds())
	w.ProducerBehind = distribution(behinds)
	w.BraidCPUPerSec, w.BrokerCPUPerSec = cpu.perSec()
	w.Sustained = w.ProducerBehind.Count > 0 && w.ProducerBehind.P99Ms < 1000 && w.EndLag >= 0 && w.EndLag <= w.LagAllowance

	fusedResult(res, tr, winFrom, winTo)
	var ref map[string]outputs.RefPollution
	if len(truth.KV.Faults) > 0 {
		if ref, err = outputs.RefPolluted(ctx, o.brokers, inputs[1]); err != nil {
			return nil, fmt.Errorf("reference model over %s: %w", inputs[1], err)
		}
	}
	incidentResult(res, tr, truth, ref, inputs[1], winFrom, winTo)
	p := &res.Pass
	p.FusedWithinBound = res.Fused.Measured > 0 && res.Fused.Missed == 0 && res.Fused.Complete.P99Ms <= bounds.FusedBoundS*1000
	p.IncidentWithinBound = res.Incidents.Measured > 0 && res.Incidents.Missed == 0 && res.Incidents.Latency.P99Ms <= bounds.IncidentBoundS*1000
	if mode == "fused" {
		// braid's defaults: incidents too must be live in seconds.
		p.Checked = fmt.Sprintf("fused-record p99 <= %.0f s, incident p99 <= %.0f s", bounds.FusedBoundS, bounds.IncidentBoundS)
		p.Passed = p.FusedWithinBound && p.IncidentWithinBound
	} else {
		p.Checked, p.Passed = fmt.Sprintf("incident p99 <= %.0f s", bounds.IncidentBoundS), p.IncidentWithinBound
	}
	return res, nil
}

// readBounds loads the configuration file as braid does and fills in the
// defaults of the engine and the fuse stage.
func readBounds(cfgPath string, partitions int32) (Bounds, error) {
	cfg, err := job.LoadConfig(cfgPath)
	if err != nil {
		return Bounds{}, err
	}
	fc := cfg.FuseConfig(partitions)
	fc.EnsureDefaults()
	ec := engine.Config{CheckpointInterval: cfg.CheckpointInterval, OutOfOrderness: cfg.EventTime.OutOfOrderness, Idleness: cfg.EventTime.Idleness}
	ec.EnsureDefaults()
	b := Bounds{IdleGapS: fc.IdleGap.Seconds(), OutOfOrdernessS: ec.OutOfOrderness.Seconds(), CheckpointIntervalS: ec.CheckpointInterval.Seconds(),
		IdlenessS: ec.Idleness.Seconds(), FlushAfterS: fc.FlushAfter.Seconds(), IncidentBoundS: incidentBound.Seconds()}
	b.FusedBoundS = (fc.IdleGap + ec.OutOfOrderness + ec.CheckpointInterval + time.Second).Seconds()
	return b, nil
}

// waitTopics waits until the broker's metadata shows topics with their
// partitions (a topic just created may not be listed yet).
func waitTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		td, err := adm.ListTopics(ctx, topics...)
		if err == nil && td.Error() == nil {
			n := 0
			for _, t := range td {
				if len(t.Partitions) == int(partitions) {
					n++
				}
			}
			if n == len(topics) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not listed within 1m: %w", topics, errors.Join(err, ctx.Err()))
		case <-tick.C:
		}
	}
}

// waitReady waits until braid created its output topics and its consumer
// group is stable.
func waitReady(ctx context.Context, adm *kadm.Client, b *braidproc.Proc, group string, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-b.Done:
			b.Done <- err
			return fmt.Errorf("braid exited before it was ready (%v); log:\n%s", err, b.Tail())
		case <-ctx.Done():
			return fmt.Errorf("braid not ready within 2m (topics %v, group %s stable); log:\n%s", topics, group, b.Tail())
		case <-tick.C:
		}
		td, err := adm.ListTopics(ctx, topics...)
		if err != nil || len(td.Names()) < len(topics) || td.Error() != nil {
			continue
		}
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			continue
		}
		if g, ok := gs[group]; ok && g.Err == nil && g.State == "Stable" && len(g.Members) > 0 {
			return nil
		}
	}
}

// generatorLead is how far ahead of the wall clock the simulator runs: the
// time a batch takes to generate does not delay it, within this lead.
const generatorLead = 2 * time.Second

// generator runs the simulator ahead of the wall clock.
type generator struct {
	mu  sync.Mutex // the simulator: generator.run and truth
	sim *simulator.Simulator
	out chan genBatch
}

// genBatch is one Collector batch and its event time, when it is due.
type genBatch struct {
	msgs []simulator.Message
	at   time.Time
}

func (g *generator) run(ctx context.Context) {
	for n := 0; ; n++ {
		g.mu.Lock()
		b := genBatch{msgs: g.sim.Next(), at: g.sim.EventTime()}
		if n%50 == 49 {
			g.sim.ForgetTraces() // the truth keeps the traces in flight
		}
		g.mu.Unlock()
		select {
		case g.out <- b:
		case <-ctx.Done():
			return
		}
	}
}

func (g *generator) truth() simulator.Truth {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sim.Truth()
}

// producer hands the simulator's batches to the client and reports each
// record's ack to the tracker.
type producer struct {
	cl          *kgo.Client
	tr          *tracker
	spans, logs string
	errc        chan error
}

func (p *producer) batch(msgs []simulator.Message, w *Workload) {
	now := time.Now()
	for _, m := range msgs {
		w.Messages++
		w.Bytes += int64(len(m.Key) + len(m.Value))
		ms := map[string]members{}
		switch {
		case m.Topic == p.spans && len(m.Key) == 32:
			if n := spanCount(m.Value); n > 0 {
				ms[string(m.Key)] = members{spans: n}
			}
		case m.Topic == p.logs && len(m.Key) == 32:
			if n := memberLogCount(m.Value); n > 0 {
				ms[string(m.Key)] = members{logs: n}
			}
		case m.Topic != p.spans && m.Topic != p.logs:
			for id, n := range exemplarTraces(m.Value) {
				ms[id] = members{points: n}
			}
		}
		ids := make([]string, 0, len(ms))
		for id := range ms {
			ids = append(ids, id)
		}
		p.tr.written(now, ms)
		isLogs := m.Topic == p.logs
		p.cl.Produce(context.Background(), &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value}, func(r *kgo.Record, err error) {
			if err != nil {
				select {
				case p.errc <- err:
				default:
				}
				return
			}
			p.tr.acked(time.Now(), ids, isLogs, offsetKey{r.Partition, r.Offset})
		})
	}
	w.Batches++
}

// lagSampler samples braid's uncommitted input every 5 s.
type lagSampler struct {
	mu sync.Mutex
	s  []LagSample
}

func (l *lagSampler) run(ctx context.Context, adm *kadm.Client, group string, inputs []string, t0 time.Time) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ends, err := adm.ListEndOffsets(ctx, inputs...)
		if err != nil {
			continue
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			continue
		}
		var behind int64
		ends.Each(func(e kadm.ListedOffset) {
			if e.Err != nil {
				return
			}
			at := int64(0)
			if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At > 0 {
				at = c.At
			}
			behind += max(0, e.Offset-at)
		})
		l.mu.Lock()
		l.s = append(l.s, LagSample{AtS: time.Since(t0).Seconds(), Behind: behind})
		l.mu.Unlock()
	}
}

func (l *lagSampler) samples() []LagSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.s)
}

// endLag is the mean of the last three samples up to atS; -1 without one.
func endLag(s []LagSample, atS float64) int64 {
	var xs []int64
	for _, x := range s {
		if x.AtS <= atS {
			xs = append(xs, x.Behind)
		}
	}
	if len(xs) == 0 {
		return -1
	}
	xs = xs[max(0, len(xs)-3):]
	var sum int64
	for _, x := range xs {
		sum += x
	}
	return sum / int64(len(xs))
}

func fusedResult(res *Result, tr *tracker, from, to time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	f := &res.Fused
	f.FusedRecords, f.Undecoded = tr.fused, tr.undecoded
	var complete, first []time.Duration
	ids := make([]string, 0, len(tr.traces))
	for id := range tr.traces {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := tr.traces[id]
		if t.first.IsZero() || !in(t.first, from, to) {
			continue
		}
		f.Traces++
		var best *revision
		var firstRev *revision
		for _, r := range t.revs {
			if !r.complete() {
				continue
			}
			if firstRev == nil || r.readAt.Before(firstRev.readAt) {
				firstRev = r
			}
			if r.holds(t.want) && (best == nil || r.readAt.Before(best.readAt)) {
				best = r
			}
		}
		if !t.firstRead.IsZero() && t.unacked == 0 {
			first = append(first, t.firstRead.Sub(t.lastAck))
		}
		if firstRev != nil && !firstRev.holds(t.want) {
			f.FirstIncomplete++
		}
		if best == nil || t.unacked > 0 {
			f.Missed++
			if len(f.MissedExamples) < 10 {
				f.MissedExamples = append(f.MissedExamples, fmt.Sprintf("%s: wrote %d spans %d logs %d points, %d revisions read, first written %.1fs into the window",
					id, t.want.spans, t.want.logs, t.want.points, len(t.revs), t.first.Sub(from).Seconds()))
			}
			continue
		}
		f.Measured++
		complete = append(complete, best.readAt.Sub(t.lastAck))
	}
	f.Complete, f.First = distribution(complete), distribution(first)
}

// incidentResult matches each fault realised in the window to the first
// incident record read that holds an edge involving the fault's requests
// (its source, victims and propagated victims); for a fault without
// victims, to the first incident record on its GPU whose first edge is at
// most a second before the fault and within 10 s after it. The latency
// starts at the ack of the latest input record named as evidence of that
// edge.
func incidentResult(res *Result, tr *tracker, truth simulator.Truth, ref map[string]outputs.RefPollution, logsTopic string, from, to time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := &res.Incidents
	ids := map[string]bool{}
	for _, ir := range tr.incidents {
		ids[ir.inc.Id] = true
	}
	r.IncidentsRead = len(ids)
	var lat []time.Duration
	for _, f := range truth.KV.Faults {
		if !in(f.Time, from, to) {
			continue
		}
		r.FaultsRealised++
		fl := FaultLat{Trigger: string(f.Trigger), GPU: f.GPU, FaultTime: f.Time}
		reqs := map[string]bool{}
		for _, v := range f.Victims {
			reqs[v] = true
		}
		for _, v := range f.Propagated {
			reqs[v] = true
		}
		withVictims := len(reqs) > 0
		reqs[f.SourceRequest] = true
		var hit *incidentRead
		var edge *braidpb.PollutionEdge
	search:
		for i := range tr.incidents {
			ir := &tr.incidents[i]
			if ir.inc.Gpu != f.GPU {
				continue
			}
			if !withVictims {
				ft := f.Time.UnixNano()
				first := int64(ir.inc.FirstUnixNano)
				if first+int64(time.Second) < ft || first > ft+int64(10*time.Second) || len(ir.inc.Edges) == 0 {
					continue
				}
				hit, edge = ir, ir.inc.Edges[0]
				break
			}
			for _, e := range ir.inc.Edges {
				if reqs[e.SourceRequest] || reqs[e.TargetRequest] {
					hit, edge = ir, e
					break search
				}
			}
		}
		if hit == nil {
			fl.Missed = "no incident record read with an edge of its requests"
			r.Faults = append(r.Faults, fl)
			r.Missed++
			continue
		}
		fl.Incident, fl.EdgeKind = hit.inc.Id, edge.Kind.String()
		fl.EdgeAfterFaultMs = float64(int64(edge.TimeUnixNano)-f.Time.UnixNano()) / 1e6
		var start time.Time
		for _, o := range edge.Evidence {
			if at, ok := tr.logAcks[offsetKey{o.Partition, o.Offset}]; ok && o.Topic == logsTopic && at.After(start) {
				start = at
				fl.Evidence = fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.Offset)
			}
		}
		if start.IsZero() {
			fl.Missed = "the edge names no input record this run wrote"
			r.Faults = append(r.Faults, fl)
			r.Missed++
			continue
		}
		d := hit.at.Sub(start)
		fl.LatencyMs = float64(d.Microseconds()) / 1e3
		lat = append(lat, d)
		r.Measured++
		r.Faults = append(r.Faults, fl)
	}
	r.Latency = distribution(lat)
	for _, v := range truth.KV.Polluted {
		t := tr.traces[v.TraceID]
		if !in(v.Time, from, to) || t == nil || t.want.spans == 0 || !in(t.first, from, to) {
			continue
		}
		r.Victims++
		if top := tr.tops[v.TraceID]; top != nil && top.Flagged {
			r.Flagged++
		} else if len(r.Unflagged) < 10 {
			r.Unflagged = append(r.Unflagged, fmt.Sprintf("%s (trace %s, %s via %s, fault %d, %.1fs into the window; %d revisions read)",
				v.RequestID, v.TraceID, v.Trigger, v.Via, v.Fault, v.Time.Sub(from).Seconds(), len(t.revs)))
		}
	}
	r.RefPolluted = len(ref)
	for req, p := range ref {
		id := p.TraceID
		t := tr.traces[id]
		if !in(p.Time, from, to) || t == nil || t.want.spans == 0 || !in(t.first, from, to) {
			continue
		}
		r.RefVictims++
		if top := tr.tops[id]; top != nil && top.Flagged {
			r.RefFlagged++
		} else if len(r.RefUnflagged) < 10 {
			r.RefUnflagged = append(r.RefUnflagged, fmt.Sprintf("%s (trace %s on %s, %s from %q at block %d layer %d, %.1fs into the window; %d revisions read)",
				req, id, p.GPU, p.Via, p.From, p.Block, p.Layer, p.Time.Sub(from).Seconds(), len(t.revs)))
		}
	}
	slices.Sort(r.RefUnflagged)
}

func report(res *Result) {
	w, b, f, in := res.Workload, res.Config, res.Fused, res.Incidents
	fmt.Printf("== %s run, %g requests/s (%d hosts, %d partitions): %d messages, %.1f MB/s, producer behind p50 %.0f p99 %.0f max %.0f ms; braid lag at the end %d (allowance %d): sustained %v; CPU-s per s in the window: braid %.3f, broker %.3f\n",
		res.Run, w.RequestsPerSec, w.Hosts, w.Partitions, w.Messages, w.MBPerSec, w.ProducerBehind.P50Ms, w.ProducerBehind.P99Ms, w.ProducerMaxBehindMs, w.EndLag, w.LagAllowance, w.Sustained, w.BraidCPUPerSec, w.BrokerCPUPerSec)
	fmt.Printf("config: idle_gap %gs, out_of_orderness %gs, checkpoint_interval %gs, idleness %gs → bound %gs (incidents %gs)\n",
		b.IdleGapS, b.OutOfOrdernessS, b.CheckpointIntervalS, b.IdlenessS, b.FusedBoundS, b.IncidentBoundS)
	fmt.Printf("fused: %d traces, %d measured, %d missed; complete p50 %.0f p90 %.0f p99 %.0f max %.0f ms; first record p50 %.0f p90 %.0f p99 %.0f max %.0f ms (%d first revisions incomplete)\n",
		f.Traces, f.Measured, f.Missed, f.Complete.P50Ms, f.Complete.P90Ms, f.Complete.P99Ms, f.Complete.MaxMs,
		f.First.P50Ms, f.First.P90Ms, f.First.P99Ms, f.First.MaxMs, f.FirstIncomplete)
	fmt.Printf("incidents: %d faults scheduled, %d realised in the window, %d measured, %d missed, %d incidents read; p50 %.0f p99 %.0f max %.0f ms; FLAG_POLLUTED on %d of %d victims' traces\n",
		in.FaultsScheduled, in.FaultsRealised, in.Measured, in.Missed, in.IncidentsRead, in.Latency.P50Ms, in.Latency.P99Ms, in.Latency.MaxMs, in.Flagged, in.Victims)
	for _, u := range in.Unflagged {
		fmt.Printf("  victim without FLAG_POLLUTED: %s\n", u)
	}
	if in.RefVictims > 0 || len(res.Incidents.Faults) > 0 {
		fmt.Printf("against the reference model (%d polluted requests in the run): FLAG_POLLUTED on %d of %d victims' traces\n", in.RefPolluted, in.RefFlagged, in.RefVictims)
	}
	for _, u := range in.RefUnflagged {
		fmt.Printf("  reference victim without FLAG_POLLUTED: %s\n", u)
	}
	for _, fl := range in.Faults {
		if fl.Missed != "" {
			fmt.Printf("  %s on %s: missed (%s)\n", fl.Trigger, fl.GPU, fl.Missed)
		} else {
			fmt.Printf("  %s on %s: %s edge %+.0f ms after the fault (event time), %.0f ms after %s was written\n", fl.Trigger, fl.GPU, fl.EdgeKind, fl.EdgeAfterFaultMs, fl.LatencyMs, fl.Evidence)
		}
	}
	verdict := "FAIL"
	if res.Pass.Passed {
		verdict = "PASS"
	}
	fmt.Printf("%s: %s\n", verdict, res.Pass.Checked)
	if res.BraidExit != "" {
		fmt.Printf("braid exit after SIGTERM: %s\n", res.BraidExit)
	}
	fmt.Printf("load average at start %s, at end %s (%d CPUs)\n", res.Machine.LoadAvgStart, res.Machine.LoadAvgEnd, res.Machine.CPUs)
}

// commandLine is how the program was run, arguments with spaces quoted.
func commandLine() string {
	args := []string{"go run ./benchmarks/latency"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}

func randSuffix() string {
	b := make([]byte, 5)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cpuMeter takes the CPU time of braid and the broker when production
// enters the measurement window and when it leaves it.
type cpuMeter struct {
	braid, broker  int
	from           time.Time // when the window was entered; zero before
	braid0, brk0   time.Duration
	done           bool
	braidPS, brkPS float64 // CPU-seconds per second of the window, once done
}

// at notes a batch produced for event time at (= wall time).
func (c *cpuMeter) at(at, winFrom, winTo time.Time) {
	switch {
	case c.from.IsZero() && !at.Before(winFrom):
		c.from = time.Now()
		c.braid0, c.brk0 = machine.ProcCPU(c.braid), machine.ProcCPU(c.broker)
	case !c.from.IsZero() && !c.done && !at.Before(winTo):
		c.done = true
		if secs := time.Since(c.from).Seconds(); secs > 0 {
			c.braidPS = (machine.ProcCPU(c.braid) - c.braid0).Seconds() / secs
			c.brkPS = (machine.ProcCPU(c.broker) - c.brk0).Seconds() / secs
		}
	}
}

// perSec returns braid's and the broker's CPU-seconds per second of the
// window (0 if it was not crossed).
func (c *cpuMeter) perSec() (braid, broker float64) { return c.braidPS, c.brkPS }
