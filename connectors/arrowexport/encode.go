package arrowexport

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/operators/braidpb"
)

// mapB builds one map<string,string> attributes column.
type mapB struct {
	m     *array.MapBuilder
	entry *array.StructBuilder
	key   *array.StringBuilder
	val   *array.StringBuilder
}

func newMapB(b array.Builder) mapB {
	m := b.(*array.MapBuilder)
	return mapB{
		m:     m,
		entry: m.ValueBuilder().(*array.StructBuilder),
		key:   m.KeyBuilder().(*array.StringBuilder),
		val:   m.ItemBuilder().(*array.StringBuilder),
	}
}

// originB builds the origin_topic, origin_partition, origin_offset fields.
type originB struct {
	topic     *array.StringBuilder
	partition *array.Int32Builder
	offset    *array.Int64Builder
}

func newOriginB(s *array.StructBuilder, first int) originB {
	return originB{
		topic:     s.FieldBuilder(first).(*array.StringBuilder),
		partition: s.FieldBuilder(first + 1).(*array.Int32Builder),
		offset:    s.FieldBuilder(first + 2).(*array.Int64Builder),
	}
}

// builders holds typed references to every builder of a RecordBuilder for
// Schema(). The references stay valid across RecordBuilder.NewRecord calls.
type builders struct {
	rb *array.RecordBuilder

	traceID         *array.StringBuilder
	revision        *array.Uint32Builder
	startTime       *array.TimestampBuilder
	endTime         *array.TimestampBuilder
	watermark       *array.TimestampBuilder
	spanCount       *array.Uint32Builder
	logCount        *array.Uint32Builder
	pointCount      *array.Uint32Builder
	rootSpanName    *array.StringBuilder
	rootServiceName *array.StringBuilder
	durationNS      *array.Int64Builder
	errorSpanCount  *array.Uint32Builder
	droppedSpans    *array.Uint32Builder
	droppedLogs     *array.Uint32Builder
	droppedPoints   *array.Uint32Builder

	flags *array.ListBuilder
	flag  *array.StringBuilder

	resources *array.ListBuilder
	resource  *array.StructBuilder
	resAttrs  mapB

	spans struct {
		list          *array.ListBuilder
		s             *array.StructBuilder
		spanID        *array.StringBuilder
		parentSpanID  *array.StringBuilder
		name          *array.StringBuilder
		kind          *array.StringBuilder
		startTime     *array.TimestampBuilder
		endTime       *array.TimestampBuilder
		durationNS    *array.Int64Builder
		statusCode    *array.Int32Builder
		statusMessage *array.StringBuilder
		attrs         mapB
		resourceIndex *array.Uint32Builder
		scopeName     *array.StringBuilder
		origin        originB
		events        *array.ListBuilder
		event         *array.StructBuilder
		evTime        *array.TimestampBuilder
		evName        *array.StringBuilder
		evAttrs       mapB
	}

	logs struct {
		list           *array.ListBuilder
		s              *array.StructBuilder
		time           *array.TimestampBuilder
		observedTime   *array.TimestampBuilder
		severityNumber *array.Int32Builder
		severityText   *array.StringBuilder
		body           *array.StringBuilder
		eventName      *array.StringBuilder
		spanID         *array.StringBuilder
		attrs          mapB
		resourceIndex  *array.Uint32Builder
		scopeName      *array.StringBuilder
		origin         originB
	}

	points struct {
		list          *array.ListBuilder
		s             *array.StructBuilder
		metricName    *array.StringBuilder
		unit          *array.StringBuilder
		typ           *array.StringBuilder
		time          *array.TimestampBuilder
		value         *array.Float64Builder
		count         *array.Uint64Builder
		exemplarValue *array.Float64Builder
		attrs         mapB
		resourceIndex *array.Uint32Builder
		scopeName     *array.StringBuilder
		origin        originB
	}

	// scratch is reused to render hex ids and non-string values.
	scratch []byte
	// pending approximates the bytes buffered since the last NewRecord.
	pending int
}

