// Command memory measures braid's resident memory against its
// state.memory_budget on a real Kafka broker (see benchmarks/README.md).
//
// Backlog mode (default): it produces at least -bytes of realistic fleet
// telemetry with KV-block events (connectors/simulator in realistic mode,
// KV events and faults on, -hosts hosts at -sim-rate requests a second of
// event time) into fresh input topics, then runs the braid binary (built
// from ./cmd/braid unless -braid names one) with `braid run --config` and
// state.memory_budget = -budget from the start of the backlog until its
// consumer group has committed the end of every input partition, sampling
// the process's VmHWM and VmRSS (/proc/PID/status) every -sample. It
// reports the peak resident memory against the budget plus -constant.
//
// Steady mode (-steady): braid runs from the start while the fleet is
// produced in real time (one Collector batch every 200 ms, -rate requests
// a second) for -duration; VmRSS is sampled every 10 s, and the mean of the
// first 10 minutes is compared with the mean of the last 10 (flat: within
// 10 %).
//
// The result is printed and written as JSON to
// benchmarks/results/memory-backlog.json or memory-steady.json.
// BRAID_KAFKA_BROKERS names the broker.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/benchmarks/internal/braidproc"
	"github.com/braidlabs/braid/benchmarks/internal/machine"
	"github.com/braidlabs/braid/connectors/simulator"
)

type options struct {
	brokers []string
	admin   string // braid's admin.addr: a free loopback port
	heapDir string // -heap-profiles
	cgo     bool   // -cgo

	warmupBacklog, warmup time.Duration
	bytes                 int64
	budget                int64
	constant              int64
	partitions            int32
	hosts                 int
	simRate               float64
	seed                  int64
	braid                 string
	sample                time.Duration
	timeout               time.Duration
	resultsDir            string
	keepTopics            bool
	checkpoint            time.Duration
	alignment             time.Duration
	verbose               bool
	note                  string

	workload string // -workload: fleet or spans

	steady   bool
	duration time.Duration
	rate     float64
	window   time.Duration
}

func main() {
	var o options
	var bytesFlag, budgetFlag, constFlag string
	flag.StringVar(&bytesFlag, "bytes", "2GiB", "backlog size to produce (record keys and values), e.g. 200MB, 2GiB")
	flag.StringVar(&budgetFlag, "budget", "1GiB", "braid's state.memory_budget")
	flag.StringVar(&constFlag, "constant", "256MiB", "resident memory allowed above the budget (the stated constant: runtime, binary, buffers outside the budget)")
	p := flag.Int("partitions", 4, "partitions of the input topics")
	flag.IntVar(&o.hosts, "hosts", 16, "simulated hosts (two GPUs, two inference servers each)")
	flag.Float64Var(&o.simRate, "sim-rate", 400, "backlog mode: requests a second of event time")
	flag.Int64Var(&o.seed, "seed", 1, "simulator seed")
	flag.StringVar(&o.braid, "braid", "", "braid binary to run (default: go build ./cmd/braid into a temporary directory)")
	flag.DurationVar(&o.sample, "sample", time.Second, "backlog mode: RSS sampling interval")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Hour, "limit of reading the backlog (or of the steady run beyond -duration)")
	flag.StringVar(&o.resultsDir, "results", filepath.Join("benchmarks", "results"), "directory of the JSON result; empty: do not write one")
	flag.BoolVar(&o.keepTopics, "keep-topics", false, "do not delete the topics at the end")
	flag.DurationVar(&o.checkpoint, "checkpoint", 0, "braid's checkpoint_interval (0: its default, 5s)")
	flag.DurationVar(&o.alignment, "alignment", 0, "braid's event_time.alignment (0: its default, 1m; negative: off)")
	flag.BoolVar(&o.verbose, "v", false, "pass braid's log through")
	flag.StringVar(&o.note, "note", "", "free text stored in the result")
	flag.BoolVar(&o.cgo, "cgo", false, "build braid with cgo (Pebble's block cache and memtables in C memory, outside Go's memory limit); default: without, as make build does")
	flag.StringVar(&o.heapDir, "heap-profiles", "", "backlog mode: directory to write braid's live-heap profile into every 30 s of reading (heap-NNNs.pb.gz, after a GC)")
	flag.StringVar(&o.workload, "workload", "fleet", "fleet: the realistic fleet with KV events and faults (-hosts, -sim-rate); "+
		"spans: the e2e benchmark's Collector-shaped vLLM traces (spans, logs and points of each request, keyed by trace id; no KV events)")
	flag.BoolVar(&o.steady, "steady", false, "steady mode: produce at -rate in real time for -duration while braid runs")
	flag.DurationVar(&o.duration, "duration", time.Hour, "steady mode: how long to produce")
	flag.Float64Var(&o.rate, "rate", 100, "steady mode: requests a second")
	flag.DurationVar(&o.warmupBacklog, "warmup-backlog", 35*time.Minute, "steady mode: event time produced as a backlog before braid starts, so that the state kept for a time-to-live (block_ttl 30m) is full when the measured run begins; 0: start empty")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Minute, "steady mode: time at the steady rate before the measured -duration (braid reads the backlog and catches up)")
	flag.DurationVar(&o.window, "window", 10*time.Minute, "steady mode: the first and last windows compared")
	brokers := flag.String("brokers", os.Getenv("BRAID_KAFKA_BROKERS"), "bootstrap brokers, comma separated (default $BRAID_KAFKA_BROKERS)")
	flag.Parse()
	if o.workload != "fleet" && o.workload != "spans" {
		fmt.Fprintf(os.Stderr, "memory: -workload %q: want fleet or spans\n", o.workload)
		os.Exit(2)
	}
	o.partitions = int32(*p)
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	var errs []error
	var err error
	if o.admin, err = freeAddr(); err != nil {
		errs = append(errs, err)
	}
	if o.bytes, err = parseBytes(bytesFlag); err != nil {
		errs = append(errs, fmt.Errorf("-bytes: %w", err))
	}
	if o.budget, err = parseBytes(budgetFlag); err != nil {
		errs = append(errs, fmt.Errorf("-budget: %w", err))
	}
	if o.constant, err = parseBytes(constFlag); err != nil {
		errs = append(errs, fmt.Errorf("-constant: %w", err))
	}
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("no broker: set BRAID_KAFKA_BROKERS or -brokers"))
	}
	if o.steady && o.duration < 2*o.window {
		errs = append(errs, fmt.Errorf("-duration %v is under two -window %v", o.duration, o.window))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

// parseBytes reads 123, 200MB, 1.5GB (powers of 1000) or 256MiB, 2GiB
// (powers of 1024).
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || f < 0 {
				return 0, fmt.Errorf("%q is not a size", s)
			}
			return int64(f * u.mult), nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n, nil
}

