package alerts

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/windows"
)

// Processor is the alerts stage of one task, run inside the fuse task.
//
// It has two halves. As a combiner it aggregates what its task observes
// (traces as they are emitted, resource samples as they are read,
// incidents as they are found) per group and pane, and at each
// checkpoint writes the partial aggregates to the internal topic, keyed
// by group. As the owner of the groups that hash to its partition it
// merges the partials into panes, and when its watermark (the minimum of
// every task's) passes a window's end plus the delay, evaluates each rule
// over the window and moves the alert through its lifecycle, writing
// every change to braid.alerts in the checkpoint's transaction.
type Processor struct {
	s         *Stage
	partition int32

	local      map[localKey]*paneSet
	localBytes int

	owned   map[string]*owned
	changed map[string]bool
	next    []int64 // per rule: end of the next window to evaluate, 0 none
	nextSet bool    // next changed since the last checkpoint
	bytes   int64   // memory of owned, as reported in Counters.Bytes
	firing  int64   // alerts firing here, as reported in Counters.Firing

	revisions []revision // windows to evaluate again (late data)

	idx  []int     // scratch: the figures of one observation
	vals []float64 // and their values

	key   []byte
	merge []windows.Agg // scratch: one window's figures
	wm    int64
}

type localKey struct {
	set   int
	group string
}

// paneSet is a group's panes: pane start (ns) → one aggregate per figure
// of its set (nil where none).
type paneSet struct {
	labels Labels
	panes  map[int64][]*windows.Agg
}

// owned is a group this task owns.
type owned struct {
	key    string
	set    int
	labels Labels
	paneSet
	alerts []alertState // per rule of the set
	// coarse: the coarse tier, coarse pane start (ns) → one aggregate per
	// figure the set reads over a long window (groupSet.longFigs; nil
	// where none), merged from the fine panes as they are dropped.
	coarse map[int64][]*windows.Agg
}

// alertState is an alert's lifecycle position.
type alertState struct {
	state       braidpb.AlertState // 0 (inactive), PENDING or FIRING
	activeSince int64
	startsAt    int64
	episode     uint64
	lastEnd     int64 // the last window evaluated
}

// NewProcessor returns the stage's processor for task partition.
func (s *Stage) NewProcessor(partition int32) *Processor {
	return &Processor{
		s: s, partition: partition,
		local:   map[localKey]*paneSet{},
		owned:   map[string]*owned{},
		changed: map[string]bool{},
		next:    make([]int64, len(s.rules)),
		wm:      windows.MinTime,
	}
}

// maxLocalBytes: the combiner writes its partials out before the
// checkpoint once it holds this much.
const maxLocalBytes = 4 << 20

func (p *Processor) observe(t *engine.Task, l *Labels, at int64, fig func(set *groupSet) (idx []int, vals []float64), id string) {
	for k := range p.s.sets {
		set := &p.s.sets[k]
		idx, vals := fig(set)
		if len(idx) == 0 {
			continue
		}
		var ok bool
		p.key, ok = groupKey(p.key[:0], set.labels, l)
		if !ok {
			continue
		}
		lk := localKey{set: k, group: string(p.key)}
		ps := p.local[lk]
		if ps == nil {
			if len(p.local) >= p.s.cfg.Alerts.MaxGroups {
				p.s.c.Overflow.Add(1)
				continue
			}
			ps = &paneSet{labels: *l, panes: map[int64][]*windows.Agg{}}
			p.local[lk] = ps
			p.localBytes += len(lk.group) + 64
		}
		pane := floorTo(at, set.resolution)
		aggs := ps.panes[pane]
		if aggs == nil {
			aggs = make([]*windows.Agg, len(set.figures))
			ps.panes[pane] = aggs
			p.localBytes += 48 + 8*len(aggs)
		}
		for i, f := range idx {
			a := aggs[f]
			if a == nil {
				a = set.newAgg(f)
				aggs[f] = a
			}
			before := a.Bytes()
			fid := id
			if !set.exemplar[f] {
				fid = "" // no rule's alerts carry this figure's exemplars
			}
			a.Add(at, vals[i], fid)
			p.localBytes += a.Bytes() - before
		}
		p.s.c.Observations.Add(1)
	}
	if p.localBytes > maxLocalBytes {
		p.flushLocal(t)
	}
}

// ObserveTrace takes a fused trace's figures (its first emission).
func (p *Processor) ObserveTrace(t *engine.Task, o *TraceObs) {
	p.observe(t, &o.Labels, o.Time, func(set *groupSet) ([]int, []float64) {
		p.idx, p.vals = p.idx[:0], p.vals[:0]
		for i, f := range set.traceFig {
			if f >= 0 && !math.IsNaN(o.Values[i]) {
				p.idx = append(p.idx, f)
				p.vals = append(p.vals, o.Values[i])
			}
		}
		return p.idx, p.vals
	}, o.TraceID)
}

