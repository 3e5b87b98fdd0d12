package otlp

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// OTLP's string fields are proto3 strings: proto.Unmarshal rejects a
// message in which one holds invalid UTF-8, and so would every consumer of
// a braid record that embeds the member. The scanner checks every string
// field of the bytes an Item hands out (Payload, Resource, Scope and a
// metric's name, description and unit), down to nested AnyValues; a member
// with an invalid one is re-encoded with each invalid byte sequence
// replaced by U+FFFD (strings.ToValidUTF8) into a fresh buffer. Valid input
// — the common case — is not copied.
//
// MaxNesting bounds how many levels of messages (KeyValue, AnyValue,
// ArrayValue, KeyValueList...) may nest below a member, resource or scope;
// a message with a deeper one cannot be decoded (its DecodeError names the
// depth), so that no input can make the scanner or a consumer's
// proto.Unmarshal recurse without bound.
const MaxNesting = 128

// strSchema lists, for one message type, the string fields and the
// message fields that may hold strings, by field number.
type strSchema struct {
	strs uint32 // bit n: field n is a string
	subs []*strSchema
}

func (s *strSchema) isStr(num protowire.Number) bool {
	return num > 0 && num < 32 && s.strs&(1<<num) != 0
}

func (s *strSchema) sub(num protowire.Number) *strSchema {
	if num > 0 && int(num) < len(s.subs) {
		return s.subs[num]
	}
	return nil
}

func bits(nums ...int) uint32 {
	var b uint32
	for _, n := range nums {
		b |= 1 << n
	}
	return b
}

var (
	sAnyValue, sArrayValue, sKVList, sKeyValue strSchema

	sEntityRef = strSchema{strs: bits(1, 2, 3, 4)}
	sResource  = strSchema{subs: []*strSchema{1: &sKeyValue, 3: &sEntityRef}}
	sScope     = strSchema{strs: bits(1, 2), subs: []*strSchema{3: &sKeyValue}}
	sStatus    = strSchema{strs: bits(2)}
	sEvent     = strSchema{strs: bits(2), subs: []*strSchema{3: &sKeyValue}}
	sLink      = strSchema{strs: bits(3), subs: []*strSchema{4: &sKeyValue}}
	sSpan      = strSchema{strs: bits(3, 5), subs: []*strSchema{9: &sKeyValue, 11: &sEvent, 13: &sLink, 15: &sStatus}}
	sLog       = strSchema{strs: bits(3, 12), subs: []*strSchema{5: &sAnyValue, 6: &sKeyValue}}
	sExemplar  = strSchema{subs: []*strSchema{7: &sKeyValue}}
	sNumberDP  = strSchema{subs: []*strSchema{5: &sExemplar, 7: &sKeyValue}}
	sHistDP    = strSchema{subs: []*strSchema{8: &sExemplar, 9: &sKeyValue}}
	sExpHistDP = strSchema{subs: []*strSchema{1: &sKeyValue, 11: &sExemplar}}
	sSummaryDP = strSchema{subs: []*strSchema{7: &sKeyValue}}
)

func init() {
	sKeyValue = strSchema{strs: bits(1), subs: []*strSchema{2: &sAnyValue}}
	sAnyValue = strSchema{strs: bits(1), subs: []*strSchema{5: &sArrayValue, 6: &sKVList}}
	sArrayValue = strSchema{subs: []*strSchema{1: &sAnyValue}}
	sKVList = strSchema{subs: []*strSchema{1: &sKeyValue}}
}

// checkStr marks the current member for repair if v is not valid UTF-8.
func (d *Decoder) checkStr(v []byte) {
	if !ascii(v) && !d.bad && !utf8.Valid(v) {
		d.bad = true
	}
}

// ascii reports whether v is all ASCII, eight bytes at a time and without
// a branch per byte: most strings are, and this is cheaper than
// utf8.Valid for short ones.
func ascii(v []byte) bool {
	var acc uint64
	for len(v) >= 8 {
		acc |= binary.LittleEndian.Uint64(v)
		v = v[8:]
	}
	for _, c := range v {
		acc |= uint64(c)
	}
	return acc&0x8080808080808080 == 0
}

// checkField checks field num of a message of schema s, of wire type typ
// and value v: a string field's UTF-8, a message field's strings.
func (d *Decoder) checkField(s *strSchema, num protowire.Number, typ protowire.Type, v []byte) *DecodeError {
	if typ != protowire.BytesType {
		return nil
	}
	if s.isStr(num) {
		d.checkStr(v)
		return nil
	}
	if sub := s.sub(num); sub != nil {
		if sub == &sKeyValue {
			return d.checkKeyValue(v, 1)
		}
		return d.checkMsg(sub, v, 1)
	}
	return nil
}

