package alerts

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/windows"
)

// OnWatermark evaluates every window whose end plus the delay the
// watermark has passed, in order of end, for every group of each rule;
// then drops the panes no window will read again.
func (p *Processor) OnWatermark(t *engine.Task, wm int64) error {
	if wm > p.wm {
		p.wm = wm
	}
	h := p.horizon()
	for _, rv := range p.revisions {
		if g := p.owned[rv.group]; g != nil {
			p.s.c.Revised.Add(1)
			if err := p.evaluate(t, g, rv.rule, rv.end, true); err != nil {
				return err
			}
		}
	}
	p.revisions = p.revisions[:0]
	if h == windows.MinTime {
		return nil
	}
	keys := p.ownedKeys()
	for ri := range p.s.rules {
		r := &p.s.rules[ri]
		k, j := p.s.ruleSet[ri], p.s.rulePos[ri]
		set := &p.s.sets[k]
		every, window := int64(r.Every), int64(r.Window)
		for {
			e := p.next[ri]
			if e == 0 {
				first, ok := p.firstPane(keys, k, windows.MinTime)
				if !ok {
					break
				}
				e = floorTo(first, every) + every
			}
			if e > h {
				p.setNext(ri, e)
				break
			}
			live := 0
			for _, key := range keys {
				g := p.owned[key]
				if g.set != k || !(g.alerts[j].state != 0 || g.hasData(e-window, e)) {
					continue
				}
				live++
				if err := p.evaluate(t, g, j, e, false); err != nil {
					return err
				}
			}
			if live == 0 {
				// Nothing to evaluate before the next data: jump there.
				first, ok := p.firstPane(keys, k, e)
				if !ok {
					p.setNext(ri, 0)
					break
				}
				p.setNext(ri, max(e+every, floorTo(first, every)+every))
				continue
			}
			p.setNext(ri, e+every)
		}
		_ = set
	}
	p.dropOld(h)
	return nil
}

func (p *Processor) setNext(ri int, e int64) {
	if p.next[ri] != e {
		p.next[ri] = e
		p.nextSet = true
	}
}

