package arrowexport

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"

	"github.com/braidlabs/braid/operators/braidpb"
)

func TestFormatForPath(t *testing.T) {
	for path, want := range map[string]Format{
		"out.arrow": FormatArrow, "/x/y.feather": FormatArrow, "a.IPC": FormatArrow,
		"t.parquet": FormatParquet, "T.PARQUET": FormatParquet,
	} {
		got, err := FormatForPath(path)
		if err != nil || got != want {
			t.Errorf("FormatForPath(%q) = %v, %v; want %v", path, got, err, want)
		}
	}
	for _, path := range []string{"out", "out.csv", "out.arrow.gz", "parquet"} {
		if f, err := FormatForPath(path); err == nil {
			t.Errorf("FormatForPath(%q) = %v, want an error", path, f)
		}
	}
	if _, err := NewWriter(&bytes.Buffer{}, Format(7)); err == nil {
		t.Error("NewWriter accepted Format(7)")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x.arrow"), 0); err == nil {
		t.Error("Create accepted Format(0)")
	}
}

// TestSchemaDocumented checks that doc.go names every column and nested
// field of Schema().
func TestSchemaDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, dt arrow.DataType)
	check := func(name string) {
		if !bytes.Contains(doc, []byte(name)) {
			t.Errorf("doc.go does not mention %s", name)
		}
	}
	walk = func(prefix string, dt arrow.DataType) {
		switch dt := dt.(type) {
		case *arrow.ListType:
			walk(prefix, dt.Elem())
		case *arrow.StructType:
			for _, f := range dt.Fields() {
				check(f.Name)
				walk(prefix+f.Name+".", f.Type)
			}
		}
	}
	for _, f := range Schema().Fields() {
		check(f.Name)
		walk(f.Name+".", f.Type)
	}
	if Schema().NumFields() != numCols {
		t.Fatalf("schema has %d fields, want %d", Schema().NumFields(), numCols)
	}
}

func testTraces() []*braidpb.FusedTrace {
	var traces []*braidpb.FusedTrace
	for i := 0; i < 5; i++ {
		traces = append(traces, sampleTrace(i, 3+i))
	}
	return append(traces, oddTrace())
}

