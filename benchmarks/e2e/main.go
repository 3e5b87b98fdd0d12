// Command e2e is braid's end-to-end throughput benchmark on a real Kafka
// broker, reported as a ratio to a raw Kafka-to-Kafka copy of the same
// records (see benchmarks/README.md).
//
// It generates a Collector-shaped workload with connectors/simulator,
// produces it once into fresh input topics, then alternates the contenders
// over those same records, -rounds times each:
//
//   - raw: a franz-go consumer group client that reads the three input topics
//     from the start and produces every record's key and value unchanged to
//     an output topic (same partition), acks=all, idempotent, no
//     transactions, from the first poll until every record is copied and the
//     producer flushed;
//   - braid: the braid job (job.Prepare + Run, exactly-once: Kafka
//     transactions, checkpoint every 5s) in this process, with a fresh group,
//     outputs and state, from Run until it has read every input message and
//     a checkpoint has committed after that (and, reported beside it, until
//     every trace has been emitted and a checkpoint committed after that);
//   - braid-alo (-at-least-once, on by default): the same with the engine's
//     AtLeastOnce mode (no transactions; a checkpoint flushes the producer,
//     then commits the offsets);
//   - braid-noalerts (-alerts-off, on by default): exactly-once with the
//     alerts stage off (alerts.disabled), so that the CPU time of the
//     default rules is braid's over braid-noalerts' (Result.Alerts); braid
//     and braid-noalerts take turns going first, round by round;
//   - braid-sampling (-sampling, on by default): exactly-once with the
//     sampling stage on (sampling.enabled, the default policy: rate 0.1 and
//     the error, polluted, quality and slow rules), its sampled topics of
//     its own, so that the CPU time of sampling is braid-sampling's over
//     braid's (Result.Sampling); braid and braid-sampling take turns going
//     first. Each run reports the stage's counters (braid_sampling_*) as
//     the job's /metrics registry has them.
//
// A braid run that fails or times out is recorded with its error and left
// out of the median. The program prints a table and writes the result as
// JSON to benchmarks/results/e2e-<encoding>-<keying>.json. `make bench-e2e`
// runs it against a local broker; BRAID_KAFKA_BROKERS names the broker.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/benchmarks/internal/machine"
	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/sampling"
)

type options struct {
	brokers     []string
	requests    int
	encoding    string
	keying      string
	partitions  int32
	seed        int64
	rounds      int
	checkpoint  time.Duration
	timeout     time.Duration
	resultsDir  string
	cpuprofile  string
	brokerPID   int
	keepTopics  bool
	description string
	verbose     bool
	alo         bool
	alertsOff   bool
	eventTime   string
	profileOff  string
	sampling    bool
	profileSamp string
	settle      int
	budget      int64

	completeTimeout time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.requests, "requests", 150000, "requests (traces) to generate; 8 per Collector batch")
	flag.StringVar(&o.encoding, "encoding", "proto", "payload encoding: proto|json (otlp_proto|otlp_json)")
	flag.StringVar(&o.keying, "keying", "trace", "record keys: trace (partition_traces_by_id) | none (exporter default, null keys)")
	p := flag.Int("partitions", 4, "partitions of every topic")
	flag.Int64Var(&o.seed, "seed", 1, "simulator seed")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds; each runs raw, then braid, then braid at-least-once")
	flag.DurationVar(&o.checkpoint, "checkpoint", 5*time.Second, "braid checkpoint interval")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit of one phase")
	flag.StringVar(&o.resultsDir, "results", filepath.Join("benchmarks", "results"), "directory of the JSON result; empty: do not write one")
	flag.DurationVar(&o.completeTimeout, "complete-timeout", 2*time.Minute, "limit of braid's second window (every trace fused and committed) after the first")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of braid's run of the last round (both windows) to this file")
	flag.IntVar(&o.brokerPID, "broker-pid", 0, "pid of a local broker whose CPU time to report (default: read from $BRAID_KAFKA_DIR/broker.pid, /tmp/braid-kafka)")
	flag.BoolVar(&o.keepTopics, "keep-topics", false, "do not delete the topics at the end")
	flag.StringVar(&o.description, "note", "", "free text stored in the result")
	flag.BoolVar(&o.alo, "at-least-once", true, "also run braid with exactly-once off (engine AtLeastOnce: no transactions) in each round")
	flag.BoolVar(&o.alertsOff, "alerts-off", true, "also run braid with the alerts stage off (alerts.disabled) in each round: the cost of the default rules")
	flag.Int64Var(&o.budget, "memory-budget", 0, "braid's state.memory_budget, bytes (0: the job's default, 512 MiB); a backlog of more than ~150,000 requests read within one checkpoint interval needs more")
	flag.IntVar(&o.settle, "settle", 3, "braid's third window: this many more checkpoints after the second (the alerts stage evaluates the last partial aggregates)")
	flag.StringVar(&o.profileOff, "cpuprofile-alerts-off", "", "write a CPU profile of braid-noalerts' run of the last round to this file")
	flag.BoolVar(&o.sampling, "sampling", true, "also run braid with the sampling stage on (sampling.enabled, default policy) in each round: the cost of sampling")
	flag.StringVar(&o.profileSamp, "cpuprofile-sampling", "", "write a CPU profile of braid-sampling's run of the last round to this file")
	flag.StringVar(&o.eventTime, "event-time", "short", "braid's event-time settings: short (out-of-orderness 1s, idle gap 1s, allowed lateness 30s, flush after 2s, idleness 30s) | default (the job's defaults)")
	flag.BoolVar(&o.verbose, "v", false, "log the job's info lines (progress every 10s)")
	brokers := flag.String("brokers", os.Getenv("BRAID_KAFKA_BROKERS"), "bootstrap brokers, comma separated (default $BRAID_KAFKA_BROKERS)")
	flag.Parse()
	o.partitions = int32(*p)
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

func (o *options) validate() error {
	var errs []error
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("no broker: set BRAID_KAFKA_BROKERS or -brokers (make bench-e2e starts one)"))
	}
	if o.encoding != "proto" && o.encoding != "json" {
		errs = append(errs, fmt.Errorf("-encoding %q: want proto or json", o.encoding))
	}
	if o.keying != "trace" && o.keying != "none" {
		errs = append(errs, fmt.Errorf("-keying %q: want trace or none", o.keying))
	}
	if o.eventTime != "short" && o.eventTime != "default" {
		errs = append(errs, fmt.Errorf("-event-time %q: want short or default", o.eventTime))
	}
	if o.requests < 8 || o.partitions < 1 || o.rounds < 1 {
		errs = append(errs, errors.New("-requests ≥ 8, -partitions ≥ 1, -rounds ≥ 1"))
	}
	return errors.Join(errs...)
}

