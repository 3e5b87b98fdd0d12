package otlp

import (
	"errors"
	"strconv"
)

// Signal is the kind of telemetry a message carries.
type Signal uint8

// The three OTLP signals braid reads.
const (
	SignalSpans Signal = iota + 1
	SignalLogs
	SignalMetrics
)

// String returns "spans", "logs" or "metrics".
func (s Signal) String() string {
	switch s {
	case SignalSpans:
		return "spans"
	case SignalLogs:
		return "logs"
	case SignalMetrics:
		return "metrics"
	}
	return "Signal(" + strconv.Itoa(int(s)) + ")"
}

// Encoding is the encoding of a Kafka record value, as named in the
// Collector's Kafka exporter configuration.
type Encoding uint8

// The encodings every signal supports.
const (
	EncodingProto Encoding = iota + 1 // "otlp_proto": binary protobuf
	EncodingJSON                      // "otlp_json": OTLP/JSON
)

// ParseEncoding parses "otlp_proto" or "otlp_json".
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "otlp_proto":
		return EncodingProto, nil
	case "otlp_json":
		return EncodingJSON, nil
	}
	return 0, errors.New("otlp: unknown encoding " + strconv.Quote(s) + " (want otlp_proto or otlp_json)")
}

// String returns "otlp_proto" or "otlp_json".
func (e Encoding) String() string {
	switch e {
	case EncodingProto:
		return "otlp_proto"
	case EncodingJSON:
		return "otlp_json"
	}
	return "Encoding(" + strconv.Itoa(int(e)) + ")"
}

// PointType is the data field of a Metric that holds the point. Its values
// are the field numbers of the Metric's data oneof.
type PointType uint8

// Point types.
const (
	PointGauge        PointType = 5  // Gauge, NumberDataPoint
	PointSum          PointType = 7  // Sum, NumberDataPoint
	PointHistogram    PointType = 9  // Histogram, HistogramDataPoint
	PointExpHistogram PointType = 10 // ExponentialHistogram, ExponentialHistogramDataPoint
	PointSummary      PointType = 11 // Summary, SummaryDataPoint
)

// String returns the pdata name of the type: "Gauge", "Sum", "Histogram",
// "ExponentialHistogram" or "Summary".
func (p PointType) String() string {
	switch p {
	case PointGauge:
		return "Gauge"
	case PointSum:
		return "Sum"
	case PointHistogram:
		return "Histogram"
	case PointExpHistogram:
		return "ExponentialHistogram"
	case PointSummary:
		return "Summary"
	}
	return "PointType(" + strconv.Itoa(int(p)) + ")"
}

// Item is one span, log record or metric data point cut out of a message.
//
// All byte slices alias the decoded message (proto) or the Decoder's arena
// (JSON): they are valid until the next call of Decode on the same Decoder;
// copy to retain. Their capacity equals their length.
type Item struct {
	Signal Signal
	// TraceID is zero when the item has no trace id (a log without one; a
	// metric point without exemplar trace ids).
	TraceID [16]byte
	// SpanID is the span's id, the log record's span id, or the span id of
	// the first exemplar with TraceID (zero if absent).
	SpanID [8]byte
	// ParentSpanID is set for spans only; zero for a root span.
	ParentSpanID [8]byte
	// Time is the event time in unix ns: span end_time_unix_nano; log
	// time_unix_nano, or observed_time_unix_nano if that is 0; point
	// time_unix_nano.
	Time int64
	// StartTime is the span's start_time_unix_nano, the point's
	// start_time_unix_nano, and for logs the same as Time.
	StartTime int64
	// Resource is the serialized opentelemetry.proto.resource.v1.Resource
	// (protobuf wire bytes; may be empty).
	Resource []byte
	// Scope is the serialized InstrumentationScope (may be empty).
	Scope []byte
	// Payload is the serialized Span, LogRecord or data point message
	// (NumberDataPoint, HistogramDataPoint, ExponentialHistogramDataPoint,
	// SummaryDataPoint).
	Payload []byte
	// Name is the span name, or the metric name for points; nil for logs.
	Name []byte
	// StatusCode is the span's status.code (0 unset, 1 ok, 2 error).
	StatusCode int32

	// Metrics only.
	MetricDescription []byte
	MetricUnit        []byte
	PointType         PointType
	Temporality       int32 // aggregation_temporality of sum/histogram/exponential histogram
	Monotonic         bool  // sum.is_monotonic

	// Resource and Payload as the message held them, when the decoder
	// repaired invalid UTF-8 in them (see Original); nil when it did not.
	origResource, origPayload []byte
}

// Repaired reports whether the decoder re-encoded the item's Resource or
// Payload because a string in it was not valid UTF-8.
func (it *Item) Repaired() bool { return it.origResource != nil || it.origPayload != nil }

// Original returns the item's Resource and Payload as the message held
// them, before any repair: Resource and Payload themselves unless Repaired.
// They alias the message like the other slices (nothing is copied) and may
// hold invalid UTF-8: they are for a consumer that must not take a repaired
// string as it came (an identity that repair could merge with another) and
// for dead-letter copies of the input as it was read.
func (it *Item) Original() (resource, payload []byte) {
	resource, payload = it.Resource, it.Payload
	if it.origResource != nil {
		resource = it.origResource
	}
	if it.origPayload != nil {
		payload = it.origPayload
	}
	return resource, payload
}

// DecodeError reports a message that cannot be decoded.
type DecodeError struct {
	Signal   Signal
	Encoding Encoding
	Reason   string
	// Offset is the byte offset into the value where decoding went wrong,
	// or -1 if unknown. For a malformed field it is the field's tag; for an
	// invalid id on the protobuf path, the start of the Span, LogRecord or
	// Exemplar message; on the JSON path, the id's string. Errors found by
	// protojson or in the re-encoded message have no offset.
	Offset int
}

// Error returns "otlp: decode spans (otlp_proto): <reason> at byte N"
// (without " at byte N" when the offset is unknown).
func (e *DecodeError) Error() string {
	s := "otlp: decode " + e.Signal.String() + " (" + e.Encoding.String() + "): " + e.Reason
	if e.Offset >= 0 {
		s += " at byte " + strconv.Itoa(e.Offset)
	}
	return s
}
