package semconv

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
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

// ValueType is the kind of an OTLP AnyValue.
type ValueType uint8

// AnyValue kinds, as in opentelemetry.proto.common.v1.AnyValue.
const (
	ValueEmpty ValueType = iota
	ValueString
	ValueBool
	ValueInt
	ValueDouble
	ValueArray
	ValueKVList
	ValueBytes
)

// Value is an AnyValue read from wire bytes. It aliases the message it was
// read from: it stays valid as long as those bytes are not modified.
type Value struct {
	Type ValueType
	raw  []byte // string, bytes, array, kvlist
	num  uint64 // bool, int, double bits
}

// parseAnyValue decodes a serialized AnyValue. The last field set wins, as
// with a oneof.
func parseAnyValue(b []byte) Value {
	// The common layout: one field, short.
	if len(b) >= 2 {
		switch b[0] {
		case 0x0a: // string_value
			if n := int(b[1]); n < 0x80 && 2+n == len(b) {
				return Value{Type: ValueString, raw: b[2:len(b):len(b)]}
			}
		case 0x10, 0x18: // bool_value, int_value
			if x, m := protowire.ConsumeVarint(b[1:]); m == len(b)-1 {
				if b[0] == 0x10 {
					return Value{Type: ValueBool, num: x}
				}
				return Value{Type: ValueInt, num: x}
			}
		case 0x21: // double_value
			if len(b) == 9 {
				return Value{Type: ValueDouble, num: binary.LittleEndian.Uint64(b[1:])}
			}
		}
	}
	var v Value
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return v
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType:
			raw, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return v
			}
			b = b[m:]
			switch num {
			case 1:
				v = Value{Type: ValueString, raw: raw}
			case 5:
				v = Value{Type: ValueArray, raw: raw}
			case 6:
				v = Value{Type: ValueKVList, raw: raw}
			case 7:
				v = Value{Type: ValueBytes, raw: raw}
			}
		case typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return v
			}
			b = b[m:]
			switch num {
			case 2:
				v = Value{Type: ValueBool, num: x}
			case 3:
				v = Value{Type: ValueInt, num: x}
			}
		case typ == protowire.Fixed64Type:
			x, m := protowire.ConsumeFixed64(b)
			if m < 0 {
				return v
			}
			b = b[m:]
			if num == 4 {
				v = Value{Type: ValueDouble, num: x}
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return v
			}
			b = b[m:]
		}
	}
	return v
}

// IsScalar reports whether v is a string, bool, int, double or bytes value.
func (v Value) IsScalar() bool {
	switch v.Type {
	case ValueString, ValueBool, ValueInt, ValueDouble, ValueBytes:
		return true
	}
	return false
}

// String renders v as text: strings as they are, ints in decimal, doubles
// in the shortest form that round-trips ('g'), bools as "true"/"false",
// bytes in lower-case hex; arrays, kvlists and empty values as "".
func (v Value) String() string {
	switch v.Type {
	case ValueString:
		return string(v.raw)
	case ValueBool:
		if v.num != 0 {
			return "true"
		}
		return "false"
	case ValueInt:
		return strconv.FormatInt(int64(v.num), 10)
	case ValueDouble:
		return strconv.FormatFloat(math.Float64frombits(v.num), 'g', -1, 64)
	case ValueBytes:
		return hex.EncodeToString(v.raw)
	}
	return ""
}

// Raw returns the bytes of a string or bytes value (aliasing the message),
// nil otherwise.
func (v Value) Raw() []byte {
	if v.Type == ValueString || v.Type == ValueBytes {
		return v.raw
	}
	return nil
}

// Equal reports whether v rendered as text equals s, without allocating for
// strings, bools and ints.
func (v Value) Equal(s string) bool {
	switch v.Type {
	case ValueString:
		return string(v.raw) == s
	case ValueBool:
		return (v.num != 0 && s == "true") || (v.num == 0 && s == "false")
	case ValueInt:
		i, ok := atoi([]byte(s))
		return ok && i == int64(v.num) && canonicalInt(s)
	}
	return v.String() == s
}

// Int returns v as an integer: an int; a double with an integral value; a
// string holding a decimal integer. ok is false otherwise.
func (v Value) Int() (int64, bool) {
	switch v.Type {
	case ValueInt:
		return int64(v.num), true
	case ValueDouble:
		f := math.Float64frombits(v.num)
		if f == math.Trunc(f) && f >= math.MinInt64 && f <= math.MaxInt64 {
			return int64(f), true
		}
	case ValueString:
		return atoi(v.raw)
	}
	return 0, false
}

// Float returns v as a float64: a double, an int, or a string holding a
// number. ok is false otherwise, and for NaN.
func (v Value) Float() (float64, bool) {
	switch v.Type {
	case ValueDouble:
		f := math.Float64frombits(v.num)
		return f, !math.IsNaN(f)
	case ValueInt:
		return float64(int64(v.num)), true
	case ValueString:
		f, err := strconv.ParseFloat(string(v.raw), 64)
		return f, err == nil && !math.IsNaN(f)
	}
	return 0, false
}

// Bool returns v as a bool: a bool, an int (non-zero is true), or the
// strings "true"/"false" (any case of strconv.ParseBool).
func (v Value) Bool() (bool, bool) {
	switch v.Type {
	case ValueBool, ValueInt:
		return v.num != 0, true
	case ValueString:
		b, err := strconv.ParseBool(string(v.raw))
		return b, err == nil
	}
	return false, false
}

// canonicalInt reports whether the decimal integer s is written as
// strconv.FormatInt writes it: no sign but '-', no leading zeros, no "-0".
func canonicalInt(s string) bool {
	d := strings.TrimPrefix(s, "-")
	return s[0] != '+' && (d == "0" && s == "0" || d[0] != '0')
}

