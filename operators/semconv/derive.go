package semconv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/operators/braidpb"
)

// Log attributes of braid's structured-log convention.
const (
	AttrContextHint   = "llm_context_hint"
	AttrSchemaVersion = "log_schema_version"
)

// Anchor invalidity reasons (braidpb.Anchor.reason).
const (
	ReasonUnknownRequestID = "unknown_request_id"
	ReasonZeroTime         = "zero_time"
	ReasonOutsideRequest   = "outside_request"
	ReasonNoRequestWindow  = "no_request_window"
	ReasonMissingLayer     = "missing_layer"
	ReasonNegativeLayer    = "negative_layer"
	ReasonLayerOutOfRange  = "layer_out_of_range"
	ReasonLayerMismatch    = "layer_mismatch"
)

// CounterSet counts, process-wide, what Derivers saw. Safe for concurrent
// use.
type CounterSet struct {
	Spans                 atomic.Int64
	LayerSpans            atomic.Int64
	Logs                  atomic.Int64
	LogsWithRequestID     atomic.Int64
	LogsWithSchemaVersion atomic.Int64
	LogsWithValidHint     atomic.Int64
	LogsWithInvalidHint   atomic.Int64
	Anchors               atomic.Int64
	InvalidAnchors        atomic.Int64
}

// Counters are the process-wide coverage and compliance counters, for the
// admin endpoint. A Deriver adds to them unless its Quiet field is set.
var Counters CounterSet

// Snapshot returns the counters by name (snake_case), for export.
func (c *CounterSet) Snapshot() map[string]int64 {
	return map[string]int64{
		"spans":                    c.Spans.Load(),
		"layer_spans":              c.LayerSpans.Load(),
		"logs":                     c.Logs.Load(),
		"logs_with_request_id":     c.LogsWithRequestID.Load(),
		"logs_with_schema_version": c.LogsWithSchemaVersion.Load(),
		"logs_with_valid_hint":     c.LogsWithValidHint.Load(),
		"logs_with_invalid_hint":   c.LogsWithInvalidHint.Load(),
		"anchors":                  c.Anchors.Load(),
		"invalid_anchors":          c.InvalidAnchors.Load(),
	}
}

// ParseContextHint parses an llm_context_hint value "key=value;key=value".
// Keys match [a-z_][a-z0-9_.]*, values are non-empty (they may hold '='
// but not ';'), keys are distinct; one trailing ';' is allowed, no other
// empty pair, and no whitespace is trimmed. The pairs come back in text
// order.
func ParseContextHint(s string) ([]KV, error) {
	if s == "" {
		return nil, errors.New("semconv: empty context hint")
	}
	s = strings.TrimSuffix(s, ";")
	var kvs []KV
	for pair := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("semconv: context hint pair %q: no '='", pair)
		case !validHintKey(k):
			return nil, fmt.Errorf("semconv: context hint key %q: want [a-z_][a-z0-9_.]*", k)
		case v == "":
			return nil, fmt.Errorf("semconv: context hint key %q: empty value", k)
		}
		for _, kv := range kvs {
			if kv.Key == k {
				return nil, fmt.Errorf("semconv: context hint key %q: duplicate", k)
			}
		}
		kvs = append(kvs, KV{Key: k, Value: v})
	}
	return kvs, nil
}

func validHintKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// latency figures read from gen_ai.latency.* attributes.
const (
	latTTFT = iota
	latE2E
	latQueue
	latPrefill
	latDecode
	latInference
	latKVTransfer
	numLat
)

var latIndex = map[string]int{
	KeyTTFT:                latTTFT,
	KeyE2E:                 latE2E,
	KeyQueueTime:           latQueue,
	KeyPrefillTime:         latPrefill,
	KeyDecodeTime:          latDecode,
	KeyInferenceTime:       latInference,
	KeyKVCacheTransferTime: latKVTransfer,
}

type spanKind uint8

const (
	kindOther spanKind = iota
	kindPrefill
	kindLayer
	kindDecode // llm.decode* other than a layer span, llm.sampling
)

