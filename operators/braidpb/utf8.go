package braidpb

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RepairUTF8 replaces, in every string field of m at any depth (lists and
// map values included), each run of invalid UTF-8 bytes with U+FFFD, so that
// m marshals: proto3 strings must be valid UTF-8. It reports whether it
// changed anything.
func RepairUTF8(m proto.Message) bool {
	if m == nil {
		return false
	}
	return repairMessage(m.ProtoReflect())
}

func repairMessage(m protoreflect.Message) bool {
	changed := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if nv, ok := repairValue(fd, l.Get(i)); ok {
					l.Set(i, nv)
					changed = true
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if nv, ok := repairValue(fd.MapValue(), mv); ok {
					mp.Set(k, nv)
					changed = true
				}
				return true
			})
		default:
			if nv, ok := repairValue(fd, v); ok {
				m.Set(fd, nv)
				changed = true
			}
		}
		return true
	})
	return changed
}

// repairValue returns the repaired value of a string, or reports a
// repaired message in place (ok with the same value).
func repairValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s := v.String(); !utf8.ValidString(s) {
			return protoreflect.ValueOfString(strings.ToValidUTF8(s, "\uFFFD")), true
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if repairMessage(v.Message()) {
			return v, true
		}
	}
	return v, false
}