// Result is the JSON written to benchmarks/results.
type Result struct {
	Benchmark string    `json:"benchmark"`
	Mode      string    `json:"mode"`
	Time      time.Time `json:"time"`
	Note      string    `json:"note,omitempty"`
	Command   string    `json:"command"`
	Cgo       bool      `json:"cgo"` // braid built with cgo (-cgo)
	Machine   Machine   `json:"machine"`

	BudgetBytes   int64 `json:"memory_budget_bytes"`
	ConstantBytes int64 `json:"constant_bytes"`

	Workload Workload `json:"workload"`

	// Backlog mode: InputReadSec until the input topics are committed to
	// their end, ReadSec until the internal topics are too.
	InputReadSec float64 `json:"input_read_s,omitempty"`
	// KVDrainSec: after ReadSec, until no KV event was held any more
	// (the incidents complete); -1 when some still were after 2 minutes.
	KVDrainSec float64 `json:"kv_drain_s,omitempty"`
	// SettleSec: after ReadSec, until that and the output counters stood
	// still for two checkpoint intervals (at least 10 s), the end of the
	// run.
	SettleSec float64 `json:"settle_s,omitempty"`
	// KV: backlog mode, the incidents against the realised faults.
	KV      KVScore `json:"kv_score"`
	ReadSec float64 `json:"read_s,omitempty"`
	// ReadCPUSec and SettledCPUSec: braid's CPU time (user and system,
	// /proc/PID/stat) until ReadSec and until the output settled.
	ReadCPUSec     float64 `json:"read_cpu_s,omitempty"`
	SettledCPUSec  float64 `json:"settled_cpu_s,omitempty"`
	ReadMBps       float64 `json:"read_mb_per_s,omitempty"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`         // VmHWM at the end
	PeakOverBudget int64   `json:"peak_over_budget_bytes"` // PeakRSSBytes - BudgetBytes
	WithinBudget   bool    `json:"within_budget_plus_constant"`
	// Counters: braid's counters (endCounters, summed over tasks) once
	// the backlog is read: fused records and of them revisions, late
	// and dead-lettered members, KV events, incidents.
	Counters map[string]float64 `json:"counters,omitempty"`

	// Steady mode.
	FirstWindowMeanRSS int64   `json:"first_window_mean_rss_bytes,omitempty"`
	LastWindowMeanRSS  int64   `json:"last_window_mean_rss_bytes,omitempty"`
	LastOverFirst      float64 `json:"last_over_first,omitempty"`
	Flat               bool    `json:"flat_within_10pct"`

	// Steady mode's warm-up: event time produced as a backlog before braid
	// started (and its bytes), then WarmupRSS, VmRSS samples at SampleSec
	// intervals from braid's start until the measured run began.
	WarmupBacklogSec float64 `json:"warmup_backlog_s,omitempty"`
	WarmupBytes      int64   `json:"warmup_bytes,omitempty"`
	WarmupRSS        []int64 `json:"warmup_rss_bytes,omitempty"`
	// Samples of VmRSS (bytes) at SampleSec intervals: from braid's start
	// (backlog mode), over the measured run (steady mode).
	SampleSec float64 `json:"sample_s"`
	RSS       []int64 `json:"rss_bytes"`
	// At the same instants, what braid's admin endpoint says holds the
	// memory — braid_memory_bytes by share, the Go heap in use
	// and the Go runtime's total (go_memstats_sys_bytes) — so growth can
	// be traced to a share.
	Shares map[string][]int64 `json:"shares,omitempty"`
	// BraidExit is how braid ended ("" for a clean stop after SIGTERM).
	BraidExit string `json:"braid_exit,omitempty"`
}

