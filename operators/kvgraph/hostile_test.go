package kvgraph

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// badBytes replaces a placeholder of the same length: kvlog (a protobuf
// marshal) cannot write invalid UTF-8 itself.
var badBytes = []byte("r\xff\xfe\xc3(9")

const placeholder = "rZZZZZ" // len(badBytes)

func corrupt(b []byte) []byte {
	if !bytes.Contains(b, []byte(placeholder)) {
		panic("no placeholder")
	}
	return bytes.ReplaceAll(b, []byte(placeholder), badBytes)
}

// checkOutputs asserts that every record the task wrote unmarshals and is
// under the record limit.
func (h *harness) checkOutputs() {
	h.t.Helper()
	for _, r := range h.Out {
		if len(r.Value) > h.cfg.MaxRecordBytes {
			h.t.Fatalf("record on %s of %d bytes > %d", r.Topic, len(r.Value), h.cfg.MaxRecordBytes)
		}
		var m proto.Message
		switch r.Topic {
		case h.cfg.PollutionTopic:
			m = &braidpb.PollutionEdge{}
		case h.cfg.IncidentsTopic:
			m = &braidpb.Incident{}
		default:
			continue
		}
		if err := proto.Unmarshal(r.Value, m); err != nil {
			h.t.Fatalf("record on %s: %v", r.Topic, err)
		}
	}
}

func (h *harness) dlq() []*kgo.Record {
	var out []*kgo.Record
	for _, r := range h.Out {
		if r.Topic == h.cfg.DLQTopic {
			out = append(out, r)
		}
	}
	return out
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// residue is a dirty-residue fault: r2 reads what r1 left in block 1.
func residue() []kvlog.Op {
	return seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(3, "r1", 1), alloc(5, "r2", 1), pool.Read(at(7), "r2", 1, 2, 0, 1024))
}

func TestInvalidUTF8RequestIDGoesToTheDLQ(t *testing.T) {
	h := newHarness(t, nil)
	bad := pool.Write(at(4), placeholder, 3, 0, 0, 64)
	h.feedRaw(corrupt(kvlog.Marshal(gpu0, seq(residue(), bad)...)))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	h.checkOutputs()
	dl := h.dlq()
	if len(dl) != 1 {
		t.Fatalf("%d DLQ records, want 1", len(dl))
	}
	if got := header(dl[0], "braid.reason"); got != "kvgraph: invalid UTF-8 in gen_ai.request.id" {
		t.Fatalf("reason %q", got)
	}
	if header(dl[0], "braid.topic") != "kv" || header(dl[0], "braid.partition") != "0" || header(dl[0], "braid.offset") != "0" {
		t.Fatalf("headers %v", dl[0].Headers)
	}
	if !bytes.Contains(dl[0].Value, badBytes) {
		t.Fatal("DLQ record lacks the bad request id")
	}
	// The good events of the same message are fused as without the bad one.
	inc := h.only()
	if inc.Root.RequestId != "r1" || len(inc.Polluted) != 1 || inc.Polluted[0].RequestId != "r2" {
		t.Fatalf("incident %v", inc)
	}
	if c := h.cfg.Counters; c.Rejected.Load() != 1 || c.DeadLettered.Load() != 1 {
		t.Fatalf("rejected %d dead-lettered %d", c.Rejected.Load(), c.DeadLettered.Load())
	}
}

