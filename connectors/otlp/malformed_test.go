package otlp

import (
	"bytes"
	"strings"
	"testing"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// topLevelEnds returns the offsets where the top-level fields of a valid
// message end: the only proper prefixes that are whole messages.
func topLevelEnds(t testing.TB, b []byte) map[int]int {
	ends := map[int]int{}
	off := 0
	for k := 1; off < len(b); k++ {
		num, typ, n := protowire.ConsumeTag(b[off:])
		m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
		if n < 0 || m < 0 {
			t.Fatal("invalid message")
		}
		off += n + m
		ends[off] = k
	}
	return ends
}

type sample struct {
	name string
	sig  Signal
	enc  Encoding
	v    []byte
}

func samples(t testing.TB) []sample {
	var out []sample
	for _, r := range loadFixtures(t) {
		out = append(out, sample{r.Folder + "/" + r.Name, r.Signal, r.Enc, r.Value})
	}
	for _, m := range newBenchBatch(t).msgs {
		out = append(out, sample{"bench/" + m.sig.String() + "/proto", m.sig, EncodingProto, m.proto})
		out = append(out, sample{"bench/" + m.sig.String() + "/json", m.sig, EncodingJSON, m.json})
	}
	return out
}

func TestTruncated(t *testing.T) {
	d := NewDecoder()
	edge, stride := 2048, 61
	if testing.Short() || raceEnabled {
		edge, stride = 512, 997
	}
	for _, s := range samples(t) {
		t.Run(s.name, func(t *testing.T) {
			full := mustDecode(t, d, s.sig, s.enc, s.v)
			nFull := len(full)
			var ends map[int]int
			var itemsAt []int // number of items in the first k resource blocks
			if s.enc == EncodingProto {
				ends = topLevelEnds(t, s.v)
				msg := newMessage(s.sig)
				if err := proto.Unmarshal(s.v, msg); err != nil {
					t.Fatal(err)
				}
				itemsAt = make([]int, len(ends)+1)
				for k := 1; k <= len(ends); k++ {
					part := newMessage(s.sig)
					off := 0
					for e, kk := range ends {
						if kk == k {
							off = e
						}
					}
					if err := proto.Unmarshal(s.v[:off], part); err != nil {
						t.Fatal(err)
					}
					itemsAt[k] = len(wantItems(part))
				}
				if itemsAt[len(ends)] != nFull {
					t.Fatalf("%d items, want %d", nFull, itemsAt[len(ends)])
				}
			}
			for n := 0; n < len(s.v); n++ {
				// Every prefix of the fixtures; of the big benchmark
				// messages, the first and last 2 KiB and a sample between.
				if n > edge && n < len(s.v)-edge && n%stride != 0 {
					if _, ok := ends[n]; !ok {
						continue
					}
				}
				// A copy with no spare capacity, so that reading past the
				// prefix would be caught by the race detector / bounds checks.
				prefix := bytes.Clone(s.v[:n])
				if k, ok := ends[n]; ok && n > 0 {
					items, err := d.Decode(s.sig, s.enc, prefix)
					if err != nil || len(items) != itemsAt[k] {
						t.Fatalf("prefix of %d bytes (%d whole resource blocks): %d items, %v; want %d items", n, k, len(items), err, itemsAt[k])
					}
					continue
				}
				de := mustDecodeError(t, d, s.sig, s.enc, prefix)
				if s.enc == EncodingProto && de.Offset < 0 {
					t.Fatalf("prefix %d: no offset in %v", n, de)
				}
			}
		})
	}
}

func TestWrongMessageType(t *testing.T) {
	d := NewDecoder()
	for _, s := range samples(t) {
		for _, other := range allSignals {
			if other == s.sig {
				continue
			}
			de := mustDecodeError(t, d, other, s.enc, s.v)
			t.Logf("%s as %v: %v", s.name, other, de)
		}
		// The decoder is fine after an error.
		mustDecode(t, d, s.sig, s.enc, s.v)
	}
}

func TestEmptyAndNoTopLevelField(t *testing.T) {
	d := NewDecoder()
	for _, sig := range allSignals {
		for _, enc := range []Encoding{EncodingProto, EncodingJSON} {
			for _, v := range [][]byte{nil, {}} {
				if de := mustDecodeError(t, d, sig, enc, v); de.Reason != "empty message" {
					t.Errorf("empty: %v", de)
				}
			}
		}
		// Content, but not the expected field: probably another message type.
		onlyUnknown := protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1)
		if de := mustDecodeError(t, d, sig, EncodingProto, onlyUnknown); !strings.Contains(de.Reason, "no resource_") {
			t.Errorf("unknown field only: %v", de)
		}
		for _, js := range []string{`{}`, ` { } `, `{"foo":1}`, `{"resourceSpans":[],"resourceLogs":[],"resourceMetrics":[]}`} {
			if de := mustDecodeError(t, d, sig, EncodingJSON, []byte(js)); !strings.Contains(de.Reason, "no resource") {
				t.Errorf("%s: %v", js, de)
			}
		}
		// An empty resource block is valid and has no items.
		if items := mustDecode(t, d, sig, EncodingProto, []byte{0x0a, 0x00}); len(items) != 0 {
			t.Error("items from an empty resource block")
		}
		key := map[Signal]string{SignalSpans: "resourceSpans", SignalLogs: "resource_logs", SignalMetrics: "resourceMetrics"}[sig]
		if items := mustDecode(t, d, sig, EncodingJSON, []byte(`{"`+key+`":[{}]}`)); len(items) != 0 {
			t.Error("items from an empty resource block")
		}
	}
}