func writeFile(t *testing.T, dir string, f Format, batchRows int, traces []*braidpb.FusedTrace) string {
	t.Helper()
	path := filepath.Join(dir, "fused."+f.String())
	if err := os.WriteFile(path, writeAll(t, f, batchRows, traces), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, f Format, path string) readResult {
	t.Helper()
	if f == FormatArrow {
		return readArrow(t, path)
	}
	return readParquet(t, path)
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	traces := testTraces()
	results := map[Format]readResult{}
	for _, f := range []Format{FormatArrow, FormatParquet} {
		t.Run("format="+f.String(), func(t *testing.T) {
			// Batches of 2 rows: 6 rows make 3 record batches / row groups.
			path := writeFile(t, dir, f, 2, traces)
			res := read(t, f, path)
			checkSchema(t, f, res.schema)
			if v, ok := res.schema.Metadata().GetValue(schemaVersionKey); !ok || v != SchemaVersion {
				t.Errorf("schema metadata %s = %q, %v", schemaVersionKey, v, ok)
			}
			if res.batches != 3 {
				t.Errorf("%d batches, want 3", res.batches)
			}
			if len(res.rows) != len(traces) {
				t.Fatalf("%d rows, want %d", len(res.rows), len(traces))
			}
			for i := 0; i < 5; i++ {
				checkSample(t, i, traces[i], res.rows[i])
			}
			checkOdd(t, res.rows[5])
			results[f] = res
		})
	}
	a, p := results[FormatArrow], results[FormatParquet]
	if a.rows != nil && p.rows != nil && !reflect.DeepEqual(a.rows, p.rows) {
		for i := range a.rows {
			for k := range a.rows[i] {
				if !reflect.DeepEqual(a.rows[i][k], p.rows[i][k]) {
					t.Errorf("row %d column %s: arrow %#v, parquet %#v", i, k, a.rows[i][k], p.rows[i][k])
				}
			}
		}
	}
}

// checkSchema checks a schema read back: identical for Arrow; for Parquet
// the same names, types and nullability, as pqarrow's reader adds field_id
// metadata and names some list elements "list".
func checkSchema(t *testing.T, f Format, got *arrow.Schema) {
	t.Helper()
	if f == FormatArrow {
		if !got.Equal(Schema()) {
			t.Errorf("schema read back differs:\n got %v\nwant %v", got, Schema())
		}
		return
	}
	if g, w := schemaSig(got), schemaSig(Schema()); g != w {
		t.Errorf("schema read back differs:\n got %s\nwant %s", g, w)
	}
	if v, ok := got.Metadata().GetValue(schemaVersionKey); !ok || v != SchemaVersion {
		t.Errorf("schema metadata %s = %q, %v", schemaVersionKey, v, ok)
	}
}

func schemaSig(s *arrow.Schema) string {
	var b strings.Builder
	for _, f := range s.Fields() {
		b.WriteString(fieldSig(f) + "; ")
	}
	return b.String()
}

func fieldSig(f arrow.Field) string {
	n := ""
	if f.Nullable {
		n = "?"
	}
	return f.Name + n + ":" + typeSig(f.Type)
}

func typeSig(dt arrow.DataType) string {
	switch dt := dt.(type) {
	case *arrow.MapType:
		return "map<" + typeSig(dt.KeyType()) + "," + fieldSig(dt.ItemField()) + ">"
	case *arrow.ListType:
		return "list<" + fieldSig(arrow.Field{Type: dt.Elem(), Nullable: dt.ElemField().Nullable}) + ">"
	case *arrow.StructType:
		var parts []string
		for _, f := range dt.Fields() {
			parts = append(parts, fieldSig(f))
		}
		return "struct<" + strings.Join(parts, ",") + ">"
	}
	return dt.String()
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

func checkSample(t *testing.T, i int, ft *braidpb.FusedTrace, row map[string]any) {
	t.Helper()
	start := int64(ft.GetStartTimeUnixNano())
	eq(t, "trace_id", row["trace_id"], hex.EncodeToString(traceID(i)))
	if i == 0 {
		eq(t, "trace_id literal", row["trace_id"], "abcd0000000000001f2e3d4c00000000")
	}
	eq(t, "revision", row["revision"], uint32(i%3))
	eq(t, "start_time", row["start_time"], start)
	eq(t, "end_time", row["end_time"], start+420_000_000)
	eq(t, "watermark", row["watermark"], start+30_000_000_000)
	eq(t, "span_count", row["span_count"], uint32(3+i))
	eq(t, "log_count", row["log_count"], uint32(2))
	eq(t, "point_count", row["point_count"], uint32(2))
	eq(t, "root_span_name", row["root_span_name"], "llm_request")
	eq(t, "root_service_name", row["root_service_name"], "vllm")
	eq(t, "duration_ns", row["duration_ns"], int64(420_000_000))
	eq(t, "error_span_count", row["error_span_count"], uint32(1))
	eq(t, "dropped_spans", row["dropped_spans"], uint32(0))
	eq(t, "dropped_logs", row["dropped_logs"], uint32(4))
	eq(t, "dropped_points", row["dropped_points"], uint32(0))
	eq(t, "flags", row["flags"], []any{"ERROR", "REVISED"})

	res := row["resources"].([]any)
	eq(t, "len(resources)", len(res), 2)
	r0 := res[0].(map[string]any)["attributes"]
	r1 := res[1].(map[string]any)["attributes"]
	eq(t, "resources[0] service.name", lookup(t, r0, "service.name"), "vllm")
	eq(t, "resources[0] host.name", lookup(t, r0, "host.name"), "gpu-node-"+string(rune('0'+i%4)))
	eq(t, "resources[0] process.pid", lookup(t, r0, "process.pid"), "4242")
	eq(t, "resources[1] gpu.uuid", lookup(t, r1, "gpu.uuid"), "GPU-0f1e2d3c-0000-1111-2222-333344445555")

	spans := row["spans"].([]any)
	eq(t, "len(spans)", len(spans), 3+i)
	s0 := spans[0].(map[string]any)
	eq(t, "spans[0].name", s0["name"], "llm_request")
	eq(t, "spans[0].span_id", s0["span_id"], hex.EncodeToString(spanID(i, 0)))
	eq(t, "spans[0].parent_span_id", s0["parent_span_id"], nil)
	eq(t, "spans[0].kind", s0["kind"], "SERVER")
	eq(t, "spans[0].start_time", s0["start_time"], start)
	eq(t, "spans[0].end_time", s0["end_time"], start+420_000_000)
	eq(t, "spans[0].duration_ns", s0["duration_ns"], int64(420_000_000))
	eq(t, "spans[0].status_code", s0["status_code"], int32(2))
	eq(t, "spans[0].status_message", s0["status_message"], "CUDA out of memory")
	eq(t, "spans[0].resource_index", s0["resource_index"], uint32(0))
	eq(t, "spans[0].scope_name", s0["scope_name"], "vllm")
	eq(t, "spans[0].origin_topic", s0["origin_topic"], "otlp_spans")
	eq(t, "spans[0].origin_partition", s0["origin_partition"], int32(3))
	eq(t, "spans[0].origin_offset", s0["origin_offset"], int64(1000*i))
	a := s0["attributes"]
	eq(t, "gen_ai.request.id", lookup(t, a, "gen_ai.request.id"), "cmpl-"+string(rune('0'+i)))
	eq(t, "gen_ai.usage.prompt_tokens", lookup(t, a, "gen_ai.usage.prompt_tokens"), "512")
	eq(t, "gen_ai.request.temperature", lookup(t, a, "gen_ai.request.temperature"), "0.7")
	eq(t, "gen_ai.request.stream", lookup(t, a, "gen_ai.request.stream"), "true")
	eq(t, "gen_ai.request.stop", lookup(t, a, "gen_ai.request.stop"), `["</s>","\n"]`)
	events := s0["events"].([]any)
	eq(t, "len(events)", len(events), 2)
	ev1 := events[1].(map[string]any)
	eq(t, "events[1].name", ev1["name"], "exception")
	eq(t, "events[1].time", ev1["time"], start+419_000_000)
	eq(t, "events[1] exception.type", lookup(t, ev1["attributes"], "exception.type"), "torch.OutOfMemoryError")
	s1 := spans[1].(map[string]any)
	eq(t, "spans[1].name", s1["name"], "llm.step.1")
	eq(t, "spans[1].kind", s1["kind"], "INTERNAL")
	eq(t, "spans[1].parent_span_id", s1["parent_span_id"], hex.EncodeToString(spanID(i, 0)))
	eq(t, "spans[1].status_code", s1["status_code"], int32(0))
	eq(t, "spans[1].events", s1["events"], []any{})
	eq(t, "spans[1] layer_id", lookup(t, s1["attributes"], "layer_id"), "1")

	logs := row["logs"].([]any)
	eq(t, "len(logs)", len(logs), 2)
	l0, l1 := logs[0].(map[string]any), logs[1].(map[string]any)
	eq(t, "logs[0].body", l0["body"], "Finished request cmpl-"+string(rune('0'+i)))
	eq(t, "logs[0].time", l0["time"], start+420_000_000)
	eq(t, "logs[0].observed_time", l0["observed_time"], start+421_000_000)
	eq(t, "logs[0].severity_number", l0["severity_number"], int32(9))
	eq(t, "logs[0].severity_text", l0["severity_text"], "INFO")
	eq(t, "logs[0].span_id", l0["span_id"], hex.EncodeToString(spanID(i, 0)))
	eq(t, "logs[0] code.function", lookup(t, l0["attributes"], "code.function"), "engine.step")
	eq(t, "logs[0].origin_offset", l0["origin_offset"], int64(77+i))
	eq(t, "logs[1].time", l1["time"], nil)
	eq(t, "logs[1].span_id", l1["span_id"], nil)
	eq(t, "logs[1].severity_text", l1["severity_text"], "ERROR")
	body, _ := l1["body"].(string)
	eq(t, "logs[1].body", body, `{"msg":"oom","free_mib":12,"tags":["a",false]}`)
	var js map[string]any
	if err := json.Unmarshal([]byte(body), &js); err != nil || js["msg"] != "oom" {
		t.Errorf("kvlist body %q is not the JSON object: %v", body, err)
	}

	points := row["points"].([]any)
	eq(t, "len(points)", len(points), 2)
	p0, p1 := points[0].(map[string]any), points[1].(map[string]any)
	eq(t, "points[0].metric_name", p0["metric_name"], "vllm:e2e_request_latency_seconds")
	eq(t, "points[0].unit", p0["unit"], "s")
	eq(t, "points[0].type", p0["type"], "Histogram")
	eq(t, "points[0].time", p0["time"], start+500_000_000)
	eq(t, "points[0].value", p0["value"], 0.42)
	eq(t, "points[0].count", p0["count"], uint64(3))
	eq(t, "points[0].exemplar_value", p0["exemplar_value"], 0.42)
	eq(t, "points[0] model_name", lookup(t, p0["attributes"], "model_name"), "llama")
	eq(t, "points[0].scope_name", p0["scope_name"], "prometheus")
	eq(t, "points[1].type", p1["type"], "Gauge")
	eq(t, "points[1].value", p1["value"], 97.0)
	eq(t, "points[1].count", p1["count"], uint64(0))
	eq(t, "points[1].exemplar_value", p1["exemplar_value"], 97.0)
	eq(t, "points[1].resource_index", p1["resource_index"], uint32(1))
	eq(t, "points[1].origin_partition", p1["origin_partition"], int32(1))
	eq(t, "points[1].attributes", p1["attributes"], []kvPair{})
}

func checkOdd(t *testing.T, row map[string]any) {
	t.Helper()
	eq(t, "trace_id", row["trace_id"], "ffee")
	for _, c := range []string{"start_time", "end_time", "watermark"} {
		eq(t, c, row[c], nil)
	}
	eq(t, "span_count", row["span_count"], uint32(0))
	eq(t, "root_span_name", row["root_span_name"], "")
	eq(t, "duration_ns (saturated)", row["duration_ns"], int64(math.MaxInt64))
	eq(t, "flags", row["flags"], []any{"NO_ROOT_SPAN", "99"})
	res := row["resources"].([]any)
	eq(t, "resources[0]", res[0], map[string]any{"attributes": []kvPair{}})
	eq(t, "resources[1]", res[1], map[string]any{"attributes": []kvPair{
		{"empty", nil},
		{"empty2", nil},
		{"bad\uFFFDkey", "bad\uFFFDvalue"},
		{"bytes", "AAEC/w=="},
		{"nan", "NaN"},
		{"inf_in_array", `["-Infinity",1e+21,-3,null,"q\"\\\u0001\u2028é"]`},
	}})
	var arr []any
	if err := json.Unmarshal([]byte(lookup(t, res[1].(map[string]any)["attributes"], "inf_in_array").(string)), &arr); err != nil {
		t.Errorf("array attribute is not JSON: %v", err)
	} else {
		eq(t, "array attribute decoded", arr, []any{"-Infinity", 1e21, -3.0, nil, "q\"\\\x01\u2028é"})
	}

	spans := row["spans"].([]any)
	eq(t, "spans[0]", spans[0], map[string]any{
		"span_id": nil, "parent_span_id": nil, "name": "", "kind": "UNSPECIFIED",
		"start_time": nil, "end_time": nil, "duration_ns": nil, "status_code": int32(0),
		"status_message": "", "attributes": []kvPair{}, "resource_index": uint32(0), "scope_name": "",
		"origin_topic": nil, "origin_partition": nil, "origin_offset": nil, "events": []any{},
	})
	s1 := spans[1].(map[string]any)
	eq(t, "spans[1].kind", s1["kind"], "42")
	eq(t, "spans[1].start_time", s1["start_time"], int64(5))
	eq(t, "spans[1].duration_ns", s1["duration_ns"], nil)

	logs := row["logs"].([]any)
	eq(t, "logs[0].body", logs[0].(map[string]any)["body"], "7")
	eq(t, "logs[1]", logs[1], map[string]any{
		"time": nil, "observed_time": nil, "severity_number": int32(0), "severity_text": "",
		"body": nil, "event_name": "", "span_id": nil, "attributes": []kvPair{}, "resource_index": uint32(0),
		"scope_name": "", "origin_topic": nil, "origin_partition": nil, "origin_offset": nil,
	})
	points := row["points"].([]any)
	eq(t, "points[0]", points[0], map[string]any{
		"metric_name": "nodata", "unit": "", "type": nil, "time": nil, "value": nil, "count": uint64(0),
		"exemplar_value": nil, "attributes": []kvPair{}, "resource_index": uint32(0), "scope_name": "",
		"origin_topic": nil, "origin_partition": nil, "origin_offset": nil,
	})
	eq(t, "points[1].metric_name", points[1].(map[string]any)["metric_name"], "")
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	traces := testTraces()
	for _, name := range []string{"fused.arrow", "fused.feather", "fused.parquet"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			f, err := FormatForPath(path)
			if err != nil {
				t.Fatal(err)
			}
			w, err := Create(path, f)
			if err != nil {
				t.Fatal(err)
			}
			if w.Format() != f {
				t.Fatalf("Format() = %v", w.Format())
			}
			for _, ft := range traces {
				if err := w.Write(ft); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Close is idempotent; Write after Close fails.
			if err := w.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := w.Write(traces[0]); !errors.Is(err, ErrClosed) {
				t.Fatalf("Write after Close = %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Create and NewWriter write the same bytes.
			if want := writeAll(t, f, BatchRows, traces); !bytes.Equal(got, want) {
				t.Fatalf("Create wrote %d bytes, NewWriter %d; they differ", len(got), len(want))
			}
			res := read(t, f, path)
			if len(res.rows) != len(traces) || res.batches != 1 {
				t.Fatalf("%d rows in %d batches", len(res.rows), res.batches)
			}
			checkSample(t, 2, traces[2], res.rows[2])
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, f := range []Format{FormatArrow, FormatParquet} {
		t.Run("format="+f.String(), func(t *testing.T) {
			for _, batch := range []int{7, BatchRows} {
				// Fresh, equal messages each time.
				var traces1, traces2 []*braidpb.FusedTrace
				for i := 0; i < 50; i++ {
					traces1 = append(traces1, sampleTrace(i, 1+i%7))
					traces2 = append(traces2, sampleTrace(i, 1+i%7))
				}
				a := writeAll(t, f, batch, traces1)
				b := writeAll(t, f, batch, traces2)
				if !bytes.Equal(a, b) {
					t.Fatalf("batch %d: two writes of the same traces differ (%d and %d bytes)", batch, len(a), len(b))
				}
			}
		})
	}
}

func TestEmptyFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []Format{FormatArrow, FormatParquet} {
		t.Run("format="+f.String(), func(t *testing.T) {
			path := filepath.Join(dir, "empty."+f.String())
			w, err := Create(path, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			res := read(t, f, path)
			if len(res.rows) != 0 || res.batches != 0 {
				t.Fatalf("%d rows in %d batches, want none", len(res.rows), res.batches)
			}
			checkSchema(t, f, res.schema)
			if b := writeAll(t, f, BatchRows, nil); !bytes.Equal(b, mustRead(t, path)) {
				t.Fatal("empty files differ")
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

func TestWriteErrors(t *testing.T) {
	for _, f := range []Format{FormatArrow, FormatParquet} {
		t.Run("format="+f.String(), func(t *testing.T) {
			w, err := NewWriter(&failWriter{}, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(nil); err == nil {
				t.Fatal("Write(nil) succeeded")
			}
			for i := 0; i < 3; i++ {
				if err := w.Write(sampleTrace(i, 2)); err != nil {
					t.Fatal(err) // buffered: nothing is written yet
				}
			}
			err = w.Close()
			if err == nil || !strings.Contains(err.Error(), "disk full") {
				t.Fatalf("Close = %v, want the write error", err)
			}
			if err2 := w.Close(); err2 != err {
				t.Fatalf("second Close = %v, want %v", err2, err)
			}
		})
	}
	if _, err := Create(filepath.Join(t.TempDir(), "no", "such", "dir.arrow"), FormatArrow); err == nil {
		t.Fatal("Create in a missing directory succeeded")
	}
}

func TestRenderAny(t *testing.T) {
	for _, c := range []struct {
		v    *commonpb.AnyValue
		want string
	}{
		{iv(-42), "-42"},
		{dv(0.1), "0.1"},
		{dv(3), "3"},
		{dv(1e-7), "1e-07"},
		{dv(math.Inf(1)), "+Inf"},
		{bv(false), "false"},
		{av(), "[]"},
		{kvl(), "{}"},
		{kvl(kv("a", av(iv(1), dv(math.NaN()))), kv("b\n", kvl(kv("c", nil)))), `{"a":[1,"NaN"],"b\n":{"c":null}}`},
		{av(sv("<&>"), &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte("hi")}}), `["<&>","aGk="]`},
	} {
		if got := string(renderScalar(nil, c.v)); got != c.want {
			t.Errorf("render(%v) = %s, want %s", c.v, got, c.want)
		}
	}
}

// TestFileSizes logs the file sizes for 1000 realistic rows (8 spans, 2
// logs, 2 points each).
func TestFileSizes(t *testing.T) {
	var traces []*braidpb.FusedTrace
	for i := 0; i < 1000; i++ {
		traces = append(traces, sampleTrace(i, 8))
	}
	t0 := time.Now()
	a := writeAll(t, FormatArrow, BatchRows, traces)
	t1 := time.Now()
	p := writeAll(t, FormatParquet, BatchRows, traces)
	t2 := time.Now()
	t.Logf("1000 rows written in: arrow %v, parquet %v", t1.Sub(t0), t2.Sub(t1))
	var pb int
	for _, ft := range traces {
		b, _ := protoSize(ft)
		pb += b
	}
	t.Logf("1000 rows: arrow %d bytes, parquet %d bytes, protobuf %d bytes", len(a), len(p), pb)
	if len(p) >= len(a) {
		t.Errorf("parquet (%d) is not smaller than arrow (%d)", len(p), len(a))
	}
}
