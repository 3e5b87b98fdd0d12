package sampling

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func ptr[T any](v T) *T { return &v }

func newStage(t *testing.T, c Config) *Stage {
	t.Helper()
	c.Enabled = true
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randID(r *rand.Rand) (id [16]byte) {
	for i := range id {
		id[i] = byte(r.IntN(256))
	}
	return id
}

// The threshold encoding against the OpenTelemetry specification's
// examples (probability → th): 1 → 0, 1/2 → 8, 1/4 → c, 1/10 → e666…,
// 1/8 → e
func TestThresholdEncoding(t *testing.T) {
	for p, want := range map[float64]string{1: "0", 0.5: "8", 0.25: "c", 0.75: "4", 0.1: "e6666666666666", 0.125: "e", 0.01: "fd70a3d70a3d71"} {
		if got := string(AppendThreshold(nil, threshold(p))); got != want {
			t.Errorf("p=%v: th %q, want %q", p, got, want)
		}
	}
	if threshold(0) != maxThreshold || threshold(-1) != maxThreshold || threshold(math.NaN()) != maxThreshold {
		t.Error("rate 0 must keep nothing")
	}
}

// Decisions by rate: the kept fraction matches the rate, is the same for
// a trace id every time, and tenants with different seeds decide
// independently (the overlap of two 30 % samples is about 9 %).
func TestRateDecisions(t *testing.T) {
	s := newStage(t, Config{Keep: []string{}, Policy: Policy{Rate: ptr(0.3)},
		Tenants: map[string]Policy{"a": {}, "b": {Seed: ptr(uint64(7))}, "c": {Rate: ptr(0.05)}}})
	p := s.NewProcessor()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	var kept [4]int
	both := 0
	for range n {
		id := randID(r)
		var k [4]bool
		for i, tenant := range []string{"a", "b", "c", "unlisted"} {
			d := p.Decide(&Trace{ID: id, Tenant: tenant}, true)
			k[i] = d.Kept()
			if k[i] {
				kept[i]++
				if d.Reason != ReasonRate || d.Threshold != threshold(d.Rate) || d.Randomness < d.Threshold {
					t.Fatalf("kept by rate: %+v", d)
				}
			}
			if d2 := p.Decide(&Trace{ID: id, Tenant: tenant}, false); d2.Kept() != d.Kept() || d2.Randomness != d.Randomness {
				t.Fatal("a second decision on the same trace differs")
			}
		}
		if k[0] && k[1] {
			both++
		}
	}
	for i, want := range []float64{0.3, 0.3, 0.05, 0.3} {
		got := float64(kept[i]) / n
		if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/n) {
			t.Errorf("tenant %d kept %.4f, want %.2f", i, got, want)
		}
	}
	if f := float64(both) / n; math.Abs(f-0.09) > 0.005 {
		t.Errorf("tenants a and b both keep %.4f of traces; independent seeds give 0.09", f)
	}
}

func TestRateFunction(t *testing.T) {
	s := newStage(t, Config{Keep: []string{}, Policy: Policy{Rate: ptr(0.5)}, Tenants: map[string]Policy{
		"t": {Models: map[string]RateFunc{
			"big": {Base: 0.01, Batch: 0.01, SeqLen: 0.0001, Min: 0.02, Max: ptr(0.5)},
			"*":   {Base: 0.2},
		}},
	}})
	for _, c := range []struct {
		tr   Trace
		want float64
	}{
		{Trace{Tenant: "t", Model: "big"}, 0.02},                         // clamped up
		{Trace{Tenant: "t", Model: "big", Batch: 4, SeqLen: 100}, 0.06},  // 0.01 + 0.04 + 0.01
		{Trace{Tenant: "t", Model: "big", Batch: 64, SeqLen: 8192}, 0.5}, // clamped down
		{Trace{Tenant: "t", Model: "small"}, 0.2},                        // "*"
		{Trace{Tenant: "other", Model: "big", Batch: 64}, 0.5},           // top-level rate
	} {
		if got := s.Rate(&c.tr); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v: rate %v, want %v", c.tr, got, c.want)
		}
	}
	if n := s.Needs("t", "big"); !n.Batch || !n.SeqLen {
		t.Errorf("needs %+v", n)
	}
	if n := s.Needs("t", "small"); n.Batch || n.SeqLen {
		t.Errorf("needs %+v", n)
	}
}

