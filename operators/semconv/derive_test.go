package semconv

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/braidlabs/braid/operators/braidpb"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

const (
	t0 = uint64(1_764_470_467_000_000_000)
	ms = uint64(1_000_000)
)

type member struct {
	span, log, res []byte
}

func add(d *Deriver, ms []member) {
	for _, m := range ms {
		if m.span != nil {
			d.AddSpan(m.span, m.res)
		} else {
			d.AddLog(m.log, m.res)
		}
	}
}

// vllmRequest is a vLLM llm_request span with every gen_ai.latency figure.
func vllmRequest(t testing.TB) []member {
	res := resource(t, str("service.name", "vllm"), str("host.name", "node-a"))
	root := span(t, "llm_request", t0, t0+2000*ms, []*commonpb.KeyValue{
		str("gen_ai.request.id", "chatcmpl-5c3b2a19"),
		f64("gen_ai.latency.time_to_first_token", 0.25),
		f64("gen_ai.latency.e2e", 2.0),
		f64("gen_ai.latency.time_in_queue", 0.01),
		f64("gen_ai.latency.time_in_model_prefill", 0.2),
		f64("gen_ai.latency.time_in_model_decode", 1.7),
		f64("gen_ai.latency.time_in_model_inference", 1.9),
		i64("gen_ai.usage.prompt_tokens", 100),
		i64("gen_ai.usage.completion_tokens", 18),
		str("gen_ai.request.model", "llama-8b"),
		str("gen_ai.response.model", "meta-llama/Llama-3.1-8B"),
		str("gen_ai.operation.name", "chat"),
		str("gen_ai.provider.name", "vllm"),
	})
	return []member{{span: root, res: res}}
}

func TestDerivedFromAttributes(t *testing.T) {
	var d Deriver
	add(&d, vllmRequest(t))
	got := d.Derived()
	want := &braidpb.Derived{
		RequestIds:         []string{"chatcmpl-5c3b2a19"},
		TtftNanos:          250 * int64(ms),
		E2ENanos:           2000 * int64(ms),
		QueueTimeNanos:     10 * int64(ms),
		PrefillTimeNanos:   200 * int64(ms),
		DecodeTimeNanos:    1700 * int64(ms),
		InferenceTimeNanos: 1900 * int64(ms),
		TpotNanos:          100 * int64(ms), // 1.7 s / (18-1)
		InputTokens:        100,
		OutputTokens:       18,
		Model:              "meta-llama/Llama-3.1-8B",
		Operation:          "chat",
		Provider:           "vllm",
	}
	if !proto.Equal(got, want) {
		t.Errorf("Derived =\n%v\nwant\n%v", got, want)
	}
}

