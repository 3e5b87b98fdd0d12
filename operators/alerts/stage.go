package alerts

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/braidlabs/braid/windows"
)

// Labels are what an observation says about where it comes from; a rule's
// group is the values of its group_by labels.
type Labels struct {
	Model, Instance, Host, GPU, Service, Pattern, Tenant string
}

func (l *Labels) get(name string) string {
	switch name {
	case "model":
		return l.Model
	case "instance":
		return l.Instance
	case "host":
		return l.Host
	case "gpu":
		return l.GPU
	case "service":
		return l.Service
	case "pattern":
		return l.Pattern
	case "tenant":
		return l.Tenant
	}
	return ""
}

func (l *Labels) set(name, v string) {
	switch name {
	case "model":
		l.Model = v
	case "instance":
		l.Instance = v
	case "host":
		l.Host = v
	case "gpu":
		l.GPU = v
	case "service":
		l.Service = v
	case "pattern":
		l.Pattern = v
	case "tenant":
		l.Tenant = v
	}
}

// maxLabelBytes bounds a label value in a group key.
const maxLabelBytes = 256

// groupKey appends the canonical group of l for the label names (sorted):
// name="value" pairs joined by commas, as Prometheus writes a label set.
// ok is false when a label is empty: the observation is not in the group.
func groupKey(dst []byte, names []string, l *Labels) ([]byte, bool) {
	for i, n := range names {
		v := l.get(n)
		if v == "" {
			return dst, false
		}
		if len(v) > maxLabelBytes {
			v = v[:maxLabelBytes]
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, n...)
		dst = append(dst, '=')
		dst = appendQuote(dst, v)
	}
	return dst, true
}

// appendQuote is strconv.AppendQuote, without its rune-by-rune walk for
// the common value: printable ASCII with no quote or backslash, which it
// writes as is between quotes.
func appendQuote(dst []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return strconv.AppendQuote(dst, v)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, v...)
	return append(dst, '"')
}

// parseGroupKey is the inverse of groupKey.
func parseGroupKey(key string) (names []string, l Labels, err error) {
	for rest := key; rest != ""; {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, l, fmt.Errorf("alerts: group %q: no label name", key)
		}
		name := rest[:eq]
		if !slices.Contains(groupLabels, name) {
			return nil, l, fmt.Errorf("alerts: group %q: unknown label %q", key, name)
		}
		q, err := strconv.QuotedPrefix(rest[eq+1:])
		if err != nil {
			return nil, l, fmt.Errorf("alerts: group %q: %w", key, err)
		}
		v, _ := strconv.Unquote(q)
		l.set(name, v)
		names = append(names, name)
		rest = rest[eq+1+len(q):]
		if rest != "" {
			if rest[0] != ',' {
				return nil, l, fmt.Errorf("alerts: group %q: want a comma", key)
			}
			rest = rest[1:]
		}
	}
	if len(names) == 0 || !slices.IsSorted(names) {
		return nil, l, fmt.Errorf("alerts: group %q: labels not in order", key)
	}
	return names, l, nil
}

// groupSet is the rules that share one group_by list: their observations
// travel and are kept together.
type groupSet struct {
	labels  []string
	rules   []int    // indexes into Stage.rules
	figures []string // figures the rules read
	// sketch: per figure, whether a rule takes a quantile of it (only
	// those aggregates keep a sketch).
	sketch []bool
	// exemplar: per figure, whether it is a rule's first figure (an
	// alert's exemplars are its first figure's: only those keep ids).
	exemplar []bool
	// traceFig maps a trace figure (index into traceFigures) to its index
	// in figures, -1 when no rule of the set reads it.
	traceFig []int
	incident int // index of FigureIncident in figures, -1
	// resolution: the pane, ns (the gcd of the rules' every).
	resolution int64
	// span: the longest window of the set, ns.
	span int64
	// long: per figure, its index in the coarse panes when a rule reads
	// it over a window longer than the rule's, else -1; longFigs, those
	// figures (indexes into figures), in that order.
	long     []int
	longFigs []int
	// longest: the longest such window, ns (0: no coarse panes); coarse:
	// the coarse pane, ns (alerts.baseline_resolution).
	longest, coarse int64
}

func (s *groupSet) figure(name string) int { return slices.Index(s.figures, name) }

// newAgg returns an empty aggregate for figure f.
func (s *groupSet) newAgg(f int) *windows.Agg { return &windows.Agg{NoSketch: !s.sketch[f]} }