func (p *Processor) ownedKeys() []string {
	keys := make([]string, 0, len(p.owned))
	for k := range p.owned {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// firstPane returns the earliest pane at or after from among the groups of
// set k.
func (p *Processor) firstPane(keys []string, k int, from int64) (int64, bool) {
	first, ok := int64(math.MaxInt64), false
	for _, key := range keys {
		g := p.owned[key]
		if g.set != k {
			continue
		}
		for pn := range g.panes {
			if pn >= from && pn < first {
				first, ok = pn, true
			}
		}
	}
	return first, ok
}

// hasData reports whether g has a pane in [from, to).
func (g *owned) hasData(from, to int64) bool {
	for pn := range g.panes {
		if pn >= from && pn < to {
			return true
		}
	}
	return false
}

// dropOld forgets panes no window will read again, even revised, folding
// them into the coarse tier first where a rule reads their figures over a
// long window; coarse panes no long window will read again, even revised;
// and groups left with nothing.
func (p *Processor) dropOld(h int64) {
	lateness := int64(p.s.cfg.AllowedLateness)
	var drop []int64
	for key, g := range p.owned {
		set := &p.s.sets[g.set]
		drop = drop[:0]
		for pn := range g.panes {
			if pn+set.span+lateness <= h {
				drop = append(drop, pn)
			}
		}
		slices.Sort(drop) // folded in event-time order: the same sums every run
		for _, pn := range drop {
			if len(set.longFigs) > 0 {
				p.fold(g, set, pn)
			}
			delete(g.panes, pn)
			p.changed[key] = true
		}
		for c := range g.coarse {
			if c+set.longest+lateness <= h {
				delete(g.coarse, c)
				p.changed[key] = true
			}
		}
		if len(g.panes) == 0 && len(g.coarse) == 0 && !slices.ContainsFunc(g.alerts, func(a alertState) bool { return a.state != 0 }) {
			delete(p.owned, key)
			p.changed[key] = true
			p.s.c.Groups.Add(-1)
		}
	}
}

// view is one group's window as an expression reads it.
type view struct {
	set  *groupSet
	aggs []windows.Agg // per figure of the set
	have []bool
	// wins: the aggregates of the rule's (figure, window) pairs
	// (compiled.windows), in that order.
	rule *Rule
	wins []windows.Agg
}

func (v *view) stat(fig, fn string, q float64, win int64) float64 {
	if win != 0 {
		i := slices.Index(v.rule.expr.windows, figWindow{fig: fig, win: win})
		if i < 0 {
			return math.NaN()
		}
		return aggStat(&v.wins[i], fn, q)
	}
	f := v.set.figure(fig)
	if f < 0 || !v.have[f] {
		return aggStat(nil, fn, q)
	}
	return aggStat(&v.aggs[f], fn, q)
}

// aggStat is function fn of a (nil: no value).
func aggStat(a *windows.Agg, fn string, q float64) float64 {
	if a == nil || a.Count == 0 {
		if fn == "count" || fn == "sum" {
			return 0
		}
		return math.NaN()
	}
	switch fn {
	case "count":
		return a.Count
	case "sum":
		return a.Sum
	case "avg":
		return a.Sum / a.Count
	case "min":
		return a.Min
	case "max":
		return a.Max
	case "first":
		return a.First
	case "last":
		return a.Last
	case "increase":
		return a.Last - a.First
	case "deriv":
		if a.LastT <= a.FirstT {
			return math.NaN()
		}
		return (a.Last - a.First) / (float64(a.LastT-a.FirstT) / 1e9)
	case "quantile":
		return a.Quantile(q)
	}
	return math.NaN()
}

// window merges g's panes in [end-window, end) for the figures r reads,
// and the windows of its window arguments.
func (p *Processor) window(g *owned, r *Rule, end int64) *view {
	set := &p.s.sets[g.set]
	if len(p.merge) < len(set.figures) {
		p.merge = make([]windows.Agg, len(set.figures))
	}
	v := &view{set: set, aggs: p.merge[:len(set.figures)], have: make([]bool, len(set.figures)), rule: r}
	for _, fig := range r.expr.figures {
		f := set.figure(fig)
		v.aggs[f].Reset()
		v.aggs[f].NoSketch = !set.sketch[f]
		v.have[f] = true
	}
	res := set.resolution
	for pn := end - int64(r.Window); pn < end; pn += res {
		aggs := g.panes[pn]
		if aggs == nil {
			continue
		}
		for _, fig := range r.expr.figures {
			f := set.figure(fig)
			if a := aggs[f]; a != nil {
				v.aggs[f].Merge(a)
			}
		}
	}
	if len(r.expr.windows) > 0 {
		v.wins = make([]windows.Agg, len(r.expr.windows))
		for i, fw := range r.expr.windows {
			p.longWindow(g, set, r, fw, end, &v.wins[i])
		}
	}
	return v
}

// longWindow merges into dst figure fw.fig over the window of fw.win
// ending at end. A window no longer than the rule's is read from the fine
// panes, [end−win, end). A longer one is the coarse panes whose start is
// in [end−win, end) and the fine panes not yet folded into the coarse
// tier whose coarse pane starts there too: the observations in
// [ceil(end−win, coarse), end).
func (p *Processor) longWindow(g *owned, set *groupSet, r *Rule, fw figWindow, end int64, dst *windows.Agg) {
	f := set.figure(fw.fig)
	dst.NoSketch = !set.sketch[f]
	if fw.win <= int64(r.Window) {
		for pn := end - fw.win; pn < end; pn += set.resolution {
			if aggs := g.panes[pn]; aggs != nil && aggs[f] != nil {
				dst.Merge(aggs[f])
			}
		}
		return
	}
	from := ceilTo(end-fw.win, set.coarse)
	if l := set.long[f]; l >= 0 {
		for c := from; c < end; c += set.coarse {
			if aggs := g.coarse[c]; aggs != nil && aggs[l] != nil {
				dst.Merge(aggs[l])
			}
		}
	}
	var fine []int64
	for pn, aggs := range g.panes {
		if pn >= from && pn < end && aggs[f] != nil {
			fine = append(fine, pn)
		}
	}
	slices.Sort(fine)
	for _, pn := range fine {
		dst.Merge(g.panes[pn][f])
	}
}

// fold merges fine pane pn of g into its coarse pane, for the figures read
// over long windows. Exemplars are not kept there (only quantile figures
// keep their sketch).
func (p *Processor) fold(g *owned, set *groupSet, pn int64) {
	aggs := g.panes[pn]
	c := floorTo(pn, set.coarse)
	for l, f := range set.longFigs {
		a := aggs[f]
		if a == nil || a.Count == 0 {
			continue
		}
		if g.coarse == nil {
			g.coarse = map[int64][]*windows.Agg{}
		}
		ca := g.coarse[c]
		if ca == nil {
			ca = make([]*windows.Agg, len(set.longFigs))
			g.coarse[c] = ca
		}
		if ca[l] == nil {
			ca[l] = set.newAgg(f)
		}
		if set.sketch[f] {
			ca[l].Merge(a)
		} else {
			ca[l].Merge(&windows.Agg{Count: a.Count, Sum: a.Sum, Min: a.Min, Max: a.Max, First: a.First, FirstT: a.FirstT,
				Last: a.Last, LastT: a.LastT, NoSketch: true})
		}
	}
}

// evaluate runs rule j of g's set over the window ending at end and moves
// the alert's lifecycle; revised: the window was evaluated before and
// late data changed it.
func (p *Processor) evaluate(t *engine.Task, g *owned, j int, end int64, revised bool) error {
	set := &p.s.sets[g.set]
	ri := set.rules[j]
	r := &p.s.rules[ri]
	st := &g.alerts[j]
	if !revised && end <= st.lastEnd {
		return nil // evaluated before a restart
	}
	p.s.c.Evaluations.Add(1)
	v := p.window(g, r, end)
	if r.Record != "" {
		value := r.expr.root.eval(v)
		if f := p.s.cfg.OnValue; f != nil && !math.IsNaN(value) {
			f(r.Name, g.labels, value)
		}
		if f := p.s.cfg.OnRecord; f != nil {
			labels := make(map[string]string, len(set.labels)+len(r.Labels))
			for _, l := range set.labels {
				labels[l] = g.labels.get(l)
			}
			for k, val := range r.Labels {
				labels[k] = val
			}
			f(Recorded{Record: r.Record, Rule: r.Name, Labels: labels, Value: value, WindowEnd: end, Window: r.Window})
		}
		st.lastEnd = max(st.lastEnd, end)
		p.changed[g.key] = true
		return nil
	}
	cond := truth(r.expr.root.eval(v))
	value := r.expr.value.eval(v)
	if f := p.s.cfg.OnValue; f != nil && !math.IsNaN(value) {
		f(r.Name, g.labels, value)
	}
	st.lastEnd = max(st.lastEnd, end)
	p.changed[g.key] = true
	var to braidpb.AlertState
	switch {
	case cond && st.state == 0:
		st.activeSince = end
		if r.For <= 0 {
			to = braidpb.AlertState_ALERT_STATE_FIRING
		} else {
			to = braidpb.AlertState_ALERT_STATE_PENDING
		}
	case cond && st.state == braidpb.AlertState_ALERT_STATE_PENDING && end-st.activeSince >= int64(r.For):
		to = braidpb.AlertState_ALERT_STATE_FIRING
	case !cond && st.state == braidpb.AlertState_ALERT_STATE_PENDING:
		to = braidpb.AlertState_ALERT_STATE_INACTIVE
	case !cond && st.state == braidpb.AlertState_ALERT_STATE_FIRING:
		to = braidpb.AlertState_ALERT_STATE_RESOLVED
	default:
		return nil
	}
	switch to {
	case braidpb.AlertState_ALERT_STATE_FIRING:
		st.episode++
		st.startsAt = end
		p.firing++
		p.s.c.Firing.Add(1)
	case braidpb.AlertState_ALERT_STATE_RESOLVED:
		p.firing--
		p.s.c.Firing.Add(-1)
	}
	a := p.alertRecord(g, r, st, to, end, value, v)
	switch to {
	case braidpb.AlertState_ALERT_STATE_RESOLVED, braidpb.AlertState_ALERT_STATE_INACTIVE:
		st.state, st.activeSince, st.startsAt = 0, 0, 0
	default:
		st.state = to
	}
	return p.emitAlert(t, r, g, a)
}

// alertRecord builds the state change.
func (p *Processor) alertRecord(g *owned, r *Rule, st *alertState, to braidpb.AlertState, end int64, value float64, v *view) *braidpb.Alert {
	set := &p.s.sets[g.set]
	a := &braidpb.Alert{
		Rule: r.Name, State: to, Severity: r.Severity,
		Group:               map[string]string{},
		Labels:              map[string]string{"alertname": r.Name, "severity": r.Severity},
		Annotations:         map[string]string{},
		ActiveSinceUnixNano: uint64(st.activeSince),
		WindowEndUnixNano:   uint64(end),
		Episode:             st.episode,
		Model:               g.labels.Model, Instance: g.labels.Instance, Gpu: g.labels.GPU,
	}
	if to == braidpb.AlertState_ALERT_STATE_PENDING {
		a.Episode = st.episode + 1
	}
	if st.startsAt != 0 && to != braidpb.AlertState_ALERT_STATE_PENDING && to != braidpb.AlertState_ALERT_STATE_INACTIVE {
		a.StartsAtUnixNano = uint64(st.startsAt)
	}
	if to == braidpb.AlertState_ALERT_STATE_RESOLVED || to == braidpb.AlertState_ALERT_STATE_INACTIVE {
		a.EndsAtUnixNano = uint64(end)
	}
	if p.wm != windows.MinTime && p.wm != windows.MaxTime {
		a.WatermarkUnixNano = uint64(p.wm)
	}
	for _, l := range set.labels {
		a.Group[l] = g.labels.get(l)
		a.Labels[l] = g.labels.get(l)
	}
	for k, val := range r.Labels {
		a.Labels[k] = val
	}
	if !math.IsNaN(value) && !math.IsInf(value, 0) {
		a.Value = proto.Float64(value)
	}
	if th, ok := r.expr.threshold(); ok {
		a.Threshold = proto.Float64(th)
	}
	// Exemplars: the traces (or incidents) with the largest values of the
	// rule's first figure in the window.
	if f := set.figure(r.expr.figures[0]); f >= 0 && v.have[f] {
		flag := flagFigures[r.expr.figures[0]]
		for _, e := range v.aggs[f].Exemplars() {
			if len(a.TraceIds)+len(a.IncidentIds) >= p.s.cfg.Alerts.Exemplars || flag && e.Value <= 0 {
				break // best first: the rest are no better
			}
			if r.expr.figures[0] == FigureIncident {
				a.IncidentIds = append(a.IncidentIds, e.ID)
			} else {
				a.TraceIds = append(a.TraceIds, e.ID)
			}
		}
	}
	key := r.Name + "/" + g.key
	if u := p.s.cfg.Alerts.ViewURL; u != "" {
		a.Url = strings.TrimRight(u, "/") + "/alerts/" + urlEscape(key)
	}
	for k, tmpl := range r.Annotations {
		a.Annotations[k] = expand(tmpl, a)
	}
	if len(a.TraceIds) > 0 {
		a.Annotations["trace_ids"] = strings.Join(a.TraceIds, ",")
	}
	if len(a.IncidentIds) > 0 {
		a.Annotations["incident_ids"] = strings.Join(a.IncidentIds, ",")
		if u := p.s.cfg.Alerts.ViewURL; u != "" {
			a.Annotations["report_url"] = strings.TrimRight(u, "/") + "/api/report/" + urlEscape(a.IncidentIds[0])
		}
	}
	if a.Value != nil {
		a.Annotations["value"] = formatValue(*a.Value)
	}
	return a
}

func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '/' || c == '=' || c == ',' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// expand replaces {{value}}, {{threshold}} and {{<label>}} in tmpl.
func expand(tmpl string, a *braidpb.Alert) string {
	if !strings.Contains(tmpl, "{{") {
		return tmpl
	}
	var b strings.Builder
	for rest := tmpl; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		name := strings.TrimSpace(rest[i+2 : i+j])
		switch name {
		case "value":
			if a.Value != nil {
				b.WriteString(formatValue(*a.Value))
			}
		case "threshold":
			if a.Threshold != nil {
				b.WriteString(formatValue(*a.Threshold))
			}
		default:
			b.WriteString(a.Labels[name])
		}
		rest = rest[i+j+2:]
	}
	return b.String()
}

// emitAlert writes a to braid.alerts, keyed by rule and group.
func (p *Processor) emitAlert(t *engine.Task, r *Rule, g *owned, a *braidpb.Alert) error {
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	if err != nil {
		return fmt.Errorf("alerts: marshal alert %s: %w", r.Name, err)
	}
	key := []byte(r.Name + "/" + g.key)
	p.s.c.Changes.Add(1)
	t.Emit(&kgo.Record{Topic: p.s.cfg.OutputTopic, Partition: otlp.HashPartition(key, p.s.cfg.OutputPartitions), Key: key, Value: v,
		Headers: []kgo.RecordHeader{{Key: "braid.alert.state", Value: []byte(a.State.String())}}})
	return nil
}

// threshold is the right side of the first comparison, when a number.
func (c *compiled) threshold() (float64, bool) {
	var find func(e expr) (float64, bool)
	find = func(e expr) (float64, bool) {
		b, ok := e.(*binop)
		if !ok {
			return 0, false
		}
		switch b.op {
		case ">", "<", ">=", "<=", "==", "!=":
			if isConst(b.r) {
				return b.r.eval(nil), true
			}
			return 0, false
		case "and", "or":
			if v, ok := find(b.l); ok {
				return v, true
			}
			return find(b.r)
		}
		return 0, false
	}
	return find(c.root)
}

func isConst(e expr) bool {
	switch e := e.(type) {
	case number:
		return true
	case *neg:
		return isConst(e.x)
	case *binop:
		return isConst(e.l) && isConst(e.r)
	}
	return false
}

// State keys in the task's keyspace: prefixAlerts + group key → the
// group's panes and alert states; prefixAlerts + 0 → the next window end
// of every rule.
//
// A group's value: the version byte, then its fine panes {varint start,
// uvarint n, n × (figure name, aggregate)}, its alert states {rule name,
// state, active since, starts at, episode, last end}, and (version 2) its
// coarse panes, encoded as the fine ones. Version 1, written before the
// coarse tier, is read as a group without coarse panes.
const prefixAlerts = byte('a')

const stateVersion = 2

// knownVersion reports whether a state value of version v can be read.
func knownVersion(v []byte) bool { return len(v) > 0 && (v[0] == 1 || v[0] == stateVersion) }

// PrepareCheckpoint writes the combiner's partials and the changed groups.
func (p *Processor) PrepareCheckpoint(t *engine.Task) error {
	p.flushLocal(t)
	keys := make([]string, 0, len(p.changed))
	for k := range p.changed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sk := append([]byte{prefixAlerts}, k...)
		g := p.owned[k]
		if g == nil {
			if err := t.State.Delete(sk); err != nil {
				return err
			}
			continue
		}
		if err := t.State.Set(sk, p.encodeGroup(g)); err != nil {
			return fmt.Errorf("alerts: write group: %w", err)
		}
	}
	clear(p.changed)
	if p.nextSet {
		b := []byte{stateVersion}
		for ri, r := range p.s.rules {
			b = binary.AppendUvarint(b, uint64(len(r.Name)))
			b = append(b, r.Name...)
			b = binary.AppendVarint(b, p.next[ri])
		}
		if err := t.State.Set([]byte{prefixAlerts, 0}, b); err != nil {
			return fmt.Errorf("alerts: write next windows: %w", err)
		}
		p.nextSet = false
	}
	p.report()
	return nil
}