// detailedRequest is a request described by spans only (no latency
// attributes): root, llm.prefill, decode layers, llm.sampling, KV-transfer
// events, plus logs.
func detailedRequest(t testing.TB) []member {
	res := resource(t, str("service.name", "braid-sim"), str("host.name", "node-a"), i64("num_layers", 4))
	rid := "cmpl-8f2d6c1e-0"
	out := []member{
		{span: span(t, "llm_request", t0, t0+1000*ms, []*commonpb.KeyValue{
			str("gen_ai.request.id", rid),
			i64("gen_ai.usage.input_tokens", 64),
			i64("gen_ai.usage.output_tokens", 5),
			str("gen_ai.request.model", "qwen-7b"),
		}, events(
			&tracepb.Span_Event{TimeUnixNano: t0 + 2*ms, Name: "kv_cache_transfer_start"},
			&tracepb.Span_Event{TimeUnixNano: t0 + 7*ms, Name: "kv_cache_transfer_end"},
		)), res: res},
		{span: span(t, "llm.prefill", t0+10*ms, t0+210*ms, []*commonpb.KeyValue{f64("kv_cache_hit_ratio", 0.5)}, child), res: res},
		{span: span(t, "llm.sampling", t0+900*ms, t0+910*ms, nil, child), res: res},
	}
	// Four layers × two steps; layer spans 10 ms long; seq_len 65 and 66.
	for step := uint64(0); step < 2; step++ {
		for l := uint64(0); l < 4; l++ {
			start := t0 + 300*ms + step*100*ms + l*10*ms
			out = append(out, member{span: span(t, "llm.decode.layer."+itoa(l), start, start+10*ms, []*commonpb.KeyValue{
				i64("layer_id", int64(l)), i64("batch_size", 8), i64("seq_len", int64(65+step)),
				f64("kv_cache_hit_ratio", 0.25), boolean("is_speculative", step == 1),
			}, child), res: res})
		}
	}
	out = append(out,
		member{log: logRecord(t, t0+5*ms, "Added request "+rid, str("log_schema_version", "1.2"), str("llm_context_hint", "tenant=acme;route=chat;")), res: res},
		member{log: logRecord(t, t0+50*ms, "prefill done", str("log_schema_version", "1.2"), str("llm_context_hint", "route=completion;shard=3")), res: res},
		member{log: logRecord(t, t0+60*ms, "bad hint", str("llm_context_hint", "Tenant=acme")), res: res},
		member{log: logRecord(t, t0+70*ms, "Finished request "+rid, i64("log_schema_version", 2)), res: res},
	)
	return out
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestDerivedFromSpans(t *testing.T) {
	var d Deriver
	add(&d, detailedRequest(t))
	got := d.Derived()
	hit := (0.5 + 8*0.25) / 9
	layer := func(k int64) *braidpb.LayerStats {
		return &braidpb.LayerStats{Key: k, Count: 2, TotalNanos: 20 * int64(ms), MinNanos: 10 * int64(ms), MaxNanos: 10 * int64(ms)}
	}
	want := &braidpb.Derived{
		RequestIds:           []string{"cmpl-8f2d6c1e-0"},
		TtftNanos:            210 * int64(ms),
		E2ENanos:             1000 * int64(ms),
		PrefillTimeNanos:     200 * int64(ms),
		DecodeTimeNanos:      700 * int64(ms), // sampling end 910 ms − prefill end 210 ms
		InferenceTimeNanos:   900 * int64(ms),
		KvCacheTransferNanos: 5 * int64(ms),
		TpotNanos:            175 * int64(ms), // 700 ms / (5-1)
		InputTokens:          64,
		OutputTokens:         5,
		KvCacheHitRatio:      &hit,
		Model:                "qwen-7b",
		LayerCount:           4,
		Layers:               []*braidpb.LayerStats{layer(0), layer(1), layer(2), layer(3)},
		SeqLenBuckets:        []*braidpb.LayerStats{{Key: 64, Count: 8, TotalNanos: 80 * int64(ms), MinNanos: 10 * int64(ms), MaxNanos: 10 * int64(ms)}},
		SpeculativeSpans:     4,
		Hints: []*braidpb.Hint{
			{Key: "route", Value: "completion"}, // the later log wins
			{Key: "shard", Value: "3"},
			{Key: "tenant", Value: "acme"},
		},
		LogSchemaVersions: []string{"1.2", "2"},
		Logs:              &braidpb.LogCompliance{Logs: 4, WithRequestId: 2, WithSchemaVersion: 3, WithValidHint: 2, WithInvalidHint: 1},
		Tenant:            "acme", // from the hint: no attribute names one
	}
	for step := uint64(0); step < 2; step++ {
		for l := uint64(0); l < 4; l++ {
			want.Anchors = append(want.Anchors, &braidpb.Anchor{
				RequestId: "cmpl-8f2d6c1e-0", TimeUnixNano: t0 + 300*ms + step*100*ms + l*10*ms, LayerId: int64(l), Valid: true,
			})
		}
	}
	if diff := cmpDiff(got, want); diff != "" {
		t.Errorf("Derived mismatch (-got +want):\n%s", diff)
	}
	if n := d.InvalidAnchors(); n != 0 {
		t.Errorf("InvalidAnchors = %d", n)
	}
}

func cmpDiff(got, want proto.Message) string {
	if proto.Equal(got, want) {
		return ""
	}
	return "got:\n" + protoText(got) + "\nwant:\n" + protoText(want)
}

func protoText(m proto.Message) string {
	return prototextString(m)
}

// TestDerivedOrderIndependent adds the same members in many orders, with
// and without Reset between, and expects the same result.
func TestDerivedOrderIndependent(t *testing.T) {
	members := append(detailedRequest(t), vllmRequest(t)...)
	var d Deriver
	add(&d, members)
	want := d.Derived()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		shuffled := slices.Clone(members)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		d.Reset()
		add(&d, shuffled)
		if got := d.Derived(); !proto.Equal(got, want) {
			t.Fatalf("order %d: Derived differs:\n%v\nwant\n%v", i, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	res := resource(t, str("host.name", "node-a"), i64("num_layers", 4))
	root := span(t, "llm_request", t0, t0+1000*ms, []*commonpb.KeyValue{str("gen_ai.request.id", "chatcmpl-77")})
	layer := func(name string, start uint64, attrs ...*commonpb.KeyValue) []byte {
		return span(t, name, start, start+ms, attrs, child)
	}
	cases := []struct {
		name   string
		span   []byte
		rid    string
		layer  int64
		reason string
	}{
		{"valid", layer("llm.decode.layer.2", t0+5*ms, i64("layer_id", 2)), "chatcmpl-77", 2, ""},
		{"valid at window end", layer("llm.decode.layer.3", t0+1000*ms, i64("layer_id", 3)), "chatcmpl-77", 3, ""},
		{"layer as string", layer("llm.decode.layer.1", t0+6*ms, str("layer_id", "1")), "chatcmpl-77", 1, ""},
		{"missing layer", layer("llm.decode.layer.1", t0+7*ms), "chatcmpl-77", -1, ReasonMissingLayer},
		{"layer not a number", layer("llm.decode.layer.1", t0+8*ms, str("layer_id", "one")), "chatcmpl-77", -1, ReasonMissingLayer},
		{"negative layer", layer("llm.decode.layer.1", t0+9*ms, i64("layer_id", -1)), "chatcmpl-77", -1, ReasonNegativeLayer},
		{"layer ≥ count", layer("llm.decode.layer.4", t0+10*ms, i64("layer_id", 4)), "chatcmpl-77", 4, ReasonLayerOutOfRange},
		{"name disagrees", layer("llm.decode.layer.2", t0+11*ms, i64("layer_id", 1)), "chatcmpl-77", 1, ReasonLayerMismatch},
		{"name without number", layer("llm.decode.layer.x", t0+12*ms, i64("layer_id", 1)), "chatcmpl-77", 1, ReasonLayerMismatch},
		{"zero time", layer("llm.decode.layer.0", 0, i64("layer_id", 0)), "chatcmpl-77", 0, ReasonZeroTime},
		{"before request", layer("llm.decode.layer.0", t0-ms, i64("layer_id", 0)), "chatcmpl-77", 0, ReasonOutsideRequest},
		{"after request", layer("llm.decode.layer.0", t0+1001*ms, i64("layer_id", 0)), "chatcmpl-77", 0, ReasonOutsideRequest},
		// A span naming an id of unknown format has no window of its own
		// and is checked against the root window: only the format is wrong.
		{"unknown id format", layer("llm.decode.layer.0", t0+13*ms, i64("layer_id", 0), str("gen_ai.request.id", "my request")), "my request", 0,
			ReasonUnknownRequestID},
		{"several reasons", layer("llm.decode.layer.9", t0-ms, i64("layer_id", 5)), "chatcmpl-77", 5,
			ReasonOutsideRequest + "," + ReasonLayerOutOfRange + "," + ReasonLayerMismatch},
	}
	for _, c := range cases {
		var d Deriver
		d.AddSpan(root, res)
		d.AddSpan(c.span, res)
		got := d.Derived()
		if len(got.Anchors) != 1 {
			t.Fatalf("%s: %d anchors", c.name, len(got.Anchors))
		}
		a := got.Anchors[0]
		if a.RequestId != c.rid || a.LayerId != c.layer || a.Valid != (c.reason == "") || a.Reason != c.reason {
			t.Errorf("%s: anchor = %v; want rid %q layer %d reason %q", c.name, a, c.rid, c.layer, c.reason)
		}
		wantInvalid := 0
		if c.reason != "" {
			wantInvalid = 1
		}
		if n := d.InvalidAnchors(); n != wantInvalid {
			t.Errorf("%s: InvalidAnchors = %d", c.name, n)
		}
	}
}

func TestAnchorsWithoutRequest(t *testing.T) {
	var d Deriver
	d.AddSpan(span(t, "llm.decode.layer.0", t0, t0+ms, []*commonpb.KeyValue{i64("layer_id", 0)}, child), nil)
	a := d.Derived().Anchors[0]
	if a.Valid || a.Reason != ReasonUnknownRequestID+","+ReasonNoRequestWindow || a.RequestId != "" {
		t.Errorf("anchor = %v", a)
	}
	// Without a known layer count, any non-negative layer is in range.
	d.Reset()
	d.AddSpan(span(t, "llm_request", t0, t0+10*ms, []*commonpb.KeyValue{str("rid", "3f2a9c0b7e1d")}), nil)
	d.AddSpan(span(t, "llm.decode.layer.95", t0+ms, t0+2*ms, []*commonpb.KeyValue{i64("layer_id", 95)}, child), nil)
	if a := d.Derived().Anchors[0]; !a.Valid || a.RequestId != "3f2a9c0b7e1d" {
		t.Errorf("anchor = %v", a)
	}
}

func TestParseContextHint(t *testing.T) {
	good := map[string][]KV{
		"tenant=acme":                 {{"tenant", "acme"}},
		"tenant=acme;route=chat":      {{"tenant", "acme"}, {"route", "chat"}},
		"a.b_c9=x=y;_k=1;":            {{"a.b_c9", "x=y"}, {"_k", "1"}},
		"session.id=Zz 9;prio=high-1": {{"session.id", "Zz 9"}, {"prio", "high-1"}},
	}
	for s, want := range good {
		got, err := ParseContextHint(s)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseContextHint(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", ";", "tenant", "tenant=", "=x", "Tenant=x", "9k=x", "a-b=x", " a=x", "a=1;a=2",
		"a=1;;b=2", "a=1;;", "a=1;b"} {
		if got, err := ParseContextHint(s); err == nil {
			t.Errorf("ParseContextHint(%q) = %v, want an error", s, got)
		}
	}
}

func TestHintsAndSchema(t *testing.T) {
	var d Deriver
	d.AddLog(logRecord(t, t0+2, "", str("llm_context_hint", "k=new")), nil)
	d.AddLog(logRecord(t, t0+1, "", str("llm_context_hint", "k=old;j=1"), str("log_schema_version", "1")), nil)
	d.AddLog(logRecord(t, t0+3, "", i64("llm_context_hint", 5)), nil)
	d.AddLog(logRecord(t, t0+4, "", str("llm_context_hint", "a=1;a=2"), str("log_schema_version", "1")), nil)
	got := d.Derived()
	want := &braidpb.Derived{
		Hints:             []*braidpb.Hint{{Key: "j", Value: "1"}, {Key: "k", Value: "new"}},
		LogSchemaVersions: []string{"1"},
		Logs:              &braidpb.LogCompliance{Logs: 4, WithSchemaVersion: 2, WithValidHint: 2, WithInvalidHint: 2},
	}
	if !proto.Equal(got, want) {
		t.Errorf("Derived = %v\nwant %v", got, want)
	}
}

func TestDeriverMalformed(t *testing.T) {
	var d Deriver
	full := detailedRequest(t)
	for _, m := range full {
		b := m.span
		if b == nil {
			b = m.log
		}
		for cut := 0; cut < len(b); cut += 7 {
			if m.span != nil {
				d.AddSpan(b[:cut], m.res[:len(m.res)/2])
			} else {
				d.AddLog(b[:cut], nil)
			}
		}
	}
	d.Derived() // must not panic
}

// TestLayerCountFromReusedResourceBuffer reuses one buffer for two
// resources: the Deriver must read the second.
func TestLayerCountFromReusedResourceBuffer(t *testing.T) {
	r1 := resource(t, i64("num_layers", 4))
	r2 := resource(t, i64("num_layers", 9))
	if len(r1) != len(r2) {
		t.Fatal("resources of different sizes")
	}
	buf := slices.Clone(r1)
	var d Deriver
	s := span(t, "llm_request", t0, t0+ms, nil)
	d.AddSpan(s, buf)
	copy(buf, r2)
	d.AddSpan(s, buf)
	if got := d.Derived().LayerCount; got != 9 {
		t.Errorf("LayerCount = %d, want 9", got)
	}
	d.Reset()
	d.AddSpan(s, r1)
	if got := d.Derived().LayerCount; got != 4 {
		t.Errorf("after Reset: LayerCount = %d, want 4", got)
	}
}

// TestDerivedScratchAsDerived: the reused message says what a new one
// would, derivation after derivation, whatever the one before held — rich
// figures, then none, then others.
func TestDerivedScratchAsDerived(t *testing.T) {
	sets := [][]member{
		append(detailedRequest(t), vllmRequest(t)...),
		nil,
		vllmRequest(t),
		detailedRequest(t),
		append(vllmRequest(t), detailedRequest(t)...),
	}
	var d, fresh Deriver
	for round := range 2 {
		for i, ms := range sets {
			d.Reset()
			fresh.Reset()
			add(&d, ms)
			add(&fresh, ms)
			want := fresh.Derived()
			if got := d.DerivedScratch(); !proto.Equal(got, want) {
				t.Fatalf("round %d, set %d: DerivedScratch\n%v\nwant\n%v", round, i, got, want)
			}
		}
	}
}
