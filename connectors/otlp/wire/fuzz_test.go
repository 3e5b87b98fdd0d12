package wire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzReaders checks the readers on arbitrary bytes against protowire and
// against themselves: Next reads what protowire.ConsumeField reads and
// fails where it fails, and a scan stops where a ConsumeField loop does;
// the fast paths of KeyValue and AnyValue agree with their general ones;
// Atoi agrees with strconv.ParseInt. Nothing may panic.
func FuzzReaders(f *testing.F) {
	f.Add(msg(1, bt, "k", 2, bt, msg(1, bt, "v")))
	f.Add(msg(1, bt, "k", 2, bt, msg(3, vt, uint64(1)<<40)))
	f.Add(msg(2, bt, msg(4, f64, uint64(7)), 1, bt, "k"))
	f.Add(msg(9, bt, msg(1, bt, "k", 2, bt, msg(5, bt, msg(1, bt, msg(2, vt, uint64(1)))))))
	f.Add(msg(4, sg, msg(1, vt, uint64(1)), 4, eg, nil, 8, f32, uint64(9)))
	f.Add([]byte{0x0a, 0x80})
	f.Add([]byte("-9223372036854775808"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fnum, ftyp, fv, fx, rest := Next(b)
		_, _, n := protowire.ConsumeField(b)
		if (rest == nil) != (n < 0) || n >= 0 && len(rest) != len(b)-n {
			t.Fatalf("Next leaves %d bytes (nil: %v), protowire.ConsumeField reads %d", len(rest), rest == nil, n)
		}
		if n >= 0 {
			num, typ, tn := protowire.ConsumeTag(b)
			if fnum != num || ftyp != typ {
				t.Fatalf("Next = %d/%d, protowire.ConsumeTag %d/%d", fnum, ftyp, num, typ)
			}
			var wv []byte
			var wx uint64
			switch v := b[tn:]; typ {
			case protowire.BytesType:
				wv, _ = protowire.ConsumeBytes(v)
			case protowire.VarintType:
				wx, _ = protowire.ConsumeVarint(v)
			case protowire.Fixed64Type:
				wx, _ = protowire.ConsumeFixed64(v)
			case protowire.Fixed32Type:
				x, _ := protowire.ConsumeFixed32(v)
				wx = uint64(x)
			}
			if !bytes.Equal(fv, wv) || (fv == nil) != (wv == nil) || fx != wx {
				t.Fatalf("Next value %x %d, want %x %d", fv, fx, wv, wx)
			}
		}

		want := b
		for len(want) > 0 {
			_, _, m := protowire.ConsumeField(want)
			if m < 0 {
				break
			}
			want = want[m:]
		}
		got := b
		for len(got) > 0 {
			_, _, _, _, rest := Next(got)
			if rest == nil {
				break
			}
			got = rest
		}
		if len(got) != len(want) {
			t.Fatalf("a scan stopped with %d bytes left, a ConsumeField loop with %d", len(got), len(want))
		}

		k1, v1, ok1 := KeyValue(b)
		k2, v2, ok2 := scanKeyValue(b)
		if !bytes.Equal(k1, k2) || !bytes.Equal(v1, v2) || ok1 != ok2 {
			t.Fatalf("KeyValue = %x %x %v; the general path %x %x %v", k1, v1, ok1, k2, v2, ok2)
		}
		if a, s := AnyValue(b), scanAnyValue(b, AllKinds, false); !sameValue(a, s) {
			t.Fatalf("AnyValue = %+v; the general path %+v", a, s)
		}

		checkAtoi(t, b[:min(len(b), 24)])
	})
}
