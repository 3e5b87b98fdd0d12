package otlp

import (
	"io"
	"strconv"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// Decoder splits OTLP messages into Items. Not safe for concurrent use: one
// per goroutine; reuse it.
type Decoder struct {
	items []Item
	ex    []exemplarRef // distinct exemplar ids of the current point

	bad      bool // the message being walked has a string that is not valid UTF-8
	repaired int  // members, resources and scopes re-encoded by the last Decode

	// base is the buffer the wire scanner works on (the value, or the arena
	// on the JSON path); offsets are computed against it.
	base []byte

	// JSON path.
	jbuf    []byte // JSON with hex ids rewritten to base64
	arena   []byte // the message re-encoded as protobuf
	jstack  []byte // container stack of the JSON scanner
	traces  *tracepb.TracesData
	logs    *logspb.LogsData
	metrics *metricspb.MetricsData
}

type exemplarRef struct {
	trace [16]byte
	span  [8]byte
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	return &Decoder{items: make([]Item, 0, 64)}
}

// Decode decodes one message value of the given signal and encoding and
// returns its items in message order. The returned slice and the items' byte
// slices are valid until the next call. A message that cannot be decoded
// returns nil items and a *DecodeError.
func (d *Decoder) Decode(sig Signal, enc Encoding, value []byte) ([]Item, error) {
	d.items = d.items[:0]
	d.repaired = 0
	var err *DecodeError
	switch {
	case sig < SignalSpans || sig > SignalMetrics:
		err = &DecodeError{Reason: "unknown signal", Offset: -1}
	case enc != EncodingProto && enc != EncodingJSON:
		err = &DecodeError{Reason: "unknown encoding", Offset: -1}
	case len(value) == 0:
		err = &DecodeError{Reason: "empty message", Offset: 0}
	case enc == EncodingProto:
		d.base = value
		err = d.walkData(sig, value)
		d.base = nil
	default:
		err = d.decodeJSON(sig, value)
		d.base = nil
	}
	if err != nil {
		d.items = d.items[:0]
		err.Signal, err.Encoding = sig, enc
		return nil, err
	}
	return d.items, nil
}

// Repaired returns how many members, resources and scopes the last Decode
// re-encoded because a string field held invalid UTF-8 (see MaxNesting).
func (d *Decoder) Repaired() int { return d.repaired }

// clip returns b with its capacity cut to its length, so that appending to
// an Item's slice never writes into the message.
func clip(b []byte) []byte { return b[:len(b):len(b)] }

// ---------------------------------------------------------------------------
// Wire scanning.

// Wire type masks for the tables of known fields below.
const (
	wV   = 1 << protowire.VarintType
	wF64 = 1 << protowire.Fixed64Type
	wB   = 1 << protowire.BytesType
	wF32 = 1 << protowire.Fixed32Type
)

// msgKind describes a message the scanner walks: its name for errors and,
// indexed by field number, the wire types its known fields may have (0:
// unknown field, any wire type, skipped).
type msgKind struct {
	name   string
	fields []uint8
}

var (
	kData       = msgKind{"top-level message", []uint8{1: wB}}
	kResourceX  = msgKind{"Resource* message", []uint8{1: wB, 2: wB, 3: wB}}
	kScopeX     = msgKind{"Scope* message", []uint8{1: wB, 2: wB, 3: wB}}
	kResource   = msgKind{"Resource", []uint8{1: wB, 2: wV, 3: wB}}
	kScope      = msgKind{"InstrumentationScope", []uint8{1: wB, 2: wB, 3: wB, 4: wV}}
	kSpan       = msgKind{"Span", []uint8{1: wB, 2: wB, 3: wB, 4: wB, 5: wB, 6: wV, 7: wF64, 8: wF64, 9: wB, 10: wV, 11: wB, 12: wV, 13: wB, 14: wV, 15: wB, 16: wF32}}
	kStatus     = msgKind{"Status", []uint8{2: wB, 3: wV}}
	kLog        = msgKind{"LogRecord", []uint8{1: wF64, 2: wV, 3: wB, 5: wB, 6: wB, 7: wV, 8: wF32, 9: wB, 10: wB, 11: wF64, 12: wB}}
	kMetric     = msgKind{"Metric", []uint8{1: wB, 2: wB, 3: wB, 5: wB, 7: wB, 9: wB, 10: wB, 11: wB, 12: wB}}
	kGauge      = msgKind{"Gauge", []uint8{1: wB}}
	kSum        = msgKind{"Sum", []uint8{1: wB, 2: wV, 3: wV}}
	kHistogram  = msgKind{"Histogram", []uint8{1: wB, 2: wV}}
	kExpHist    = msgKind{"ExponentialHistogram", []uint8{1: wB, 2: wV}}
	kSummary    = msgKind{"Summary", []uint8{1: wB}}
	kNumberDP   = msgKind{"NumberDataPoint", []uint8{2: wF64, 3: wF64, 4: wF64, 5: wB, 6: wF64, 7: wB, 8: wV}}
	kHistDP     = msgKind{"HistogramDataPoint", []uint8{2: wF64, 3: wF64, 4: wF64, 5: wF64, 6: wB | wF64, 7: wB | wF64, 8: wB, 9: wB, 10: wV, 11: wF64, 12: wF64}}
	kExpHistDP  = msgKind{"ExponentialHistogramDataPoint", []uint8{1: wB, 2: wF64, 3: wF64, 4: wF64, 5: wF64, 6: wV, 7: wF64, 8: wB, 9: wB, 10: wV, 11: wB, 12: wF64, 13: wF64, 14: wF64}}
	kSummaryDP  = msgKind{"SummaryDataPoint", []uint8{2: wF64, 3: wF64, 4: wF64, 5: wF64, 6: wB, 7: wB, 8: wV}}
	kExemplar   = msgKind{"Exemplar", []uint8{2: wF64, 3: wF64, 4: wB, 5: wB, 6: wF64, 7: wB}}
	dataField   = [...]string{SignalSpans: "resource_spans", SignalLogs: "resource_logs", SignalMetrics: "resource_metrics"}
	scopeXField = [...]string{SignalSpans: "ScopeSpans", SignalLogs: "ScopeLogs", SignalMetrics: "ScopeMetrics"}
)

// off returns the offset of b in d.base; b must be a suffix-preserving
// sub-slice (two-index slicing) of d.base.
func (d *Decoder) off(b []byte) int { return cap(d.base) - cap(b) }

func (d *Decoder) errAt(b []byte, reason string) *DecodeError {
	return &DecodeError{Reason: reason, Offset: d.off(b)}
}

// fieldOK reports whether a message k may have field num with wire type
// typ: a valid field number, and for a known field one of its declared
// wire types. The walkers read fields with wire.Next and check them here.
func (k *msgKind) fieldOK(num protowire.Number, typ protowire.Type) bool {
	return num <= protowire.MaxValidNumber && (int(num) >= len(k.fields) || k.fields[num] == 0 || k.fields[num]&(1<<typ) != 0)
}

// fieldErr says what is wrong with the field at the start of b, which
// wire.Next or fieldOK rejected: the first of its tag, its wire type and
// its value that is.
//
//go:noinline
func (d *Decoder) fieldErr(k *msgKind, b []byte) *DecodeError {
	tag, n := protowire.ConsumeVarint(b)
	num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
	reason := "invalid field tag"
	switch {
	case n < 0:
		if err := protowire.ParseError(n); err != io.ErrUnexpectedEOF {
			reason += ": " + err.Error()
		}
	case tag>>3 == 0 || tag>>3 > uint64(protowire.MaxValidNumber):
	case !k.fieldOK(num, typ):
		reason = "field " + strconv.Itoa(int(num)) + " has wire type " + strconv.Itoa(int(typ)) + ", want " + wireNames(k.fields[num]) + " (wrong message type?)"
	default:
		reason = "field " + strconv.Itoa(int(num)) + ": " + valueErr(num, typ, b[n:])
	}
	return d.errAt(b, k.name+": "+reason)
}

// valueErr says why b does not start with a value of wire type typ: a
// fixed-size value or a length-delimited one that runs past the end is
// "truncated value" (so is a group with a field number 0 in it); anything
// else is protowire's error.
func valueErr(num protowire.Number, typ protowire.Type, b []byte) string {
	code := protowire.ConsumeFieldValue(num, typ, b)
	switch typ {
	case protowire.Fixed64Type, protowire.Fixed32Type:
		return "truncated value"
	case protowire.BytesType:
		if _, m := protowire.ConsumeVarint(b); m > 0 {
			return "truncated value" // the length reads, the bytes are not there
		}
	case protowire.StartGroupType:
		if code == codeFieldNumber {
			return "truncated value"
		}
	}
	return protowire.ParseError(code).Error()
}

// codeFieldNumber is protowire's error code for an invalid field number.
var _, _, codeFieldNumber = protowire.ConsumeTag([]byte{0})

func wireNames(mask uint8) string {
	s := ""
	for t, name := range [...]string{protowire.VarintType: "varint", protowire.Fixed64Type: "fixed64", protowire.BytesType: "bytes", protowire.Fixed32Type: "fixed32"} {
		if name != "" && mask&(1<<t) != 0 {
			if s != "" {
				s += " or "
			}
			s += name
		}
	}
	return s
}

// walkPlain checks the fields of a message the scanner does not otherwise
// read (Resource, InstrumentationScope) and returns it, re-encoded if a
// string in it is not valid UTF-8 (see fix).
func (d *Decoder) walkPlain(k *msgKind, s *strSchema, b []byte) (out, orig []byte, err *DecodeError) {
	d.bad = false
	for p := b; len(p) > 0; {
		num, typ, v, _, rest := wire.Next(p)
		if rest == nil || !k.fieldOK(num, typ) {
			return nil, nil, d.fieldErr(k, p)
		}
		if err := d.checkField(s, num, typ, v); err != nil {
			return nil, nil, err
		}
		p = rest
	}
	out, orig = d.fix(s, b)
	return out, orig, nil
}

// fix returns the member b, re-encoded if the walk marked it (d.bad); orig
// is b as the message holds it when it was re-encoded, nil when not.
func (d *Decoder) fix(s *strSchema, b []byte) (out, orig []byte) {
	if !d.bad {
		return clip(b), nil
	}
	d.bad = false
	d.repaired++
	return repaired(s, b), clip(b)
}

// walkData walks a TracesData / LogsData / MetricsData.
func (d *Decoder) walkData(sig Signal, b []byte) *DecodeError {
	start := b
	found := false
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || !kData.fieldOK(num, typ) {
			return d.fieldErr(&kData, b)
		}
		if num == 1 {
			found = true
			if err := d.walkResourceX(sig, v); err != nil {
				return err
			}
		}
		b = rest
	}
	if !found {
		return d.errAt(start, "no "+dataField[sig]+" field (wrong message type?)")
	}
	return nil
}