// report sets the memory gauge to what this task holds.
func (p *Processor) report() {
	n := int64(0)
	for _, g := range p.owned {
		n += int64(len(g.key)) + 96
		for _, tier := range []map[int64][]*windows.Agg{g.panes, g.coarse} {
			for _, aggs := range tier {
				n += 48 + 8*int64(len(aggs))
				for _, a := range aggs {
					if a != nil {
						n += int64(a.Bytes())
					}
				}
			}
		}
	}
	p.s.c.Bytes.Add(n - p.bytes)
	p.bytes = n
}

func (p *Processor) encodeGroup(g *owned) []byte {
	set := &p.s.sets[g.set]
	b := []byte{stateVersion}
	b = appendPanes(b, g.panes, func(i int) string { return set.figures[i] })
	b = binary.AppendUvarint(b, uint64(len(set.rules)))
	for j, ri := range set.rules {
		st := &g.alerts[j]
		b = appendString(b, p.s.rules[ri].Name)
		b = binary.AppendUvarint(b, uint64(st.state))
		b = binary.AppendVarint(b, st.activeSince)
		b = binary.AppendVarint(b, st.startsAt)
		b = binary.AppendUvarint(b, st.episode)
		b = binary.AppendVarint(b, st.lastEnd)
	}
	return appendPanes(b, g.coarse, func(l int) string { return set.figures[set.longFigs[l]] })
}