func newBuilders(mem memory.Allocator) *builders {
	rb := array.NewRecordBuilder(mem, schema)
	b := &builders{rb: rb}
	b.traceID = rb.Field(colTraceID).(*array.StringBuilder)
	b.revision = rb.Field(colRevision).(*array.Uint32Builder)
	b.startTime = rb.Field(colStartTime).(*array.TimestampBuilder)
	b.endTime = rb.Field(colEndTime).(*array.TimestampBuilder)
	b.watermark = rb.Field(colWatermark).(*array.TimestampBuilder)
	b.spanCount = rb.Field(colSpanCount).(*array.Uint32Builder)
	b.logCount = rb.Field(colLogCount).(*array.Uint32Builder)
	b.pointCount = rb.Field(colPointCount).(*array.Uint32Builder)
	b.rootSpanName = rb.Field(colRootSpanName).(*array.StringBuilder)
	b.rootServiceName = rb.Field(colRootServiceName).(*array.StringBuilder)
	b.durationNS = rb.Field(colDurationNS).(*array.Int64Builder)
	b.errorSpanCount = rb.Field(colErrorSpanCount).(*array.Uint32Builder)
	b.droppedSpans = rb.Field(colDroppedSpans).(*array.Uint32Builder)
	b.droppedLogs = rb.Field(colDroppedLogs).(*array.Uint32Builder)
	b.droppedPoints = rb.Field(colDroppedPoints).(*array.Uint32Builder)

	b.flags = rb.Field(colFlags).(*array.ListBuilder)
	b.flag = b.flags.ValueBuilder().(*array.StringBuilder)

	b.resources = rb.Field(colResources).(*array.ListBuilder)
	b.resource = b.resources.ValueBuilder().(*array.StructBuilder)
	b.resAttrs = newMapB(b.resource.FieldBuilder(0))

	sp := &b.spans
	sp.list = rb.Field(colSpans).(*array.ListBuilder)
	sp.s = sp.list.ValueBuilder().(*array.StructBuilder)
	sp.spanID = sp.s.FieldBuilder(spSpanID).(*array.StringBuilder)
	sp.parentSpanID = sp.s.FieldBuilder(spParentSpanID).(*array.StringBuilder)
	sp.name = sp.s.FieldBuilder(spName).(*array.StringBuilder)
	sp.kind = sp.s.FieldBuilder(spKind).(*array.StringBuilder)
	sp.startTime = sp.s.FieldBuilder(spStartTime).(*array.TimestampBuilder)
	sp.endTime = sp.s.FieldBuilder(spEndTime).(*array.TimestampBuilder)
	sp.durationNS = sp.s.FieldBuilder(spDurationNS).(*array.Int64Builder)
	sp.statusCode = sp.s.FieldBuilder(spStatusCode).(*array.Int32Builder)
	sp.statusMessage = sp.s.FieldBuilder(spStatusMessage).(*array.StringBuilder)
	sp.attrs = newMapB(sp.s.FieldBuilder(spAttributes))
	sp.resourceIndex = sp.s.FieldBuilder(spResourceIndex).(*array.Uint32Builder)
	sp.scopeName = sp.s.FieldBuilder(spScopeName).(*array.StringBuilder)
	sp.origin = newOriginB(sp.s, spOriginTopic)
	sp.events = sp.s.FieldBuilder(spEvents).(*array.ListBuilder)
	sp.event = sp.events.ValueBuilder().(*array.StructBuilder)
	sp.evTime = sp.event.FieldBuilder(evTime).(*array.TimestampBuilder)
	sp.evName = sp.event.FieldBuilder(evName).(*array.StringBuilder)
	sp.evAttrs = newMapB(sp.event.FieldBuilder(evAttributes))

	lg := &b.logs
	lg.list = rb.Field(colLogs).(*array.ListBuilder)
	lg.s = lg.list.ValueBuilder().(*array.StructBuilder)
	lg.time = lg.s.FieldBuilder(lgTime).(*array.TimestampBuilder)
	lg.observedTime = lg.s.FieldBuilder(lgObservedTime).(*array.TimestampBuilder)
	lg.severityNumber = lg.s.FieldBuilder(lgSeverityNumber).(*array.Int32Builder)
	lg.severityText = lg.s.FieldBuilder(lgSeverityText).(*array.StringBuilder)
	lg.body = lg.s.FieldBuilder(lgBody).(*array.StringBuilder)
	lg.eventName = lg.s.FieldBuilder(lgEventName).(*array.StringBuilder)
	lg.spanID = lg.s.FieldBuilder(lgSpanID).(*array.StringBuilder)
	lg.attrs = newMapB(lg.s.FieldBuilder(lgAttributes))
	lg.resourceIndex = lg.s.FieldBuilder(lgResourceIndex).(*array.Uint32Builder)
	lg.scopeName = lg.s.FieldBuilder(lgScopeName).(*array.StringBuilder)
	lg.origin = newOriginB(lg.s, lgOriginTopic)

	pt := &b.points
	pt.list = rb.Field(colPoints).(*array.ListBuilder)
	pt.s = pt.list.ValueBuilder().(*array.StructBuilder)
	pt.metricName = pt.s.FieldBuilder(ptMetricName).(*array.StringBuilder)
	pt.unit = pt.s.FieldBuilder(ptUnit).(*array.StringBuilder)
	pt.typ = pt.s.FieldBuilder(ptType).(*array.StringBuilder)
	pt.time = pt.s.FieldBuilder(ptTime).(*array.TimestampBuilder)
	pt.value = pt.s.FieldBuilder(ptValue).(*array.Float64Builder)
	pt.count = pt.s.FieldBuilder(ptCount).(*array.Uint64Builder)
	pt.exemplarValue = pt.s.FieldBuilder(ptExemplarValue).(*array.Float64Builder)
	pt.attrs = newMapB(pt.s.FieldBuilder(ptAttributes))
	pt.resourceIndex = pt.s.FieldBuilder(ptResourceIndex).(*array.Uint32Builder)
	pt.scopeName = pt.s.FieldBuilder(ptScopeName).(*array.StringBuilder)
	pt.origin = newOriginB(pt.s, ptOriginTopic)
	return b
}

