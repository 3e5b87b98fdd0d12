package alerts

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/braidlabs/braid/operators/semconv"
)

// Rule is one alert rule (YAML: an entry of alerts.rules).
type Rule struct {
	// Name identifies the rule; it is the alert's alertname. Required,
	// unique, [A-Za-z_][A-Za-z0-9_]*.
	Name string `yaml:"name"`
	// Expr is the condition (see the package documentation), evaluated
	// per group over each window, e.g. "p99(ttft) > 2500ms".
	Expr string `yaml:"expr"`
	// GroupBy: the labels that make a group, from model, instance, host,
	// gpu, service, pattern, tenant. Default [model, instance].
	GroupBy []string `yaml:"group_by"`
	// Window: how much event time each evaluation aggregates. Default 1m.
	Window time.Duration `yaml:"window"`
	// Every: how often, in event time, the window is evaluated: windows
	// end at multiples of Every. A multiple of alerts.resolution that
	// divides Window. Default 15s.
	Every time.Duration `yaml:"every"`
	// For: how long (event time) the condition must hold before the alert
	// fires; until then it is pending. 0 fires at the first window that
	// holds. Default 0.
	For time.Duration `yaml:"for"`
	// Severity: critical, warning or info. Default warning.
	Severity string `yaml:"severity"`
	// Labels are added to the alert's labels.
	Labels map[string]string `yaml:"labels"`
	// Annotations are added to the alert's annotations; "{{value}}",
	// "{{threshold}}" and "{{<label>}}" are replaced.
	Annotations map[string]string `yaml:"annotations"`
	// Action, if set, is a webhook braid posts a JSON description of the
	// action to when the alert fires (and resolves). Off by default.
	Action *Action `yaml:"action"`
	// Record makes the rule a recording rule, as Prometheus has them: the
	// value of Expr per group and window is recorded under this metric
	// name ([a-zA-Z_:][a-zA-Z0-9_:]*) with the group's labels and Labels,
	// instead of moving an alert (nothing is written to braid.alerts; For,
	// Severity, Action and Annotations are errors). Several rules may
	// record one name when their Labels differ. Default: none (an alert
	// rule).
	Record string `yaml:"record"`

	expr *compiled
}

// Action is a webhook the design names for a rule ("route traffic away
// from the instance", "take a KV-cache snapshot"): braid posts what to do,
// it does not act itself.
type Action struct {
	// Name of the action, e.g. "route_away", "kv_snapshot", "circuit_break".
	Name string `yaml:"name"`
	// URL receives a POST with a JSON body (see ActionBody).
	URL string `yaml:"url"`
	// OnResolved also posts when the alert resolves. Default false.
	OnResolved bool `yaml:"on_resolved"`
}

// Labels braid groups by.
var groupLabels = []string{"model", "instance", "host", "gpu", "service", "pattern", "tenant"}

// Trace figures: one value per fused trace (its first emission), in base
// units (seconds, tokens, 0/1 flags, ratios).
var traceFigures = []string{
	"ttft", "tpot", "e2e", "queue", "prefill", "decode", "input_tokens", "output_tokens",
	"error", "slow", "polluted", "cache_hit", "kv_usage", "guardrail_checked", "guardrail_bypass",
	"success", "blocked", "hallucination", "hallucination_score", "pii", "pii_leak",
	"jailbreak", "jailbreak_score", "toxicity", "toxicity_score", "sensitivity",
}

// flagFigures are the 0/1 figures whose 1 is what an alert is about: a
// trace with 0 is no exemplar of theirs.
var flagFigures = map[string]bool{
	"error": true, "slow": true, "polluted": true, "blocked": true, "hallucination": true, "pii": true,
	"pii_leak": true, "jailbreak": true, "toxicity": true, "guardrail_bypass": true,
}

// FigureIncident is 1 per KV-cache pollution incident (its first
// revision), grouped by gpu, host, instance and pattern.
const FigureIncident = "incident"

// knownFigure reports whether fig can be read: a trace figure, the
// incident figure, or a canonical metric name (semconv.Metrics, e.g.
// gpu_fb_used_mib, kv_cache_usage), read from resource samples.
func knownFigure(fig string) bool {
	if fig == FigureIncident || slices.Contains(traceFigures, fig) {
		return true
	}
	return isMetricFigure(fig)
}