// walkResourceX walks a ResourceSpans / ResourceLogs / ResourceMetrics.
func (d *Decoder) walkResourceX(sig Signal, b []byte) *DecodeError {
	first := len(d.items)
	var res, orig []byte
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || !kResourceX.fieldOK(num, typ) {
			return d.fieldErr(&kResourceX, b)
		}
		switch num {
		case 1:
			var err *DecodeError
			if res, orig, err = d.walkPlain(&kResource, &sResource, v); err != nil {
				return err
			}
		case 2:
			if err := d.walkScopeX(sig, v); err != nil {
				return err
			}
		}
		b = rest
	}
	if res != nil {
		items := d.items[first:]
		for i := range items {
			items[i].Resource, items[i].origResource = res, orig
		}
	}
	return nil
}

// walkScopeX walks a ScopeSpans / ScopeLogs / ScopeMetrics.
func (d *Decoder) walkScopeX(sig Signal, b []byte) *DecodeError {
	first := len(d.items)
	var scope []byte
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || !kScopeX.fieldOK(num, typ) {
			return d.fieldErr(&kScopeX, b)
		}
		switch num {
		case 1:
			var err *DecodeError
			if scope, _, err = d.walkPlain(&kScope, &sScope, v); err != nil {
				return err
			}
		case 2:
			var err *DecodeError
			switch sig {
			case SignalSpans:
				err = d.walkSpan(v)
			case SignalLogs:
				err = d.walkLog(v)
			default:
				err = d.walkMetric(v)
			}
			if err != nil {
				return err
			}
		}
		b = rest
	}
	if scope != nil {
		items := d.items[first:]
		for i := range items {
			items[i].Scope = scope
		}
	}
	return nil
}

