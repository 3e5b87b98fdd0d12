package view

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

// Query selects traces: an event-time range, dimension filters and, for
// explain, layers and lists, a selection (a time × latency rectangle) in it.
type Query struct {
	From, To time.Time // traces whose start is in [From, To)
	Filters  map[string]string
	// Selection, when Metric is set: traces that started in [SelFrom,
	// SelTo) with Metric in [Lo, Hi).
	Metric         string
	Lo, Hi         time.Duration
	SelFrom, SelTo time.Time
	Incident       string
	Limit          int
}

// hasSelection reports whether q selects a rectangle.
func (q *Query) hasSelection() bool { return q.Metric != "" && q.Hi > q.Lo }

func (q *Query) inRange(s *summary) bool {
	if s.Start < q.From.UnixNano() || s.Start >= q.To.UnixNano() {
		return false
	}
	for k, v := range q.Filters {
		if s.dim(k) != v {
			return false
		}
	}
	return true
}

func (q *Query) selected(s *summary) bool {
	if !q.hasSelection() {
		return true
	}
	if s.Start < q.SelFrom.UnixNano() || s.Start >= q.SelTo.UnixNano() {
		return false
	}
	v := s.metric(q.Metric)
	return v > 0 && v >= int64(q.Lo) && v < int64(q.Hi)
}

// scan calls f for every indexed trace in q's range and filters, under the
// read lock.
func (ix *Index) scan(q *Query, f func(s *summary)) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, s := range ix.mu.ring[ix.mu.head:] {
		if s != nil && q.inRange(s) {
			f(s)
		}
	}
}

// DefaultRange is the last d of indexed event time, ending just after the
// newest event time the index holds (the wall clock when it holds none),
// and starting no earlier than its oldest trace.
func (ix *Index) DefaultRange(d time.Duration) (from, to time.Time) {
	ix.mu.RLock()
	n := ix.mu.newest
	oldest := int64(0)
	for _, s := range ix.mu.ring[ix.mu.head:] {
		if s != nil && (oldest == 0 || s.Start < oldest) {
			oldest = s.Start
		}
	}
	ix.mu.RUnlock()
	to = time.Now()
	if n > 0 {
		to = time.Unix(0, n).Add(time.Second)
	}
	// The range ends at the newest trace and starts d earlier, or at the
	// oldest indexed trace when that is later (a young index fills the
	// page), but spans a minute at least.
	from = to.Add(-d)
	if o := time.Unix(0, oldest).Truncate(time.Second); oldest > 0 && o.After(from) {
		from = o
	}
	if m := to.Add(-time.Minute); from.After(m) {
		from = m
	}
	return from, to
}

// Status reports what the index holds.
func (ix *Index) Status() Status {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := Status{Traces: len(ix.mu.pos), Incidents: len(ix.mu.incidents), Alerts: len(ix.mu.alerts), Read: map[string]int64{},
		Lag: ix.mu.lag, Retention: ix.opts.Retention.Milliseconds(), MaxTraces: ix.opts.MaxTraces, Models: []string{}, Instances: []string{}}
	if ix.mu.newest > 0 {
		st.Newest = ix.mu.newest / 1e6
	}
	for t, n := range ix.mu.read {
		st.Read[t] = n
	}
	models, instances := map[string]bool{}, map[string]bool{}
	layers := 0
	for _, s := range ix.mu.ring[ix.mu.head:] {
		if s == nil {
			continue
		}
		if st.Oldest == 0 || s.Start/1e6 < st.Oldest {
			st.Oldest = s.Start / 1e6
		}
		models[s.Model] = true
		instances[s.Instance] = true
		layers += len(s.Layers)
	}
	for m := range models {
		if m != "" {
			st.Models = append(st.Models, m)
		}
	}
	for i := range instances {
		if i != "" {
			st.Instances = append(st.Instances, i)
		}
	}
	slices.Sort(st.Models)
	slices.Sort(st.Instances)
	if n := len(ix.mu.pos); n > 0 {
		st.BytesPerTrace = int(summarySize) + 48 + 16*layers/n
	}
	return st
}

// niceBuckets are the time bucket widths the heatmaps use.
var niceBuckets = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 24 * time.Hour}

// maxTimeBuckets bounds the time buckets of a heatmap.
const maxTimeBuckets = 120