func isMetricFigure(fig string) bool {
	for _, m := range semconv.Metrics {
		if m.Name == fig && m.Kind != semconv.Histogram && m.Kind != semconv.Info {
			return true
		}
	}
	return false
}

// HealthRule is the default rule whose value is the KV-cache health score
// (0–100); the job exports it as braid_kv_health_score (0–1).
const HealthRule = "BraidKVCacheHealthLow"

// DefaultRules are the rules braid runs unless alerts.default_rules is
// false: the design's SLO, KV-cache and safety rules, and the recording
// rules of DefaultRecordingRules.
func DefaultRules() []Rule {
	return append([]Rule{
		{
			Name: "BraidTTFTHigh", Expr: "p99(ttft) > 2500ms", GroupBy: []string{"model", "instance"},
			Window: time.Minute, Every: 15 * time.Second, For: 3 * time.Minute, Severity: "critical",
			Annotations: map[string]string{"summary": "TTFT p99 {{value}}s > {{threshold}}s on {{instance}} ({{model}})"},
		},
		{
			Name: "BraidKVMemoryGrowth", Expr: "deriv(gpu_fb_used_mib) * 1MiB * 1min > 1.2GB", GroupBy: []string{"gpu"},
			Window: time.Minute, Every: 15 * time.Second, For: 5 * time.Minute, Severity: "warning",
			Annotations: map[string]string{"summary": "GPU {{gpu}} memory grows {{value}} bytes/min"},
		},
		{
			Name: "BraidKVCacheHealthLow",
			// The design's score; a fleet whose hit rate is low by nature
			// (unique prompts) scores below 75 with nothing slow, so the
			// rule warns only while a tenth of the requests are slow too.
			Expr:    "100 * (0.5 * avg(cache_hit) + 0.3 * (1 - avg(slow)) + 0.2 * (1 - avg(kv_usage))) < 75 and avg(slow) > 0.1",
			GroupBy: []string{"model", "instance"}, Window: time.Minute, Every: 15 * time.Second, For: 5 * time.Minute,
			Severity:    "warning",
			Annotations: map[string]string{"summary": "KV-cache health score {{value}} < 75 on {{instance}}"},
		},
		{
			Name:    "BraidKVFragmentation",
			Expr:    "avg(kv_cache_fragmentation) > 0.4",
			GroupBy: []string{"instance"}, Window: time.Minute, Every: 15 * time.Second, For: time.Minute, Severity: "warning",
			Annotations: map[string]string{"summary": "KV-block fragmentation {{value}} on {{instance}}"},
		},
		{
			// The design's 0.8 % critical, with a minimum count so that one
			// bypass in a quiet window does not page.
			Name: "BraidGuardrailBypass", Expr: "sum(guardrail_bypass) / sum(guardrail_checked) > 0.8% and sum(guardrail_bypass) >= 3",
			GroupBy: []string{"model", "tenant"}, Window: 5 * time.Minute, Every: 15 * time.Second, Severity: "critical",
			Annotations: map[string]string{"summary": "guardrail bypass rate {{value}} for tenant {{tenant}} ({{model}})"},
		},
		{
			Name: "BraidPIILeak", Expr: "sum(pii_leak) > 0",
			GroupBy: []string{"model", "tenant"}, Window: time.Minute, Every: 15 * time.Second, Severity: "critical",
			Annotations: map[string]string{"summary": "{{value}} response(s) leaked PII to tenant {{tenant}} ({{model}})"},
		},
		{
			Name: "BraidKVCachePollution", Expr: "count(incident) > 0", GroupBy: []string{"gpu"},
			Window: time.Minute, Every: time.Second, Severity: "critical",
			Annotations: map[string]string{"summary": "KV-cache pollution on GPU {{gpu}}: {{value}} incident(s)"},
		},
	}, DefaultRecordingRules()...)
}

