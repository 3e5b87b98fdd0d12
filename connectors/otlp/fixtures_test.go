package otlp

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

const fixtureDir = "testdata/collector"

var fixtureFolders = []string{"proto-keyed", "proto-unkeyed", "json-keyed", "proto-resource-keyed"}

type fixtureRecord struct {
	Folder string
	Name   string // e.g. "otlp_spans-3"
	Signal Signal
	Enc    Encoding
	Value  []byte
	Key    []byte // nil for a null key
	Meta   fixtureMeta
	Want   expectedRecord
}

type fixtureMeta struct {
	Topic      string  `json:"topic"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	KeyHex     *string `json:"key_hex"`
	KeyText    *string `json:"key_text"`
	ValueBytes int     `json:"value_bytes"`
}

type expectedTrace struct {
	TraceID    string `json:"trace_id"`
	Spans      int    `json:"spans"`
	RootSpans  int    `json:"root_spans"`
	LogRecords int    `json:"log_records"`
}

type expectedRecord struct {
	Topic                    string          `json:"topic"`
	Partition                int32           `json:"partition"`
	Encoding                 string          `json:"encoding"`
	MessageType              string          `json:"message_type"`
	ValueBytes               int             `json:"value_bytes"`
	KeyKind                  string          `json:"key_kind"`
	KeyPartition             *int32          `json:"key_partition_fnv1a_sarama"`
	Resources                int             `json:"resources"`
	ScopeBlocks              int             `json:"scope_blocks"`
	ServiceNames             []string        `json:"service_names"`
	Spans                    int             `json:"spans"`
	SpanNames                map[string]int  `json:"span_names"`
	LogRecords               int             `json:"log_records"`
	LogRecordsWithoutTraceID int             `json:"log_records_without_trace_id"`
	Metrics                  int             `json:"metrics"`
	MetricNames              map[string]int  `json:"metric_names"`
	MetricsByType            map[string]int  `json:"metrics_by_type"`
	DataPoints               int             `json:"data_points"`
	DataPointsByType         map[string]int  `json:"data_points_by_type"`
	DistinctTraceIDs         int             `json:"distinct_trace_ids"`
	TraceIDs                 []expectedTrace `json:"trace_ids"`
}

type expectedFolder struct {
	Partitions int32                     `json:"partitions"`
	Records    map[string]expectedRecord `json:"records"`
	Traces     map[string]struct {
		Spans      int `json:"spans"`
		RootSpans  int `json:"root_spans"`
		LogRecords int `json:"log_records"`
	} `json:"traces"`
	SplitTraces []string `json:"split_traces"`
}

func loadExpected(t testing.TB, folder string) expectedFolder {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureDir, folder, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expectedFolder
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func signalOfTopic(t testing.TB, topic string) Signal {
	switch topic {
	case "otlp_spans":
		return SignalSpans
	case "otlp_logs":
		return SignalLogs
	case "otlp_metrics":
		return SignalMetrics
	}
	t.Fatalf("unknown topic %q", topic)
	return 0
}

// loadFixtures returns every record of every fixture folder, sorted by
// folder and name.
func loadFixtures(t testing.TB) []fixtureRecord {
	t.Helper()
	var out []fixtureRecord
	for _, folder := range fixtureFolders {
		exp := loadExpected(t, folder)
		names := make([]string, 0, len(exp.Records))
		for name := range exp.Records {
			names = append(names, name)
		}
		sort.Strings(names)
		if len(names) == 0 {
			t.Fatalf("%s: no records in expected.json", folder)
		}
		for _, name := range names {
			want := exp.Records[name]
			value, err := os.ReadFile(filepath.Join(fixtureDir, folder, name+".value"))
			if err != nil {
				t.Fatal(err)
			}
			rawMeta, err := os.ReadFile(filepath.Join(fixtureDir, folder, name+".meta.json"))
			if err != nil {
				t.Fatal(err)
			}
			var meta fixtureMeta
			if err := json.Unmarshal(rawMeta, &meta); err != nil {
				t.Fatal(err)
			}
			enc, err := ParseEncoding(want.Encoding)
			if err != nil {
				t.Fatalf("%s/%s: %v", folder, name, err)
			}
			r := fixtureRecord{Folder: folder, Name: name, Signal: signalOfTopic(t, meta.Topic), Enc: enc, Value: value, Meta: meta, Want: want}
			if meta.KeyHex != nil {
				if r.Key, err = hex.DecodeString(*meta.KeyHex); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// sameBytes reports whether a and b are the same non-empty slice of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

func serviceName(t testing.TB, resource []byte) string {
	t.Helper()
	var r resourcepb.Resource
	if err := proto.Unmarshal(resource, &r); err != nil {
		t.Fatalf("Resource bytes do not unmarshal: %v", err)
	}
	for _, kv := range r.Attributes {
		if kv.Key == "service.name" {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

func TestFixtures(t *testing.T) {
	recs := loadFixtures(t)
	d := NewDecoder()
	type traceTotals struct{ spans, roots, logs int }
	folderTraces := map[string]map[string]*traceTotals{}
	for _, r := range recs {
		t.Run(r.Folder+"/"+r.Name, func(t *testing.T) {
			w := r.Want
			if w.ValueBytes != len(r.Value) || r.Meta.ValueBytes != len(r.Value) {
				t.Fatalf("value is %d bytes, expected.json says %d, meta %d", len(r.Value), w.ValueBytes, r.Meta.ValueBytes)
			}
			items, err := d.Decode(r.Signal, r.Enc, r.Value)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			for i := range items {
				if items[i].Signal != r.Signal {
					t.Fatalf("item %d: signal %v, want %v", i, items[i].Signal, r.Signal)
				}
			}

			// Resource blocks and their service.name, in order.
			var services []string
			for i := range items {
				if i == 0 || !sameBytes(items[i].Resource, items[i-1].Resource) {
					if len(items[i].Resource) == 0 {
						t.Fatalf("item %d: empty Resource", i)
					}
					services = append(services, serviceName(t, items[i].Resource))
				}
			}
			if w.Resources != len(w.ServiceNames) || !equalStrings(services, w.ServiceNames) {
				t.Errorf("service names per resource %q, want %q (%d resources)", services, w.ServiceNames, w.Resources)
			}
			for i := range items {
				var sc commonpb.InstrumentationScope
				if err := proto.Unmarshal(items[i].Scope, &sc); err != nil {
					t.Fatalf("item %d: Scope: %v", i, err)
				}
				if r.Signal == SignalSpans && sc.Name != "telemetrygen" {
					t.Errorf("item %d: scope name %q, want telemetrygen", i, sc.Name)
				}
			}

			// Trace ids in order of first appearance.
			type tc struct {
				id                 string
				spans, roots, logs int
			}
			var traces []*tc
			byID := map[[16]byte]*tc{}
			for i := range items {
				it := &items[i]
				if it.TraceID == ([16]byte{}) {
					continue
				}
				c := byID[it.TraceID]
				if c == nil {
					c = &tc{id: string(AppendTraceIDHex(nil, it.TraceID))}
					byID[it.TraceID] = c
					traces = append(traces, c)
				}
				switch r.Signal {
				case SignalSpans:
					c.spans++
					if it.ParentSpanID == ([8]byte{}) {
						c.roots++
					}
				case SignalLogs:
					c.logs++
				}
			}
			if len(traces) != w.DistinctTraceIDs {
				t.Errorf("%d distinct trace ids, want %d", len(traces), w.DistinctTraceIDs)
			}
			if r.Signal != SignalMetrics {
				if len(traces) != len(w.TraceIDs) {
					t.Fatalf("%d trace ids, want %d", len(traces), len(w.TraceIDs))
				}
				for i, c := range traces {
					e := w.TraceIDs[i]
					if c.id != e.TraceID || c.spans != e.Spans || c.roots != e.RootSpans || c.logs != e.LogRecords {
						t.Errorf("trace %d: got %+v, want %+v", i, *c, e)
					}
				}
			}
			ft := folderTraces[r.Folder]
			if ft == nil {
				ft = map[string]*traceTotals{}
				folderTraces[r.Folder] = ft
			}
			for _, c := range traces {
				if ft[c.id] == nil {
					ft[c.id] = &traceTotals{}
				}
				ft[c.id].spans += c.spans
				ft[c.id].roots += c.roots
				ft[c.id].logs += c.logs
			}

			switch r.Signal {
			case SignalSpans:
				if w.MessageType != "TracesData" {
					t.Fatalf("message type %s", w.MessageType)
				}
				if len(items) != w.Spans {
					t.Errorf("%d spans, want %d", len(items), w.Spans)
				}
				names := map[string]int{}
				scopes := 0
				for i := range items {
					it := &items[i]
					names[string(it.Name)]++
					if i == 0 || !sameBytes(it.Scope, items[i-1].Scope) {
						scopes++
					}
					if it.StartTime <= 0 || it.Time < it.StartTime {
						t.Errorf("span %d: start %d end %d", i, it.StartTime, it.Time)
					}
					if it.SpanID == ([8]byte{}) {
						t.Errorf("span %d: zero span id", i)
					}
					if it.StatusCode != 0 {
						t.Errorf("span %d: status %d, want unset", i, it.StatusCode)
					}
				}
				if !equalCounts(names, w.SpanNames) {
					t.Errorf("span names %v, want %v", names, w.SpanNames)
				}
				if scopes != w.ScopeBlocks {
					t.Errorf("%d scope blocks, want %d", scopes, w.ScopeBlocks)
				}
			case SignalLogs:
				if w.MessageType != "LogsData" {
					t.Fatalf("message type %s", w.MessageType)
				}
				if len(items) != w.LogRecords {
					t.Errorf("%d log records, want %d", len(items), w.LogRecords)
				}
				without := 0
				for i := range items {
					it := &items[i]
					if it.TraceID == ([16]byte{}) {
						without++
						if it.SpanID != ([8]byte{}) {
							t.Errorf("log %d: span id without trace id", i)
						}
					} else if it.SpanID == ([8]byte{}) {
						t.Errorf("log %d: no span id", i)
					}
					if it.Name != nil || it.Time <= 0 || it.StartTime != it.Time {
						t.Errorf("log %d: name %q time %d start %d", i, it.Name, it.Time, it.StartTime)
					}
				}
				if without != w.LogRecordsWithoutTraceID {
					t.Errorf("%d logs without trace id, want %d", without, w.LogRecordsWithoutTraceID)
				}
			case SignalMetrics:
				if w.MessageType != "MetricsData" {
					t.Fatalf("message type %s", w.MessageType)
				}
				points, metrics := 0, 0
				pointsByType, metricsByType, names := map[string]int{}, map[string]int{}, map[string]int{}
				for i := range items {
					it := &items[i]
					if i == 0 || !sameBytes(it.Payload, items[i-1].Payload) {
						points++
						pointsByType[it.PointType.String()]++
					}
					if i == 0 || !sameBytes(it.Name, items[i-1].Name) {
						metrics++
						metricsByType[it.PointType.String()]++
						names[string(it.Name)]++
					}
					if it.Time <= 0 {
						t.Errorf("point %d: time %d", i, it.Time)
					}
					switch it.PointType {
					case PointSum:
						if it.Temporality != 2 || !it.Monotonic || it.StartTime <= 0 {
							t.Errorf("sum point %d: temporality %d monotonic %v start %d", i, it.Temporality, it.Monotonic, it.StartTime)
						}
					case PointHistogram:
						if it.Temporality != 2 || it.Monotonic || it.StartTime <= 0 {
							t.Errorf("histogram point %d: temporality %d monotonic %v", i, it.Temporality, it.Monotonic)
						}
					case PointGauge:
						if it.Temporality != 0 || it.Monotonic {
							t.Errorf("gauge point %d: temporality %d monotonic %v", i, it.Temporality, it.Monotonic)
						}
					default:
						t.Errorf("point %d: type %v", i, it.PointType)
					}
				}
				if points != w.DataPoints || !equalCounts(pointsByType, w.DataPointsByType) {
					t.Errorf("points %d %v, want %d %v", points, pointsByType, w.DataPoints, w.DataPointsByType)
				}
				if metrics != w.Metrics || !equalCounts(metricsByType, w.MetricsByType) || !equalCounts(names, w.MetricNames) {
					t.Errorf("metrics %d %v %v, want %d %v %v", metrics, metricsByType, names, w.Metrics, w.MetricsByType, w.MetricNames)
				}
			}

			// Keys and partitions.
			if r.Meta.Partition != w.Partition {
				t.Errorf("meta partition %d, expected.json %d", r.Meta.Partition, w.Partition)
			}
			if r.Key == nil {
				if w.KeyKind != "null" {
					t.Errorf("null key, key kind %q", w.KeyKind)
				}
				return
			}
			if got := HashPartition(r.Key, 4); got != r.Meta.Partition || w.KeyPartition == nil || got != *w.KeyPartition {
				t.Errorf("HashPartition(%x) = %d, record partition %d", r.Key, got, r.Meta.Partition)
			}
			switch w.KeyKind {
			case "trace_id_hex":
				if len(traces) != 1 || traces[0].id != string(r.Key) {
					t.Errorf("key %q, trace ids %d", r.Key, len(traces))
				}
				id, ok := ParseTraceIDHex(r.Key)
				if !ok || string(AppendTraceIDHex(nil, id)) != string(r.Key) {
					t.Errorf("ParseTraceIDHex(%q) = %x, %v", r.Key, id, ok)
				}
				for i := range items {
					if items[i].TraceID != id {
						t.Errorf("item %d: trace id %x, key %s", i, items[i].TraceID, r.Key)
					}
				}
			case "resource_attributes_hash":
				if len(r.Key) != 16 || len(services) != 1 {
					t.Errorf("resource key %x, %d resources", r.Key, len(services))
				}
			default:
				t.Errorf("keyed record with key kind %q", w.KeyKind)
			}
		})
	}

	// Per-trace totals over each folder.
	for _, folder := range fixtureFolders {
		exp := loadExpected(t, folder)
		got := folderTraces[folder]
		if len(got) != len(exp.Traces) {
			t.Errorf("%s: %d trace ids, want %d", folder, len(got), len(exp.Traces))
		}
		for id, e := range exp.Traces {
			g := got[id]
			if g == nil || g.spans != e.Spans || g.roots != e.RootSpans || g.logs != e.LogRecords {
				t.Errorf("%s: trace %s: got %+v, want %+v", folder, id, g, e)
			}
		}
		if len(exp.SplitTraces) < 2 {
			t.Errorf("%s: %d split traces", folder, len(exp.SplitTraces))
		}
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
