package wirecheck

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Allows reports whether field fd may be written with wire type typ: the
// wire type of its kind, or bytes for a packed repeated scalar.
func Allows(fd protoreflect.FieldDescriptor, typ protowire.Type) bool {
	want := Type(fd.Kind())
	return typ == want || fd.IsList() && want != protowire.BytesType && typ == protowire.BytesType
}

// Type returns the wire type of a field of kind k.
func Type(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType // string, bytes, message
}

// Check walks the serialized message b of type md and the messages in it,
// and returns an error that names the first field that is malformed, that
// its message does not declare, or whose wire type is not its declared
// field's. It does not descend into messages of the types in opaque: those
// whose bytes are copied from input rather than written.
func Check(b []byte, md protoreflect.MessageDescriptor, opaque ...protoreflect.FullName) error {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeField(b[off:])
		if n < 0 {
			return fmt.Errorf("%s at byte %d: %v", md.FullName(), off, protowire.ParseError(n))
		}
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
			return fmt.Errorf("%s at byte %d: no field %d (wire type %d)", md.FullName(), off, num, typ)
		case !Allows(fd, typ):
			return fmt.Errorf("%s.%s (%d) at byte %d: wire type %d, want %d", md.FullName(), fd.Name(), num, off, typ, Type(fd.Kind()))
		case fd.Kind() == protoreflect.MessageKind && !slices.Contains(opaque, fd.Message().FullName()):
			_, _, tn := protowire.ConsumeTag(b[off:])
			v, _ := protowire.ConsumeBytes(b[off+tn:])
			if err := Check(v, fd.Message(), opaque...); err != nil {
				return fmt.Errorf("%s.%s: %w", md.FullName(), fd.Name(), err)
			}
		}
		off += n
	}
	return nil
}
