package arrowexport

import (
	"github.com/apache/arrow/go/v17/arrow"
)

// SchemaVersion is stored in the schema metadata under the key
// "braid.arrowexport.schema_version" (and so in the Parquet key-value
// metadata). It changes when a column is removed, renamed or changes type;
// adding a column does not change it.
const SchemaVersion = "1"

// schemaVersionKey is the schema metadata key of SchemaVersion.
const schemaVersionKey = "braid.arrowexport.schema_version"

var (
	tsType  = &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}
	strType = arrow.BinaryTypes.String
	attrMap = arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)
)

func field(name string, t arrow.DataType, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: nullable}
}

// Top-level column indexes, in schema order.
const (
	colTraceID = iota
	colRevision
	colStartTime
	colEndTime
	colWatermark
	colSpanCount
	colLogCount
	colPointCount
	colRootSpanName
	colRootServiceName
	colDurationNS
	colErrorSpanCount
	colDroppedSpans
	colDroppedLogs
	colDroppedPoints
	colFlags
	colResources
	colSpans
	colLogs
	colPoints
	numCols
)

// Field indexes of the span struct.
const (
	spSpanID = iota
	spParentSpanID
	spName
	spKind
	spStartTime
	spEndTime
	spDurationNS
	spStatusCode
	spStatusMessage
	spAttributes
	spResourceIndex
	spScopeName
	spOriginTopic
	spOriginPartition
	spOriginOffset
	spEvents
)

// Field indexes of the span event struct.
const (
	evTime = iota
	evName
	evAttributes
)

// Field indexes of the log struct.
const (
	lgTime = iota
	lgObservedTime
	lgSeverityNumber
	lgSeverityText
	lgBody
	lgEventName
	lgSpanID
	lgAttributes
	lgResourceIndex
	lgScopeName
	lgOriginTopic
	lgOriginPartition
	lgOriginOffset
)

// Field indexes of the point struct.
const (
	ptMetricName = iota
	ptUnit
	ptType
	ptTime
	ptValue
	ptCount
	ptExemplarValue
	ptAttributes
	ptResourceIndex
	ptScopeName
	ptOriginTopic
	ptOriginPartition
	ptOriginOffset
)

func originFields(prefix string) []arrow.Field {
	return []arrow.Field{
		field(prefix+"topic", strType, true),
		field(prefix+"partition", arrow.PrimitiveTypes.Int32, true),
		field(prefix+"offset", arrow.PrimitiveTypes.Int64, true),
	}
}

var (
	resourceType = arrow.StructOf(
		field("attributes", attrMap, false),
	)

	eventType = arrow.StructOf(
		field("time", tsType, true),
		field("name", strType, false),
		field("attributes", attrMap, false),
	)

	spanType = arrow.StructOf(append([]arrow.Field{
		field("span_id", strType, true),
		field("parent_span_id", strType, true),
		field("name", strType, false),
		field("kind", strType, false),
		field("start_time", tsType, true),
		field("end_time", tsType, true),
		field("duration_ns", arrow.PrimitiveTypes.Int64, true),
		field("status_code", arrow.PrimitiveTypes.Int32, false),
		field("status_message", strType, false),
		field("attributes", attrMap, false),
		field("resource_index", arrow.PrimitiveTypes.Uint32, false),
		field("scope_name", strType, false),
	}, append(originFields("origin_"),
		field("events", arrow.ListOf(eventType), false),
	)...)...)

	logType = arrow.StructOf(append([]arrow.Field{
		field("time", tsType, true),
		field("observed_time", tsType, true),
		field("severity_number", arrow.PrimitiveTypes.Int32, false),
		field("severity_text", strType, false),
		field("body", strType, true),
		field("event_name", strType, false),
		field("span_id", strType, true),
		field("attributes", attrMap, false),
		field("resource_index", arrow.PrimitiveTypes.Uint32, false),
		field("scope_name", strType, false),
	}, originFields("origin_")...)...)

	pointType = arrow.StructOf(append([]arrow.Field{
		field("metric_name", strType, false),
		field("unit", strType, false),
		field("type", strType, true),
		field("time", tsType, true),
		field("value", arrow.PrimitiveTypes.Float64, true),
		field("count", arrow.PrimitiveTypes.Uint64, false),
		field("exemplar_value", arrow.PrimitiveTypes.Float64, true),
		field("attributes", attrMap, false),
		field("resource_index", arrow.PrimitiveTypes.Uint32, false),
		field("scope_name", strType, false),
	}, originFields("origin_")...)...)

	schema = arrow.NewSchema([]arrow.Field{
		colTraceID:         field("trace_id", strType, false),
		colRevision:        field("revision", arrow.PrimitiveTypes.Uint32, false),
		colStartTime:       field("start_time", tsType, true),
		colEndTime:         field("end_time", tsType, true),
		colWatermark:       field("watermark", tsType, true),
		colSpanCount:       field("span_count", arrow.PrimitiveTypes.Uint32, false),
		colLogCount:        field("log_count", arrow.PrimitiveTypes.Uint32, false),
		colPointCount:      field("point_count", arrow.PrimitiveTypes.Uint32, false),
		colRootSpanName:    field("root_span_name", strType, false),
		colRootServiceName: field("root_service_name", strType, false),
		colDurationNS:      field("duration_ns", arrow.PrimitiveTypes.Int64, false),
		colErrorSpanCount:  field("error_span_count", arrow.PrimitiveTypes.Uint32, false),
		colDroppedSpans:    field("dropped_spans", arrow.PrimitiveTypes.Uint32, false),
		colDroppedLogs:     field("dropped_logs", arrow.PrimitiveTypes.Uint32, false),
		colDroppedPoints:   field("dropped_points", arrow.PrimitiveTypes.Uint32, false),
		colFlags:           field("flags", arrow.ListOf(strType), false),
		colResources:       field("resources", arrow.ListOf(resourceType), false),
		colSpans:           field("spans", arrow.ListOf(spanType), false),
		colLogs:            field("logs", arrow.ListOf(logType), false),
		colPoints:          field("points", arrow.ListOf(pointType), false),
	}, func() *arrow.Metadata {
		md := arrow.NewMetadata([]string{schemaVersionKey}, []string{SchemaVersion})
		return &md
	}())
)

// Schema returns the Arrow schema of the files that Writer writes: one row
// per FusedTrace. doc.go describes every column. The returned schema is
// shared and must not be modified.
func Schema() *arrow.Schema { return schema }
