package view

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

func nanoTime(ns uint64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, int64(ns)).UTC().Format(time.RFC3339Nano)
}

// IncidentGraph is the pollution graph of inc: its nodes (in first-seen
// order, the root first), edges, root and per-layer counts.
func IncidentGraph(inc *braidpb.Incident) Graph {
	v := Graph{ID: inc.Id, Revision: inc.Revision, State: strings.TrimPrefix(inc.State.String(), "INCIDENT_STATE_"), Host: inc.Host, GPU: inc.Gpu,
		Pattern: kvgraph.KindName(inc.Pattern), First: nanoTime(inc.FirstUnixNano), Last: nanoTime(inc.LastUnixNano), EdgesDropped: inc.EdgesDropped,
		Layers: []LayerCount{}, Nodes: []GraphNode{}, Edges: []GraphEdge{}, Continues: inc.Continues}
	for _, l := range inc.Layers {
		v.Layers = append(v.Layers, LayerCount{Layer: l.Layer, Hits: l.Hits, CorruptedReads: l.CorruptedReads})
	}
	if r := inc.Root; r != nil {
		v.Root = map[string]any{"node": r.Node, "kind": kvgraph.KindName(r.Kind), "request_id": r.RequestId, "block": r.Block, "layer": r.Layer,
			"time": nanoTime(r.TimeUnixNano), "detail": r.Detail}
		if len(r.TraceId) > 0 {
			v.Root["trace_id"] = hex.EncodeToString(r.TraceId)
		}
	}
	polluted := map[string]*braidpb.PollutedRequest{}
	for _, p := range inc.Polluted {
		polluted[p.RequestId] = p
	}
	seen := map[string]int{}
	add := func(id string) {
		if _, ok := seen[id]; ok {
			return
		}
		n := GraphNode{ID: id}
		kind, rest, _ := strings.Cut(id, ":")
		name := strings.TrimPrefix(rest, inc.Gpu+"/")
		switch kind {
		case "req":
			n.Kind, n.Label = "request", name
			if p := polluted[name]; p != nil {
				n.Polluted = true
				n.Via = strings.ToLower(strings.TrimPrefix(p.Via.String(), "POLLUTION_VIA_"))
				if len(p.TraceId) > 0 {
					n.TraceID = hex.EncodeToString(p.TraceId)
				}
			}
			if r := inc.Root; r != nil && r.Node == id && len(r.TraceId) > 0 {
				n.TraceID = hex.EncodeToString(r.TraceId)
			}
		case "blk":
			n.Kind, n.Label = "block", "block "+name
		case "layer":
			n.Kind, n.Label = "layer", "layer "+name
		default:
			n.Kind, n.Label = kind, id
		}
		n.Root = inc.Root != nil && inc.Root.Node == id
		seen[id] = len(v.Nodes)
		v.Nodes = append(v.Nodes, n)
	}
	if inc.Root != nil && inc.Root.Node != "" {
		add(inc.Root.Node)
	}
	for _, e := range inc.Edges {
		add(e.Source)
		add(e.Target)
		v.Edges = append(v.Edges, GraphEdge{Source: e.Source, Target: e.Target, Kind: kvgraph.KindName(e.Kind), Time: nanoTime(e.TimeUnixNano),
			Block: e.Block, Layer: e.Layer, Detail: e.Detail})
	}
	for _, e := range inc.Evidence {
		v.Evidence = append(v.Evidence, map[string]any{"kind": e.Kind, "time": nanoTime(e.TimeUnixNano), "text": e.Text})
	}
	sort.SliceStable(v.Layers, func(i, j int) bool { return v.Layers[i].Layer < v.Layers[j].Layer })
	return v
}

// OriginString writes an input record's coordinates as topic/partition/offset ("" for none).
func OriginString(o *braidpb.Origin) string {
	if o == nil || o.Topic == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d/%d", o.Topic, o.Partition, o.Offset)
}

func originsString(os []*braidpb.Origin) string {
	parts := make([]string, 0, len(os))
	for _, o := range os {
		if s := OriginString(o); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " ")
}

// edgeEvent is a pollution edge as a timeline item.
func edgeEvent(e *braidpb.PollutionEdge) Event {
	text := e.Detail
	if text == "" {
		text = fmt.Sprintf("%s %s → %s", kvgraph.KindName(e.Kind), e.Source, e.Target)
	}
	if e.Block >= 0 {
		text += fmt.Sprintf(" [block %d", e.Block)
		if e.Layer >= 0 {
			text += fmt.Sprintf(", layer %d", e.Layer)
		}
		text += "]"
	}
	return Event{Time: int64(e.TimeUnixNano) / 1e6, Kind: "kv", Text: text, Origin: originsString(e.Evidence)}
}

