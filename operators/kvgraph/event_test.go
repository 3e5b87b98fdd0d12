package kvgraph

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

func wire(t testing.TB, w kvlog.Where, op kvlog.Op) (res, rec []byte) {
	t.Helper()
	var err error
	if res, err = proto.Marshal(kvlog.Resource(w)); err != nil {
		t.Fatal(err)
	}
	if rec, err = proto.Marshal(kvlog.Record(op)); err != nil {
		t.Fatal(err)
	}
	return res, rec
}

func TestParseEvent(t *testing.T) {
	op := pool.Write(at(1), "cmpl-7", 3, 2, 16, 64)
	op.Hash = 0x00ff00ff00ff00ff
	op.RefCnt, op.HasRef = 2, true
	op.TraceID = [16]byte{0xab}
	res, rec := wire(t, gpu0, op)
	ev, ok := ParseEvent(res, rec, 42, Origin{Topic: "otlp_logs", Partition: 3, Offset: 9})
	if !ok {
		t.Fatal("not parsed")
	}
	if ev.Op != OpWrite || ev.Block != 3 || ev.Layer != 2 || ev.Layers != 4 || !ev.HasRange || ev.Addr != pool.Addr(2, 3)+16 || ev.Bytes != 64 ||
		!ev.HasLayerRange || ev.LayerBase != 2*pool.LayerSize() || ev.LayerSize != pool.LayerSize() || !ev.HasHash || ev.Hash != 0x00ff00ff00ff00ff ||
		ev.RefCnt != 2 || string(ev.Request) != "cmpl-7" || ev.TraceID != op.TraceID || ev.Time != 42 || ev.Origin.Offset != 9 {
		t.Fatalf("%+v", ev)
	}
	if string(ev.Host) != "node-a" || string(ev.GPUUUID) != "GPU-0" || ev.GPUIndex != 0 || string(ev.Instance) != "vllm-0" {
		t.Fatalf("resource %+v", ev)
	}
	// Integers as strings, as some exporters write them.
	lr := &logspb.LogRecord{}
	if err := proto.Unmarshal(rec, lr); err != nil {
		t.Fatal(err)
	}
	for _, kv := range lr.Attributes {
		if kv.Key == "kv.block.id" {
			kv.Value = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "17"}}
		}
	}
	rec2, _ := proto.Marshal(lr)
	if ev, ok := ParseEvent(res, rec2, 0, Origin{}); !ok || ev.Block != 17 {
		t.Fatalf("string block id: %v %+v", ok, ev)
	}

	res, rec = wire(t, gpu0, kvlog.Op{Body: "========= Invalid __global__ write of size 16 bytes\n=========     at 0x1a0 in reshape_and_cache_kernel\n"})
	if ev, ok := ParseEvent(res, rec, 0, Origin{}); !ok || ev.Op != OpSanitizer || string(ev.Kernel) != "reshape_and_cache_kernel" {
		t.Fatalf("sanitizer: %v %+v", ok, ev)
	}
	res, rec = wire(t, gpu0, kvlog.Op{Body: "NVRM: Xid (PCI:0000:3b:00): 13, pid=2211, name=python3, Graphics SM Warp Exception"})
	if ev, ok := ParseEvent(res, rec, 0, Origin{}); !ok || ev.Op != OpXid || ev.Xid != 13 {
		t.Fatalf("xid: %v %+v", ok, ev)
	}
	for _, body := range []string{"INFO 12-01 engine started", "========= ERROR SUMMARY: 0 errors"} {
		res, rec = wire(t, gpu0, kvlog.Op{Body: body})
		if _, ok := ParseEvent(res, rec, 0, Origin{}); ok {
			t.Fatalf("%q parsed as an event", body)
		}
	}
	if _, ok := ParseEvent(res, []byte{0x0a, 0xff}, 0, Origin{}); ok {
		t.Fatal("malformed record parsed")
	}
}

func TestParseEventDoesNotAllocate(t *testing.T) {
	op := pool.Read(at(1), "cmpl-7", 3, 2, 0, 64)
	res, rec := wire(t, gpu0, op)
	n := testing.AllocsPerRun(100, func() {
		if _, ok := ParseEvent(res, rec, 1, Origin{}); !ok {
			t.Fatal("not parsed")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per event", n)
	}
}

func BenchmarkParseEvent(b *testing.B) {
	res, rec := wire(b, gpu0, pool.Write(at(1), "cmpl-7", 3, 2, 0, 64))
	b.ReportAllocs()
	for b.Loop() {
		ParseEvent(res, rec, 1, Origin{})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestParseEventIntConventions pins how integer attributes are read: the
// first of an AnyValue's int, string and double members; decimal text of
// at most 18 digits with an optional '-'; an integral double.
func TestParseEventIntConventions(t *testing.T) {
	res, rec := wire(t, gpu0, pool.Write(at(1), "cmpl-7", 3, 2, 16, 64))
	lr := &logspb.LogRecord{}
	if err := proto.Unmarshal(rec, lr); err != nil {
		t.Fatal(err)
	}
	str := func(s string) []byte {
		b, _ := proto.Marshal(&commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}})
		return b
	}
	dbl := func(f float64) []byte {
		b, _ := proto.Marshal(&commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}})
		return b
	}
	for _, c := range []struct {
		name  string
		value []byte // the serialized AnyValue of kv.block.id
		block int64
		ok    bool
	}{
		{"text", str("17"), 17, true},
		{"negative text", str("-17"), -17, true},
		{"18 digits", str("123456789012345678"), 123456789012345678, true},
		{"19 digits", str("1234567890123456789"), -1, false},
		{"plus sign", str("+17"), -1, false},
		{"not a number", str("0x11"), -1, false},
		{"integral double", dbl(17), 17, true},
		{"fraction", dbl(17.5), -1, false},
		{"text, then an int", append(str("5"), 0x18, 0x07), 5, true},
		{"an int, then text", append([]byte{0x18, 0x07}, str("5")...), 7, true},
		{"a bool, then an int", []byte{0x10, 0x01, 0x18, 0x07}, 7, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b []byte
			for _, kv := range lr.Attributes {
				if kv.Key != "kv.block.id" {
					kb, _ := proto.Marshal(kv)
					b = protowire.AppendBytes(protowire.AppendTag(b, 6, protowire.BytesType), kb)
					continue
				}
				kb := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), kv.Key)
				kb = protowire.AppendBytes(protowire.AppendTag(kb, 2, protowire.BytesType), c.value)
				b = protowire.AppendBytes(protowire.AppendTag(b, 6, protowire.BytesType), kb)
			}
			ev, ok := ParseEvent(res, b, 1, Origin{})
			if !ok || ev.Block != c.block || ev.hasBlock != c.ok || (ev.notInt == "kv.block.id") == c.ok {
				t.Fatalf("ParseEvent = %v, block %d, hasBlock %v, notInt %q", ok, ev.Block, ev.hasBlock, ev.notInt)
			}
		})
	}
}