// atoi parses a decimal int64 without allocating.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		// n*10 cannot wrap below the cut-off (a check after the multiply
		// does not see every wrap: 25000000000000000000 read as
		// 6553255926290448384).
		if n > (math.MaxInt64+1)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > math.MaxInt64+1 {
			return 0, false
		}
	}
	if neg {
		return -int64(n), true
	}
	if n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// attrIter walks the repeated KeyValue field of a serialized message.
type attrIter struct {
	msg   []byte
	field protowire.Number
}

// next returns the next attribute. key aliases the message.
func (it *attrIter) next() (key []byte, val Value, ok bool) {
	for len(it.msg) > 0 {
		num, typ, n := protowire.ConsumeTag(it.msg)
		if n < 0 {
			it.msg = nil
			return nil, Value{}, false
		}
		it.msg = it.msg[n:]
		if num != it.field || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, it.msg)
			if m < 0 {
				it.msg = nil
				return nil, Value{}, false
			}
			it.msg = it.msg[m:]
			continue
		}
		kv, m := protowire.ConsumeBytes(it.msg)
		if m < 0 {
			it.msg = nil
			return nil, Value{}, false
		}
		it.msg = it.msg[m:]
		key, val = parseKeyValue(kv)
		return key, val, true
	}
	return nil, Value{}, false
}

// parseKeyValue decodes a serialized KeyValue (key 1, value 2).
func parseKeyValue(b []byte) (key []byte, val Value) {
	key, raw := parseKeyValueRaw(b)
	return key, parseAnyValue(raw)
}

// parseKeyValueRaw splits a serialized KeyValue into its key and its
// serialized AnyValue, leaving the value undecoded. The last occurrence of
// a field wins.
func parseKeyValueRaw(b []byte) (key, val []byte) {
	// The common layout: the key, then the value, nothing else.
	if len(b) >= 2 && b[0] == 0x0a && b[1] < 0x80 {
		n := int(b[1])
		if 2+n+2 <= len(b) && b[2+n] == 0x12 && b[3+n] < 0x80 && 4+n+int(b[3+n]) == len(b) {
			return b[2 : 2+n : 2+n], b[4+n:]
		}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return key, val
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			raw, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return key, val
			}
			b = b[m:]
			if num == 1 {
				key = raw
			} else {
				val = raw
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return key, val
		}
		b = b[m:]
	}
	return key, val
}

// AppendAttrs appends the attributes of the repeated KeyValue field number
// field of the serialized message msg (ResourceAttrs, SpanAttrs,
// LogRecordAttrs, NumberDataPointAttrs, HistogramDataPointAttrs…) to dst,
// in wire order, with values rendered by Value.String. Attributes whose
// value is an array, a kvlist or empty are skipped. Malformed bytes end the
// scan; what was read before stays. The appended strings share one
// allocation (beside dst's growth).
func AppendAttrs(dst []KV, msg []byte, field protowire.Number) []KV {
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
		if !v.IsScalar() {
			continue
		}
		if buf == nil {
			buf = make([]byte, 0, len(it.msg)+len(k)+v.maxTextLen())
		}
		buf = append(buf, k...)
		ends = append(ends, uint32(len(buf)))
		buf = v.appendText(buf)
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

// maxTextLen bounds len(v.appendText(nil)).
func (v Value) maxTextLen() int {
	switch v.Type {
	case ValueString:
		return len(v.raw)
	case ValueBool:
		return len("false")
	case ValueInt:
		return len("-9223372036854775808")
	case ValueDouble:
		return len("-1.2345678901234567e-308")
	case ValueBytes:
		return 2 * len(v.raw)
	}
	return 0
}

// appendText appends v rendered as by String.
func (v Value) appendText(b []byte) []byte {
	switch v.Type {
	case ValueString:
		return append(b, v.raw...)
	case ValueBool:
		return strconv.AppendBool(b, v.num != 0)
	case ValueInt:
		return strconv.AppendInt(b, int64(v.num), 10)
	case ValueDouble:
		return strconv.AppendFloat(b, math.Float64frombits(v.num), 'g', -1, 64)
	case ValueBytes:
		return hex.AppendEncode(b, v.raw)
	}
	return b
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

// scalar fields of a message read in one pass.
func consumeField(b []byte) (num protowire.Number, typ protowire.Type, raw []byte, x uint64, rest []byte, ok bool) {
	// Fast path: a one-byte tag and a short length, a fixed64 or a
	// one-byte varint.
	if len(b) >= 2 && b[0] < 0x80 && b[0]>>3 != 0 {
		num, typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch typ {
		case protowire.BytesType:
			if n := int(b[1]); n < 0x80 && 2+n <= len(b) {
				return num, typ, b[2 : 2+n : 2+n], 0, b[2+n:], true
			}
		case protowire.Fixed64Type:
			if len(b) >= 9 {
				return num, typ, nil, binary.LittleEndian.Uint64(b[1:]), b[9:], true
			}
		case protowire.VarintType:
			if b[1] < 0x80 {
				return num, typ, nil, uint64(b[1]), b[2:], true
			}
		}
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, nil, false
	}
	b = b[n:]
	var m int
	switch typ {
	case protowire.BytesType:
		raw, m = protowire.ConsumeBytes(b)
	case protowire.VarintType:
		x, m = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		x, m = protowire.ConsumeFixed64(b)
	case protowire.Fixed32Type:
		var y uint32
		y, m = protowire.ConsumeFixed32(b)
		x = uint64(y)
	default:
		m = protowire.ConsumeFieldValue(num, typ, b)
	}
	if m < 0 {
		return 0, 0, nil, 0, nil, false
	}
	return num, typ, raw, x, b[m:], true
}