type Workload struct {
	Name           string  `json:"name"` // -workload
	Hosts          int     `json:"hosts"`
	RequestsPerSec float64 `json:"requests_per_s"`
	KVEvents       bool    `json:"kv_events"`
	Partitions     int32   `json:"partitions"`
	Messages       int64   `json:"messages"`
	Bytes          int64   `json:"bytes"`
	Batches        int     `json:"batches"`
	EventTimeSec   float64 `json:"event_time_s"`
	ProduceSec     float64 `json:"produce_s"`
	ProduceMBps    float64 `json:"produce_mb_per_s"`
	// KVFaults is how many of the injected KV faults the simulator
	// realised (backlog mode), KVVictims the requests they polluted, by
	// the simulator's own account: what the incidents counter is to be
	// read against.
	KVFaults  int `json:"kv_faults_realised"`
	KVVictims int `json:"kv_victims"`
	// KVTruth is the realised faults themselves (their GPU, time, source
	// request, victims).
	KVTruth []simulator.KVFaultTruth `json:"kv_truth,omitempty"`
}

// Machine is the machine the benchmark ran on.
type Machine = machine.Info

func run(o options) error {
	res := Result{Benchmark: "memory", Mode: "backlog", Time: time.Now().UTC(), Note: o.note, Machine: machine.Read(),
		Command: "go run ./benchmarks/memory " + strings.Join(os.Args[1:], " "), BudgetBytes: o.budget, ConstantBytes: o.constant, Cgo: o.cgo}
	if o.steady {
		res.Mode = "steady"
	}
	ctx := context.Background()
	suffix := randSuffix()
	prefix := "mem-" + suffix
	group := "braid-mem-" + suffix
	inputs := []string{prefix + "-spans", prefix + "-logs", prefix + "-metrics"}
	outputs := []string{prefix + "-fused", prefix + "-late", prefix + "-dlq", prefix + "-pollution", prefix + "-incidents"}

	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.RecordPartitioner(simulator.Partitioner()),
		kgo.ProducerBatchMaxBytes(1_000_000), kgo.MaxBufferedBytes(256<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, o.partitions, 1, nil, inputs...); err != nil {
		return fmt.Errorf("create input topics: %w", err)
	}
	if !o.keepTopics {
		defer braidproc.DeleteTopics(adm, prefix, group, inputs...)
	}

	bin := o.braid
	if bin == "" {
		dir, err := os.MkdirTemp("", "braid-mem-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = braidproc.Build(dir, o.cgo); err != nil {
			return err
		}
	}
	stateDir, err := os.MkdirTemp("", "braid-mem-state")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	cfgPath := filepath.Join(stateDir, "braid.yaml")
	cfg := braidproc.Config{Brokers: o.brokers, Group: group, Instance: "mem-0",
		Inputs: [3]string(inputs), Outputs: [5]string(outputs),
		StateDir: filepath.Join(stateDir, "data"), MemoryBudget: o.budget, Admin: o.admin, CheckpointInterval: o.checkpoint, Alignment: o.alignment}.YAML()
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}

	rate := o.simRate
	if o.steady {
		rate = o.rate
	}
	sim, err := newSim(o, rate, inputs)
	if err != nil {
		return err
	}
	res.Workload = Workload{Name: o.workload, Hosts: o.hosts, RequestsPerSec: rate, KVEvents: o.workload == "fleet", Partitions: o.partitions}
	if o.workload == "spans" { // the simulator's defaults, not -hosts and -sim-rate
		res.Workload.Hosts, res.Workload.RequestsPerSec = 0, 0
	}

	if o.steady {
		err = runSteady(ctx, o, &res, cl, sim, bin, cfgPath, group, inputs)
	} else {
		err = runBacklog(ctx, o, &res, cl, sim, bin, cfgPath, group, inputs)
	}
	res.Machine.LoadAvgEnd = machine.LoadAvg()
	if err != nil {
		return err
	}
	if !o.steady && res.Workload.KVEvents {
		if res.KV, err = scoreKV(ctx, o.brokers, prefix+"-incidents", inputs[1], prefix+"-fused", res.Workload.KVTruth, sim.Truth().Traces); err != nil {
			return err
		}
	}
	report(o, &res)
	if o.resultsDir != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		name := "memory-" + res.Mode
		if o.workload != "fleet" {
			name += "-" + o.workload
		}
		path := filepath.Join(o.resultsDir, name+".json")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

