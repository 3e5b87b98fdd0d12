package simulator

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The Collector does not use google.golang.org/protobuf to write OTLP: pdata
// has its own marshalers, and their output differs from proto.Marshal in
// ways a consumer may trip over. The two writers below reproduce pdata's
// output byte for byte (checked against real Collector records in
// testdata/collector), so that what the simulator produces is what a real
// Collector writes, not merely something equivalent.

// idField reports whether fd is one of the OTLP trace/span id fields. pdata
// writes these as hex in OTLP/JSON, and in Span and LogRecord always writes
// them in protobuf, even when empty.
func idField(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.BytesKind || fd.IsList() {
		return false
	}
	switch fd.Name() {
	case "trace_id", "span_id", "parent_span_id":
		return true
	}
	return false
}

// alwaysWritten reports whether pdata writes the id field fd even when it is
// empty: the root span's `parent_span_id` and a trace-less log's ids appear
// as zero-length fields in real records.
func alwaysWritten(fd protoreflect.FieldDescriptor) bool {
	if !idField(fd) {
		return false
	}
	switch fd.ContainingMessage().Name() {
	case "Span", "LogRecord":
		return true
	}
	return false
}

// marshalProto writes m the way pdata's ProtoMarshaler does: fields in
// reverse declaration order (a Span starts with status and ends with
// trace_id); proto3 zero scalars left out, except members of a oneof, which
// are written whenever set (an int gauge point of 0 keeps its as_int); every
// set message field written, even when empty (pdata's resource, scope and
// status are never absent); id fields as described at alwaysWritten; repeated
// scalars packed.
func marshalProto(m proto.Message) []byte {
	return appendMessage(nil, m.ProtoReflect())
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	fields := m.Descriptor().Fields()
	for i := fields.Len() - 1; i >= 0; i-- {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			// OTLP has no map fields.
			panic("simulator: map field " + string(fd.FullName()))
		case fd.IsList():
			list := m.Get(fd).List()
			if list.Len() == 0 {
				continue
			}
			switch fd.Kind() {
			case protoreflect.MessageKind, protoreflect.GroupKind:
				for j := 0; j < list.Len(); j++ {
					b = appendSubmessage(b, fd.Number(), list.Get(j).Message())
				}
			case protoreflect.StringKind, protoreflect.BytesKind:
				for j := 0; j < list.Len(); j++ {
					b = appendScalar(b, fd, list.Get(j))
				}
			default:
				// Packed: the values behind a length prefix.
				b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
				start := len(b)
				for j := 0; j < list.Len(); j++ {
					b = appendValue(b, fd.Kind(), list.Get(j))
				}
				b = prefixLength(b, start)
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if !m.Has(fd) {
				continue
			}
			b = appendSubmessage(b, fd.Number(), m.Get(fd).Message())
		default:
			if !m.Has(fd) && !alwaysWritten(fd) {
				continue
			}
			b = appendScalar(b, fd, m.Get(fd))
		}
	}
	return b
}

func appendSubmessage(b []byte, num protowire.Number, m protoreflect.Message) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	start := len(b)
	b = appendMessage(b, m)
	return prefixLength(b, start)
}

// prefixLength moves b[start:] right to make room for its length as a
// varint, and writes the length there.
func prefixLength(b []byte, start int) []byte {
	n := len(b) - start
	size := protowire.SizeVarint(uint64(n))
	var room [binary.MaxVarintLen64]byte
	b = append(b, room[:size]...)
	copy(b[start+size:], b[start:start+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	return b
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	default:
		return protowire.VarintType
	}
}

func appendScalar(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	b = protowire.AppendTag(b, fd.Number(), wireType(fd.Kind()))
	return appendValue(b, fd.Kind(), v)
}

func appendValue(b []byte, k protoreflect.Kind, v protoreflect.Value) []byte {
	switch k {
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, protowire.EncodeBool(v.Bool()))
	case protoreflect.EnumKind:
		return protowire.AppendVarint(b, uint64(v.Enum()))
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		return protowire.AppendVarint(b, uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return protowire.AppendVarint(b, v.Uint())
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(v.Int()))
	case protoreflect.Fixed32Kind:
		return protowire.AppendFixed32(b, uint32(v.Uint()))
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(b, uint32(v.Int()))
	case protoreflect.FloatKind:
		return protowire.AppendFixed32(b, math.Float32bits(float32(v.Float())))
	case protoreflect.Fixed64Kind:
		return protowire.AppendFixed64(b, v.Uint())
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(b, uint64(v.Int()))
	case protoreflect.DoubleKind:
		return protowire.AppendFixed64(b, math.Float64bits(v.Float()))
	case protoreflect.StringKind:
		return protowire.AppendString(b, v.String())
	case protoreflect.BytesKind:
		return protowire.AppendBytes(b, v.Bytes())
	}
	panic("simulator: unsupported kind " + k.String())
}

// marshalJSON writes m the way pdata's JSONMarshaler (the Kafka exporter's
// otlp_json encoding) does: one line, no spaces, keys in declaration order
// with their lowerCamelCase JSON names, unset fields left out but set empty
// messages written as {}, trace/span ids as lower-case hex, other bytes as
// base64, 64-bit integers as decimal strings, enums as numbers.
//
// protojson is not used: it writes enums as names, ids as base64, and adds
// random spaces to its output on purpose, which would break the simulator's
// byte-for-byte determinism.
func marshalJSON(m proto.Message) []byte {
	return appendJSONMessage(nil, m.ProtoReflect())
}

func appendJSONMessage(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	first := true
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() {
			if m.Get(fd).List().Len() == 0 {
				continue
			}
		} else if !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, fd.JSONName())
		b = append(b, ':')
		if fd.IsList() {
			list := m.Get(fd).List()
			b = append(b, '[')
			for j := 0; j < list.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONValue(b, fd, list.Get(j))
			}
			b = append(b, ']')
			continue
		}
		b = appendJSONValue(b, fd, m.Get(fd))
	}
	return append(b, '}')
}

func appendJSONValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendJSONMessage(b, v.Message())
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.EnumKind:
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		b = strconv.AppendInt(b, v.Int(), 10)
		return append(b, '"')
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		b = strconv.AppendUint(b, v.Uint(), 10)
		return append(b, '"')
	case protoreflect.FloatKind:
		return appendJSONFloat(b, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendJSONFloat(b, v.Float(), 64)
	case protoreflect.StringKind:
		return appendJSONString(b, v.String())
	case protoreflect.BytesKind:
		b = append(b, '"')
		if idField(fd) {
			b = hex.AppendEncode(b, v.Bytes())
		} else {
			b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		}
		return append(b, '"')
	}
	panic("simulator: unsupported kind " + fd.Kind().String())
}

// appendJSONFloat formats like encoding/json: shortest repr, plain notation
// between 1e-6 and 1e21, exponent notation outside; NaN and infinities as
// the strings OTLP/JSON uses.
func appendJSONFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s: escapes quote, backslash and control
// characters; leaves <, > and & alone, as the Collector does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
