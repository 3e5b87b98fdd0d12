// Package report writes the attribution report of a KV-cache incident:
// root cause and the rule that fired, the evidence timeline with the Kafka
// coordinates of every input record (re-read to confirm them), blast
// radius, per-layer heatmap, alerts, latency impact against the same model
// and instance, a replay command for the window, and the known failure
// modes the incident's features retrieve from braid's knowledge base
// (bleve full-text index over kb/*.md). An optional summary from an
// OpenAI-compatible endpoint is added, marked as generated, with its
// prompt; without one the report is complete and deterministic.
package report

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/braidlabs/braid/connectors/view"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

// Options configure Build.
type Options struct {
	// Reader re-reads the cited input records (nil: they are cited, not
	// re-read).
	Reader Reader
	// MaxRereads bounds the records re-read (default 64), root first.
	MaxRereads int
	// ViewURL is the view's base URL for links into it; with
	// RelativeLinks (a report the view serves) the links are
	// root-relative; with neither there are none.
	ViewURL       string
	RelativeLinks bool
	// Config is the job's configuration file named in the replay command
	// (default braid.yaml).
	Config string
	// Baseline is how far around the incident the latency baseline of the
	// same model and instance reaches (default 15 minutes each side).
	Baseline time.Duration
	// KB is the knowledge base (default: the one shipped, LoadKB).
	KB *KB
	// LLM, when set, adds a generated summary.
	LLM *LLM
}

// Report is an incident's attribution report.
type Report struct {
	ID       string    `json:"id"`
	Revision uint32    `json:"revision"`
	State    string    `json:"state"`
	Host     string    `json:"host"`
	GPU      string    `json:"gpu"`
	Pattern  string    `json:"pattern"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`

	Root Root `json:"root"`
	// Continues is the closed incident whose pollution this one carries
	// on (its root is that incident's), "" for an incident of its own.
	Continues string `json:"continues,omitempty"`
	// Rule is the invariant of the KV-block convention the root broke.
	Rule string `json:"rule"`

	Timeline []Item   `json:"timeline"`
	Victims  []Victim `json:"victims"`
	Direct   int      `json:"direct"`
	Prefix   int      `json:"propagated"`
	// Tenants and models of the victims (indexed ones).
	Tenants []string `json:"tenants"`
	Models  []string `json:"models"`
	// Dropped counts what the incident record left out (broker size).
	Dropped string `json:"dropped,omitempty"`

	Layers    []view.LayerCount   `json:"layers"`
	Heatmap   view.Layers         `json:"heatmap"`
	Resources []view.SeriesRow    `json:"resources"`
	Alerts    []view.AlertSummary `json:"alerts"`
	Impact    []Impact            `json:"impact"`

	Replay string `json:"replay"`

	Features []Feature `json:"features"`
	Known    []Match   `json:"known"`

	Rereads  int `json:"rereads"`  // records re-read
	Verified int `json:"verified"` // of those, holding the op cited
	Cited    int `json:"cited"`    // distinct records cited

	Summary *Summary `json:"summary,omitempty"`

	ViewURL string `json:"view_url,omitempty"`
	// Links: the report links into the view (ViewURL, or root-relative).
	Links bool `json:"-"`
}