// newSim is, for -workload fleet, the realistic fleet at its heaviest: KV
// events on every GPU, faults along the way (incidents), engine logs,
// scrapes; for -workload spans the e2e benchmark's workload.
func newSim(o options, rate float64, inputs []string) (*simulator.Simulator, error) {
	topics := simulator.Topics{Spans: inputs[0], Logs: inputs[1], Metrics: inputs[2]}
	if o.workload == "spans" {
		return simulator.New(simulator.Config{Seed: o.seed, Encoding: simulator.EncodingProto, Topics: topics})
	}
	var faults []simulator.KVFault
	for i, tr := range []simulator.KVTrigger{simulator.DoubleFree, simulator.PaddingSlotMinus1, simulator.RecycledNotZeroed,
		simulator.WrongStride, simulator.CancelRetry, simulator.RadixStale} {
		faults = append(faults, simulator.KVFault{Trigger: tr, At: simulator.DefaultStart.Add(time.Duration(i*30+5) * time.Second), GPU: -1})
	}
	return simulator.New(simulator.Config{Seed: o.seed, Realistic: true, KVEvents: true, Hosts: o.hosts, Rate: rate,
		Topics: topics, KV: simulator.KVConfig{Faults: faults}})
}

// produceBatch produces one Collector batch asynchronously, counting what
// it wrote.
func produceBatch(cl *kgo.Client, msgs []simulator.Message, w *Workload, errc chan<- error) {
	for _, m := range msgs {
		w.Messages++
		w.Bytes += int64(len(m.Key) + len(m.Value))
		cl.Produce(context.Background(), &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	w.Batches++
}

func runBacklog(ctx context.Context, o options, res *Result, cl *kgo.Client, sim *simulator.Simulator, bin, cfgPath, group string, inputs []string) error {
	w := &res.Workload
	errc := make(chan error, 1)
	start := time.Now()
	lastLog := start
	for w.Bytes < o.bytes {
		produceBatch(cl, sim.Next(), w, errc)
		select {
		case err := <-errc:
			return fmt.Errorf("produce the backlog: %w", err)
		default:
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			fmt.Printf("produced %.0f MB in %.0fs\n", float64(w.Bytes)/1e6, time.Since(start).Seconds())
		}
	}
	produceBatch(cl, sim.Flush(), w, errc)
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("produce the backlog: %w", err)
	default:
	}
	w.ProduceSec = time.Since(start).Seconds()
	w.ProduceMBps = float64(w.Bytes) / 1e6 / w.ProduceSec
	w.EventTimeSec = sim.EventTime().Sub(simulator.DefaultStart).Seconds()
	kv := sim.Truth().KV
	w.KVFaults, w.KVVictims, w.KVTruth = len(kv.Faults), len(kv.Polluted), kv.Faults
	fmt.Printf("backlog: %d messages, %.0f MB in %.1fs (%.1f MB/s), %.0fs of event time; %d KV faults realised, %d requests polluted\n",
		w.Messages, float64(w.Bytes)/1e6, w.ProduceSec, w.ProduceMBps, w.EventTimeSec, w.KVFaults, w.KVVictims)

	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, inputs...)
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}

	b, err := startBraid(o, bin, cfgPath)
	if err != nil {
		return err
	}
	defer b.Kill()
	res.SampleSec = o.sample.Seconds()
	readStart := time.Now()
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	deadline := time.Now().Add(o.timeout)
	lastCheck, lastHeap := time.Time{}, time.Now()
	for {
		select {
		case err := <-b.Done:
			res.BraidExit = fmt.Sprint(err)
			return fmt.Errorf("braid exited while reading the backlog (%v); log:\n%s", err, b.Tail())
		case <-tick.C:
		}
		if st, err := procStatus(b.Pid()); err == nil {
			sampleShares(o.admin, res, len(res.RSS))
			res.RSS = append(res.RSS, st.rss)
			res.PeakRSSBytes = max(res.PeakRSSBytes, st.hwm)
		}
		if o.heapDir != "" && time.Since(lastHeap) >= 30*time.Second {
			lastHeap = time.Now()
			saveHeap(o.admin, filepath.Join(o.heapDir, fmt.Sprintf("heap-%03.0fs.pb.gz", time.Since(readStart).Seconds())))
		}
		if time.Since(lastCheck) < 2*time.Second {
			continue
		}
		lastCheck = time.Now()
		done, behind, err := caughtUp(ctx, adm, group, ends)
		if err != nil {
			return err
		}
		if done && res.InputReadSec == 0 {
			res.InputReadSec = time.Since(readStart).Seconds()
		}
		if done {
			// The input is read; the end of the backlog is when the
			// internal topics (trace groups, held logs, KV events
			// forwarded between tasks) are read too.
			var internalBehind int64
			done, internalBehind, err = internalCaughtUp(ctx, adm, group)
			if err != nil {
				return err
			}
			behind += internalBehind
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("braid did not read the backlog within %v (%d records behind)", o.timeout, behind)
		}
		if o.verbose {
			fmt.Printf("%.0fs: %d records behind, RSS %d MiB, peak %d MiB\n", time.Since(readStart).Seconds(), behind, res.RSS[len(res.RSS)-1]>>20, res.PeakRSSBytes>>20)
		}
	}
	res.ReadSec = time.Since(readStart).Seconds()
	res.ReadMBps = float64(w.Bytes) / 1e6 / res.ReadSec
	res.ReadCPUSec, _ = procCPU(b.Pid())
	// The KV events still held wait for the watermark (or, now that the
	// job is live, LiveHold), and what they and flush_after still emit
	// comes a checkpoint later: the output is complete once no KV event
	// is held and the output counters stood still for two checkpoint
	// intervals (at least 10 s).
	settle := max(2*o.checkpoint, 10*time.Second)
	drainStart, stableSince := time.Now(), time.Now()
	var last map[string]float64
	for {
		vals := scrape(o.admin, func(line string) string {
			if strings.HasPrefix(line, `braid_memory_bytes{share="kv_buffer"}`) {
				return "kv_buffer"
			}
			for _, name := range []string{"braid_fused_records_total", "braid_pollution_incidents_total", "braid_incident_tags_total", "braid_polluted_requests_total"} {
				if isMetric(line, name) {
					return name
				}
			}
			return ""
		})
		kv, ok := vals["kv_buffer"]
		delete(vals, "kv_buffer")
		if !maps.Equal(vals, last) {
			last, stableSince = vals, time.Now()
		}
		if st, err := procStatus(b.Pid()); err == nil {
			res.PeakRSSBytes = max(res.PeakRSSBytes, st.hwm)
		}
		if ok && kv == 0 && res.KVDrainSec == 0 {
			res.KVDrainSec = time.Since(drainStart).Seconds()
		}
		if ok && kv == 0 && time.Since(stableSince) >= settle {
			res.SettleSec = time.Since(drainStart).Seconds()
			res.SettledCPUSec, _ = procCPU(b.Pid())
			break
		}
		if time.Since(drainStart) > 3*time.Minute {
			res.KVDrainSec, res.SettleSec = -1, -1
			fmt.Printf("output still moving, or KV events still held (%.0f bytes), 3 min after the backlog was read\n", kv)
			break
		}
		select {
		case err := <-b.Done:
			res.BraidExit = fmt.Sprint(err)
			return fmt.Errorf("braid exited while its output settled (%v); log:\n%s", err, b.Tail())
		case <-tick.C:
		}
	}
	res.Counters = scrape(o.admin, func(line string) string {
		if rest, ok := strings.CutPrefix(line, "braid_evictions_total{"); ok {
			// by share: what the budget made braid give up early
			if j := strings.Index(rest, `share="`); j >= 0 {
				share := rest[j+7:]
				return "braid_evictions_total:" + share[:strings.IndexByte(share, '"')]
			}
		}
		for _, name := range endCounters {
			if isMetric(line, name) {
				return name
			}
		}
		return ""
	})
	if st, err := procStatus(b.Pid()); err == nil {
		res.PeakRSSBytes = max(res.PeakRSSBytes, st.hwm)
	}
	res.PeakOverBudget = res.PeakRSSBytes - o.budget
	res.WithinBudget = res.PeakRSSBytes <= o.budget+o.constant
	res.BraidExit = b.Stop()
	return nil
}

