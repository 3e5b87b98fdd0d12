// Package arrowexport writes braid's FusedTrace records (braid.v1.FusedTrace,
// package operators/braidpb) to Arrow IPC files and Parquet files, for
// forensic replay in pyarrow, Polars, DuckDB or anything else that reads
// Arrow or Parquet. One FusedTrace is one row; its spans, logs and metric
// points are nested lists in that row.
//
//	f, err := arrowexport.FormatForPath(path) // .arrow .feather .ipc / .parquet
//	w, err := arrowexport.Create(path, f)
//	for ... { err = w.Write(ft) }             // ft *braidpb.FusedTrace
//	err = w.Close()                           // the file is complete only now
//
// # Formats
//
//   - FormatArrow: the Arrow IPC file format (Feather v2), uncompressed, so
//     that readers can memory-map it. One record batch per BatchRows (4096)
//     rows.
//   - FormatParquet: Parquet format version 2.6, snappy compression,
//     dictionary encoding, statistics, one row group per BatchRows rows. The
//     Arrow schema is stored under the key "ARROW:schema", so Arrow readers
//     get back exactly the types below (uint32, timestamp[ns, UTC]).
//
// A batch is cut earlier when its buffered strings reach about 64 MiB. A
// file with zero rows is valid in both formats and carries the schema.
//
// Output is deterministic: the same sequence of Write calls gives a
// byte-identical file (no time stamps, no host names; the Parquet created_by
// is the constant "parquet-go version 17.0.0").
//
// # Conventions
//
//   - Time stamps are timestamp[ns, tz=UTC] (unix nanoseconds). OTLP's 0
//     ("unset") is null.
//   - Trace and span ids are lower-case hex strings; trace_id has 32
//     characters. An absent span id (a root span's parent, a log without a
//     span) is null.
//   - Other strings are never null: an empty protobuf string is "". Invalid
//     UTF-8 is replaced by U+FFFD.
//   - Attributes are map<string, string>, in OTLP order (duplicate keys are
//     kept). Values are rendered as strings: string values as they are;
//     ints in decimal ("512"); doubles in the shortest form that reads back
//     exactly ("0.7", "1e+21", "NaN", "+Inf"); bools as "true"/"false";
//     bytes in standard base64; arrays and kvlists as compact JSON
//     (["a",1,true], {"k":"v"}; NaN and infinities inside JSON are the
//     strings "NaN", "Infinity", "-Infinity"; bytes are base64 strings). An
//     empty AnyValue is a null value.
//   - resource_index is the 0-based index into the row's resources list
//     (DuckDB lists are 1-based: resources[s.resource_index + 1]).
//   - origin_topic, origin_partition and origin_offset are the Kafka record
//     the member was read from; all three are null when the member has no
//     origin.
//   - Within each struct, fields typed below without "null" are never null;
//     list columns are never null (an empty list instead).
//
// # Columns
//
// Top level, one row per FusedTrace:
//
//	trace_id           string                 32 lower-case hex characters
//	revision           uint32                 0 for the first emission, +1 per re-emission
//	start_time         timestamp[ns, UTC]     null if 0; earliest span start or member time
//	end_time           timestamp[ns, UTC]     null if 0; latest member event time
//	watermark          timestamp[ns, UTC]     null if 0; the task's watermark at emission
//	span_count         uint32                 Summary.span_count
//	log_count          uint32                 Summary.log_count
//	point_count        uint32                 Summary.point_count
//	root_span_name     string                 "" when there is no root span
//	root_service_name  string                 service.name of the root span's resource
//	duration_ns        int64                  Summary.duration_nano (root span end - start,
//	                                          else end_time - start_time)
//	error_span_count   uint32                 spans with status code ERROR
//	dropped_spans      uint32                 members cut by the per-trace caps
//	dropped_logs       uint32
//	dropped_points     uint32
//	flags              list<string>           Flag names without the FLAG_ prefix:
//	                                          NO_ROOT_SPAN, ERROR, TRUNCATED, REVISED
//	                                          (an unknown value as its number, "7")
//	resources          list<struct<...>>      FusedTrace.resources, in order
//	spans              list<struct<...>>      FusedTrace.spans, in order
//	logs               list<struct<...>>      FusedTrace.logs, in order
//	points             list<struct<...>>      FusedTrace.points, in order
//
// resources element:
//
//	attributes         map<string, string>    the resource's attributes: service.name,
//	                                          host.name, gpu.uuid, ...
//
// spans element (FusedSpan and its OTLP Span):
//
//	span_id            string, null           hex
//	parent_span_id     string, null           hex; null for a root span
//	name               string
//	kind               string                 UNSPECIFIED, INTERNAL, SERVER, CLIENT,
//	                                          PRODUCER, CONSUMER (SPAN_KIND_ dropped)
//	start_time         timestamp[ns, UTC], null
//	end_time           timestamp[ns, UTC], null
//	duration_ns        int64, null            end - start; null if either is unset
//	status_code        int32                  0 UNSET, 1 OK, 2 ERROR
//	status_message     string
//	attributes         map<string, string>
//	resource_index     uint32
//	scope_name         string                 instrumentation scope name
//	origin_topic       string, null
//	origin_partition   int32, null
//	origin_offset      int64, null
//	events             list<struct<...>>      the span's events:
//	    time           timestamp[ns, UTC], null
//	    name           string                 e.g. "exception"
//	    attributes     map<string, string>    e.g. exception.type, exception.message
//
// logs element (FusedLog and its OTLP LogRecord):
//
//	time               timestamp[ns, UTC], null
//	observed_time      timestamp[ns, UTC], null
//	severity_number    int32                  OTLP SeverityNumber (9 INFO, 17 ERROR, ...)
//	severity_text      string
//	body               string, null           a string body as it is; other bodies
//	                                          rendered like attribute values (a kvlist
//	                                          as a JSON object); null without a body
//	event_name         string
//	span_id            string, null           hex
//	attributes         map<string, string>
//	resource_index     uint32
//	scope_name         string
//	origin_topic       string, null
//	origin_partition   int32, null
//	origin_offset      int64, null
//
// points element (FusedPoint: the first data point of its Metric; braid
// writes exactly one):
//
//	metric_name        string
//	unit               string
//	type               string, null           Gauge, Sum, Histogram, ExponentialHistogram,
//	                                          Summary; null if the metric has no data
//	time               timestamp[ns, UTC], null  the data point's time
//	value              float64, null          Gauge/Sum: the number value (ints
//	                                          converted); Histogram/ExponentialHistogram/
//	                                          Summary: the sum (null if unset)
//	count              uint64                 Histogram/ExponentialHistogram/Summary
//	                                          count; 0 for Gauge and Sum
//	exemplar_value     float64, null          value of the first exemplar whose trace
//	                                          id is this row's trace: this request's
//	                                          own measurement
//	attributes         map<string, string>    the data point's attributes
//	resource_index     uint32
//	scope_name         string
//	origin_topic       string, null
//	origin_partition   int32, null
//	origin_offset      int64, null
//
// The schema metadata holds "braid.arrowexport.schema_version" (SchemaVersion,
// now "1"); it changes when a column is removed, renamed or retyped, not when
// one is added.
//
// Not exported (read the protobuf records for these): span links, trace
// state and flags, dropped attribute/event/link counts, scope versions and
// attributes, schema URLs, histogram buckets and bounds, summary quantiles,
// the other exemplars, metric descriptions, temporality and monotonicity,
// data point start times, log flags and trace ids (a log's trace is the
// row's).
//
// # Reading
//
// DuckDB (Parquet):
//
//	SELECT trace_id, s.name, s.duration_ns / 1e6 AS ms,
//	       s.attributes['gen_ai.request.id'] AS request_id,
//	       resources[s.resource_index + 1].attributes['host.name'] AS host
//	FROM 'fused.parquet', unnest(spans) AS u(s)
//	WHERE s.status_code = 2
//	ORDER BY ms DESC;
//
// Polars:
//
//	pl.read_parquet("fused.parquet").select("trace_id", "spans") \
//	  .explode("spans").unnest("spans").filter(pl.col("status_code") == 2)
//
// pyarrow:
//
//	t = pyarrow.ipc.open_file("fused.arrow").read_all()   # or pyarrow.parquet.read_table
//	dict(t.slice(0, 1).to_pylist()[0]["resources"][0]["attributes"])["service.name"]
//
// pyarrow's to_pylist() turns timestamp[ns] values into datetime.datetime,
// which fails for values with a sub-microsecond part unless pandas is
// installed; use to_pandas(), Polars, or cast the column to int64.
//
// The writer uses github.com/apache/arrow/go/v17 (array builders, arrow/ipc,
// parquet/pqarrow).
package arrowexport