func TestInvalidJSON(t *testing.T) {
	d := NewDecoder()
	for _, js := range []string{
		`{`, `}`, `[]`, `"x"`, `null`, `1`, `{"resourceSpans":[}`, `{"resourceSpans":[{]}`, `{"resourceSpans" [{}]}`,
		`{"resourceSpans":[{}]}x`, `{"resourceSpans":[{}]}{}`, `{"resourceSpans":[{},]}`, `{,"resourceSpans":[{}]}`,
		`{"resourceSpans":[{"resource":{"attributes":[{"key":"a","value":{"stringValue":"\x"}}]}}]}`,
		"{\"resourceSpans\":[{\"schemaUrl\":\"a\x01b\"}]}",
		`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":12}]}]}]}`,
		`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","startTimeUnixNano":"x"}]}]}]}`,
		`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","kind":tru}]}]}]}`,
		`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"}]}]}]`,
		"\xef\xbb\xbf{}", `{"resourceSpans":[{"schemaUrl":"\ud800"}]}` + "\xff",
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	} {
		for _, sig := range allSignals {
			de := mustDecodeError(t, d, sig, EncodingJSON, []byte(js))
			if !strings.Contains(de.Reason, "JSON") && !strings.Contains(de.Reason, "no resource") {
				t.Errorf("%.60q: reason %q", js, de.Reason)
			}
		}
	}
}

const (
	goodTrace = "0102030405060708090a0b0c0d0e0f10"
	goodSpan  = "1112131415161718"
)

