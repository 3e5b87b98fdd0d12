package wire

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// KeyValue splits a serialized KeyValue (opentelemetry.proto.common.v1)
// into its key (field 1) and its serialized AnyValue (field 2). A field
// that occurs more than once takes its last value, as proto's merging
// does. ok is false when b is malformed; key and val are then what was
// read before the malformed field.
func KeyValue(b []byte) (key, val []byte, ok bool) {
	// The common layout: the key, then the value, both short, and nothing
	// else.
	if len(b) >= 2 && b[0] == 0x0a && b[1] < 0x80 {
		n := int(b[1])
		if 2+n+2 <= len(b) && b[2+n] == 0x12 && b[3+n] < 0x80 && 4+n+int(b[3+n]) == len(b) {
			return b[2 : 2+n : 2+n], b[4+n:], true
		}
	}
	return scanKeyValue(b)
}

// scanKeyValue is KeyValue for any layout.
func scanKeyValue(b []byte) (key, val []byte, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, rest := Next(b)
		if rest == nil {
			return key, val, false
		}
		b = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case 1:
			key = v
		case 2:
			val = v
		}
	}
	return key, val, true
}

// Kind is which member of an AnyValue's oneof is set: its field number in
// opentelemetry.proto.common.v1.AnyValue.
type Kind uint8

// The members of AnyValue.
const (
	KindNone   Kind = iota // nothing set
	KindString             // string_value
	KindBool               // bool_value
	KindInt                // int_value
	KindDouble             // double_value
	KindArray              // array_value
	KindKVList             // kvlist_value
	KindBytes              // bytes_value
)

// Kinds is a set of kinds: bit 1<<k for kind k.
type Kinds uint8

// Has reports whether k is in s.
func (s Kinds) Has(k Kind) bool { return s&(1<<k) != 0 }

// AllKinds holds every member of AnyValue.
const AllKinds Kinds = 1<<KindString | 1<<KindBool | 1<<KindInt | 1<<KindDouble | 1<<KindArray | 1<<KindKVList | 1<<KindBytes

// memberType is the wire type of each member of AnyValue, by field number.
var memberType = [...]protowire.Type{
	KindString: protowire.BytesType,
	KindBool:   protowire.VarintType,
	KindInt:    protowire.VarintType,
	KindDouble: protowire.Fixed64Type,
	KindArray:  protowire.BytesType,
	KindKVList: protowire.BytesType,
	KindBytes:  protowire.BytesType,
}

// Value is an AnyValue read from wire bytes. It aliases them.
type Value struct {
	Type Kind
	// Bytes is the value of a string, array, kvlist or bytes member: the
	// text, the serialized ArrayValue or KeyValueList, the bytes.
	Bytes []byte
	// Num is the value of a bool, int or double member: 0 or 1, the int64
	// as a uint64, the float64's bits.
	Num uint64
}

// AnyValue reads a serialized AnyValue: the member set last, as proto's
// merging of a oneof takes it. Malformed bytes end the read; what was set
// before them stays.
func AnyValue(b []byte) Value {
	// The common layout: one member, short.
	if len(b) >= 2 {
		switch b[0] {
		case 0x0a: // string_value
			if n := int(b[1]); n < 0x80 && 2+n == len(b) {
				return Value{Type: KindString, Bytes: b[2:len(b):len(b)]}
			}
		case 0x10, 0x18: // bool_value, int_value
			if x, m := protowire.ConsumeVarint(b[1:]); m == len(b)-1 {
				return Value{Type: Kind(b[0] >> 3), Num: x}
			}
		case 0x21: // double_value
			if len(b) == 9 {
				return Value{Type: KindDouble, Num: binary.LittleEndian.Uint64(b[1:])}
			}
		}
	}
	return scanAnyValue(b, AllKinds, false)
}

// FirstAnyValue reads the first member of a serialized AnyValue whose kind
// is in kinds, skipping the others. Malformed bytes before it give the
// empty Value.
func FirstAnyValue(b []byte, kinds Kinds) Value { return scanAnyValue(b, kinds, true) }

// scanAnyValue reads the last member of b whose kind is in kinds, or the
// first if first is set.
func scanAnyValue(b []byte, kinds Kinds, first bool) (v Value) {
	for len(b) > 0 {
		num, typ, raw, x, rest := Next(b)
		if rest == nil {
			break
		}
		b = rest
		k := Kind(num)
		if num < 1 || num > 7 || typ != memberType[k] || !kinds.Has(k) {
			continue
		}
		v = Value{Type: k, Bytes: raw, Num: x}
		if first {
			break
		}
	}
	return v
}

