package otlp

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonMaxDepth bounds the nesting of JSON containers, as protojson does.
const jsonMaxDepth = 10000

// decodeJSON decodes an OTLP/JSON value: it turns the hex ids into the
// base64 protojson expects (validating them), unmarshals with protojson,
// re-encodes the message as protobuf into d.arena and walks that exactly as
// the protobuf path walks a value.
func (d *Decoder) decodeJSON(sig Signal, value []byte) *DecodeError {
	var err *DecodeError
	d.jbuf, err = d.rewriteIDs(d.jbuf[:0], value)
	if err != nil {
		return err
	}
	var m proto.Message
	switch sig {
	case SignalSpans:
		if d.traces == nil {
			d.traces = new(tracepb.TracesData)
		}
		m = d.traces
	case SignalLogs:
		if d.logs == nil {
			d.logs = new(logspb.LogsData)
		}
		m = d.logs
	default:
		if d.metrics == nil {
			d.metrics = new(metricspb.MetricsData)
		}
		m = d.metrics
	}
	if uerr := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(d.jbuf, m); uerr != nil {
		return &DecodeError{Reason: "invalid OTLP/JSON: " + uerr.Error(), Offset: -1}
	}
	arena, merr := proto.MarshalOptions{}.MarshalAppend(d.arena[:0], m)
	proto.Reset(m) // drop references to the decoded data
	if merr != nil {
		return &DecodeError{Reason: "re-encoding as protobuf: " + merr.Error(), Offset: -1}
	}
	d.arena = arena
	if len(arena) == 0 {
		return &DecodeError{Reason: "no " + jsonDataField[sig] + " (wrong message type?)", Offset: -1}
	}
	d.base = arena
	if err := d.walkData(sig, arena); err != nil {
		err.Offset = -1 // an offset into the re-encoded message means nothing to the caller
		return err
	}
	return nil
}

var jsonDataField = [...]string{SignalSpans: "resourceSpans", SignalLogs: "resourceLogs", SignalMetrics: "resourceMetrics"}

// idLen returns the byte length of the id held by the JSON member named key
// (16 for trace ids, 8 for span ids), or 0 if key does not name an id. In
// OTLP/JSON (traces, logs, metrics) these names occur only as fields of Span,
// Span.Link, LogRecord and Exemplar, and all of them hold ids.
func idLen(key []byte) int {
	switch string(key) {
	case "traceId", "trace_id":
		return 16
	case "spanId", "span_id", "parentSpanId", "parent_span_id":
		return 8
	}
	return 0
}