// appendTrace appends one row.
func (b *builders) appendTrace(ft *braidpb.FusedTrace) {
	b.appendHex(b.traceID, ft.GetTraceId(), false)
	b.revision.Append(ft.GetRevision())
	appendTime(b.startTime, ft.GetStartTimeUnixNano())
	appendTime(b.endTime, ft.GetEndTimeUnixNano())
	appendTime(b.watermark, ft.GetWatermarkUnixNano())

	s := ft.GetSummary()
	b.spanCount.Append(s.GetSpanCount())
	b.logCount.Append(s.GetLogCount())
	b.pointCount.Append(s.GetPointCount())
	b.appendStr(b.rootSpanName, s.GetRootSpanName())
	b.appendStr(b.rootServiceName, s.GetRootServiceName())
	b.durationNS.Append(saturate(s.GetDurationNano()))
	b.errorSpanCount.Append(s.GetErrorSpanCount())
	b.droppedSpans.Append(s.GetDroppedSpans())
	b.droppedLogs.Append(s.GetDroppedLogs())
	b.droppedPoints.Append(s.GetDroppedPoints())

	b.flags.Append(true)
	for _, f := range ft.GetFlags() {
		b.appendStr(b.flag, flagName(f))
	}

	b.resources.Append(true)
	for _, r := range ft.GetResources() {
		b.resource.Append(true)
		b.appendAttrs(b.resAttrs, r.GetAttributes())
	}

	b.spans.list.Append(true)
	for _, fs := range ft.GetSpans() {
		b.appendSpan(fs)
	}
	b.logs.list.Append(true)
	for _, fl := range ft.GetLogs() {
		b.appendLog(fl)
	}
	b.points.list.Append(true)
	for _, fp := range ft.GetPoints() {
		b.appendPoint(fp, ft.GetTraceId())
	}
	b.pending += 256
}

