package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/otelcoltest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// The sampling run's policy: the tenants without a hint (half the
// servers) at the top-level rate, two tenants at rates of their own (one
// with a seed of its own), one at a rate that grows with sequence length.
const (
	samplingRateDefault = 0.25
	samplingRateAcme    = 0.5
	samplingRateGlobex  = 0.4
	// initech: clamp(0.15 + 0.0002·seq_len, 0, 0.6)
	samplingInitechBase, samplingInitechSeq, samplingInitechMax = 0.15, 0.0002, 0.6
)

const samplingPolicy = `sampling:
  enabled: true
  rate: 0.25
  tenants:
    acme: {rate: 0.5}
    globex: {rate: 0.4, seed: 42}
    initech:
      models:
        "*": {base: 0.15, seq_len: 0.0002, max: 0.6}
`

// TestSamplingToCollector runs two braid instances with per-tenant
// sampling over a realistic fleet with injected errors, a latency
// regression, KV-cache faults and guardrail verdicts; the real
// OpenTelemetry Collector (kafkareceiver → file exporter) reads the
// sampled topics. The Collector decodes every record, and the traces it
// writes are exactly those braid decided to keep, each whole and once;
// every injected error, regressed (slow), polluted and quality-flagged
// request of the simulator is kept; the kept fraction of the other traffic
// is within ±10 % of each tenant's rate; the counters on /metrics add up;
// and braid replay decides the same for every trace.
func TestSamplingToCollector(t *testing.T) {
	if raceEnabled {
		// Two jobs, a paced fleet and the Collector: the race detector
		// makes it several times slower and the paced input late.
		t.Skip("runs without -race, in make test's second pass")
	}
	t.Parallel() // beside the other two of make test's demo pass
	const partitions = 4
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopics(t, brokers, partitions, "otlp_spans", "otlp_logs", "otlp_metrics")
	out := kafkatest.NewTopics(t, brokers, partitions, "braid.fused", "braid.late", "braid.dlq", "sampled.spans", "sampled.logs", "smp", "braid.alerts")
	dir := t.TempDir()
	path := filepath.Join(dir, "braid.yaml")
	yaml := fmt.Sprintf(`kafka:
  brokers: [%s]
group: %s
instance_id: "0"
inputs:
  spans: {topic: %s}
  logs: {topic: %s}
  metrics: {topic: %s}
outputs: {fused: %s, late: %s, dlq: %s, alerts: %s}
state: {dir: %s}
checkpoint_interval: 1s
event_time: {out_of_orderness: 5s, idleness: 30s, idle_gap: 1s, allowed_lateness: 2m, flush_after: 10s}
admin: {addr: ""}
%s  traces_topic: %s
  logs_topic: %s
`, strings.Join(brokers, ", "), "smp-"+out[5], in[0], in[1], in[2], out[0], out[1], out[2], out[6], filepath.Join(dir, "state0"),
		samplingPolicy, out[3], out[4])
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}

	// The input: ten minutes of a three-host fleet at 25 requests/s with
	// verdicts and a 20 s prefill regression on one server, then 40 s of a
	// one-host fleet with KV-block events and two KV-cache faults; written
	// at five times real time once the job runs, as the Collector would.
	prod := kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))
	topics := simulator.Topics{Spans: in[0], Logs: in[1], Metrics: in[2]}
	start := simulator.DefaultStart
	kvStart := start.Add(10 * time.Minute)
	sims := []struct {
		cfg     simulator.Config
		batches int
	}{
		{simulator.Config{Seed: 31, Realistic: true, Hosts: 3, Rate: 25, BatchInterval: time.Second,
			Start: start, Topics: topics, Verdicts: &simulator.VerdictConfig{},
			Regressions: []simulator.Regression{{Instance: 1, From: 250 * time.Second, To: 270 * time.Second, Factor: 20}}}, 600},
		{simulator.Config{Seed: 32, Realistic: true, Hosts: 1, Rate: 5, BatchInterval: time.Second,
			Start: kvStart, Topics: topics, KVEvents: true, AbortRatio: -1,
			KV: simulator.KVConfig{Faults: []simulator.KVFault{
				{Trigger: simulator.DoubleFree, At: kvStart.Add(5 * time.Second), GPU: -1},
				{Trigger: simulator.PaddingSlotMinus1, At: kvStart.Add(15 * time.Second), GPU: 1},
			}}}, 40},
	}
	var batches [][]simulator.Message
	var truths []simulator.Truth
	for _, sc := range sims {
		sim, err := simulator.New(sc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range sc.batches {
			batches = append(batches, sim.Next())
		}
		batches = append(batches, sim.Flush())
		truths = append(truths, sim.Truth())
	}
	main, kv := truths[0], truths[1]
	truth := map[string]simulator.TraceTruth{}
	for _, tr := range []simulator.Truth{main, kv} {
		for id, tt := range tr.Traces {
			if tt.Spans > 0 {
				truth[id] = tt
			}
		}
	}
	byRequest := map[string]string{}
	for id, tt := range truth {
		byRequest[tt.RequestID] = id
	}
	polluted := map[string]bool{}
	for _, p := range kv.KV.Polluted {
		polluted[p.TraceID] = true
	}
	if len(truth) < 10_000 || len(polluted) == 0 {
		t.Fatalf("the input has %d traces and %d polluted requests; the test needs ≥ 10,000 and some", len(truth), len(polluted))
	}

	// Two instances in one group.
	var jobs []*job.Job
	var stops []func()
	for i := range 2 {
		cfg, err := job.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.InstanceID = fmt.Sprint(i)
		cfg.State.Dir = filepath.Join(dir, fmt.Sprintf("state%d", i))
		j, stop := runJob(t, cfg)
		jobs, stops = append(jobs, j), append(stops, stop)
	}
	// The group settles before the input flows: every instance runs its
	// share of the tasks.
	otelcoltest.WaitFor(t, time.Minute, func() bool {
		n := 0
		for _, j := range jobs {
			if len(j.Engine().Tasks()) == 0 {
				return false
			}
			n += len(j.Engine().Tasks())
		}
		return n == partitions
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	next := time.Now()
	for _, b := range batches {
		for time.Now().Before(next) {
			time.Sleep(time.Until(next)) // the producer's pace, not synchronisation
		}
		if err := simulator.Produce(ctx, prod, b); err != nil {
			t.Fatal(err)
		}
		next = next.Add(200 * time.Millisecond)
	}
	fusedR := kafkatest.Client(t, brokers, kgo.ConsumeTopics(out[0]), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	lateR := kafkatest.Client(t, brokers, kgo.ConsumeTopics(out[1]), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fused := map[string]*braidpb.FusedTrace{}
	late := map[string]bool{} // traces with a member in braid.late
	poll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fusedR.PollFetches(ctx).EachRecord(func(r *kgo.Record) { keepLatest(t, fused, r) })
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		lateR.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			id := string(r.Key)
			if tid, ok := byRequest[id]; ok {
				id = tid // a log joined by request id that found no span in time
			}
			late[id] = true
		})
		cancel()
	}
	// Complete: every trace fused with all its members, but those the job
	// sent members of to braid.late (behind the watermark: a loaded
	// machine delays the paced input).
	deadline := time.Now().Add(4 * time.Minute)
	for !samplingComplete(truth, fused, late) {
		if time.Now().After(deadline) {
			n, ex := 0, ""
			for id, tt := range truth {
				if ft := fused[id]; !memberComplete(tt, ft) && !late[id] {
					n++
					if n <= 5 {
						ex += fmt.Sprintf("\n  %s: fused %d/%d/%d of %d spans, %d+%d logs, %d points", id, len(ft.GetSpans()), len(ft.GetLogs()), len(ft.GetPoints()), tt.Spans, tt.Logs, tt.RequestIDLogs, tt.ExemplarPoints)
					}
				}
			}
			reasons := map[string]int{}
			for _, r := range flatten(readAll(t, brokers, out[1])) {
				reasons[lateHeader(r, "braid.reason")]++
			}
			t.Fatalf("the job fused %d of %d traces within 4 minutes, %d incomplete:%s\nlate records by reason: %v", len(fused), len(truth), n, ex, reasons)
		}
		poll()
	}
	// The incident tags of polluted requests come as revisions, once the
	// detector has its evidence: wait for them (a miss is reported below).
	tagged := func() bool {
		for id := range polluted {
			if len(fused[id].GetIncidentIds()) == 0 {
				return false
			}
		}
		return true
	}
	for deadline = time.Now().Add(time.Minute); !tagged() && time.Now().Before(deadline); {
		poll()
	}
	for _, stop := range stops {
		stop()
	}
	// Everything the job wrote, now that it has stopped.
	fused = decodeLatest(t, flatten(readAll(t, brokers, out[0])))

	// braid's decisions, as of each trace's last revision.
	kept := map[string]*braidpb.FusedTrace{}
	reasons := map[string]int{}
	for id, ft := range fused {
		if ft.GetSampling() == nil {
			t.Fatalf("trace %s: no sampling decision in its fused record", id)
		}
		if ft.Sampling.Kept {
			kept[id] = ft
			reasons[ft.Sampling.Reason]++
		}
	}
	t.Logf("%d of %d traces kept: %v", len(kept), len(fused), reasons)

	// The Collector reads the sampled topics: every kept trace arrives
	// whole, once; nothing else.
	col := otelcoltest.Start(t, otelcoltest.Options{Brokers: brokers, TracesTopic: out[3], LogsTopic: out[4]})
	wantSpans, wantLogs := 0, 0
	for _, ft := range kept {
		wantSpans += len(ft.Spans)
		wantLogs += len(ft.Logs)
	}
	var spans map[string][]*tracepb.Span
	var logs map[string]int
	nSpans, nLogs := 0, 0
	otelcoltest.WaitFor(t, 3*time.Minute, func() bool {
		spans, nSpans = collectorSpans(col.Traces(t))
		logs, nLogs = map[string]int{}, 0
		for _, ld := range col.Logs(t) {
			for _, rl := range ld.ResourceLogs {
				for _, sl := range rl.ScopeLogs {
					for _, l := range sl.LogRecords {
						logs[hex.EncodeToString(l.TraceId)]++
						nLogs++
					}
				}
			}
		}
		return nSpans >= wantSpans && nLogs >= wantLogs
	})
	if nSpans != wantSpans || nLogs != wantLogs {
		t.Errorf("the Collector wrote %d spans and %d logs; braid kept traces of %d spans and %d logs", nSpans, nLogs, wantSpans, wantLogs)
	}
	for id, ft := range kept {
		got := spans[id]
		if len(got) != len(ft.Spans) || logs[id] != len(ft.Logs) {
			t.Errorf("kept trace %s (%s): the Collector has %d spans and %d logs, the fused trace %d and %d",
				id, ft.Sampling.Reason, len(got), logs[id], len(ft.Spans), len(ft.Logs))
			continue
		}
		for _, s := range got {
			if !strings.HasPrefix(s.TraceState, "ot=th:"+ft.Sampling.Threshold+";rv:") {
				t.Errorf("trace %s: span tracestate %q, want th %s", id, s.TraceState, ft.Sampling.Threshold)
				break
			}
		}
	}
	for id := range spans {
		if kept[id] == nil {
			t.Errorf("the Collector has trace %s, which braid did not keep", id)
		}
	}

	// The simulator's truth: what the rules must keep, and the rates of
	// the rest — the traces of no injected fault that are not slow by a
	// reference computed here: TTFT or e2e above the exact 99th
	// percentile of the model's traces of the five minutes before its own.
	refSlow, refThr := referenceSlow(fused)
	type share struct{ n, kept, expect float64 }
	shares := map[string]*share{}
	missed := map[string]int{}
	lateTraces := 0
	for id, tt := range truth {
		ft := fused[id]
		if late[id] {
			lateTraces++
			continue // braid may not have seen what the rule reads
		}
		rule := ""
		switch {
		case tt.Error:
			rule = "error"
		case polluted[id]:
			rule = "polluted"
		case tt.GuardrailBypass || tt.PIILeak || tt.Blocked:
			rule = "quality"
		case tt.Regressed && refSlow[id] > 0:
			rule = "slow" // slowed by the regression beyond its model's p99
		}
		if rule == "" && (refSlow[id] > 0 || tt.Regressed || kept[id].GetSampling().GetReason() == "slow") {
			// Slow without the regression, slowed but not beyond the p99,
			// or kept as slow by a task's own estimate of the p99
			// (checked against the reference below): not traffic that
			// only the rate decides.
			continue
		}
		if rule != "" {
			if kept[id] == nil {
				missed[rule]++
				if missed[rule] <= 3 {
					t.Errorf("%s trace %s (tenant %q, model %s, ttft %v, e2e %v, end %v; reference thresholds %v) not kept: %v", rule, id, tt.Tenant,
						ft.GetDerived().GetModel(), time.Duration(ft.GetDerived().GetTtftNanos()), time.Duration(ft.GetDerived().GetE2ENanos()),
						time.Duration(int64(ft.EndTimeUnixNano)-start.UnixNano()), refThr[id], ft.Sampling)
				}
			}
			continue
		}
		s := shares[tt.Tenant]
		if s == nil {
			s = &share{}
			shares[tt.Tenant] = s
		}
		s.n++
		if kept[id] != nil {
			s.kept++
		}
		s.expect += samplingRate(tt.Tenant, ft.GetDerived())
	}
	// The slow rule against the reference: each task judges against its
	// own uniform sample of the model's traffic, so near the percentile
	// the two disagree; well above it, they must not — from the fifth
	// minute on, once every task's window holds min_samples traces (the
	// reference needs 200 in all, each task 200 of its own).
	var clear, clearKept, near, nearKept int
	for id, r := range refSlow {
		if time.Duration(int64(fused[id].EndTimeUnixNano)-start.UnixNano()) < 4*time.Minute {
			continue
		}
		isSlow := kept[id].GetSampling().GetReason() == "slow" || kept[id].GetSampling().GetReason() == "error" && fused[id].GetSampling().GetKept()
		if r >= 1.5 {
			clear++
			if kept[id] != nil {
				clearKept++
			} else if clear-clearKept <= 8 {
				ft := fused[id]
				t.Logf("not kept: %s model %s end %v ttft %v e2e %v ratio %.2f thresholds %v", id, ft.GetDerived().GetModel(),
					time.Duration(int64(ft.EndTimeUnixNano)-start.UnixNano()), time.Duration(ft.GetDerived().GetTtftNanos()),
					time.Duration(ft.GetDerived().GetE2ENanos()), r, refThr[id])
			}
		} else {
			near++
			if isSlow {
				nearKept++
			}
		}
	}
	t.Logf("traces slow by the reference: %d at ≥ 1.5× the p99, %d of them kept; %d below 1.5×, %d of them kept as slow; %d kept as slow in all",
		clear, clearKept, near, nearKept, reasons["slow"])
	if clearKept != clear {
		t.Errorf("%d of %d traces at ≥ 1.5× their model's p99 not kept", clear-clearKept, clear)
	}
	if reasons["slow"] > 2*len(refSlow) {
		t.Errorf("%d traces kept as slow, more than twice the %d the reference finds slow", reasons["slow"], len(refSlow))
	}
	t.Logf("%d traces with members in braid.late left out of the rule and rate checks", lateTraces)
	if lateTraces > len(truth)/20 {
		t.Errorf("%d of %d traces have members in braid.late; the checks need most of them whole", lateTraces, len(truth))
	}
	if len(missed) > 0 {
		t.Errorf("traces under a rule not kept: %v", missed)
	}
	for _, tenant := range sortedKeys(shares) {
		s := shares[tenant]
		t.Logf("tenant %q: %v normal traces, %v kept, %.1f expected (%.3f vs %.3f)", tenant, s.n, s.kept, s.expect, s.kept/s.n, s.expect/s.n)
		if s.n < 500 {
			t.Errorf("tenant %q: only %v normal traces", tenant, s.n)
		}
		if math.Abs(s.kept-s.expect) > 0.1*s.expect {
			t.Errorf("tenant %q: kept %v of %v normal traces, want %.0f ± 10%%", tenant, s.kept, s.n, s.expect)
		}
	}

	// Every trace a firing alert names is kept.
	firing, named := map[string]bool{}, 0
	for _, r := range flatten(readAll(t, brokers, out[6])) {
		var a braidpb.Alert
		if err := proto.Unmarshal(r.Value, &a); err != nil {
			t.Fatalf("alert record: %v", err)
		}
		if a.State != braidpb.AlertState_ALERT_STATE_FIRING {
			continue
		}
		firing[a.Rule] = true
		for _, id := range a.TraceIds {
			named++
			if kept[id] == nil {
				t.Errorf("alert %s %v names trace %s, not kept (%v)", a.Rule, a.Group, id, fused[id].GetSampling())
			}
		}
	}
	t.Logf("firing alerts %v name %d traces", slices.Sorted(maps.Keys(firing)), named)
	if named == 0 {
		t.Error("no firing alert names a trace; the check needs some")
	}

	// The counters of both instances add up to the decisions.
	var seen, keptN float64
	for _, j := range jobs {
		mfs, err := j.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "braid_sampling_seen_total":
					seen += m.GetCounter().GetValue()
				case "braid_sampling_kept_total":
					keptN += m.GetCounter().GetValue()
				}
			}
		}
	}
	if int(seen) != len(fused) || int(keptN) != len(kept) {
		t.Errorf("counters: seen %v, kept %v; the fused topic has %d traces, %d kept", seen, keptN, len(fused), len(kept))
	}

	// braid replay chooses the same traces. The reason may differ where
	// the live job decided on less than the replay: flush_after emits a
	// trace before its last members arrive (one kept by rate before its
	// incident tag came is kept by rate, where the replay, which emits in
	// event time only, names the incident).
	e := &replayEnv{t: t, brokers: brokers, partitions: partitions, configPath: path}
	replayOut := e.replayTopic("replay-sampling")
	e.replay("--from", "earliest", "--out", "topic:"+replayOut)
	replayed := decodeLatest(t, flatten(readAll(t, brokers, replayOut)))
	differ, reasonDiffer, contentDiffer := 0, 0, 0
	for id, ft := range fused {
		r := replayed[id]
		if !slices.Equal(r.GetIncidentIds(), ft.IncidentIds) || len(r.GetSpans()) != len(ft.Spans) || len(r.GetLogs()) != len(ft.Logs) {
			// The replay's pollution detector, in event time only, named
			// other incidents than the live one (or the members differ):
			// the decision reads what the trace holds.
			contentDiffer++
			continue
		}
		if r.GetSampling().GetKept() == ft.Sampling.Kept && r.GetSampling().GetReason() != ft.Sampling.Reason {
			reasonDiffer++
		}
		if r.GetSampling().GetKept() != ft.Sampling.Kept {
			differ++
			if differ <= 5 {
				t.Errorf("trace %s (model %s, end %v, ttft %v, e2e %v, reference %v; live revision %d, replay %d): the replay decides %v, the live job %v",
					id, ft.GetDerived().GetModel(), time.Duration(int64(ft.EndTimeUnixNano)-start.UnixNano()), time.Duration(ft.GetDerived().GetTtftNanos()),
					time.Duration(ft.GetDerived().GetE2ENanos()), refThr[id], ft.Revision, r.GetRevision(), r.GetSampling(), ft.Sampling)
			}
		}
	}
	t.Logf("replay: %d of %d traces kept for another reason; %d hold other members or incidents than the live job's", reasonDiffer, len(fused), contentDiffer)
	if contentDiffer > len(fused)/200 {
		t.Errorf("%d of %d replayed traces differ from the live job's in members or incidents", contentDiffer, len(fused))
	}
	if differ > 0 || len(replayed) != len(fused) {
		t.Errorf("%d decisions of %d differ between the replay and the live job (replayed %d traces)", differ, len(fused), len(replayed))
	}
}

