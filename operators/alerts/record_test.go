package alerts

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/windows"
)

// recorded is what OnRecord got, with whether the late batch had been
// delivered by then.
type recorded struct {
	Recorded
	late bool
}

type recordSink struct {
	mu   sync.Mutex
	late bool
	got  []recorded
}

func (s *recordSink) record(r Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, recorded{Recorded: r, late: s.late})
}

// qualityObs is one raw observation of the quality workload, kept for the
// reference.
type qualityObs struct {
	tenant string
	t      int64
	figs   map[string]float64
	late   bool
}

// qualityWorkload: one model, two tenants, a trace every 1–3 s each for
// span; jailbreak and pii_leak are 0/1 with rates that change over time,
// sensitivity a score; tenant "beta" is silent for 20 minutes at the
// middle. late: traces delivered out of order, lag behind the newest
// observation, at the middle of the run.
func qualityWorkload(seed uint64, span time.Duration, lag time.Duration) (inOrder, late []qualityObs) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, tenant := range []string{"acme", "beta"} {
		for ms := int64(rng.IntN(2000)); ms < span.Milliseconds(); ms += 1000 + int64(rng.IntN(2000)) {
			m := time.Duration(ms) * time.Millisecond
			if tenant == "beta" && m > span/2-10*time.Minute && m < span/2+10*time.Minute {
				continue
			}
			rate := 0.05
			if m > span/3 && m < span/3+15*time.Minute {
				rate = 0.4 // a jailbreak campaign
			}
			figs := map[string]float64{"jailbreak": b2f(rng.Float64() < rate), "sensitivity": rng.Float64()}
			if rng.IntN(3) == 0 {
				figs["pii_leak"] = b2f(rng.Float64() < 0.1)
			}
			inOrder = append(inOrder, qualityObs{tenant: tenant, t: t0 + ms*int64(time.Millisecond), figs: figs})
		}
	}
	sort.SliceStable(inOrder, func(i, j int) bool { return inOrder[i].t < inOrder[j].t })
	mid := t0 + int64(span/2) + int64(17*time.Second)
	for i := range 12 {
		late = append(late, qualityObs{tenant: []string{"acme", "beta"}[i%2], t: mid - int64(lag) + int64(i)*int64(time.Second),
			figs: map[string]float64{"jailbreak": 1, "pii_leak": 1, "sensitivity": 0.99}, late: true})
	}
	return inOrder, late
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (o qualityObs) obs(id int) obs {
	return obs{Kind: "trace", Time: o.t, Model: "llama", Tenant: o.tenant, ID: fmt.Sprintf("%032x", id), Figs: o.figs}
}

// refValue is the reference: fn of fig over the observations of tenant
// with from ≤ t < to, by direct summation (exact quantile of rank
// ⌊q·(n−1)⌋); NaN as the stage has it for no value.
func refValue(os []qualityObs, tenant, fig, fn string, q float64, from, to int64, withLate bool) float64 {
	var vals []float64
	for _, o := range os {
		if o.tenant != tenant || o.t < from || o.t >= to || o.late && !withLate {
			continue
		}
		if v, ok := o.figs[fig]; ok {
			vals = append(vals, v)
		}
	}
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	switch fn {
	case "sum":
		return sum
	case "count":
		return float64(len(vals))
	}
	if len(vals) == 0 {
		return math.NaN()
	}
	switch fn {
	case "avg":
		return sum / float64(len(vals))
	case "quantile":
		slices.Sort(vals)
		return vals[int(q*float64(len(vals)-1))]
	}
	panic(fn)
}