func TestRules(t *testing.T) {
	s := newStage(t, Config{Policy: Policy{Rate: ptr(0.0)}})
	p := s.NewProcessor()
	for _, c := range []struct {
		tr   Trace
		want Reason
	}{
		{Trace{}, ReasonNone},
		{Trace{Error: true, Polluted: true}, ReasonError},
		{Trace{Polluted: true, Quality: true}, ReasonPolluted},
		{Trace{Quality: true}, ReasonQuality},
	} {
		if d := p.Decide(&c.tr, true); d.Reason != c.want || (d.Kept() && d.Threshold != 0) {
			t.Errorf("%+v: %+v, want %v", c.tr, d, c.want)
		}
	}
	// Rules turned off: only the rate decides.
	s = newStage(t, Config{Policy: Policy{Rate: ptr(0.0)}, Keep: []string{"polluted"}})
	if d := s.NewProcessor().Decide(&Trace{Error: true}, true); d.Kept() {
		t.Errorf("error trace kept with the error rule off: %+v", d)
	}
	if _, err := New(Config{Keep: []string{"errors"}}); err == nil || !strings.Contains(err.Error(), `unknown rule "errors"`) {
		t.Errorf("unknown rule: %v", err)
	}
	if _, err := New(Config{Policy: Policy{Rate: ptr(1.5)}}); err == nil {
		t.Error("rate 1.5 accepted")
	}
	if _, err := New(Config{Tenants: map[string]Policy{"x": {Models: map[string]RateFunc{"m": {Min: 0.6, Max: ptr(0.4)}}}}}); err == nil {
		t.Error("min above max accepted")
	}
}

// The slow rule against a reference computed here from the samples: the
// exact 99th percentile of the five minutes that end a minute before the
// trace's, but the minute with the highest. Above it is slow, below is not; too few
// samples, another model or a burst in one minute decide nothing.
func TestSlowRule(t *testing.T) {
	s := newStage(t, Config{Policy: Policy{Rate: ptr(0.0)}, Slow: Slow{Window: 5 * time.Minute, Pane: time.Minute, MinSamples: 500}})
	p := s.NewProcessor()
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var perMinute [5][]float64
	for i := range 3000 {
		// log-normal latencies, 5 minutes of traffic
		v := int64(math.Exp(r.NormFloat64()*0.5 + math.Log(2e9)))
		at := t0 + int64(i)*int64(100*time.Millisecond)
		if d := p.Decide(&Trace{ID: randID(r), Model: "m", E2E: v, Last: at}, true); d.Kept() && d.Reason != ReasonSlow {
			t.Fatalf("kept %+v", d)
		}
		perMinute[i/600] = append(perMinute[i/600], float64(v))
	}
	p99 := func(vs []float64) float64 {
		sorted := append([]float64(nil), vs...)
		slicesSort(sorted)
		return sorted[int(0.99*float64(len(sorted)-1))]
	}
	worst := 0
	for m := range perMinute {
		if p99(perMinute[m]) > p99(perMinute[worst]) {
			worst = m
		}
	}
	var rest []float64
	for m := range perMinute {
		if m != worst {
			rest = append(rest, perMinute[m]...)
		}
	}
	q := p99(rest)
	next := t0 + int64(6*time.Minute) + 1
	for _, c := range []struct {
		v    float64
		want bool
	}{{q * 1.02, true}, {q * 0.98, false}, {q * 3, true}, {q * 0.5, false}} {
		if got := p.Decide(&Trace{ID: randID(r), Model: "m", E2E: int64(c.v), Last: next}, false).Reason == ReasonSlow; got != c.want {
			t.Errorf("e2e %.3gs (p99 %.3gs): slow %v, want %v", c.v/1e9, q/1e9, got, c.want)
		}
	}
	if p.Decide(&Trace{ID: randID(r), Model: "other", E2E: int64(q * 10), Last: next}, false).Kept() {
		t.Error("a model without a window is slow")
	}
	// In the second minute the window is empty; in the fifth it holds
	// three minutes, 1,800 samples (1,200 without the worst).
	if p.Decide(&Trace{ID: randID(r), Model: "m", E2E: int64(q * 10), Last: t0 + int64(90*time.Second)}, false).Kept() {
		t.Error("slow with an empty window")
	}
	if !p.Decide(&Trace{ID: randID(r), Model: "m", E2E: int64(q * 10), Last: t0 + int64(4*time.Minute+time.Second)}, false).Kept() {
		t.Error("not slow with three minutes of window")
	}
	// A burst: a tenth of the fifth minute's requests 20 times slower.
	// The next minute's bar stays where it was.
	p2 := newStage(t, Config{Policy: Policy{Rate: ptr(0.0)}, Slow: Slow{Window: 5 * time.Minute, Pane: time.Minute, MinSamples: 500}}).NewProcessor()
	for i := range 3000 {
		v := int64(math.Exp(r.NormFloat64()*0.5 + math.Log(2e9)))
		if i >= 2400 && i%10 == 0 {
			v *= 20
		}
		p2.Decide(&Trace{ID: randID(r), Model: "m", E2E: v, Last: t0 + int64(i)*int64(100*time.Millisecond)}, true)
	}
	if !p2.Decide(&Trace{ID: randID(r), Model: "m", E2E: int64(q * 1.5), Last: next}, false).Kept() {
		t.Error("a burst in one minute raised the next minute's bar above 1.5 × the usual p99")
	}
	// The windows survive a checkpoint.
	for name, m := range p.lat.models {
		b := encodeModelForTest(m)
		got, err := decodeModel(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.panes) != len(m.panes) {
			t.Fatalf("model %s: %d panes after decoding, want %d", name, len(got.panes), len(m.panes))
		}
		got.thresholds(floorTo(next, int64(time.Minute)), &p.lat)
		m.thresholds(floorTo(next, int64(time.Minute)), &p.lat)
		if got.thr[1] != m.thr[1] || !math.IsNaN(got.thr[0]) || !math.IsNaN(m.thr[0]) { // no TTFT given
			t.Errorf("thresholds after decoding %v, want %v", got.thr, m.thr)
		}
	}
	for _, b := range [][]byte{nil, {2}, {1, 5}, {1, 1, 2, 200}} {
		if _, err := decodeModel(b); err == nil {
			t.Errorf("decoded corrupt %v", b)
		}
	}
}