// Result is the JSON written to benchmarks/results.
type Result struct {
	Benchmark string    `json:"benchmark"`
	Time      time.Time `json:"time"`
	Note      string    `json:"note,omitempty"`
	Machine   Machine   `json:"machine"`
	Settings  Settings  `json:"settings"`
	Workload  Workload  `json:"workload"`
	// Runs of each contender, in round order.
	Raw   []Phase `json:"raw"`
	Braid []Phase `json:"braid"`
	// BraidALO is braid with exactly-once off (-at-least-once).
	BraidALO []Phase `json:"braid_at_least_once,omitempty"`
	// BraidNoAlerts is braid (exactly-once) with the alerts stage off
	// (-alerts-off).
	BraidNoAlerts []Phase `json:"braid_alerts_off,omitempty"`
	// BraidSampling is braid (exactly-once) with the sampling stage on
	// (-sampling).
	BraidSampling []Phase `json:"braid_sampling,omitempty"`
	Median        struct {
		Raw           Phase  `json:"raw"`
		Braid         Phase  `json:"braid"`
		BraidALO      *Phase `json:"braid_at_least_once,omitempty"`
		BraidNoAlerts *Phase `json:"braid_alerts_off,omitempty"`
		BraidSampling *Phase `json:"braid_sampling,omitempty"`
	} `json:"median"`
	// Alerts is the cost of the alerts stage with the default rules:
	// braid against braid-noalerts.
	Alerts *AlertsCost `json:"alerts,omitempty"`
	// Sampling is the cost of the sampling stage with its default policy:
	// braid-sampling against braid.
	Sampling *SamplingCost `json:"sampling,omitempty"`
	// Ratio is median braid msgs/s over median raw msgs/s; RatioALO the
	// same for braid at-least-once.
	Ratio    float64 `json:"ratio"`
	RatioALO float64 `json:"ratio_at_least_once,omitempty"`
	// RatioAllFused and RatioAllFusedALO use braid's second window (every
	// trace fused and committed).
	RatioAllFused    float64 `json:"ratio_all_fused,omitempty"`
	RatioAllFusedALO float64 `json:"ratio_all_fused_at_least_once,omitempty"`
	Profile          string  `json:"profile,omitempty"`
}

// AlertsCost compares braid's CPU time with the alerts stage on (the
// default rules) and off, over the same records: the ratio of the median
// CPU-s of braid over braid-noalerts (per million input messages or per
// million spans: the same ratio, the workload is the same). The figure is
// SettledCPURatio, window 3 (the stage's last evaluations included); the
// target is at most 1.15.
type AlertsCost struct {
	SettledCPURatio  float64 `json:"settled_cpu_ratio"`
	CPURatio         float64 `json:"cpu_ratio"`                     // window 1
	AllFusedCPURatio float64 `json:"all_fused_cpu_ratio,omitempty"` // window 2
	// Per round: the ratio of each round's pair of runs.
	SettledPerRound  []float64 `json:"settled_cpu_ratio_per_round,omitempty"`
	PerRound         []float64 `json:"cpu_ratio_per_round,omitempty"`
	AllFusedPerRound []float64 `json:"all_fused_cpu_ratio_per_round,omitempty"`
	// Median CPU-s of window 3 per million input messages and per million
	// spans, on and off.
	OnCPUSecPerMMsgs   float64 `json:"on_settled_cpu_s_per_million_messages"`
	OffCPUSecPerMMsgs  float64 `json:"off_settled_cpu_s_per_million_messages"`
	OnCPUSecPerMSpans  float64 `json:"on_settled_cpu_s_per_million_spans"`
	OffCPUSecPerMSpans float64 `json:"off_settled_cpu_s_per_million_spans"`
}

// SamplingCost compares braid's CPU time with the sampling stage on
// (braid-sampling) and off (braid), over the same records: the ratio of the
// median CPU-s of braid-sampling over braid. The figure is
// AllFusedCPURatio, window 2 (every trace emitted, hence decided, its kept
// members written to the sampled topics, and committed); the target is at
// most 1.2.
type SamplingCost struct {
	AllFusedCPURatio float64 `json:"all_fused_cpu_ratio"`         // window 2
	CPURatio         float64 `json:"cpu_ratio"`                   // window 1
	SettledCPURatio  float64 `json:"settled_cpu_ratio,omitempty"` // window 3
	// Per round: the ratio of each round's pair of runs.
	AllFusedPerRound []float64 `json:"all_fused_cpu_ratio_per_round,omitempty"`
	PerRound         []float64 `json:"cpu_ratio_per_round,omitempty"`
	SettledPerRound  []float64 `json:"settled_cpu_ratio_per_round,omitempty"`
	// Median CPU-s of window 2 per million input messages and per million
	// spans, on and off; the same for window 3.
	OnCPUSecPerMMsgs          float64 `json:"on_all_fused_cpu_s_per_million_messages"`
	OffCPUSecPerMMsgs         float64 `json:"off_all_fused_cpu_s_per_million_messages"`
	OnCPUSecPerMSpans         float64 `json:"on_all_fused_cpu_s_per_million_spans"`
	OffCPUSecPerMSpans        float64 `json:"off_all_fused_cpu_s_per_million_spans"`
	OnSettledCPUSecPerMMsgs   float64 `json:"on_settled_cpu_s_per_million_messages,omitempty"`
	OffSettledCPUSecPerMMsgs  float64 `json:"off_settled_cpu_s_per_million_messages,omitempty"`
	OnSettledCPUSecPerMSpans  float64 `json:"on_settled_cpu_s_per_million_spans,omitempty"`
	OffSettledCPUSecPerMSpans float64 `json:"off_settled_cpu_s_per_million_spans,omitempty"`
}

// SamplingCounters are the sampling stage's counters (braid_sampling_*, as
// the job's /metrics registry serves them), summed over tenants.
type SamplingCounters struct {
	Tenants    int              `json:"tenants"`
	Seen       int64            `json:"seen"`
	Dropped    int64            `json:"dropped"`
	Revised    int64            `json:"revised"`
	Kept       map[string]int64 `json:"kept"` // by reason
	KeptTotal  int64            `json:"kept_total"`
	Records    int64            `json:"records"`
	Bytes      int64            `json:"bytes"`
	Unwritable int64            `json:"unwritable"`
}

// AlertsCounters are the alerts stage's counters (braid_alerts_*) at the
// end of a run's measurement.
type AlertsCounters struct {
	Observations int64 `json:"observations"`
	Partials     int64 `json:"partials"`
	Evaluations  int64 `json:"evaluations"`
	Changes      int64 `json:"changes"`
	Late         int64 `json:"late"`
	Revised      int64 `json:"revised"`
	Overflow     int64 `json:"overflow"`
	Invalid      int64 `json:"invalid"`
	Firing       int64 `json:"firing"`
	Groups       int64 `json:"groups"`
	Bytes        int64 `json:"memory_bytes"`
}

// Machine is the machine the benchmark ran on.
type Machine = machine.Info

type Settings struct {
	Encoding           string `json:"encoding"`
	Keying             string `json:"keying"`
	Partitions         int32  `json:"partitions"`
	Requests           int    `json:"requests"`
	RequestsPerBatch   int    `json:"requests_per_batch"`
	Seed               int64  `json:"seed"`
	Rounds             int    `json:"rounds"`
	CheckpointInterval string `json:"checkpoint_interval"`
	EventTime          string `json:"event_time"`
	AtLeastOnce        bool   `json:"at_least_once_contender"`
	AlertsOff          bool   `json:"alerts_off_contender"`
	Sampling           bool   `json:"sampling_contender"`
	Settle             int    `json:"settle_checkpoints"`
	MemoryBudget       int64  `json:"memory_budget,omitempty"`
}