func (b *builders) appendSpan(fs *braidpb.FusedSpan) {
	sp := &b.spans
	s := fs.GetSpan()
	sp.s.Append(true)
	b.appendHex(sp.spanID, s.GetSpanId(), true)
	b.appendHex(sp.parentSpanID, s.GetParentSpanId(), true)
	b.appendStr(sp.name, s.GetName())
	b.appendStr(sp.kind, spanKindName(s.GetKind()))
	start, end := s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano()
	appendTime(sp.startTime, start)
	appendTime(sp.endTime, end)
	if start != 0 && end != 0 {
		sp.durationNS.Append(int64(end - start))
	} else {
		sp.durationNS.AppendNull()
	}
	sp.statusCode.Append(int32(s.GetStatus().GetCode()))
	b.appendStr(sp.statusMessage, s.GetStatus().GetMessage())
	b.appendAttrs(sp.attrs, s.GetAttributes())
	sp.resourceIndex.Append(fs.GetResourceIndex())
	b.appendStr(sp.scopeName, fs.GetScope().GetName())
	b.appendOrigin(sp.origin, fs.GetOrigin())
	sp.events.Append(true)
	for _, ev := range s.GetEvents() {
		sp.event.Append(true)
		appendTime(sp.evTime, ev.GetTimeUnixNano())
		b.appendStr(sp.evName, ev.GetName())
		b.appendAttrs(sp.evAttrs, ev.GetAttributes())
	}
	b.pending += 128
}

func (b *builders) appendLog(fl *braidpb.FusedLog) {
	lg := &b.logs
	l := fl.GetLog()
	lg.s.Append(true)
	appendTime(lg.time, l.GetTimeUnixNano())
	appendTime(lg.observedTime, l.GetObservedTimeUnixNano())
	lg.severityNumber.Append(int32(l.GetSeverityNumber()))
	b.appendStr(lg.severityText, l.GetSeverityText())
	b.appendAny(lg.body, l.GetBody())
	b.appendStr(lg.eventName, l.GetEventName())
	b.appendHex(lg.spanID, l.GetSpanId(), true)
	b.appendAttrs(lg.attrs, l.GetAttributes())
	lg.resourceIndex.Append(fl.GetResourceIndex())
	b.appendStr(lg.scopeName, fl.GetScope().GetName())
	b.appendOrigin(lg.origin, fl.GetOrigin())
	b.pending += 96
}

// numberValue returns a NumberDataPoint's value.
func numberValue(dp *metricspb.NumberDataPoint) (float64, bool) {
	switch v := dp.GetValue().(type) {
	case *metricspb.NumberDataPoint_AsDouble:
		return v.AsDouble, true
	case *metricspb.NumberDataPoint_AsInt:
		return float64(v.AsInt), true
	}
	return 0, false
}

// exemplarValue returns the value of the first exemplar whose trace id is
// traceID.
func exemplarValue(exs []*metricspb.Exemplar, traceID []byte) (float64, bool) {
	for _, ex := range exs {
		if !bytes.Equal(ex.GetTraceId(), traceID) {
			continue
		}
		switch v := ex.GetValue().(type) {
		case *metricspb.Exemplar_AsDouble:
			return v.AsDouble, true
		case *metricspb.Exemplar_AsInt:
			return float64(v.AsInt), true
		}
		return 0, false
	}
	return 0, false
}

