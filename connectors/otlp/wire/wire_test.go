package wire

import (
	"bytes"
	"math"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// msg appends fields: a protowire.Number and protowire.Type followed by a
// []byte, string, uint64 or int (raw bytes for the other types).
func msg(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 3 {
		num, typ := fields[i].(int), fields[i+1].(protowire.Type)
		b = protowire.AppendTag(b, protowire.Number(num), typ)
		switch v := fields[i+2].(type) {
		case string:
			b = protowire.AppendString(b, v)
		case []byte:
			if typ == protowire.BytesType {
				b = protowire.AppendBytes(b, v)
			} else {
				b = append(b, v...)
			}
		case uint64:
			switch typ {
			case protowire.Fixed64Type:
				b = protowire.AppendFixed64(b, v)
			case protowire.Fixed32Type:
				b = protowire.AppendFixed32(b, uint32(v))
			default:
				b = protowire.AppendVarint(b, v)
			}
		}
	}
	return b
}

const (
	vt  = protowire.VarintType
	bt  = protowire.BytesType
	f64 = protowire.Fixed64Type
	f32 = protowire.Fixed32Type
	sg  = protowire.StartGroupType
	eg  = protowire.EndGroupType
)

// field is what Next returns.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   []byte
	x   uint64
}

func TestNext(t *testing.T) {
	long := bytes.Repeat([]byte{'x'}, 300)
	for _, c := range []struct {
		name string
		b    []byte
		want field
	}{
		{"bytes", msg(1, bt, "abc"), field{1, bt, []byte("abc"), 0}},
		{"empty bytes", msg(15, bt, ""), field{15, bt, []byte{}, 0}},
		{"long bytes", msg(2, bt, long), field{2, bt, long, 0}},
		{"two-byte tag", msg(16, bt, "abc"), field{16, bt, []byte("abc"), 0}},
		{"largest number", msg(math.MaxInt32, vt, uint64(1)), field{math.MaxInt32, vt, nil, 1}},
		{"varint", msg(3, vt, uint64(7)), field{3, vt, nil, 7}},
		{"long varint", msg(3, vt, uint64(math.MaxUint64)), field{3, vt, nil, math.MaxUint64}},
		{"overlong varint", []byte{3 << 3, 0x87, 0x80, 0x00}, field{3, vt, nil, 7}},
		{"fixed64", msg(7, f64, uint64(1)<<60|5), field{7, f64, nil, 1<<60 | 5}},
		{"fixed32", msg(8, f32, uint64(0xdeadbeef)), field{8, f32, nil, 0xdeadbeef}},
		{"group", msg(4, sg, msg(1, vt, uint64(1), 5, sg, msg(1, bt, "x"), 5, eg, nil), 4, eg, nil), field{4, sg, nil, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append(c.b, 0xff) // what follows is not read
			num, typ, v, x, rest := Next(b)
			if len(rest) != 1 || &rest[0] != &b[len(c.b)] {
				t.Fatalf("rest = %x, want what follows the field", rest)
			}
			if num != c.want.num || typ != c.want.typ || !bytes.Equal(v, c.want.v) || (v == nil) != (c.want.v == nil) || x != c.want.x {
				t.Fatalf("Next = %d %d %x %d, want %+v", num, typ, v, x, c.want)
			}
		})
	}
}

