"""Reads the files that TestPyArrow writes, with pyarrow, and prints "ok".

usage: check.py ARROW_FILE PARQUET_FILE EMPTY_ARROW EMPTY_PARQUET ROWS TRACE_ID
"""
import datetime
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq

COLUMNS = [
    "trace_id", "revision", "start_time", "end_time", "watermark",
    "span_count", "log_count", "point_count", "root_span_name",
    "root_service_name", "duration_ns", "error_span_count", "dropped_spans",
    "dropped_logs", "dropped_points", "flags", "resources", "spans", "logs",
    "points",
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(what, got, want):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))


def check(label, table, rows, trace_id):
    expect(label + " rows", table.num_rows, rows)
    expect(label + " columns", table.column_names, COLUMNS)
    expect(label + " start_time type", table.schema.field("start_time").type,
           pa.timestamp("ns", tz="UTC"))
    expect(label + " revision type", table.schema.field("revision").type, pa.uint32())
    md = table.schema.metadata or {}
    expect(label + " schema version", md.get(b"braid.arrowexport.schema_version"), b"1")
    if rows == 0:
        return
    row = table.slice(0, 1).to_pylist()[0]
    expect(label + " trace_id", row["trace_id"], trace_id)
    expect(label + " spans[0].name", row["spans"][0]["name"], "llm_request")
    expect(label + " spans[0].kind", row["spans"][0]["kind"], "SERVER")
    expect(label + " flags", row["flags"], ["ERROR", "REVISED"])
    res0 = dict(row["resources"][0]["attributes"])
    expect(label + " resources[0] service.name", res0["service.name"], "vllm")
    res1 = dict(row["resources"][1]["attributes"])
    expect(label + " resources[1] gpu.uuid", res1["gpu.uuid"],
           "GPU-0f1e2d3c-0000-1111-2222-333344445555")
    expect(label + " start_time", row["start_time"],
           datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    expect(label + " span attribute", dict(row["spans"][0]["attributes"])["gen_ai.usage.prompt_tokens"], "512")
    body = json.loads(row["logs"][1]["body"])
    expect(label + " kvlist body", body["msg"], "oom")
    expect(label + " histogram sum", row["points"][0]["value"], 0.42)
    expect(label + " histogram count", row["points"][0]["count"], 3)
    # Vectorised access to nested fields, as a user would do it.
    names = pc.list_flatten(table.column("spans")).combine_chunks().field("name")
    expect(label + " span names", names[0].as_py(), "llm_request")


def main():
    arrow_path, parquet_path, empty_arrow, empty_parquet, rows, trace_id = sys.argv[1:7]
    rows = int(rows)
    with pa.ipc.open_file(arrow_path) as r:
        ta = r.read_all()
    check("arrow", ta, rows, trace_id)
    tp = pq.read_table(parquet_path)
    check("parquet", tp, rows, trace_id)
    # (to_pylist() would need pandas for timestamps with nanoseconds.)
    if not ta.equals(tp):
        fail("arrow and parquet rows differ")
    with pa.ipc.open_file(empty_arrow) as r:
        check("empty arrow", r.read_all(), 0, None)
    check("empty parquet", pq.read_table(empty_parquet), 0, None)
    print("ok")


if __name__ == "__main__":
    main()
