package view

// The JSON API the pages are built on. Every endpoint is GET and read-only;
// times are unix milliseconds (numbers), durations milliseconds (float),
// trace ids 32 lower-case hex characters. A query's time range is
// from/to (unix ms; default: the last 15 minutes of event time the index
// holds) and its filters are query parameters named after the dimensions
// (instance=…, gpu=…, model=…; several parameters are ANDed).
//
//	GET /api/status                 Status
//	GET /api/overview               Overview     from, to, filters
//	GET /api/explain                Explain      from, to, filters, metric (ttft|e2e|tpot), lo, hi (ms), sel_from, sel_to (unix ms)
//	GET /api/layers                 Layers       from, to, filters, incident
//	GET /api/traces                 TraceList    from, to, filters, metric, lo, hi, sel_from, sel_to, limit
//	GET /api/incidents              []IncidentSummary   from, to
//	GET /api/incident/{id}          IncidentPage
//	GET /api/trace/{id}             TracePage
//	GET /api/alerts                 []AlertSummary      (latest change of every episode, newest first)
//	GET /api/alert/{key}            AlertPage    (key = rule/group, path-escaped)
//	GET /api/report/{id}            the attribution report (connectors/report) format=html|md|json, when the server has a Reporter
//
// Errors are {"error": "..."} with status 400 (bad query) or 404 (unknown id).

// Status says what the index holds.
type Status struct {
	Traces    int   `json:"traces"`
	Incidents int   `json:"incidents"`
	Alerts    int   `json:"alerts"`
	Oldest    int64 `json:"oldest"` // event time of the oldest indexed trace, 0 when none
	Newest    int64 `json:"newest"` // latest event time seen, 0 when none
	// Records read per topic, and the topics' partitions still behind their
	// end (lag in records) when last checked.
	Read map[string]int64 `json:"read"`
	Lag  int64            `json:"lag"`
	// Distinct values of the main dimensions, for filter menus.
	Models    []string `json:"models"`
	Instances []string `json:"instances"`
	// BytesPerTrace is the index's estimate of its memory per trace.
	BytesPerTrace int   `json:"bytes_per_trace"`
	Retention     int64 `json:"retention_ms"`
	MaxTraces     int   `json:"max_traces"`
}

// Heatmap counts traces by time bucket × latency bucket. Cells holds
// [time index, latency index, count] for the non-empty cells only.
type Heatmap struct {
	Metric string `json:"metric"` // ttft, e2e or tpot
	// Times[i] is the start of time bucket i (unix ms); every bucket is
	// BucketMs wide.
	Times    []int64 `json:"times"`
	BucketMs int64   `json:"bucket_ms"`
	// Bounds[j], Bounds[j+1] are latency bucket j's bounds in ms
	// (logarithmic); len(Bounds) = buckets + 1.
	Bounds []float64  `json:"bounds"`
	Cells  [][3]int64 `json:"cells"`
	Max    int64      `json:"max"` // the largest count of a cell
}

// Series are per-time-bucket figures on the same buckets as the heatmaps.
type Series struct {
	Times     []int64   `json:"times"`
	Rate      []float64 `json:"rate"`       // requests per second
	ErrorRate []float64 `json:"error_rate"` // share of requests with an error span, 0..1
	KVUsage   []float64 `json:"kv_usage"`   // mean KV-cache usage (0..1) at the requests' end; null → NaN is sent as -1
	TTFTP99   []float64 `json:"ttft_p99"`   // ms, -1 when the bucket is empty
	E2EP99    []float64 `json:"e2e_p99"`    // ms
	Polluted  []int64   `json:"polluted"`   // requests an incident names
}

// Group is one model × instance row of the overview.
type Group struct {
	Model     string  `json:"model"`
	Instance  string  `json:"instance"`
	Host      string  `json:"host"`
	GPU       string  `json:"gpu"`
	Requests  int     `json:"requests"`
	ErrorRate float64 `json:"error_rate"`
	TTFTP50   float64 `json:"ttft_p50"`
	TTFTP99   float64 `json:"ttft_p99"`
	E2EP99    float64 `json:"e2e_p99"`
	Polluted  int     `json:"polluted"`
}

// Overview is the landing page's data.
type Overview struct {
	From      int64             `json:"from"`
	To        int64             `json:"to"`
	Filters   map[string]string `json:"filters"`
	Total     int               `json:"total"` // traces in range and filter
	TTFT      Heatmap           `json:"ttft"`
	E2E       Heatmap           `json:"e2e"`
	Series    Series            `json:"series"`
	Groups    []Group           `json:"groups"`
	Firing    []AlertSummary    `json:"firing"`    // alerts whose last change is firing
	Incidents []IncidentSummary `json:"incidents"` // incidents in range, newest first
}