type Workload struct {
	Messages       int     `json:"messages"`
	Bytes          int64   `json:"bytes"`
	SpanMessages   int     `json:"span_messages"`
	LogMessages    int     `json:"log_messages"`
	MetricMessages int     `json:"metric_messages"`
	Spans          int     `json:"spans"`
	Logs           int     `json:"logs"`
	TraceLogs      int     `json:"trace_logs"`
	Points         int     `json:"points"`
	ExemplarPoints int     `json:"exemplar_points"`
	Traces         int     `json:"traces"`
	SplitTraces    int     `json:"split_traces"`
	Batches        int     `json:"batches"`
	GenerateSec    float64 `json:"generate_s"`
	ProduceSec     float64 `json:"produce_s"`
}

// Phase is one contender's run (or the median over runs, field by field).
type Phase struct {
	Round   int     `json:"round,omitempty"`
	Seconds float64 `json:"seconds"`
	MsgsPS  float64 `json:"msgs_per_s"`
	MBPS    float64 `json:"mb_per_s"`
	SpansPS float64 `json:"spans_per_s"`
	// CPUSec is the CPU time (user+system) of this process in the phase,
	// BrokerCPUSec the broker's (when its pid is known).
	CPUSec       float64 `json:"cpu_s"`
	BrokerCPUSec float64 `json:"broker_cpu_s,omitempty"`
	// Error says why a run failed (it is left out of the median).
	Error string `json:"error,omitempty"`
	// CPUSecPerMSpans is CPUSec per million spans of the workload,
	// CPUSecPerMMsgs per million input messages.
	CPUSecPerMSpans float64 `json:"cpu_s_per_million_spans"`
	CPUSecPerMMsgs  float64 `json:"cpu_s_per_million_messages"`

	// braid only.
	ReadSec      float64 `json:"read_s,omitempty"` // until every message was read
	PrepareSec   float64 `json:"prepare_s,omitempty"`
	Fused        int64   `json:"fused,omitempty"` // FusedTrace records emitted by the end
	Revisions    int64   `json:"revisions"`       // of which revision > 0
	Late         int64   `json:"late"`
	OpenTraces   int64   `json:"open_traces,omitempty"`
	Members      int64   `json:"members,omitempty"`
	Local        int64   `json:"local_groups,omitempty"`
	Repartition  int64   `json:"repartitioned_groups,omitempty"`
	RecordsOut   int64   `json:"records_out,omitempty"`
	Checkpoints  int64   `json:"checkpoints,omitempty"`
	Aborts       int64   `json:"aborts,omitempty"`
	LastCommitMS float64 `json:"last_commit_ms,omitempty"`
	StopSec      float64 `json:"stop_s,omitempty"` // final checkpoint and close, after the measurement
	// Alerts: the alerts stage's counters at the end of the measurement
	// (window 3), AlertsAllFused at the end of window 2 (nil: the stage is
	// off).
	Alerts         *AlertsCounters `json:"alerts,omitempty"`
	AlertsAllFused *AlertsCounters `json:"alerts_all_fused,omitempty"`
	// Sampling: the sampling stage's counters at the end of the
	// measurement (window 3, else 2), SamplingAllFused at the end of
	// window 2 (nil: the stage is off).
	Sampling         *SamplingCounters `json:"sampling,omitempty"`
	SamplingAllFused *SamplingCounters `json:"sampling_all_fused,omitempty"`

	// braid, second window: from Run until every trace was emitted and a
	// checkpoint committed after that (0: not within -complete-timeout).
	AllFusedSec             float64 `json:"all_fused_s,omitempty"`
	AllFusedMsgsPS          float64 `json:"all_fused_msgs_per_s,omitempty"`
	AllFusedCPUSec          float64 `json:"all_fused_cpu_s,omitempty"`
	AllFusedBrokerCPUSec    float64 `json:"all_fused_broker_cpu_s,omitempty"`
	AllFusedCPUSecPerMSpans float64 `json:"all_fused_cpu_s_per_million_spans,omitempty"`
	AllFusedCPUSecPerMMsgs  float64 `json:"all_fused_cpu_s_per_million_messages,omitempty"`
	FusedAtEnd              int64   `json:"fused_at_end,omitempty"` // FusedTrace records emitted by the end of the second window

	// braid, third window: from Run until -settle more checkpoints have
	// committed after the second window (0: not within -complete-timeout).
	SettledSec             float64 `json:"settled_s,omitempty"`
	SettledCPUSec          float64 `json:"settled_cpu_s,omitempty"`
	SettledBrokerCPUSec    float64 `json:"settled_broker_cpu_s,omitempty"`
	SettledCPUSecPerMSpans float64 `json:"settled_cpu_s_per_million_spans,omitempty"`
	SettledCPUSecPerMMsgs  float64 `json:"settled_cpu_s_per_million_messages,omitempty"`
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	res := &Result{Benchmark: "e2e", Time: time.Now().UTC(), Note: o.description, Machine: machine.Read()}
	res.Settings = Settings{Encoding: o.encoding, Keying: o.keying, Partitions: o.partitions, Requests: o.requests,
		RequestsPerBatch: simulator.DefaultRequestsPerBatch, Seed: o.seed, Rounds: o.rounds, CheckpointInterval: o.checkpoint.String(),
		EventTime: o.eventTime, AtLeastOnce: o.alo, AlertsOff: o.alertsOff, Sampling: o.sampling, Settle: o.settle, MemoryBudget: o.budget}
	if o.brokerPID == 0 {
		o.brokerPID = machine.BrokerPID()
	}

	ctx := context.Background()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	run := "bench-" + suffix()
	newTopics := func(names ...string) error { return createTopics(ctx, adm, o.partitions, names...) }
	defer func() {
		if !o.keepTopics {
			deleteTopics(adm, run+".")
		}
	}()

	// 1. The workload, produced once.
	topics := simulator.Topics{Spans: run + ".otlp_spans", Logs: run + ".otlp_logs", Metrics: run + ".otlp_metrics"}
	if err := newTopics(topics.Spans, topics.Logs, topics.Metrics); err != nil {
		return err
	}
	fmt.Printf("braid e2e benchmark: encoding=%s keying=%s partitions=%d requests=%d rounds=%d brokers=%s\n",
		o.encoding, o.keying, o.partitions, o.requests, o.rounds, strings.Join(o.brokers, ","))
	t0 := time.Now()
	msgs, wl, err := generate(o, topics)
	if err != nil {
		return err
	}
	wl.GenerateSec = time.Since(t0).Seconds()
	t0 = time.Now()
	if err := produce(ctx, o, msgs); err != nil {
		return err
	}
	wl.ProduceSec = time.Since(t0).Seconds()
	msgs = nil
	res.Workload = wl
	fmt.Printf("workload: %d messages (%d spans, %d logs, %d metrics), %.1f MB; %d spans, %d logs, %d points, %d traces (%d split); produced in %.1fs\n",
		wl.Messages, wl.SpanMessages, wl.LogMessages, wl.MetricMessages, float64(wl.Bytes)/1e6,
		wl.Spans, wl.Logs, wl.Points, wl.Traces, wl.SplitTraces, wl.ProduceSec)

	// 2. raw, braid, [braid at-least-once,] raw, braid, ...
	for r := 1; r <= o.rounds; r++ {
		out := fmt.Sprintf("%s.raw-%d", run, r)
		if err := newTopics(out); err != nil {
			return err
		}
		ph, err := rawCopy(ctx, o, topics, out, out, wl)
		if err != nil {
			return fmt.Errorf("round %d raw: %w", r, err)
		}
		ph.Round = r
		res.Raw = append(res.Raw, ph)
		fmt.Printf("round %d %-10s %6.2fs %8.0f msgs/s %6.1f MB/s  cpu %5.2fs%s\n", r, "raw", ph.Seconds, ph.MsgsPS, ph.MBPS, ph.CPUSec, brokerCPU(ph))

		// braid takes turns going first with braid-noalerts and with
		// braid-sampling: braid, noalerts, sampling in odd rounds, the
		// reverse in even ones.
		kinds := []contender{braidEO, braidNoAlerts, braidSampling}
		if r%2 == 0 {
			slices.Reverse(kinds)
		}
		kinds = append(kinds, braidALO)
		for _, k := range kinds {
			if k == braidALO && !o.alo || k == braidNoAlerts && !o.alertsOff || k == braidSampling && !o.sampling {
				continue
			}
			name := k.String()
			group, profile := fmt.Sprintf("%s.%s-%d", run, name, r), ""
			if r == o.rounds {
				switch k {
				case braidEO:
					profile = o.cpuprofile
				case braidNoAlerts:
					profile = o.profileOff
				case braidSampling:
					profile = o.profileSamp
				}
			}
			ph, err = braidJob(ctx, o, topics, group, k, wl, profile)
			if err != nil && ph.Error == "" {
				return fmt.Errorf("round %d %s: %w", r, name, err)
			}
			ph.Round = r
			switch k {
			case braidALO:
				res.BraidALO = append(res.BraidALO, ph)
			case braidNoAlerts:
				res.BraidNoAlerts = append(res.BraidNoAlerts, ph)
			case braidSampling:
				res.BraidSampling = append(res.BraidSampling, ph)
			default:
				res.Braid = append(res.Braid, ph)
			}
			if !o.keepTopics {
				deleteTopics(adm, group+".") // their data is not needed again: less for the broker to keep
			}
			if ph.Error != "" {
				fmt.Printf("round %d %-14s FAILED after %.2fs, cpu %5.2fs%s: %s\n", r, name, ph.Seconds, ph.CPUSec, brokerCPU(ph), ph.Error)
				continue
			}
			fmt.Printf("round %d %-14s %6.2fs %8.0f msgs/s %6.1f MB/s  cpu %5.2fs%s  (read all in %.2fs, %d fused of which %d revisions, %d checkpoints, %d aborts); all fused+committed %.2fs %.0f msgs/s cpu %.2fs%s\n",
				r, name, ph.Seconds, ph.MsgsPS, ph.MBPS, ph.CPUSec, brokerCPU(ph), ph.ReadSec, ph.Fused, ph.Revisions, ph.Checkpoints, ph.Aborts,
				ph.AllFusedSec, ph.AllFusedMsgsPS, ph.AllFusedCPUSec, alertsLine(ph.Alerts)+samplingLine(ph.Sampling))
		}
		if !o.keepTopics {
			deleteTopics(adm, out)
		}
	}
	res.Median.Raw, res.Median.Braid = median(res.Raw), median(res.Braid)
	res.Ratio = res.Median.Braid.MsgsPS / res.Median.Raw.MsgsPS
	res.RatioAllFused = res.Median.Braid.AllFusedMsgsPS / res.Median.Raw.MsgsPS
	if len(res.BraidALO) > 0 {
		m := median(res.BraidALO)
		res.Median.BraidALO = &m
		res.RatioALO = m.MsgsPS / res.Median.Raw.MsgsPS
		res.RatioAllFusedALO = m.AllFusedMsgsPS / res.Median.Raw.MsgsPS
	}
	if len(res.BraidNoAlerts) > 0 {
		m := median(res.BraidNoAlerts)
		res.Median.BraidNoAlerts = &m
		res.Alerts = alertsCost(res.Braid, res.BraidNoAlerts, res.Median.Braid, m)
	}
	if len(res.BraidSampling) > 0 {
		m := median(res.BraidSampling)
		res.Median.BraidSampling = &m
		res.Sampling = samplingCost(res.BraidSampling, res.Braid, m, res.Median.Braid)
	}
	if o.cpuprofile != "" {
		res.Profile = o.cpuprofile
	}
	res.Machine.LoadAvgEnd = machine.LoadAvg()
	printTable(res)

	if o.resultsDir != "" {
		if err := os.MkdirAll(o.resultsDir, 0o755); err != nil {
			return err
		}
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		path := filepath.Join(o.resultsDir, fmt.Sprintf("e2e-%s-%s.json", o.encoding, o.keying))
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Println("result written to", path)
	}
	return nil
}

