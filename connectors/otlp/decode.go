package otlp

import (
	"encoding/binary"
	"strconv"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
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

// field is one decoded field: its number, wire type and value (val for
// length-delimited fields, u for varint and fixed-size ones).
type field struct {
	num protowire.Number
	typ protowire.Type
	val []byte
	u   uint64
}

// off returns the offset of b in d.base; b must be a suffix-preserving
// sub-slice (two-index slicing) of d.base.
func (d *Decoder) off(b []byte) int { return cap(d.base) - cap(b) }

func (d *Decoder) errAt(b []byte, reason string) *DecodeError {
	return &DecodeError{Reason: reason, Offset: d.off(b)}
}

// next reads one field of message k from b and returns it with its length
// in bytes. It checks that a known field has its declared wire type.
func (d *Decoder) next(k *msgKind, b []byte) (f field, n int, err *DecodeError) {
	// Tag: one byte for field numbers below 16.
	var tag uint64
	if len(b) > 0 && b[0] < 0x80 {
		tag, n = uint64(b[0]), 1
	} else if tag, n = protowire.ConsumeVarint(b); n < 0 {
		return f, 0, d.fieldErr(k, b, 0, n)
	}
	if tag>>3 == 0 || tag>>3 > uint64(protowire.MaxValidNumber) {
		return f, 0, d.fieldErr(k, b, 0, -1)
	}
	f.num, f.typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	if int(f.num) < len(k.fields) {
		if want := k.fields[f.num]; want != 0 && want&(1<<f.typ) == 0 {
			return f, 0, d.wireTypeErr(k, b, f, want)
		}
	}
	rest := b[n:]
	var m int
	switch f.typ {
	case protowire.BytesType:
		var l uint64
		if len(rest) > 0 && rest[0] < 0x80 {
			l, m = uint64(rest[0]), 1
		} else if l, m = protowire.ConsumeVarint(rest); m < 0 {
			return f, 0, d.fieldErr(k, b, f.num, m)
		}
		if l > uint64(len(rest)-m) {
			return f, 0, d.fieldErr(k, b, f.num, -2)
		}
		f.val = rest[m : m+int(l)]
		m += int(l)
	case protowire.VarintType:
		if len(rest) > 0 && rest[0] < 0x80 {
			f.u, m = uint64(rest[0]), 1
		} else if f.u, m = protowire.ConsumeVarint(rest); m < 0 {
			return f, 0, d.fieldErr(k, b, f.num, m)
		}
	case protowire.Fixed64Type:
		if len(rest) < 8 {
			return f, 0, d.fieldErr(k, b, f.num, -2)
		}
		f.u, m = binary.LittleEndian.Uint64(rest), 8
	case protowire.Fixed32Type:
		if len(rest) < 4 {
			return f, 0, d.fieldErr(k, b, f.num, -2)
		}
		f.u, m = uint64(binary.LittleEndian.Uint32(rest)), 4
	default:
		if m = protowire.ConsumeFieldValue(f.num, f.typ, rest); m < 0 {
			return f, 0, d.fieldErr(k, b, f.num, m)
		}
	}
	return f, n + m, nil
}

// fieldErr reports a malformed field at b: code is a protowire error code
// (-1 for an invalid field number, -2 for a truncated value).
//
//go:noinline
func (d *Decoder) fieldErr(k *msgKind, b []byte, num protowire.Number, code int) *DecodeError {
	var reason string
	switch {
	case num == 0:
		reason = "invalid field tag"
		if code != -1 {
			reason += ": " + protowire.ParseError(code).Error()
		}
	case code == -2:
		reason = "field " + strconv.Itoa(int(num)) + ": truncated value"
	default:
		reason = "field " + strconv.Itoa(int(num)) + ": " + protowire.ParseError(code).Error()
	}
	return d.errAt(b, k.name+": "+reason)
}

//go:noinline
func (d *Decoder) wireTypeErr(k *msgKind, b []byte, f field, want uint8) *DecodeError {
	return d.errAt(b, k.name+": field "+strconv.Itoa(int(f.num))+" has wire type "+strconv.Itoa(int(f.typ))+", want "+wireNames(want)+" (wrong message type?)")
}

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
	for rest := b; len(rest) > 0; {
		f, n, err := d.next(k, rest)
		if err != nil {
			return nil, nil, err
		}
		if err := d.checkField(s, &f); err != nil {
			return nil, nil, err
		}
		rest = rest[n:]
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
		f, n, err := d.next(&kData, b)
		if err != nil {
			return err
		}
		if f.num == 1 {
			found = true
			if err := d.walkResourceX(sig, f.val); err != nil {
				return err
			}
		}
		b = b[n:]
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
		f, n, err := d.next(&kResourceX, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 1:
			var err *DecodeError
			if res, orig, err = d.walkPlain(&kResource, &sResource, f.val); err != nil {
				return err
			}
		case 2:
			if err := d.walkScopeX(sig, f.val); err != nil {
				return err
			}
		}
		b = b[n:]
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
		f, n, err := d.next(&kScopeX, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 1:
			var err *DecodeError
			if scope, _, err = d.walkPlain(&kScope, &sScope, f.val); err != nil {
				return err
			}
		case 2:
			var err *DecodeError
			switch sig {
			case SignalSpans:
				err = d.walkSpan(f.val)
			case SignalLogs:
				err = d.walkLog(f.val)
			default:
				err = d.walkMetric(f.val)
			}
			if err != nil {
				return err
			}
		}
		b = b[n:]
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
		f, n, err := d.next(&kSpan, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 1:
			traceID = f.val
		case 2:
			spanID = f.val
		case 4:
			parentID = f.val
		case 5:
			name = f.val
			d.checkStr(name)
		case 3:
			d.checkStr(f.val)
		case 9, 11, 13:
			if err := d.checkField(&sSpan, &f); err != nil {
				return err
			}
		case 7:
			startTime = f.u
		case 8:
			endTime = f.u
		case 15:
			// Repeated status messages merge: the last code set wins.
			s := f.val
			for len(s) > 0 {
				sf, sn, err := d.next(&kStatus, s)
				if err != nil {
					return err
				}
				if sf.num == 3 {
					code = int32(sf.u)
				} else if sf.num == 2 {
					d.checkStr(sf.val)
				}
				s = s[sn:]
			}
		}
		b = b[n:]
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
		f, n, err := d.next(&kLog, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 3, 5, 6, 12:
			if err := d.checkField(&sLog, &f); err != nil {
				return err
			}
		case 1:
			t = f.u
		case 11:
			observed = f.u
		case 9:
			traceID = f.val
		case 10:
			spanID = f.val
		}
		b = b[n:]
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
		f, n, err := d.next(&kMetric, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 1:
			name = f.val
		case 2:
			desc = f.val
		case 3:
			unit = f.val
		case 5, 7, 9, 10, 11:
			// The data oneof: a different member replaces what came before,
			// the same member merges with it.
			if t := PointType(f.num); t != pt {
				d.items = d.items[:first]
				pt, temporality, monotonic = t, 0, false
			}
			if err := d.walkMetricData(pt, f.val, &temporality, &monotonic); err != nil {
				return err
			}
		}
		b = b[n:]
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
		f, n, err := d.next(k, b)
		if err != nil {
			return err
		}
		switch {
		case f.num == 1:
			if err := d.walkPoint(pt, f.val); err != nil {
				return err
			}
		case f.num == 2 && pt != PointGauge && pt != PointSummary:
			*temporality = int32(f.u)
		case f.num == 3 && pt == PointSum:
			*monotonic = f.u != 0
		}
		b = b[n:]
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
		f, n, err := d.next(k, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 2:
			startTime = f.u
		case 3:
			t = f.u
		case exField:
			if err := d.walkExemplar(f.val); err != nil {
				return err
			}
		case attrField:
			if err := d.checkField(s, &f); err != nil {
				return err
			}
		}
		b = b[n:]
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
		f, n, err := d.next(&kExemplar, b)
		if err != nil {
			return err
		}
		switch f.num {
		case 5:
			traceID = f.val
		case 4:
			spanID = f.val
		case 7:
			if err := d.checkField(&sExemplar, &f); err != nil {
				return err
			}
		}
		b = b[n:]
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