func runSteady(ctx context.Context, o options, res *Result, cl *kgo.Client, sim *simulator.Simulator, bin, cfgPath, group string, inputs []string) error {
	w := &res.Workload
	errc := make(chan error, 1)
	// A fleet that has run for a while: -warmup-backlog of its event time
	// is in the topics before braid starts, so that what braid keeps for
	// a time-to-live (pollution.block_ttl 30m, resource_retain 10m) is at
	// its steady size when the measured hour begins, not filling during it.
	for sim.EventTime().Sub(simulator.DefaultStart) < o.warmupBacklog {
		produceBatch(cl, sim.Next(), w, errc)
		select {
		case err := <-errc:
			return fmt.Errorf("produce the warm-up backlog: %w", err)
		default:
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	res.WarmupBacklogSec = o.warmupBacklog.Seconds()
	res.WarmupBytes = w.Bytes
	b, err := startBraid(o, bin, cfgPath)
	if err != nil {
		return err
	}
	defer b.Kill()
	const sampleEvery = 10 * time.Second
	res.SampleSec = sampleEvery.Seconds()
	start := time.Now()
	batch := time.NewTicker(simulator.DefaultBatchInterval)
	defer batch.Stop()
	sample := time.NewTicker(sampleEvery)
	defer sample.Stop()
	// Then -warmup at the steady rate (braid reads the backlog and catches
	// up), sampled but not measured; then -duration, measured.
	measureFrom := start.Add(o.warmup)
	for time.Since(start) < o.warmup+o.duration {
		select {
		case err := <-b.Done:
			res.BraidExit = fmt.Sprint(err)
			return fmt.Errorf("braid exited during the steady run (%v); log:\n%s", err, b.Tail())
		case err := <-errc:
			return fmt.Errorf("produce: %w", err)
		case <-batch.C:
			produceBatch(cl, sim.Next(), w, errc)
		case <-sample.C:
			st, err := procStatus(b.Pid())
			if err != nil {
				continue
			}
			res.PeakRSSBytes = max(res.PeakRSSBytes, st.hwm)
			if time.Now().Before(measureFrom) {
				res.WarmupRSS = append(res.WarmupRSS, st.rss)
				continue
			}
			sampleShares(o.admin, res, len(res.RSS))
			res.RSS = append(res.RSS, st.rss)
			if o.verbose {
				fmt.Printf("%.0fs: RSS %d MiB, peak %d MiB, produced %.0f MB\n", time.Since(start).Seconds(), st.rss>>20, st.hwm>>20, float64(w.Bytes)/1e6)
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	w.ProduceSec = time.Since(start).Seconds()
	w.ProduceMBps = float64(w.Bytes-res.WarmupBytes) / 1e6 / w.ProduceSec // the steady rate, the backlog left out
	w.EventTimeSec = sim.EventTime().Sub(simulator.DefaultStart).Seconds()
	n := int(o.window / sampleEvery)
	if len(res.RSS) < 2*n || n == 0 {
		return fmt.Errorf("%d RSS samples, need %d", len(res.RSS), 2*n)
	}
	res.FirstWindowMeanRSS = mean(res.RSS[:n])
	res.LastWindowMeanRSS = mean(res.RSS[len(res.RSS)-n:])
	res.LastOverFirst = float64(res.LastWindowMeanRSS) / float64(res.FirstWindowMeanRSS)
	res.Flat = res.LastOverFirst <= 1.10 && res.LastOverFirst >= 0.90
	res.PeakOverBudget = res.PeakRSSBytes - o.budget
	res.WithinBudget = res.PeakRSSBytes <= o.budget+o.constant
	// Lag at the end, for the record: a braid that cannot keep up with
	// -rate grows its backlog, not its memory.
	if ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, inputs...); err == nil {
		if _, behind, err := caughtUp(ctx, kadm.NewClient(cl), group, ends); err == nil {
			fmt.Printf("at the end braid was %d records behind\n", behind)
		}
	}
	res.BraidExit = b.Stop()
	return nil
}

func mean(xs []int64) int64 {
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return int64(s / float64(len(xs)))
}

// caughtUp reports whether group has committed every end offset, and how
// many records it is behind.
func caughtUp(ctx context.Context, adm *kadm.Client, group string, ends kadm.ListedOffsets) (bool, int64, error) {
	return caughtUpSlack(ctx, adm, group, ends, 0)
}

// caughtUpSlack is caughtUp allowing the committed offset to be slack
// short of the end: the commit marker after the last record of a
// transactional topic, the markers in flight.
func caughtUpSlack(ctx context.Context, adm *kadm.Client, group string, ends kadm.ListedOffsets, slack int64) (bool, int64, error) {
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		// The group does not exist before braid's first commit.
		return false, -1, nil
	}
	var behind int64
	done := true
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			done = false
			return
		}
		c, ok := committed.Lookup(e.Topic, e.Partition)
		at := int64(0)
		if ok && c.Err == nil {
			at = c.At
		}
		if at < e.Offset-slack {
			done = false
			behind += e.Offset - at
		}
	})
	return done, behind, nil
}

