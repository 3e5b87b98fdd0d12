package semconv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
)

func TestIdentityOf(t *testing.T) {
	cases := []struct {
		name      string
		res, attr []KV
		want      Identity
	}{
		{
			name: "vllm span",
			res:  []KV{{"service.name", "vllm"}, {"service.instance.id", "i-1"}, {"host.name", "node-a"}, {"gpu.uuid", "GPU-aa"}, {"gpu.index", "0"}},
			attr: []KV{{"gen_ai.request.model", "llama-8b"}, {"gen_ai.response.model", "meta/llama-8b"}},
			want: Identity{Service: "vllm", Instance: "i-1", Host: "node-a", GPUUUID: "GPU-aa", GPUIndex: "0", Model: "meta/llama-8b"},
		},
		{
			name: "request model only",
			res:  []KV{{"host.name", "node-a"}},
			attr: []KV{{"gen_ai.request.model", "llama-8b"}},
			want: Identity{Host: "node-a", Model: "llama-8b"},
		},
		{
			name: "dcgm hostname",
			res:  []KV{{"service.name", "dcgm"}, {"host.name", "collector-0"}},
			attr: []KV{{"gpu", "1"}, {"UUID", "GPU-bb"}, {"pci_bus_id", "00000000:3B:00.0"}, {"modelName", "NVIDIA H100 80GB HBM3"}, {"hostname", "node-b"}},
			want: Identity{Service: "dcgm", Host: "node-b", GPUUUID: "GPU-bb", GPUIndex: "1"},
		},
		{
			name: "dcgm old Hostname",
			attr: []KV{{"gpu", "2"}, {"UUID", "GPU-cc"}, {"modelName", "NVIDIA H200"}, {"Hostname", "node-c"}},
			want: Identity{Host: "node-c", GPUUUID: "GPU-cc", GPUIndex: "2"},
		},
		{
			name: "vllm metric",
			res:  []KV{{"service.name", "vllm"}, {"service.instance.id", "10.0.0.5:8000"}, {"host.name", "node-a"}},
			attr: []KV{{"model_name", "llama-8b"}, {"engine", "0"}},
			want: Identity{Service: "vllm", Instance: "10.0.0.5:8000", Host: "node-a", Model: "llama-8b"},
		},
		{
			name: "empty values ignored, first wins",
			res:  []KV{{"host.name", ""}, {"host.name", "h1"}, {"host.name", "h2"}},
			attr: []KV{{"gpu", ""}},
			want: Identity{Host: "h1"},
		},
	}
	for _, c := range cases {
		if got := IdentityOf(c.res, c.attr); got != c.want {
			t.Errorf("%s: IdentityOf = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestIdentityString(t *testing.T) {
	id := Identity{Service: "vllm", Instance: "i,1", Host: "node=a", GPUUUID: "GPU-aa", GPUIndex: "0", Model: `m\x`}
	want := `service=vllm,instance=i\,1,host=node\=a,gpu_uuid=GPU-aa,gpu_index=0,model=m\\x`
	if got := id.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (Identity{Host: "h", Model: "m"}).String(); got != "host=h,model=m" {
		t.Errorf("String = %q", got)
	}
	if got := (Identity{}).String(); got != "" {
		t.Errorf("zero String = %q", got)
	}
}

func TestMatches(t *testing.T) {
	req := Identity{Service: "vllm", Instance: "i-1", Host: "node-a", GPUUUID: "GPU-aa", GPUIndex: "0", Model: "llama"}
	cases := []struct {
		name   string
		req    Identity
		series Identity
		want   bool
	}{
		{"host only", req, Identity{Host: "node-a"}, true},
		{"host differs", req, Identity{Host: "node-b"}, false},
		{"both hosts empty", Identity{}, Identity{}, false},
		{"request host empty", Identity{Model: "llama"}, Identity{Model: "llama"}, false},
		{"service ignored", req, Identity{Service: "dcgm", Host: "node-a"}, true},
		{"instance equal", req, Identity{Host: "node-a", Instance: "i-1"}, true},
		{"instance differs", req, Identity{Host: "node-a", Instance: "i-2"}, false},
		{"model equal", req, Identity{Host: "node-a", Model: "llama"}, true},
		{"model differs", req, Identity{Host: "node-a", Model: "qwen"}, false},
		{"gpu uuid equal", req, Identity{Host: "node-a", GPUUUID: "GPU-aa", GPUIndex: "7"}, true},
		{"gpu uuid differs", req, Identity{Host: "node-a", GPUUUID: "GPU-bb", GPUIndex: "0"}, false},
		{"gpu index equal", req, Identity{Host: "node-a", GPUIndex: "0"}, true},
		{"gpu index differs", req, Identity{Host: "node-a", GPUIndex: "1"}, false},
		{"index vs request uuid only", Identity{Host: "node-a", GPUUUID: "GPU-aa"}, Identity{Host: "node-a", GPUIndex: "0"}, false},
		{"request without gpu", Identity{Host: "node-a"}, Identity{Host: "node-a", GPUUUID: "GPU-aa"}, false},
		{"series without gpu", Identity{Host: "node-a"}, Identity{Host: "node-a"}, true},
		// A GPU exporter's Instance is its scrape target, not the server.
		{"gpu series, exporter instance", req, Identity{Host: "node-a", Instance: "dcgm-exporter:9400", GPUUUID: "GPU-aa"}, true},
		{"gpu series, exporter instance, other gpu", req, Identity{Host: "node-a", Instance: "dcgm-exporter:9400", GPUIndex: "3"}, false},
	}
	for _, c := range cases {
		if got := c.req.Matches(c.series); got != c.want {
			t.Errorf("%s: Matches = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestIdentityAttrsAsAllAttrs: the identity read from the attributes
// AppendIdentityAttrs renders is the one read from all of them, for span
// attribute lists that mix every key IdentityOf reads (some twice, some
// empty, some not strings) with others.
func TestIdentityAttrsAsAllAttrs(t *testing.T) {
	res := resource(t, str("service.name", "vllm"), str("host.name", "node-r"), str("gpu.index", "0"))
	keys := []string{"host.name", "Hostname", "hostname", "gpu.uuid", "UUID", "gpu.index", "gpu", "model_name",
		"gen_ai.response.model", "gen_ai.request.model", "modelName", "service.name", "gen_ai.latency.e2e", "x"}
	r := rand.New(rand.NewPCG(5, 6))
	ra := AppendAttrs(nil, res, ResourceAttrs)
	for round := range 300 {
		var attrs []*commonpb.KeyValue
		for range r.IntN(8) {
			k := keys[r.IntN(len(keys))]
			switch r.IntN(4) {
			case 0:
				attrs = append(attrs, i64(k, int64(r.IntN(4))))
			case 1:
				attrs = append(attrs, str(k, ""))
			default:
				attrs = append(attrs, str(k, fmt.Sprintf("v%d", r.IntN(3))))
			}
		}
		sp := span(t, "llm_request", 1, 2, attrs)
		want := IdentityOf(ra, AppendAttrs(nil, sp, SpanAttrs))
		if got := IdentityOf(ra, AppendIdentityAttrs(nil, sp, SpanAttrs)); got != want {
			t.Fatalf("round %d, %v: identity %+v, want %+v", round, attrs, got, want)
		}
	}
}