// Encode: OTLP that decodes, grouped by resource and scope, the decision
// in tracestate and attributes, cut into records that fit.
func TestEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	res := func(name string) []byte {
		b, _ := proto.Marshal(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: name}}}}})
		return b
	}
	scope, _ := proto.Marshal(&commonpb.InstrumentationScope{Name: "vllm"})
	id := randID(r)
	var members []Member
	for i := range 200 {
		s := &tracepb.Span{TraceId: id[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, byte(i)}, Name: strings.Repeat("x", 200), TraceState: "vendor=1"}
		b, _ := proto.Marshal(s)
		members = append(members, Member{Resource: res([]string{"a", "b"}[i%2]), Scope: scope, Payload: b})
		if i%10 == 0 {
			l, _ := proto.Marshal(&logspb.LogRecord{TimeUnixNano: uint64(i), TraceId: make([]byte, 16), Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "line"}}})
			members = append(members, Member{Log: true, Resource: res("a"), Payload: l})
		}
	}
	d := Decision{Reason: ReasonRate, Rate: 0.25, Threshold: threshold(0.25), Randomness: 0xc0ffee}
	var e Encoder
	for _, limit := range []int{1 << 20, 8 << 10} {
		spans, logs, bad := e.Encode(id, members, d, limit)
		if bad != 0 {
			t.Fatalf("limit %d: %d unwritable", limit, bad)
		}
		if limit == 1<<20 && (len(spans) != 1 || len(logs) != 1) {
			t.Fatalf("%d span records, %d log records for a small trace", len(spans), len(logs))
		}
		if limit < 1<<20 && len(spans) < 5 {
			t.Fatalf("%d span records at a %d-byte limit", len(spans), limit)
		}
		seen := map[byte]bool{}
		for _, v := range spans {
			if len(v) > limit {
				t.Fatalf("record of %d bytes over the limit %d", len(v), limit)
			}
			var td tracepb.TracesData
			if err := proto.Unmarshal(v, &td); err != nil {
				t.Fatal(err)
			}
			for _, rs := range td.ResourceSpans {
				svc := rs.Resource.Attributes[0].Value.GetStringValue()
				for _, ss := range rs.ScopeSpans {
					if ss.Scope.GetName() != "vllm" {
						t.Fatal("scope lost")
					}
					for _, s := range ss.Spans {
						i := s.SpanId[7]
						if seen[i] || (svc == "a") != (i%2 == 0) {
							t.Fatalf("span %d twice or under the wrong resource %s", i, svc)
						}
						seen[i] = true
						if s.TraceState != "ot=th:c;rv:00000000c0ffee,vendor=1" || len(s.Attributes) != 2 ||
							s.Attributes[0].Value.GetStringValue() != "rate" || s.Attributes[1].Value.GetDoubleValue() != 0.25 {
							t.Fatalf("span annotations: %q %v", s.TraceState, s.Attributes)
						}
					}
				}
			}
		}
		if len(seen) != 200 {
			t.Fatalf("%d of 200 spans written", len(seen))
		}
		var ld logspb.LogsData
		if err := proto.Unmarshal(logs[0], &ld); err != nil {
			t.Fatal(err)
		}
		l := ld.ResourceLogs[0].ScopeLogs[0].LogRecords[0]
		if len(l.Attributes) != 3 || l.Attributes[2].Value.GetStringValue() != "c" {
			t.Fatalf("log annotations %v", l.Attributes)
		}
		// A log joined by request id is filed under the trace.
		if [16]byte(l.TraceId) != id {
			t.Fatalf("log trace id %x, want %x", l.TraceId, id)
		}
	}
	// A member that cannot fit is counted, not written.
	if _, _, bad := e.Encode(id, members[:1], d, 100); bad != 1 {
		t.Errorf("unwritable %d, want 1", bad)
	}
}