func TestBadKVEventsAreRejected(t *testing.T) {
	w := pool.Write(at(1), "r1", 1, 0, 0, 64)
	cases := []struct {
		name   string
		op     kvlog.Op
		where  kvlog.Where
		reason string
	}{
		{"unknown op", kvlog.Op{Time: at(1), Op: "scribble", Request: "r1", Block: 1}, gpu0, `kvgraph: unknown kv.op "scribble"`},
		{"negative block", kvlog.Op{Time: at(1), Op: "alloc", Request: "r1", Block: -7}, gpu0, "kvgraph: kv.block.id -7 out of range [0, 4294967296)"},
		{"huge block", kvlog.Op{Time: at(1), Op: "alloc", Request: "r1", Block: 1 << 40}, gpu0, "kvgraph: kv.block.id 1099511627776 out of range [0, 4294967296)"},
		{"no request", kvlog.Op{Time: at(1), Op: "read", Block: 1, Layer: 0}, gpu0, "kvgraph: gen_ai.request.id missing on read"},
		{"huge layer", func() kvlog.Op { o := w; o.Layer = 1 << 20; return o }(), gpu0, "kvgraph: kv.layer.index 1048576 out of range [0, 65536)"},
		{"negative size", func() kvlog.Op { o := w; o.Bytes = -1; return o }(), gpu0, "kvgraph: kv.write.bytes -1 out of range [0, 1099511627776]"},
		{"huge size", func() kvlog.Op { o := w; o.Bytes = 1 << 62; return o }(), gpu0, "kvgraph: kv.write.bytes 4611686018427387904 out of range [0, 1099511627776]"},
		{"negative addr", func() kvlog.Op { o := w; o.Addr = -64; return o }(), gpu0, "kvgraph: kv.write.addr -64 out of range [0, 1125899906842624)"},
		{"long request id", func() kvlog.Op { o := w; o.Request = strings.Repeat("x", 600); return o }(), gpu0, "kvgraph: gen_ai.request.id of 600 bytes (limit 512)"},
		{"long host", w, kvlog.Where{Host: strings.Repeat("h", 513), GPUIndex: 0}, "kvgraph: host.name of 513 bytes (limit 512)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.feed(c.where, c.op)
			if err := h.Finish(); err != nil {
				t.Fatal(err)
			}
			dl := h.dlq()
			if len(dl) != 1 || header(dl[0], "braid.reason") != c.reason {
				t.Fatalf("DLQ %v, want one with reason %q", dl, c.reason)
			}
			var ld logspb.LogsData
			if err := proto.Unmarshal(dl[0].Value, &ld); err != nil || len(ld.ResourceLogs) != 1 || len(ld.ResourceLogs[0].ScopeLogs[0].LogRecords) != 1 {
				t.Fatalf("DLQ value: %v %v", err, &ld)
			}
			h.checkOutputs()
		})
	}
}

func TestMissingAndMalformedAttributes(t *testing.T) {
	// kv.block.id absent, not an integer, and a range without its length.
	lr := kvlog.Record(pool.Write(at(1), "r1", 1, 0, 0, 64))
	var noBlock, textBlock, halfRange []byte
	{
		m := proto.Clone(lr).(*logspb.LogRecord)
		m.Attributes = m.Attributes[:1:1]
		m.Attributes = append(m.Attributes, lr.Attributes[2:]...)
		noBlock = mustMarshal(t, wrap(m))
	}
	{
		m := proto.Clone(lr).(*logspb.LogRecord)
		m.Attributes[1].Value.Value = &commonpb.AnyValue_StringValue{StringValue: "seven"}
		textBlock = mustMarshal(t, wrap(m))
	}
	{
		m := proto.Clone(lr).(*logspb.LogRecord)
		var kept []*commonpb.KeyValue
		for _, a := range m.Attributes {
			if a.Key != "kv.write.bytes" {
				kept = append(kept, a)
			}
		}
		m.Attributes = kept
		halfRange = mustMarshal(t, wrap(m))
	}
	for _, c := range []struct {
		name, reason string
		v            []byte
	}{
		{"no block", "kvgraph: kv.block.id missing on write", noBlock},
		{"text block", "kvgraph: kv.block.id is not an integer", textBlock},
		{"half range", "kvgraph: kv.write.addr and kv.write.bytes not both present", halfRange},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.feedRaw(c.v)
			dl := h.dlq()
			if len(dl) != 1 || header(dl[0], "braid.reason") != c.reason {
				t.Fatalf("DLQ %v, want reason %q", dl, c.reason)
			}
		})
	}
}

