package semconv

import (
	"slices"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// Field numbers of the repeated KeyValue attributes in the OTLP messages.
const (
	ResourceAttrs           protowire.Number = 1 // opentelemetry.proto.resource.v1.Resource
	SpanAttrs               protowire.Number = 9 // opentelemetry.proto.trace.v1.Span
	SpanEventAttrs          protowire.Number = 3 // opentelemetry.proto.trace.v1.Span.Event
	LogRecordAttrs          protowire.Number = 6 // opentelemetry.proto.logs.v1.LogRecord
	NumberDataPointAttrs    protowire.Number = 7 // opentelemetry.proto.metrics.v1.NumberDataPoint
	HistogramDataPointAttrs protowire.Number = 9 // opentelemetry.proto.metrics.v1.HistogramDataPoint
)

// KV is one attribute with its value rendered as text (see Value.String).
type KV struct {
	Key, Value string
}

// ValueType is the kind of an OTLP AnyValue: the field number of the
// member set.
type ValueType = wire.Kind

// AnyValue kinds, as in opentelemetry.proto.common.v1.AnyValue.
const (
	ValueEmpty  = wire.KindNone
	ValueString = wire.KindString
	ValueBool   = wire.KindBool
	ValueInt    = wire.KindInt
	ValueDouble = wire.KindDouble
	ValueArray  = wire.KindArray
	ValueKVList = wire.KindKVList
	ValueBytes  = wire.KindBytes
)

// Value is an AnyValue read from wire bytes (wire.Value): its Type, and
// Int, Float, Bool, Raw, String, Equal and IsScalar to read it. It aliases
// the message it was read from: it stays valid as long as those bytes are
// not modified.
type Value = wire.Value

// attrIter walks the repeated KeyValue field of a serialized message.
type attrIter struct {
	msg   []byte
	field protowire.Number
}

// next returns the next attribute. key aliases the message.
func (it *attrIter) next() (key []byte, val Value, ok bool) {
	for len(it.msg) > 0 {
		num, typ, v, _, rest := wire.Next(it.msg)
		if rest == nil {
			it.msg = nil
			break
		}
		it.msg = rest
		if num == it.field && typ == protowire.BytesType {
			key, raw, _ := wire.KeyValue(v)
			return key, wire.AnyValue(raw), true
		}
	}
	return nil, Value{}, false
}

// AppendAttrs appends the attributes of the repeated KeyValue field number
// field of the serialized message msg (ResourceAttrs, SpanAttrs,
// LogRecordAttrs, NumberDataPointAttrs, HistogramDataPointAttrs…) to dst,
// in wire order, with values rendered by Value.String. Attributes whose
// value is an array, a kvlist or empty are skipped. Malformed bytes end the
// scan; what was read before stays. The appended strings share one
// allocation (beside dst's growth).
func AppendAttrs(dst []KV, msg []byte, field protowire.Number) []KV {
	return appendAttrs(dst, msg, field, nil)
}

// AppendIdentityAttrs is AppendAttrs of the attributes IdentityOf reads of
// a point or span alone (identityPointKey): the others, most of a span's,
// are not rendered.
func AppendIdentityAttrs(dst []KV, msg []byte, field protowire.Number) []KV {
	return appendAttrs(dst, msg, field, identityPointKey)
}

// appendAttrs is AppendAttrs of the attributes whose key keep accepts
// (nil: every one).
func appendAttrs(dst []KV, msg []byte, field protowire.Number, keep func(key []byte) bool) []KV {
	// One pass renders every key and value into buf, noting their ends;
	// the strings are made once buf is final.
	var stack [32]uint32
	ends := stack[:0]
	var buf []byte
	it := attrIter{msg: msg, field: field}
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		if !v.IsScalar() || keep != nil && !keep(k) {
			continue
		}
		if buf == nil {
			buf = make([]byte, 0, len(it.msg)+len(k)+maxTextLen(v))
		}
		buf = append(buf, k...)
		ends = append(ends, uint32(len(buf)))
		buf = v.AppendText(buf)
		ends = append(ends, uint32(len(buf)))
	}
	if len(ends) == 0 {
		return dst
	}
	// buf is not written again, so strings may share its bytes.
	all := unsafe.String(unsafe.SliceData(buf), len(buf))
	dst = slices.Grow(dst, len(ends)/2)
	start := uint32(0)
	for i := 0; i < len(ends); i += 2 {
		mid, end := ends[i], ends[i+1]
		dst = append(dst, KV{Key: all[start:mid], Value: all[mid:end]})
		start = end
	}
	return dst
}

// maxTextLen bounds len(v.AppendText(nil)).
func maxTextLen(v Value) int {
	switch v.Type {
	case ValueString:
		return len(v.Bytes)
	case ValueBool:
		return len("false")
	case ValueInt:
		return len("-9223372036854775808")
	case ValueDouble:
		return len("-1.2345678901234567e-308")
	case ValueBytes:
		return 2 * len(v.Bytes)
	}
	return 0
}

// LookupValue returns the value of the first attribute named key in the
// repeated KeyValue field number field of msg. It does not allocate; the
// Value aliases msg.
func LookupValue(msg []byte, field protowire.Number, key string) (Value, bool) {
	it := attrIter{msg: msg, field: field}
	for {
		k, v, ok := it.next()
		if !ok {
			return Value{}, false
		}
		if string(k) == key {
			return v, true
		}
	}
}

// Lookup returns the value of the first attribute named key in the repeated
// KeyValue field number field of msg, rendered as text (Value.String). A
// miss, a bool and an empty string do not allocate; other hits allocate
// their string once. Use LookupValue to read without allocating.
func Lookup(msg []byte, field protowire.Number, key string) (string, bool) {
	v, ok := LookupValue(msg, field, key)
	if !ok {
		return "", false
	}
	return v.String(), true
}
