package semconv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp/wire"
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

func validHintKey[S string | []byte](k S) bool {
	if len(k) == 0 {
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

// attrCode says what a span attribute means to a Deriver.
type attrCode uint8

const (
	codeNone attrCode = iota
	codeTTFT          // codeTTFT+lat… for each latency figure
	codeE2E
	codeQueue
	codePrefill
	codeDecode
	codeInference
	codeKVTransfer
	codeInputTokens
	codeOutputTokens
	codeModel
	codeRequestModel
	codeOperation
	codeProviderName // gen_ai.provider.name
	codeSystem       // gen_ai.system, the older name of the provider
	codeLayerID
	codeSeqLen
	codeKVCacheHitRatio
	codeIsSpeculative
	codeLayerCount
)

// spanAttrCode maps the span attribute keys a Deriver reads (spanKeys)
// onto codes, without allocating.
func spanAttrCode(k []byte) attrCode {
	switch string(k) {
	case "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens":
		return codeInputTokens
	case "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens":
		return codeOutputTokens
	case "gen_ai.latency.time_to_first_token":
		return codeTTFT
	case "gen_ai.latency.e2e":
		return codeE2E
	case "gen_ai.latency.time_in_queue":
		return codeQueue
	case "gen_ai.latency.time_in_model_prefill":
		return codePrefill
	case "gen_ai.latency.time_in_model_decode":
		return codeDecode
	case "gen_ai.latency.time_in_model_inference":
		return codeInference
	case "gen_ai.latency.kv_cache_transfer_time":
		return codeKVTransfer
	case "gen_ai.response.model":
		return codeModel
	case "gen_ai.request.model":
		return codeRequestModel
	case "gen_ai.operation.name":
		return codeOperation
	case "gen_ai.provider.name":
		return codeProviderName
	case "gen_ai.system":
		return codeSystem
	case "layer_id":
		return codeLayerID
	case "seq_len":
		return codeSeqLen
	case "kv_cache_hit_ratio":
		return codeKVCacheHitRatio
	case "is_speculative":
		return codeIsSpeculative
	case "num_layers", "layer_count", "kv.layer.count":
		return codeLayerCount
	}
	return codeNone
}

type spanKind uint8

const (
	kindOther spanKind = iota
	kindPrefill
	kindLayer
	kindDecode // llm.decode* other than a layer span, llm.sampling
)

// bref is a string kept in Deriver.buf: n bytes at off.
type bref struct{ off, n uint32 }

type spanRec struct {
	kind        spanKind
	root        bool
	hasHit      bool
	spec        bool
	layerState  uint8 // 0 missing, 1 present, 2 not an integer
	rid         int32 // index in Deriver.rids; -1: none
	start, end  uint64
	lat         [numLat]int64 // -1: absent
	inTok       int64         // -1: absent
	outTok      int64         // -1: absent
	model       bref
	reqModel    bref
	op          bref
	provider    bref
	nameLayer   int64 // N of llm.decode.layer.N; -1: not a number
	layer       int64
	seqLen      int64
	hitRatio    float64
	layerCount  int64
	kvXferStart uint64
	kvXferEnd   uint64
}

type logRec struct {
	time   uint64
	schema bref  // n == 0: none
	hint   uint8 // 0 none, 1 valid, 2 invalid
	hasRID bool
	pairs  [2]int32 // the log's hint pairs: Deriver.pairs[pairs[0]:pairs[1]]
}

type hintPair struct{ key, value bref }

// ridRec is one distinct request id of the members.
type ridRec struct {
	id     bref
	win    window // of the non-layer spans declaring it (Derived)
	format uint8  // 0 not checked yet, 1 known, 2 unknown (Derived)
	rank   int32  // in id order (Derived)
	out    bref   // in the output string (Derived)
}

// ridLinear is the number of distinct request ids looked up by a linear
// scan; beyond it a map indexes them.
const ridLinear = 16

// Deriver computes the Derived figures of one request (trace) from its
// serialized OTLP spans and log records. The zero value is ready to use,
// with the default request-id rules. A Deriver is not safe for concurrent
// use; Reset it to reuse its memory for the next request.
type Deriver struct {
	// IDs extracts request ids; nil means DefaultRequestIDs().
	IDs *RequestIDs

	scratch    *derivedBlock // DerivedScratch's message
	spans      []spanRec
	logs       []logRec
	buf        []byte // the strings of the members (bref)
	rids       []ridRec
	ridIndex   map[string]int32 // over rids when there are more than ridLinear
	pairs      []hintPair
	layerCount int64  // from resources
	lastRes    []byte // a copy of the resource read last, not to read it again
	verdicts   []verdictRec
	vscan      verdictScan
	tenant     bref
	tenantRank uint8 // of the tenant's source; 0: none

	// Scratch of Derived.
	order   []int32 // rids by id
	byLayer []keyDur
	bySeq   []keyDur
	hits    []float64
	anchors []anchorRec
	hints   []hintRec
	schemas []bref
	out     []byte

	computed bool
	invalid  int
}

type keyDur struct{ key, dur int64 }

type anchorRec struct {
	rid   int32 // -1: none
	mask  uint8 // reasons of invalidity (reasonNames bits)
	time  uint64
	layer int64
	out   bref // the reason in the output string
}

type hintRec struct {
	time       uint64
	key, value bref
}

func (d *Deriver) ids() *RequestIDs {
	if d.IDs != nil {
		return d.IDs
	}
	return defaultIDs
}

func (d *Deriver) str(r bref) []byte { return d.buf[r.off : r.off+r.n] }

// keep copies b into buf.
func (d *Deriver) keep(b []byte) bref {
	if len(b) == 0 {
		return bref{}
	}
	off := len(d.buf)
	d.buf = append(d.buf, b...)
	return bref{uint32(off), uint32(len(b))}
}

// Reset forgets every member, keeping the memory and IDs.
func (d *Deriver) Reset() {
	d.spans = d.spans[:0]
	d.logs = d.logs[:0]
	d.buf = d.buf[:0]
	d.rids = d.rids[:0]
	clear(d.ridIndex)
	d.pairs = d.pairs[:0]
	d.layerCount = 0
	d.lastRes = d.lastRes[:0]
	d.verdicts = d.verdicts[:0]
	d.tenant, d.tenantRank = bref{}, 0
	d.computed, d.invalid = false, 0
}

// internRID returns the index in rids of the id in buf[start:], which it
// keeps there only when the id is new; -1 for an empty id.
func (d *Deriver) internRID(start int) int32 {
	id := d.buf[start:]
	if len(id) == 0 {
		return -1
	}
	if len(d.rids) > ridLinear {
		if i, ok := d.ridIndex[string(id)]; ok {
			d.buf = d.buf[:start]
			return i
		}
	} else {
		for i := range d.rids {
			if string(d.str(d.rids[i].id)) == string(id) {
				d.buf = d.buf[:start]
				return int32(i)
			}
		}
	}
	i := int32(len(d.rids))
	d.rids = append(d.rids, ridRec{id: bref{uint32(start), uint32(len(id))}})
	switch {
	case len(d.rids) == ridLinear+1:
		if d.ridIndex == nil {
			d.ridIndex = make(map[string]int32, 2*ridLinear)
		}
		for j := range d.rids {
			d.ridIndex[string(d.str(d.rids[j].id))] = int32(j)
		}
	case len(d.rids) > ridLinear+1:
		d.ridIndex[string(id)] = i
	}
	return i
}

// spanStrs are the string attributes of one span, aliasing it.
type spanStrs struct{ model, reqModel, op, provider []byte }

// AddSpan adds a serialized Span and its serialized Resource (may be nil).
// Malformed bytes are read as far as they go.
func (d *Deriver) AddSpan(span, resource []byte) {
	d.computed = false
	d.resourceLayerCount(resource)
	ids := d.ids()
	r := spanRec{inTok: -1, outTok: -1, nameLayer: -1, rid: -1}
	for i := range r.lat {
		r.lat[i] = -1
	}
	id := idAttr{prio: -1}
	var strs spanStrs
	var name []byte
	hasName, hasParent := false, false
	vs := &d.vscan
	vs.reset()
	var events [][]byte // span events with attributes
	b := span
	for len(b) > 0 {
		num, typ, raw, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		switch {
		case num == 4 && typ == protowire.BytesType:
			hasParent = len(raw) > 0 && !allZero(raw)
		case num == 5 && typ == protowire.BytesType:
			name, hasName = raw, true
		case num == 7 && typ == protowire.Fixed64Type:
			r.start = x
		case num == 8 && typ == protowire.Fixed64Type:
			r.end = x
		case num == 9 && typ == protowire.BytesType:
			k, v, _ := wire.KeyValue(raw)
			if len(ids.attrs) > 0 {
				id.offer(ids, k, v)
			}
			if c := spanAttrCode(k); c != codeNone {
				r.attr(c, wire.AnyValue(v), &strs)
			} else if isVerdictKey(k) {
				vs.attr(k, wire.AnyValue(v))
			}
		case num == 11 && typ == protowire.BytesType:
			if r.event(raw) {
				events = append(events, raw)
			}
		}
	}
	if hasName {
		r.kind, r.nameLayer = classifySpan(name)
	}
	r.root = !hasParent
	rank := tenantSpan
	if r.root {
		rank = tenantRootSpan
	}
	d.addVerdicts(vs, rank)
	for _, ev := range events { // reuse d.vscan: after the span's own
		d.spanVerdictEvent(ev)
	}
	if id.prio >= 0 {
		start := len(d.buf)
		d.buf = id.appendID(ids, d.buf)
		r.rid = d.internRID(start)
	} else if i, j, ok := sglangRID(name); ok {
		start := len(d.buf)
		d.buf = append(d.buf, name[i:j]...)
		r.rid = d.internRID(start)
	}
	r.model = d.keep(strs.model)
	r.reqModel = d.keep(strs.reqModel)
	r.op = d.keep(strs.op)
	r.provider = d.keep(strs.provider)
	d.spans = append(d.spans, r)
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
	for b := resource; len(b) > 0; {
		num, typ, raw, _, rest := wire.Next(b)
		if rest == nil {
			return
		}
		b = rest
		if num != ResourceAttrs || typ != protowire.BytesType {
			continue
		}
		k, v, _ := wire.KeyValue(raw)
		if spanAttrCode(k) == codeLayerCount {
			if n, ok := wire.AnyValue(v).Int(); ok && n > d.layerCount {
				d.layerCount = n
			}
		} else if d.tenantRank <= tenantResource && isTenantKey(k) {
			if v := wire.AnyValue(v); v.Type == ValueString && len(v.Bytes) > 0 {
				d.offerTenant(v.Bytes, tenantResource)
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
		n, ok := wire.Atoi(name[len(SpanDecodeLayerPref):])
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

func (r *spanRec) attr(c attrCode, v Value, strs *spanStrs) {
	switch c {
	case codeInputTokens:
		if n, ok := v.Int(); ok && n >= 0 {
			r.inTok = n
		}
	case codeOutputTokens:
		if n, ok := v.Int(); ok && n >= 0 {
			r.outTok = n
		}
	case codeModel:
		if v.Type == ValueString && len(v.Bytes) > 0 {
			strs.model = v.Bytes
		}
	case codeRequestModel:
		if v.Type == ValueString && len(v.Bytes) > 0 {
			strs.reqModel = v.Bytes
		}
	case codeOperation:
		if v.Type == ValueString && len(v.Bytes) > 0 {
			strs.op = v.Bytes
		}
	case codeProviderName, codeSystem:
		// gen_ai.provider.name wins over the older gen_ai.system.
		if v.Type == ValueString && len(v.Bytes) > 0 && (len(strs.provider) == 0 || c == codeProviderName) {
			strs.provider = v.Bytes
		}
	case codeLayerID:
		if n, ok := v.Int(); ok {
			r.layer, r.layerState = n, 1
		} else {
			r.layerState = 2
		}
	case codeSeqLen:
		if n, ok := v.Int(); ok {
			r.seqLen = n
		}
	case codeKVCacheHitRatio:
		if f, ok := v.Float(); ok && !math.IsInf(f, 0) {
			r.hitRatio, r.hasHit = f, true
		}
	case codeIsSpeculative:
		r.spec, _ = v.Bool()
	case codeLayerCount:
		if n, ok := v.Int(); ok && n > r.layerCount {
			r.layerCount = n
		}
	case codeTTFT, codeE2E, codeQueue, codePrefill, codeDecode, codeInference, codeKVTransfer:
		if f, ok := v.Float(); ok && f >= 0 && !math.IsInf(f, 0) {
			r.lat[c-codeTTFT] = int64(math.Round(f * 1e9))
		}
	}
}

// event reads a Span.Event (time 1, name 2) for the KV-transfer events;
// it reports whether the event has attributes (3), which may be a
// verdict's.
func (r *spanRec) event(b []byte) (attrs bool) {
	var t uint64
	var name []byte
	for len(b) > 0 {
		num, typ, raw, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			t = x
		case num == 2 && typ == protowire.BytesType:
			name = raw
		case num == SpanEventAttrs && typ == protowire.BytesType:
			attrs = true
		}
	}
	if t == 0 {
		return attrs
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
	return attrs
}

// AddLog adds a serialized LogRecord and its serialized Resource (may be
// nil).
func (d *Deriver) AddLog(log, resource []byte) {
	d.computed = false
	d.resourceLayerCount(resource)
	ids := d.ids()
	l := logRec{pairs: [2]int32{int32(len(d.pairs)), int32(len(d.pairs))}}
	var observed uint64
	id := idAttr{prio: -1}
	var body []byte
	hasBody := false
	vs := &d.vscan
	vs.reset()
	b := log
	for len(b) > 0 {
		num, typ, raw, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			l.time = x
		case num == 11 && typ == protowire.Fixed64Type:
			observed = x
		case num == 5 && typ == protowire.BytesType:
			body, hasBody = raw, true
		case num == 6 && typ == protowire.BytesType:
			k, v, _ := wire.KeyValue(raw)
			if len(ids.attrs) > 0 {
				id.offer(ids, k, v)
			}
			switch string(k) {
			case AttrSchemaVersion:
				if l.schema.n == 0 {
					if v := wire.AnyValue(v); v.IsScalar() {
						start := len(d.buf)
						d.buf = v.AppendText(d.buf)
						l.schema = bref{uint32(start), uint32(len(d.buf) - start)}
					}
				}
			case AttrContextHint:
				if l.hint != 0 {
					continue
				}
				l.hint = 2
				if v := wire.AnyValue(v); v.Type == ValueString && d.appendHintPairs(v.Bytes) {
					l.hint = 1
					l.pairs[1] = int32(len(d.pairs))
				}
			default:
				if isVerdictKey(k) {
					vs.attr(k, wire.AnyValue(v))
				}
			}
		}
	}
	if l.time == 0 {
		l.time = observed
	}
	d.addVerdicts(vs, tenantLog)
	l.hasRID = id.prio >= 0
	if !l.hasRID && hasBody {
		if v := wire.AnyValue(body); v.Type == ValueString {
			l.hasRID = ids.bodyMatches(v.Bytes)
		}
	}
	d.logs = append(d.logs, l)
}

// appendHintPairs parses a context hint as ParseContextHint does, keeping
// its text in buf and its pairs in pairs. On an invalid hint it keeps
// nothing and returns false.
func (d *Deriver) appendHintPairs(hint []byte) bool {
	if len(hint) == 0 {
		return false
	}
	base, first := len(d.buf), len(d.pairs)
	d.buf = append(d.buf, hint...)
	s := hint
	if s[len(s)-1] == ';' {
		s = s[:len(s)-1]
	}
	for pos := 0; ; {
		pair := s[pos:]
		semi := bytes.IndexByte(pair, ';')
		if semi >= 0 {
			pair = pair[:semi]
		}
		eq := bytes.IndexByte(pair, '=')
		if eq < 0 || !validHintKey(pair[:eq]) || eq == len(pair)-1 {
			break
		}
		key := bref{uint32(base + pos), uint32(eq)}
		for _, p := range d.pairs[first:] {
			if string(d.str(p.key)) == string(pair[:eq]) {
				key.n = 0
				break
			}
		}
		if key.n == 0 {
			break // a duplicate key
		}
		d.pairs = append(d.pairs, hintPair{key, bref{uint32(base + pos + eq + 1), uint32(len(pair) - eq - 1)}})
		if semi < 0 {
			return true
		}
		pos += semi + 1
	}
	d.buf, d.pairs = d.buf[:base], d.pairs[:first]
	return false
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

// Anchor invalidity reasons as bits, in the order Reason lists them.
const (
	bitUnknownRequestID uint8 = 1 << iota
	bitZeroTime
	bitNoRequestWindow
	bitOutsideRequest
	bitMissingLayer
	bitNegativeLayer
	bitLayerOutOfRange
	bitLayerMismatch
)

var reasonNames = [8]string{
	ReasonUnknownRequestID, ReasonZeroTime, ReasonNoRequestWindow, ReasonOutsideRequest,
	ReasonMissingLayer, ReasonNegativeLayer, ReasonLayerOutOfRange, ReasonLayerMismatch,
}

// appendReason appends the reasons of mask, joined by ",".
func appendReason(dst []byte, mask uint8) []byte {
	first := true
	for i, name := range reasonNames {
		if mask&(1<<i) == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		dst = append(dst, name...)
		first = false
	}
	return dst
}

// derivedBlock holds a Derived and, for a request of usual size, its
// repeated fields, so that one allocation serves them all.
type derivedBlock struct {
	d        braidpb.Derived
	lc       braidpb.LogCompliance
	hit      float64
	strs     [4]string
	anchorPs [8]*braidpb.Anchor
	anchors  [8]braidpb.Anchor
	statPs   [8]*braidpb.LayerStats
	stats    [8]braidpb.LayerStats
	hintPs   [4]*braidpb.Hint
	hints    [4]braidpb.Hint
}

// slots returns n pointers to zero messages, taken from the block's
// arrays when they are large enough.
func slots[T any](ps []*T, ms []T, n int) []*T {
	if n == 0 {
		return nil
	}
	if n > len(ps) {
		ps, ms = make([]*T, n), make([]T, n)
	}
	ps = ps[:n:n]
	for i := range ps {
		ps[i] = &ms[i]
	}
	return ps
}

// Derived computes the figures of the members added so far. The result
// depends only on the set of members, not on the order they were added
// in; repeated fields are sorted. It returns a new message each time.
func (d *Deriver) Derived() *braidpb.Derived { return d.derived(&derivedBlock{}) }

// DerivedScratch is Derived in a message the Deriver reuses: it is valid
// until the next call of DerivedScratch. For a caller that is done with
// the figures before it derives the next ones (one emission at a time);
// what it keeps it copies (strings may be kept).
func (d *Deriver) DerivedScratch() *braidpb.Derived {
	if d.scratch == nil {
		d.scratch = &derivedBlock{}
	} else {
		*d.scratch = derivedBlock{}
	}
	return d.derived(d.scratch)
}

// derived is Derived, in blk.
func (d *Deriver) derived(blk *derivedBlock) *braidpb.Derived {
	ids := d.ids()

	// Request ids, windows, root, latency attributes, tokens, names.
	var lat [numLat]int64
	for i := range lat {
		lat[i] = -1
	}
	inTok, outTok := int64(-1), int64(-1)
	var model, reqModel, op, provider []byte
	var root, prefill window
	var decodeEnd, xferStart, xferEnd uint64
	layerCount := d.layerCount
	for i := range d.rids {
		d.rids[i].win, d.rids[i].format = window{}, 0
	}
	d.hits = d.hits[:0]
	for i := range d.spans {
		s := &d.spans[i]
		if s.rid >= 0 && s.kind != kindLayer {
			d.rids[s.rid].win.add(s.start, s.end)
		}
		if s.root {
			root.add(s.start, s.end)
		}
		for j, v := range s.lat {
			lat[j] = max(lat[j], v)
		}
		inTok = max(inTok, s.inTok)
		outTok = max(outTok, s.outTok)
		model = minNonEmpty(model, d.str(s.model))
		reqModel = minNonEmpty(reqModel, d.str(s.reqModel))
		op = minNonEmpty(op, d.str(s.op))
		provider = minNonEmpty(provider, d.str(s.provider))
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
			d.hits = append(d.hits, s.hitRatio)
		}
	}
	d.order = d.order[:0]
	for i := range d.rids {
		d.order = append(d.order, int32(i))
	}
	if len(d.order) > 1 {
		slices.SortFunc(d.order, func(a, b int32) int {
			return bytes.Compare(d.str(d.rids[a].id), d.str(d.rids[b].id))
		})
	}
	for j, i := range d.order {
		d.rids[i].rank = int32(j)
	}

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

	// Decode-layer statistics and anchors.
	d.byLayer, d.bySeq, d.anchors = d.byLayer[:0], d.bySeq[:0], d.anchors[:0]
	var spec int64
	invalid := 0
	for i := range d.spans {
		s := &d.spans[i]
		if s.kind != kindLayer {
			continue
		}
		if s.spec {
			spec++
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
			d.byLayer = append(d.byLayer, keyDur{key, dur})
		}
		d.bySeq = append(d.bySeq, keyDur{seqBucket(s.seqLen), dur})

		a := anchorRec{rid: s.rid, time: s.start, layer: -1}
		if s.layerState == 1 {
			a.layer = s.layer
		}
		if a.rid < 0 {
			a.rid = d.pickRequest(s.start)
		}
		if !d.knownFormat(ids, a.rid) {
			a.mask |= bitUnknownRequestID
		}
		w := &root
		if a.rid >= 0 && d.rids[a.rid].win.known() {
			w = &d.rids[a.rid].win
		}
		switch {
		case s.start == 0:
			a.mask |= bitZeroTime
		case !w.known():
			a.mask |= bitNoRequestWindow
		case !w.contains(s.start):
			a.mask |= bitOutsideRequest
		}
		switch {
		case s.layerState != 1:
			a.mask |= bitMissingLayer
		case s.layer < 0:
			a.mask |= bitNegativeLayer
		default:
			if layerCount > 0 && s.layer >= layerCount {
				a.mask |= bitLayerOutOfRange
			}
			if s.nameLayer != s.layer {
				a.mask |= bitLayerMismatch
			}
		}
		if a.mask != 0 {
			invalid++
		}
		d.anchors = append(d.anchors, a)
	}
	nLayers := sortStats(d.byLayer)
	nSeq := sortStats(d.bySeq)
	d.sortAnchors()

	// Logs.
	var lc braidpb.LogCompliance
	d.schemas, d.hints = d.schemas[:0], d.hints[:0]
	for i := range d.logs {
		l := &d.logs[i]
		lc.Logs++
		if l.hasRID {
			lc.WithRequestId++
		}
		if l.schema.n != 0 {
			lc.WithSchemaVersion++
			d.schemas = append(d.schemas, l.schema)
		}
		switch l.hint {
		case 1:
			lc.WithValidHint++
			for _, p := range d.pairs[l.pairs[0]:l.pairs[1]] {
				d.hints = append(d.hints, hintRec{l.time, p.key, p.value})
			}
		case 2:
			lc.WithInvalidHint++
		}
	}
	if len(d.schemas) > 1 {
		slices.SortFunc(d.schemas, func(a, b bref) int { return bytes.Compare(d.str(a), d.str(b)) })
		d.schemas = slices.CompactFunc(d.schemas, func(a, b bref) bool { return string(d.str(a)) == string(d.str(b)) })
	}
	if len(d.hints) > 1 {
		slices.SortFunc(d.hints, func(a, b hintRec) int {
			if c := bytes.Compare(d.str(a.key), d.str(b.key)); c != 0 {
				return c
			}
			if a.time != b.time {
				return cmpU64(a.time, b.time)
			}
			return bytes.Compare(d.str(a.value), d.str(b.value))
		})
		// A later log gives the key: keep the last of each key.
		n := 0
		for i, h := range d.hints {
			if i+1 < len(d.hints) && string(d.str(d.hints[i+1].key)) == string(d.str(h.key)) {
				continue
			}
			d.hints[n] = h
			n++
		}
		d.hints = d.hints[:n]
	}

	// The output's strings, in one allocation.
	ob := d.out[:0]
	put := func(b []byte) bref {
		off := len(ob)
		ob = append(ob, b...)
		return bref{uint32(off), uint32(len(b))}
	}
	for _, i := range d.order {
		d.rids[i].out = put(d.str(d.rids[i].id))
	}
	if len(model) == 0 {
		model = reqModel
	}
	modelRef, opRef, providerRef := put(model), put(op), put(provider)
	for i, s := range d.schemas {
		d.schemas[i] = put(d.str(s))
	}
	for i := range d.hints {
		h := &d.hints[i]
		h.key, h.value = put(d.str(h.key)), put(d.str(h.value))
	}
	for i := range d.anchors {
		a := &d.anchors[i]
		switch {
		case a.mask == 0:
		case i > 0 && d.anchors[i-1].mask == a.mask:
			a.out = d.anchors[i-1].out
		default:
			off := len(ob)
			ob = appendReason(ob, a.mask)
			a.out = bref{uint32(off), uint32(len(ob) - off)}
		}
	}
	d.out = ob
	all := string(ob)
	sub := func(r bref) string { return all[r.off : r.off+r.n] }

	out := &blk.d
	nr, ns := len(d.rids), len(d.schemas)
	var strs []string
	if nr+ns <= len(blk.strs) {
		strs = blk.strs[:nr+ns]
	} else {
		strs = make([]string, nr+ns)
	}
	if nr > 0 {
		out.RequestIds = strs[:nr:nr]
		for j, i := range d.order {
			out.RequestIds[j] = sub(d.rids[i].out)
		}
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
	if len(d.hits) > 0 {
		if !slices.IsSorted(d.hits) {
			slices.Sort(d.hits)
		}
		var sum float64
		for _, h := range d.hits {
			sum += h
		}
		blk.hit = sum / float64(len(d.hits))
		out.KvCacheHitRatio = &blk.hit
	}
	out.Model = sub(modelRef)
	out.Operation = sub(opRef)
	out.Provider = sub(providerRef)
	out.LayerCount = layerCount

	stats := slots(blk.statPs[:], blk.stats[:], nLayers+nSeq)
	if nLayers > 0 {
		out.Layers = stats[:nLayers:nLayers]
		fillStats(out.Layers, d.byLayer)
	}
	if nSeq > 0 {
		out.SeqLenBuckets = stats[nLayers:]
		fillStats(out.SeqLenBuckets, d.bySeq)
	}
	out.SpeculativeSpans = spec
	out.Anchors = slots(blk.anchorPs[:], blk.anchors[:], len(d.anchors))
	for i, a := range out.Anchors {
		r := &d.anchors[i]
		a.TimeUnixNano, a.LayerId, a.Valid = r.time, r.layer, r.mask == 0
		if r.rid >= 0 {
			a.RequestId = sub(d.rids[r.rid].out)
		}
		if r.mask != 0 {
			a.Reason = sub(r.out)
		}
	}
	out.Hints = slots(blk.hintPs[:], blk.hints[:], len(d.hints))
	for i, h := range out.Hints {
		h.Key, h.Value = sub(d.hints[i].key), sub(d.hints[i].value)
	}
	if ns > 0 {
		out.LogSchemaVersions = strs[nr:]
		for i, s := range d.schemas {
			out.LogSchemaVersions[i] = sub(s)
		}
	}
	if lc.Logs > 0 {
		blk.lc.Logs, blk.lc.WithRequestId, blk.lc.WithSchemaVersion = lc.Logs, lc.WithRequestId, lc.WithSchemaVersion
		blk.lc.WithValidHint, blk.lc.WithInvalidHint = lc.WithValidHint, lc.WithInvalidHint
		out.Logs = &blk.lc
	}

	d.appendVerdicts(out)

	d.computed, d.invalid = true, invalid
	return out
}

// pickRequest chooses the request of a layer span that names none: the
// smallest request id whose window contains t, else the smallest request
// id, else none (-1).
func (d *Deriver) pickRequest(t uint64) int32 {
	for _, i := range d.order {
		if w := d.rids[i].win; w.known() && w.contains(t) {
			return i
		}
	}
	if len(d.order) > 0 {
		return d.order[0]
	}
	return -1
}

// knownFormat is ids.KnownFormat of request id rid (-1: none), checked
// once per request id.
func (d *Deriver) knownFormat(ids *RequestIDs, rid int32) bool {
	if rid < 0 {
		return false
	}
	r := &d.rids[rid]
	if r.format == 0 {
		r.format = 2
		if ids.knownFormatBytes(d.str(r.id)) {
			r.format = 1
		}
	}
	return r.format == 1
}

// sortAnchors sorts the anchors by request id, time, layer, validity
// (invalid first) and reason.
func (d *Deriver) sortAnchors() {
	rank := func(rid int32) int32 {
		if rid < 0 {
			return -1
		}
		return d.rids[rid].rank
	}
	cmp := func(a, b anchorRec) int {
		if ra, rb := rank(a.rid), rank(b.rid); ra != rb {
			return cmpI64(int64(ra), int64(rb))
		}
		if a.time != b.time {
			return cmpU64(a.time, b.time)
		}
		if a.layer != b.layer {
			return cmpI64(a.layer, b.layer)
		}
		if (a.mask == 0) != (b.mask == 0) {
			if a.mask == 0 {
				return 1
			}
			return -1
		}
		if a.mask == b.mask {
			return 0
		}
		var ba, bb [128]byte
		return bytes.Compare(appendReason(ba[:0], a.mask), appendReason(bb[:0], b.mask))
	}
	if !slices.IsSortedFunc(d.anchors, cmp) {
		slices.SortFunc(d.anchors, cmp)
	}
}

// sortStats sorts kds by key and returns the number of distinct keys.
func sortStats(kds []keyDur) int {
	if !slices.IsSortedFunc(kds, func(a, b keyDur) int { return cmpI64(a.key, b.key) }) {
		slices.SortFunc(kds, func(a, b keyDur) int { return cmpI64(a.key, b.key) })
	}
	n := 0
	for i := range kds {
		if i == 0 || kds[i].key != kds[i-1].key {
			n++
		}
	}
	return n
}

// fillStats sets out (one per key) from the key-sorted kds.
func fillStats(out []*braidpb.LayerStats, kds []keyDur) {
	j := -1
	for i, kd := range kds {
		if i == 0 || kd.key != kds[i-1].key {
			j++
			st := out[j]
			st.Key, st.Count, st.TotalNanos, st.MinNanos, st.MaxNanos = kd.key, 1, kd.dur, kd.dur, kd.dur
			continue
		}
		st := out[j]
		st.Count++
		st.TotalNanos += kd.dur
		st.MinNanos = min(st.MinNanos, kd.dur)
		st.MaxNanos = max(st.MaxNanos, kd.dur)
	}
}

func minNonEmpty(a, b []byte) []byte {
	if len(a) == 0 || (len(b) > 0 && bytes.Compare(b, a) < 0) {
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
