package view

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/operators/braidpb"
)

// summary is what the index keeps in memory of one trace: the figures and
// dimensions the overview, explain and layer queries scan. The whole record
// stays in Pebble for the trace page.
type summary struct {
	ID       [16]byte `json:"-"`
	Revision uint32   `json:"rev"`
	Start    int64    `json:"start"` // unix ns
	End      int64    `json:"end"`
	// Latencies in nanoseconds; 0 when unknown.
	TTFT int64 `json:"ttft,omitempty"`
	E2E  int64 `json:"e2e,omitempty"`
	TPOT int64 `json:"tpot,omitempty"`
	// Prompt tokens (0 unknown); hit ratio of the prefix cache (-1 unknown).
	InputTokens int64   `json:"in,omitempty"`
	HitRatio    float32 `json:"hit"`
	KVUsage     float32 `json:"kv"` // KV-cache usage at the request's end, -1 unknown

	Model    string `json:"model,omitempty"`
	Instance string `json:"instance,omitempty"`
	Host     string `json:"host,omitempty"`
	GPU      string `json:"gpu,omitempty"`
	Service  string `json:"service,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Incident string `json:"incident,omitempty"` // the first incident naming it

	Error     bool `json:"err,omitempty"`
	Polluted  bool `json:"polluted,omitempty"`
	Preempted bool `json:"preempted,omitempty"`

	Layers []layerStat `json:"layers,omitempty"`
}

// layerStat is one decoder layer of a trace: the mean KV-cache hit ratio
// (-1 unknown) and total duration of its decode spans.
type layerStat struct {
	Layer    int32   `json:"l"`
	Hit      float32 `json:"h"`
	DecodeNs int64   `json:"d"`
}

// maxLayers bounds the layers kept per trace.
const maxLayers = 256

// summarize reads the summary of a fused trace.
func summarize(ft *braidpb.FusedTrace) summary {
	s := summary{Revision: ft.Revision, Start: int64(ft.StartTimeUnixNano), End: int64(ft.EndTimeUnixNano), HitRatio: -1, KVUsage: -1}
	copy(s.ID[:], ft.TraceId)
	d := ft.GetDerived()
	s.TTFT, s.E2E, s.TPOT = d.GetTtftNanos(), d.GetE2ENanos(), d.GetTpotNanos()
	if s.E2E == 0 {
		s.E2E = int64(ft.GetSummary().GetDurationNano())
	}
	s.InputTokens = d.GetInputTokens()
	if d != nil && d.KvCacheHitRatio != nil {
		s.HitRatio = float32(*d.KvCacheHitRatio)
	}
	s.Model, s.Tenant = d.GetModel(), d.GetTenant()
	s.Error = ft.GetSummary().GetErrorSpanCount() > 0
	for _, f := range ft.Flags {
		switch f {
		case braidpb.Flag_FLAG_ERROR:
			s.Error = true
		case braidpb.Flag_FLAG_POLLUTED:
			s.Polluted = true
		}
	}
	if len(ft.IncidentIds) > 0 {
		s.Polluted = true
		s.Incident = ft.IncidentIds[0]
	}
	// The place: the root span's resource, else the first member's.
	res := placeResource(ft)
	if res != nil {
		s.Instance = attrString(res.Attributes, "service.instance.id")
		s.Host = attrString(res.Attributes, "host.name")
		s.GPU = attrString(res.Attributes, "gpu.uuid")
		s.Service = attrString(res.Attributes, "service.name")
		if s.Model == "" {
			s.Model = attrString(res.Attributes, "model_name")
		}
		if s.Tenant == "" {
			s.Tenant = attrString(res.Attributes, "tenant.id")
		}
	}
	for _, sw := range ft.GetResourceContext().GetSeries() {
		switch sw.Metric {
		case "preemptions":
			if sw.Delta != nil && *sw.Delta > 0 {
				s.Preempted = true
			}
		case "kv_cache_usage":
			s.KVUsage = float32(sw.AtEnd)
		}
	}
	s.Layers = spanLayers(ft.Spans)
	return s
}

// placeResource is the resource of the root span, else of the first span,
// log or point.
func placeResource(ft *braidpb.FusedTrace) *resourcepb.Resource {
	idx := -1
	for _, sp := range ft.Spans {
		if len(sp.GetSpan().GetParentSpanId()) == 0 {
			idx = int(sp.ResourceIndex)
			break
		}
		if idx < 0 {
			idx = int(sp.ResourceIndex)
		}
	}
	if idx < 0 && len(ft.Logs) > 0 {
		idx = int(ft.Logs[0].ResourceIndex)
	}
	if idx < 0 && len(ft.Points) > 0 {
		idx = int(ft.Points[0].ResourceIndex)
	}
	if idx < 0 || idx >= len(ft.Resources) {
		return nil
	}
	return ft.Resources[idx]
}

// spanLayers aggregates the decode-layer spans (llm.decode.layer.N, or any
// span with a layer_id attribute) by layer, sorted by layer.
func spanLayers(spans []*braidpb.FusedSpan) []layerStat {
	type acc struct {
		hit    float64
		hits   int
		decode int64
	}
	var by map[int32]*acc
	var order []int32
	for _, fs := range spans {
		sp := fs.GetSpan()
		if sp == nil {
			continue
		}
		layer, ok := spanLayer(sp)
		if !ok {
			continue
		}
		if by == nil {
			by = map[int32]*acc{}
		}
		a := by[layer]
		if a == nil {
			if len(by) >= maxLayers {
				continue
			}
			a = &acc{}
			by[layer] = a
			order = append(order, layer)
		}
		if sp.EndTimeUnixNano > sp.StartTimeUnixNano {
			a.decode += int64(sp.EndTimeUnixNano - sp.StartTimeUnixNano)
		}
		if v, ok := attrFloat(sp.Attributes, "kv_cache_hit_ratio"); ok && v >= 0 && v <= 1 {
			a.hit += v
			a.hits++
		}
	}
	if len(order) == 0 {
		return nil
	}
	out := make([]layerStat, 0, len(order))
	for _, l := range order {
		a := by[l]
		st := layerStat{Layer: l, Hit: -1, DecodeNs: a.decode}
		if a.hits > 0 {
			st.Hit = float32(a.hit / float64(a.hits))
		}
		out = append(out, st)
	}
	sortLayers(out)
	return out
}

func sortLayers(ls []layerStat) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].Layer < ls[j-1].Layer; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// spanLayer is a decode-layer span's layer: attribute layer_id, else the
// N of a name llm.decode.layer.N.
func spanLayer(sp *tracepb.Span) (int32, bool) {
	if v, ok := attrInt(sp.Attributes, "layer_id"); ok && v >= 0 && v < math.MaxInt32 {
		return int32(v), true
	}
	if n, ok := strings.CutPrefix(sp.Name, "llm.decode.layer."); ok {
		if v, err := strconv.ParseInt(n, 10, 32); err == nil && v >= 0 {
			return int32(v), true
		}
	}
	return 0, false
}

func attrValue(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	v := attrValue(kvs, key)
	if v == nil {
		return ""
	}
	if s, ok := v.Value.(*commonpb.AnyValue_StringValue); ok {
		return s.StringValue
	}
	return anyString(v)
}

func attrInt(kvs []*commonpb.KeyValue, key string) (int64, bool) {
	switch v := attrValue(kvs, key).GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return v.IntValue, true
	case *commonpb.AnyValue_DoubleValue:
		if v.DoubleValue == math.Trunc(v.DoubleValue) && math.Abs(v.DoubleValue) < 1<<53 {
			return int64(v.DoubleValue), true
		}
	case *commonpb.AnyValue_StringValue:
		if n, err := strconv.ParseInt(v.StringValue, 10, 64); err == nil {
			return n, true
		}
	}
	return 0, false
}

func attrFloat(kvs []*commonpb.KeyValue, key string) (float64, bool) {
	switch v := attrValue(kvs, key).GetValue().(type) {
	case *commonpb.AnyValue_DoubleValue:
		return v.DoubleValue, !math.IsNaN(v.DoubleValue) && !math.IsInf(v.DoubleValue, 0)
	case *commonpb.AnyValue_IntValue:
		return float64(v.IntValue), true
	case *commonpb.AnyValue_StringValue:
		if f, err := strconv.ParseFloat(v.StringValue, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	return 0, false
}

// anyString renders an attribute value for display.
func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case nil:
		return ""
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, anyString(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *commonpb.AnyValue_KvlistValue:
		parts := make([]string, 0, len(x.KvlistValue.GetValues()))
		for _, kv := range x.KvlistValue.GetValues() {
			parts = append(parts, kv.GetKey()+"="+anyString(kv.GetValue()))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// dimension values of a summary, for explain and filters. The names are
// the query parameters of the API.
var dimensions = []string{"instance", "gpu", "host", "model", "service", "tenant", "prompt", "cache_hit", "preempted", "incident", "error", "slowest_layer"}

// dim returns the summary's value of dimension name ("" when unknown,
// shown as "(none)").
func (s *summary) dim(name string) string {
	switch name {
	case "instance":
		return s.Instance
	case "gpu":
		return s.GPU
	case "host":
		return s.Host
	case "model":
		return s.Model
	case "service":
		return s.Service
	case "tenant":
		return s.Tenant
	case "prompt":
		return promptBucket(s.InputTokens)
	case "cache_hit":
		return hitBucket(s.HitRatio)
	case "preempted":
		return strconv.FormatBool(s.Preempted)
	case "incident":
		return s.Incident
	case "error":
		return strconv.FormatBool(s.Error)
	case "slowest_layer":
		best, at := int64(-1), int32(-1)
		for _, l := range s.Layers {
			if l.DecodeNs > best {
				best, at = l.DecodeNs, l.Layer
			}
		}
		if at < 0 {
			return ""
		}
		return strconv.Itoa(int(at))
	}
	return ""
}

// promptBucket is the power-of-two bucket of a prompt length: "256-511".
func promptBucket(n int64) string {
	if n <= 0 {
		return ""
	}
	lo := int64(1)
	for lo*2 <= n {
		lo *= 2
	}
	return fmt.Sprintf("%d-%d", lo, lo*2-1)
}

// hitBucket is a prefix-cache hit ratio's quarter: "0-25%" … "75-100%".
func hitBucket(h float32) string {
	if h < 0 {
		return ""
	}
	q := int(h * 4)
	if q > 3 {
		q = 3
	}
	return fmt.Sprintf("%d-%d%%", q*25, q*25+25)
}

// metric returns the summary's latency of metric in ns (0 unknown).
func (s *summary) metric(name string) int64 {
	switch name {
	case "ttft":
		return s.TTFT
	case "tpot":
		return s.TPOT
	default:
		return s.E2E
	}
}

// memBytes estimates the memory of a summary: the struct, its layers and
// the index map entry (strings are interned, so shared).
func (s *summary) memBytes() int {
	return int(summarySize) + 16*len(s.Layers) + 48
}
