package semconv

import (
	"os"
	"testing"
)

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSpanKey(t *testing.T) {
	cases := map[string]string{
		// vLLM names and the GenAI names they map onto.
		"gen_ai.usage.prompt_tokens":     KeyInputTokens,
		"gen_ai.usage.input_tokens":      KeyInputTokens,
		"gen_ai.usage.completion_tokens": KeyOutputTokens,
		"gen_ai.usage.output_tokens":     KeyOutputTokens,
		// gen_ai.latency.* (vLLM, TensorRT-LLM).
		"gen_ai.latency.time_to_first_token":     KeyTTFT,
		"gen_ai.latency.e2e":                     KeyE2E,
		"gen_ai.latency.time_in_queue":           KeyQueueTime,
		"gen_ai.latency.time_in_model_prefill":   KeyPrefillTime,
		"gen_ai.latency.time_in_model_decode":    KeyDecodeTime,
		"gen_ai.latency.time_in_model_inference": KeyInferenceTime,
		"gen_ai.latency.kv_cache_transfer_time":  KeyKVCacheTransferTime,
		// GenAI conventions.
		"gen_ai.response.model": KeyModel,
		"gen_ai.request.model":  KeyRequestModel,
		"gen_ai.operation.name": KeyOperation,
		"gen_ai.provider.name":  KeyProvider,
		"gen_ai.system":         KeyProvider,
		"gen_ai.response.id":    KeyResponseID,
		// Request ids: vLLM/TensorRT-LLM, SGLang, Triton.
		"gen_ai.request.id": KeyRequestID,
		"rid":               KeyRequestID,
		"request_id":        KeyRequestID,
		"triton.request_id": KeyRequestID,
		// Detail spans.
		"layer_id":           KeyLayerID,
		"batch_size":         KeyBatchSize,
		"seq_len":            KeySeqLen,
		"kv_cache_hit_ratio": KeyKVCacheHitRatio,
		"is_speculative":     KeyIsSpeculative,
		"num_layers":         KeyLayerCount,
		"layer_count":        KeyLayerCount,
		"kv.layer.count":     KeyLayerCount,
		// SGLang thread and batch spans.
		"tp_rank": KeyTPRank,
		"host_id": KeyHostID,
		"pid":     KeyPID,
		"bid":     KeyBatchID,
	}
	for k, want := range cases {
		if got, ok := SpanKey(k); !ok || got != want {
			t.Errorf("SpanKey(%q) = %q, %v; want %q", k, got, ok, want)
		}
	}
	for k := range spanKeys {
		if _, ok := cases[k]; !ok {
			t.Errorf("span key %q has no test case", k)
		}
	}
	for _, k := range []string{"", "gen_ai.latency", "gen_ai.latency.unknown", "gen_ai.usage.total_tokens", "http.method", "RID"} {
		if got, ok := SpanKey(k); ok {
			t.Errorf("SpanKey(%q) = %q, want ok=false", k, got)
		}
	}
}

func TestSGLangRID(t *testing.T) {
	cases := []struct {
		name, want string
		ok         bool
	}{
		{"Req 3f2a9c0b", "3f2a9c0b", true},
		{"Scheduler Req 3f2a9c0b", "3f2a9c0b", true},
		{"Tokenizer Req {7d1e}", "7d1e", true},
		{"Req 3f2a extra", "3f2a", true},
		{"Dispatch Req 1 Req 2", "2", true},
		{"DetokReq 3f2a", "", false},
		{"Req ", "", false},
		{"llm_request", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		got, ok := SGLangRID(c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("SGLangRID(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestSpanAttrCode checks the Deriver's key switch against spanKeys.
func TestSpanAttrCode(t *testing.T) {
	canonical := map[attrCode]string{
		codeTTFT: KeyTTFT, codeE2E: KeyE2E, codeQueue: KeyQueueTime, codePrefill: KeyPrefillTime,
		codeDecode: KeyDecodeTime, codeInference: KeyInferenceTime, codeKVTransfer: KeyKVCacheTransferTime,
		codeInputTokens: KeyInputTokens, codeOutputTokens: KeyOutputTokens, codeModel: KeyModel,
		codeRequestModel: KeyRequestModel, codeOperation: KeyOperation, codeProviderName: KeyProvider,
		codeSystem: KeyProvider, codeLayerID: KeyLayerID, codeSeqLen: KeySeqLen,
		codeKVCacheHitRatio: KeyKVCacheHitRatio, codeIsSpeculative: KeyIsSpeculative, codeLayerCount: KeyLayerCount,
	}
	used := map[string]bool{}
	for _, k := range canonical {
		used[k] = true
	}
	for src, want := range spanKeys {
		c := spanAttrCode([]byte(src))
		switch {
		case c == codeNone && used[want]:
			t.Errorf("spanAttrCode(%q) = none, want the code of %q", src, want)
		case c != codeNone && canonical[c] != want:
			t.Errorf("spanAttrCode(%q) means %q, want %q", src, canonical[c], want)
		}
	}
	if c := spanAttrCode([]byte("gen_ai.system")); c != codeSystem {
		t.Errorf("gen_ai.system: code %d", c)
	}
	if c := spanAttrCode([]byte("unknown")); c != codeNone {
		t.Errorf("unknown key: code %d", c)
	}
}