type spanRec struct {
	kind        spanKind
	root        bool
	start, end  uint64
	rid         string
	lat         [numLat]int64 // -1: absent
	inTok       int64         // -1: absent
	outTok      int64         // -1: absent
	model       string
	reqModel    string
	op          string
	provider    string
	nameLayer   int64 // N of llm.decode.layer.N; -1: not a number
	layer       int64
	layerState  uint8 // 0 missing, 1 present, 2 not an integer
	seqLen      int64
	hitRatio    float64
	hasHit      bool
	spec        bool
	layerCount  int64
	kvXferStart uint64
	kvXferEnd   uint64
}

type logRec struct {
	time   uint64
	schema string
	hint   uint8 // 0 none, 1 valid, 2 invalid
	hasRID bool
	pairs  []KV
}

// Deriver computes the Derived figures of one request (trace) from its
// serialized OTLP spans and log records. The zero value is ready to use,
// with the default request-id rules. A Deriver is not safe for concurrent
// use; Reset it to reuse its memory for the next request.
type Deriver struct {
	// IDs extracts request ids; nil means DefaultRequestIDs().
	IDs *RequestIDs
	// Quiet keeps the Deriver from adding to the global Counters (set it
	// when deriving members that were already counted, e.g. a revision).
	Quiet bool

	spans      []spanRec
	logs       []logRec
	layerCount int64  // from resources
	lastRes    []byte // a copy of the resource read last, not to read it again

	computed bool
	invalid  int
	// anchors and invalid anchors already added to Counters
	countedAnchors, countedInvalid int
}

func (d *Deriver) ids() *RequestIDs {
	if d.IDs != nil {
		return d.IDs
	}
	return defaultIDs
}

// Reset forgets every member, keeping the memory, IDs and Quiet.
func (d *Deriver) Reset() {
	clear(d.spans)
	d.spans = d.spans[:0]
	clear(d.logs)
	d.logs = d.logs[:0]
	d.layerCount = 0
	d.lastRes = d.lastRes[:0]
	d.computed, d.invalid = false, 0
	d.countedAnchors, d.countedInvalid = 0, 0
}

// AddSpan adds a serialized Span and its serialized Resource (may be nil).
// Malformed bytes are read as far as they go.
func (d *Deriver) AddSpan(span, resource []byte) {
	d.computed = false
	d.resourceLayerCount(resource)
	r := spanRec{inTok: -1, outTok: -1, nameLayer: -1}
	for i := range r.lat {
		r.lat[i] = -1
	}
	r.rid, _ = d.ids().FromSpan(span)
	hasParent := false
	b := span
	for len(b) > 0 {
		num, typ, raw, x, rest, ok := consumeField(b)
		if !ok {
			break
		}
		b = rest
		switch {
		case num == 4 && typ == protowire.BytesType:
			hasParent = len(raw) > 0 && !allZero(raw)
		case num == 5 && typ == protowire.BytesType:
			r.kind, r.nameLayer = classifySpan(raw)
		case num == 7 && typ == protowire.Fixed64Type:
			r.start = x
		case num == 8 && typ == protowire.Fixed64Type:
			r.end = x
		case num == 9 && typ == protowire.BytesType:
			k, v := parseKeyValue(raw)
			r.attr(k, v)
		case num == 11 && typ == protowire.BytesType:
			r.event(raw)
		}
	}
	r.root = !hasParent
	d.spans = append(d.spans, r)
	if !d.Quiet {
		Counters.Spans.Add(1)
		if r.kind == kindLayer {
			Counters.LayerSpans.Add(1)
		}
	}
}