// qualityRules: recording rules over 1m windows, with long windows read
// from coarse panes of 5 minutes.
func qualityRules() []Rule {
	rec := func(name, record, expr string, labels map[string]string) Rule {
		return Rule{Name: name, Record: record, Expr: expr, GroupBy: []string{"model", "tenant"},
			Window: time.Minute, Every: 15 * time.Second, Labels: labels}
	}
	return []Rule{
		rec("JailbreakRatio", "jailbreak_ratio", "avg(jailbreak)", nil),
		rec("PIILeaks", "pii_leaks", "sum(pii_leak)", nil),
		rec("SensitivityP90", "sensitivity", "p90(sensitivity)", map[string]string{"q": "0.9"}),
		rec("SensitivityP50", "sensitivity", "p50(sensitivity)", map[string]string{"q": "0.5"}),
		rec("JailbreakDrift", "drift", "avg(jailbreak) - avg(jailbreak, 1h)", map[string]string{"kind": "jailbreak"}),
		rec("PIILeaksHalfHour", "pii_leaks_30m", "sum(pii_leak, 30min)", nil),
		rec("JailbreakShort", "jailbreak_30s", "avg(jailbreak, 30s)", nil),
	}
}

const qualityCoarse = 5 * time.Minute

// qualityReference is the value rule must have recorded for tenant over
// the window ending at end: the rule's window [end−1m, end), or a long
// window W read as [ceil(end−W, coarse), end).
func qualityReference(os []qualityObs, rule, tenant string, end int64, withLate bool) float64 {
	win := func(fig, fn string, q float64, w time.Duration) float64 {
		from := end - int64(w)
		if w > time.Minute {
			from = ceilTo(from, int64(qualityCoarse))
		}
		return refValue(os, tenant, fig, fn, q, from, end, withLate)
	}
	switch rule {
	case "JailbreakRatio":
		return win("jailbreak", "avg", 0, time.Minute)
	case "PIILeaks":
		return win("pii_leak", "sum", 0, time.Minute)
	case "SensitivityP90":
		return win("sensitivity", "quantile", 0.9, time.Minute)
	case "SensitivityP50":
		return win("sensitivity", "quantile", 0.5, time.Minute)
	case "JailbreakDrift":
		return win("jailbreak", "avg", 0, time.Minute) - win("jailbreak", "avg", 0, time.Hour)
	case "PIILeaksHalfHour":
		return win("pii_leak", "sum", 0, 30*time.Minute)
	case "JailbreakShort":
		return win("jailbreak", "avg", 0, 30*time.Second)
	}
	panic(rule)
}

func close2(got, want float64, rel float64) bool {
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.IsNaN(got) && math.IsNaN(want)
	}
	return math.Abs(got-want) <= 1e-9+rel*math.Abs(want)
}

type qualityRun struct {
	sink *recordSink
	rig  *rig
	// coarseAtRestart: coarse panes the restored processor held.
	coarseAtRestart int
}

// runQuality feeds the workload in batches of 10 s of event time, a
// checkpoint after each (the partials reach the owner), the late traces
// once the run is past them by their lag; restartAt > 0: a crash after
// that batch, losing the next one (fed again after the restart).
func runQuality(t *testing.T, inOrder, late []qualityObs, restartAt int) *qualityRun {
	t.Helper()
	off := false
	run := &qualityRun{sink: &recordSink{}}
	cfg := StageConfig{Alerts: Config{DefaultRules: &off, Rules: qualityRules(), BaselineResolution: qualityCoarse},
		Delay: 30 * time.Second, AllowedLateness: 3 * time.Minute, OnRecord: run.sink.record}
	r := newRigWith(t, cfg)
	run.rig = r
	var batches [][]obs
	id, lateAt := 0, late[len(late)-1].t+int64(45*time.Second)
	lateBatch := -1
	for i := 0; i < len(inOrder); {
		end := inOrder[i].t + int64(10*time.Second)
		var b []obs
		for ; i < len(inOrder) && inOrder[i].t < end; i++ {
			id++
			b = append(b, inOrder[i].obs(id))
		}
		batches = append(batches, b)
		if lateBatch < 0 && end > lateAt {
			lateBatch = len(batches)
			var lb []obs
			for _, o := range late {
				id++
				lb = append(lb, o.obs(id))
			}
			batches = append(batches, lb)
		}
	}
	for i := 0; i < len(batches); i++ {
		r.feed(batches[i]...)
		if i == lateBatch {
			run.sink.mu.Lock()
			run.sink.late = true
			run.sink.mu.Unlock()
		}
		r.checkpoint()
		if restartAt > 0 && i == restartAt && i+1 < len(batches) && i+1 != lateBatch {
			r.feed(batches[i+1]...)
			r.restart()
			for _, g := range r.proc.owned {
				run.coarseAtRestart += len(g.coarse)
			}
		}
	}
	// A last observation far ahead closes every window.
	r.feed(obs{Kind: "sample", Time: inOrder[len(inOrder)-1].t + int64(5*time.Minute), Metric: "kv_cache_usage", Instance: "x"})
	r.checkpoint()
	r.checkpoint()
	return run
}