// DefaultRecordingRules are the recording rules among DefaultRules: the
// quality and safety ratios per model and tenant over 5 minutes, and the
// compliance drift of each verdict rate against its trailing week.
func DefaultRecordingRules() []Rule {
	rec := func(name, record, expr string, labels map[string]string) Rule {
		return Rule{Name: name, Record: record, Expr: expr, GroupBy: []string{"model", "tenant"},
			Window: 5 * time.Minute, Every: 15 * time.Second, Labels: labels}
	}
	rules := []Rule{
		rec("BraidRecordSuccessRatio", "braid_llm_success_ratio", "avg(success)", nil),
		rec("BraidRecordHallucinationRatio", "braid_llm_hallucination_ratio", "avg(hallucination)", nil),
		rec("BraidRecordPIILeaks", "braid_llm_pii_leaks", "sum(pii_leak)", nil),
		rec("BraidRecordJailbreakRatio", "braid_llm_jailbreak_ratio", "avg(jailbreak)", nil),
		rec("BraidRecordJailbreakConfidence", "braid_llm_jailbreak_confidence", "avg(jailbreak_score)", nil),
		rec("BraidRecordGuardrailBypassRatio", "braid_llm_guardrail_bypass_ratio", "sum(guardrail_bypass) / sum(guardrail_checked)", nil),
		rec("BraidRecordToxicityRatio", "braid_llm_toxicity_ratio", "avg(toxicity)", nil),
	}
	// One name per quantile: a gauge with a quantile label reads as a
	// summary's (promtool check metrics refuses it).
	for _, q := range []string{"50", "90", "99"} {
		rules = append(rules, rec("BraidRecordResponseSensitivityP"+q, "braid_llm_response_sensitivity_p"+q,
			"p"+q+"(sensitivity)", nil))
	}
	for _, k := range []struct{ name, fig string }{
		{"Jailbreak", "jailbreak"}, {"PII", "pii"}, {"Hallucination", "hallucination"}, {"Toxicity", "toxicity"},
	} {
		rules = append(rules, rec("BraidRecordComplianceDrift"+k.name, "braid_llm_compliance_drift",
			"avg("+k.fig+") - avg("+k.fig+", 1w)", map[string]string{"kind": k.fig}))
	}
	return rules
}

// Config configures the alerts stage (YAML: alerts).
type Config struct {
	// Disabled turns the stage off. Default false: on, with the default
	// rules.
	Disabled bool `yaml:"disabled"`
	// DefaultRules includes DefaultRules (a rule in Rules with the same
	// name replaces the default one). Default true.
	DefaultRules *bool `yaml:"default_rules"`
	// Rules are the user's rules.
	Rules []Rule `yaml:"rules"`
	// Resolution is the event-time pane windows are built from: every
	// rule's every is a multiple of it. Default 1s.
	Resolution time.Duration `yaml:"resolution"`
	// SlowTTFT: a trace whose TTFT exceeds it has the figure slow = 1.
	// Default 2.5s.
	SlowTTFT time.Duration `yaml:"slow_ttft"`
	// MaxGroups bounds the groups the stage keeps per task (memory); the
	// observations of groups beyond it are dropped and counted. Default
	// 10000.
	MaxGroups int `yaml:"max_groups"`
	// BaselineResolution is the coarse pane of the figures read with a
	// window longer than their rule's (e.g. avg(jailbreak, 1w)): such a
	// window is a multiple of it, at most 400 of them. Default 6h (a
	// week's baseline in 28 panes).
	BaselineResolution time.Duration `yaml:"baseline_resolution"`
	// Exemplars: how many trace or incident ids an alert carries (the
	// slowest, largest). Default 5.
	Exemplars int `yaml:"exemplars"`
	// ViewURL is the base of the generatorURL of the alerts braid sends
	// to Alertmanager (braid's view of the alert) and, for an alert
	// naming incidents, of its report_url annotation (the attribution
	// report of the first, ViewURL/api/report/ID). Default: none.
	ViewURL string `yaml:"view_url"`
	// Alertmanager receives the alerts.
	Alertmanager AlertmanagerConfig `yaml:"alertmanager"`
}