func isZero16(b []byte) bool {
	var z [16]byte
	return string(b) == string(z[:len(b)])
}

func (d *Decoder) walkSpan(b []byte) *DecodeError {
	start := b
	var traceID, spanID, parentID, name []byte
	var startTime, endTime uint64
	var code int32
	d.bad = false
	for len(b) > 0 {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil || !kSpan.fieldOK(num, typ) {
			return d.fieldErr(&kSpan, b)
		}
		switch num {
		case 1:
			traceID = v
		case 2:
			spanID = v
		case 4:
			parentID = v
		case 5:
			name = v
			d.checkStr(name)
		case 3:
			d.checkStr(v)
		case 9, 11, 13:
			if err := d.checkField(&sSpan, num, typ, v); err != nil {
				return err
			}
		case 7:
			startTime = x
		case 8:
			endTime = x
		case 15:
			// Repeated status messages merge: the last code set wins.
			s := v
			for len(s) > 0 {
				snum, styp, sv, sx, srest := wire.Next(s)
				if srest == nil || !kStatus.fieldOK(snum, styp) {
					return d.fieldErr(&kStatus, s)
				}
				if snum == 3 {
					code = int32(sx)
				} else if snum == 2 {
					d.checkStr(sv)
				}
				s = srest
			}
		}
		b = rest
	}
	if len(traceID) != 16 {
		return d.errAt(start, "span trace_id is "+strconv.Itoa(len(traceID))+" bytes, want 16")
	}
	if isZero16(traceID) {
		return d.errAt(start, "span trace_id is all zero")
	}
	if len(spanID) != 8 {
		return d.errAt(start, "span span_id is "+strconv.Itoa(len(spanID))+" bytes, want 8")
	}
	if len(parentID) != 0 && len(parentID) != 8 {
		return d.errAt(start, "span parent_span_id is "+strconv.Itoa(len(parentID))+" bytes, want 8 or none")
	}
	payload, orig := clip(start), []byte(nil)
	if d.bad {
		payload, orig = d.fix(&sSpan, start)
		name = RepairUTF8(name)
	}
	d.items = append(d.items, Item{
		Signal:      SignalSpans,
		TraceID:     [16]byte(traceID),
		SpanID:      [8]byte(spanID),
		Time:        int64(endTime),
		StartTime:   int64(startTime),
		Payload:     payload,
		origPayload: orig,
		Name:        clip(name),
		StatusCode:  code,
	})
	if len(parentID) != 0 {
		d.items[len(d.items)-1].ParentSpanID = [8]byte(parentID)
	}
	return nil
}

