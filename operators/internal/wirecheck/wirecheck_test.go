package wirecheck

import (
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestCheck(t *testing.T) {
	md := (&logspb.LogRecord{}).ProtoReflect().Descriptor()
	good, err := proto.Marshal(&logspb.LogRecord{TimeUnixNano: 5, Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "b"}},
		Attributes: []*commonpb.KeyValue{{Key: "k", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 3}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(good, md); err != nil {
		t.Fatal(err)
	}
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	kv := func(av []byte) []byte {
		b := protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte("k"))
		return protowire.AppendBytes(tag(b, 2, protowire.BytesType), av)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"time as a varint", protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 5), "LogRecord.time_unix_nano (1) at byte 23: wire type 0, want 1"},
		{"unknown field", protowire.AppendVarint(tag(nil, 99, protowire.VarintType), 5), "no field 99"},
		{"nested", protowire.AppendBytes(tag(nil, 6, protowire.BytesType), kv(protowire.AppendFixed64(tag(nil, 3, protowire.Fixed64Type), 1))),
			"LogRecord.attributes: opentelemetry.proto.common.v1.KeyValue.value: opentelemetry.proto.common.v1.AnyValue.int_value (3) at byte 0: wire type 1, want 0"},
		{"malformed", []byte{0x0a, 0x05}, "unexpected EOF"},
	} {
		err := Check(append(good, c.b...), md)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Opaque: not descended into.
	bad := protowire.AppendBytes(tag(nil, 6, protowire.BytesType), []byte{0xff})
	if err := Check(bad, md, "opentelemetry.proto.common.v1.KeyValue"); err != nil {
		t.Errorf("opaque KeyValue checked: %v", err)
	}
	// Repeated scalars may be packed (bytes); messages are bytes only.
	counts := (&metricspb.HistogramDataPoint{}).ProtoReflect().Descriptor().Fields().ByName("bucket_counts")
	values := (&commonpb.ArrayValue{}).ProtoReflect().Descriptor().Fields().ByName("values")
	if !Allows(counts, protowire.BytesType) || !Allows(counts, protowire.Fixed64Type) || Allows(counts, protowire.VarintType) ||
		!Allows(values, protowire.BytesType) || Allows(values, protowire.VarintType) {
		t.Error("Allows")
	}
}