// AlertmanagerConfig says where alerts go.
type AlertmanagerConfig struct {
	// URLs of Alertmanagers (http://host:9093); each gets every alert, as
	// Prometheus does. Empty: alerts go to braid.alerts only.
	URLs []string `yaml:"urls"`
	// ResendInterval: firing alerts are posted again this often. Default 1m.
	ResendInterval time.Duration `yaml:"resend_interval"`
	// Timeout of one post. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.Resolution <= 0 {
		c.Resolution = time.Second
	}
	if c.SlowTTFT <= 0 {
		c.SlowTTFT = 2500 * time.Millisecond
	}
	if c.MaxGroups <= 0 {
		c.MaxGroups = 10000
	}
	if c.BaselineResolution <= 0 {
		c.BaselineResolution = 6 * time.Hour
	}
	if c.Exemplars <= 0 {
		c.Exemplars = 5
	}
	if c.Alertmanager.ResendInterval <= 0 {
		c.Alertmanager.ResendInterval = time.Minute
	}
	if c.Alertmanager.Timeout <= 0 {
		c.Alertmanager.Timeout = 10 * time.Second
	}
}

// Effective returns the rules that run: the defaults (unless turned off)
// with the user's rules replacing or adding to them, in name order,
// each with its own defaults filled in.
func (c *Config) Effective() []Rule {
	var rules []Rule
	if c.DefaultRules == nil || *c.DefaultRules {
		rules = DefaultRules()
	}
	for _, r := range c.Rules {
		if i := slices.IndexFunc(rules, func(d Rule) bool { return d.Name == r.Name }); i >= 0 {
			rules[i] = r
		} else {
			rules = append(rules, r)
		}
	}
	for i := range rules {
		r := &rules[i]
		if len(r.GroupBy) == 0 {
			r.GroupBy = []string{"model", "instance"}
		}
		if r.Window <= 0 {
			r.Window = time.Minute
		}
		if r.Every <= 0 {
			r.Every = 15 * time.Second
		}
		if r.Severity == "" && r.Record == "" {
			r.Severity = "warning"
		}
		g := slices.Clone(r.GroupBy)
		sort.Strings(g)
		r.GroupBy = slices.Compact(g)
	}
	sort.Slice(rules, func(i, j int) bool { return rules[i].Name < rules[j].Name })
	return rules
}

// Compile validates the configuration and returns the rules that run,
// compiled. Every problem is reported, not just the first.
func (c *Config) Compile() ([]Rule, error) {
	c.EnsureDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seen := map[string]bool{}
	for i, r := range c.Rules {
		if r.Name == "" {
			bad("alerts.rules[%d]: name is required", i)
		}
	}
	rules := c.Effective()
	for i := range rules {
		r := &rules[i]
		if r.Name == "" {
			continue
		}
		where := "alerts rule " + r.Name
		if seen[r.Name] {
			bad("%s: defined twice", where)
		}
		seen[r.Name] = true
		if !validName(r.Name) {
			bad("%s: name must match [A-Za-z_][A-Za-z0-9_]*", where)
		}
		if strings.TrimSpace(r.Expr) == "" {
			bad("%s: expr is required", where)
		} else if e, err := compile(r.Expr, knownFigure); err != nil {
			bad("%s: expr %q: %v", where, r.Expr, err)
		} else {
			r.expr = e
		}
		for _, l := range r.GroupBy {
			if !slices.Contains(groupLabels, l) {
				bad("%s: group_by %q is not one of %s", where, l, strings.Join(groupLabels, ", "))
			}
		}
		if r.Every%c.Resolution != 0 {
			bad("%s: every %v is not a multiple of alerts.resolution %v", where, r.Every, c.Resolution)
		}
		if r.Window%r.Every != 0 {
			bad("%s: window %v is not a multiple of every %v", where, r.Window, r.Every)
		}
		if n := r.Window / c.Resolution; n > 3600 {
			bad("%s: window %v holds %d panes of %v (at most 3600)", where, r.Window, n, c.Resolution)
		}
		if r.For < 0 {
			bad("%s: for %v is negative", where, r.For)
		}
		if r.expr != nil {
			c.checkWindows(r, where, bad)
		}
		if r.Record != "" {
			c.checkRecord(r, where, rules[:i], bad)
		} else {
			switch r.Severity {
			case "critical", "warning", "info":
			default:
				bad("%s: severity %q is not critical, warning or info", where, r.Severity)
			}
		}
		for k := range r.Labels {
			if !validName(k) || strings.HasPrefix(k, "__") {
				bad("%s: label name %q is invalid", where, k)
			}
			if r.Record != "" && (k == "quantile" || k == "le") {
				bad("%s: label %q of a recording rule reads as a summary's or a histogram's; name the record by it instead", where, k)
			}
			if k == "alertname" || k == "severity" || slices.Contains(r.GroupBy, k) || r.Record != "" && k == "record" {
				bad("%s: label %q is set by braid", where, k)
			}
		}
		if a := r.Action; a != nil {
			if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") {
				bad("%s: action url %q is not http(s)", where, a.URL)
			}
			if a.Name == "" {
				bad("%s: action name is required", where)
			}
		}
	}
	for _, u := range c.Alertmanager.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			bad("alerts.alertmanager.urls: %q is not http(s)", u)
		}
	}
	if c.Resolution < time.Millisecond {
		bad("alerts.resolution %v is below 1ms", c.Resolution)
	}
	if c.BaselineResolution%c.Resolution != 0 {
		bad("alerts.baseline_resolution %v is not a multiple of alerts.resolution %v", c.BaselineResolution, c.Resolution)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rules, nil
}