// internalCaughtUp reports whether group has committed the end of every
// internal topic braid created for it (not its changelog nor the resources
// table, which are not read as input).
func internalCaughtUp(ctx context.Context, adm *kadm.Client, group string) (bool, int64, error) {
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return false, 0, fmt.Errorf("list topics: %w", err)
	}
	var internal []string
	for _, n := range td.Names() {
		if strings.HasPrefix(n, group+".") && strings.HasSuffix(n, "-repartition") {
			internal = append(internal, n)
		}
	}
	if len(internal) == 0 {
		return false, 0, fmt.Errorf("no internal topics of group %s", group)
	}
	ends, err := adm.ListEndOffsets(ctx, internal...)
	if err != nil {
		return false, 0, fmt.Errorf("end offsets: %w", err)
	}
	// Each checkpoint writes watermark markers to every partition of the
	// internal topics (and a commit marker after them), read at the next
	// one: a few records are always in flight.
	return caughtUpSlack(ctx, adm, group, ends, internalSlack)
}

// internalSlack is how far short of an internal partition's end the group
// may be at the end of the backlog: the markers of two checkpoints.
const internalSlack = 32

func startBraid(o options, bin, cfgPath string) (*braidproc.Proc, error) {
	return braidproc.Start(bin, cfgPath, o.verbose)
}