// IncidentPage is the page of incident id.
func (ix *Index) IncidentPage(id string) (IncidentPage, error) {
	inc, err := ix.incident(id)
	if err != nil {
		return IncidentPage{}, err
	}
	if inc == nil {
		return IncidentPage{}, errNotFound
	}
	p := IncidentPage{Summary: incidentSummary(inc), Graph: IncidentGraph(inc), Timeline: []Event{}, Victims: []Victim{}, Resources: seriesRows(inc.GetResources()),
		Alerts: []AlertSummary{}}
	if r := inc.GetRoot(); r != nil {
		text := fmt.Sprintf("root cause: %s %s", kvgraph.KindName(r.Kind), cmp.Or(r.RequestId, r.Node))
		if r.Detail != "" {
			text += " — " + r.Detail
		}
		p.Timeline = append(p.Timeline, Event{Time: int64(r.TimeUnixNano) / 1e6, Kind: "root", Text: text, Origin: OriginString(r.Origin)})
	}
	for _, e := range inc.Edges {
		p.Timeline = append(p.Timeline, edgeEvent(e))
	}
	for _, e := range inc.Evidence {
		kind := e.Kind
		if kind != "xid" {
			kind = "sanitizer"
		}
		p.Timeline = append(p.Timeline, Event{Time: int64(e.TimeUnixNano) / 1e6, Kind: kind, Text: e.Text, Origin: OriginString(e.Origin)})
	}
	for _, sw := range inc.GetResources().GetSeries() {
		if sw.Metric == "preemptions" && sw.Delta != nil && *sw.Delta > 0 {
			p.Timeline = append(p.Timeline, Event{Time: int64(inc.FirstUnixNano) / 1e6, Kind: "preemption",
				Text: fmt.Sprintf("%g preemptions on %s during the incident", *sw.Delta, sw.Resource)})
		}
	}
	ix.mu.RLock()
	for _, v := range inc.Polluted {
		vi := Victim{RequestID: v.RequestId, Via: strings.ToLower(strings.TrimPrefix(v.Via.String(), "POLLUTION_VIA_")), Time: int64(v.TimeUnixNano) / 1e6, From: v.From}
		if len(v.TraceId) == 16 {
			vi.TraceID = hex.EncodeToString(v.TraceId)
			_, vi.Indexed = ix.mu.pos[[16]byte(v.TraceId)]
		}
		p.Victims = append(p.Victims, vi)
		p.Timeline = append(p.Timeline, Event{Time: vi.Time, Kind: "victim", Text: fmt.Sprintf("request %s polluted (%s, from %s)", v.RequestId, vi.Via, v.From)})
	}
	for _, e := range ix.mu.alerts {
		if slices.Contains(e.a.IncidentIds, id) {
			p.Alerts = append(p.Alerts, alertSummary(e))
		}
	}
	ix.mu.RUnlock()
	slices.SortStableFunc(p.Timeline, func(a, b Event) int { return cmp.Compare(a.Time, b.Time) })
	return p, nil
}

func seriesRows(rc *braidpb.ResourceContext) []SeriesRow {
	out := []SeriesRow{}
	for _, s := range rc.GetSeries() {
		out = append(out, SeriesRow{Metric: s.Metric, Resource: s.Resource, AtStart: s.AtStart, AtEnd: s.AtEnd, Min: s.Min, Max: s.Max, Delta: s.Delta, Samples: s.Samples})
	}
	return out
}