// referenceSlow returns, per trace whose TTFT or e2e is above the exact
// 99th percentile of its model's traces whose end falls in the five
// minutes that end a minute before the minute of its own end (at least
// 200 of them), by how much (the larger ratio of figure to percentile);
// and every trace's percentiles.
func referenceSlow(fused map[string]*braidpb.FusedTrace) (slow map[string]float64, thresholds map[string][2]time.Duration) {
	type obs struct {
		id   string
		pane int64
		v    [2]float64
	}
	const pane = int64(time.Minute)
	byModel := map[string][]obs{}
	for id, ft := range fused {
		d := ft.GetDerived()
		e2e := d.GetE2ENanos()
		if e2e <= 0 {
			e2e = int64(ft.GetSummary().GetDurationNano())
		}
		byModel[d.GetModel()] = append(byModel[d.GetModel()], obs{id, int64(ft.EndTimeUnixNano) / pane * pane, [2]float64{float64(d.GetTtftNanos()), float64(e2e)}})
	}
	slow, thresholds = map[string]float64{}, map[string][2]time.Duration{}
	for _, os := range byModel {
		thr := map[int64][2]float64{}
		for _, o := range os {
			if _, ok := thr[o.pane]; ok {
				continue
			}
			var t [2]float64
			for f := range 2 {
				var vs []float64
				for _, x := range os {
					if x.pane >= o.pane-6*pane && x.pane < o.pane-pane && x.v[f] > 0 {
						vs = append(vs, x.v[f])
					}
				}
				t[f] = math.Inf(1)
				if len(vs) >= 200 {
					sort.Float64s(vs)
					t[f] = vs[int(0.99*float64(len(vs)-1))]
				}
			}
			thr[o.pane] = t
		}
		for _, o := range os {
			t := thr[o.pane]
			thresholds[o.id] = [2]time.Duration{time.Duration(min(t[0], 1e18)), time.Duration(min(t[1], 1e18))}
			if r := max(o.v[0]/t[0], o.v[1]/t[1]); r > 1 {
				slow[o.id] = r
			}
		}
	}
	return slow, thresholds
}