// appendPanes appends panes in order of start, each aggregate named by
// name(its index).
func appendPanes(b []byte, panes map[int64][]*windows.Agg, name func(int) string) []byte {
	starts := slices.Sorted(maps.Keys(panes))
	b = binary.AppendUvarint(b, uint64(len(starts)))
	for _, pn := range starts {
		b = binary.AppendVarint(b, pn)
		aggs := panes[pn]
		n := 0
		for _, a := range aggs {
			if a != nil {
				n++
			}
		}
		b = binary.AppendUvarint(b, uint64(n))
		for i, a := range aggs {
			if a == nil {
				continue
			}
			b = appendString(b, name(i))
			ab := a.AppendBinary(nil)
			b = binary.AppendUvarint(b, uint64(len(ab)))
			b = append(b, ab...)
		}
	}
	return b
}

// readPanes reads what appendPanes wrote into panes; index maps a figure
// name to its index (-1: not kept), agg makes its aggregate.
func (r *reader) readPanes(panes map[int64][]*windows.Agg, width int, index func(string) int, agg func(int) *windows.Agg) error {
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		pn := r.varint()
		var aggs []*windows.Agg
		for m := r.uvarint(); m > 0 && r.err == nil; m-- {
			name := string(r.bytes())
			ab := r.bytes()
			if r.err != nil {
				break
			}
			i := index(name)
			if i < 0 {
				continue
			}
			a := agg(i)
			if err := a.UnmarshalBinary(ab); err != nil {
				return err
			}
			if aggs == nil {
				aggs = make([]*windows.Agg, width)
			}
			aggs[i] = a
		}
		if aggs != nil && r.err == nil {
			panes[pn] = aggs
		}
	}
	return r.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader reads what encodeGroup wrote; any error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("alerts: state: bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("alerts: state: bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("alerts: state: truncated")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (p *Processor) decodeGroup(key string, v []byte) (*owned, error) {
	names, labels, err := parseGroupKey(key)
	if err != nil {
		return nil, err
	}
	k, set := p.s.set(names)
	if set == nil {
		return nil, nil // no rule groups by these labels any more
	}
	if !knownVersion(v) {
		return nil, fmt.Errorf("alerts: state of %s: unknown version", key)
	}
	g := &owned{key: key, set: k, labels: labels, paneSet: paneSet{labels: labels, panes: map[int64][]*windows.Agg{}},
		alerts: make([]alertState, len(set.rules))}
	r := &reader{b: v[1:]}
	if err := r.readPanes(g.panes, len(set.figures), set.figure, set.newAgg); err != nil {
		return nil, fmt.Errorf("alerts: state of %s: %w", key, err)
	}
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		name := string(r.bytes())
		st := alertState{state: braidpb.AlertState(r.uvarint()), activeSince: r.varint(), startsAt: r.varint(),
			episode: r.uvarint(), lastEnd: r.varint()}
		for j, ri := range set.rules {
			if p.s.rules[ri].Name == name {
				g.alerts[j] = st
			}
		}
	}
	if v[0] >= 2 && r.err == nil {
		coarse := map[int64][]*windows.Agg{}
		index := func(name string) int {
			if f := set.figure(name); f >= 0 {
				return set.long[f]
			}
			return -1
		}
		if err := r.readPanes(coarse, len(set.longFigs), index, func(l int) *windows.Agg { return set.newAgg(set.longFigs[l]) }); err != nil {
			return nil, fmt.Errorf("alerts: state of %s: %w", key, err)
		}
		if len(coarse) > 0 {
			g.coarse = coarse
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("alerts: state of %s: %w", key, r.err)
	}
	return g, nil
}

// Restore reloads the owned groups and the rules' next windows.
func (p *Processor) Restore(t *engine.Task) error {
	p.s.c.Groups.Add(-int64(len(p.owned)))
	p.s.c.Firing.Add(-p.firing)
	p.firing = 0
	clear(p.owned)
	clear(p.local)
	clear(p.changed)
	p.localBytes = 0
	p.revisions = p.revisions[:0]
	clear(p.next)
	it, err := t.State.Iter([]byte{prefixAlerts}, []byte{prefixAlerts + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) == 2 && k[1] == 0 {
			if !knownVersion(v) {
				return fmt.Errorf("alerts: next windows: unknown version")
			}
			r := &reader{b: v[1:]}
			for len(r.b) > 0 && r.err == nil {
				name := string(r.bytes())
				e := r.varint()
				for ri := range p.s.rules {
					if p.s.rules[ri].Name == name {
						p.next[ri] = e
					}
				}
			}
			if r.err != nil {
				return r.err
			}
			continue
		}
		g, err := p.decodeGroup(string(k[1:]), v)
		if err != nil {
			return err
		}
		if g == nil {
			continue
		}
		p.owned[g.key] = g
		for _, st := range g.alerts {
			if st.state == braidpb.AlertState_ALERT_STATE_FIRING {
				p.firing++
			}
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	p.s.c.Groups.Add(int64(len(p.owned)))
	p.s.c.Firing.Add(p.firing)
	p.report()
	return nil
}

// Close leaves the stage's gauges (the partition was revoked, or the job
// stops).
func (p *Processor) Close() {
	p.s.c.Groups.Add(-int64(len(p.owned)))
	p.s.c.Firing.Add(-p.firing)
	p.s.c.Bytes.Add(-p.bytes)
	p.firing, p.bytes = 0, 0
	clear(p.owned)
	clear(p.local)
}