func TestMergeTraceState(t *testing.T) {
	d := Decision{Threshold: 0, Randomness: 1}
	for old, want := range map[string]string{
		"":                         "ot=th:0;rv:00000000000001",
		"ot=th:8;rv:abc;p:3":       "ot=th:0;rv:00000000000001;p:3",
		"a=1, ot=th:8 ,b=2":        "ot=th:0;rv:00000000000001,a=1,b=2",
		strings.Repeat("v=1,", 40): "ot=th:0;rv:00000000000001" + strings.Repeat(",v=1", 31),
	} {
		if got := string(mergeTraceState(nil, []byte(old), d)); got != want {
			t.Errorf("%q → %q, want %q", old, got, want)
		}
	}
}

func TestCountersBounded(t *testing.T) {
	s := newStage(t, Config{MaxTenants: 3, Policy: Policy{Rate: ptr(1.0)}})
	p := s.NewProcessor()
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 10 {
		p.Decide(&Trace{ID: randID(r), Tenant: string(rune('a' + i))}, true)
	}
	p.Decide(&Trace{ID: randID(r), Tenant: "\xff"}, true)
	c := s.Counts()
	if len(c.Tenants) != 4 { // a, b, c, other
		t.Fatalf("tenants %+v", c.Tenants)
	}
	if o := c.Tenants[3]; o.Tenant != OtherTenant || o.Seen != 8 || o.Kept["rate"] != 8 {
		t.Errorf("other: %+v", o)
	}
}

func slicesSort(v []float64) { sort.Float64s(v) }

func encodeModelForTest(m *modelLat) []byte {
	l := latencies{models: map[string]*modelLat{"x": m}}
	m.dirty = true
	var out []byte
	l.each(func(_ string, b []byte) { out = append([]byte(nil), b...) })
	return out
}

// The windows stay within MaxBytes: the model updated longest ago goes,
// counted, and its gauge share with it.
func TestWindowsBounded(t *testing.T) {
	s := newStage(t, Config{Policy: Policy{Rate: ptr(0.0)}, MaxBytes: 64 << 10})
	p := s.NewProcessor()
	r := rand.New(rand.NewPCG(9, 9))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 4000 {
		m := "model-" + string(rune('a'+i%40))
		p.Decide(&Trace{ID: randID(r), Model: m, E2E: 1e6 + r.Int64N(1e10), TTFT: 1e6 + r.Int64N(1e9), Last: t0 + int64(i)*int64(time.Second)/10}, true)
		if p.lat.bytes > 64<<10 {
			t.Fatalf("windows hold %d bytes, over 64 KiB", p.lat.bytes)
		}
	}
	c := s.Counts()
	if c.Evicted == 0 || c.WindowBytes != p.lat.bytes || len(p.lat.models) >= 40 {
		t.Fatalf("evicted %d, gauge %d vs %d, models %d", c.Evicted, c.WindowBytes, p.lat.bytes, len(p.lat.models))
	}
	p.Close()
	if c := s.Counts(); c.WindowBytes != 0 {
		t.Errorf("gauge %d after the task left", c.WindowBytes)
	}
}

// Encode never panics, whatever the members' bytes (fuse hands it decoded
// members, but nothing reachable from input may panic).
func FuzzEncode(f *testing.F) {
	span, _ := proto.Marshal(&tracepb.Span{Name: "x", TraceState: "a=1,ot=th:8;rv:1"})
	f.Add(span, []byte{}, "ot=p:3,b=2", 0.5)
	f.Add([]byte{0x1a, 0xff}, []byte{0x4a, 0x02, 0, 0}, "", 1.0)
	f.Fuzz(func(t *testing.T, payload, log []byte, state string, rate float64) {
		d := Decision{Reason: ReasonRate, Rate: rate, Threshold: threshold(rate), Randomness: 7}
		var e Encoder
		spans, logs, _ := e.Encode([16]byte{1}, []Member{{Payload: payload}, {Log: true, Payload: log}}, d, 1<<16)
		if len(payload) < 1<<15 && len(spans) != 1 || len(log) < 1<<15 && len(logs) != 1 {
			t.Fatalf("%d span and %d log records", len(spans), len(logs))
		}
		mergeTraceState(nil, []byte(state), d)
	})
}