// maxBaselinePanes bounds a long window, in coarse panes.
const maxBaselinePanes = 400

// checkWindows checks the window arguments of r's expression: one no
// longer than the rule's window is a multiple of every (read from the
// fine panes); a longer one is a multiple of baseline_resolution, at most
// maxBaselinePanes of them, and baseline_resolution a multiple of every.
func (c *Config) checkWindows(r *Rule, where string, bad func(string, ...any)) {
	b := int64(c.BaselineResolution)
	long := false
	for _, fw := range r.expr.windows {
		w := time.Duration(fw.win)
		switch {
		case fw.win <= int64(r.Window):
			if fw.win%int64(r.Every) != 0 {
				bad("%s: window %v of %s is not a multiple of every %v", where, w, fw.fig, r.Every)
			}
		case fw.win%b != 0:
			bad("%s: window %v of %s is not a multiple of alerts.baseline_resolution %v", where, w, fw.fig, c.BaselineResolution)
			long = true
		case fw.win/b > maxBaselinePanes:
			bad("%s: window %v of %s holds %d panes of alerts.baseline_resolution %v (at most %d)", where, w, fw.fig,
				fw.win/b, c.BaselineResolution, maxBaselinePanes)
			long = true
		default:
			long = true
		}
	}
	if long && r.Every > 0 && b%int64(r.Every) != 0 {
		bad("%s: alerts.baseline_resolution %v is not a multiple of every %v", where, c.BaselineResolution, r.Every)
	}
}

// checkRecord checks what a recording rule may not have, its metric name,
// and that no earlier rule records the same name with the same labels.
func (c *Config) checkRecord(r *Rule, where string, before []Rule, bad func(string, ...any)) {
	if !validMetricName(r.Record) {
		bad("%s: record %q must match [a-zA-Z_:][a-zA-Z0-9_:]*", where, r.Record)
	}
	for _, p := range []string{"braid_alerts_", "braid_recorded_"} {
		if strings.HasPrefix(r.Record, p) {
			bad("%s: record %q: names %s* are braid's own metrics", where, r.Record, p)
		}
	}
	if r.For != 0 {
		bad("%s: for is not for a recording rule", where)
	}
	if r.Severity != "" {
		bad("%s: severity is not for a recording rule", where)
	}
	if r.Action != nil {
		bad("%s: action is not for a recording rule", where)
	}
	if len(r.Annotations) > 0 {
		bad("%s: annotations are not for a recording rule", where)
	}
	for _, o := range before {
		if o.Record == r.Record && maps.Equal(o.Labels, r.Labels) && slices.Equal(o.GroupBy, r.GroupBy) {
			bad("%s: record %q with the labels of rule %s: give each rule distinct labels", where, r.Record, o.Name)
		}
	}
}

// validMetricName reports whether s is a Prometheus metric name.
func validMetricName(s string) bool {
	for i, r := range s {
		if r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return s != ""
}

func validName(s string) bool {
	for i, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return s != ""
}