// TestNextMalformed: a malformed field gives a nil rest, never a panic,
// and ends a scan there.
func TestNextMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"truncated tag", []byte{0x80}},
		{"truncated long tag", []byte{0xff, 0xff, 0xff}},
		{"overlong tag", bytes.Repeat([]byte{0xff}, 11)},
		{"field number 0", []byte{0x02, 0x00}},
		{"field number 0 varint", []byte{0x00, 0x01}},
		{"field number past int32", protowire.AppendVarint(nil, uint64(math.MaxInt32+1)<<3)},
		{"tag only", []byte{0x0a}},
		{"truncated varint", []byte{0x08, 0x80}},
		{"overlong varint", append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 10)...)},
		{"varint past 64 bits", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
		{"length past the end", []byte{0x0a, 0x05, 'a', 'b'}},
		{"long length past the end", append([]byte{0x0a, 0x80, 0x01}, bytes.Repeat([]byte{'a'}, 127)...)},
		{"huge length", []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"truncated length", []byte{0x0a, 0x80}},
		{"truncated fixed64", []byte{0x09, 1, 2, 3, 4, 5, 6, 7}},
		{"truncated fixed32", []byte{0x0d, 1, 2, 3}},
		{"group without end", []byte{0x0b, 0x08, 0x01}},
		{"end group alone", []byte{0x0c}},
		{"mismatched end group", []byte{0x0b, 0x14}},
		{"malformed in group", []byte{0x0b, 0x0a, 0x05, 0x0c}},
		{"reserved wire type 6", []byte{0x0e, 0x00}},
		{"reserved wire type 7", []byte{0x0f, 0x00}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, n := protowire.ConsumeField(c.b); n >= 0 {
				t.Fatalf("protowire.ConsumeField reads it: %d", n)
			}
			if num, typ, v, x, rest := Next(c.b); rest != nil || num != 0 || typ != 0 || v != nil || x != 0 {
				t.Fatalf("Next = %d %d %x %d, rest %x", num, typ, v, x, rest)
			}
			// A scan stops there.
			b := append(msg(1, bt, "k", 2, vt, uint64(300)), c.b...)
			var nums []protowire.Number
			for len(b) > 0 {
				num, _, _, _, rest := Next(b)
				if rest == nil {
					break
				}
				b = rest
				nums = append(nums, num)
			}
			if len(nums) != 2 || !bytes.Equal(b, c.b) {
				t.Errorf("read %v, stopped at %x", nums, b)
			}
		})
	}
	for _, b := range [][]byte{nil, {}} {
		if _, _, _, _, rest := Next(b); rest != nil {
			t.Errorf("Next(%#v): rest %#v", b, rest)
		}
	}
	// The last field leaves an empty rest, not nil.
	if _, _, _, _, rest := Next(msg(1, vt, uint64(1))); rest == nil || len(rest) != 0 {
		t.Errorf("rest %#v after the last field", rest)
	}
}

func TestKeyValue(t *testing.T) {
	str := msg(1, bt, "s")
	for _, c := range []struct {
		name     string
		b        []byte
		key, val string
		ok       bool
	}{
		{"common", msg(1, bt, "k", 2, bt, str), "k", string(str), true},
		{"value first", msg(2, bt, str, 1, bt, "k"), "k", string(str), true},
		{"long key", msg(1, bt, bytes.Repeat([]byte{'k'}, 200), 2, bt, str), string(bytes.Repeat([]byte{'k'}, 200)), string(str), true},
		{"last wins", msg(1, bt, "a", 2, bt, str, 1, bt, "b"), "b", string(str), true},
		{"unknown fields", msg(3, vt, uint64(1), 1, bt, "k", 2, vt, uint64(5), 4, bt, "x"), "k", "", true},
		{"no value", msg(1, bt, "k"), "k", "", true},
		{"empty", nil, "", "", true},
		{"malformed after key", append(msg(1, bt, "k"), 0x12, 0x09, 0x0a), "k", "", false},
		{"trailing garbage", append(msg(1, bt, "k", 2, bt, str), 0x80), "k", string(str), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, v, ok := KeyValue(c.b)
			if string(k) != c.key || string(v) != c.val || ok != c.ok {
				t.Fatalf("KeyValue = %q, %q, %v; want %q, %q, %v", k, v, ok, c.key, c.val, c.ok)
			}
		})
	}
}

