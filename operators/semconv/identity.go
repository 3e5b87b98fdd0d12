package semconv

import "strings"

// Identity says where a request ran or where a resource series comes from.
// Model is the LLM model, never the GPU model.
type Identity struct {
	Service, Instance, Host, GPUUUID, GPUIndex, Model string
}

// IdentityOf reads an Identity from a resource's attributes and the
// attributes (labels) of one data point or span. Resource attributes:
// service.name, service.instance.id, host.name, gpu.uuid, gpu.index.
// Point/span attributes, which override the resource's for the parts they
// give: DCGM labels UUID (GPU uuid), gpu (GPU index), Hostname and hostname
// (host); host.name, gpu.uuid, gpu.index; vLLM label model_name; span
// attributes gen_ai.response.model, else gen_ai.request.model. The DCGM
// label modelName is the GPU's model and is ignored. Within one attribute
// list the first occurrence of a key wins.
func IdentityOf(resourceAttrs, pointOrSpanAttrs []KV) Identity {
	var id Identity
	for _, kv := range resourceAttrs {
		if kv.Value == "" {
			continue
		}
		switch kv.Key {
		case "service.name":
			setOnce(&id.Service, kv.Value)
		case "service.instance.id":
			setOnce(&id.Instance, kv.Value)
		case "host.name":
			setOnce(&id.Host, kv.Value)
		case "gpu.uuid":
			setOnce(&id.GPUUUID, kv.Value)
		case "gpu.index":
			setOnce(&id.GPUIndex, kv.Value)
		}
	}
	var p Identity
	var reqModel string
	for _, kv := range pointOrSpanAttrs {
		if kv.Value == "" {
			continue
		}
		switch kv.Key {
		case "host.name", "Hostname", "hostname":
			setOnce(&p.Host, kv.Value)
		case "gpu.uuid", "UUID":
			setOnce(&p.GPUUUID, kv.Value)
		case "gpu.index", "gpu":
			setOnce(&p.GPUIndex, kv.Value)
		case "model_name", "gen_ai.response.model":
			setOnce(&p.Model, kv.Value)
		case "gen_ai.request.model":
			setOnce(&reqModel, kv.Value)
		}
	}
	if p.Model == "" {
		p.Model = reqModel
	}
	override(&id.Host, p.Host)
	override(&id.GPUUUID, p.GPUUUID)
	override(&id.GPUIndex, p.GPUIndex)
	override(&id.Model, p.Model)
	return id
}

// identityPointKey reports whether IdentityOf reads key among a point's or
// span's attributes.
func identityPointKey(key []byte) bool {
	switch string(key) {
	case "host.name", "Hostname", "hostname", "gpu.uuid", "UUID", "gpu.index", "gpu",
		"model_name", "gen_ai.response.model", "gen_ai.request.model":
		return true
	}
	return false
}

func setOnce(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// String renders the identity as "service=…,instance=…,host=…,gpu_uuid=…,
// gpu_index=…,model=…" in that order, leaving out empty parts. In values,
// '\\', ',' and '=' are escaped with a backslash, so distinct identities
// have distinct texts. The zero Identity renders as "".
func (id Identity) String() string {
	var b strings.Builder
	add := func(k, v string) {
		if v == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		for i := 0; i < len(v); i++ {
			switch c := v[i]; c {
			case '\\', ',', '=':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
	}
	add("service", id.Service)
	add("instance", id.Instance)
	add("host", id.Host)
	add("gpu_uuid", id.GPUUUID)
	add("gpu_index", id.GPUIndex)
	add("model", id.Model)
	return b.String()
}

// HasGPU reports whether the identity names a GPU (uuid or index).
func (id Identity) HasGPU() bool { return id.GPUUUID != "" || id.GPUIndex != "" }

// Matches reports whether a request (req, the identity of its spans) ran
// on the resource a series comes from:
//   - Host equal, both non-empty;
//   - a series with a GPU (a GPU exporter's: DCGM, NVML) matches when the
//     request's GPU is the same: uuids compared when both have one, else
//     indexes when both have one; a request without a comparable GPU does
//     not match a GPU series. Its Instance is the exporter's scrape target,
//     not the server's, and is not compared;
//   - any other series (the server's own) matches when, if it has an
//     Instance, the request's Instance is equal and, if it has a Model, the
//     request's Model is equal.
//
// Service is not compared: a scraped series' service.name is the scrape
// job, not the server's.
func (req Identity) Matches(series Identity) bool {
	if req.Host == "" || req.Host != series.Host {
		return false
	}
	if series.HasGPU() {
		switch {
		case series.GPUUUID != "" && req.GPUUUID != "":
			return req.GPUUUID == series.GPUUUID
		case series.GPUIndex != "" && req.GPUIndex != "":
			return req.GPUIndex == series.GPUIndex
		default:
			return false
		}
	}
	if series.Instance != "" && req.Instance != series.Instance {
		return false
	}
	return series.Model == "" || req.Model == series.Model
}