func (b *builders) appendPoint(fp *braidpb.FusedPoint, traceID []byte) {
	pt := &b.points
	m := fp.GetMetric()
	pt.s.Append(true)
	b.appendStr(pt.metricName, m.GetName())
	b.appendStr(pt.unit, m.GetUnit())

	var (
		typ         string
		time        uint64
		value       float64
		hasValue    bool
		count       uint64
		attrs       []*commonpb.KeyValue
		exemplars   []*metricspb.Exemplar
		hasDataType = true
	)
	switch d := m.GetData().(type) {
	case *metricspb.Metric_Gauge:
		typ = "Gauge"
		if dps := d.Gauge.GetDataPoints(); len(dps) > 0 {
			dp := dps[0]
			time, attrs, exemplars = dp.GetTimeUnixNano(), dp.GetAttributes(), dp.GetExemplars()
			value, hasValue = numberValue(dp)
		}
	case *metricspb.Metric_Sum:
		typ = "Sum"
		if dps := d.Sum.GetDataPoints(); len(dps) > 0 {
			dp := dps[0]
			time, attrs, exemplars = dp.GetTimeUnixNano(), dp.GetAttributes(), dp.GetExemplars()
			value, hasValue = numberValue(dp)
		}
	case *metricspb.Metric_Histogram:
		typ = "Histogram"
		if dps := d.Histogram.GetDataPoints(); len(dps) > 0 {
			dp := dps[0]
			time, attrs, exemplars = dp.GetTimeUnixNano(), dp.GetAttributes(), dp.GetExemplars()
			count = dp.GetCount()
			if dp.Sum != nil {
				value, hasValue = *dp.Sum, true
			}
		}
	case *metricspb.Metric_ExponentialHistogram:
		typ = "ExponentialHistogram"
		if dps := d.ExponentialHistogram.GetDataPoints(); len(dps) > 0 {
			dp := dps[0]
			time, attrs, exemplars = dp.GetTimeUnixNano(), dp.GetAttributes(), dp.GetExemplars()
			count = dp.GetCount()
			if dp.Sum != nil {
				value, hasValue = *dp.Sum, true
			}
		}
	case *metricspb.Metric_Summary:
		typ = "Summary"
		if dps := d.Summary.GetDataPoints(); len(dps) > 0 {
			dp := dps[0]
			time, attrs = dp.GetTimeUnixNano(), dp.GetAttributes()
			count = dp.GetCount()
			value, hasValue = dp.GetSum(), true
		}
	default:
		hasDataType = false
	}
	if hasDataType {
		b.appendStr(pt.typ, typ)
	} else {
		pt.typ.AppendNull()
	}
	appendTime(pt.time, time)
	appendFloat(pt.value, value, hasValue)
	pt.count.Append(count)
	ev, ok := exemplarValue(exemplars, traceID)
	appendFloat(pt.exemplarValue, ev, ok)
	b.appendAttrs(pt.attrs, attrs)
	pt.resourceIndex.Append(fp.GetResourceIndex())
	b.appendStr(pt.scopeName, fp.GetScope().GetName())
	b.appendOrigin(pt.origin, fp.GetOrigin())
	b.pending += 96
}

func appendFloat(fb *array.Float64Builder, v float64, ok bool) {
	if ok {
		fb.Append(v)
	} else {
		fb.AppendNull()
	}
}

// appendTime appends unix nanoseconds; 0 (unset in OTLP) is null.
func appendTime(tb *array.TimestampBuilder, ns uint64) {
	if ns == 0 {
		tb.AppendNull()
		return
	}
	tb.Append(arrow.Timestamp(saturate(ns)))
}

func saturate(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

func (b *builders) appendOrigin(ob originB, o *braidpb.Origin) {
	if o == nil {
		ob.topic.AppendNull()
		ob.partition.AppendNull()
		ob.offset.AppendNull()
		return
	}
	b.appendStr(ob.topic, o.GetTopic())
	ob.partition.Append(o.GetPartition())
	ob.offset.Append(o.GetOffset())
}

// appendStr appends s, with invalid UTF-8 sequences replaced by U+FFFD so
// that the column is valid Arrow utf8.
func (b *builders) appendStr(sb *array.StringBuilder, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b.pending += len(s)
	sb.AppendString(s)
}

// appendHex appends id as lower-case hex; an empty id is null if nullEmpty.
func (b *builders) appendHex(sb *array.StringBuilder, id []byte, nullEmpty bool) {
	if len(id) == 0 && nullEmpty {
		sb.AppendNull()
		return
	}
	n := hex.EncodedLen(len(id))
	if cap(b.scratch) < n {
		b.scratch = make([]byte, n, 2*n)
	}
	buf := b.scratch[:n]
	hex.Encode(buf, id)
	b.pending += n
	sb.BinaryBuilder.Append(buf)
}

func (b *builders) appendAttrs(mb mapB, kvs []*commonpb.KeyValue) {
	mb.m.Append(true)
	for _, kv := range kvs {
		mb.entry.Append(true)
		b.appendStr(mb.key, kv.GetKey())
		b.appendAny(mb.val, kv.GetValue())
	}
}

// appendAny appends an AnyValue rendered as a string (see doc.go); an
// absent or empty value is null.
func (b *builders) appendAny(sb *array.StringBuilder, v *commonpb.AnyValue) {
	if sv, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
		b.appendStr(sb, sv.StringValue)
		return
	}
	if v.GetValue() == nil {
		sb.AppendNull()
		return
	}
	b.scratch = renderScalar(b.scratch[:0], v)
	b.pending += len(b.scratch)
	sb.BinaryBuilder.Append(b.scratch)
}