func TestBadIDs(t *testing.T) {
	d := NewDecoder()
	span := func(fields string) string {
		return `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + fields + `,"name":"s"}]}]}]}`
	}
	logRec := func(fields string) string {
		return `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"5"` + fields + `}]}]}]}`
	}
	exemplar := func(fields string) string {
		return `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"timeUnixNano":"5","exemplars":[{` + fields + `}]}]}}]}]}]}`
	}
	link := func(fields string) string {
		return span(`"traceId":"` + goodTrace + `","spanId":"` + goodSpan + `","links":[{` + fields + `}]`)
	}
	bad := []struct {
		sig Signal
		js  string
		bad string // the offending id, whose offset the error must point at
	}{
		{SignalSpans, span(`"traceId":"0102030405060708090a0b0c0d0e0f1","spanId":"` + goodSpan + `"`), `"0102030405060708090a0b0c0d0e0f1"`},
		{SignalSpans, span(`"traceId":"0102030405060708090a0b0c0d0e0f1000","spanId":"` + goodSpan + `"`), `"0102030405060708090a0b0c0d0e0f1000"`},
		{SignalSpans, span(`"traceId":"0102030405060708090a0b0c0d0e0fzz","spanId":"` + goodSpan + `"`), `"0102030405060708090a0b0c0d0e0fzz"`},
		{SignalSpans, span(`"traceId":"AQIDBAUGBwgJCgsMDQ4PEA==","spanId":"` + goodSpan + `"`), `"AQIDBAUGBwgJCgsMDQ4PEA=="`}, // base64: not OTLP/JSON
		{SignalSpans, span(`"trace_id":"` + goodTrace + `","span_id":"11121314151617"`), `"11121314151617"`},
		{SignalSpans, span(`"traceId":"` + goodTrace + `","spanId":"` + goodSpan + `","parentSpanId":"xx12131415161718"`), `"xx12131415161718"`},
		{SignalSpans, span(`"traceId":"` + goodTrace + `","spanId":"` + goodSpan + `","parent_span_id":"1112"`), `"1112"`},
		{SignalSpans, link(`"traceId":"0102","spanId":"` + goodSpan + `"`), `"0102"`},
		{SignalSpans, link(`"traceId":"` + goodTrace + `","spanId":"1"`), `"1"`},
		{SignalLogs, logRec(`,"traceId":"0102030405060708"`), `"0102030405060708"`},
		{SignalLogs, logRec(`,"traceId":"` + goodTrace + `","spanId":"g112131415161718"`), `"g112131415161718"`},
		{SignalMetrics, exemplar(`"traceId":"01020304050607080102030405060708090a"`), `"01020304050607080102030405060708090a"`},
		{SignalMetrics, exemplar(`"traceId":"` + goodTrace + `","spanId":"111213141516171"`), `"111213141516171"`},
	}
	for _, c := range bad {
		de := mustDecodeError(t, d, c.sig, EncodingJSON, []byte(c.js))
		if i := strings.Index(c.js, c.bad); de.Offset != i {
			t.Errorf("%s: offset %d, want %d (%v)", c.js, de.Offset, i, de)
		}
	}
	// Not hex-id errors, but still errors: a span needs both ids, a non-zero trace id.
	for _, js := range []string{
		span(`"spanId":"` + goodSpan + `"`),
		span(`"traceId":"` + goodTrace + `"`),
		span(`"traceId":"","spanId":"` + goodSpan + `"`),
		span(`"traceId":"00000000000000000000000000000000","spanId":"` + goodSpan + `"`),
	} {
		mustDecodeError(t, d, SignalSpans, EncodingJSON, []byte(js))
	}
	// Valid: escaped hex, upper case, empty ids on logs and exemplars, ids
	// as attribute keys, snake_case keys.
	for _, c := range []struct {
		sig   Signal
		js    string
		trace string
	}{
		{SignalSpans, span(`"traceId":"\u0030102030405060708090a0b0c0d0e0f10","spanId":"` + goodSpan + `"`), goodTrace},
		{SignalSpans, span(`"trace\u0049d":"0102030405060708090A0B0C0D0E0F10","spanId":"` + goodSpan + `","attributes":[{"key":"traceId","value":{"stringValue":"nothex"}}]`), goodTrace},
		{SignalLogs, logRec(`,"traceId":"","spanId":""`), ""},
		{SignalLogs, logRec(`,"trace_id":"` + goodTrace + `"`), goodTrace},
		{SignalMetrics, exemplar(`"traceId":"","spanId":""`), ""},
		{SignalMetrics, exemplar(`"trace_id":"` + goodTrace + `"`), goodTrace},
	} {
		items := mustDecode(t, d, c.sig, EncodingJSON, []byte(c.js))
		var want [16]byte
		if c.trace != "" {
			want, _ = ParseTraceIDHex([]byte(c.trace))
		}
		if len(items) != 1 || items[0].TraceID != want {
			t.Errorf("%s: %d items", c.js, len(items))
		}
	}

	// Protobuf.
	tid := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	spans := func(s *tracepb.Span) []byte {
		b, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{s}}}}}})
		return b
	}
	for _, s := range []*tracepb.Span{
		{TraceId: make([]byte, 16), SpanId: sid},
		{TraceId: tid[:15], SpanId: sid},
		{TraceId: append(tid, 0), SpanId: sid},
		{SpanId: sid},
		{TraceId: tid},
		{TraceId: tid, SpanId: sid[:7]},
		{TraceId: tid, SpanId: sid, ParentSpanId: sid[:4]},
	} {
		b := spans(s)
		de := mustDecodeError(t, d, SignalSpans, EncodingProto, b)
		sb, _ := proto.Marshal(s)
		if i := bytes.Index(b, sb); len(sb) > 0 && de.Offset != i {
			t.Errorf("%v: offset %d, want the span's %d", s, de.Offset, i)
		}
	}
	logs := func(l *logspb.LogRecord) []byte {
		b, _ := proto.Marshal(&logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{l}}}}}})
		return b
	}
	mustDecodeError(t, d, SignalLogs, EncodingProto, logs(&logspb.LogRecord{TraceId: tid[:8]}))
	mustDecodeError(t, d, SignalLogs, EncodingProto, logs(&logspb.LogRecord{TraceId: tid, SpanId: sid[:3]}))
	if items := mustDecode(t, d, SignalLogs, EncodingProto, logs(&logspb.LogRecord{TimeUnixNano: 1})); items[0].TraceID != ([16]byte{}) {
		t.Error("log without trace id")
	}
	points := func(e *metricspb.Exemplar) []byte {
		b, _ := proto.Marshal(&metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{Metrics: []*metricspb.Metric{
			{Name: "m", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: []*metricspb.NumberDataPoint{{TimeUnixNano: 1, Exemplars: []*metricspb.Exemplar{e}}}}}}}}}}}})
		return b
	}
	mustDecodeError(t, d, SignalMetrics, EncodingProto, points(&metricspb.Exemplar{TraceId: tid[:3]}))
	mustDecodeError(t, d, SignalMetrics, EncodingProto, points(&metricspb.Exemplar{TraceId: tid, SpanId: sid[:5]}))
	if items := mustDecode(t, d, SignalMetrics, EncodingProto, points(&metricspb.Exemplar{SpanId: sid})); len(items) != 1 || items[0].TraceID != ([16]byte{}) {
		t.Error("exemplar without trace id")
	}
}

// A known field with the wrong wire type is an error; an unknown one is
// skipped whatever its type.
func TestWireTypeMismatch(t *testing.T) {
	d := NewDecoder()
	good, _ := proto.Marshal(&tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{
		{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), StartTimeUnixNano: 3}}}}}}})
	mustDecode(t, d, SignalSpans, EncodingProto, good)
	// start_time_unix_nano (7) as a varint instead of fixed64.
	i := bytes.IndexByte(good, byte(7<<3|protowire.Fixed64Type))
	bad := append(bytes.Clone(good[:i]), byte(7<<3|protowire.VarintType), 3)
	bad = append(bad, good[i+9:]...)
	// Fix the lengths of the enclosing messages (shorter by 7 bytes).
	bad = fixLengths(t, bad, 7)
	de := mustDecodeError(t, d, SignalSpans, EncodingProto, bad)
	if !strings.Contains(de.Reason, "wire type") || de.Offset != i {
		t.Errorf("%v (offset want %d)", de, i)
	}
}

// fixLengths shrinks the three enclosing length prefixes (ResourceSpans,
// ScopeSpans, Span: one byte each in these small messages) by delta.
func fixLengths(t *testing.T, b []byte, delta int) []byte {
	for _, pos := range []int{1, 3, 5} {
		if b[pos] >= 0x80 {
			t.Fatal("multi-byte length")
		}
		b[pos] -= byte(delta)
	}
	return b
}

// TestFieldErrors pins the reason and offset of each way a field can be
// malformed, at the top level, in a span and in an attribute.
func TestFieldErrors(t *testing.T) {
	d := NewDecoder()
	// protobuf's error texts start "proto: ", with a space that is not
	// always the same character.
	decodeErr := func(v []byte) *DecodeError {
		de := mustDecodeError(t, d, SignalSpans, EncodingProto, v)
		de.Reason = strings.NewReplacer("proto: ", "", "proto:\u00a0", "").Replace(de.Reason)
		return de
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	overlong := bytes.Repeat([]byte{0xff}, 11)
	// The ways a field at the start of a message of kind name (whose field
	// 1 is a message and field 20 unknown) can be malformed.
	type fieldCase struct {
		field  []byte
		reason string
	}
	fieldCases := func(name string) []fieldCase {
		return []fieldCase{
			{[]byte{0x80}, name + ": invalid field tag"},
			{overlong, name + ": invalid field tag: variable length integer overflow"},
			{[]byte{0x02, 0x00}, name + ": invalid field tag"},
			{cat(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), []byte{0}), name + ": invalid field tag"},
			{[]byte{0x08, 0x01}, name + ": field 1 has wire type 0, want bytes (wrong message type?)"},
			{[]byte{0x0e, 0x00}, name + ": field 1 has wire type 6, want bytes (wrong message type?)"},
			{[]byte{0x0a, 0x05, 'a'}, name + ": field 1: truncated value"},
			{[]byte{0x0a, 0x80}, name + ": field 1: unexpected EOF"},
			{cat([]byte{0x0a}, overlong), name + ": field 1: variable length integer overflow"},
			{cat(tag(20, protowire.VarintType), []byte{0x80}), name + ": field 20: unexpected EOF"},
			{cat(tag(20, protowire.VarintType), overlong), name + ": field 20: variable length integer overflow"},
			{cat(tag(20, protowire.Fixed64Type), []byte{1, 2}), name + ": field 20: truncated value"},
			{cat(tag(20, protowire.Fixed32Type), []byte{1}), name + ": field 20: truncated value"},
			{cat(tag(20, protowire.StartGroupType), []byte{0x08, 0x01}), name + ": field 20: unexpected EOF"},
			{cat(tag(20, protowire.StartGroupType), []byte{0x00}), name + ": field 20: truncated value"},
			{cat(tag(20, protowire.StartGroupType), tag(21, protowire.EndGroupType)), name + ": field 20: mismatching end group marker"},
			{tag(20, protowire.EndGroupType), name + ": field 20: mismatching end group marker"},
			{cat(tag(20, 6), []byte{0}), name + ": field 20: cannot parse reserved wire type"},
		}
	}
	for _, c := range fieldCases("top-level message") {
		v := cat(protowire.AppendBytes(tag(1, protowire.BytesType), nil), c.field) // an empty ResourceSpans first
		de := decodeErr(v)
		if de.Reason != c.reason || de.Offset != 2 {
			t.Errorf("%x: %q at %d; want %q at 2", v, de.Reason, de.Offset, c.reason)
		}
	}
	// In a span (field 1 is its trace id, field 20 unknown), after its
	// trace id.
	wrap := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(tag(num, protowire.BytesType), b)
	}
	for _, c := range fieldCases("Span") {
		span := cat(wrap(1, bytes.Repeat([]byte{1}, 16)), c.field)
		v := wrap(1, wrap(2, wrap(2, span)))
		de := decodeErr(v)
		if want := len(v) - len(c.field); de.Reason != c.reason || de.Offset != want {
			t.Errorf("%x: %q at %d; want %q at %d", v, de.Reason, de.Offset, c.reason, want)
		}
	}
	// In an attribute (a KeyValue: field 1 the key, 2 the value).
	for _, c := range []struct {
		kv     []byte
		reason string
	}{
		{[]byte{0x0a, 0x05, 'k'}, "malformed attribute: field 1: truncated value"},
		{[]byte{0x0a, 0x80}, "malformed attribute: field 1: truncated value"},
		{[]byte{0x80}, "malformed attribute: invalid field tag"},
		{[]byte{0x00, 0x00}, "malformed attribute: invalid field tag"},
		{overlong, "malformed attribute: invalid field tag"},
		{[]byte{0x18, 0x80}, "malformed attribute: field 3: unexpected EOF"},
		{[]byte{0x19, 0x01}, "malformed attribute: field 3: unexpected EOF"},
		{[]byte{0x1c}, "malformed attribute: field 3: mismatching end group marker"},
		{[]byte{0x1b, 0x00}, "malformed attribute: field 3: invalid field number"},
		{[]byte{0x1e}, "malformed attribute: field 3: cannot parse reserved wire type"},
	} {
		span := cat(wrap(1, bytes.Repeat([]byte{1}, 16)), wrap(2, bytes.Repeat([]byte{2}, 8)), wrap(9, c.kv))
		v := wrap(1, wrap(2, wrap(2, span)))
		de := decodeErr(v)
		if want := len(v) - len(c.kv); de.Reason != c.reason || de.Offset != want {
			t.Errorf("%x: %q at %d; want %q at %d", v, de.Reason, de.Offset, c.reason, want)
		}
	}
}