type status struct{ rss, hwm int64 }

// procCPU reads the CPU time pid has used, user and system, seconds
// (/proc/PID/stat, in clock ticks of 1/100 s: Linux's USER_HZ).
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and
	// may hold spaces: state is the first, utime the 12th, stime the 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(fs[11], 10, 64)
	stime, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err := cmp.Or(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return float64(utime+stime) / 100, nil
}

// procStatus reads VmRSS and VmHWM of pid.
func procStatus(pid int) (status, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return status{}, err
	}
	defer f.Close()
	var st status
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			st.rss = kb << 10
		case "VmHWM":
			st.hwm = kb << 10
		}
	}
	return st, sc.Err()
}

func report(o options, res *Result) {
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("workload %s: %d hosts, %.0f requests/s (0: the simulator's defaults), KV events %v; %d messages, %.0f MB, produced in %.1fs (%.1f MB/s)\n",
		res.Workload.Name, res.Workload.Hosts, res.Workload.RequestsPerSec, res.Workload.KVEvents, res.Workload.Messages, float64(res.Workload.Bytes)/1e6, res.Workload.ProduceSec, res.Workload.ProduceMBps)
	if res.Mode == "backlog" {
		fmt.Printf("read in %.1fs (%.1f MB/s; input topics committed to their end after %.1fs); held KV events released %.1fs later, output settled after %.1fs\n", res.ReadSec, res.ReadMBps, res.InputReadSec, res.KVDrainSec, res.SettleSec)
		fmt.Printf("braid's CPU: %.1f s until read, %.1f s until settled\n", res.ReadCPUSec, res.SettledCPUSec)
		c := res.Counters
		fmt.Printf("fused records %.0f, of which revisions %.0f; late members %.0f, dead-lettered %.0f; KV events %.0f, incidents %.0f\n",
			c["braid_fused_records_total"], c["braid_fused_revisions_total"], c["braid_late_members_total"], c["braid_dlq_messages_total"],
			c["braid_kv_events_total"], c["braid_pollution_incidents_total"])
		if res.Workload.KVEvents {
			fmt.Printf("KV faults realised %d, found %d (an incident on the fault's GPU with its source request as root); polluted requests %d, named %d, named but not polluted %d\n",
				res.Workload.KVFaults, res.KV.FaultsFound, res.KV.Victims, res.KV.VictimsNamed, res.KV.NamedNotTruth)
			fmt.Printf("against the reference model replaying the logs: polluted requests %d, named %d, named but not polluted %d\n",
				res.KV.RefVictims, res.KV.RefNamed, res.KV.NamedNotRef)
			for _, m := range res.KV.RefMissed {
				fmt.Println("  polluted, not named:", m)
			}
			fmt.Printf("FLAG_POLLUTED on the victims' traces (those with spans): %d of %d by the simulator's truth, %d of %d by the reference model\n",
				res.KV.TruthFlagged, res.KV.TruthTraced, res.KV.RefFlagged, res.KV.RefTraced)
			for _, m := range res.KV.RefUnflagged {
				fmt.Println("  polluted, trace not flagged:", m)
			}
			for _, m := range res.KV.RootsMissed {
				fmt.Println("  root missed:", m)
			}
		}
	} else {
		fmt.Printf("steady: first %v mean RSS %.0f MiB, last %v mean RSS %.0f MiB: ×%.3f (flat within 10%%: %v)\n",
			o.window, mib(res.FirstWindowMeanRSS), o.window, mib(res.LastWindowMeanRSS), res.LastOverFirst, res.Flat)
	}
	fmt.Printf("peak RSS %.0f MiB; memory_budget %.0f MiB + constant %.0f MiB = %.0f MiB: within: %v\n",
		mib(res.PeakRSSBytes), mib(res.BudgetBytes), mib(res.ConstantBytes), mib(res.BudgetBytes+res.ConstantBytes), res.WithinBudget)
	if res.BraidExit != "" {
		fmt.Printf("braid exit after SIGTERM: %s\n", res.BraidExit)
	}
	fmt.Printf("load average at start %s, at end %s (%d CPUs)\n", res.Machine.LoadAvgStart, res.Machine.LoadAvgEnd, res.Machine.CPUs)
}