// contender is a kind of braid run.
type contender int

const (
	braidEO       contender = iota // exactly-once, alerts on (the job's defaults)
	braidALO                       // at-least-once
	braidNoAlerts                  // exactly-once, alerts off
	braidSampling                  // exactly-once, alerts on, sampling on
)

func (k contender) String() string {
	switch k {
	case braidALO:
		return "braid-alo"
	case braidNoAlerts:
		return "braid-noalerts"
	case braidSampling:
		return "braid-sampling"
	}
	return "braid"
}

// alertsCost compares the runs with the alerts stage on and off: medians,
// and the ratio of each round's pair.
func alertsCost(on, off []Phase, mOn, mOff Phase) *AlertsCost {
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return a / b
	}
	c := &AlertsCost{
		SettledCPURatio:  ratio(mOn.SettledCPUSec, mOff.SettledCPUSec),
		CPURatio:         ratio(mOn.CPUSec, mOff.CPUSec),
		AllFusedCPURatio: ratio(mOn.AllFusedCPUSec, mOff.AllFusedCPUSec),
		OnCPUSecPerMMsgs: mOn.SettledCPUSecPerMMsgs, OffCPUSecPerMMsgs: mOff.SettledCPUSecPerMMsgs,
		OnCPUSecPerMSpans: mOn.SettledCPUSecPerMSpans, OffCPUSecPerMSpans: mOff.SettledCPUSecPerMSpans,
	}
	for _, p := range on {
		for _, q := range off {
			if p.Round != q.Round || p.Error != "" || q.Error != "" {
				continue
			}
			if r := ratio(p.SettledCPUSec, q.SettledCPUSec); r > 0 {
				c.SettledPerRound = append(c.SettledPerRound, r)
			}
			if r := ratio(p.CPUSec, q.CPUSec); r > 0 {
				c.PerRound = append(c.PerRound, r)
			}
			if r := ratio(p.AllFusedCPUSec, q.AllFusedCPUSec); r > 0 {
				c.AllFusedPerRound = append(c.AllFusedPerRound, r)
			}
		}
	}
	return c
}

