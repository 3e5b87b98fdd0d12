package alerts

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/state"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// obs is a test input record: one observation.
type obs struct {
	Kind     string  `json:"kind"` // trace, sample, incident
	Time     int64   `json:"t"`
	Model    string  `json:"model,omitempty"`
	Instance string  `json:"instance,omitempty"`
	GPU      string  `json:"gpu,omitempty"`
	ID       string  `json:"id,omitempty"`
	TTFT     float64 `json:"ttft,omitempty"`
	Metric   string  `json:"metric,omitempty"`
	Value    float64 `json:"v,omitempty"`
	Tenant   string  `json:"tenant,omitempty"`
	// Figs: trace figures by name, besides TTFT.
	Figs map[string]float64 `json:"figs,omitempty"`
}

// testProc runs the processor as the fuse task does: input 0 carries
// observations, input 1 is the internal topic of partials.
type testProc struct{ p *Processor }

func (tp *testProc) Process(t *engine.Task, rec *kgo.Record, input int) error {
	if input == 1 {
		err := tp.p.Process(t, rec)
		if ie := (*InvalidError)(nil); errors.As(err, &ie) {
			return nil
		}
		return err
	}
	var o obs
	if err := json.Unmarshal(rec.Value, &o); err != nil {
		return err
	}
	t.Observe(input, o.Time)
	l := Labels{Model: o.Model, Instance: o.Instance, GPU: o.GPU, Tenant: o.Tenant}
	switch o.Kind {
	case "trace":
		to := NewTraceObs()
		to.Labels, to.Time, to.TraceID = l, o.Time, o.ID
		if o.TTFT != 0 {
			to.Values[FigTTFT] = o.TTFT
		}
		for name, v := range o.Figs {
			to.Values[slices.Index(traceFigures, name)] = v
		}
		tp.p.ObserveTrace(t, &to)
	case "sample":
		tp.p.ObserveSample(t, &l, o.Metric, o.Value, o.Time)
	case "incident":
		tp.p.ObserveIncident(t, &l, o.ID, o.Time)
	}
	return nil
}

func (tp *testProc) OnWatermark(t *engine.Task, wm int64) error { return tp.p.OnWatermark(t, wm) }
func (tp *testProc) PrepareCheckpoint(t *engine.Task) error     { return tp.p.PrepareCheckpoint(t) }
func (tp *testProc) Restore(t *engine.Task) error               { return tp.p.Restore(t) }

type rig struct {
	t     testing.TB
	stage *Stage
	h     *engine.Harness
	seen  int
	out   []*braidpb.Alert
	proc  *Processor // the task's processor (the latest, after a restart)
	// At the last commit: how many of Out it had made, and how many of
	// them the task had read back.
	committedOut, consumedAtCommit int
}

func newRig(t *testing.T, rules []Rule, delay time.Duration) *rig {
	t.Helper()
	off := false
	return newRigWith(t, StageConfig{Alerts: Config{DefaultRules: &off, Rules: rules}, Delay: delay, AllowedLateness: 30 * time.Second})
}