// Value is one value of a dimension: its share of the selection and of the
// baseline (the other traces of the range and filter).
type Value struct {
	Value     string  `json:"value"`
	Selected  int     `json:"selected"`
	Baseline  int     `json:"baseline"`
	SelShare  float64 `json:"sel_share"`
	BaseShare float64 `json:"base_share"`
}

// Dimension ranks how well one dimension tells the selection from the
// baseline: Score is the total variation distance between the two
// distributions of its values (0: the same; 1: disjoint). Values are
// sorted by SelShare − BaseShare, largest first.
type Dimension struct {
	Name   string  `json:"name"`
	Score  float64 `json:"score"`
	Values []Value `json:"values"`
}

// Explain is the spike → explanation page's data: dimensions ranked by
// Score, highest first.
type Explain struct {
	Selected   int         `json:"selected"`
	Baseline   int         `json:"baseline"`
	Dimensions []Dimension `json:"dimensions"`
}

// Layers is a decoder layer × time heatmap of the selection: for each
// non-empty cell [time index, layer index, value]. With incident=ID,
// Corrupted holds the incident's per-layer counts and Polluted the layers
// it names (most corrupted reads first).
type Layers struct {
	Times     []int64      `json:"times"`
	BucketMs  int64        `json:"bucket_ms"`
	Layers    []int64      `json:"layers"`
	HitRatio  [][3]float64 `json:"hit_ratio"` // mean kv_cache_hit_ratio of the layer's decode spans
	DecodeMs  [][3]float64 `json:"decode_ms"` // mean decode time of the layer's spans
	Corrupted []LayerCount `json:"corrupted,omitempty"`
	Polluted  []int64      `json:"polluted,omitempty"`
	Traces    int          `json:"traces"`
}

// LayerCount is one layer of an incident's per-layer counts.
type LayerCount struct {
	Layer          int32  `json:"layer"`
	Hits           uint32 `json:"hits"`
	CorruptedReads uint32 `json:"corrupted_reads"`
}

// TraceRow is one trace of a list.
type TraceRow struct {
	TraceID   string   `json:"trace_id"`
	Start     int64    `json:"start"`
	Model     string   `json:"model"`
	Instance  string   `json:"instance"`
	Tenant    string   `json:"tenant"`
	TTFT      float64  `json:"ttft_ms"`
	E2E       float64  `json:"e2e_ms"`
	Error     bool     `json:"error"`
	Polluted  bool     `json:"polluted"`
	Incidents []string `json:"incidents,omitempty"`
}

// TraceList is the slowest traces of a query (by its metric), at most limit.
type TraceList struct {
	Total  int        `json:"total"`
	Traces []TraceRow `json:"traces"`
}

// IncidentSummary is one incident in a list.
type IncidentSummary struct {
	ID       string `json:"id"`
	State    string `json:"state"` // OPEN or CLOSED
	Pattern  string `json:"pattern"`
	Host     string `json:"host"`
	GPU      string `json:"gpu"`
	First    int64  `json:"first"`
	Last     int64  `json:"last"`
	Root     string `json:"root"` // root request id (or node)
	Victims  int    `json:"victims"`
	Revision uint32 `json:"revision"`
}

// AlertSummary is the latest change of one alert episode.
type AlertSummary struct {
	Key         string            `json:"key"` // rule/group
	Rule        string            `json:"rule"`
	State       string            `json:"state"` // PENDING, FIRING, RESOLVED, INACTIVE
	Severity    string            `json:"severity"`
	Episode     uint64            `json:"episode"`
	Group       map[string]string `json:"group"`
	Annotations map[string]string `json:"annotations"`
	Value       *float64          `json:"value,omitempty"`
	Threshold   *float64          `json:"threshold,omitempty"`
	ActiveSince int64             `json:"active_since"`
	StartsAt    int64             `json:"starts_at"`
	EndsAt      int64             `json:"ends_at"`
	TraceIDs    []string          `json:"trace_ids,omitempty"`
	IncidentIDs []string          `json:"incident_ids,omitempty"`
	// URL is the record's url: the generatorURL sent to Alertmanager
	// (alerts.view_url + /alerts/ + key), when configured.
	URL string `json:"url,omitempty"`
}

// AlertPage is one alert's episodes, newest first.
type AlertPage struct {
	Key      string         `json:"key"`
	Episodes []AlertSummary `json:"episodes"`
}