// one makes the single (figure, value) of an observation.
func (p *Processor) one(f int, v float64) ([]int, []float64) {
	if f < 0 {
		return nil, nil
	}
	p.idx, p.vals = append(p.idx[:0], f), append(p.vals[:0], v)
	return p.idx, p.vals
}

// ObserveSample takes a resource sample of canonical metric name (value in
// the metric's unit) at event time at.
func (p *Processor) ObserveSample(t *engine.Task, l *Labels, metric string, v float64, at int64) {
	p.observe(t, l, at, func(set *groupSet) ([]int, []float64) { return p.one(set.figure(metric), v) }, "")
}

// ObserveIncident takes a pollution incident (its first revision). at is
// the event time of its detection: the detecting task's watermark minus
// the stage's delay, so that the owner evaluates it as soon as that
// watermark reaches it.
func (p *Processor) ObserveIncident(t *engine.Task, l *Labels, id string, at int64) {
	p.observe(t, l, at, func(set *groupSet) ([]int, []float64) { return p.one(set.incident, 1) }, id)
}

// Wants reports whether any rule reads metric (so that the caller need not
// build labels for samples nobody reads).
func (s *Stage) Wants(metric string) bool { return s.wants[metric] }

// WantsIncidents reports whether any rule reads incidents.
func (s *Stage) WantsIncidents() bool { return s.wants[FigureIncident] }

func floorTo(t, d int64) int64 {
	q := t / d
	if t%d < 0 {
		q--
	}
	return q * d
}

func ceilTo(t, d int64) int64 {
	f := floorTo(t, d)
	if f == t {
		return t
	}
	return f + d
}

// Partial record (internal topic, key = group): version 1, then entries
// {varint pane start, uvarint figure name length, name, uvarint aggregate
// length, aggregate (windows.Agg binary)}.
const partialVersion = 1

// flushLocal writes the combiner's partials, in group order.
func (p *Processor) flushLocal(t *engine.Task) {
	if len(p.local) == 0 {
		return
	}
	keys := make([]localKey, 0, len(p.local))
	for k := range p.local {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].set < keys[j].set
	})
	limit := max(p.s.cfg.MaxRecordBytes/2, 4<<10)
	for _, k := range keys {
		set := &p.s.sets[k.set]
		ps := p.local[k]
		q := otlp.HashPartition([]byte(k.group), p.s.cfg.Partitions)
		val := []byte{partialVersion}
		panes := make([]int64, 0, len(ps.panes))
		for pn := range ps.panes {
			panes = append(panes, pn)
		}
		slices.Sort(panes)
		for _, pn := range panes {
			for f, a := range ps.panes[pn] {
				if a == nil {
					continue
				}
				start := len(val)
				val = binary.AppendVarint(val, pn)
				val = binary.AppendUvarint(val, uint64(len(set.figures[f])))
				val = append(val, set.figures[f]...)
				ab := a.AppendBinary(nil)
				val = binary.AppendUvarint(val, uint64(len(ab)))
				val = append(val, ab...)
				if len(val) > limit && start > 1 {
					// Cut before this entry.
					rest := append([]byte{partialVersion}, val[start:]...)
					p.emitPartial(t, k.group, q, val[:start])
					val = rest
				}
			}
		}
		if len(val) > 1 {
			p.emitPartial(t, k.group, q, val)
		}
	}
	clear(p.local)
	p.localBytes = 0
}

func (p *Processor) emitPartial(t *engine.Task, group string, q int32, val []byte) {
	p.s.c.Partials.Add(1)
	t.Emit(&kgo.Record{Topic: p.s.cfg.Topic, Partition: q, Key: []byte(group), Value: slices.Clone(val)})
}

// InvalidError is a partial record the stage cannot read; the caller
// dead-letters the record.
type InvalidError struct{ Cause string }

func (e *InvalidError) Error() string { return "alerts: " + e.Cause }