// renderScalar renders a non-string AnyValue at the top level: numbers and
// booleans as Go formats them, bytes as standard base64, arrays and kvlists
// as compact JSON.
func renderScalar(dst []byte, v *commonpb.AnyValue) []byte {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_BoolValue:
		return strconv.AppendBool(dst, x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.AppendInt(dst, x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.AppendFloat(dst, x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BytesValue:
		return base64.StdEncoding.AppendEncode(dst, x.BytesValue)
	case *commonpb.AnyValue_StringValueStrindex:
		return strconv.AppendInt(dst, int64(x.StringValueStrindex), 10)
	}
	return appendJSON(dst, v)
}

// appendJSON renders an AnyValue as compact JSON: strings and bytes (base64)
// as JSON strings, ints and finite doubles as numbers, NaN and infinities as
// the strings "NaN", "Infinity", "-Infinity" (as protojson does), arrays as
// arrays, kvlists as objects with their keys in order, absent values as null.
func appendJSON(dst []byte, v *commonpb.AnyValue) []byte {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return appendJSONString(dst, x.StringValue)
	case *commonpb.AnyValue_BoolValue:
		return strconv.AppendBool(dst, x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.AppendInt(dst, x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		f := x.DoubleValue
		switch {
		case math.IsNaN(f):
			return append(dst, `"NaN"`...)
		case math.IsInf(f, 1):
			return append(dst, `"Infinity"`...)
		case math.IsInf(f, -1):
			return append(dst, `"-Infinity"`...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case *commonpb.AnyValue_BytesValue:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x.BytesValue)
		return append(dst, '"')
	case *commonpb.AnyValue_StringValueStrindex:
		return strconv.AppendInt(dst, int64(x.StringValueStrindex), 10)
	case *commonpb.AnyValue_ArrayValue:
		dst = append(dst, '[')
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSON(dst, e)
		}
		return append(dst, ']')
	case *commonpb.AnyValue_KvlistValue:
		dst = append(dst, '{')
		for i, kv := range x.KvlistValue.GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, kv.GetKey())
			dst = append(dst, ':')
			dst = appendJSON(dst, kv.GetValue())
		}
		return append(dst, '}')
	}
	return append(dst, "null"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD;
// <, > and & are not escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, "\uFFFD"...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// spanKindNames are the span kinds without the SPAN_KIND_ prefix.
var spanKindNames = func() map[tracepb.Span_SpanKind]string {
	m := make(map[tracepb.Span_SpanKind]string, len(tracepb.Span_SpanKind_name))
	for n, name := range tracepb.Span_SpanKind_name {
		m[tracepb.Span_SpanKind(n)] = strings.TrimPrefix(name, "SPAN_KIND_")
	}
	return m
}()

func spanKindName(k tracepb.Span_SpanKind) string {
	if n, ok := spanKindNames[k]; ok {
		return n
	}
	return strconv.Itoa(int(k))
}

// flagNames are the flags without the FLAG_ prefix.
var flagNames = func() map[braidpb.Flag]string {
	m := make(map[braidpb.Flag]string, len(braidpb.Flag_name))
	for n, name := range braidpb.Flag_name {
		m[braidpb.Flag(n)] = strings.TrimPrefix(name, "FLAG_")
	}
	return m
}()

func flagName(f braidpb.Flag) string {
	if n, ok := flagNames[f]; ok {
		return n
	}
	return strconv.Itoa(int(f))
}