// samplingCost compares the runs with the sampling stage on and off:
// medians, and the ratio of each round's pair.
func samplingCost(on, off []Phase, mOn, mOff Phase) *SamplingCost {
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return a / b
	}
	c := &SamplingCost{
		AllFusedCPURatio: ratio(mOn.AllFusedCPUSec, mOff.AllFusedCPUSec),
		CPURatio:         ratio(mOn.CPUSec, mOff.CPUSec),
		SettledCPURatio:  ratio(mOn.SettledCPUSec, mOff.SettledCPUSec),
		OnCPUSecPerMMsgs: mOn.AllFusedCPUSecPerMMsgs, OffCPUSecPerMMsgs: mOff.AllFusedCPUSecPerMMsgs,
		OnCPUSecPerMSpans: mOn.AllFusedCPUSecPerMSpans, OffCPUSecPerMSpans: mOff.AllFusedCPUSecPerMSpans,
		OnSettledCPUSecPerMMsgs: mOn.SettledCPUSecPerMMsgs, OffSettledCPUSecPerMMsgs: mOff.SettledCPUSecPerMMsgs,
		OnSettledCPUSecPerMSpans: mOn.SettledCPUSecPerMSpans, OffSettledCPUSecPerMSpans: mOff.SettledCPUSecPerMSpans,
	}
	for _, p := range on {
		for _, q := range off {
			if p.Round != q.Round || p.Error != "" || q.Error != "" {
				continue
			}
			if r := ratio(p.AllFusedCPUSec, q.AllFusedCPUSec); r > 0 {
				c.AllFusedPerRound = append(c.AllFusedPerRound, r)
			}
			if r := ratio(p.CPUSec, q.CPUSec); r > 0 {
				c.PerRound = append(c.PerRound, r)
			}
			if r := ratio(p.SettledCPUSec, q.SettledCPUSec); r > 0 {
				c.SettledPerRound = append(c.SettledPerRound, r)
			}
		}
	}
	return c
}

// samplingCounters reads the sampling stage's counters from the job's
// metrics registry (what /metrics serves), summed over tenants; nil when
// the registry has none.
func samplingCounters(reg prometheus.Gatherer) (*SamplingCounters, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	sc := &SamplingCounters{Kept: map[string]int64{}}
	found := false
	tenants := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "braid_sampling_") {
			continue
		}
		found = true
		for _, m := range mf.GetMetric() {
			v := int64(m.GetCounter().GetValue())
			var reason string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenants[l.GetValue()] = true
				case "reason":
					reason = l.GetValue()
				}
			}
			switch name {
			case "braid_sampling_seen_total":
				sc.Seen += v
			case "braid_sampling_dropped_total":
				sc.Dropped += v
			case "braid_sampling_revised_total":
				sc.Revised += v
			case "braid_sampling_kept_total":
				sc.Kept[reason] += v
				sc.KeptTotal += v
			case "braid_sampling_records_total":
				sc.Records += v
			case "braid_sampling_bytes_total":
				sc.Bytes += v
			case "braid_sampling_unwritable_total":
				sc.Unwritable += v
			}
		}
	}
	if !found {
		return nil, nil
	}
	sc.Tenants = len(tenants)
	return sc, nil
}

func samplingLine(c *SamplingCounters) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("; sampling: %d seen, %d kept (%s), %d revised, %d records, %.1f MB, %d unwritable",
		c.Seen, c.KeptTotal, keptString(c.Kept), c.Revised, c.Records, float64(c.Bytes)/1e6, c.Unwritable)
}

// keptString is the kept counts by reason, in a fixed order.
func keptString(kept map[string]int64) string {
	var s []string
	for _, r := range sampling.Reasons() {
		s = append(s, fmt.Sprintf("%s %d", r, kept[r]))
	}
	return strings.Join(s, ", ")
}

func alertsLine(c *AlertsCounters) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("; alerts: %d observations, %d partials, %d evaluations, %d changes, %d late, %d groups",
		c.Observations, c.Partials, c.Evaluations, c.Changes, c.Late, c.Groups)
}

func brokerCPU(ph Phase) string {
	if ph.BrokerCPUSec == 0 {
		return ""
	}
	return fmt.Sprintf("  broker cpu %5.2fs", ph.BrokerCPUSec)
}

// generate runs the simulator for o.requests requests.
func generate(o options, topics simulator.Topics) ([]simulator.Message, Workload, error) {
	cfg := simulator.Config{Seed: o.seed, Encoding: simulator.EncodingProto, Topics: topics}
	if o.encoding == "json" {
		cfg.Encoding = simulator.EncodingJSON
	}
	if o.keying == "none" {
		cfg.Keying = simulator.Unkeyed
	}
	sim, err := simulator.New(cfg)
	if err != nil {
		return nil, Workload{}, err
	}
	var msgs []simulator.Message
	batches := (o.requests + simulator.DefaultRequestsPerBatch - 1) / simulator.DefaultRequestsPerBatch
	split := 0
	for range batches {
		msgs = append(msgs, sim.Next()...)
		tr := sim.Truth() // per batch: ForgetTraces keeps it small
		for _, tt := range tr.Traces {
			if tt.Split && tt.PendingSpans > 0 {
				split++
			}
		}
		sim.ForgetTraces()
	}
	msgs = append(msgs, sim.Flush()...)
	tr := sim.Truth()
	w := Workload{
		Messages:     len(msgs),
		SpanMessages: tr.SpanMessages, LogMessages: tr.LogMessages, MetricMessages: tr.MetricMessages,
		Spans: tr.Spans, Logs: tr.TraceLogs + tr.TracelessLogs, TraceLogs: tr.TraceLogs,
		Points: tr.ExemplarPoints + tr.ResourcePoints, ExemplarPoints: tr.ExemplarPoints,
		Traces: batches * simulator.DefaultRequestsPerBatch, SplitTraces: split, Batches: tr.Batches,
	}
	for _, m := range msgs {
		w.Bytes += int64(len(m.Key) + len(m.Value))
	}
	return msgs, w, nil
}

func produce(ctx context.Context, o options, msgs []simulator.Message) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.RecordPartitioner(simulator.Partitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// In batches of the simulator's order, so that the sticky partitioner
	// moves on as the Collector's producer would.
	for len(msgs) > 0 {
		n := min(len(msgs), 5000)
		if err := simulator.Produce(pctx, cl, msgs[:n]); err != nil {
			return fmt.Errorf("produce the workload: %w", err)
		}
		msgs = msgs[n:]
	}
	return nil
}

// cpuTime is user+system time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// meter measures a phase: wall time, this process's and the broker's CPU.
type meter struct {
	start          time.Time
	cpu, brokerCPU time.Duration
	pid            int
}

func startMeter(pid int) meter {
	runtime.GC() // the previous phase's garbage is not this phase's work
	return meter{start: time.Now(), cpu: cpuTime(), brokerCPU: machine.ProcCPU(pid), pid: pid}
}

func (m meter) stop(wl Workload) Phase {
	sec := time.Since(m.start).Seconds()
	ph := Phase{Seconds: sec, CPUSec: (cpuTime() - m.cpu).Seconds()}
	if m.pid > 0 {
		ph.BrokerCPUSec = (machine.ProcCPU(m.pid) - m.brokerCPU).Seconds()
	}
	ph.MsgsPS = float64(wl.Messages) / sec
	ph.MBPS = float64(wl.Bytes) / sec / 1e6
	ph.SpansPS = float64(wl.Spans) / sec
	ph.CPUSecPerMSpans = ph.CPUSec / float64(wl.Spans) * 1e6
	ph.CPUSecPerMMsgs = ph.CPUSec / float64(wl.Messages) * 1e6
	return ph
}