// timeAxis is the bucketing of [from, to).
type timeAxis struct {
	from  int64 // unix ns, aligned to width
	width int64
	n     int
}

func newTimeAxis(from, to time.Time) timeAxis {
	span := to.Sub(from)
	w := niceBuckets[len(niceBuckets)-1]
	for _, b := range niceBuckets {
		if span/b <= maxTimeBuckets {
			w = b
			break
		}
	}
	start := from.UnixNano() - from.UnixNano()%int64(w)
	n := int((to.UnixNano() - start + int64(w) - 1) / int64(w))
	return timeAxis{from: start, width: int64(w), n: max(n, 1)}
}

func (a timeAxis) index(t int64) int {
	i := int((t - a.from) / a.width)
	return min(max(i, 0), a.n-1)
}

func (a timeAxis) times() []int64 {
	out := make([]int64, a.n)
	for i := range out {
		out[i] = (a.from + int64(i)*a.width) / 1e6
	}
	return out
}

// Latency buckets: logarithmic, six per decade from 1 ms to 100 s.
const (
	latPerDecade = 6
	latDecades   = 5
	latBuckets   = latPerDecade * latDecades
)

var latBounds = func() []float64 {
	b := make([]float64, latBuckets+1)
	for i := range b {
		b[i] = math.Round(math.Pow(10, float64(i)/latPerDecade)*1000) / 1000
	}
	return b
}()

func latIndex(ns int64) int {
	ms := float64(ns) / 1e6
	if ms <= 1 {
		return 0
	}
	i := int(math.Log10(ms) * latPerDecade)
	for i+1 < len(latBounds) && ms >= latBounds[i+1] {
		i++
	}
	for i > 0 && ms < latBounds[i] {
		i--
	}
	return min(max(i, 0), latBuckets-1)
}

func newHeatmap(metric string, ax timeAxis) (Heatmap, [][]int64) {
	grid := make([][]int64, ax.n)
	for i := range grid {
		grid[i] = make([]int64, latBuckets)
	}
	return Heatmap{Metric: metric, Times: ax.times(), BucketMs: ax.width / 1e6, Bounds: latBounds, Cells: [][3]int64{}}, grid
}

func finishHeatmap(h *Heatmap, grid [][]int64) {
	for ti, row := range grid {
		for li, c := range row {
			if c > 0 {
				h.Cells = append(h.Cells, [3]int64{int64(ti), int64(li), c})
				h.Max = max(h.Max, c)
			}
		}
	}
}

// quantile of vs (sorted in place), in ms; -1 when empty.
func quantile(vs []int64, q float64) float64 {
	if len(vs) == 0 {
		return -1
	}
	slices.Sort(vs)
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return float64(vs[min(max(i, 0), len(vs)-1)]) / 1e6
}