func TestErrorPolicies(t *testing.T) {
	bad := corrupt(kvlog.Marshal(gpu0, pool.Write(at(1), placeholder, 1, 0, 0, 64)))
	t.Run("skip", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ErrorPolicy = PolicySkip })
		h.feedRaw(bad)
		if len(h.dlq()) != 0 || h.cfg.Counters.Rejected.Load() != 1 || h.cfg.Counters.DeadLettered.Load() != 0 {
			t.Fatalf("dlq %d rejected %d", len(h.dlq()), h.cfg.Counters.Rejected.Load())
		}
	})
	t.Run("fail", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ErrorPolicy = PolicyFail })
		err := h.Process(0, &kgo.Record{Value: bad, Offset: 9})
		if err == nil || !strings.Contains(err.Error(), "invalid UTF-8 in gen_ai.request.id") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		c := Config{ErrorPolicy: "ignore"}
		c.EnsureDefaults()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ErrorPolicy") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestEvidenceTextIsRepaired(t *testing.T) {
	h := newHarness(t, nil)
	h.feed(gpu0, residue()...)
	// An Xid line with invalid bytes, and one cut inside a character.
	line := "NVRM: Xid (PCI:0000:3b:00): 13, name=" + placeholder
	h.feedRaw(corrupt(kvlog.Marshal(gpu0, kvlog.Op{Time: at(8), Body: line})))
	long := "NVRM: Xid (PCI:0000:3b:00): 13, name=" + strings.Repeat("é", 600)
	h.feed(gpu0, kvlog.Op{Time: at(9), Body: long})
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	h.checkOutputs()
	inc := h.only()
	if len(inc.Evidence) != 2 {
		t.Fatalf("evidence %v", inc.Evidence)
	}
	for _, e := range inc.Evidence {
		if !utf8.ValidString(e.Text) || len(e.Text) > MaxEvidenceText {
			t.Fatalf("evidence text %q", e.Text)
		}
	}
	if !strings.Contains(inc.Evidence[0].Text, "\uFFFD") || !strings.HasPrefix(inc.Evidence[0].Text, "NVRM: Xid") {
		t.Fatalf("evidence %q", inc.Evidence[0].Text)
	}
	if len(h.dlq()) != 0 {
		t.Fatalf("DLQ %v", h.dlq())
	}
}

// TestValidIDInARepairedRecordIsTaken: the decoder repairs a KV event
// whose free text is invalid UTF-8; its request id, valid and holding
// U+FFFD itself, is taken as it is, not mistaken for a repaired one.
func TestValidIDInARepairedRecordIsTaken(t *testing.T) {
	h := newHarness(t, nil)
	const r2 = "r2\uFFFD"
	ops := seq(alloc(0, "r1", 1), fill(1, "r1", 1, 0), free(3, "r1", 1), alloc(5, r2, 1), pool.Read(at(7), r2, 1, 2, 0, 1024))
	ld := kvlog.LogsData(gpu0, ops...)
	lrs := ld.ResourceLogs[0].ScopeLogs[0].LogRecords
	last := lrs[len(lrs)-1]
	last.Attributes = append(last.Attributes, &commonpb.KeyValue{Key: "x.note", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: placeholder}}})
	h.feedRaw(corrupt(mustMarshal(t, ld)))
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	h.checkOutputs()
	if dl := h.dlq(); len(dl) != 0 || h.cfg.Counters.Rejected.Load() != 0 {
		t.Fatalf("DLQ %v, rejected %d", dl, h.cfg.Counters.Rejected.Load())
	}
	inc := h.only()
	if inc.Root.RequestId != "r1" || len(inc.Polluted) != 1 || inc.Polluted[0].RequestId != r2 {
		t.Fatalf("incident %v", inc)
	}
}

func TestInvalidUTF8HostOfASupportingLine(t *testing.T) {
	h := newHarness(t, nil)
	h.feedRaw(corrupt(kvlog.Marshal(kvlog.Where{Host: placeholder, GPUIndex: -1}, kvlog.Op{Time: at(8), Body: "NVRM: Xid (PCI:0000:3b:00): 13, pid=1"})))
	if dl := h.dlq(); len(dl) != 1 || header(dl[0], "braid.reason") != "kvgraph: invalid UTF-8 in host.name" {
		t.Fatalf("DLQ %v", dl)
	}
}

// Strings that reach the processor's records unchecked (state written by an
// older version, a Context of foreign series) never make it panic.
func TestMarshalErrorIsCountedNotFatal(t *testing.T) {
	h := newHarness(t, nil)
	p := NewProcessor(h.cfg, 0)
	_, err := p.marshal(&braidpb.PollutionEdge{Source: string(badBytes)}, "pollution edge")
	if err == nil || p.c.Unwritable.Load() != 1 || p.takeErr() != nil {
		t.Fatalf("err %v unwritable %d", err, p.c.Unwritable.Load())
	}
	p.cfg.ErrorPolicy = PolicyFail
	if _, err := p.marshal(&braidpb.PollutionEdge{Source: string(badBytes)}, "pollution edge"); err == nil || p.takeErr() == nil {
		t.Fatal("fail policy: the error is not returned")
	}
}

func (h *harness) feedRaw(v []byte) {
	h.t.Helper()
	if err := h.Process(0, &kgo.Record{Value: v, Offset: h.off}); err != nil {
		h.t.Fatal(err)
	}
	h.off++
}