// checkKeyValue is checkMsg for a KeyValue, with the common encodings
// (one-byte tags and lengths) read inline; anything else goes to checkMsg.
func (d *Decoder) checkKeyValue(b []byte, depth int) *DecodeError {
	if depth > MaxNesting {
		return d.checkMsg(&sKeyValue, b, depth)
	}
	for len(b) > 0 {
		if len(b) < 2 || b[1] >= 0x80 || int(b[1]) > len(b)-2 {
			return d.checkMsg(&sKeyValue, b, depth)
		}
		v := b[2 : 2+int(b[1])]
		switch b[0] {
		case 0x0a: // key
			d.checkStr(v)
		case 0x12: // value
			if err := d.checkAnyValue(v, depth+1); err != nil {
				return err
			}
		default:
			return d.checkMsg(&sKeyValue, b, depth)
		}
		b = b[2+len(v):]
	}
	return nil
}

// checkAnyValue is checkMsg for an AnyValue, with a string, bool, int or
// double read inline.
func (d *Decoder) checkAnyValue(b []byte, depth int) *DecodeError {
	if depth > MaxNesting || len(b) < 2 {
		return d.checkMsg(&sAnyValue, b, depth)
	}
	switch b[0] {
	case 0x0a: // string_value
		if b[1] < 0x80 && int(b[1]) == len(b)-2 {
			d.checkStr(b[2:])
			return nil
		}
	case 0x10, 0x18: // bool_value, int_value
		if _, n := protowire.ConsumeVarint(b[1:]); n == len(b)-1 {
			return nil
		}
	case 0x21: // double_value
		if len(b) == 9 {
			return nil
		}
	}
	return d.checkMsg(&sAnyValue, b, depth)
}

// checkMsg checks the strings of message b of schema s, nested depth
// levels below the member; it marks the member for repair (d.bad) and
// returns an error for malformed bytes or nesting beyond MaxNesting.
func (d *Decoder) checkMsg(s *strSchema, b []byte, depth int) *DecodeError {
	if depth > MaxNesting {
		return d.errAt(b, "attribute value nested deeper than "+strconv.Itoa(MaxNesting)+" levels")
	}
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil || num > protowire.MaxValidNumber {
			return d.attrErr(b)
		}
		if typ == protowire.BytesType {
			if s.isStr(num) {
				d.checkStr(v)
			} else if sub := s.sub(num); sub == &sKeyValue {
				if err := d.checkKeyValue(v, depth+1); err != nil {
					return err
				}
			} else if sub != nil {
				if err := d.checkMsg(sub, v, depth+1); err != nil {
					return err
				}
			}
		}
		b = rest
	}
	return nil
}

// attrErr says what is wrong with the field at the start of b, which
// checkMsg rejected.
//
//go:noinline
func (d *Decoder) attrErr(b []byte) *DecodeError {
	num, typ, n := protowire.ConsumeTag(b)
	switch {
	case n < 0 || num > protowire.MaxValidNumber:
		return d.errAt(b, "malformed attribute: invalid field tag")
	case typ == protowire.BytesType:
		return d.errAt(b, "malformed attribute: field "+strconv.Itoa(int(num))+": truncated value")
	}
	return d.errAt(b, "malformed attribute: field "+strconv.Itoa(int(num))+": "+protowire.ParseError(protowire.ConsumeFieldValue(num, typ, b[n:])).Error())
}

// repaired returns message b of schema s re-encoded with every invalid
// UTF-8 sequence in its strings replaced by U+FFFD, in a new buffer. b has
// been checked (well-formed, nesting bounded).
func repaired(s *strSchema, b []byte) []byte {
	return clip(appendRepaired(make([]byte, 0, len(b)+16), s, b))
}

func appendRepaired(dst []byte, s *strSchema, b []byte) []byte {
	for len(b) > 0 {
		num, typ, v, _, rest := wire.Next(b)
		if rest == nil {
			return append(dst, b...)
		}
		field := b[:len(b)-len(rest)]
		sub := s.sub(num)
		switch {
		case typ != protowire.BytesType:
			dst = append(dst, field...)
		case s.isStr(num) && !utf8.Valid(v):
			dst = protowire.AppendTag(dst, num, protowire.BytesType)
			dst = protowire.AppendBytes(dst, toValidUTF8(v))
		case sub != nil:
			dst = protowire.AppendTag(dst, num, protowire.BytesType)
			start := len(dst)
			dst = appendRepaired(dst, sub, v)
			dst = wire.InsertLen(dst, start)
		default:
			dst = append(dst, field...)
		}
		b = rest
	}
	return dst
}

// toValidUTF8 returns v with each run of invalid bytes replaced by U+FFFD.
func toValidUTF8(v []byte) []byte {
	out := make([]byte, 0, len(v)+8)
	for len(v) > 0 {
		r, size := utf8.DecodeRune(v)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
			for len(v) > 0 {
				if r, size = utf8.DecodeRune(v); r != utf8.RuneError || size != 1 {
					break
				}
				v = v[1:]
			}
			continue
		}
		out = append(out, v[:size]...)
		v = v[size:]
	}
	return out
}

// RepairUTF8 returns s if it is valid UTF-8, else s with each run of
// invalid bytes replaced by U+FFFD.
func RepairUTF8(s []byte) []byte {
	if utf8.Valid(s) {
		return s
	}
	return clip(toValidUTF8(s))
}