// Overview computes the landing page.
func (ix *Index) Overview(q Query) Overview {
	ax := newTimeAxis(q.From, q.To)
	ov := Overview{From: q.From.UnixMilli(), To: q.To.UnixMilli(), Filters: q.Filters, Groups: []Group{}}
	if ov.Filters == nil {
		ov.Filters = map[string]string{}
	}
	var tg, eg [][]int64
	ov.TTFT, tg = newHeatmap("ttft", ax)
	ov.E2E, eg = newHeatmap("e2e", ax)
	n := ax.n
	counts, errs, polluted := make([]int64, n), make([]int64, n), make([]int64, n)
	kvSum, kvN := make([]float64, n), make([]int64, n)
	ttfts, e2es := make([][]int64, n), make([][]int64, n)
	type gkey struct{ model, instance string }
	type gacc struct {
		g          Group
		ttft, e2e  []int64
		errs, poll int
	}
	groups := map[gkey]*gacc{}
	ix.scan(&q, func(s *summary) {
		ov.Total++
		ti := ax.index(s.Start)
		counts[ti]++
		if s.Error {
			errs[ti]++
		}
		if s.Polluted {
			polluted[ti]++
		}
		if s.KVUsage >= 0 {
			kvSum[ti] += float64(s.KVUsage)
			kvN[ti]++
		}
		if s.TTFT > 0 {
			tg[ti][latIndex(s.TTFT)]++
			ttfts[ti] = append(ttfts[ti], s.TTFT)
		}
		if s.E2E > 0 {
			eg[ti][latIndex(s.E2E)]++
			e2es[ti] = append(e2es[ti], s.E2E)
		}
		k := gkey{s.Model, s.Instance}
		g := groups[k]
		if g == nil {
			g = &gacc{g: Group{Model: s.Model, Instance: s.Instance, Host: s.Host, GPU: s.GPU}}
			groups[k] = g
		}
		g.g.Requests++
		if s.Error {
			g.errs++
		}
		if s.Polluted {
			g.poll++
		}
		if s.TTFT > 0 {
			g.ttft = append(g.ttft, s.TTFT)
		}
		if s.E2E > 0 {
			g.e2e = append(g.e2e, s.E2E)
		}
	})
	finishHeatmap(&ov.TTFT, tg)
	finishHeatmap(&ov.E2E, eg)
	sec := float64(ax.width) / 1e9
	ser := Series{Times: ax.times(), Rate: make([]float64, n), ErrorRate: make([]float64, n), KVUsage: make([]float64, n),
		TTFTP99: make([]float64, n), E2EP99: make([]float64, n), Polluted: polluted}
	for i := range n {
		ser.Rate[i] = float64(counts[i]) / sec
		if counts[i] > 0 {
			ser.ErrorRate[i] = float64(errs[i]) / float64(counts[i])
		}
		ser.KVUsage[i] = -1
		if kvN[i] > 0 {
			ser.KVUsage[i] = kvSum[i] / float64(kvN[i])
		}
		ser.TTFTP99[i] = quantile(ttfts[i], 0.99)
		ser.E2EP99[i] = quantile(e2es[i], 0.99)
	}
	ov.Series = ser
	for _, g := range groups {
		g.g.ErrorRate = float64(g.errs) / float64(g.g.Requests)
		g.g.Polluted = g.poll
		g.g.TTFTP50 = quantile(g.ttft, 0.5)
		g.g.TTFTP99 = quantile(g.ttft, 0.99)
		g.g.E2EP99 = quantile(g.e2e, 0.99)
		ov.Groups = append(ov.Groups, g.g)
	}
	slices.SortFunc(ov.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Instance, b.Instance))
	})
	ov.Firing = ix.Alerts(true)
	ov.Incidents = ix.Incidents(q.From, q.To)
	return ov
}

// maxValues bounds the values listed per dimension.
const maxValues = 12

// Explain ranks the dimensions that tell q's selection from the rest of
// its range (BubbleUp): for each, the total variation distance between
// the distributions of its values in the selection and in the baseline.
func (ix *Index) Explain(q Query) Explain {
	sel := make([]map[string]int, len(dimensions))
	base := make([]map[string]int, len(dimensions))
	for i := range dimensions {
		sel[i], base[i] = map[string]int{}, map[string]int{}
	}
	var ex Explain
	ix.scan(&q, func(s *summary) {
		into := base
		if q.selected(s) {
			into = sel
			ex.Selected++
		} else {
			ex.Baseline++
		}
		for i, d := range dimensions {
			into[i][s.dim(d)]++
		}
	})
	ex.Dimensions = []Dimension{}
	if ex.Selected == 0 {
		return ex
	}
	for i, d := range dimensions {
		dim := Dimension{Name: d}
		seen := map[string]bool{}
		var vals []Value
		for _, m := range []map[string]int{sel[i], base[i]} {
			for v := range m {
				if seen[v] {
					continue
				}
				seen[v] = true
				val := Value{Value: v, Selected: sel[i][v], Baseline: base[i][v]}
				val.SelShare = float64(val.Selected) / float64(ex.Selected)
				if ex.Baseline > 0 {
					val.BaseShare = float64(val.Baseline) / float64(ex.Baseline)
				}
				dim.Score += math.Abs(val.SelShare-val.BaseShare) / 2
				vals = append(vals, val)
			}
		}
		if len(vals) < 2 && ex.Baseline > 0 && len(base[i]) <= 1 && len(sel[i]) <= 1 && vals[0].Selected > 0 && vals[0].Baseline > 0 {
			continue // one value everywhere: tells nothing
		}
		slices.SortFunc(vals, func(a, b Value) int {
			return cmp.Or(cmp.Compare(b.SelShare-b.BaseShare, a.SelShare-a.BaseShare), cmp.Compare(a.Value, b.Value))
		})
		dim.Values = vals[:min(len(vals), maxValues)]
		dim.Score = math.Round(dim.Score*1e4) / 1e4
		ex.Dimensions = append(ex.Dimensions, dim)
	}
	slices.SortStableFunc(ex.Dimensions, func(a, b Dimension) int { return cmp.Compare(b.Score, a.Score) })
	return ex
}