// Counters are the stage's live counters, shared by its tasks.
type Counters struct {
	// Observations taken (a trace, a sample, an incident, per group).
	Observations atomic.Int64
	// Partials: records of partial aggregates written to the internal topic.
	Partials atomic.Int64
	// Late: partial aggregates that came after their windows were
	// evaluated and allowed lateness had passed (dropped).
	Late atomic.Int64
	// Revised: window evaluations repeated because late data changed them.
	Revised atomic.Int64
	// Overflow: observations dropped because a task held MaxGroups groups.
	Overflow atomic.Int64
	// Invalid: internal records that could not be read (dead-lettered).
	Invalid atomic.Int64
	// Evaluations of a rule over a group's window.
	Evaluations atomic.Int64
	// Changes: alert state changes written to braid.alerts.
	Changes atomic.Int64
	// Firing: alerts firing now (over the tasks).
	Firing atomic.Int64
	// Shifted: traces observed later than their end (their emission came
	// after the task's watermark had passed it: see the fuse stage); ShiftMax,
	// the largest such shift, ns of event time.
	Shifted  atomic.Int64
	ShiftMax atomic.Int64
	// Groups held by the owners now; Bytes, their memory (approximate).
	Groups atomic.Int64
	Bytes  atomic.Int64
}

// StageConfig wires the stage into a job.
type StageConfig struct {
	Alerts Config
	// Topic is the internal topic of partial aggregates (keyed by group),
	// OutputTopic braid.alerts; OutputPartitions its partition count.
	Topic, OutputTopic string
	OutputPartitions   int32
	// Partitions: the tasks (partitions of Topic).
	Partitions int32
	// Delay: an owner evaluates a window once its watermark is past the
	// window's end plus Delay (the fuse stage's idle gap plus its
	// out-of-orderness: a trace is observed when it is emitted, that long
	// after its last event).
	Delay time.Duration
	// AllowedLateness: partial aggregates up to this far behind the
	// evaluated windows still revise them; later ones are dropped (Late).
	AllowedLateness time.Duration
	// MaxRecordBytes bounds every record written.
	MaxRecordBytes int
	// OnValue, when set, is called with the value of a rule's expression
	// (the left side of its comparison) at each evaluation, by the owner
	// of the group, e.g. to export the KV-cache health score as a gauge.
	// It must be safe for concurrent use.
	OnValue func(rule string, group Labels, value float64)
	// OnRecord, when set, is called with the value of each recording
	// rule (Rule.Record) at each evaluation of a group's window, NaN
	// included (the window has no value: the series has none now), by the
	// owner of the group; a window evaluated again because late data
	// revised it is recorded again with the same WindowEnd. It must be
	// safe for concurrent use.
	OnRecord func(Recorded)
}

// Recorded is one value of a recording rule.
type Recorded struct {
	// Record is the metric name, Rule the rule's name.
	Record, Rule string
	// Labels: the group's labels (the rule's group_by) and the rule's
	// labels.
	Labels map[string]string
	// Value of the rule's expression over the window; NaN when it has
	// none.
	Value float64
	// WindowEnd: event time the window ends, unix ns; Window, the rule's
	// window.
	WindowEnd int64
	Window    time.Duration
}

// Stage is the compiled alerts stage, shared by the tasks of a job.
type Stage struct {
	cfg   StageConfig
	rules []Rule
	sets  []groupSet
	// ruleSet, rulePos: per rule, its set and its index in the set's rules.
	ruleSet, rulePos []int
	// wants: every figure some rule reads (asked per sample and per trace).
	wants map[string]bool
	c     Counters
}

