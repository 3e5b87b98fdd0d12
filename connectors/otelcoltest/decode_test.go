package otelcoltest

import (
	"encoding/hex"
	"strings"
	"testing"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// A line in the file exporter's shape: hex ids, the span kind as a number,
// 64-bit integers as strings, an empty status.
const traceLine = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},` +
	`"scopeSpans":[{"scope":{"name":"s"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",` +
	`"parentSpanId":"eee19b7ec3c1b173","traceState":"a=b","name":"llm.request","kind":2,"startTimeUnixNano":"1544712660000000000",` +
	`"endTimeUnixNano":"1544712661000000000","attributes":[{"key":"traceId","value":{"stringValue":"not an id"}},` +
	`{"key":"n","value":{"intValue":"42"}}],"links":[{"traceId":"00000000000000000000000000000001","spanId":"0000000000000002"}],` +
	`"status":{}}]}]}]}`

const logLine = `{"resourceLogs":[{"resource":{},"scopeLogs":[{"scope":{},"logRecords":[{"timeUnixNano":"1","severityNumber":13,` +
	`"body":{"stringValue":"hi"},"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174"},` +
	`{"body":{"stringValue":"no trace"},"traceId":"","spanId":""}]}]}]}`

func TestDecodeJSON(t *testing.T) {
	var td tracepb.TracesData
	if err := DecodeJSON([]byte(traceLine), &td); err != nil {
		t.Fatal(err)
	}
	s := td.ResourceSpans[0].ScopeSpans[0].Spans[0]
	for name, c := range map[string]struct {
		got  []byte
		want string
	}{
		"traceId":      {s.TraceId, "5b8efff798038103d269b633813fc60c"},
		"spanId":       {s.SpanId, "eee19b7ec3c1b174"},
		"parentSpanId": {s.ParentSpanId, "eee19b7ec3c1b173"},
		"link traceId": {s.Links[0].TraceId, "00000000000000000000000000000001"},
		"link spanId":  {s.Links[0].SpanId, "0000000000000002"},
	} {
		if hex.EncodeToString(c.got) != c.want {
			t.Errorf("%s = %x, want %s", name, c.got, c.want)
		}
	}
	if s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.TraceState != "a=b" || s.StartTimeUnixNano != 1544712660000000000 || s.Status == nil {
		t.Errorf("span: kind %v trace_state %q start %d status %v", s.Kind, s.TraceState, s.StartTimeUnixNano, s.Status)
	}
	// An attribute whose key is "traceId" is a key, not an id field.
	if v := s.Attributes[0].Value.GetStringValue(); v != "not an id" || s.Attributes[1].Value.GetIntValue() != 42 {
		t.Errorf("attributes: %v", s.Attributes)
	}

	var ld logspb.LogsData
	if err := DecodeJSON([]byte(logLine), &ld); err != nil {
		t.Fatal(err)
	}
	rs := ld.ResourceLogs[0].ScopeLogs[0].LogRecords
	if hex.EncodeToString(rs[0].TraceId) != "5b8efff798038103d269b633813fc60c" || len(rs[1].TraceId) != 0 || rs[0].SeverityNumber != logspb.SeverityNumber_SEVERITY_NUMBER_WARN {
		t.Errorf("log records: %v", rs)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for name, line := range map[string]string{
		"not json":      `{"resourceSpans":`,
		"id not hex":    strings.Replace(traceLine, "eee19b7ec3c1b174", "zzz19b7ec3c1b174", 1),
		"unknown field": strings.Replace(traceLine, `"status":{}`, `"status":{},"color":"red"`, 1),
	} {
		if err := DecodeJSON([]byte(line), new(tracepb.TracesData)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
