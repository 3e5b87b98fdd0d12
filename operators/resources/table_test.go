package resources

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/operators/semconv"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(s float64) int64 { return t0.UnixNano() + int64(s*1e9) }

func TestWindowSemantics(t *testing.T) {
	tb := NewTable(1, time.Second, time.Hour, t0)
	srv := semconv.Identity{Service: "vllm", Instance: "h1:8000", Host: "h1", Model: "m"}
	gpu := semconv.Identity{Service: "dcgm-exporter", Instance: "h1:9400", Host: "h1", GPUUUID: "GPU-1", GPUIndex: "0"}
	other := semconv.Identity{Instance: "h1:8001", Host: "h1", Model: "m"}
	// Out of order on purpose: the table sorts; a re-scrape of an instant
	// replaces it.
	for _, s := range []struct {
		id      semconv.Identity
		metric  string
		counter bool
		t, v    float64
	}{
		{srv, "kv_cache_usage", false, 2, 0.8},
		{srv, "kv_cache_usage", false, 0, 0.1},
		{srv, "kv_cache_usage", false, 1, 0.3},
		{srv, "kv_cache_usage", false, 3, 0.5},
		{srv, "kv_cache_usage", false, 3, 0.6},
		{srv, "kv_cache_usage", false, 4, 0.2},
		{srv, "preemptions", true, 1, 2},
		{srv, "preemptions", true, 3, 7},
		{gpu, "gpu_fb_used_mib", false, 5, 100}, // only after the window
		{other, "kv_cache_usage", false, 1, 0.9},
	} {
		tb.Add(s.id, s.metric, s.counter, Sample{T: at(s.t), V: s.v})
	}
	req := semconv.Identity{Instance: "h1:8000", Host: "h1", GPUUUID: "GPU-1", Model: "m"}
	ws := tb.Windows(req, at(1.5), at(3.5))
	if len(ws) != 2 {
		t.Fatalf("%d windows: %v", len(ws), ws)
	}
	kv, pre := ws[0], ws[1]
	if kv.Metric != "kv_cache_usage" || *kv.AtStart != 0.3 || kv.AtEnd != 0.6 || kv.Min != 0.3 || kv.Max != 0.8 || kv.Samples != 2 || kv.Delta != nil {
		t.Errorf("kv window %v", kv)
	}
	if pre.Metric != "preemptions" || *pre.AtStart != 2 || pre.AtEnd != 7 || *pre.Delta != 5 || pre.Samples != 1 || !pre.Counter {
		t.Errorf("preemptions window %v", pre)
	}
	// A request that starts before the first sample has no at_start.
	ws = tb.Windows(req, at(-1), at(0.5))
	if len(ws) != 1 || ws[0].AtStart != nil || ws[0].AtEnd != 0.1 || ws[0].Samples != 1 {
		t.Errorf("early window %v", ws)
	}
}

func TestFeedRecordsMarkersAndMalformed(t *testing.T) {
	tb := NewTable(1, time.Second, time.Minute, t0)
	id := semconv.Identity{Host: "h1", Instance: "h1:8000"}
	v := AppendIdentity(nil, id)
	v = AppendSample(v, "requests_running", false, Sample{T: at(1), V: 3})
	v = AppendSample(v, "preemptions", true, Sample{T: at(1), V: 9})
	tb.Feed(&kgo.Record{Key: []byte(id.String()), Value: v}, t0)
	tb.Feed(&kgo.Record{Value: v[:len(v)-3]}, t0)
	if tb.Series() != 2 || tb.Samples.Load() != 3 || tb.Malformed.Load() != 1 {
		t.Errorf("series %d samples %d malformed %d", tb.Series(), tb.Samples.Load(), tb.Malformed.Load())
	}
	// No marker seen and every writer idle: no task writes, no wait.
	if wm := tb.Watermark(t0.Add(2 * time.Second)); wm != 1<<63-1 {
		t.Errorf("watermark %d with no writer", wm)
	}
}

func TestPruneKeepsValueInForce(t *testing.T) {
	tb := NewTable(1, time.Second, 10*time.Second, t0)
	id := semconv.Identity{Host: "h1"}
	for i := range 100 {
		tb.Add(id, "gpu_util_percent", false, Sample{T: at(float64(i)), V: float64(i)})
	}
	tb.mu.Lock()
	tb.pruneLocked(at(100))
	n := len(tb.mu.series[id.String()+"\x00gpu_util_percent"].samples)
	tb.mu.Unlock()
	if n != 11 { // 90..99 plus 89, in force at the cut
		t.Errorf("%d samples kept, want 11", n)
	}
	ws := tb.Windows(semconv.Identity{Host: "h1"}, at(89.5), at(95))
	if len(ws) != 1 || *ws[0].AtStart != 89 || ws[0].Samples != 6 {
		t.Errorf("window after prune %v", ws)
	}
}
