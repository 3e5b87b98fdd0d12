// Package otlp is the hot-path decoder of braid's Kafka connector: it cuts
// the OTLP messages that the OpenTelemetry Collector's Kafka exporter writes
// to the topics otlp_spans, otlp_logs and otlp_metrics into Items, one per
// span, log record or metric data point.
//
// # What it decodes
//
// A Kafka record value is one serialized TracesData, LogsData or MetricsData
// (the same bytes as the matching Export*ServiceRequest), either as binary
// protobuf ("otlp_proto") or as OTLP/JSON ("otlp_json": hex trace and span
// ids, 64-bit integers as decimal strings, enums as integers, lowerCamelCase
// keys; snake_case keys, integers given as numbers and enum names are
// accepted too, as protojson accepts them).
//
// Only what routing and joining need is decoded: trace, span and parent span
// ids, times, span names and status codes, metric name, description, unit,
// point type, temporality and monotonicity, and exemplar trace ids. The rest
// of each span, log record or data point is handed on, undecoded, as the
// serialized message in Item.Payload, together with the serialized Resource
// and InstrumentationScope it belongs to.
//
// The protobuf path is a hand-written scanner over the wire format (the
// fields read with package wire, below this one): fields may come in any
// order (the Collector writes them in reverse order), unknown fields are
// skipped, a repeated occurrence of a scalar field wins over earlier ones,
// the last occurrence of resource and scope is used, repeated status
// messages merge, and the point oneof of a Metric follows proto3 oneof
// semantics (a later member replaces an earlier one; repeated occurrences of
// the same member merge). Every message level the scanner walks (the
// top-level message, Resource*, Scope*, Resource, InstrumentationScope, Span,
// Status, LogRecord, Metric, its data message, data points and Exemplar) is
// checked field by field: lengths must fit and every known field must have
// its declared wire type. Deeper content (attributes, events, links, log
// bodies, buckets) is not walked; it is passed on inside Payload/Resource/
// Scope as opaque bytes.
//
// A metric data point belongs to a trace through the trace ids of its
// exemplars: a point yields one Item per distinct exemplar trace id, in
// order of first appearance, or a single Item with a zero TraceID when it
// has none. Items of one point share the same Payload.
//
// # Zero-copy contract
//
// On the protobuf path nothing is copied: every byte slice in an Item
// (Resource, Scope, Payload, Name, MetricDescription, MetricUnit) aliases
// the value passed to Decode. On the JSON path the message is decoded with
// protojson (after hex ids have been turned into the base64 protojson
// expects) and re-encoded as protobuf into an arena owned by the Decoder, so
// the Items look exactly as on the protobuf path but alias the arena. In
// both cases the returned slice of Items and all byte slices are valid only
// until the next call of Decode on the same Decoder; copy what you retain.
// The byte slices have their capacity clipped to their length, so appending
// to one never overwrites the message. A Decoder is not safe for concurrent
// use; keep one per goroutine and reuse it: in steady state the protobuf path
// allocates nothing.
//
// # UTF-8
//
// Every string field an Item's bytes hold (span name, trace state, status
// message, attribute keys and values at any depth, event and link
// attributes, log severity text, body and event name, resource and scope
// attributes, scope name and version, metric name, description and unit)
// is checked. A member, resource or scope with invalid UTF-8 in one is
// re-encoded with each invalid sequence replaced by U+FFFD, into a fresh
// buffer (the exception to the zero-copy rule; Decoder.Repaired counts
// them), so that every Item's bytes unmarshal with proto.Unmarshal.
// Item.Repaired reports a repair of an item's Resource or Payload, and
// Item.Original returns them as the message held them (aliasing it, not
// copied), for a consumer that must reject a string that was invalid
// rather than take it repaired, and for dead-letter copies as read.
//
// # Error contract
//
// Decode never panics and never returns partial output. A value that cannot
// be decoded gives nil Items and a *DecodeError that names the signal, the
// encoding, the reason and, where known, the byte offset into the value.
// Errors are: an empty value; truncated or otherwise malformed protobuf; a
// known field with the wrong wire type (typically a message of another
// signal); a malformed attribute, or attribute values nested more than
// MaxNesting messages deep; invalid JSON; a message with content but without any of its
// top-level field (resource_spans / resource_logs / resource_metrics: most
// likely a message of another type); a span whose trace id is not 16 bytes
// or is all zero, whose span id is not 8 bytes or whose parent span id is
// neither absent nor 8 bytes; a log record or exemplar whose trace id is
// present but not 16 bytes or whose span id is present but not 8 bytes; and,
// in JSON, an id that is not valid hex of the right length. A log record
// without a trace id is valid (its TraceID stays zero), and so is a trace id
// with its upper 8 bytes zero (SGLang).
//
// HashPartition, AppendTraceIDHex and ParseTraceIDHex reproduce how the
// exporter keys and partitions records when partition_traces_by_id /
// partition_logs_by_trace_id are set.
package otlp