func randSuffix() string {
	b := make([]byte, 5)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freeAddr is a loopback address nothing listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrape reads braid's /metrics and sums, per name that pick gives a line
// ("" to skip it), the values of the lines picked (nil if the scrape
// failed).
func scrape(addr string, pick func(line string) string) map[string]float64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	vals := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name := pick(line)
		if name == "" {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			vals[name] += v
		}
	}
	return vals
}

// endCounters are the counters a backlog run reports (Result.Counters).
var endCounters = []string{"braid_fused_records_total", "braid_fused_revisions_total", "braid_incident_tags_total", "braid_late_members_total",
	"braid_dlq_messages_total", "braid_kv_events_total", "braid_pollution_incidents_total", "braid_members_total",
	"braid_idle_flushed_traces_total", "braid_early_checkpoints_total", "braid_followup_checkpoints_total", "braid_requested_checkpoints_total"}

// sampleShares appends sample i of what braid's /metrics says holds its
// memory to res.Shares: braid_memory_bytes by share (summed over tasks),
// go_memstats_heap_inuse_bytes as "go_heap_inuse", go_memstats_sys_bytes
// as "go_sys". A failed scrape leaves the sample out (-1).
func sampleShares(addr string, res *Result, i int) {
	vals := scrape(addr, func(line string) string {
		switch {
		case strings.HasPrefix(line, "braid_memory_bytes{"):
			if j := strings.Index(line, `share="`); j >= 0 {
				share := line[j+7:]
				return share[:strings.IndexByte(share, '"')]
			}
		case strings.HasPrefix(line, "go_memstats_heap_inuse_bytes "):
			return "go_heap_inuse"
		case strings.HasPrefix(line, "go_memstats_sys_bytes "):
			return "go_sys"
		}
		return ""
	})
	if res.Shares == nil {
		res.Shares = map[string][]int64{}
	}
	for k := range vals {
		if _, ok := res.Shares[k]; !ok {
			res.Shares[k] = make([]int64, i)
			for j := range res.Shares[k] {
				res.Shares[k][j] = -1
			}
		}
	}
	for k := range res.Shares {
		v, ok := vals[k]
		if !ok {
			v = -1
		}
		res.Shares[k] = append(res.Shares[k], int64(v))
	}
}

// saveHeap writes braid's heap profile (in-use objects after a forced GC)
// to path; a failure is reported and otherwise ignored.
func saveHeap(addr, path string) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err == nil {
		defer resp.Body.Close()
		var f *os.File
		if f, err = os.Create(path); err == nil {
			_, err = io.Copy(f, resp.Body)
			err = errors.Join(err, f.Close())
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "heap profile: %v\n", err)
	}
}

// isMetric reports whether an exposition line is a sample of metric name.
func isMetric(line, name string) bool {
	return strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{")
}