func wrap(lr *logspb.LogRecord) *logspb.LogsData {
	ld := kvlog.LogsData(gpu0)
	ld.ResourceLogs[0].ScopeLogs[0].LogRecords = []*logspb.LogRecord{lr}
	return ld
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSlimKeepsTheEvent(t *testing.T) {
	tr := [16]byte{9, 8, 7}
	ops := []kvlog.Op{
		pool.Write(at(1), "r1", 3, 2, 16, 64),
		{Time: at(2), Op: "alloc", Request: "r2", Block: 4, Hash: 0x0123456789abcdef, TraceID: tr, RefCnt: 2, HasRef: true},
		{Time: at(3), Op: "zero", Block: 4},
		{Time: at(4), Body: strings.Repeat("x", 5000) + "NVRM: Xid (PCI:0000:3b:00): 43, pid=7" + strings.Repeat("y", 5000)},
		{Time: at(5), Body: "========= Invalid __global__ write of size 4 bytes\n=========     at 0x1a0 in kernel_x"},
	}
	for _, op := range ops {
		ld := kvlog.LogsData(gpu0, op)
		res := mustMarshal(t, ld.ResourceLogs[0].Resource)
		lr := mustMarshal(t, ld.ResourceLogs[0].ScopeLogs[0].LogRecords[0])
		want, ok := ParseEvent(res, lr, op.Time, Origin{})
		if !ok {
			t.Fatalf("%v: not parsed", op)
		}
		sres, slog, ok := Slim(nil, nil, res, lr, op.Time)
		if !ok {
			t.Fatalf("%v: not slimmed", op)
		}
		got, ok := ParseEvent(sres, slog, op.Time, Origin{})
		if !ok {
			t.Fatalf("%v: slimmed not parsed", op)
		}
		if want.Op == OpXid {
			if got.Op != OpXid || got.Xid != 43 || len(got.Body) > slimBody {
				t.Fatalf("xid %v body %d", got.Xid, len(got.Body))
			}
			continue
		}
		if !bytes.Equal(got.Body, want.Body) || !bytes.Equal(got.Kernel, want.Kernel) || !bytes.Equal(got.Request, want.Request) || !bytes.Equal(got.Host, want.Host) ||
			!bytes.Equal(got.GPUUUID, want.GPUUUID) || !bytes.Equal(got.Instance, want.Instance) {
			t.Fatalf("%v: slimmed %+v, want %+v", op, got, want)
		}
		got.Body, got.Kernel, got.Request, got.Host, got.GPUUUID, got.Instance, got.OpText = nil, nil, nil, nil, nil, nil, nil
		want.Body, want.Kernel, want.Request, want.Host, want.GPUUUID, want.Instance, want.OpText = nil, nil, nil, nil, nil, nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%v: slimmed %+v, want %+v", op, got, want)
		}
	}
}

// TestLongestIdentitiesFit: with every identity at MaxIDBytes, edges and
// incidents still fit, and so does the state of a flood of supporting
// lines waiting for an incident.
func TestLongestIdentitiesFit(t *testing.T) {
	h := newHarness(t, nil)
	long := func(c string) string { return strings.Repeat(c, MaxIDBytes) }
	w := kvlog.Where{Host: long("h"), GPUUUID: long("g"), GPUIndex: 0, Instance: long("i")}
	r1, r2 := long("a"), long("b")
	h.feed(w, seq(alloc(0, r1, 1), fill(1, r1, 1, 0), free(3, r1, 1), alloc(5, r2, 1), pool.Read(at(7), r2, 1, 2, 0, 1024))...)
	for i := range 3000 {
		h.feed(kvlog.Where{Host: long("x"), GPUUUID: long("y"), GPUIndex: -1},
			kvlog.Op{Time: at(8), Body: "========= Invalid __global__ write " + strings.Repeat("z", 600) + strconv.Itoa(i)})
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	h.checkState()
	if err := h.Finish(); err != nil {
		t.Fatal(err)
	}
	h.checkOutputs()
	if len(h.edges()) == 0 || len(h.dlq()) != 0 || h.cfg.Counters.EvidenceDropped.Load() == 0 {
		t.Fatalf("%d edges, %d DLQ, %d evidence dropped", len(h.edges()), len(h.dlq()), h.cfg.Counters.EvidenceDropped.Load())
	}
}