// newRigWith runs a stage of cfg (its topics and partitions set here).
func newRigWith(t testing.TB, cfg StageConfig) *rig {
	t.Helper()
	cfg.Topic, cfg.OutputTopic, cfg.Partitions = "alerts-in", "braid.alerts", 1
	st, err := NewStage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, stage: st}
	store, err := state.Open(state.Options{Dir: t.TempDir(), CacheBytes: 1 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	topo := engine.Topology{Name: "alerts", Partitions: 1,
		Inputs: []engine.Input{{Topic: "obs"}, {Topic: "alerts-in", Internal: true}},
		NewProcessor: func(t *engine.Task) (engine.Processor, error) {
			r.proc = st.NewProcessor(t.Partition)
			return &testProc{p: r.proc}, nil
		}}
	h, err := engine.NewHarness(engine.Config{Store: store, OutOfOrderness: time.Millisecond, Idleness: time.Hour}, topo, 0, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	r.h = h
	return r
}

// restart crashes the task and opens it again, as a broker-backed job
// resumes: what it wrote after the last commit is aborted (never read),
// and the partials of committed checkpoints it had not read by then are
// read again.
func (r *rig) restart() {
	r.t.Helper()
	if err := r.h.Restart(); err != nil {
		r.t.Fatal(err)
	}
	again := slices.Clone(r.h.Out[r.consumedAtCommit:r.committedOut])
	r.seen = len(r.h.Out)
	for _, rec := range again {
		if rec.Topic == "alerts-in" {
			if err := r.h.Process(1, rec); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

func (r *rig) feed(os ...obs) {
	r.t.Helper()
	recs := make([]*kgo.Record, len(os))
	for i, o := range os {
		b, _ := json.Marshal(o)
		recs[i] = &kgo.Record{Topic: "obs", Value: b}
	}
	if err := r.h.Process(0, recs...); err != nil {
		r.t.Fatal(err)
	}
}

// checkpoint commits, then delivers the partials written to the internal
// topic back to the task (as the broker would) and collects alerts.
func (r *rig) checkpoint() {
	r.t.Helper()
	if err := r.h.Checkpoint(); err != nil {
		r.t.Fatal(err)
	}
	r.committedOut, r.consumedAtCommit = len(r.h.Out), r.seen
	for r.seen < len(r.h.Out) {
		rec := r.h.Out[r.seen]
		r.seen++
		switch rec.Topic {
		case "alerts-in":
			if err := r.h.Process(1, rec); err != nil {
				r.t.Fatal(err)
			}
		case "braid.alerts":
			var a braidpb.Alert
			if err := proto.Unmarshal(rec.Value, &a); err != nil {
				r.t.Fatal(err)
			}
			if want := a.Rule + "/"; !strings.HasPrefix(string(rec.Key), want) {
				r.t.Errorf("key %s", rec.Key)
			}
			r.out = append(r.out, &a)
		}
	}
}

// change is one expected or observed lifecycle step.
type change struct {
	group string
	state braidpb.AlertState
	end   int64
}

func (c change) String() string {
	return fmt.Sprintf("%s %s @%v", c.group, c.state, time.Duration(c.end-t0))
}

// referenceLifecycle is an independent model of what the rule must
// produce: exact quantiles over the raw samples of each window, and the
// pending → firing → resolved rules written out directly.
func referenceLifecycle(samples map[string][][2]float64, q, threshold float64, window, every, forDur time.Duration, lastEnd int64) []change {
	var out []change
	groups := make([]string, 0, len(samples))
	for g := range samples {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		state, since := braidpb.AlertState(0), int64(0)
		for end := t0 + int64(every); end <= lastEnd; end += int64(every) {
			var vals []float64
			for _, s := range samples[g] {
				if ts := int64(s[0]); ts >= end-int64(window) && ts < end {
					vals = append(vals, s[1])
				}
			}
			cond := false
			if len(vals) > 0 {
				slices.Sort(vals)
				// DDSketch's quantile is the value of rank q·(n−1), floored.
				cond = vals[int(q*float64(len(vals)-1))] > threshold
			}
			switch {
			case cond && state == 0 && forDur == 0:
				state, since = braidpb.AlertState_ALERT_STATE_FIRING, end
				out = append(out, change{g, state, end})
			case cond && state == 0:
				state, since = braidpb.AlertState_ALERT_STATE_PENDING, end
				out = append(out, change{g, state, end})
			case cond && state == braidpb.AlertState_ALERT_STATE_PENDING && end-since >= int64(forDur):
				state = braidpb.AlertState_ALERT_STATE_FIRING
				out = append(out, change{g, state, end})
			case !cond && state == braidpb.AlertState_ALERT_STATE_PENDING:
				state = 0
				out = append(out, change{g, braidpb.AlertState_ALERT_STATE_INACTIVE, end})
			case !cond && state == braidpb.AlertState_ALERT_STATE_FIRING:
				state = 0
				out = append(out, change{g, braidpb.AlertState_ALERT_STATE_RESOLVED, end})
			}
		}
	}
	return out
}

func observed(out []*braidpb.Alert) []change {
	var got []change
	for _, a := range out {
		got = append(got, change{group: a.Instance, state: a.State, end: int64(a.WindowEndUnixNano)})
	}
	sort.SliceStable(got, func(i, j int) bool {
		if got[i].group != got[j].group {
			return got[i].group < got[j].group
		}
		return got[i].end < got[j].end
	})
	return got
}

// ttftWorkload: three instances, 20 minutes; vllm-1 regresses (TTFT ×6)
// from minute 4 to 9 and briefly (40 s, shorter than for) at minute 14.
func ttftWorkload(seed uint64) ([]obs, map[string][][2]float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var os []obs
	samples := map[string][][2]float64{}
	n := 0
	for ms := int64(0); ms < 20*60*1000; ms += 50 {
		inst := fmt.Sprintf("vllm-%d", rng.IntN(3))
		ts := t0 + ms*int64(time.Millisecond)
		v := math.Exp(rng.NormFloat64()*0.3) * 0.4 // ~0.4 s, p99 ≈ 0.8 s
		m := time.Duration(ms) * time.Millisecond
		if inst == "vllm-1" && (m >= 4*time.Minute && m < 9*time.Minute || m >= 14*time.Minute && m < 14*time.Minute+40*time.Second) {
			v *= 6
		}
		n++
		id := fmt.Sprintf("%032x", n)
		os = append(os, obs{Kind: "trace", Time: ts, Model: "llama", Instance: inst, ID: id, TTFT: v})
		samples[inst] = append(samples[inst], [2]float64{float64(ts), v})
	}
	return os, samples
}

var ttftRule = Rule{Name: "TTFTHigh", Expr: "p99(ttft) > 2500ms", GroupBy: []string{"model", "instance"},
	Window: time.Minute, Every: 15 * time.Second, For: 2 * time.Minute, Severity: "critical"}

func runWorkload(t *testing.T, r *rig, os []obs, restartAt int) {
	t.Helper()
	const batch = 200 // observations between checkpoints (10 s of event time)
	for i := 0; i < len(os); i += batch {
		r.feed(os[i:min(i+batch, len(os))]...)
		r.checkpoint()
		if restartAt > 0 && i/batch == restartAt {
			// Uncommitted work is lost; what was committed resumes.
			r.feed(os[min(i+batch, len(os)):min(i+2*batch, len(os))]...)
			r.restart()
		}
	}
	// A last observation far ahead closes every window.
	r.feed(obs{Kind: "sample", Time: os[len(os)-1].Time + int64(5*time.Minute), Metric: "kv_cache_usage", Instance: "x", Value: 0})
	r.checkpoint()
	r.checkpoint()
}

// TestTTFTRuleAgainstReference: the alerts the stage writes are exactly
// the lifecycle an independent model computes from the raw samples.
func TestTTFTRuleAgainstReference(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		os, samples := ttftWorkload(seed)
		r := newRig(t, []Rule{ttftRule}, 0)
		runWorkload(t, r, os, 0)
		want := referenceLifecycle(samples, 0.99, 2.5, ttftRule.Window, ttftRule.Every, ttftRule.For, os[len(os)-1].Time+int64(5*time.Minute))
		got := observed(r.out)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d: alerts\n%v\nwant\n%v", seed, got, want)
		}
		firing := 0
		for _, a := range r.out {
			if a.State == braidpb.AlertState_ALERT_STATE_FIRING {
				firing++
				if a.Instance != "vllm-1" || a.Labels["alertname"] != "TTFTHigh" || a.Labels["severity"] != "critical" || a.Labels["model"] != "llama" {
					t.Errorf("firing alert %+v", a)
				}
				if len(a.TraceIds) != 5 || a.Value == nil || *a.Value <= 2.5 || a.Threshold == nil || *a.Threshold != 2.5 || a.Episode != 1 {
					t.Errorf("firing alert lacks its evidence: %+v", a)
				}
			}
		}
		if firing != 1 {
			t.Errorf("seed %d: %d firing changes, want 1 (the brief regression is shorter than for)", seed, firing)
		}
		if c := r.stage.Counters(); c.Firing.Load() != 0 || c.Late.Load() != 0 {
			t.Errorf("seed %d: firing gauge %d, late %d", seed, c.Firing.Load(), c.Late.Load())
		}
	}
}

// TestRestartRepeatsNothing: a crash between checkpoints loses only
// uncommitted work; the alerts after the restart are those of a run
// without it, none repeated and none missing.
func TestRestartRepeatsNothing(t *testing.T) {
	os, _ := ttftWorkload(7)
	ref := newRig(t, []Rule{ttftRule}, 0)
	runWorkload(t, ref, os, 0)
	for _, at := range []int{20, 27, 40} { // before, during and after the regression fires
		r := newRig(t, []Rule{ttftRule}, 0)
		runWorkload(t, r, os, at)
		if g, w := fmt.Sprint(observed(r.out)), fmt.Sprint(observed(ref.out)); g != w {
			t.Errorf("restart after batch %d: alerts\n%s\nwant\n%s", at, g, w)
		}
	}
}

// TestIncidentRuleFiresAtOnce: an incident fires the pollution rule at the
// first window end after it, with its id and, with a view URL, the
// generatorURL of its alert page and the report_url of the incident's
// report; it resolves once a window holds none.
func TestIncidentRuleFiresAtOnce(t *testing.T) {
	rule := Rule{Name: "Pollution", Expr: "count(incident) > 0", GroupBy: []string{"gpu"}, Window: time.Minute, Every: time.Second, Severity: "critical"}
	off := false
	r := newRigWith(t, StageConfig{Alerts: Config{DefaultRules: &off, Rules: []Rule{rule}, ViewURL: "http://view:9465/"}, AllowedLateness: 30 * time.Second})
	at := t0 + int64(10*time.Second) + 300*int64(time.Millisecond)
	r.feed(obs{Kind: "incident", Time: at, GPU: "GPU-7", ID: "inc-1"},
		obs{Kind: "sample", Time: at + int64(2*time.Second), Metric: "kv_cache_usage", Instance: "x"})
	r.checkpoint()
	r.checkpoint()
	if len(r.out) != 1 || r.out[0].State != braidpb.AlertState_ALERT_STATE_FIRING || r.out[0].Gpu != "GPU-7" ||
		!slices.Equal(r.out[0].IncidentIds, []string{"inc-1"}) || r.out[0].WindowEndUnixNano != uint64(t0+int64(11*time.Second)) {
		t.Fatalf("alerts %v", r.out)
	}
	if got := r.out[0].Annotations["report_url"]; got != "http://view:9465/api/report/inc-1" {
		t.Errorf("report_url %q", got)
	}
	if got := r.out[0].Url; !strings.HasPrefix(got, "http://view:9465/alerts/Pollution/gpu=") || !strings.Contains(got, "GPU-7") {
		t.Errorf("url %q", got)
	}
	r.feed(obs{Kind: "sample", Time: at + int64(2*time.Minute), Metric: "kv_cache_usage", Instance: "x"})
	r.checkpoint()
	r.checkpoint()
	if len(r.out) != 2 || r.out[1].State != braidpb.AlertState_ALERT_STATE_RESOLVED || r.out[1].EndsAtUnixNano != uint64(t0+int64(71*time.Second)) ||
		r.out[1].StartsAtUnixNano != uint64(t0+int64(11*time.Second)) {
		t.Fatalf("alerts %v", r.out)
	}
}

// TestGrowthRule: deriv over gauge samples per GPU; only the leaking GPU
// fires.
func TestGrowthRule(t *testing.T) {
	rule := Rule{Name: "Growth", Expr: "deriv(gpu_fb_used_mib) * 1MiB * 1min > 1.2GB", GroupBy: []string{"gpu"},
		Window: time.Minute, Every: 15 * time.Second, For: 2 * time.Minute}
	r := newRig(t, []Rule{rule}, 0)
	for s := int64(0); s < 15*60; s += 5 {
		ts := t0 + s*int64(time.Second)
		leak := 0.0
		if s >= 120 && s < 600 {
			leak = float64(s-120) / 60 * 2000 // 2000 MiB/min ≈ 2.1 GB/min
		}
		r.feed(obs{Kind: "sample", Time: ts, GPU: "GPU-0", Metric: "gpu_fb_used_mib", Value: 40000 + leak},
			obs{Kind: "sample", Time: ts, GPU: "GPU-1", Metric: "gpu_fb_used_mib", Value: 40000 + float64(s%10)})
		if s%30 == 0 {
			r.checkpoint()
		}
	}
	r.feed(obs{Kind: "sample", Time: t0 + int64(30*time.Minute), GPU: "GPU-9", Metric: "gpu_fb_used_mib", Value: 1})
	r.checkpoint()
	r.checkpoint()
	var states []string
	for _, a := range r.out {
		states = append(states, a.Gpu+" "+a.State.String())
	}
	want := []string{"GPU-0 ALERT_STATE_PENDING", "GPU-0 ALERT_STATE_FIRING", "GPU-0 ALERT_STATE_RESOLVED"}
	if !slices.Equal(states, want) {
		t.Fatalf("alerts %v, want %v", states, want)
	}
}

// TestInvalidPartials: internal records that are not partial aggregates
// are rejected with a reason, never a panic.
func TestInvalidPartials(t *testing.T) {
	r := newRig(t, []Rule{ttftRule}, 0)
	p := r.h.Task()
	_ = p
	st := r.stage
	proc := st.NewProcessor(0)
	for _, rec := range []*kgo.Record{
		{Key: []byte("nonsense"), Value: []byte{1}},
		{Key: []byte(`instance="a",model="b"`), Value: nil},
		{Key: []byte(`instance="a",model="b"`), Value: []byte{1, 0x80}},
		{Key: []byte(`instance="a",model="b"`), Value: []byte{1, 2, 4, 't', 't', 'f', 't', 9, 1, 2, 3}},
		{Key: []byte(`instance="a",model="b"`), Value: []byte{1, 2, 4, 't', 't', 'f', 't', 2, 0xff, 0xff}},
	} {
		err := proc.Process(r.h.Task(), rec)
		if ie := (*InvalidError)(nil); !errors.As(err, &ie) {
			t.Errorf("%q %v: error %v, want an InvalidError", rec.Key, rec.Value, err)
		}
	}
}