func (d *Deriver) resourceLayerCount(resource []byte) {
	if len(resource) == 0 {
		return
	}
	// Members of one request mostly share one resource.
	if bytes.Equal(resource, d.lastRes) {
		return
	}
	d.lastRes = append(d.lastRes[:0], resource...)
	it := attrIter{msg: resource, field: ResourceAttrs}
	for {
		k, v, ok := it.next()
		if !ok {
			return
		}
		if c, ok := spanKeyBytes(k); ok && c == KeyLayerCount {
			if n, ok := v.Int(); ok && n > d.layerCount {
				d.layerCount = n
			}
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func classifySpan(name []byte) (spanKind, int64) {
	switch {
	case bytes.HasPrefix(name, []byte(SpanDecodeLayerPref)):
		n, ok := atoi(name[len(SpanDecodeLayerPref):])
		if !ok || n < 0 {
			n = -1
		}
		return kindLayer, n
	case string(name) == SpanPrefill:
		return kindPrefill, -1
	case bytes.HasPrefix(name, []byte("llm.decode")), string(name) == SpanSampling:
		return kindDecode, -1
	}
	return kindOther, -1
}

func internStr(old string, b []byte) string {
	if old == string(b) {
		return old
	}
	return string(b)
}

func (r *spanRec) attr(k []byte, v Value) {
	c, ok := spanKeyBytes(k)
	if !ok {
		return
	}
	switch c {
	case KeyInputTokens:
		if n, ok := v.Int(); ok && n >= 0 {
			r.inTok = n
		}
	case KeyOutputTokens:
		if n, ok := v.Int(); ok && n >= 0 {
			r.outTok = n
		}
	case KeyModel:
		if v.Type == ValueString && len(v.raw) > 0 {
			r.model = internStr(r.model, v.raw)
		}
	case KeyRequestModel:
		if v.Type == ValueString && len(v.raw) > 0 {
			r.reqModel = internStr(r.reqModel, v.raw)
		}
	case KeyOperation:
		if v.Type == ValueString && len(v.raw) > 0 {
			r.op = internStr(r.op, v.raw)
		}
	case KeyProvider:
		// gen_ai.provider.name wins over the older gen_ai.system.
		if v.Type == ValueString && len(v.raw) > 0 && (r.provider == "" || string(k) == "gen_ai.provider.name") {
			r.provider = internStr(r.provider, v.raw)
		}
	case KeyLayerID:
		if n, ok := v.Int(); ok {
			r.layer, r.layerState = n, 1
		} else {
			r.layerState = 2
		}
	case KeySeqLen:
		if n, ok := v.Int(); ok {
			r.seqLen = n
		}
	case KeyKVCacheHitRatio:
		if f, ok := v.Float(); ok && !math.IsInf(f, 0) {
			r.hitRatio, r.hasHit = f, true
		}
	case KeyIsSpeculative:
		r.spec, _ = v.Bool()
	case KeyLayerCount:
		if n, ok := v.Int(); ok && n > r.layerCount {
			r.layerCount = n
		}
	default:
		if i, ok := latIndex[c]; ok {
			if f, ok := v.Float(); ok && f >= 0 && !math.IsInf(f, 0) {
				r.lat[i] = int64(math.Round(f * 1e9))
			}
		}
	}
}

// event reads a Span.Event (time 1, name 2) for the KV-transfer events.
func (r *spanRec) event(b []byte) {
	var t uint64
	var name []byte
	for len(b) > 0 {
		num, typ, raw, x, rest, ok := consumeField(b)
		if !ok {
			break
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			t = x
		case num == 2 && typ == protowire.BytesType:
			name = raw
		}
	}
	if t == 0 {
		return
	}
	switch string(name) {
	case "kv_cache_transfer_start":
		if r.kvXferStart == 0 || t < r.kvXferStart {
			r.kvXferStart = t
		}
	case "kv_cache_transfer_end":
		if t > r.kvXferEnd {
			r.kvXferEnd = t
		}
	}
}

// AddLog adds a serialized LogRecord and its serialized Resource (may be
// nil).
func (d *Deriver) AddLog(log, resource []byte) {
	d.computed = false
	d.resourceLayerCount(resource)
	var l logRec
	var observed uint64
	b := log
	for len(b) > 0 {
		num, typ, raw, x, rest, ok := consumeField(b)
		if !ok {
			break
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			l.time = x
		case num == 11 && typ == protowire.Fixed64Type:
			observed = x
		case num == 6 && typ == protowire.BytesType:
			k, v := parseKeyValue(raw)
			switch string(k) {
			case AttrSchemaVersion:
				if v.IsScalar() && l.schema == "" {
					if s := v.String(); s != "" {
						l.schema = s
					}
				}
			case AttrContextHint:
				if l.hint != 0 {
					continue
				}
				l.hint = 2
				if v.Type == ValueString {
					if kvs, err := ParseContextHint(string(v.raw)); err == nil {
						l.hint, l.pairs = 1, kvs
					}
				}
			}
		}
	}
	if l.time == 0 {
		l.time = observed
	}
	l.hasRID = d.ids().hasLogID(log)
	d.logs = append(d.logs, l)
	if !d.Quiet {
		Counters.Logs.Add(1)
		if l.hasRID {
			Counters.LogsWithRequestID.Add(1)
		}
		if l.schema != "" {
			Counters.LogsWithSchemaVersion.Add(1)
		}
		switch l.hint {
		case 1:
			Counters.LogsWithValidHint.Add(1)
		case 2:
			Counters.LogsWithInvalidHint.Add(1)
		}
	}
}

// InvalidAnchors returns the number of invalid anchors among the members
// added so far.
func (d *Deriver) InvalidAnchors() int {
	if !d.computed {
		d.Derived()
	}
	return d.invalid
}

type window struct{ start, end uint64 }

func (w *window) add(s, e uint64) {
	if s != 0 && (w.start == 0 || s < w.start) {
		w.start = s
	}
	if e > w.end {
		w.end = e
	}
}

func (w window) known() bool { return w.start != 0 }

func (w window) contains(t uint64) bool {
	return t >= w.start && (w.end == 0 || t <= w.end)
}

// Derived computes the figures of the members added so far. The result
// depends only on the set of members, not on the order they were added
// in; repeated fields are sorted. It returns a new message each time.
func (d *Deriver) Derived() *braidpb.Derived {
	out := &braidpb.Derived{}
	ids := d.ids()

	// Request ids, windows, root, latency attributes, tokens, names.
	var lat [numLat]int64
	for i := range lat {
		lat[i] = -1
	}
	inTok, outTok := int64(-1), int64(-1)
	var model, reqModel, op, provider string
	var root, prefill window
	var decodeEnd, xferStart, xferEnd uint64
	windows := map[string]*window{}
	layerCount := d.layerCount
	var hits []float64
	for i := range d.spans {
		s := &d.spans[i]
		if s.rid != "" {
			w := windows[s.rid]
			if w == nil {
				w = &window{}
				windows[s.rid] = w
			}
			if s.kind != kindLayer {
				w.add(s.start, s.end)
			}
		}
		if s.root {
			root.add(s.start, s.end)
		}
		for j, v := range s.lat {
			lat[j] = max(lat[j], v)
		}
		inTok = max(inTok, s.inTok)
		outTok = max(outTok, s.outTok)
		model = minNonEmpty(model, s.model)
		reqModel = minNonEmpty(reqModel, s.reqModel)
		op = minNonEmpty(op, s.op)
		provider = minNonEmpty(provider, s.provider)
		switch s.kind {
		case kindPrefill:
			prefill.add(s.start, s.end)
		case kindLayer, kindDecode:
			decodeEnd = max(decodeEnd, s.end)
		}
		if s.kvXferStart != 0 && (xferStart == 0 || s.kvXferStart < xferStart) {
			xferStart = s.kvXferStart
		}
		xferEnd = max(xferEnd, s.kvXferEnd)
		layerCount = max(layerCount, s.layerCount)
		if s.hasHit {
			hits = append(hits, s.hitRatio)
		}
	}
	for rid := range windows {
		out.RequestIds = append(out.RequestIds, rid)
	}
	slices.Sort(out.RequestIds)

	// Fallbacks from span timing.
	if lat[latTTFT] < 0 && root.known() && prefill.end > root.start {
		lat[latTTFT] = int64(prefill.end - root.start)
	}
	if lat[latE2E] < 0 && root.known() && root.end > root.start {
		lat[latE2E] = int64(root.end - root.start)
	}
	if lat[latPrefill] < 0 && prefill.known() && prefill.end > prefill.start {
		lat[latPrefill] = int64(prefill.end - prefill.start)
	}
	if lat[latDecode] < 0 && prefill.end != 0 && decodeEnd > prefill.end {
		lat[latDecode] = int64(decodeEnd - prefill.end)
	}
	if lat[latInference] < 0 && lat[latPrefill] >= 0 && lat[latDecode] >= 0 {
		lat[latInference] = lat[latPrefill] + lat[latDecode]
	}
	if lat[latKVTransfer] < 0 && xferStart != 0 && xferEnd > xferStart {
		lat[latKVTransfer] = int64(xferEnd - xferStart)
	}
	pos := func(v int64) int64 { return max(v, 0) }
	out.TtftNanos = pos(lat[latTTFT])
	out.E2ENanos = pos(lat[latE2E])
	out.QueueTimeNanos = pos(lat[latQueue])
	out.PrefillTimeNanos = pos(lat[latPrefill])
	out.DecodeTimeNanos = pos(lat[latDecode])
	out.InferenceTimeNanos = pos(lat[latInference])
	out.KvCacheTransferNanos = pos(lat[latKVTransfer])
	out.InputTokens = pos(inTok)
	out.OutputTokens = pos(outTok)
	if out.OutputTokens > 1 && out.DecodeTimeNanos > 0 {
		out.TpotNanos = out.DecodeTimeNanos / (out.OutputTokens - 1)
	}
	if len(hits) > 0 {
		slices.Sort(hits)
		var sum float64
		for _, h := range hits {
			sum += h
		}
		mean := sum / float64(len(hits))
		out.KvCacheHitRatio = &mean
	}
	out.Model = model
	if out.Model == "" {
		out.Model = reqModel
	}
	out.Operation = op
	out.Provider = provider
	out.LayerCount = layerCount

	// Decode-layer statistics and anchors.
	byLayer := map[int64]*braidpb.LayerStats{}
	bySeq := map[int64]*braidpb.LayerStats{}
	var invalid int
	var reasons []string
	for i := range d.spans {
		s := &d.spans[i]
		if s.kind != kindLayer {
			continue
		}
		if s.spec {
			out.SpeculativeSpans++
		}
		var dur int64
		if s.start != 0 && s.end >= s.start {
			dur = int64(s.end - s.start)
		}
		key := s.nameLayer
		if s.layerState == 1 && s.layer >= 0 {
			key = s.layer
		}
		if key >= 0 {
			addStats(byLayer, key, dur)
		}
		addStats(bySeq, seqBucket(s.seqLen), dur)

		a := &braidpb.Anchor{TimeUnixNano: s.start, LayerId: -1}
		if s.layerState == 1 {
			a.LayerId = s.layer
		}
		a.RequestId = s.rid
		if a.RequestId == "" {
			a.RequestId = pickRequest(out.RequestIds, windows, s.start)
		}
		reasons = reasons[:0]
		if !ids.KnownFormat(a.RequestId) {
			reasons = append(reasons, ReasonUnknownRequestID)
		}
		w, ok := windows[a.RequestId]
		if !ok || !w.known() {
			w = &root
		}
		switch {
		case s.start == 0:
			reasons = append(reasons, ReasonZeroTime)
		case !w.known():
			reasons = append(reasons, ReasonNoRequestWindow)
		case !w.contains(s.start):
			reasons = append(reasons, ReasonOutsideRequest)
		}
		switch {
		case s.layerState != 1:
			reasons = append(reasons, ReasonMissingLayer)
		case s.layer < 0:
			reasons = append(reasons, ReasonNegativeLayer)
		default:
			if layerCount > 0 && s.layer >= layerCount {
				reasons = append(reasons, ReasonLayerOutOfRange)
			}
			if s.nameLayer != s.layer {
				reasons = append(reasons, ReasonLayerMismatch)
			}
		}
		a.Valid = len(reasons) == 0
		if !a.Valid {
			a.Reason = strings.Join(reasons, ",")
			invalid++
		}
		out.Anchors = append(out.Anchors, a)
	}
	out.Layers = sortedStats(byLayer)
	out.SeqLenBuckets = sortedStats(bySeq)
	slices.SortFunc(out.Anchors, func(a, b *braidpb.Anchor) int {
		if c := strings.Compare(a.RequestId, b.RequestId); c != 0 {
			return c
		}
		if a.TimeUnixNano != b.TimeUnixNano {
			return cmpU64(a.TimeUnixNano, b.TimeUnixNano)
		}
		if a.LayerId != b.LayerId {
			return cmpI64(a.LayerId, b.LayerId)
		}
		if a.Valid != b.Valid {
			if a.Valid {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Reason, b.Reason)
	})

	// Logs.
	lc := &braidpb.LogCompliance{}
	type hint struct {
		time       uint64
		key, value string
	}
	var hints []hint
	for i := range d.logs {
		l := &d.logs[i]
		lc.Logs++
		if l.hasRID {
			lc.WithRequestId++
		}
		if l.schema != "" {
			lc.WithSchemaVersion++
			if !slices.Contains(out.LogSchemaVersions, l.schema) {
				out.LogSchemaVersions = append(out.LogSchemaVersions, l.schema)
			}
		}
		switch l.hint {
		case 1:
			lc.WithValidHint++
			for _, kv := range l.pairs {
				hints = append(hints, hint{l.time, kv.Key, kv.Value})
			}
		case 2:
			lc.WithInvalidHint++
		}
	}
	slices.Sort(out.LogSchemaVersions)
	slices.SortFunc(hints, func(a, b hint) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		if a.time != b.time {
			return cmpU64(a.time, b.time)
		}
		return strings.Compare(a.value, b.value)
	})
	for i, h := range hints {
		if i+1 < len(hints) && hints[i+1].key == h.key {
			continue // a later log gives this key
		}
		out.Hints = append(out.Hints, &braidpb.Hint{Key: h.key, Value: h.value})
	}
	if lc.Logs > 0 {
		out.Logs = lc
	}

	d.computed, d.invalid = true, invalid
	if !d.Quiet {
		// Counters hold the anchors of each Deriver's latest derivation.
		Counters.Anchors.Add(int64(len(out.Anchors) - d.countedAnchors))
		Counters.InvalidAnchors.Add(int64(invalid - d.countedInvalid))
		d.countedAnchors, d.countedInvalid = len(out.Anchors), invalid
	}
	return out
}

// pickRequest chooses the request of a layer span that names none: the
// smallest request id whose window contains t, else the smallest request
// id, else "".
func pickRequest(rids []string, windows map[string]*window, t uint64) string {
	for _, rid := range rids {
		if w := windows[rid]; w.known() && w.contains(t) {
			return rid
		}
	}
	if len(rids) > 0 {
		return rids[0]
	}
	return ""
}

func minNonEmpty(a, b string) string {
	if a == "" || (b != "" && b < a) {
		return b
	}
	return a
}

// seqBucket returns the lower bound of seq_len's bucket: 0 for seq_len ≤
// 0, else the largest power of two ≤ seq_len.
func seqBucket(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return 1 << (bits.Len64(uint64(n)) - 1)
}

func addStats(m map[int64]*braidpb.LayerStats, key, dur int64) {
	st := m[key]
	if st == nil {
		m[key] = &braidpb.LayerStats{Key: key, Count: 1, TotalNanos: dur, MinNanos: dur, MaxNanos: dur}
		return
	}
	st.Count++
	st.TotalNanos += dur
	st.MinNanos = min(st.MinNanos, dur)
	st.MaxNanos = max(st.MaxNanos, dur)
}

func sortedStats(m map[int64]*braidpb.LayerStats) []*braidpb.LayerStats {
	if len(m) == 0 {
		return nil
	}
	out := make([]*braidpb.LayerStats, 0, len(m))
	for _, st := range m {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *braidpb.LayerStats) int { return cmpI64(a.Key, b.Key) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpI64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