func (d *Decoder) walkLog(b []byte) *DecodeError {
	start := b
	var traceID, spanID []byte
	var t, observed uint64
	d.bad = false
	for len(b) > 0 {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil || !kLog.fieldOK(num, typ) {
			return d.fieldErr(&kLog, b)
		}
		switch num {
		case 3, 5, 6, 12:
			if err := d.checkField(&sLog, num, typ, v); err != nil {
				return err
			}
		case 1:
			t = x
		case 11:
			observed = x
		case 9:
			traceID = v
		case 10:
			spanID = v
		}
		b = rest
	}
	if len(traceID) != 0 && len(traceID) != 16 {
		return d.errAt(start, "log record trace_id is "+strconv.Itoa(len(traceID))+" bytes, want 16 or none")
	}
	if len(spanID) != 0 && len(spanID) != 8 {
		return d.errAt(start, "log record span_id is "+strconv.Itoa(len(spanID))+" bytes, want 8 or none")
	}
	if t == 0 {
		t = observed
	}
	payload, orig := d.fix(&sLog, start)
	d.items = append(d.items, Item{
		Signal:      SignalLogs,
		Time:        int64(t),
		StartTime:   int64(t),
		Payload:     payload,
		origPayload: orig,
	})
	it := &d.items[len(d.items)-1]
	if len(traceID) != 0 {
		it.TraceID = [16]byte(traceID)
	}
	if len(spanID) != 0 {
		it.SpanID = [8]byte(spanID)
	}
	return nil
}

func (d *Decoder) walkMetric(b []byte) *DecodeError {
	first := len(d.items)
	var name, desc, unit []byte
	var pt PointType
	var temporality int32
	var monotonic bool
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || !kMetric.fieldOK(num, typ) {
			return d.fieldErr(&kMetric, b)
		}
		switch num {
		case 1:
			name = v
		case 2:
			desc = v
		case 3:
			unit = v
		case 5, 7, 9, 10, 11:
			// The data oneof: a different member replaces what came before,
			// the same member merges with it.
			if t := PointType(num); t != pt {
				d.items = d.items[:first]
				pt, temporality, monotonic = t, 0, false
			}
			if err := d.walkMetricData(pt, v, &temporality, &monotonic); err != nil {
				return err
			}
		}
		b = rest
	}
	name, desc, unit = clip(RepairUTF8(name)), clip(RepairUTF8(desc)), clip(RepairUTF8(unit))
	items := d.items[first:]
	for i := range items {
		it := &items[i]
		it.Name, it.MetricDescription, it.MetricUnit = name, desc, unit
		it.PointType, it.Temporality, it.Monotonic = pt, temporality, monotonic
	}
	return nil
}

