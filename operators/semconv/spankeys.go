package semconv

// Canonical span attribute keys.
const (
	KeyInputTokens         = "input_tokens"
	KeyOutputTokens        = "output_tokens"
	KeyTTFT                = "ttft"
	KeyE2E                 = "e2e"
	KeyQueueTime           = "queue_time"
	KeyPrefillTime         = "prefill_time"
	KeyDecodeTime          = "decode_time"
	KeyInferenceTime       = "inference_time"
	KeyKVCacheTransferTime = "kv_cache_transfer_time"
	KeyModel               = "model"
	KeyRequestModel        = "request_model"
	KeyOperation           = "operation"
	KeyProvider            = "provider"
	KeyResponseID          = "response_id"
	KeyRequestID           = "request_id"
	KeyLayerID             = "layer_id"
	KeyBatchSize           = "batch_size"
	KeySeqLen              = "seq_len"
	KeyKVCacheHitRatio     = "kv_cache_hit_ratio"
	KeyIsSpeculative       = "is_speculative"
	KeyLayerCount          = "layer_count"
	KeyTPRank              = "tp_rank"
	KeyHostID              = "host_id"
	KeyPID                 = "pid"
	KeyBatchID             = "batch_id"
)

// spanKeys maps source span attribute keys onto canonical ones. The
// gen_ai.latency.* values are seconds (doubles).
var spanKeys = map[string]string{
	"gen_ai.usage.prompt_tokens":     KeyInputTokens,
	"gen_ai.usage.input_tokens":      KeyInputTokens,
	"gen_ai.usage.completion_tokens": KeyOutputTokens,
	"gen_ai.usage.output_tokens":     KeyOutputTokens,

	"gen_ai.latency.time_to_first_token":     KeyTTFT,
	"gen_ai.latency.e2e":                     KeyE2E,
	"gen_ai.latency.time_in_queue":           KeyQueueTime,
	"gen_ai.latency.time_in_model_prefill":   KeyPrefillTime,
	"gen_ai.latency.time_in_model_decode":    KeyDecodeTime,
	"gen_ai.latency.time_in_model_inference": KeyInferenceTime,
	"gen_ai.latency.kv_cache_transfer_time":  KeyKVCacheTransferTime,

	"gen_ai.response.model": KeyModel,
	"gen_ai.request.model":  KeyRequestModel,
	"gen_ai.operation.name": KeyOperation,
	"gen_ai.provider.name":  KeyProvider,
	"gen_ai.system":         KeyProvider, // pre-1.37 name of gen_ai.provider.name
	"gen_ai.response.id":    KeyResponseID,
	"gen_ai.request.id":     KeyRequestID,
	"rid":                   KeyRequestID, // SGLang
	"request_id":            KeyRequestID, // Triton
	"triton.request_id":     KeyRequestID,

	"layer_id":           KeyLayerID,
	"batch_size":         KeyBatchSize,
	"seq_len":            KeySeqLen,
	"kv_cache_hit_ratio": KeyKVCacheHitRatio,
	"is_speculative":     KeyIsSpeculative,
	"num_layers":         KeyLayerCount,
	"layer_count":        KeyLayerCount,
	"kv.layer.count":     KeyLayerCount,
	"tp_rank":            KeyTPRank,
	"host_id":            KeyHostID,
	"pid":                KeyPID,
	"bid":                KeyBatchID,
}

// SpanKey translates a span attribute key into braid's vocabulary:
// gen_ai.usage.prompt_tokens and gen_ai.usage.input_tokens → input_tokens,
// completion/output → output_tokens, gen_ai.latency.* → ttft, e2e,
// queue_time, prefill_time, decode_time, inference_time,
// kv_cache_transfer_time (seconds), gen_ai.response.model → model,
// gen_ai.request.model → request_model (the model when no response model is
// given), gen_ai.operation.name → operation, gen_ai.provider.name (and the
// older gen_ai.system) → provider, gen_ai.response.id → response_id,
// gen_ai.request.id, SGLang rid and Triton request_id → request_id, and the
// detail-span keys (layer_id, batch_size, seq_len, kv_cache_hit_ratio,
// is_speculative, num_layers/layer_count → layer_count, SGLang tp_rank,
// host_id, pid, bid → batch_id). Unknown keys return ok=false. It does not
// allocate.
func SpanKey(key string) (string, bool) {
	k, ok := spanKeys[key]
	return k, ok
}

// Span names of braid's detail spans.
const (
	SpanPrefill         = "llm.prefill"
	SpanDecodeLayerPref = "llm.decode.layer."
	SpanSampling        = "llm.sampling"
)

// SGLangRID returns the request id of an SGLang request span named
// "… Req {rid}" (e.g. "Scheduler Req 3f2a9c", "Req 3f2a9c"): the word after
// the last "Req " that starts the name or follows a space. Braces around
// the id are removed. It does not allocate.
func SGLangRID(name string) (string, bool) {
	i, j, ok := sglangRID(name)
	return name[i:j], ok
}

// sglangRID returns the bounds of the rid in name.
func sglangRID[S string | []byte](name S) (int, int, bool) {
	const req = "Req "
	for end := len(name); end >= len(req); {
		i := lastIndex(name[:end], req)
		if i < 0 {
			break
		}
		if i == 0 || name[i-1] == ' ' {
			start := i + len(req)
			stop := start
			for stop < len(name) && name[stop] != ' ' {
				stop++
			}
			if stop-start >= 2 && name[start] == '{' && name[stop-1] == '}' {
				start, stop = start+1, stop-1
			}
			if stop == start {
				return 0, 0, false
			}
			return start, stop, true
		}
		end = i + len(req) - 1
	}
	return 0, 0, false
}

func lastIndex[S string | []byte](s S, sub string) int {
	for i := len(s) - len(sub); i >= 0; i-- {
		if string(s[i:i+len(sub)]) == sub {
			return i
		}
	}
	return -1
}
