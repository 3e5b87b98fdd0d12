package semconv_test

import (
	"fmt"

	"github.com/braidlabs/braid/operators/semconv"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"
)

func ExampleNormalizeMetric() {
	labels := map[string]string{"kv_cache_block_type": "free"}
	label := func(k string) (string, bool) { v, ok := labels[k]; return v, ok }
	for _, name := range []string{
		"vllm:gpu_prefix_cache_hits_total",
		"sglang:token_usage",
		"nv_trt_llm_kv_cache_block_metrics",
		"DCGM_FI_DEV_FB_USED",
		"process_cpu_seconds_total",
	} {
		m, ok := semconv.NormalizeMetric(name, label)
		fmt.Println(name, "→", m.Name, m.Kind, ok)
	}
	// Output:
	// vllm:gpu_prefix_cache_hits_total → prefix_cache_hits counter true
	// sglang:token_usage → kv_cache_usage gauge true
	// nv_trt_llm_kv_cache_block_metrics → kv_cache_blocks_free gauge true
	// DCGM_FI_DEV_FB_USED → gpu_fb_used_mib gauge true
	// process_cpu_seconds_total →  unknown false
}

func ExampleRequestIDs_FromLog() {
	ids := semconv.DefaultRequestIDs()
	for _, body := range []string{
		"INFO 11-30 02:41:07 [async_llm.py:270] Added request chatcmpl-5c3b2a19.",
		"[2026-11-30 02:41:07 TP0] Receive: obj=GenerateReqInput(rid='3f2a9c0b', text='Hi')",
		"slot launch_slot_: id  0 | task 42 | processing task",
		`I1130 02:41:07.123 1 infer_request.cc:131] "[request id: 17] Setting state"`,
	} {
		rec, _ := proto.Marshal(&logspb.LogRecord{Body: &commonpb.AnyValue{
			Value: &commonpb.AnyValue_StringValue{StringValue: body}}})
		id, _ := ids.FromLog(rec)
		fmt.Println(id)
	}
	// Output:
	// chatcmpl-5c3b2a19
	// 3f2a9c0b
	// task-42
	// 17
}

func ExampleIdentity_Matches() {
	req := semconv.IdentityOf(
		[]semconv.KV{{Key: "service.name", Value: "vllm"}, {Key: "host.name", Value: "node-a"}, {Key: "gpu.uuid", Value: "GPU-aa"}},
		[]semconv.KV{{Key: "gen_ai.response.model", Value: "llama-8b"}},
	)
	dcgm := semconv.IdentityOf(nil, []semconv.KV{
		{Key: "gpu", Value: "0"}, {Key: "UUID", Value: "GPU-aa"}, {Key: "modelName", Value: "NVIDIA H100"}, {Key: "Hostname", Value: "node-a"},
	})
	fmt.Println(req)
	fmt.Println(dcgm)
	fmt.Println(req.Matches(dcgm))
	// Output:
	// service=vllm,host=node-a,gpu_uuid=GPU-aa,model=llama-8b
	// host=node-a,gpu_uuid=GPU-aa,gpu_index=0
	// true
}