// checkQuality compares every recorded value with the reference, and the
// windows evaluated with those holding data.
func checkQuality(t *testing.T, name string, run *qualityRun, all []qualityObs) map[string]float64 {
	t.Helper()
	last := map[string]float64{}
	bad := 0
	for _, g := range run.sink.got {
		tenant := g.Labels["tenant"]
		if g.Labels["model"] != "llama" || g.Window != time.Minute {
			t.Fatalf("%s: recorded %+v", name, g)
		}
		want := qualityReference(all, g.Rule, tenant, g.WindowEnd, g.late)
		rel := 0.0
		if strings.HasPrefix(g.Rule, "Sensitivity") {
			rel = 2 * windows.RelativeAccuracy
		}
		if !close2(g.Value, want, rel) {
			if bad++; bad <= 10 {
				t.Errorf("%s: %s %s @%v (late delivered %v) = %v, want %v", name, g.Rule, tenant, time.Duration(g.WindowEnd-t0), g.late, g.Value, want)
			}
		}
		last[fmt.Sprintf("%s/%s/%d", g.Rule, tenant, g.WindowEnd)] = g.Value
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d values differ from the reference", name, bad, len(run.sink.got))
	}
	// Windows: every end (multiple of every) whose rule window holds data
	// of the tenant, and no other, for every rule.
	var lastT int64
	for _, o := range all {
		lastT = max(lastT, o.t)
	}
	for _, rule := range qualityRules() {
		for _, tenant := range []string{"acme", "beta"} {
			for end := t0 + int64(rule.Every); end <= lastT+int64(2*time.Minute); end += int64(rule.Every) {
				inOrder, any := false, false
				for _, o := range all {
					if o.tenant == tenant && o.t >= end-int64(rule.Window) && o.t < end {
						any = true
						inOrder = inOrder || !o.late
					}
				}
				// Late data revises the last window evaluated only: a
				// window already passed when it came is not evaluated for it.
				_, got := last[fmt.Sprintf("%s/%s/%d", rule.Name, tenant, end)]
				if inOrder && !got || got && !any {
					t.Fatalf("%s: %s %s @%v: evaluated %v, window holds data %v (in order %v)", name, rule.Name, tenant, time.Duration(end-t0), got, any, inOrder)
				}
			}
		}
	}
	if n := len(run.rig.out); n != 0 {
		t.Errorf("%s: recording rules wrote %d alerts", name, n)
	}
	if n := run.rig.stage.Counters().Late.Load(); n != 0 {
		t.Errorf("%s: %d partials dropped late (the late traces are within allowed lateness)", name, n)
	}
	return last
}

