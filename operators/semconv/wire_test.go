package semconv

import (
	"slices"
	"strconv"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

func mixedAttrs() []*commonpb.KeyValue {
	return []*commonpb.KeyValue{
		str("s", "text"),
		i64("i", -42),
		f64("d", 0.25),
		boolean("b", true),
		{Key: "bytes", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0xab, 0x01}}}},
		{Key: "arr", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: []*commonpb.AnyValue{{}}}}}},
		{Key: "empty"},
		str("s", "second"),
	}
}

var mixedWant = []KV{{"s", "text"}, {"i", "-42"}, {"d", "0.25"}, {"b", "true"}, {"bytes", "ab01"}, {"s", "second"}}

func TestAppendAttrs(t *testing.T) {
	attrs := mixedAttrs()
	msgs := map[string]struct {
		msg   []byte
		field protowire.Number
	}{
		"resource": {resource(t, attrs...), ResourceAttrs},
		"span":     {span(t, "x", 1, 2, attrs), SpanAttrs},
		"log": {marshal(t, &logspb.LogRecord{Attributes: attrs, Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "b"}}}),
			LogRecordAttrs},
		"number_point": {marshal(t, &metricspb.NumberDataPoint{Attributes: attrs, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 1}}),
			NumberDataPointAttrs},
		"histogram_point": {marshal(t, &metricspb.HistogramDataPoint{Attributes: attrs, BucketCounts: []uint64{1, 2}, ExplicitBounds: []float64{1}}),
			HistogramDataPointAttrs},
	}
	for name, m := range msgs {
		t.Run(name, func(t *testing.T) {
			prefix := []KV{{"keep", "me"}}
			got := AppendAttrs(prefix, m.msg, m.field)
			want := append([]KV{{"keep", "me"}}, mixedWant...)
			if !slices.Equal(got, want) {
				t.Errorf("AppendAttrs = %v, want %v", got, want)
			}
			for _, kv := range []KV{{"s", "text"}, {"i", "-42"}, {"d", "0.25"}, {"b", "true"}, {"bytes", "ab01"}} {
				if v, ok := Lookup(m.msg, m.field, kv.Key); !ok || v != kv.Value {
					t.Errorf("Lookup(%q) = %q, %v; want %q", kv.Key, v, ok, kv.Value)
				}
				if v, ok := LookupValue(m.msg, m.field, kv.Key); !ok || !v.Equal(kv.Value) {
					t.Errorf("LookupValue(%q).Equal(%q) = false", kv.Key, kv.Value)
				}
			}
			if _, ok := Lookup(m.msg, m.field, "missing"); ok {
				t.Error("Lookup(missing) ok")
			}
			if n := testing.AllocsPerRun(50, func() {
				Lookup(m.msg, m.field, "missing")
				Lookup(m.msg, m.field, "b")
				LookupValue(m.msg, m.field, "s")
			}); n != 0 {
				t.Errorf("Lookup allocs = %v, want 0", n)
			}
		})
	}
}

func TestAppendAttrsMalformed(t *testing.T) {
	msg := resource(t, str("a", "1"), str("b", "2"))
	for cut := 0; cut < len(msg); cut++ {
		got := AppendAttrs(nil, msg[:cut], ResourceAttrs)
		if len(got) > 2 {
			t.Fatalf("cut %d: %v", cut, got)
		}
	}
	if got := AppendAttrs(nil, []byte{0xff, 0xff, 0xff}, ResourceAttrs); len(got) != 0 {
		t.Errorf("garbage: %v", got)
	}
}

func TestValueConversions(t *testing.T) {
	msg := resource(t, i64("i", 7), f64("d", 3), f64("frac", 0.5), str("si", "12"), str("sf", "0.75"),
		str("sb", "true"), boolean("b", false), str("x", "abc"))
	get := func(k string) Value {
		v, ok := LookupValue(msg, ResourceAttrs, k)
		if !ok {
			t.Fatalf("no %s", k)
		}
		return v
	}
	if n, ok := get("i").Int(); !ok || n != 7 {
		t.Errorf("i.Int = %d %v", n, ok)
	}
	if n, ok := get("d").Int(); !ok || n != 3 {
		t.Errorf("d.Int = %d %v", n, ok)
	}
	if _, ok := get("frac").Int(); ok {
		t.Error("frac.Int ok")
	}
	if n, ok := get("si").Int(); !ok || n != 12 {
		t.Errorf("si.Int = %d %v", n, ok)
	}
	if f, ok := get("sf").Float(); !ok || f != 0.75 {
		t.Errorf("sf.Float = %v %v", f, ok)
	}
	if f, ok := get("i").Float(); !ok || f != 7 {
		t.Errorf("i.Float = %v %v", f, ok)
	}
	if b, ok := get("sb").Bool(); !ok || !b {
		t.Errorf("sb.Bool = %v %v", b, ok)
	}
	if b, ok := get("b").Bool(); !ok || b {
		t.Errorf("b.Bool = %v %v", b, ok)
	}
	if _, ok := get("x").Int(); ok {
		t.Error("x.Int ok")
	}
	if string(get("x").Raw()) != "abc" || get("i").Raw() != nil {
		t.Error("Raw")
	}
	if get("i").Equal("07") || get("i").Equal("+7") || !get("i").Equal("7") || get("b").Equal("true") {
		t.Error("Equal")
	}
	big, _ := LookupValue(resource(t, i64("n", -1234567), i64("z", 0)), ResourceAttrs, "n")
	zero, _ := LookupValue(resource(t, i64("z", 0)), ResourceAttrs, "z")
	if !big.Equal("-1234567") || big.Equal("-01234567") || !zero.Equal("0") || zero.Equal("-0") || zero.Equal("00") {
		t.Error("Equal on ints")
	}
	if n := testing.AllocsPerRun(50, func() { big.Equal("-1234567") }); n != 0 {
		t.Errorf("Equal allocs = %v", n)
	}
}

func TestAppendAttrsMany(t *testing.T) {
	var attrs []*commonpb.KeyValue
	var want []KV
	for i := range 40 {
		k := "k" + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			attrs = append(attrs, f64(k, -1.2345678901234567e-300))
			want = append(want, KV{k, strconv.FormatFloat(-1.2345678901234567e-300, 'g', -1, 64)})
		case 1:
			attrs = append(attrs, i64(k, -9223372036854775808))
			want = append(want, KV{k, "-9223372036854775808"})
		default:
			attrs = append(attrs, boolean(k, false))
			want = append(want, KV{k, "false"})
		}
	}
	got := AppendAttrs(nil, resource(t, attrs...), ResourceAttrs)
	if !slices.Equal(got, want) {
		t.Errorf("AppendAttrs = %v\nwant %v", got, want)
	}
}

func TestValueIntOfText(t *testing.T) {
	for _, c := range []struct {
		s  string
		n  int64
		ok bool
	}{
		{"12", 12, true},
		{"+12", 12, true},
		{"-0", 0, true},
		{"0012", 12, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"25000000000000000000", 0, false}, // wrapped to 6553255926290448384 once
		{"99999999999999999999", 0, false},
		{"000000000000000000001", 0, false}, // longer than 20 bytes
		{"", 0, false},
		{"-", 0, false},
		{"1e3", 0, false},
		{" 1", 0, false},
	} {
		v, _ := LookupValue(resource(t, str("n", c.s)), ResourceAttrs, "n")
		if n, ok := v.Int(); n != c.n || ok != c.ok {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", c.s, n, ok, c.n, c.ok)
		}
	}
}