// Root is the root cause.
type Root struct {
	Request string    `json:"request"`
	TraceID string    `json:"trace_id,omitempty"`
	Block   int64     `json:"block"`
	Layer   int32     `json:"layer"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Detail  string    `json:"detail"`
	Origin  string    `json:"origin,omitempty"`
}

// Item is one entry of the evidence timeline.
type Item struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Text   string    `json:"text"`
	Origin string    `json:"origin,omitempty"` // topic/partition/offset, space-separated
	// Reread is what re-reading the first cited record found: "verified"
	// (it holds this item's op), "read" (read, op not matched), an error,
	// or "" (not re-read).
	Reread string `json:"reread,omitempty"`
}

// Victim is one polluted request.
type Victim struct {
	RequestID string        `json:"request_id"`
	TraceID   string        `json:"trace_id,omitempty"`
	Via       string        `json:"via"`
	From      string        `json:"from"`
	Time      time.Time     `json:"time"`
	Tenant    string        `json:"tenant,omitempty"`
	Model     string        `json:"model,omitempty"`
	Instance  string        `json:"instance,omitempty"`
	TTFT      time.Duration `json:"ttft,omitempty"`
	TPOT      time.Duration `json:"tpot,omitempty"`
	Indexed   bool          `json:"indexed"`
}

// Impact compares the victims' latency with the baseline of the same
// model and instance (the other requests around the incident).
type Impact struct {
	Model, Instance string
	Metric          string // ttft or tpot
	Victims         int    // victims with the figure
	VictimP50       time.Duration
	Baseline        int // baseline requests with the figure
	BaselineP50     time.Duration
	BaselineP90     time.Duration
}

// Ratio is the victims' median over the baseline's (0 when unknown).
func (im Impact) Ratio() float64 {
	if im.BaselineP50 <= 0 {
		return 0
	}
	return float64(im.VictimP50) / float64(im.BaselineP50)
}

// Build assembles the report of incident id from the view's index.
func Build(ctx context.Context, ix *view.Index, id string, opts Options) (*Report, error) {
	inc, err := ix.Incident(id)
	if err != nil {
		return nil, err
	}
	if inc == nil {
		return nil, fmt.Errorf("%w: incident %q", view.ErrNotFound, id)
	}
	page, err := ix.IncidentPage(id)
	if err != nil {
		return nil, err
	}
	kb := opts.KB
	if kb == nil {
		if kb, err = LoadKB(); err != nil {
			return nil, err
		}
	}
	r := &Report{ID: inc.Id, Revision: inc.Revision, State: strings.TrimPrefix(inc.State.String(), "INCIDENT_STATE_"),
		Host: inc.Host, GPU: inc.Gpu, Pattern: kvgraph.KindName(inc.Pattern),
		First: time.Unix(0, int64(inc.FirstUnixNano)).UTC(), Last: time.Unix(0, int64(inc.LastUnixNano)).UTC(),
		Resources: page.Resources, Alerts: page.Alerts, ViewURL: strings.TrimRight(opts.ViewURL, "/")}
	r.Links = r.ViewURL != "" || opts.RelativeLinks
	r.Continues = inc.Continues
	if rc := inc.GetRoot(); rc != nil {
		r.Root = Root{Request: rc.RequestId, Block: rc.Block, Layer: rc.Layer, Time: time.Unix(0, int64(rc.TimeUnixNano)).UTC(),
			Kind: kvgraph.KindName(rc.Kind), Detail: rc.Detail, Origin: view.OriginString(rc.Origin)}
		if len(rc.TraceId) == 16 {
			r.Root.TraceID = hex.EncodeToString(rc.TraceId)
		}
	}
	r.Rule = rules[inc.Pattern]
	if inc.PollutedDropped+inc.EvidenceDropped+inc.LayersDropped+inc.EdgesDropped > 0 {
		r.Dropped = fmt.Sprintf("the incident record left out %d victims, %d supporting lines, %d layer counts and %d edges (braid.pollution holds every edge)",
			inc.PollutedDropped, inc.EvidenceDropped, inc.LayersDropped, inc.EdgesDropped)
	}
	for _, ev := range page.Timeline {
		r.Timeline = append(r.Timeline, Item{Time: time.UnixMilli(ev.Time).UTC(), Kind: ev.Kind, Text: ev.Text, Origin: ev.Origin})
	}
	r.victims(ix, inc)
	if hm, err := ix.Layers(view.Query{Incident: id, From: r.First.Add(-10 * time.Minute), To: r.Last.Add(10 * time.Minute)}); err == nil {
		r.Heatmap, r.Layers = hm, hm.Corrupted
	}
	r.impact(ix, inc, cmp.Or(opts.Baseline, 15*time.Minute))
	r.Replay = fmt.Sprintf("braid replay --config %s --from %s --to %s --out %s.parquet", cmp.Or(opts.Config, "braid.yaml"),
		r.First.Add(-time.Minute).Format(time.RFC3339), r.Last.Add(time.Minute).Truncate(time.Second).Add(time.Second).Format(time.RFC3339), inc.Id)

	// Re-read the cited records: the root's first, then the timeline's.
	var rootRead *Reread
	layers := 0
	if opts.Reader != nil {
		rootRead, layers = r.reread(ctx, opts.Reader, inc, cmp.Or(opts.MaxRereads, 64))
	}
	ob := observation{inc: inc, root: rootRead, layers: cmp.Or(layers, len(r.Heatmap.Layers))}
	if tid := inc.GetRoot().GetTraceId(); len(tid) == 16 {
		if rq, ok := ix.Request(tid); ok {
			ob.rootPreempted = rq.Preempted
		}
	}
	r.Features = observe(ob)
	if r.Known, err = kb.Search(r.Pattern, r.Features, 5); err != nil {
		return nil, err
	}
	if opts.LLM != nil {
		r.Summary = opts.LLM.Summarize(ctx, r)
	}
	return r, nil
}

// rules: the invariant each pattern's root broke (KV.md, "Clean
// invariant").
var rules = map[braidpb.PollutionKind]string{
	braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE: "dirty_residue: a request read a range of a block it did not write since its alloc, last written by another request, without a matching content hash (kv.block.hash), a zero or a swap-in.",
	braidpb.PollutionKind_POLLUTION_KIND_MIXED_WRITE:   "mixed_write: a request wrote into a block it does not own while another request owns it, or a block got two live owners without sharing a content hash.",
	braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB:     "layer_oob: a write outside [kv.layer.base, kv.layer.base + kv.layer.size) of its layer (kv.write.addr, kv.write.bytes), or beyond the layer count.",
}

func (r *Report) victims(ix *view.Index, inc *braidpb.Incident) {
	tenants, models := map[string]bool{}, map[string]bool{}
	for _, p := range inc.Polluted {
		v := Victim{RequestID: p.RequestId, Via: strings.ToLower(strings.TrimPrefix(p.Via.String(), "POLLUTION_VIA_")), From: p.From,
			Time: time.Unix(0, int64(p.TimeUnixNano)).UTC()}
		if p.Via == braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED {
			r.Prefix++
		} else {
			r.Direct++
		}
		if len(p.TraceId) == 16 {
			v.TraceID = hex.EncodeToString(p.TraceId)
			if rq, ok := ix.Request(p.TraceId); ok {
				v.Indexed, v.Tenant, v.Model, v.Instance, v.TTFT, v.TPOT = true, rq.Tenant, rq.Model, rq.Instance, rq.TTFT, rq.TPOT
				if rq.Tenant != "" {
					tenants[rq.Tenant] = true
				}
				if rq.Model != "" {
					models[rq.Model] = true
				}
			}
		}
		r.Victims = append(r.Victims, v)
	}
	r.Tenants, r.Models = sortedKeys(tenants), sortedKeys(models)
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// impact: per model and instance of the indexed victims, their median TTFT
// and TPOT against the other requests of that model and instance within
// d of the incident.
func (r *Report) impact(ix *view.Index, inc *braidpb.Incident, d time.Duration) {
	type place struct{ model, instance string }
	victims := map[place][]Victim{}
	isVictim := map[string]bool{}
	for _, v := range r.Victims {
		isVictim[v.TraceID] = true
		if v.Indexed && v.Model != "" {
			p := place{v.Model, v.Instance}
			victims[p] = append(victims[p], v)
		}
	}
	places := make([]place, 0, len(victims))
	for p := range victims {
		places = append(places, p)
	}
	slices.SortFunc(places, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.instance, b.instance))
	})
	for _, p := range places {
		base := ix.Requests(view.Query{From: r.First.Add(-d), To: r.Last.Add(d), Filters: map[string]string{"model": p.model, "instance": p.instance}}, 0)
		for _, metric := range []string{"ttft", "tpot"} {
			get := func(ttft, tpot time.Duration) time.Duration {
				if metric == "ttft" {
					return ttft
				}
				return tpot
			}
			var vs, bs []time.Duration
			for _, v := range victims[p] {
				if x := get(v.TTFT, v.TPOT); x > 0 {
					vs = append(vs, x)
				}
			}
			for _, b := range base {
				if x := get(b.TTFT, b.TPOT); x > 0 && !isVictim[b.TraceID] {
					bs = append(bs, x)
				}
			}
			if len(vs) == 0 {
				continue
			}
			im := Impact{Model: p.model, Instance: p.instance, Metric: metric, Victims: len(vs), VictimP50: quantile(vs, 0.5), Baseline: len(bs)}
			if len(bs) > 0 {
				im.BaselineP50, im.BaselineP90 = quantile(bs, 0.5), quantile(bs, 0.9)
			}
			r.Impact = append(r.Impact, im)
		}
	}
}

func quantile(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// reread re-reads up to max distinct cited records, the root's first, and
// marks each timeline item with what its first record held. It returns
// the root's record and the layer count (kv.layer.count) the records
// give, 0 when none does.
func (r *Report) reread(ctx context.Context, rd Reader, inc *braidpb.Incident, limit int) (*Reread, int) {
	cache := map[string]*Reread{}
	get := func(o *braidpb.Origin) *Reread {
		k := view.OriginString(o)
		if k == "" {
			return nil
		}
		if rr, ok := cache[k]; ok {
			return rr
		}
		if len(cache) >= limit || ctx.Err() != nil {
			return nil
		}
		rr := reread(ctx, rd, o)
		cache[k] = &rr
		return &rr
	}
	root := get(inc.GetRoot().GetOrigin())
	cited := map[string]bool{}
	for i := range r.Timeline {
		it := &r.Timeline[i]
		for _, s := range strings.Fields(it.Origin) {
			cited[s] = true
		}
		first, _, _ := strings.Cut(it.Origin, " ")
		if first == "" {
			continue
		}
		o, ok := parseOrigin(first)
		if !ok {
			continue
		}
		rr := get(o)
		switch {
		case rr == nil:
		case rr.Err != "":
			it.Reread = rr.Err
		case holds(rr, it):
			it.Reread = "verified"
		default:
			it.Reread = "read"
		}
	}
	r.Cited = len(cited)
	r.Rereads = len(cache)
	layers := 0
	for _, rr := range cache {
		for _, ev := range rr.Events {
			if ev.Layers > 0 && ev.GPUUUID != nil && string(ev.GPUUUID) == inc.Gpu {
				layers = max(layers, int(ev.Layers))
			}
		}
	}
	for _, it := range r.Timeline {
		if it.Reread == "verified" {
			r.Verified++
		}
	}
	return root, layers
}

func parseOrigin(s string) (*braidpb.Origin, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return nil, false
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j < 0 {
		return nil, false
	}
	var p int32
	var off int64
	if _, err := fmt.Sscan(s[j+1:i], &p); err != nil {
		return nil, false
	}
	if _, err := fmt.Sscan(s[i+1:], &off); err != nil {
		return nil, false
	}
	return &braidpb.Origin{Topic: s[:j], Partition: p, Offset: off}, true
}

// holds reports whether a re-read record holds the op or line an item
// cites: a KV op of the request the item names, or the supporting line's
// text.
func holds(rr *Reread, it *Item) bool {
	for _, ev := range rr.Events {
		switch ev.Op {
		case kvgraph.OpSanitizer, kvgraph.OpXid:
			if len(ev.Body) > 0 && strings.Contains(it.Text, string(ev.Body)) {
				return true
			}
		default:
			if len(ev.Request) > 0 && strings.Contains(it.Text, string(ev.Request)) {
				return true
			}
		}
	}
	return false
}