// TestRecordingRulesAgainstReference: the values recording rules record
// are, window by window, those computed from the raw observations by
// direct summation — for the rule's own window, a shorter one, and long
// windows read from coarse panes — with late data within allowed
// lateness revising the last window, and across a crash and restore of
// the state (coarse panes included), which repeats nothing wrong and
// loses nothing.
func TestRecordingRulesAgainstReference(t *testing.T) {
	inOrder, late := qualityWorkload(3, 150*time.Minute, 150*time.Second)
	all := append(slices.Clone(inOrder), late...)
	ref := checkQuality(t, "no restart", runQuality(t, inOrder, late, 0), all)
	revised := 0
	for _, g := range runQuality(t, inOrder, late, 0).sink.got {
		if g.late && g.WindowEnd < late[len(late)-1].t+int64(time.Minute) {
			revised++
		}
	}
	if revised == 0 {
		t.Fatal("the late traces revised no window")
	}
	for _, at := range []int{420, 500} { // after an hour of data: coarse panes exist; around the late batch
		run := runQuality(t, inOrder, late, at)
		got := checkQuality(t, fmt.Sprintf("restart after batch %d", at), run, all)
		if run.coarseAtRestart == 0 {
			t.Errorf("restart after batch %d: the restored state has no coarse panes", at)
		}
		if len(got) != len(ref) {
			t.Errorf("restart after batch %d: %d windows recorded, %d without the restart", at, len(got), len(ref))
		}
		for k, v := range ref {
			if g, ok := got[k]; !ok || !close2(g, v, 1e-12) {
				t.Errorf("restart after batch %d: %s = %v, %v without the restart", at, k, g, v)
				break
			}
		}
	}
}

// TestCoarseTierBounded: coarse panes are kept for the longest long
// window plus allowed lateness, no longer; fine panes for the rule
// windows only.
func TestCoarseTierBounded(t *testing.T) {
	inOrder, late := qualityWorkload(5, 150*time.Minute, 150*time.Second)
	run := runQuality(t, inOrder, late, 0)
	p := run.rig.proc
	h := p.horizon()
	coarse := 0
	for _, g := range p.owned {
		coarse += len(g.coarse)
	}
	if coarse == 0 {
		t.Fatal("no coarse panes at the end")
	}
	for key, g := range p.owned {
		set := &p.s.sets[g.set]
		for c := range g.coarse {
			if c%int64(qualityCoarse) != 0 || c+set.longest+int64(p.s.cfg.AllowedLateness) <= h {
				t.Errorf("%s: coarse pane %v kept at horizon %v", key, time.Duration(c-t0), time.Duration(h-t0))
			}
		}
		if n := len(g.coarse); n > int(time.Hour/qualityCoarse)+1 {
			t.Errorf("%s: %d coarse panes", key, n)
		}
		for pn := range g.panes {
			if pn+set.span+int64(p.s.cfg.AllowedLateness) <= h {
				t.Errorf("%s: fine pane %v kept", key, time.Duration(pn-t0))
			}
		}
	}
}