// rewriteIDs appends to dst the JSON text in, with the value of every member
// that idLen recognizes turned from hex into base64. It checks the JSON
// structure as it goes (protojson checks the rest: literals, numbers, UTF-8).
func (d *Decoder) rewriteIDs(dst, in []byte) ([]byte, *DecodeError) {
	const (
		stValue = iota // a value is expected
		stKey          // an object key is expected
		stAfter        // a value has ended
	)
	fail := func(i int, reason string) ([]byte, *DecodeError) {
		if i >= len(in) {
			return dst, &DecodeError{Reason: "invalid JSON: unexpected end of input", Offset: len(in)}
		}
		return dst, &DecodeError{Reason: "invalid JSON: " + reason, Offset: i}
	}
	stack := d.jstack[:0]
	defer func() { d.jstack = stack[:0] }()
	last := 0    // in[last:] is not copied to dst yet
	pending := 0 // the value being read belongs to an id member of this length
	state := stValue
	i := 0
	for {
		for i < len(in) && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r') {
			i++
		}
		switch state {
		case stValue:
			if i >= len(in) {
				return fail(i, "")
			}
			idl := pending
			pending = 0
			switch c := in[i]; c {
			case '{', '[':
				if len(stack) >= jsonMaxDepth {
					return fail(i, "nested too deeply")
				}
				stack = append(stack, c)
				i++
				for i < len(in) && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r') {
					i++
				}
				if i < len(in) && in[i] == c+2 { // '}' == '{'+2, ']' == '['+2
					stack = stack[:len(stack)-1]
					i++
					state = stAfter
				} else if c == '{' {
					state = stKey
				}
			case '"':
				j, escaped, ok := scanJSONString(in, i)
				if !ok {
					return fail(j, "invalid string")
				}
				if idl != 0 {
					var err *DecodeError
					dst, err = appendIDBase64(append(dst, in[last:i]...), in[i:j], escaped, idl)
					if err != nil {
						err.Offset = i
						return dst, err
					}
					last = j
				}
				i = j
				state = stAfter
			default:
				// Number or literal: protojson validates it.
				j := i
				for j < len(in) && isLiteralByte(in[j]) {
					j++
				}
				if j == i {
					return fail(i, "unexpected character "+strconv.QuoteRune(rune(in[i])))
				}
				i = j
				state = stAfter
			}
		case stKey:
			if i >= len(in) || in[i] != '"' {
				return fail(i, "object key expected")
			}
			j, escaped, ok := scanJSONString(in, i)
			if !ok {
				return fail(j, "invalid string")
			}
			key := in[i+1 : j-1]
			if escaped {
				var s string
				if json.Unmarshal(in[i:j], &s) != nil {
					return fail(i, "invalid string")
				}
				key = []byte(s)
			}
			pending = idLen(key)
			i = j
			for i < len(in) && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r') {
				i++
			}
			if i >= len(in) || in[i] != ':' {
				return fail(i, "':' expected after object key")
			}
			i++
			state = stValue
		case stAfter:
			if len(stack) == 0 {
				if i != len(in) {
					return fail(i, "data after the top-level value")
				}
				return append(dst, in[last:]...), nil
			}
			if i >= len(in) {
				return fail(i, "")
			}
			top := stack[len(stack)-1]
			switch c := in[i]; {
			case c == ',':
				i++
				if top == '{' {
					state = stKey
				} else {
					state = stValue
				}
			case c == top+2:
				stack = stack[:len(stack)-1]
				i++
			default:
				return fail(i, "',' or '"+string(rune(top+2))+"' expected")
			}
		}
	}
}

func isLiteralByte(c byte) bool {
	return c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// scanJSONString scans the string starting with the quote at in[i]. It
// returns the index after the closing quote and whether it holds escapes;
// if the string is invalid, ok is false and end is where it went wrong.
func scanJSONString(in []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(in); j++ {
		switch c := in[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			j++
			if j >= len(in) {
				return j, escaped, false
			}
			switch in[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(in) {
					return len(in), escaped, false
				}
				for _, h := range in[j+1 : j+5] {
					if !isHex(h) {
						return j, escaped, false
					}
				}
				j += 4
			default:
				return j, escaped, false
			}
		case c < 0x20:
			return j, escaped, false
		}
	}
	return len(in), escaped, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// appendIDBase64 appends the quoted JSON string q (with escapes if escaped),
// a hex id of n bytes, as a quoted base64 string. An empty string stays
// empty (an absent id).
func appendIDBase64(dst, q []byte, escaped bool, n int) ([]byte, *DecodeError) {
	s := q[1 : len(q)-1]
	if escaped {
		var str string
		if json.Unmarshal(q, &str) != nil {
			return dst, &DecodeError{Reason: "invalid JSON string"}
		}
		s = []byte(str)
	}
	if len(s) == 0 {
		return append(dst, `""`...), nil
	}
	var id [16]byte
	if len(s) != 2*n {
		return dst, &DecodeError{Reason: "id " + strconv.Quote(string(s)) + " is " + strconv.Itoa(len(s)) + " characters, want " + strconv.Itoa(2*n) + " hex digits"}
	}
	if _, err := hex.Decode(id[:n], s); err != nil {
		return dst, &DecodeError{Reason: "id " + strconv.Quote(string(s)) + " is not hex"}
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, id[:n])
	return append(dst, '"'), nil
}