func TestAnyValue(t *testing.T) {
	long := bytes.Repeat([]byte{'s'}, 200)
	dbl := math.Float64bits(0.25)
	for _, c := range []struct {
		name  string
		b     []byte
		last  Value
		first Value // FirstAnyValue(b, string|int|double)
	}{
		{"string", msg(1, bt, "s"), Value{Type: KindString, Bytes: []byte("s")}, Value{Type: KindString, Bytes: []byte("s")}},
		{"long string", msg(1, bt, long), Value{Type: KindString, Bytes: long}, Value{Type: KindString, Bytes: long}},
		{"bool", msg(2, vt, uint64(1)), Value{Type: KindBool, Num: 1}, Value{}},
		{"int", msg(3, vt, uint64(math.MaxUint64)), Value{Type: KindInt, Num: math.MaxUint64}, Value{Type: KindInt, Num: math.MaxUint64}},
		{"double", msg(4, f64, dbl), Value{Type: KindDouble, Num: dbl}, Value{Type: KindDouble, Num: dbl}},
		{"array", msg(5, bt, msg(1, bt, msg(1, bt, "x"))), Value{Type: KindArray, Bytes: msg(1, bt, msg(1, bt, "x"))}, Value{}},
		{"kvlist", msg(6, bt, ""), Value{Type: KindKVList, Bytes: []byte{}}, Value{}},
		{"bytes", msg(7, bt, "\x01"), Value{Type: KindBytes, Bytes: []byte{1}}, Value{}},
		{"empty", nil, Value{}, Value{}},
		{"two members", msg(3, vt, uint64(5), 1, bt, "s"), Value{Type: KindString, Bytes: []byte("s")}, Value{Type: KindInt, Num: 5}},
		{"bool then int", msg(2, vt, uint64(1), 3, vt, uint64(5)), Value{Type: KindInt, Num: 5}, Value{Type: KindInt, Num: 5}},
		{"int then bool", msg(3, vt, uint64(5), 2, vt, uint64(1)), Value{Type: KindBool, Num: 1}, Value{Type: KindInt, Num: 5}},
		{"wrong wire types", msg(1, vt, uint64(1), 3, bt, "x", 4, f32, uint64(1), 9, bt, "y"), Value{}, Value{}},
		{"malformed after", append(msg(3, vt, uint64(5)), 0x0a, 0x09), Value{Type: KindInt, Num: 5}, Value{Type: KindInt, Num: 5}},
		{"malformed before", append([]byte{0x0a, 0x09}, msg(3, vt, uint64(5))...), Value{}, Value{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v := AnyValue(c.b); !sameValue(v, c.last) {
				t.Errorf("AnyValue = %+v, want %+v", v, c.last)
			}
			if v := FirstAnyValue(c.b, 1<<KindString|1<<KindInt|1<<KindDouble); !sameValue(v, c.first) {
				t.Errorf("FirstAnyValue = %+v, want %+v", v, c.first)
			}
		})
	}
}

func sameValue(a, b Value) bool {
	return a.Type == b.Type && bytes.Equal(a.Bytes, b.Bytes) && (a.Bytes == nil) == (b.Bytes == nil) && a.Num == b.Num
}

func TestValueConversions(t *testing.T) {
	i := func(n int64) Value { return Value{Type: KindInt, Num: uint64(n)} }
	d := func(f float64) Value { return Value{Type: KindDouble, Num: math.Float64bits(f)} }
	s := func(s string) Value { return Value{Type: KindString, Bytes: []byte(s)} }
	for _, c := range []struct {
		v      Value
		n      int64
		nOK    bool
		f      float64
		fOK    bool
		b, bOK bool
	}{
		{i(-7), -7, true, -7, true, true, true},
		{i(0), 0, true, 0, true, false, true},
		{d(3), 3, true, 3, true, false, false},
		{d(0.5), 0, false, 0.5, true, false, false},
		{d(math.NaN()), 0, false, 0, false, false, false},
		{d(1e300), 0, false, 1e300, true, false, false},
		{s("12"), 12, true, 12, true, false, false},
		{s("0.75"), 0, false, 0.75, true, false, false},
		{s("true"), 0, false, 0, false, true, true},
		{s("NaN"), 0, false, 0, false, false, false},
		{Value{Type: KindBool, Num: 1}, 0, false, 0, false, true, true},
		{Value{Type: KindBytes, Bytes: []byte("1")}, 0, false, 0, false, false, false},
		{Value{}, 0, false, 0, false, false, false},
	} {
		if n, ok := c.v.Int(); n != c.n || ok != c.nOK {
			t.Errorf("%+v.Int() = %d, %v", c.v, n, ok)
		}
		if f, ok := c.v.Float(); ok != c.fOK || ok && f != c.f {
			t.Errorf("%+v.Float() = %v, %v", c.v, f, ok)
		}
		if b, ok := c.v.Bool(); b != c.b || ok != c.bOK {
			t.Errorf("%+v.Bool() = %v, %v", c.v, b, ok)
		}
	}
	if string(s("x").Raw()) != "x" || string(Value{Type: KindBytes, Bytes: []byte("y")}.Raw()) != "y" || i(1).Raw() != nil || (Value{Type: KindArray, Bytes: []byte{}}).Raw() != nil {
		t.Error("Raw")
	}
}