// samplingRate is the rate the test's policy gives a trace of tenant with
// the derived figures d (computed here, not by braid's code).
func samplingRate(tenant string, d *braidpb.Derived) float64 {
	switch tenant {
	case "acme":
		return samplingRateAcme
	case "globex":
		return samplingRateGlobex
	case "initech":
		seq := float64(d.GetInputTokens() + d.GetOutputTokens())
		return math.Min(math.Max(samplingInitechBase+samplingInitechSeq*seq, 0), samplingInitechMax)
	}
	return samplingRateDefault
}

// runJob runs a job until stop is called (or the test ends).
func runJob(t *testing.T, cfg *job.Config) (j *job.Job, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logPath := filepath.Join(t.TempDir(), "job.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err = job.Prepare(ctx, cfg, slog.New(slog.NewTextHandler(lf, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("job %s: %v", cfg.InstanceID, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("job %s did not stop within 60s", cfg.InstanceID)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("job %s log:\n%s", cfg.InstanceID, headTail(string(b), 4000))
		}
	})
	t.Cleanup(stop) // before the log is read: cleanups run last first
	return j, stop
}

func keepLatest(t *testing.T, m map[string]*braidpb.FusedTrace, r *kgo.Record) {
	t.Helper()
	for id, ft := range decodeLatest(t, []*kgo.Record{r}) {
		if old := m[id]; old == nil || old.Revision < ft.Revision {
			m[id] = ft
		}
	}
}

// samplingComplete reports whether every trace of truth is fused with all
// its members, or is in late.
func samplingComplete(truth map[string]simulator.TraceTruth, fused map[string]*braidpb.FusedTrace, late map[string]bool) bool {
	for id, tt := range truth {
		if ft := fused[id]; ft == nil || !memberComplete(tt, ft) && !late[id] {
			return false
		}
	}
	return true
}

// memberComplete reports whether ft holds every span and log of tt (the
// KV-block event logs, which go to the pollution detector, are not
// members: a trace with KV events is complete with its spans).
func memberComplete(tt simulator.TraceTruth, ft *braidpb.FusedTrace) bool {
	if ft == nil || len(ft.Spans) != tt.Spans {
		return false
	}
	return tt.KVEvents > 0 || len(ft.Logs) == tt.Logs+tt.RequestIDLogs
}

// collectorSpans indexes the Collector's spans by trace id.
func collectorSpans(tds []*tracepb.TracesData) (map[string][]*tracepb.Span, int) {
	m, n := map[string][]*tracepb.Span{}, 0
	for _, td := range tds {
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					id := hex.EncodeToString(s.TraceId)
					m[id] = append(m[id], s)
					n++
				}
			}
		}
	}
	return m, n
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