// Raw returns the bytes of a string or bytes value, nil otherwise.
func (v Value) Raw() []byte {
	if v.Type == KindString || v.Type == KindBytes {
		return v.Bytes
	}
	return nil
}

// Int returns v as an integer: an int; a double with an integral value in
// int64's range; a string holding a decimal integer (Atoi). ok is false
// otherwise.
func (v Value) Int() (int64, bool) {
	switch v.Type {
	case KindInt:
		return int64(v.Num), true
	case KindDouble:
		f := math.Float64frombits(v.Num)
		if f == math.Trunc(f) && f >= math.MinInt64 && f <= math.MaxInt64 {
			return int64(f), true
		}
	case KindString:
		return Atoi(v.Bytes)
	}
	return 0, false
}

// Float returns v as a float64: a double, an int, or a string holding a
// number (strconv.ParseFloat). ok is false otherwise, and for NaN.
func (v Value) Float() (float64, bool) {
	switch v.Type {
	case KindDouble:
		f := math.Float64frombits(v.Num)
		return f, !math.IsNaN(f)
	case KindInt:
		return float64(int64(v.Num)), true
	case KindString:
		f, err := strconv.ParseFloat(string(v.Bytes), 64)
		return f, err == nil && !math.IsNaN(f)
	}
	return 0, false
}

// Bool returns v as a bool: a bool, an int (non-zero is true), or a string
// that strconv.ParseBool takes ("true", "false", "1", "0", "T"...). ok is
// false otherwise.
func (v Value) Bool() (bool, bool) {
	switch v.Type {
	case KindBool, KindInt:
		return v.Num != 0, true
	case KindString:
		b, err := strconv.ParseBool(string(v.Bytes))
		return b, err == nil
	}
	return false, false
}

// IsScalar reports whether v is a string, bool, int, double or bytes value.
func (v Value) IsScalar() bool {
	switch v.Type {
	case KindString, KindBool, KindInt, KindDouble, KindBytes:
		return true
	}
	return false
}

// String renders v as text: strings as they are, ints in decimal, doubles
// in the shortest form that round-trips ('g'), bools as "true"/"false",
// bytes in lower-case hex; arrays, kvlists and empty values as "".
func (v Value) String() string {
	switch v.Type {
	case KindString:
		return string(v.Bytes)
	case KindBool:
		if v.Num != 0 {
			return "true"
		}
		return "false"
	case KindInt:
		return strconv.FormatInt(int64(v.Num), 10)
	case KindDouble:
		return strconv.FormatFloat(math.Float64frombits(v.Num), 'g', -1, 64)
	case KindBytes:
		return hex.EncodeToString(v.Bytes)
	}
	return ""
}

// AppendText appends v rendered as by String to b.
func (v Value) AppendText(b []byte) []byte {
	switch v.Type {
	case KindString:
		return append(b, v.Bytes...)
	case KindBool:
		return strconv.AppendBool(b, v.Num != 0)
	case KindInt:
		return strconv.AppendInt(b, int64(v.Num), 10)
	case KindDouble:
		return strconv.AppendFloat(b, math.Float64frombits(v.Num), 'g', -1, 64)
	case KindBytes:
		return hex.AppendEncode(b, v.Bytes)
	}
	return b
}

// Equal reports whether v rendered as text equals s, without allocating for
// strings, bools and ints.
func (v Value) Equal(s string) bool {
	switch v.Type {
	case KindString:
		return string(v.Bytes) == s
	case KindBool:
		return (v.Num != 0 && s == "true") || (v.Num == 0 && s == "false")
	case KindInt:
		i, ok := Atoi([]byte(s))
		return ok && i == int64(v.Num) && canonicalInt(s)
	}
	return v.String() == s
}

// canonicalInt reports whether the decimal integer s is written as
// strconv.FormatInt writes it: no sign but '-', no leading zeros, no "-0".
func canonicalInt(s string) bool {
	d := strings.TrimPrefix(s, "-")
	return s[0] != '+' && (d == "0" && s == "0" || d[0] != '0')
}

// Atoi parses b as a decimal int64: an optional sign ('+' or '-') and one
// or more digits, leading zeros allowed, 20 bytes at the most. ok is false
// for anything else and for a number outside int64's range.
func Atoi(b []byte) (n int64, ok bool) {
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
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		// Below the cut-off u*10 cannot wrap.
		if u > (math.MaxInt64+1)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
		if u > math.MaxInt64+1 {
			return 0, false
		}
	}
	if neg {
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}