func TestAtoi(t *testing.T) {
	for _, s := range []string{
		"0", "7", "-7", "+7", "-0", "007", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "25000000000000000000", "99999999999999999999",
		"18446744073709551616", "+9223372036854775807", "", "-", "+", "--1", "1-", " 1", "1.0", "0x10", "1_000",
	} {
		checkAtoi(t, []byte(s))
	}
	if n, ok := Atoi([]byte("000000000000000000001")); ok {
		t.Errorf("Atoi of 21 bytes = %d, true", n)
	}
}

// checkAtoi compares Atoi with strconv.ParseInt, which takes the same
// decimal integers (within Atoi's 20 bytes).
func checkAtoi(t *testing.T, b []byte) {
	t.Helper()
	n, ok := Atoi(b)
	want, err := strconv.ParseInt(string(b), 10, 64)
	if wantOK := err == nil && len(b) <= 20; ok != wantOK || ok && n != want {
		t.Errorf("Atoi(%q) = %d, %v; strconv.ParseInt %d, %v", b, n, ok, want, err)
	}
}

func TestInsertLen(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 20000} {
		b := append([]byte("head"), bytes.Repeat([]byte{'v'}, n)...)
		b = InsertLen(b, 4)
		v, m := protowire.ConsumeBytes(b[4:])
		if string(b[:4]) != "head" || m != len(b)-4 || len(v) != n || bytes.Count(v, []byte{'v'}) != n {
			t.Fatalf("n=%d: %x", n, b[:min(len(b), 12)])
		}
	}
}

func TestNoAllocs(t *testing.T) {
	kv := msg(1, bt, "key", 2, bt, msg(1, bt, "value"))
	num := []byte("-123456789")
	if n := testing.AllocsPerRun(100, func() {
		for b := kv; len(b) > 0; {
			_, _, _, _, rest := Next(b)
			if rest == nil {
				break
			}
			b = rest
		}
		k, v, _ := KeyValue(kv)
		_ = AnyValue(v)
		_ = FirstAnyValue(v, 1<<KindString)
		_, _ = Atoi(num)
		_ = k
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestValueText(t *testing.T) {
	for _, c := range []struct {
		v      Value
		text   string
		scalar bool
	}{
		{Value{Type: KindString, Bytes: []byte("text")}, "text", true},
		{Value{Type: KindBool, Num: 1}, "true", true},
		{Value{Type: KindBool}, "false", true},
		{Value{Type: KindInt, Num: uint64(1<<64 - 42)}, "-42", true},
		{Value{Type: KindDouble, Num: math.Float64bits(0.25)}, "0.25", true},
		{Value{Type: KindBytes, Bytes: []byte{0xab, 0x01}}, "ab01", true},
		{Value{Type: KindArray, Bytes: []byte{0x0a, 0x00}}, "", false},
		{Value{Type: KindKVList}, "", false},
		{Value{}, "", false},
	} {
		if s := c.v.String(); s != c.text {
			t.Errorf("%+v.String() = %q, want %q", c.v, s, c.text)
		}
		if s := string(c.v.AppendText([]byte("x"))); s != "x"+c.text {
			t.Errorf("%+v.AppendText = %q", c.v, s)
		}
		if c.v.IsScalar() != c.scalar {
			t.Errorf("%+v.IsScalar() = %v", c.v, !c.scalar)
		}
		if c.scalar && !c.v.Equal(c.text) {
			t.Errorf("%+v.Equal(%q) = false", c.v, c.text)
		}
	}
	i := Value{Type: KindInt, Num: 7}
	for _, s := range []string{"07", "+7", "7.0", "", "-0"} {
		if i.Equal(s) {
			t.Errorf("7.Equal(%q)", s)
		}
	}
	if (Value{Type: KindInt}).Equal("-0") || !(Value{Type: KindInt}).Equal("0") {
		t.Error("0.Equal")
	}
}