// Process merges a partial record of the internal topic into the groups
// this task owns. A record it cannot read returns an *InvalidError.
func (p *Processor) Process(t *engine.Task, rec *kgo.Record) error {
	names, labels, err := parseGroupKey(string(rec.Key))
	if err != nil {
		p.s.c.Invalid.Add(1)
		return &InvalidError{Cause: err.Error()}
	}
	k, set := p.s.set(names)
	if set == nil {
		// A group of rules this instance does not run (a rolling
		// configuration change): nothing to merge into.
		return nil
	}
	b := rec.Value
	if len(b) == 0 || b[0] != partialVersion {
		p.s.c.Invalid.Add(1)
		return &InvalidError{Cause: "partial aggregate: unknown version"}
	}
	b = b[1:]
	type entry struct {
		pane int64
		fig  int
		agg  windows.Agg
	}
	var entries []entry
	for len(b) > 0 {
		pane, n := binary.Varint(b)
		if n <= 0 {
			return p.invalid("pane")
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return p.invalid("figure")
		}
		name := string(b[n : n+int(l)])
		b = b[n+int(l):]
		l, n = binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return p.invalid("aggregate length")
		}
		var e entry
		if err := e.agg.UnmarshalBinary(b[n : n+int(l)]); err != nil {
			return p.invalid("aggregate: " + err.Error())
		}
		b = b[n+int(l):]
		e.pane, e.fig = pane, set.figure(name)
		if e.fig < 0 || pane%set.resolution != 0 {
			continue // a figure or pane of another configuration
		}
		entries = append(entries, e)
	}
	g := p.owned[string(rec.Key)]
	for i := range entries {
		e := &entries[i]
		if p.isLate(set, e.pane) {
			p.s.c.Late.Add(1)
			continue
		}
		if g == nil {
			if len(p.owned) >= p.s.cfg.Alerts.MaxGroups {
				p.s.c.Overflow.Add(1)
				return nil
			}
			g = &owned{key: string(rec.Key), set: k, labels: labels,
				paneSet: paneSet{labels: labels, panes: map[int64][]*windows.Agg{}},
				alerts:  make([]alertState, len(set.rules))}
			p.owned[g.key] = g
			p.s.c.Groups.Add(1)
		}
		aggs := g.panes[e.pane]
		if aggs == nil {
			aggs = make([]*windows.Agg, len(set.figures))
			g.panes[e.pane] = aggs
		}
		if aggs[e.fig] == nil {
			aggs[e.fig] = set.newAgg(e.fig)
		}
		aggs[e.fig].Merge(&e.agg)
		p.changed[g.key] = true
		p.revise(g, set, e.pane)
	}
	if len(p.revisions) > 0 || p.due(k) {
		// The watermark may have passed these panes' windows already
		// (partials trail their task's markers by a checkpoint): evaluate
		// now rather than at the next watermark, which may not come soon.
		return p.OnWatermark(t, p.wm)
	}
	return nil
}

// due reports whether a rule of set k has a window the horizon has passed.
func (p *Processor) due(k int) bool {
	h := p.horizon()
	if h == windows.MinTime {
		return false
	}
	for _, ri := range p.s.sets[k].rules {
		if e := p.next[ri]; e == 0 || e <= h {
			return true
		}
	}
	return false
}

func (p *Processor) invalid(what string) error {
	p.s.c.Invalid.Add(1)
	return &InvalidError{Cause: "partial aggregate: bad " + what}
}

// horizon is the event time up to which windows are evaluated.
func (p *Processor) horizon() int64 {
	if p.wm == windows.MinTime {
		return windows.MinTime
	}
	if p.wm == windows.MaxTime {
		return windows.MaxTime
	}
	return p.wm - int64(p.s.cfg.Delay)
}

// isLate reports whether a pane's every window was evaluated more than
// allowed lateness ago.
func (p *Processor) isLate(set *groupSet, pane int64) bool {
	h := p.horizon()
	if h == windows.MinTime {
		return false
	}
	lastEnd := pane + set.span
	return lastEnd+int64(p.s.cfg.AllowedLateness) <= h
}

// revise notes, for the rules of g's set, the last window already
// evaluated if pane is in it: late data within allowed lateness revises
// the window, which is evaluated again at the next watermark.
func (p *Processor) revise(g *owned, set *groupSet, pane int64) {
	for j, ri := range set.rules {
		st := &g.alerts[j]
		r := &p.s.rules[ri]
		if st.lastEnd == 0 || pane >= st.lastEnd || pane < st.lastEnd-int64(r.Window) {
			continue
		}
		rv := revision{group: g.key, rule: j, end: st.lastEnd}
		if !slices.Contains(p.revisions, rv) {
			p.revisions = append(p.revisions, rv)
		}
	}
}

type revision struct {
	group string
	rule  int // index in the set's rules
	end   int64
}

// SlowTTFT is the TTFT above which a trace counts as slow.
func (s *Stage) SlowTTFT() time.Duration { return s.cfg.Alerts.SlowTTFT }