// rawCopy is the ceiling of any Kafka-to-Kafka job: consume and produce
// unchanged, no transactions.
func rawCopy(ctx context.Context, o options, in simulator.Topics, out, group string, wl Workload) (Phase, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in.Spans, in.Logs, in.Metrics),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return Phase{}, err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var produceErr error
	errc := make(chan error, 1)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case errc <- err:
			default:
			}
		}
	}
	read := 0
	m := startMeter(o.brokerPID)
	for read < wl.Messages {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			return Phase{}, fmt.Errorf("copied %d of %d records within %v", read, wl.Messages, o.timeout)
		}
		if err := fs.Err0(); err != nil {
			return Phase{}, fmt.Errorf("poll: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			cl.Produce(pctx, &kgo.Record{Topic: out, Partition: r.Partition, Key: r.Key, Value: r.Value}, promise)
		})
	}
	if err := cl.Flush(pctx); err != nil {
		return Phase{}, fmt.Errorf("flush: %w", err)
	}
	ph := m.stop(wl)
	select {
	case produceErr = <-errc:
	default:
	}
	if produceErr != nil {
		return Phase{}, fmt.Errorf("produce: %w", produceErr)
	}
	if read != wl.Messages {
		return Phase{}, fmt.Errorf("read %d records, produced %d", read, wl.Messages)
	}
	return ph, nil
}