// GraphNode is a node of an incident's pollution graph.
type GraphNode struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"` // request, block, layer
	Label    string `json:"label"`
	Polluted bool   `json:"polluted,omitempty"`
	Via      string `json:"via,omitempty"` // direct or propagated
	TraceID  string `json:"trace_id,omitempty"`
	Root     bool   `json:"root,omitempty"`
}

// GraphEdge is an edge of an incident's pollution graph.
type GraphEdge struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Kind   string `json:"kind"`
	Time   string `json:"time"`
	Block  int64  `json:"block"`
	Layer  int32  `json:"layer"`
	Detail string `json:"detail,omitempty"`
}

// Graph is an incident's pollution graph (also `braid graph --format json`).
type Graph struct {
	ID           string           `json:"id"`
	Revision     uint32           `json:"revision"`
	State        string           `json:"state"`
	Host         string           `json:"host"`
	GPU          string           `json:"gpu"`
	Pattern      string           `json:"pattern"`
	Root         map[string]any   `json:"root"`
	Continues    string           `json:"continues,omitempty"` // the closed incident whose pollution this one carries on
	First        string           `json:"first"`
	Last         string           `json:"last"`
	Nodes        []GraphNode      `json:"nodes"`
	Edges        []GraphEdge      `json:"edges"`
	EdgesDropped uint32           `json:"edges_dropped,omitempty"`
	Layers       []LayerCount     `json:"layers"`
	Evidence     []map[string]any `json:"evidence,omitempty"`
}

// Event is one item of a timeline.
type Event struct {
	Time   int64  `json:"time"`
	Kind   string `json:"kind"` // kv (a pollution edge's op), sanitizer, xid, preemption, root, victim, log
	Text   string `json:"text"`
	Origin string `json:"origin,omitempty"` // topic/partition/offset of the input record
}

// Victim is one polluted request of an incident.
type Victim struct {
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id,omitempty"`
	Via       string `json:"via"`
	Time      int64  `json:"time"`
	From      string `json:"from"`
	Indexed   bool   `json:"indexed"` // its trace is in the index (its page exists)
}

// IncidentPage is the incident page's data.
type IncidentPage struct {
	Summary  IncidentSummary `json:"summary"`
	Graph    Graph           `json:"graph"`
	Timeline []Event         `json:"timeline"`
	Victims  []Victim        `json:"victims"`
	// Resource context of the incident's GPU and server over its window.
	Resources []SeriesRow    `json:"resources"`
	Alerts    []AlertSummary `json:"alerts"` // alerts that name the incident
}

// SeriesRow is one resource series over a window.
type SeriesRow struct {
	Metric   string   `json:"metric"`
	Resource string   `json:"resource"`
	AtStart  *float64 `json:"at_start,omitempty"`
	AtEnd    float64  `json:"at_end"`
	Min      float64  `json:"min"`
	Max      float64  `json:"max"`
	Delta    *float64 `json:"delta,omitempty"`
	Samples  uint32   `json:"samples"`
}

// Span is one span of a trace's waterfall.
type Span struct {
	SpanID   string            `json:"span_id"`
	ParentID string            `json:"parent_id,omitempty"`
	Name     string            `json:"name"`
	Service  string            `json:"service"`
	Start    float64           `json:"start"` // unix ms, fractional
	End      float64           `json:"end"`
	Error    bool              `json:"error,omitempty"`
	Depth    int               `json:"depth"`
	Attrs    map[string]string `json:"attrs"`
	Origin   string            `json:"origin,omitempty"`
}

// Log is one log record of a trace.
type Log struct {
	Time     float64           `json:"time"`
	Severity string            `json:"severity"`
	Body     string            `json:"body"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Origin   string            `json:"origin,omitempty"`
}

// TracePage is the trace page's data.
type TracePage struct {
	TraceID   string            `json:"trace_id"`
	Revision  uint32            `json:"revision"`
	Start     float64           `json:"start"`
	End       float64           `json:"end"`
	Model     string            `json:"model"`
	Instance  string            `json:"instance"`
	Host      string            `json:"host"`
	GPU       string            `json:"gpu"`
	Tenant    string            `json:"tenant"`
	Flags     []string          `json:"flags"`
	Derived   map[string]any    `json:"derived"` // the Derived message as protojson
	Spans     []Span            `json:"spans"`
	Logs      []Log             `json:"logs"`
	KVEvents  []Event           `json:"kv_events"` // KV ops of the incidents that name the request, on the same axis
	Incidents []IncidentSummary `json:"incidents"`
	Resources []SeriesRow       `json:"resources"`
}
