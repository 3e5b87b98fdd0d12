package semconv

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

func BenchmarkFromLog(b *testing.B) {
	ids := DefaultRequestIDs()
	cases := []struct {
		name string
		log  []byte
	}{
		{"src=attribute", logRecord(b, t0, "Finished request", str("code.function", "finish"), str("gen_ai.request.id", "chatcmpl-5c3b2a1908f74e6d"))},
		{"src=vllm_body", logRecord(b, t0, "INFO 11-30 02:41:09 [loggers.py:123] Finished request chatcmpl-5c3b2a1908f74e6d9c8b7a6f5e4d3c2b", str("code.function", "finish"))},
		{"src=sglang_body", logRecord(b, t0, "[2026-11-30 02:41:07 TP0] Receive: obj=GenerateReqInput(rid='3f2a9c0b7e1d4c5a8b6f0e2d1c3b4a59', text='Hi')")},
		{"src=llama_body", logRecord(b, t0, "slot launch_slot_: id  0 | task 42 | processing task")},
		{"src=none", logRecord(b, t0, "INFO 11-30 02:41:07 [metrics.py:455] Avg prompt throughput: 812.3 tokens/s, Running: 12 reqs, GPU KV cache usage: 41.2%", str("code.function", "log"))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.log)))
			for b.Loop() {
				ids.FromLog(c.log)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "logs/s")
		})
	}
}

func BenchmarkFromSpan(b *testing.B) {
	ids := DefaultRequestIDs()
	cases := []struct {
		name string
		span []byte
	}{
		{"src=attribute", vllmRequest(b)[0].span},
		{"src=sglang_name", span(b, "Scheduler Req 3f2a9c0b7e1d4c5a", t0, t0+1, []*commonpb.KeyValue{i64("tp_rank", 0), i64("pid", 1234)})},
		{"src=none", span(b, "llm.decode.layer.7", t0, t0+1, []*commonpb.KeyValue{i64("layer_id", 7), i64("batch_size", 8), i64("seq_len", 128), f64("kv_cache_hit_ratio", 0.5), boolean("is_speculative", false)})},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.span)))
			for b.Loop() {
				ids.FromSpan(c.span)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "spans/s")
		})
	}
}

// BenchmarkDeriver derives one request: 12 spans (8 decode layers) and 4
// logs, then Derived.
func BenchmarkDeriver(b *testing.B) {
	members := append(detailedRequest(b), vllmRequest(b)...)
	d := Deriver{}
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		add(&d, members)
		d.Derived()
	}
	b.ReportMetric(float64(b.N*len(members))/b.Elapsed().Seconds(), "members/s")
}

func BenchmarkDeriverAdd(b *testing.B) {
	members := append(detailedRequest(b), vllmRequest(b)...)
	d := Deriver{}
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		add(&d, members)
	}
	b.ReportMetric(float64(b.N*len(members))/b.Elapsed().Seconds(), "members/s")
}

func BenchmarkNormalizeMetric(b *testing.B) {
	label := func(string) (string, bool) { return "used", true }
	b.ReportAllocs()
	for b.Loop() {
		NormalizeMetric("vllm:prefix_cache_hits_total", label)
	}
}

func BenchmarkAppendAttrs(b *testing.B) {
	msg := vllmRequest(b)[0].span
	var dst []KV
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendAttrs(dst[:0], msg, SpanAttrs)
	}
}