// walkMetricData walks a Gauge, Sum, Histogram, ExponentialHistogram or
// Summary message.
func (d *Decoder) walkMetricData(pt PointType, b []byte, temporality *int32, monotonic *bool) *DecodeError {
	var k *msgKind
	switch pt {
	case PointGauge:
		k = &kGauge
	case PointSum:
		k = &kSum
	case PointHistogram:
		k = &kHistogram
	case PointExpHistogram:
		k = &kExpHist
	default:
		k = &kSummary
	}
	for len(b) > 0 {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil || !k.fieldOK(num, typ) {
			return d.fieldErr(k, b)
		}
		switch {
		case num == 1:
			if err := d.walkPoint(pt, v); err != nil {
				return err
			}
		case num == 2 && pt != PointGauge && pt != PointSummary:
			*temporality = int32(x)
		case num == 3 && pt == PointSum:
			*monotonic = x != 0
		}
		b = rest
	}
	return nil
}

func (d *Decoder) walkPoint(pt PointType, b []byte) *DecodeError {
	start := b
	var k *msgKind
	var s *strSchema
	var exField, attrField protowire.Number
	switch pt {
	case PointGauge, PointSum:
		k, s, exField, attrField = &kNumberDP, &sNumberDP, 5, 7
	case PointHistogram:
		k, s, exField, attrField = &kHistDP, &sHistDP, 8, 9
	case PointExpHistogram:
		k, s, exField, attrField = &kExpHistDP, &sExpHistDP, 11, 1
	default:
		k, s, exField, attrField = &kSummaryDP, &sSummaryDP, -1, 7
	}
	var startTime, t uint64
	d.ex = d.ex[:0]
	d.bad = false
	for len(b) > 0 {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil || !k.fieldOK(num, typ) {
			return d.fieldErr(k, b)
		}
		switch num {
		case 2:
			startTime = x
		case 3:
			t = x
		case exField:
			if err := d.walkExemplar(v); err != nil {
				return err
			}
		case attrField:
			if err := d.checkField(s, num, typ, v); err != nil {
				return err
			}
		}
		b = rest
	}
	payload, orig := d.fix(s, start)
	it := Item{
		Signal:      SignalMetrics,
		Time:        int64(t),
		StartTime:   int64(startTime),
		Payload:     payload,
		origPayload: orig,
	}
	if len(d.ex) == 0 {
		d.items = append(d.items, it)
		return nil
	}
	for _, e := range d.ex {
		it.TraceID, it.SpanID = e.trace, e.span
		d.items = append(d.items, it)
	}
	return nil
}

// walkExemplar records the exemplar's trace id in d.ex if it is new.
func (d *Decoder) walkExemplar(b []byte) *DecodeError {
	start := b
	var traceID, spanID []byte
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || !kExemplar.fieldOK(num, typ) {
			return d.fieldErr(&kExemplar, b)
		}
		switch num {
		case 5:
			traceID = v
		case 4:
			spanID = v
		case 7:
			if err := d.checkField(&sExemplar, num, typ, v); err != nil {
				return err
			}
		}
		b = rest
	}
	if len(traceID) != 0 && len(traceID) != 16 {
		return d.errAt(start, "exemplar trace_id is "+strconv.Itoa(len(traceID))+" bytes, want 16 or none")
	}
	if len(spanID) != 0 && len(spanID) != 8 {
		return d.errAt(start, "exemplar span_id is "+strconv.Itoa(len(spanID))+" bytes, want 8 or none")
	}
	if len(traceID) == 0 || isZero16(traceID) {
		return nil
	}
	tid := [16]byte(traceID)
	for i := range d.ex {
		if d.ex[i].trace == tid {
			return nil
		}
	}
	e := exemplarRef{trace: tid}
	if len(spanID) != 0 {
		e.span = [8]byte(spanID)
	}
	d.ex = append(d.ex, e)
	return nil
}
