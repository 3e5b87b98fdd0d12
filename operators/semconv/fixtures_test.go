package semconv

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// attrSet is the attributes of one message found in a record.
type attrSet struct {
	what  string
	attrs []KV
}

// subMessages returns the bytes of every occurrence of field num in msg.
func subMessages(t *testing.T, msg []byte, num protowire.Number) [][]byte {
	t.Helper()
	var out [][]byte
	for len(msg) > 0 {
		f, typ, raw, _, rest := wire.Next(msg)
		if rest == nil {
			t.Fatal("malformed fixture")
		}
		msg = rest
		if f == num && typ == protowire.BytesType {
			out = append(out, raw)
		}
	}
	return out
}

// walk descends a path of field numbers and calls fn on each message
// reached.
func walk(t *testing.T, msg []byte, path []protowire.Number, fn func([]byte)) {
	if len(path) == 0 {
		fn(msg)
		return
	}
	for _, sub := range subMessages(t, msg, path[0]) {
		walk(t, sub, path[1:], fn)
	}
}

func renderAny(v *commonpb.AnyValue) (string, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue, true
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10), true
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64), true
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue), true
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue), true
	}
	return "", false
}

func render(what string, kvs []*commonpb.KeyValue) attrSet {
	s := attrSet{what: what}
	for _, kv := range kvs {
		if v, ok := renderAny(kv.Value); ok {
			s.attrs = append(s.attrs, KV{kv.Key, v})
		}
	}
	return s
}

// TestRealCollectorRecords reads the attributes of every resource, span,
// log record and data point of the real Collector records (otlp_proto)
// from their wire bytes and compares them with a full proto decode.
func TestRealCollectorRecords(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "connectors", "otlp", "testdata", "collector", "proto-*", "*.value"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	sets := 0
	for _, f := range files {
		val, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var wire, want []attrSet
		add := func(what string, field protowire.Number) func([]byte) {
			return func(b []byte) { wire = append(wire, attrSet{what, AppendAttrs(nil, b, field)}) }
		}
		base := filepath.Base(f)
		switch {
		case strings.HasPrefix(base, "otlp_spans"):
			var m tracepb.TracesData
			if err := proto.Unmarshal(val, &m); err != nil {
				t.Fatal(err)
			}
			for _, rs := range m.ResourceSpans {
				want = append(want, render("resource", rs.Resource.GetAttributes()))
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						want = append(want, render("span", s.Attributes))
					}
				}
			}
			for _, rs := range subMessages(t, val, 1) {
				walk(t, rs, []protowire.Number{1}, add("resource", ResourceAttrs))
				walk(t, rs, []protowire.Number{2, 2}, add("span", SpanAttrs))
			}
		case strings.HasPrefix(base, "otlp_logs"):
			var m logspb.LogsData
			if err := proto.Unmarshal(val, &m); err != nil {
				t.Fatal(err)
			}
			ids := DefaultRequestIDs()
			for _, rl := range m.ResourceLogs {
				want = append(want, render("resource", rl.Resource.GetAttributes()))
				for _, sl := range rl.ScopeLogs {
					for _, l := range sl.LogRecords {
						want = append(want, render("log", l.Attributes))
					}
				}
			}
			for _, rl := range subMessages(t, val, 1) {
				walk(t, rl, []protowire.Number{1}, add("resource", ResourceAttrs))
				walk(t, rl, []protowire.Number{2, 2}, func(b []byte) {
					add("log", LogRecordAttrs)(b)
					// telemetrygen's bodies carry no request id.
					if id, ok := ids.FromLog(b); ok {
						t.Errorf("%s: request id %q in %q", f, id, LogBody(b).String())
					}
					if v, ok := Lookup(b, LogRecordAttrs, "app"); !ok || v != "server" {
						t.Errorf("%s: Lookup(app) = %q, %v", f, v, ok)
					}
				})
			}
		case strings.HasPrefix(base, "otlp_metrics"):
			var m metricspb.MetricsData
			if err := proto.Unmarshal(val, &m); err != nil {
				t.Fatal(err)
			}
			for _, rm := range m.ResourceMetrics {
				want = append(want, render("resource", rm.Resource.GetAttributes()))
				for _, sm := range rm.ScopeMetrics {
					for _, mt := range sm.Metrics {
						for _, p := range mt.GetGauge().GetDataPoints() {
							want = append(want, render("number", p.Attributes))
						}
						for _, p := range mt.GetSum().GetDataPoints() {
							want = append(want, render("number", p.Attributes))
						}
						for _, p := range mt.GetHistogram().GetDataPoints() {
							want = append(want, render("histogram", p.Attributes))
						}
					}
				}
			}
			for _, rm := range subMessages(t, val, 1) {
				walk(t, rm, []protowire.Number{1}, add("resource", ResourceAttrs))
				walk(t, rm, []protowire.Number{2, 2}, func(metric []byte) {
					walk(t, metric, []protowire.Number{5, 1}, add("number", NumberDataPointAttrs))
					walk(t, metric, []protowire.Number{7, 1}, add("number", NumberDataPointAttrs))
					walk(t, metric, []protowire.Number{9, 1}, add("histogram", HistogramDataPointAttrs))
				})
			}
		default:
			continue
		}
		// Wire order groups by resource first; compare as multisets per kind.
		key := func(s attrSet) string {
			var b strings.Builder
			b.WriteString(s.what)
			for _, kv := range s.attrs {
				b.WriteString("|" + kv.Key + "=" + kv.Value)
			}
			return b.String()
		}
		w, g := make([]string, 0, len(want)), make([]string, 0, len(wire))
		for _, s := range want {
			w = append(w, key(s))
		}
		for _, s := range wire {
			g = append(g, key(s))
		}
		slices.Sort(w)
		slices.Sort(g)
		if !slices.Equal(w, g) {
			t.Errorf("%s: attributes from the wire\n%v\nwant\n%v", f, g, w)
		}
		sets += len(wire)
	}
	if sets == 0 {
		t.Fatal("no attribute sets read")
	}
}