// TestStateRoundTrip: a group's encoding, coarse panes included, decodes
// to the same group; the version 1 encoding (no coarse tier) still
// decodes; unknown versions and truncations are errors, never panics.
func TestStateRoundTrip(t *testing.T) {
	off := false
	st, err := NewStage(StageConfig{Alerts: Config{DefaultRules: &off, Rules: qualityRules(), BaselineResolution: qualityCoarse},
		Topic: "in", OutputTopic: "out"})
	if err != nil {
		t.Fatal(err)
	}
	p := st.NewProcessor(0)
	k, set := st.set([]string{"model", "tenant"})
	labels := Labels{Model: "llama", Tenant: "acme"}
	key, _ := groupKey(nil, set.labels, &labels)
	g := &owned{key: string(key), set: k, labels: labels, paneSet: paneSet{labels: labels, panes: map[int64][]*windows.Agg{}},
		alerts: make([]alertState, len(set.rules))}
	for i := range 40 {
		pn := t0 + int64(i)*set.resolution
		aggs := make([]*windows.Agg, len(set.figures))
		for f := range set.figures {
			a := set.newAgg(f)
			a.Add(pn+1, float64(i%3)/2, fmt.Sprintf("%032x", i))
			aggs[f] = a
		}
		g.panes[pn] = aggs
	}
	g.alerts[2] = alertState{lastEnd: t0 + int64(10*time.Minute)}
	for pn := t0; pn < t0+int64(20)*set.resolution; pn += set.resolution {
		p.fold(g, set, pn)
		delete(g.panes, pn)
	}
	if len(g.coarse) == 0 {
		t.Fatal("nothing folded")
	}
	b := p.encodeGroup(g)
	got, err := p.decodeGroup(g.key, b)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, a, b map[int64][]*windows.Agg) {
		if len(a) != len(b) {
			t.Fatalf("%s: %d panes, want %d", what, len(a), len(b))
		}
		for pn, aggs := range b {
			for i, x := range aggs {
				y := a[pn][i]
				if (x == nil) != (y == nil) || x != nil && string(x.AppendBinary(nil)) != string(y.AppendBinary(nil)) {
					t.Fatalf("%s: pane %v figure %d differs", what, time.Duration(pn-t0), i)
				}
			}
		}
	}
	same("fine", got.panes, g.panes)
	same("coarse", got.coarse, g.coarse)
	if !slices.Equal(got.alerts, g.alerts) {
		t.Errorf("alerts %v, want %v", got.alerts, g.alerts)
	}
	// Version 1: the same without the coarse section.
	g.coarse = nil
	v2 := p.encodeGroup(g)
	v1 := append([]byte{1}, v2[1:len(v2)-1]...) // the last byte: no coarse panes
	got, err = p.decodeGroup(g.key, v1)
	if err != nil {
		t.Fatal(err)
	}
	same("fine (version 1)", got.panes, g.panes)
	if len(got.coarse) != 0 || !slices.Equal(got.alerts, g.alerts) {
		t.Errorf("version 1: coarse %d, alerts %v", len(got.coarse), got.alerts)
	}
	if _, err := p.decodeGroup(g.key, append([]byte{9}, v2[1:]...)); err == nil || !strings.Contains(err.Error(), "unknown version") {
		t.Errorf("version 9: %v", err)
	}
	for n := 1; n < len(b); n += 7 {
		if _, err := p.decodeGroup(g.key, b[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
}

// TestRecordCompileErrors: what a recording rule may not have, bad record
// names, records sharing labels, bad window arguments: all reported.
func TestRecordCompileErrors(t *testing.T) {
	off := false
	c := Config{DefaultRules: &off, BaselineResolution: time.Hour, Rules: []Rule{
		{Name: "A", Record: "1bad", Expr: "avg(success)", For: time.Minute, Severity: "critical",
			Action: &Action{Name: "x", URL: "http://x"}, Annotations: map[string]string{"summary": "x"}},
		{Name: "B", Record: "r", Expr: "avg(success)", Labels: map[string]string{"k": "1"}},
		{Name: "C", Record: "r", Expr: "avg(blocked)", Labels: map[string]string{"k": "1"}},
		{Name: "D", Record: "braid_alerts_x", Expr: "avg(success)", Labels: map[string]string{"record": "x"}},
		{Name: "E", Expr: "avg(jailbreak) - avg(jailbreak, 90min) > 0"},
		{Name: "F", Expr: "avg(jailbreak, 401h) > 0"},
		{Name: "G", Expr: "avg(jailbreak, 20s) > 0"},
		{Name: "H", Expr: "avg(jailbreak, 2h) > 0", Every: 7 * time.Second, Window: 7 * time.Minute},
		{Name: "I", Expr: "avg(jailbreak, 5ms) > 0"},
		{Name: "J", Expr: "avg(jailbreak, 5) > 0"},
		{Name: "K", Expr: "avg(jailbreak, -1h) > 0"},
		{Name: "L", Record: "r", Expr: "avg(jailbreak, 1w) - avg(jailbreak)", Labels: map[string]string{"k": "2"}},
		{Name: "M", Record: "m", Expr: "p99(sensitivity)", Labels: map[string]string{"quantile": "0.99"}},
	}}
	_, err := c.Compile()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`rule A: record "1bad" must match`, "rule A: for is not for a recording rule", "rule A: severity is not for a recording rule",
		"rule A: action is not for a recording rule", "rule A: annotations are not for a recording rule",
		`rule C: record "r" with the labels of rule B`, `rule D: record "braid_alerts_x": names braid_alerts_* are braid's own`,
		`rule D: label "record" is set by braid`,
		`rule M: label "quantile" of a recording rule reads as a summary's`,
		"rule E: window 1h30m0s of jailbreak is not a multiple of alerts.baseline_resolution 1h0m0s",
		"rule F: window 401h0m0s of jailbreak holds 401 panes of alerts.baseline_resolution 1h0m0s (at most 400)",
		"rule G: window 20s of jailbreak is not a multiple of every 15s",
		"rule H: alerts.baseline_resolution 1h0m0s is not a multiple of every 7s",
		`rule I: expr "avg(jailbreak, 5ms) > 0": at 16: window "5ms" needs a unit s, min, h, d or w`,
		`rule J: expr "avg(jailbreak, 5) > 0": at 16: window "5" needs a unit`,
		"rule K: expr \"avg(jailbreak, -1h) > 0\": at 16: a window must be a duration",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "alerts rule L:") || strings.Contains(err.Error(), "alerts rule B:") {
		t.Errorf("valid rules reported:\n%v", err)
	}
	c = Config{DefaultRules: &off, BaselineResolution: 1500 * time.Millisecond, Resolution: time.Second,
		Rules: []Rule{{Name: "A", Expr: "avg(success) > 0"}}}
	if _, err := c.Compile(); err == nil || !strings.Contains(err.Error(), "alerts.baseline_resolution 1.5s is not a multiple of alerts.resolution 1s") {
		t.Errorf("baseline resolution: %v", err)
	}
}

// TestWindowArgumentParse: a window argument in each unit, and the
// figures and windows an expression reads.
func TestWindowArgumentParse(t *testing.T) {
	for src, want := range map[string]int64{
		"avg(jailbreak, 1w)":      int64(7 * 24 * time.Hour),
		"sum(pii_leak, 24h)":      int64(24 * time.Hour),
		"sum(pii_leak, 2d)":       int64(48 * time.Hour),
		"p99(ttft, 90min)":        int64(90 * time.Minute),
		"quantile(0.5, e2e, 30s)": int64(30 * time.Second),
	} {
		e, err := compile(src, knownFigure)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if len(e.windows) != 1 || e.windows[0].win != want {
			t.Errorf("%s: windows %v, want %v", src, e.windows, want)
		}
	}
	e, err := compile("avg(jailbreak) - avg(jailbreak, 1w) + avg(toxicity, 1w) - avg(jailbreak, 1w)", knownFigure)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.figures, []string{"jailbreak", "toxicity"}) || len(e.windows) != 2 {
		t.Errorf("figures %v windows %v", e.figures, e.windows)
	}
	w := fixed{"avg(jailbreak)": 0.3, "avg(jailbreak, 168h0m0s)": 0.1, "avg(toxicity, 168h0m0s)": 0.05}
	if got := e.root.eval(w); math.Abs(got-(0.3-0.1+0.05-0.1)) > 1e-12 {
		t.Errorf("value %v", got)
	}
}

