package nvml_test

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/braidlabs/braid/connectors/nvml"
)

// allMetrics is every metric in the order doc.go's table gives, for a GPU
// where every query works, from the second round on.
var allMetrics = []string{
	nvml.MetricFBTotal, nvml.MetricFBUsed, nvml.MetricFBFree, nvml.MetricFBReserved,
	nvml.MetricGPUUtil, nvml.MetricMemCopyUtil,
	nvml.MetricPCIeTX, nvml.MetricPCIeRX,
	nvml.MetricNvLinkTX, nvml.MetricNvLinkRX, nvml.MetricNvLinkBandwidth,
	nvml.MetricNvLinkCRCFlit, nvml.MetricNvLinkCRCData, nvml.MetricNvLinkReplay, nvml.MetricNvLinkRecovery,
	nvml.MetricXidErrors,
}

var sums = map[string]bool{
	nvml.MetricNvLinkBandwidth: true, nvml.MetricNvLinkCRCFlit: true, nvml.MetricNvLinkCRCData: true,
	nvml.MetricNvLinkReplay: true, nvml.MetricNvLinkRecovery: true,
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		default:
			m[kv.GetKey()] = v
		}
	}
	return m
}

// gpuMetrics is one ResourceMetrics, checked for shape.
type gpuMetrics struct {
	resource map[string]any
	names    []string
	points   map[string]*metricspb.NumberDataPoint
	metrics  map[string]*metricspb.Metric
}

// split checks md's shape (one scope per resource, one point per metric,
// gauges and cumulative monotonic sums as in doc.go) and returns its
// resources in order.
func split(t *testing.T, md *metricspb.MetricsData) []gpuMetrics {
	t.Helper()
	var out []gpuMetrics
	for _, rm := range md.GetResourceMetrics() {
		g := gpuMetrics{resource: attrs(rm.GetResource().GetAttributes()), points: map[string]*metricspb.NumberDataPoint{}, metrics: map[string]*metricspb.Metric{}}
		if len(rm.GetScopeMetrics()) != 1 || rm.GetScopeMetrics()[0].GetScope().GetName() != nvml.ScopeName {
			t.Fatalf("resource %v: want one scope %s, got %v", g.resource, nvml.ScopeName, rm.GetScopeMetrics())
		}
		for _, m := range rm.GetScopeMetrics()[0].GetMetrics() {
			var pts []*metricspb.NumberDataPoint
			if sums[m.GetName()] {
				s := m.GetSum()
				if s == nil || !s.GetIsMonotonic() || s.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
					t.Fatalf("%s: want a cumulative monotonic sum, got %v", m.GetName(), m)
				}
				pts = s.GetDataPoints()
				if len(pts) == 1 && pts[0].GetStartTimeUnixNano() == 0 {
					t.Errorf("%s: sum without start time", m.GetName())
				}
			} else {
				if m.GetGauge() == nil {
					t.Fatalf("%s: want a gauge, got %v", m.GetName(), m)
				}
				pts = m.GetGauge().GetDataPoints()
			}
			if len(pts) != 1 {
				t.Fatalf("%s: %d points, want 1", m.GetName(), len(pts))
			}
			if _, ok := pts[0].GetValue().(*metricspb.NumberDataPoint_AsDouble); !ok {
				t.Errorf("%s: value %v is not a double", m.GetName(), pts[0].GetValue())
			}
			g.names = append(g.names, m.GetName())
			g.points[m.GetName()] = pts[0]
			g.metrics[m.GetName()] = m
		}
		out = append(out, g)
	}
	return out
}

// checkLabels checks every point's DCGM labels.
func checkLabels(t *testing.T, g gpuMetrics, gpu, uuid, bus, model, host string) {
	t.Helper()
	want := map[string]any{"gpu": gpu, "UUID": uuid, "pci_bus_id": bus, "modelName": model, "Hostname": host}
	for name, p := range g.points {
		got := attrs(p.GetAttributes())
		delete(got, "err_code")
		if !equalMaps(got, want) {
			t.Errorf("%s labels %v, want %v", name, got, want)
		}
	}
}

func checkResource(t *testing.T, g gpuMetrics, index int64, uuid, host string) {
	t.Helper()
	want := map[string]any{"service.name": nvml.ServiceName, "host.name": host, "gpu.uuid": uuid, "gpu.index": index}
	if !equalMaps(g.resource, want) {
		t.Errorf("resource %v, want %v", g.resource, want)
	}
}

func equalMaps(a, b map[string]any) bool {
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

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