// TracePage is the page of trace id (32 hex characters).
func (ix *Index) TracePage(id string) (TracePage, error) {
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != 16 {
		return TracePage{}, fmt.Errorf("%w: trace id %q: want 32 hex characters", errBadQuery, id)
	}
	ft, err := ix.trace([16]byte(raw))
	if err != nil {
		return TracePage{}, err
	}
	if ft == nil {
		return TracePage{}, errNotFound
	}
	s := summarize(ft)
	p := TracePage{TraceID: id, Revision: ft.Revision, Start: float64(ft.StartTimeUnixNano) / 1e6, End: float64(ft.EndTimeUnixNano) / 1e6,
		Model: s.Model, Instance: s.Instance, Host: s.Host, GPU: s.GPU, Tenant: s.Tenant, Flags: []string{}, Spans: []Span{}, Logs: []Log{},
		KVEvents: []Event{}, Incidents: []IncidentSummary{}, Resources: seriesRows(ft.GetResourceContext())}
	for _, f := range ft.Flags {
		p.Flags = append(p.Flags, f.String())
	}
	if d := ft.GetDerived(); d != nil {
		if b, err := protojson.Marshal(d); err == nil {
			_ = json.Unmarshal(b, &p.Derived)
		}
	}
	p.Spans = waterfall(ft)
	for _, l := range ft.Logs {
		lr := l.GetLog()
		if lr == nil {
			continue
		}
		t := lr.TimeUnixNano
		if t == 0 {
			t = lr.ObservedTimeUnixNano
		}
		sev := lr.SeverityText
		if sev == "" && lr.SeverityNumber != 0 {
			sev = strings.TrimPrefix(lr.SeverityNumber.String(), "SEVERITY_NUMBER_")
		}
		lg := Log{Time: float64(t) / 1e6, Severity: sev, Body: anyString(lr.Body), Origin: OriginString(l.Origin)}
		if len(lr.Attributes) > 0 {
			lg.Attrs = map[string]string{}
			for _, kv := range lr.Attributes {
				lg.Attrs[kv.GetKey()] = anyString(kv.GetValue())
			}
		}
		p.Logs = append(p.Logs, lg)
	}
	slices.SortStableFunc(p.Logs, func(a, b Log) int { return cmp.Compare(a.Time, b.Time) })
	// KV events: the ops of the incidents that name this request.
	reqs := map[string]bool{}
	for _, r := range ft.GetDerived().GetRequestIds() {
		reqs[r] = true
	}
	ids := slices.Clone(ft.IncidentIds)
	ix.mu.RLock()
	for iid, e := range ix.mu.incidents {
		if e.trace[[16]byte(raw)] && !slices.Contains(ids, iid) {
			ids = append(ids, iid)
		}
	}
	ix.mu.RUnlock()
	slices.Sort(ids)
	for _, iid := range ids {
		inc, err := ix.incident(iid)
		if err != nil {
			return TracePage{}, err
		}
		if inc == nil {
			continue
		}
		p.Incidents = append(p.Incidents, incidentSummary(inc))
		for _, e := range inc.Edges {
			if string(e.SourceTraceId) == string(raw) || string(e.TargetTraceId) == string(raw) || reqs[e.SourceRequest] || reqs[e.TargetRequest] {
				p.KVEvents = append(p.KVEvents, edgeEvent(e))
			}
		}
		if r := inc.GetRoot(); r != nil && (string(r.TraceId) == string(raw) || reqs[r.RequestId]) {
			p.KVEvents = append(p.KVEvents, Event{Time: int64(r.TimeUnixNano) / 1e6, Kind: "root",
				Text: "root cause of " + iid + ": " + cmp.Or(r.Detail, kvgraph.KindName(r.Kind)), Origin: OriginString(r.Origin)})
		}
	}
	slices.SortStableFunc(p.KVEvents, func(a, b Event) int { return cmp.Compare(a.Time, b.Time) })
	return p, nil
}

// waterfall lays the spans out: parents before children, depth from the
// parent links (a span whose parent is missing is a root), siblings by
// start time.
func waterfall(ft *braidpb.FusedTrace) []Span {
	byID := map[string]int{}
	spans := make([]Span, 0, len(ft.Spans))
	for _, fs := range ft.Spans {
		sp := fs.GetSpan()
		if sp == nil {
			continue
		}
		s := Span{SpanID: hex.EncodeToString(sp.SpanId), ParentID: hex.EncodeToString(sp.ParentSpanId), Name: sp.Name,
			Start: float64(sp.StartTimeUnixNano) / 1e6, End: float64(sp.EndTimeUnixNano) / 1e6, Attrs: map[string]string{}, Origin: OriginString(fs.Origin)}
		if int(fs.ResourceIndex) < len(ft.Resources) {
			s.Service = attrString(ft.Resources[fs.ResourceIndex].Attributes, "service.name")
		}
		s.Error = sp.GetStatus().GetCode() == 2
		for _, kv := range sp.Attributes {
			s.Attrs[kv.GetKey()] = anyString(kv.GetValue())
		}
		byID[s.SpanID] = len(spans)
		spans = append(spans, s)
	}
	children := map[string][]int{}
	var roots []int
	for i, s := range spans {
		if _, ok := byID[s.ParentID]; s.ParentID != "" && ok && s.ParentID != s.SpanID {
			children[s.ParentID] = append(children[s.ParentID], i)
		} else {
			roots = append(roots, i)
		}
	}
	byStart := func(a, b int) int { return cmp.Compare(spans[a].Start, spans[b].Start) }
	slices.SortStableFunc(roots, byStart)
	out := make([]Span, 0, len(spans))
	done := make([]bool, len(spans))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if done[i] || depth > 64 {
			return
		}
		done[i] = true
		s := spans[i]
		s.Depth = depth
		out = append(out, s)
		kids := children[s.SpanID]
		slices.SortStableFunc(kids, byStart)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	for i := range spans { // cycles of parent links
		if !done[i] {
			walk(i, 0)
		}
	}
	return out
}

var errBadQuery = fmt.Errorf("view: bad query")
