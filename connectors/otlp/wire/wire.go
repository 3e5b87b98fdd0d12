package wire

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"
)

// Next reads the field at the start of b: its number, its wire type, its
// value — v for a BytesType field (aliasing b), x for a VarintType,
// Fixed64Type or Fixed32Type one — and rest, the part of b after it. rest
// is nil when b does not start with a well-formed field (empty or not: a
// scan stops there), and not nil otherwise, even when empty. A group is
// read whole, with neither v nor x set. A scan:
//
//	for len(b) > 0 {
//		num, typ, v, x, rest := wire.Next(b)
//		if rest == nil {
//			break
//		}
//		b = rest
//		...
//	}
//
// The results are scalars, not a struct, so that they stay in registers;
// rest rather than a length, so that the scan need not slice b again.
func Next(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, rest []byte) {
	// The common layout: a one-byte tag, then a one-byte length, a one-byte
	// varint or a fixed64.
	if len(b) >= 2 && b[0] < 0x80 && b[0] >= 1<<3 {
		num, typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch typ {
		case protowire.BytesType:
			if l := int(b[1]); l < 0x80 && 2+l <= len(b) {
				return num, typ, b[2 : 2+l], 0, b[2+l:]
			}
		case protowire.VarintType:
			if b[1] < 0x80 {
				return num, typ, nil, uint64(b[1]), b[2:]
			}
		case protowire.Fixed64Type:
			if len(b) >= 9 {
				return num, typ, nil, binary.LittleEndian.Uint64(b[1:]), b[9:]
			}
		}
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, nil
	}
	var m int
	switch typ {
	case protowire.BytesType:
		v, m = protowire.ConsumeBytes(b[n:])
	case protowire.VarintType:
		x, m = protowire.ConsumeVarint(b[n:])
	case protowire.Fixed64Type:
		x, m = protowire.ConsumeFixed64(b[n:])
	case protowire.Fixed32Type:
		var y uint32
		y, m = protowire.ConsumeFixed32(b[n:])
		x = uint64(y)
	default:
		m = protowire.ConsumeFieldValue(num, typ, b[n:])
	}
	if m < 0 {
		return 0, 0, nil, 0, nil
	}
	return num, typ, v, x, b[n+m:]
}

// InsertLen turns b[start:] into a length-prefixed value, shifting it right
// by the size of the length, for an encoder that does not know a
// message's size before writing it.
func InsertLen(b []byte, start int) []byte {
	n := len(b) - start
	sz := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, sz)...)
	copy(b[start+sz:], b[start:start+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	return b
}