// braidJob runs the braid job on the workload until every input message was
// read and a checkpoint committed after that.
func braidJob(ctx context.Context, o options, in simulator.Topics, group string, kind contender, wl Workload, profile string) (Phase, error) {
	dir, err := os.MkdirTemp("", "braid-bench-state-")
	if err != nil {
		return Phase{}, err
	}
	defer os.RemoveAll(dir)
	enc := "otlp_proto"
	if o.encoding == "json" {
		enc = "otlp_json"
	}
	cfg := &job.Config{}
	cfg.Kafka.Brokers = o.brokers
	cfg.Group = group
	cfg.InstanceID = "0"
	cfg.State.Dir = dir
	cfg.State.MemoryBudget = o.budget
	cfg.Inputs.Spans = job.InputConfig{Topic: in.Spans, Encoding: enc}
	cfg.Inputs.Logs = job.InputConfig{Topic: in.Logs, Encoding: enc}
	cfg.Inputs.Metrics = job.InputConfig{Topic: in.Metrics, Encoding: enc}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = group+".fused", group+".late", group+".dlq"
	cfg.Outputs.Pollution, cfg.Outputs.Incidents, cfg.Outputs.Alerts = group+".pollution", group+".incidents", group+".alerts"
	cfg.CheckpointInterval = o.checkpoint
	cfg.AtLeastOnce = kind == braidALO
	cfg.Alerts.Disabled = kind == braidNoAlerts
	if kind == braidSampling {
		// The default policy; the sampled topics are the run's own, as
		// its other outputs.
		cfg.Sampling.Enabled = true
		cfg.Sampling.TracesTopic, cfg.Sampling.LogsTopic = group+".sampled.spans", group+".sampled.logs"
	}
	if o.eventTime == "short" {
		// Short, as in the integration tests, so that traces close soon
		// after their data and their emission falls in the measured
		// windows; but idleness stays at its default, 30s: it must exceed
		// the checkpoint interval, since the repartition topic carries the
		// upstream tasks' watermarks only once per checkpoint (with 5s,
		// the upstream inputs go idle just before the first markers and
		// the repartitioned members of a backlog arrive late).
		cfg.EventTime.OutOfOrderness = time.Second
		cfg.EventTime.IdleGap = time.Second
		cfg.EventTime.AllowedLateness = 30 * time.Second
		cfg.EventTime.FlushAfter = 2 * time.Second
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return Phase{}, err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
		cfg.LogInterval = 10 * time.Second
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	j, err := job.Prepare(rctx, cfg, log)
	if err != nil {
		return Phase{}, err
	}
	prepare := time.Since(t0).Seconds()

	var prof *os.File
	if profile != "" {
		if prof, err = os.Create(profile); err != nil {
			return Phase{}, err
		}
		defer prof.Close()
	}
	c, st := j.Counters(), j.Engine().Stats()
	alertsStage := j.Stage().Config().Alerts
	if (alertsStage == nil) != (kind == braidNoAlerts) {
		return Phase{}, fmt.Errorf("alerts stage on: %v, want %v", alertsStage != nil, kind != braidNoAlerts)
	}
	if on := j.Stage().Config().Sampling != nil; on != (kind == braidSampling) {
		return Phase{}, fmt.Errorf("sampling stage on: %v, want %v", on, kind == braidSampling)
	}
	samplingNow := func() *SamplingCounters {
		if kind != braidSampling {
			return nil
		}
		sc, err := samplingCounters(j.Registry())
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: sampling counters:", err)
		}
		return sc
	}
	m := startMeter(o.brokerPID)
	if prof != nil {
		if err := pprof.StartCPUProfile(prof); err != nil {
			return Phase{}, err
		}
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(rctx) }()
	stopProfile := func() {
		if prof != nil {
			pprof.StopCPUProfile()
			prof = nil
		}
	}
	defer stopProfile()

	snapshot := func(ph *Phase) {
		ph.PrepareSec = prepare
		ph.Fused = c.Fused.Load()
		ph.Revisions = c.Revisions.Load()
		ph.Late = c.Late.Load()
		ph.OpenTraces = c.OpenTraces.Load()
		ph.Members = c.Members.Load()
		ph.Local = c.Local.Load()
		ph.Repartition = c.Repartitioned.Load()
		ph.RecordsOut = st.RecordsOut.Load()
		ph.Checkpoints = st.Checkpoints.Load()
		ph.Aborts = st.Aborts.Load()
		ph.LastCommitMS = float64(st.LastCommitNanos.Load()) / 1e6
	}
	// failed is the phase of a run that did not finish: wall and CPU time
	// so far, the counters, and why; no rates.
	failed := func(err error) (Phase, error) {
		stopProfile()
		ph := m.stop(wl)
		snapshot(&ph)
		ph.MsgsPS, ph.MBPS, ph.SpansPS = 0, 0, 0
		ph.Error = fmt.Sprintf("%v (%d of %d messages read)", err, c.Messages.Load(), wl.Messages)
		return ph, errors.New(ph.Error)
	}

	// Two windows, watched together from the start:
	//  1. until every input message was read and a checkpoint committed
	//     after that (the figure of the benchmark);
	//  2. until every trace was emitted (first emissions = Fused -
	//     Revisions) and a checkpoint committed after that, so that the
	//     fusing and emitting of every trace is in it. The last traces close
	//     by the processing-time flush (FlushAfter) once the input has
	//     stopped, so this includes up to FlushAfter of waiting.
	// A checkpoint counted before a condition is seen to hold cannot be the
	// one that commits it: each condition reads the counter first.
	deadline := time.After(o.timeout)
	var ext <-chan time.Time // -complete-timeout, from the end of window 1
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var readAt, fusedAt time.Duration
	var ckAtRead, ckAtFused int64
	var ph Phase
	done1, expired := false, false
	want := int64(wl.Messages)
	for {
		select {
		case err := <-done:
			return failed(fmt.Errorf("job ended early: %v", err))
		case <-deadline:
			if done1 {
				break // window 2 has its own limit
			}
			if f, err := os.CreateTemp("", "e2e-goroutines-*.txt"); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				f.Close()
				fmt.Fprintln(os.Stderr, "e2e: braid phase timed out; goroutines in", f.Name())
			}
			ph, err := failed(fmt.Errorf("not done within %v", o.timeout))
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute):
			}
			return ph, err
		case <-ext:
			fmt.Fprintf(os.Stderr, "e2e: not every trace fused and committed within -complete-timeout %v (%d of %d fused)\n",
				o.completeTimeout, c.Fused.Load()-c.Revisions.Load(), wl.Traces)
			expired = true
		case <-tick.C:
		}
		ck := st.Checkpoints.Load()
		if readAt == 0 && c.Messages.Load() >= want {
			// More than want: messages read again after an aborted
			// checkpoint (Aborts says so).
			readAt, ckAtRead = time.Since(m.start), ck
		}
		if fusedAt == 0 && c.Fused.Load()-c.Revisions.Load() >= int64(wl.Traces) {
			fusedAt, ckAtFused = time.Since(m.start), ck
		}
		if !done1 && readAt != 0 && ck > ckAtRead {
			done1 = true
			ph = m.stop(wl)
			ph.ReadSec = readAt.Seconds()
			snapshot(&ph)
			if n := c.DLQ.Load(); n != 0 {
				return Phase{}, fmt.Errorf("%d messages went to the DLQ", n)
			}
			ext = time.After(o.completeTimeout)
		}
		if done1 && fusedAt != 0 && ck > ckAtFused {
			all := m.stop(wl)
			ph.AllFusedSec = all.Seconds
			ph.AllFusedMsgsPS = all.MsgsPS
			ph.AllFusedCPUSec = all.CPUSec
			ph.AllFusedBrokerCPUSec = all.BrokerCPUSec
			ph.AllFusedCPUSecPerMSpans = all.CPUSecPerMSpans
			ph.AllFusedCPUSecPerMMsgs = all.CPUSecPerMMsgs
			break
		}
		if expired {
			break
		}
	}
	ph.FusedAtEnd = c.Fused.Load()
	alertsNow := func() *AlertsCounters {
		if alertsStage == nil {
			return nil
		}
		ac := alertsStage.Counters()
		return &AlertsCounters{
			Observations: ac.Observations.Load(), Partials: ac.Partials.Load(), Evaluations: ac.Evaluations.Load(),
			Changes: ac.Changes.Load(), Late: ac.Late.Load(), Revised: ac.Revised.Load(), Overflow: ac.Overflow.Load(),
			Invalid: ac.Invalid.Load(), Firing: ac.Firing.Load(), Groups: ac.Groups.Load(), Bytes: ac.Bytes.Load(),
		}
	}
	ph.AlertsAllFused = alertsNow()
	ph.SamplingAllFused = samplingNow()
	// Window 3: -settle more checkpoints after window 2, so that the
	// alerts stage's partial aggregates of the last checkpoints reach
	// their owners over its internal topic and the windows the
	// watermark has passed are evaluated. The same for every contender.
	if !expired && o.settle > 0 {
		target := st.Checkpoints.Load() + int64(o.settle)
		limit := time.After(o.completeTimeout)
	settle:
		for st.Checkpoints.Load() < target {
			select {
			case err := <-done:
				return failed(fmt.Errorf("job ended early: %v", err))
			case <-limit:
				fmt.Fprintf(os.Stderr, "e2e: %d more checkpoints not within %v\n", o.settle, o.completeTimeout)
				break settle
			case <-tick.C:
			}
		}
		if st.Checkpoints.Load() >= target {
			set := m.stop(wl)
			ph.SettledSec, ph.SettledCPUSec, ph.SettledBrokerCPUSec = set.Seconds, set.CPUSec, set.BrokerCPUSec
			ph.SettledCPUSecPerMSpans, ph.SettledCPUSecPerMMsgs = set.CPUSecPerMSpans, set.CPUSecPerMMsgs
		}
	}
	stopProfile()
	ph.Alerts = alertsNow()
	ph.Sampling = samplingNow()

	t0 = time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			return Phase{}, fmt.Errorf("job: %w", err)
		}
	case <-time.After(2 * time.Minute):
		return Phase{}, errors.New("job did not stop within 2m")
	}
	ph.StopSec = time.Since(t0).Seconds()
	return ph, nil
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, names ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resps, err := adm.CreateTopics(cctx, partitions, 1, nil, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("create topics %v: %w", names, err)
	}
	// Wait until every partition has a leader.
	for {
		td, err := adm.ListTopics(cctx, names...)
		ok := err == nil
		for _, n := range names {
			d, found := td[n]
			if !found || d.Err != nil || len(d.Partitions) != int(partitions) {
				ok = false
				break
			}
			for _, p := range d.Partitions {
				if p.Leader < 0 || p.Err != nil {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("topics %v not ready: %w", names, cctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteTopics deletes every topic whose name starts with prefix: the
// inputs, the raw copies and all that the braid jobs created.
func deleteTopics(adm *kadm.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	td, err := adm.ListTopics(ctx)
	if err == nil {
		var names []string
		for _, n := range td.Names() {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			_, err = adm.DeleteTopics(ctx, names...)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: delete topics:", err)
	}
}

func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// median takes the median of each measured field over the phases that did
// not fail.
func median(all []Phase) Phase {
	var ps []Phase
	for _, p := range all {
		if p.Error == "" {
			ps = append(ps, p)
		}
	}
	// Windows 2 and 3 are 0 in a run that did not reach them (within
	// -complete-timeout): medReached leaves those runs out.
	medOf := func(f func(Phase) float64, reached bool) float64 {
		var v []float64
		for _, p := range ps {
			if x := f(p); x != 0 || !reached {
				v = append(v, x)
			}
		}
		slices.Sort(v)
		n := len(v)
		if n == 0 {
			return 0
		}
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	med := func(f func(Phase) float64) float64 { return medOf(f, false) }
	medReached := func(f func(Phase) float64) float64 { return medOf(f, true) }
	m := Phase{
		Seconds:         med(func(p Phase) float64 { return p.Seconds }),
		MsgsPS:          med(func(p Phase) float64 { return p.MsgsPS }),
		MBPS:            med(func(p Phase) float64 { return p.MBPS }),
		SpansPS:         med(func(p Phase) float64 { return p.SpansPS }),
		CPUSec:          med(func(p Phase) float64 { return p.CPUSec }),
		BrokerCPUSec:    med(func(p Phase) float64 { return p.BrokerCPUSec }),
		CPUSecPerMSpans: med(func(p Phase) float64 { return p.CPUSecPerMSpans }),
		CPUSecPerMMsgs:  med(func(p Phase) float64 { return p.CPUSecPerMMsgs }),
		ReadSec:         med(func(p Phase) float64 { return p.ReadSec }),
		PrepareSec:      med(func(p Phase) float64 { return p.PrepareSec }),

		AllFusedSec:             medReached(func(p Phase) float64 { return p.AllFusedSec }),
		AllFusedMsgsPS:          medReached(func(p Phase) float64 { return p.AllFusedMsgsPS }),
		AllFusedCPUSec:          medReached(func(p Phase) float64 { return p.AllFusedCPUSec }),
		AllFusedBrokerCPUSec:    medReached(func(p Phase) float64 { return p.AllFusedBrokerCPUSec }),
		AllFusedCPUSecPerMSpans: medReached(func(p Phase) float64 { return p.AllFusedCPUSecPerMSpans }),
		AllFusedCPUSecPerMMsgs:  medReached(func(p Phase) float64 { return p.AllFusedCPUSecPerMMsgs }),

		SettledSec:             medReached(func(p Phase) float64 { return p.SettledSec }),
		SettledCPUSec:          medReached(func(p Phase) float64 { return p.SettledCPUSec }),
		SettledBrokerCPUSec:    medReached(func(p Phase) float64 { return p.SettledBrokerCPUSec }),
		SettledCPUSecPerMSpans: medReached(func(p Phase) float64 { return p.SettledCPUSecPerMSpans }),
		SettledCPUSecPerMMsgs:  medReached(func(p Phase) float64 { return p.SettledCPUSecPerMMsgs }),
	}
	m.Fused = int64(med(func(p Phase) float64 { return float64(p.Fused) }))
	return m
}

func printTable(res *Result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Println()
	fmt.Printf("median of %d rounds (%s, keying=%s, %d partitions, %d messages, %.1f MB, %d spans):\n",
		res.Settings.Rounds, res.Settings.Encoding, res.Settings.Keying, res.Settings.Partitions,
		res.Workload.Messages, float64(res.Workload.Bytes)/1e6, res.Workload.Spans)
	fmt.Fprintln(w, "contender\tok runs\tseconds\tmsgs/s\tMB/s\tspans/s\tCPU-s\tCPU-s/M spans\tbroker CPU-s\tall read at s\t")
	row := func(name string, p Phase, runs []Phase) {
		read := "-"
		if p.ReadSec > 0 {
			read = fmt.Sprintf("%.2f", p.ReadSec)
		}
		ok := 0
		for _, r := range runs {
			if r.Error == "" {
				ok++
			}
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%.2f\t%.0f\t%.1f\t%.0f\t%.2f\t%.1f\t%.2f\t%s\t\n", name, ok, len(runs), p.Seconds, p.MsgsPS, p.MBPS, p.SpansPS, p.CPUSec, p.CPUSecPerMSpans, p.BrokerCPUSec, read)
	}
	row("raw copy", res.Median.Raw, res.Raw)
	row("braid (exactly-once)", res.Median.Braid, res.Braid)
	if res.Median.BraidNoAlerts != nil {
		row("braid, alerts off", *res.Median.BraidNoAlerts, res.BraidNoAlerts)
	}
	if res.Median.BraidSampling != nil {
		row("braid, sampling on", *res.Median.BraidSampling, res.BraidSampling)
	}
	if res.Median.BraidALO != nil {
		row("braid (at-least-once)", *res.Median.BraidALO, res.BraidALO)
	}
	w.Flush()
	fmt.Println("braid's second window, until every trace is fused and committed:")
	fmt.Fprintln(w, "contender\tseconds\tmsgs/s\tCPU-s\tCPU-s/M spans\tbroker CPU-s\t")
	row2 := func(name string, p Phase) {
		fmt.Fprintf(w, "%s\t%.2f\t%.0f\t%.2f\t%.1f\t%.2f\t\n", name, p.AllFusedSec, p.AllFusedMsgsPS, p.AllFusedCPUSec, p.AllFusedCPUSecPerMSpans, p.AllFusedBrokerCPUSec)
	}
	row2("braid (exactly-once)", res.Median.Braid)
	if res.Median.BraidNoAlerts != nil {
		row2("braid, alerts off", *res.Median.BraidNoAlerts)
	}
	if res.Median.BraidSampling != nil {
		row2("braid, sampling on", *res.Median.BraidSampling)
	}
	if res.Median.BraidALO != nil {
		row2("braid (at-least-once)", *res.Median.BraidALO)
	}
	w.Flush()
	fmt.Printf("braid's third window, until %d more checkpoints have committed:\n", res.Settings.Settle)
	fmt.Fprintln(w, "contender\tseconds\tCPU-s\tCPU-s/M msgs\tCPU-s/M spans\tbroker CPU-s\t")
	row3 := func(name string, p Phase) {
		fmt.Fprintf(w, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", name, p.SettledSec, p.SettledCPUSec, p.SettledCPUSecPerMMsgs, p.SettledCPUSecPerMSpans, p.SettledBrokerCPUSec)
	}
	row3("braid (exactly-once)", res.Median.Braid)
	if res.Median.BraidNoAlerts != nil {
		row3("braid, alerts off", *res.Median.BraidNoAlerts)
	}
	if res.Median.BraidSampling != nil {
		row3("braid, sampling on", *res.Median.BraidSampling)
	}
	if res.Median.BraidALO != nil {
		row3("braid (at-least-once)", *res.Median.BraidALO)
	}
	w.Flush()
	fmt.Printf("ratio braid/raw (msgs/s): %.2f×  (target ≥ 0.5×); every trace fused: %.2f×\n", res.Ratio, res.RatioAllFused)
	if res.Median.BraidALO != nil {
		fmt.Printf("ratio braid at-least-once/raw (msgs/s): %.2f×; every trace fused: %.2f×\n", res.RatioALO, res.RatioAllFusedALO)
	}
	if a := res.Alerts; a != nil {
		fmt.Printf("alerts on/off, CPU-s with the default rules, until %d checkpoints after every trace fused: %.3f×  (target ≤ 1.15×; per round %s)\n",
			res.Settings.Settle, a.SettledCPURatio, ratios(a.SettledPerRound))
		fmt.Printf("  CPU-s per million input messages: on %.2f, off %.2f; per million spans: on %.2f, off %.2f\n",
			a.OnCPUSecPerMMsgs, a.OffCPUSecPerMMsgs, a.OnCPUSecPerMSpans, a.OffCPUSecPerMSpans)
		fmt.Printf("  window 1 (all read and committed): %.3f× (per round %s); window 2 (every trace fused): %.3f× (per round %s)\n",
			a.CPURatio, ratios(a.PerRound), a.AllFusedCPURatio, ratios(a.AllFusedPerRound))
	}
	if sc := res.Sampling; sc != nil {
		fmt.Printf("sampling on/off (braid-sampling over braid), CPU-s until every trace fused and committed: %.3f×  (target ≤ 1.2×; per round %s)\n",
			sc.AllFusedCPURatio, ratios(sc.AllFusedPerRound))
		fmt.Printf("  CPU-s per million input messages: on %.2f, off %.2f; per million spans: on %.2f, off %.2f\n",
			sc.OnCPUSecPerMMsgs, sc.OffCPUSecPerMMsgs, sc.OnCPUSecPerMSpans, sc.OffCPUSecPerMSpans)
		fmt.Printf("  window 1: %.3f× (per round %s); window 3 (%d checkpoints more): %.3f× (per round %s)\n",
			sc.CPURatio, ratios(sc.PerRound), res.Settings.Settle, sc.SettledCPURatio, ratios(sc.SettledPerRound))
		for _, p := range res.BraidSampling {
			if p.Sampling != nil {
				fmt.Printf("  round %d%s\n", p.Round, samplingLine(p.Sampling))
			}
		}
	}
	fmt.Printf("load average at start %s, at end %s (%d CPUs)\n", res.Machine.LoadAvgStart, res.Machine.LoadAvgEnd, res.Machine.CPUs)
}

func ratios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, ", ")
}