// Traces lists q's selected traces, slowest (by q.Metric, else e2e)
// first, at most q.Limit (default 50).
func (ix *Index) Traces(q Query) TraceList {
	metric := cmp.Or(q.Metric, "e2e")
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 50
	}
	var all []*summary
	ix.scan(&q, func(s *summary) {
		if q.selected(s) {
			all = append(all, s)
		}
	})
	slices.SortFunc(all, func(a, b *summary) int { return cmp.Compare(b.metric(metric), a.metric(metric)) })
	tl := TraceList{Total: len(all), Traces: []TraceRow{}}
	for _, s := range all[:min(len(all), limit)] {
		tl.Traces = append(tl.Traces, traceRow(s))
	}
	return tl
}

func traceRow(s *summary) TraceRow {
	r := TraceRow{TraceID: hex.EncodeToString(s.ID[:]), Start: s.Start / 1e6, Model: s.Model, Instance: s.Instance, Tenant: s.Tenant,
		TTFT: float64(s.TTFT) / 1e6, E2E: float64(s.E2E) / 1e6, Error: s.Error, Polluted: s.Polluted}
	if s.Incident != "" {
		r.Incidents = []string{s.Incident}
	}
	return r
}

// Layers computes the layer × time heatmaps of q's selection, and with
// q.Incident that incident's per-layer counts, the heatmaps then over the
// incident's GPU.
func (ix *Index) Layers(q Query) (Layers, error) {
	out := Layers{HitRatio: [][3]float64{}, DecodeMs: [][3]float64{}, Layers: []int64{}}
	if q.Incident != "" {
		inc, err := ix.incident(q.Incident)
		if err != nil {
			return out, err
		}
		if inc == nil {
			return out, errNotFound
		}
		// The heatmaps of an incident cover its GPU (the incident's own
		// victims are a handful of requests; the GPU's show whether the
		// layers' hit ratio moved), unless the query names a GPU itself.
		f := map[string]string{}
		for k, v := range q.Filters {
			if k != "incident" || v != q.Incident {
				f[k] = v
			}
		}
		if f["gpu"] == "" && inc.Gpu != "" {
			f["gpu"] = inc.Gpu
		}
		q.Filters = f
		for _, l := range inc.Layers {
			out.Corrupted = append(out.Corrupted, LayerCount{Layer: l.Layer, Hits: l.Hits, CorruptedReads: l.CorruptedReads})
		}
		slices.SortFunc(out.Corrupted, func(a, b LayerCount) int { return cmp.Compare(a.Layer, b.Layer) })
		pl := slices.Clone(out.Corrupted)
		slices.SortStableFunc(pl, func(a, b LayerCount) int {
			return cmp.Or(cmp.Compare(b.CorruptedReads, a.CorruptedReads), cmp.Compare(b.Hits, a.Hits))
		})
		for _, l := range pl {
			if l.CorruptedReads > 0 || l.Hits > 0 {
				out.Polluted = append(out.Polluted, int64(l.Layer))
			}
		}
		if out.Polluted == nil {
			out.Polluted = []int64{}
		}
	}
	ax := newTimeAxis(q.From, q.To)
	out.Times, out.BucketMs = ax.times(), ax.width/1e6
	type acc struct {
		hit     float64
		hits    int
		decode  float64
		decodes int
	}
	cells := map[[2]int64]*acc{}
	layerSet := map[int64]bool{}
	ix.scan(&q, func(s *summary) {
		if !q.selected(s) {
			return
		}
		out.Traces++
		ti := int64(ax.index(s.Start))
		for _, l := range s.Layers {
			k := [2]int64{ti, int64(l.Layer)}
			a := cells[k]
			if a == nil {
				a = &acc{}
				cells[k] = a
			}
			layerSet[int64(l.Layer)] = true
			if l.Hit >= 0 {
				a.hit += float64(l.Hit)
				a.hits++
			}
			a.decode += float64(l.DecodeNs) / 1e6
			a.decodes++
		}
	})
	for _, c := range out.Corrupted {
		layerSet[int64(c.Layer)] = true
	}
	for l := range layerSet {
		out.Layers = append(out.Layers, l)
	}
	slices.Sort(out.Layers)
	li := map[int64]int{}
	for i, l := range out.Layers {
		li[l] = i
	}
	keys := make([][2]int64, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys {
		a := cells[k]
		y := float64(li[k[1]])
		if a.hits > 0 {
			out.HitRatio = append(out.HitRatio, [3]float64{float64(k[0]), y, math.Round(a.hit/float64(a.hits)*1e4) / 1e4})
		}
		if a.decodes > 0 {
			out.DecodeMs = append(out.DecodeMs, [3]float64{float64(k[0]), y, math.Round(a.decode/float64(a.decodes)*1e3) / 1e3})
		}
	}
	return out, nil
}

// Incidents lists the incidents active in [from, to), newest first.
func (ix *Index) Incidents(from, to time.Time) []IncidentSummary {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := []IncidentSummary{}
	for _, e := range ix.mu.incidents {
		if e.sum.Last >= from.UnixMilli() && e.sum.First < to.UnixMilli() {
			out = append(out, e.sum)
		}
	}
	slices.SortFunc(out, func(a, b IncidentSummary) int { return cmp.Or(cmp.Compare(b.First, a.First), cmp.Compare(a.ID, b.ID)) })
	return out
}

func incidentSummary(inc *braidpb.Incident) IncidentSummary {
	s := IncidentSummary{ID: inc.Id, State: strings.TrimPrefix(inc.State.String(), "INCIDENT_STATE_"), Pattern: kvgraph.KindName(inc.Pattern),
		Host: inc.Host, GPU: inc.Gpu, First: int64(inc.FirstUnixNano) / 1e6, Last: int64(inc.LastUnixNano) / 1e6,
		Victims: len(inc.Polluted) + int(inc.PollutedDropped), Revision: inc.Revision}
	if r := inc.GetRoot(); r != nil {
		s.Root = cmp.Or(r.RequestId, r.Node)
	}
	return s
}

// Alerts lists the latest change of every alert episode, newest first;
// firingOnly keeps those whose last change is firing.
func (ix *Index) Alerts(firingOnly bool) []AlertSummary {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := []AlertSummary{}
	for _, e := range ix.mu.alerts {
		if firingOnly && e.a.State != braidpb.AlertState_ALERT_STATE_FIRING {
			continue
		}
		out = append(out, alertSummary(e))
	}
	slices.SortFunc(out, func(a, b AlertSummary) int {
		return cmp.Or(cmp.Compare(b.ActiveSince, a.ActiveSince), cmp.Compare(a.Key, b.Key), cmp.Compare(b.Episode, a.Episode))
	})
	return out
}

// Alert returns the episodes of alert key, newest first.
func (ix *Index) Alert(key string) AlertPage {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	p := AlertPage{Key: key, Episodes: []AlertSummary{}}
	for _, e := range ix.mu.alerts {
		if e.key == key {
			p.Episodes = append(p.Episodes, alertSummary(e))
		}
	}
	slices.SortFunc(p.Episodes, func(a, b AlertSummary) int { return cmp.Compare(b.Episode, a.Episode) })
	return p
}

func alertSummary(e *alertEntry) AlertSummary {
	a := e.a
	return AlertSummary{Key: e.key, Rule: a.Rule, State: strings.TrimPrefix(a.State.String(), "ALERT_STATE_"), Severity: a.Severity,
		Episode: a.Episode, Group: a.Group, Annotations: a.Annotations, Value: a.Value, Threshold: a.Threshold,
		ActiveSince: int64(a.ActiveSinceUnixNano) / 1e6, StartsAt: int64(a.StartsAtUnixNano) / 1e6, EndsAt: int64(a.EndsAtUnixNano) / 1e6,
		TraceIDs: a.TraceIds, IncidentIDs: a.IncidentIds, URL: a.Url}
}

// errNotFound: no such trace, incident or alert in the index.
var errNotFound = fmt.Errorf("view: not in the index")
