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
//     the job's /metrics registry has them;
//   - otelcol-groupbytrace (-collector, on when the Collector of
//     deploy/local/otelcol.sh is built): the OpenTelemetry Collector as a
//     subprocess, the nearest thing to braid's span grouping that one can
//     deploy off the shelf: its Kafka receiver reads the spans topic (only:
//     it does not correlate logs and metrics) from the earliest offset with
//     a fresh group, the groupbytrace processor holds each trace for
//     braid's idle gap (wait_duration, in processing time) and its Kafka
//     exporter writes each trace keyed by its trace id
//     (partition_traces_by_id: one record per trace, two for a trace that
//     came in two input records, see CollectorRun) to an output topic of
//     the round, in the input's encoding; from its start until that topic
//     holds every span and every trace id of the workload (read back and
//     decoded by this process), its CPU time read from /proc. Its msgs/s
//     and MB/s are of the spans topic, all it reads.
//     Result.RatioCPUToCollector is braid's CPU-s per million spans (until
//     every trace is fused and committed) over the Collector's.
//
// A run of braid or the Collector that fails or times out is recorded with
// its error and left out of the median. The program prints a table and
// writes the result as JSON to benchmarks/results/e2e-<encoding>-<keying>.json.
// `make bench-e2e` runs it against a local broker; BRAID_KAFKA_BROKERS names
// the broker.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
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
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/fuse"
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
	held        bool
	runOn       bool
	alertsOff   bool
	eventTime   string
	profileOff  string
	sampling    bool
	profileHeld string
	profileSamp string
	settle      int
	budget      int64
	alignment   time.Duration
	collector   string // -collector: the otelcol binary, "" to look it up, "off"
	signals     string // -signals: all, or traces (the spans topic alone)
	colCodec    string // -collector-compression: the Collector exporter's codec

	completeTimeout time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.requests, "requests", 150000, "requests (traces) to generate; 8 per Collector batch")
	flag.StringVar(&o.encoding, "encoding", "proto", "payload encoding: proto|json (otlp_proto|otlp_json)")
	flag.StringVar(&o.keying, "keying", "trace", "record keys: trace (partition_traces_by_id) | none (exporter default, null keys)")
	p := flag.Int("partitions", 4, "partitions of every topic")
	flag.Int64Var(&o.seed, "seed", 1, "simulator seed")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds; each runs raw, then the braid contenders, then the Collector (-collector)")
	flag.DurationVar(&o.checkpoint, "checkpoint", 5*time.Second, "braid checkpoint interval")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit of one phase")
	flag.StringVar(&o.resultsDir, "results", filepath.Join("benchmarks", "results"), "directory of the JSON result; empty: do not write one")
	flag.DurationVar(&o.completeTimeout, "complete-timeout", 2*time.Minute, "limit of braid's second window (every trace fused and committed) after the first")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of braid's run of the last round (both windows) to this file")
	flag.IntVar(&o.brokerPID, "broker-pid", 0, "pid of a local broker whose CPU time to report (default: read from $BRAID_KAFKA_DIR/broker.pid, /tmp/braid-kafka)")
	flag.BoolVar(&o.keepTopics, "keep-topics", false, "do not delete the topics at the end")
	flag.StringVar(&o.description, "note", "", "free text stored in the result")
	flag.BoolVar(&o.alo, "at-least-once", true, "also run braid with exactly-once off (engine AtLeastOnce: no transactions) in each round")
	flag.BoolVar(&o.runOn, "run-on", true, "run the braid contenders with tasks running on past a checkpoint's barrier (checkpoint_run_on, braid's default); false: held to the end of its transaction")
	flag.BoolVar(&o.held, "held", false, "also run braid with tasks held from a checkpoint's barrier to the end of its transaction in each round: the comparison with running on")
	flag.BoolVar(&o.alertsOff, "alerts-off", true, "also run braid with the alerts stage off (alerts.disabled) in each round: the cost of the default rules")
	flag.DurationVar(&o.alignment, "alignment", 0, "braid's event_time.alignment (0: the job's default, 1m; negative: off)")
	flag.Int64Var(&o.budget, "memory-budget", 0, "braid's state.memory_budget, bytes (0: the job's default, 512 MiB); a backlog of more than ~150,000 requests read within one checkpoint interval needs more")
	flag.IntVar(&o.settle, "settle", 3, "braid's third window: this many more checkpoints after the second (the alerts stage evaluates the last partial aggregates)")
	flag.StringVar(&o.profileOff, "cpuprofile-alerts-off", "", "write a CPU profile of braid-noalerts' run of the last round to this file")
	flag.BoolVar(&o.sampling, "sampling", true, "also run braid with the sampling stage on (sampling.enabled, default policy) in each round: the cost of sampling")
	flag.StringVar(&o.profileSamp, "cpuprofile-sampling", "", "write a CPU profile of braid-sampling's run of the last round to this file")
	flag.StringVar(&o.profileHeld, "cpuprofile-held", "", "write a CPU profile of braid-held's run of the last round to this file")
	flag.StringVar(&o.eventTime, "event-time", "short", "braid's event-time settings: short (out-of-orderness 1s, idle gap 1s, allowed lateness 30s, flush after 2s, idleness 30s) | default (the job's defaults)")
	flag.StringVar(&o.collector, "collector", "", "the OpenTelemetry Collector (otelcol) binary of the otelcol-groupbytrace contender, which needs the kafka receiver, the groupbytrace processor and the kafka exporter (default: deploy/local/otelcol.sh's build if there is one; off: no Collector contender)")
	flag.StringVar(&o.signals, "signals", "all", "what the workload holds: all (each request's spans, logs and metric points on three topics) | traces (its spans alone, the input the Collector contender reads in either case; braid runs with its logs and metrics inputs disabled, the raw copy finds those topics empty)")
	flag.StringVar(&o.colCodec, "collector-compression", "snappy", "the Collector's Kafka exporter compression: snappy (as braid's and the raw copy's producers, franz-go's default) | none (the exporter's default) | lz4 | zstd | gzip")
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
	if !slices.Contains([]string{"snappy", "none", "lz4", "zstd", "gzip"}, o.colCodec) {
		errs = append(errs, fmt.Errorf("-collector-compression %q: want snappy, none, lz4, zstd or gzip", o.colCodec))
	}
	if o.signals != "all" && o.signals != "traces" {
		errs = append(errs, fmt.Errorf("-signals %q: want all or traces", o.signals))
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
	// BraidHeld is braid with tasks held at checkpoints (-held).
	BraidHeld []Phase `json:"braid_held,omitempty"`
	// BraidNoAlerts is braid (exactly-once) with the alerts stage off
	// (-alerts-off).
	BraidNoAlerts []Phase `json:"braid_alerts_off,omitempty"`
	// BraidSampling is braid (exactly-once) with the sampling stage on
	// (-sampling).
	BraidSampling []Phase `json:"braid_sampling,omitempty"`
	// Collector is the OpenTelemetry Collector with the groupbytrace
	// processor (-collector).
	Collector []Phase `json:"collector,omitempty"`
	Median    struct {
		Raw           Phase  `json:"raw"`
		Braid         Phase  `json:"braid"`
		BraidALO      *Phase `json:"braid_at_least_once,omitempty"`
		BraidNoAlerts *Phase `json:"braid_alerts_off,omitempty"`
		BraidSampling *Phase `json:"braid_sampling,omitempty"`
		Collector     *Phase `json:"collector,omitempty"`
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
	// RatioCPUToCollector is the median CPU-s per million spans of braid
	// (exactly-once) until every trace is fused and committed (window 2,
	// the Collector's window: every trace written) over the Collector's (0:
	// no Collector run, or braid's window 2 not reached);
	// RatioCPUToCollectorRead the same with braid's window 1.
	RatioCPUToCollector     float64 `json:"ratio_cpu_to_collector,omitempty"`
	RatioCPUToCollectorRead float64 `json:"ratio_cpu_to_collector_read,omitempty"`
	Profile                 string  `json:"profile,omitempty"`
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
	Alignment          string `json:"alignment,omitempty"`
	Signals            string `json:"signals"` // -signals: all, or traces (the spans topic alone)
	// Collector is the otelcol binary of the Collector contender ("": no
	// Collector contender), CollectorWait its groupbytrace wait_duration.
	Collector     string `json:"collector,omitempty"`
	CollectorWait string `json:"collector_wait_duration,omitempty"`
	// CollectorCompression is its Kafka exporter's codec.
	CollectorCompression string `json:"collector_compression,omitempty"`
}

type Workload struct {
	Messages       int     `json:"messages"`
	Bytes          int64   `json:"bytes"`
	SpanMessages   int     `json:"span_messages"`
	SpanBytes      int64   `json:"span_bytes"` // keys and values of the span messages
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
	// CPUSec is the CPU time (user+system) of this process in the phase
	// (of the Collector's process for the Collector), BrokerCPUSec the
	// broker's (when its pid is known).
	CPUSec       float64 `json:"cpu_s"`
	BrokerCPUSec float64 `json:"broker_cpu_s,omitempty"`
	// Error says why a run failed (it is left out of the median).
	Error string `json:"error,omitempty"`
	// CPUSecPerMSpans is CPUSec per million spans of the workload,
	// CPUSecPerMMsgs per million input messages.
	CPUSecPerMSpans float64 `json:"cpu_s_per_million_spans"`
	CPUSecPerMMsgs  float64 `json:"cpu_s_per_million_messages"`

	// braid only.
	ReadSec    float64 `json:"read_s,omitempty"` // until every message was read
	PrepareSec float64 `json:"prepare_s,omitempty"`
	Fused      int64   `json:"fused,omitempty"` // FusedTrace records emitted by the end
	Revisions  int64   `json:"revisions"`       // of which revision > 0
	Late       int64   `json:"late"`
	OpenTraces int64   `json:"open_traces,omitempty"`
	// Spills: times fuse wrote pending members to state before a
	// checkpoint (its open-traces share was full); Evicted: open traces
	// it then emitted early and dropped from memory.
	Spills  int64 `json:"spills,omitempty"`
	Evicted int64 `json:"evicted,omitempty"`
	// ChunkReads: chunks fuse read back from state to emit a trace (its
	// members had left memory after a checkpoint or spill wrote them).
	ChunkReads int64 `json:"chunk_reads,omitempty"`
	// AlignmentPauses: source partitions paused for event_time.alignment.
	AlignmentPauses int64 `json:"alignment_pauses,omitempty"`
	// Exchange: internal-topic records and markers taken from the local
	// exchange, their Kafka copies skipped, and those it left to Kafka.
	Exchanged     int64   `json:"exchanged,omitempty"`
	ExchangeSkips int64   `json:"exchange_skipped,omitempty"`
	ExchangeGaps  int64   `json:"exchange_left,omitempty"`
	Members       int64   `json:"members,omitempty"`
	Local         int64   `json:"local_groups,omitempty"`
	Repartition   int64   `json:"repartitioned_groups,omitempty"`
	RecordsOut    int64   `json:"records_out,omitempty"`
	Checkpoints   int64   `json:"checkpoints,omitempty"`
	Aborts        int64   `json:"aborts,omitempty"`
	LastCommitMS  float64 `json:"last_commit_ms,omitempty"`
	StopSec       float64 `json:"stop_s,omitempty"` // final checkpoint and close, after the measurement
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

	// Collector only: what it wrote and how the run went.
	Otelcol *CollectorRun `json:"otelcol,omitempty"`

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
		EventTime: o.eventTime, AtLeastOnce: o.alo, AlertsOff: o.alertsOff, Sampling: o.sampling, Settle: o.settle, MemoryBudget: o.budget, Signals: o.signals}
	if o.alignment != 0 {
		res.Settings.Alignment = o.alignment.String()
	}
	if o.brokerPID == 0 {
		o.brokerPID = machine.BrokerPID()
	}
	collector, why, err := collectorBin(o.collector)
	if err != nil {
		return err
	}
	if collector == "" {
		fmt.Printf("no otelcol-groupbytrace contender: %s\n", why)
	} else {
		res.Settings.Collector, res.Settings.CollectorWait = collector, idleGap(o).String()
		res.Settings.CollectorCompression = o.colCodec
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
		kinds = append(kinds, braidALO, braidHeld)
		for _, k := range kinds {
			if k == braidALO && !o.alo || k == braidHeld && !o.held || k == braidNoAlerts && !o.alertsOff || k == braidSampling && !o.sampling {
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
				case braidHeld:
					profile = o.profileHeld
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
			case braidHeld:
				res.BraidHeld = append(res.BraidHeld, ph)
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
			fmt.Printf("round %d %-14s %6.2fs %8.0f msgs/s %6.1f MB/s  cpu %5.2fs%s  (read all in %.2fs, %d fused of which %d revisions, %d checkpoints, %d aborts, %d spills, %d evicted, %d chunk reads, %d alignment pauses, exchange %d/%d/%d taken/skipped/left); all fused+committed %.2fs %.0f msgs/s cpu %.2fs%s\n",
				r, name, ph.Seconds, ph.MsgsPS, ph.MBPS, ph.CPUSec, brokerCPU(ph), ph.ReadSec, ph.Fused, ph.Revisions, ph.Checkpoints, ph.Aborts, ph.Spills, ph.Evicted, ph.ChunkReads, ph.AlignmentPauses,
				ph.Exchanged, ph.ExchangeSkips, ph.ExchangeGaps, ph.AllFusedSec, ph.AllFusedMsgsPS, ph.AllFusedCPUSec, alertsLine(ph.Alerts)+samplingLine(ph.Sampling))
		}
		if collector != "" {
			group := fmt.Sprintf("%s.otelcol-%d", run, r)
			if err := newTopics(group + ".out"); err != nil {
				return err
			}
			ph, err := collectorRun(ctx, o, collector, topics.Spans, group+".out", group, wl)
			if err != nil && ph.Error == "" {
				return fmt.Errorf("round %d %s: %w", r, collectorName, err)
			}
			ph.Round = r
			res.Collector = append(res.Collector, ph)
			if !o.keepTopics {
				deleteTopics(adm, group+".")
			}
			if ph.Error != "" {
				fmt.Printf("round %d %-14s FAILED after %.2fs, cpu %5.2fs%s: %s\n", r, collectorName, ph.Seconds, ph.CPUSec, brokerCPU(ph), ph.Error)
			} else {
				fmt.Printf("round %d %-14s %6.2fs %8.0f msgs/s %6.1f MB/s  cpu %5.2fs%s  (%s)\n",
					r, collectorName, ph.Seconds, ph.MsgsPS, ph.MBPS, ph.CPUSec, brokerCPU(ph), ph.Otelcol)
			}
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
	if len(res.Collector) > 0 {
		m := median(res.Collector)
		res.Median.Collector = &m
		if m.CPUSecPerMSpans > 0 {
			res.RatioCPUToCollector = res.Median.Braid.AllFusedCPUSecPerMSpans / m.CPUSecPerMSpans
			res.RatioCPUToCollectorRead = res.Median.Braid.CPUSecPerMSpans / m.CPUSecPerMSpans
		}
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
	braidHeld                      // exactly-once, tasks held at checkpoints
)

func (k contender) String() string {
	switch k {
	case braidALO:
		return "braid-alo"
	case braidNoAlerts:
		return "braid-noalerts"
	case braidSampling:
		return "braid-sampling"
	case braidHeld:
		return "braid-held"
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
	if o.signals == "traces" {
		msgs = slices.DeleteFunc(msgs, func(m simulator.Message) bool { return m.Topic != topics.Spans })
		w.Messages, w.LogMessages, w.MetricMessages = len(msgs), 0, 0
		w.Logs, w.TraceLogs, w.Points, w.ExemplarPoints = 0, 0, 0, 0
	}
	for _, m := range msgs {
		w.Bytes += int64(len(m.Key) + len(m.Value))
		if m.Topic == topics.Spans {
			w.SpanBytes += int64(len(m.Key) + len(m.Value))
		}
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
		kgo.ConsumeTopics(in.Spans, in.Logs, in.Metrics), // empty but for spans under -signals traces
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
	cfg.EventTime.Alignment = o.alignment
	cfg.Inputs.Spans = job.InputConfig{Topic: in.Spans, Encoding: enc}
	cfg.Inputs.Logs = job.InputConfig{Topic: in.Logs, Encoding: enc}
	cfg.Inputs.Metrics = job.InputConfig{Topic: in.Metrics, Encoding: enc}
	if o.signals == "traces" {
		cfg.Inputs.Logs.Disabled, cfg.Inputs.Metrics.Disabled = true, true
	}
	cfg.Outputs.Fused, cfg.Outputs.Late, cfg.Outputs.DLQ = group+".fused", group+".late", group+".dlq"
	cfg.Outputs.Pollution, cfg.Outputs.Incidents, cfg.Outputs.Alerts = group+".pollution", group+".incidents", group+".alerts"
	cfg.CheckpointInterval = o.checkpoint
	cfg.AtLeastOnce = kind == braidALO
	runOn := o.runOn && kind != braidHeld
	cfg.CheckpointRunOn = &runOn
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
		cfg.EventTime.IdleGap = shortIdleGap
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

	// The runtime as `braid run` sets it (GOGC), for braid's runs only:
	// the contenders run with Go's defaults. Not the memory limit: this
	// process holds more than the job (its workload, the contenders).
	defer job.TuneRuntime(0)()

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
		ph.Spills, ph.Evicted, ph.ChunkReads = c.Spills.Load(), c.Evicted.Load(), c.ChunkReads.Load()
		ph.AlignmentPauses = st.AlignmentPauses.Load()
		ph.Exchanged, ph.ExchangeSkips, ph.ExchangeGaps = st.ExchangeRecords.Load(), st.ExchangeSkipped.Load(), st.ExchangeGaps.Load()
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
	if res.Median.Collector != nil {
		row(collectorName, *res.Median.Collector, res.Collector)
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
	if res.Median.Collector != nil {
		// Its one window ends when every trace has been written: the
		// counterpart of braid's second.
		c := *res.Median.Collector
		c.AllFusedSec, c.AllFusedMsgsPS, c.AllFusedCPUSec, c.AllFusedCPUSecPerMSpans, c.AllFusedBrokerCPUSec = c.Seconds, c.MsgsPS, c.CPUSec, c.CPUSecPerMSpans, c.BrokerCPUSec
		row2(collectorName, c)
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
	if c := res.Median.Collector; c != nil && c.CPUSecPerMSpans == 0 {
		fmt.Println("ratio braid/Collector (CPU-s per million spans): none, no Collector run succeeded")
	} else if c != nil {
		fmt.Printf("ratio braid/Collector (CPU-s per million spans), every trace fused and committed: %.2f× (%.2f over %.2f); all read and committed: %.2f×\n",
			res.RatioCPUToCollector, res.Median.Braid.AllFusedCPUSecPerMSpans, c.CPUSecPerMSpans, res.RatioCPUToCollectorRead)
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

// The Collector contender: the OpenTelemetry Collector with the
// groupbytrace processor, run as a subprocess.

const (
	collectorName = "otelcol-groupbytrace"
	// shortIdleGap is braid's idle gap with -event-time short.
	shortIdleGap = time.Second
	// collectorStopTimeout is how long the Collector has to exit after
	// SIGTERM before it gets SIGKILL.
	collectorStopTimeout = 15 * time.Second
	// collectorReadyLine is what the Collector logs once every component
	// has started (its Kafka consumer joins the group after that).
	collectorReadyLine = "Everything is ready"
)

// idleGap is braid's idle gap in this benchmark: shortIdleGap with
// -event-time short, else the fuse stage's default (the job sets none).
// The Collector's groupbytrace processor waits as long for each trace,
// though in processing time where braid's gap is in event time.
func idleGap(o options) time.Duration {
	if o.eventTime == "short" {
		return shortIdleGap
	}
	var fc fuse.Config
	fc.EnsureDefaults()
	return fc.IdleGap
}

// collectorBin resolves -collector: the Collector binary to run, or "" and
// why there is none. A path given that is not an executable is an error; a
// Collector that deploy/local/otelcol.sh has not built only leaves the
// contender out.
func collectorBin(flagVal string) (bin, why string, err error) {
	switch flagVal {
	case "off":
		return "", "-collector=off", nil
	case "":
	default:
		fi, err := os.Stat(flagVal)
		if err != nil {
			return "", "", fmt.Errorf("-collector: %w", err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("-collector %s: not an executable", flagVal)
		}
		return flagVal, "", nil
	}
	script, err := otelcolScript()
	if err != nil {
		return "", fmt.Sprintf("%v (give -collector PATH)", err), nil
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script, "path")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return "", "the Collector is not built (bash deploy/local/otelcol.sh build: minutes the first time; or -collector PATH)", nil
		}
		return "", fmt.Sprintf("bash %s path: %v: %s", script, err, strings.TrimSpace(stderr.String())), nil
	}
	bin = strings.TrimSpace(string(out))
	if bin == "" {
		return "", fmt.Sprintf("bash %s path printed nothing", script), nil
	}
	return bin, "", nil
}

// otelcolScript is deploy/local/otelcol.sh of the module whose root is at
// or above the working directory.
func otelcolScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "deploy", "local", "otelcol.sh")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("no deploy/local/otelcol.sh in the module root %s", dir)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory, so no deploy/local/otelcol.sh")
		}
		dir = parent
	}
}

// otelcolSettings are what the Collector's config for one run depends on.
type otelcolSettings struct {
	Brokers  []string
	Group    string        // consumer group of its Kafka receiver
	In, Out  string        // the spans topic it reads, the topic it writes
	Encoding string        // otlp_proto or otlp_json, read and written
	Codec    string        // the exporter's compression
	Wait     time.Duration // groupbytrace wait_duration
	// Traces is how many traces it may hold at once (groupbytrace
	// num_traces) and how many requests its exporter may queue.
	Traces int
}

// otelcolConfig is the Collector's config: Kafka receiver, groupbytrace,
// Kafka exporter, no port opened.
//
// The exporter's queue holds every trace and blocks when full instead of
// refusing: groupbytrace hands each released trace to the exporter alone,
// from a goroutine of its own, and only logs what the exporter refuses
// ("consume failed"), so with the default queue (1,000 requests, refusing
// more) a backlog's traces, all released within a few wait durations, could
// be lost. Its batches are compressed with s.Codec (the benchmark's
// default: snappy, as braid's and the raw copy's are, franz-go's default;
// the exporter's own default is none). The exporter's other settings are
// its defaults (acks from the leader, a 10 ms linger).
func otelcolConfig(s otelcolSettings) string {
	q := func(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
	brokers := make([]string, len(s.Brokers))
	for i, b := range s.Brokers {
		brokers[i] = q(b)
	}
	bl := strings.Join(brokers, ", ")
	return fmt.Sprintf(`# Generated by benchmarks/e2e: the %s contender.
receivers:
  kafka:
    brokers: [%s]
    client_id: braid-bench-otelcol
    group_id: %s
    initial_offset: earliest
    traces:
      topics: [%s]
      encoding: %s
processors:
  groupbytrace:
    wait_duration: %s
    num_traces: %d
    num_workers: 1
exporters:
  kafka:
    brokers: [%s]
    client_id: braid-bench-otelcol
    traces:
      topic: %s
      encoding: %s
    partition_traces_by_id: true
    producer:
      compression: %s
    sending_queue:
      queue_size: %d
      block_on_overflow: true
service:
  telemetry:
    logs:
      level: info
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [kafka]
      processors: [groupbytrace]
      exporters: [kafka]
`, collectorName, bl, q(s.Group), q(s.In), s.Encoding, s.Wait, s.Traces, bl, q(s.Out), s.Encoding, s.Codec, s.Traces)
}

// CollectorRun is what the Collector wrote in a run (read back from its
// output topic) and what its log said.
type CollectorRun struct {
	// ReadySec is from its start until its log said "Everything is ready"
	// (inside the measured time, as its consumer's group join is).
	ReadySec float64 `json:"ready_s,omitempty"`
	Messages int64   `json:"messages"` // records it wrote
	Traces   int     `json:"traces"`   // distinct trace ids in them
	Spans    int64   `json:"spans"`
	// SplitTraces are the traces whose spans came in more than one record.
	// groupbytrace releases a trace as the resource spans it received, one
	// per input record, and partition_traces_by_id splits what it exports
	// by resource, scope and trace id (pkg/batchpersignal), so a trace that
	// came in two records (the workload's split traces) leaves in two
	// records with its key, written together. ReleasedAgain are those of
	// them whose records were written more than half of wait_duration
	// apart: released twice, a part having come after the first release.
	SplitTraces   int   `json:"split_traces"`
	ReleasedAgain int   `json:"released_again"`
	Undecodable   int64 `json:"undecodable,omitempty"`
	// WatcherCPUSec is this process's CPU time in the run, reading and
	// decoding the output topic: not the Collector's, not in CPUSec.
	WatcherCPUSec float64 `json:"watcher_cpu_s"`
	// LogErrors and LogWarnings count the lines of level error and warn in
	// its log until the end of the measurement (dropped data shows there);
	// FirstError is the first error line.
	LogErrors   int     `json:"log_errors"`
	LogWarnings int     `json:"log_warnings"`
	FirstError  string  `json:"first_error,omitempty"`
	StopSec     float64 `json:"stop_s,omitempty"` // from SIGTERM until it exited
	StopError   string  `json:"stop_error,omitempty"`
}

func (r *CollectorRun) String() string {
	s := fmt.Sprintf("ready in %.2fs; wrote %d records, %d traces (%d in several records, %d of them released again), %d spans; %d errors, %d warnings in its log",
		r.ReadySec, r.Messages, r.Traces, r.SplitTraces, r.ReleasedAgain, r.Spans, r.LogErrors, r.LogWarnings)
	if r.Undecodable > 0 {
		s += fmt.Sprintf("; %d undecodable records", r.Undecodable)
	}
	if r.FirstError != "" {
		s += "; first error: " + r.FirstError
	}
	return s
}

// traceCount counts what the Collector wrote, decoding every record (its
// key would do with partition_traces_by_id, but the spans are counted
// too): spans, and the records each trace id came in.
type traceCount struct {
	dec      *otlp.Decoder
	enc      otlp.Encoding
	again    time.Duration // records of a trace further apart: released again
	perTrace map[[16]byte]traceRecords
	ids      [][16]byte // of the record being counted
	messages int64
	spans    int64
	bad      int64 // records that do not decode
}

// traceRecords are the records a trace id came in: how many, and the
// first and last of their timestamps (the producer's), in ms.
type traceRecords struct {
	n           int32
	first, last int64
}

// newTraceCount counts records of encoding enc; records of one trace more
// than again apart count as released again.
func newTraceCount(enc otlp.Encoding, traces int, again time.Duration) *traceCount {
	return &traceCount{dec: otlp.NewDecoder(), enc: enc, again: again, perTrace: make(map[[16]byte]traceRecords, traces)}
}

// add counts a record's value, written at ts.
func (c *traceCount) add(value []byte, ts time.Time) {
	c.messages++
	items, err := c.dec.Decode(otlp.SignalSpans, c.enc, value)
	if err != nil {
		c.bad++
		return
	}
	c.ids = c.ids[:0]
	for i := range items {
		c.spans++
		if !slices.Contains(c.ids, items[i].TraceID) {
			c.ids = append(c.ids, items[i].TraceID)
		}
	}
	ms := ts.UnixMilli()
	for _, id := range c.ids {
		t, ok := c.perTrace[id]
		if !ok {
			t.first, t.last = ms, ms
		}
		t.n++
		t.first, t.last = min(t.first, ms), max(t.last, ms)
		c.perTrace[id] = t
	}
}

// complete says whether every trace and every span of the workload has
// been written.
func (c *traceCount) complete(wl Workload) bool {
	return len(c.perTrace) >= wl.Traces && c.spans >= int64(wl.Spans)
}

func (c *traceCount) fill(r *CollectorRun) {
	r.Messages, r.Traces, r.Spans, r.Undecodable = c.messages, len(c.perTrace), c.spans, c.bad
	r.SplitTraces, r.ReleasedAgain = 0, 0
	for _, t := range c.perTrace {
		if t.n > 1 {
			r.SplitTraces++
			if time.Duration(t.last-t.first)*time.Millisecond > c.again {
				r.ReleasedAgain++
			}
		}
	}
}

// asCollector makes ph, measured by a meter, the Collector's: its CPU time
// instead of this process's, and the rates of the spans topic, which is
// all it reads.
func asCollector(ph *Phase, cpu time.Duration, wl Workload) {
	ph.CPUSec = cpu.Seconds()
	ph.CPUSecPerMSpans = ph.CPUSec / float64(wl.Spans) * 1e6
	ph.CPUSecPerMMsgs = ph.CPUSec / float64(wl.SpanMessages) * 1e6
	if ph.Seconds > 0 {
		ph.MsgsPS = float64(wl.SpanMessages) / ph.Seconds
		ph.MBPS = float64(wl.SpanBytes) / ph.Seconds / 1e6
		ph.SpansPS = float64(wl.Spans) / ph.Seconds
	}
}

// scanLog counts the error and warn lines of the Collector's log (zap's
// console format: time, tab, level, tab, ...) in its first size bytes.
func scanLog(path string, size int64, r *CollectorRun) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if int64(len(b)) > size {
		b = b[:size]
	}
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, "\terror\t"):
			r.LogErrors++
			if r.FirstError == "" {
				r.FirstError = l
				if len(r.FirstError) > 400 {
					r.FirstError = r.FirstError[:400] + "…"
				}
			}
		case strings.Contains(l, "\twarn\t"):
			r.LogWarnings++
		}
	}
}

// collectorRun runs the Collector, with a fresh group, on the spans topic
// in until out holds every span and every trace id of the workload; then
// stops it (SIGTERM, SIGKILL after collectorStopTimeout). A run that fails
// returns its phase with Error set (recorded, not fatal); the config and
// log of a failed run stay in a temporary directory that the error names.
func collectorRun(ctx context.Context, o options, bin, in, out, group string, wl Workload) (Phase, error) {
	enc := otlp.EncodingProto
	if o.encoding == "json" {
		enc = otlp.EncodingJSON
	}
	dir, err := os.MkdirTemp("", "braid-bench-otelcol-")
	if err != nil {
		ph := Phase{Error: fmt.Sprintf("a directory for the Collector's config: %v", err)}
		return ph, errors.New(ph.Error)
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	config, logPath := filepath.Join(dir, "otelcol.yaml"), filepath.Join(dir, "otelcol.log")
	s := otelcolSettings{Brokers: o.brokers, Group: group, In: in, Out: out, Encoding: enc.String(), Codec: o.colCodec, Wait: idleGap(o),
		Traces: max(2*wl.Traces, 10000)}
	count := newTraceCount(enc, wl.Traces, s.Wait/2)
	run := &CollectorRun{}
	failed := func(ph Phase, err error) (Phase, error) {
		keep = true
		count.fill(run)
		ph.Otelcol = run
		ph.MsgsPS, ph.MBPS, ph.SpansPS = 0, 0, 0
		ph.Error = fmt.Sprintf("%v (%d of %d traces, %d of %d spans written; config and log in %s)",
			err, run.Traces, wl.Traces, run.Spans, wl.Spans, dir)
		return ph, errors.New(ph.Error)
	}
	if err := os.WriteFile(config, []byte(otelcolConfig(s)), 0o644); err != nil {
		return failed(Phase{}, fmt.Errorf("write the Collector's config: %w", err))
	}
	if b, err := exec.CommandContext(ctx, bin, "validate", "--config=file:"+config).CombinedOutput(); err != nil {
		return failed(Phase{}, fmt.Errorf("%s validate rejects the generated config: %v: %s", bin, err, lastLines(b, 5)))
	}

	// The watcher reads out from its start, with no group.
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return failed(Phase{}, fmt.Errorf("a client to read %s: %w", out, err))
	}
	defer cl.Close()
	logf, err := os.Create(logPath)
	if err != nil {
		return failed(Phase{}, fmt.Errorf("the Collector's log: %w", err))
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config=file:"+config)
	cmd.Stdout, cmd.Stderr = logf, logf

	m := startMeter(o.brokerPID)
	if err := cmd.Start(); err != nil {
		return failed(m.stop(wl), fmt.Errorf("start the Collector: %w", err))
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	exited := make(chan struct{})
	go func() {
		waitErr := cmd.Wait()
		close(exited)
		why := "exit status 0"
		if waitErr != nil {
			why = waitErr.Error()
		}
		cancel(fmt.Errorf("the Collector exited before it was done (%s)", why))
	}()
	// cpu is the Collector's CPU time so far: from /proc while it runs,
	// from its rusage once it has exited.
	cpu := func() time.Duration {
		select {
		case <-exited:
			return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		default:
			return machine.ProcCPU(cmd.Process.Pid)
		}
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		t0 := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(collectorStopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			run.StopError = fmt.Sprintf("still running %v after SIGTERM: killed", collectorStopTimeout)
		}
		run.StopSec = time.Since(t0).Seconds()
	}
	defer stop()
	ready := make(chan time.Duration, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			if b, err := os.ReadFile(logPath); err == nil && bytes.Contains(b, []byte(collectorReadyLine)) {
				ready <- time.Since(m.start)
				return
			}
		}
	}()

	tctx, tcancel := context.WithTimeoutCause(wctx, o.timeout, fmt.Errorf("not done within %v", o.timeout))
	defer tcancel()
	// measured ends the measurement: wall, the Collector's CPU, the
	// watcher's, and how far its log had got.
	measured := func() Phase {
		c := cpu()
		ph := m.stop(wl)
		run.WatcherCPUSec = ph.CPUSec
		asCollector(&ph, c, wl)
		if fi, err := logf.Stat(); err == nil {
			scanLog(logPath, fi.Size(), run)
		}
		select {
		case d := <-ready:
			run.ReadySec = d.Seconds()
		default:
		}
		return ph
	}
	for !count.complete(wl) {
		fs := cl.PollFetches(tctx)
		if tctx.Err() != nil {
			ph := measured()
			stop()
			return failed(ph, context.Cause(tctx))
		}
		if err := fs.Err0(); err != nil {
			ph := measured()
			stop()
			return failed(ph, fmt.Errorf("read %s: %w", out, err))
		}
		fs.EachRecord(func(r *kgo.Record) { count.add(r.Value, r.Timestamp) })
	}
	ph := measured()
	stop()
	count.fill(run)
	ph.Otelcol = run
	return ph, nil
}

// lastLines is the last n lines of b, joined by " | ".
func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}