// NewStage compiles the rules; every problem is reported.
func NewStage(cfg StageConfig) (*Stage, error) {
	rules, err := cfg.Alerts.Compile()
	if err != nil {
		return nil, err
	}
	if cfg.Topic == "" || cfg.OutputTopic == "" {
		return nil, fmt.Errorf("alerts: topics are required")
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.OutputPartitions <= 0 {
		cfg.OutputPartitions = cfg.Partitions
	}
	if cfg.MaxRecordBytes <= 0 {
		cfg.MaxRecordBytes = 1 << 20
	}
	s := &Stage{cfg: cfg, rules: rules, wants: map[string]bool{}}
	for i := range rules {
		r := &rules[i]
		k := slices.IndexFunc(s.sets, func(g groupSet) bool { return slices.Equal(g.labels, r.GroupBy) })
		if k < 0 {
			s.sets = append(s.sets, groupSet{labels: r.GroupBy})
			k = len(s.sets) - 1
		}
		g := &s.sets[k]
		s.ruleSet = append(s.ruleSet, k)
		s.rulePos = append(s.rulePos, len(g.rules))
		g.rules = append(g.rules, i)
		for i, f := range r.expr.figures {
			if !slices.Contains(g.figures, f) {
				g.figures = append(g.figures, f)
				g.sketch = append(g.sketch, false)
				g.exemplar = append(g.exemplar, false)
			}
			if i == 0 && r.Record == "" {
				g.exemplar[g.figure(f)] = true
			}
			if r.expr.quantiles[f] {
				g.sketch[g.figure(f)] = true
			}
			s.wants[f] = true
		}
		g.resolution = gcd(g.resolution, int64(r.Every))
		g.span = max(g.span, int64(r.Window))
	}
	for k := range s.sets {
		g := &s.sets[k]
		g.long = slices.Repeat([]int{-1}, len(g.figures))
		for _, ri := range g.rules {
			r := &rules[ri]
			for _, fw := range r.expr.windows {
				if fw.win <= int64(r.Window) {
					continue
				}
				f := g.figure(fw.fig)
				if g.long[f] < 0 {
					g.long[f] = len(g.longFigs)
					g.longFigs = append(g.longFigs, f)
				}
				g.longest = max(g.longest, fw.win)
				g.coarse = int64(cfg.Alerts.BaselineResolution)
			}
		}
		g.traceFig = make([]int, len(traceFigures))
		for i, f := range traceFigures {
			g.traceFig[i] = g.figure(f)
		}
		g.incident = g.figure(FigureIncident)
	}
	return s, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// SetOnValue sets StageConfig.OnValue; call it before the stage runs.
func (s *Stage) SetOnValue(f func(rule string, group Labels, value float64)) { s.cfg.OnValue = f }

// SetOnRecord sets StageConfig.OnRecord; call it before the stage runs.
func (s *Stage) SetOnRecord(f func(Recorded)) { s.cfg.OnRecord = f }

// RecordHelp returns, per record name of the recording rules, a help text
// naming the rules that record it and their expressions, e.g.
// "Recorded by braid: avg(success) over 5m per model, tenant (rule
// BraidRecordSuccessRatio)."
func (s *Stage) RecordHelp() map[string]string {
	parts := map[string][]string{}
	for i := range s.rules {
		r := &s.rules[i]
		if r.Record == "" {
			continue
		}
		d := r.Expr + " over " + formatDuration(r.Window) + " per " + strings.Join(r.GroupBy, ", ")
		if len(r.Labels) > 0 {
			keys := slices.Sorted(maps.Keys(r.Labels))
			var ls []string
			for _, k := range keys {
				ls = append(ls, k+"="+strconv.Quote(r.Labels[k]))
			}
			d += " {" + strings.Join(ls, ",") + "}"
		}
		parts[r.Record] = append(parts[r.Record], d+" (rule "+r.Name+")")
	}
	help := make(map[string]string, len(parts))
	for rec, ps := range parts {
		help[rec] = "Recorded by braid: " + strings.Join(ps, "; ") + "."
	}
	return help
}

// formatDuration writes d as "5m", "1h", "1m30s" (time.Duration's form
// without zero tails).
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Rules returns the compiled rules, in name order.
func (s *Stage) Rules() []Rule { return s.rules }

// Counters returns the live counters.
func (s *Stage) Counters() *Counters { return &s.c }

// Config returns the stage's configuration.
func (s *Stage) Config() StageConfig { return s.cfg }

// set returns the group set of the label names, or nil.
func (s *Stage) set(names []string) (int, *groupSet) {
	for k := range s.sets {
		if slices.Equal(s.sets[k].labels, names) {
			return k, &s.sets[k]
		}
	}
	return -1, nil
}

// Trace figure indexes (traceFigures).
const (
	FigTTFT = iota
	FigTPOT
	FigE2E
	FigQueue
	FigPrefill
	FigDecode
	FigInputTokens
	FigOutputTokens
	FigError
	FigSlow
	FigPolluted
	FigCacheHit
	FigKVUsage
	FigGuardrailChecked
	FigGuardrailBypass
	FigSuccess
	FigBlocked
	FigHallucination
	FigHallucinationScore
	FigPII
	FigPIILeak
	FigJailbreak
	FigJailbreakScore
	FigToxicity
	FigToxicityScore
	FigSensitivity
	NumTraceFigures
)

// TraceObs is one fused trace as the alerts stage sees it.
type TraceObs struct {
	Labels Labels
	// Time: event time of the trace's end, ns.
	Time int64
	// TraceID: 32 lower-case hex.
	TraceID string
	// Values by figure index (FigTTFT…), in base units; NaN: absent.
	Values [NumTraceFigures]float64
}

// NoteShift counts a trace observed d ns of event time after its end.
func (c *Counters) NoteShift(d int64) {
	if d <= 0 {
		return
	}
	c.Shifted.Add(1)
	for {
		m := c.ShiftMax.Load()
		if d <= m || c.ShiftMax.CompareAndSwap(m, d) {
			return
		}
	}
}

// NewTraceObs returns an observation with every figure absent.
func NewTraceObs() TraceObs {
	var o TraceObs
	for i := range o.Values {
		o.Values[i] = math.NaN()
	}
	return o
}