// TestDefaultSafetyRules: the default guardrail-bypass rule pages per
// model and tenant at a bypass rate over 0.8 % with at least 3 bypasses
// in 5 minutes, not on one bypass in a quiet window; the PII-leak rule
// fires on one leak and names the tenant; the default recording rules
// record their names with their labels.
func TestDefaultSafetyRules(t *testing.T) {
	sink := &recordSink{}
	r := newRigWith(t, StageConfig{Delay: 0, AllowedLateness: 30 * time.Second, OnRecord: sink.record})
	id := 0
	trace := func(s float64, tenant string, figs map[string]float64) obs {
		id++
		return obs{Kind: "trace", Time: t0 + int64(s*float64(time.Second)), Model: "llama", Instance: "vllm-0", Tenant: tenant,
			ID: fmt.Sprintf("%032x", id), Figs: figs}
	}
	var os []obs
	for s := 0.0; s < 600; s += 2 {
		// quiet: one bypass among 30 checked in 5 minutes (3 %, but one);
		// busy: 3 bypasses among 150 from minute 6 (2 %).
		q := map[string]float64{"guardrail_checked": 1, "guardrail_bypass": b2f(s == 100), "success": 1, "jailbreak": 0, "sensitivity": 0.5}
		b := map[string]float64{"guardrail_checked": 1, "guardrail_bypass": b2f(s == 360 || s == 370 || s == 380), "success": b2f(s != 200)}
		if s == 450 {
			b["pii_leak"] = 1
		}
		if int(s)%10 == 0 {
			os = append(os, trace(s, "quiet", q))
		}
		os = append(os, trace(s+1, "busy", b))
	}
	for i := 0; i < len(os); i += 20 {
		r.feed(os[i:min(i+20, len(os))]...)
		r.checkpoint()
	}
	r.feed(obs{Kind: "sample", Time: t0 + int64(20*time.Minute), Metric: "kv_cache_usage", Instance: "x"})
	r.checkpoint()
	r.checkpoint()
	var got []string
	for _, a := range r.out {
		got = append(got, fmt.Sprintf("%s %s %s", a.Rule, a.Labels["tenant"], a.State))
		if a.Rule == "BraidPIILeak" && a.State == braidpb.AlertState_ALERT_STATE_FIRING && !strings.Contains(a.Annotations["summary"], "tenant busy") {
			t.Errorf("PII leak summary %q", a.Annotations["summary"])
		}
	}
	want := []string{
		"BraidGuardrailBypass busy ALERT_STATE_FIRING", "BraidPIILeak busy ALERT_STATE_FIRING",
		"BraidPIILeak busy ALERT_STATE_RESOLVED", "BraidGuardrailBypass busy ALERT_STATE_RESOLVED",
	}
	if !slices.Equal(got, want) {
		t.Errorf("alerts\n%v\nwant\n%v", got, want)
	}
	series := map[string]bool{}
	for _, g := range sink.got {
		k := g.Record
		for _, l := range []string{"quantile", "kind"} {
			if v, ok := g.Labels[l]; ok {
				k += "{" + l + "=" + v + "}"
			}
		}
		series[k] = true
		if g.Labels["model"] != "llama" || g.Labels["tenant"] == "" || g.Window != 5*time.Minute {
			t.Fatalf("recorded %+v", g)
		}
	}
	for _, w := range []string{"braid_llm_success_ratio", "braid_llm_hallucination_ratio", "braid_llm_pii_leaks", "braid_llm_jailbreak_ratio",
		"braid_llm_jailbreak_confidence", "braid_llm_guardrail_bypass_ratio", "braid_llm_toxicity_ratio",
		"braid_llm_response_sensitivity_p50", "braid_llm_response_sensitivity_p90", "braid_llm_response_sensitivity_p99",
		"braid_llm_compliance_drift{kind=jailbreak}", "braid_llm_compliance_drift{kind=pii}", "braid_llm_compliance_drift{kind=hallucination}",
		"braid_llm_compliance_drift{kind=toxicity}"} {
		if !series[w] {
			t.Errorf("no %s recorded (got %v)", w, slices.Sorted(maps.Keys(series)))
		}
	}
	help := r.stage.RecordHelp()
	if h := help["braid_llm_response_sensitivity_p50"]; !strings.Contains(h, `p50(sensitivity) over 5m per model, tenant (rule BraidRecordResponseSensitivityP50)`) {
		t.Errorf("help %q", h)
	}
	if h := help["braid_llm_compliance_drift"]; !strings.Contains(h, "avg(jailbreak) - avg(jailbreak, 1w)") {
		t.Errorf("help %q", h)
	}
}
