package simulator

import (
	"encoding/hex"
	"regexp"
	"strconv"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
)

// KV-block events in realistic mode (Config.KVEvents): every request is
// described to a KV block simulator (NewKV, KV.md) when it arrives, the
// simulator is stepped to each batch's event time, and its events are
// written as OTLP log records on the logs topic per the convention of
// INPUTS.md §5 and KV.md.

// Defaults of the KV simulator in the realistic fleet, where they differ
// from NewKV's: blocks of 256 tokens (256 bytes per token and layer), 1024
// per GPU, so that a request makes hundreds of events, not tens of
// thousands, and the pools hold the fleet's load.
const (
	DefaultFleetKVBlockTokens  = 256
	DefaultFleetKVBlocksPerGPU = 1024
)

// kvScope is the instrumentation scope of the KV-block log records.
var kvScope = &commonpb.InstrumentationScope{Name: "braid.kv"}

// xidLine matches the kernel's Xid lines: "NVRM: Xid (PCI:0000:18:00): 13, …".
var xidLine = regexp.MustCompile(`NVRM: Xid \([^)]*\): (\d+)`)

type xidEvent struct {
	t    uint64
	code float64
}

// kvConfig is the KV simulator's configuration: Config.KV with the fleet's
// defaults (DefaultFleetKVBlockTokens...) and Seed.
func (c Config) kvConfig() KVConfig {
	kc := c.KV
	if kc.Seed == 0 {
		kc.Seed = c.Seed
	}
	if kc.BlockTokens == 0 && kc.BlockBytes == 0 {
		kc.BlockTokens, kc.BlockBytes = DefaultFleetKVBlockTokens, DefaultFleetKVBlockTokens*256
	}
	if kc.BlocksPerGPU == 0 {
		kc.BlocksPerGPU = DefaultFleetKVBlocksPerGPU
	}
	kc.EnsureDefaults()
	return kc
}

// startKV creates the KV simulator for the fleet.
func (s *Simulator) startKV() error {
	servers := s.instances
	if h := s.cfg.KVHosts; h > 0 {
		servers = servers[:2*h] // host-major: the first h hosts' servers
	}
	gpus := make([]KVGPU, len(servers))
	for i, in := range servers {
		gpus[i] = KVGPU{Host: in.host, UUID: in.gpuUUID, Index: in.gpuIndex, Instance: in.id, Service: in.service}
	}
	kc := s.cfg.kvConfig()
	k, err := NewKV(kc, gpus)
	if err != nil {
		return err
	}
	s.kv = k
	s.kvByTrace = map[string]*request{}
	s.kvByReq = map[string]*request{}
	return nil
}

// kvAdd describes r to the KV simulator, if its server publishes KV
// events.
func (s *Simulator) kvAdd(r *request, gpu int) {
	if gpu >= len(s.kv.gpus) {
		return
	}
	kr := KVRequest{
		RequestID: r.truth.RequestID, GPU: gpu,
		Arrival: time.Unix(0, int64(r.arrival)).UTC(), Finish: time.Unix(0, int64(r.end)).UTC(),
		PromptTokens: int(r.prompt), OutputTokens: int(r.completion), Prefix: KVAutoPrefix,
	}
	if !r.aborted {
		kr.TraceID, kr.SpanID = hex.EncodeToString(r.traceID), hex.EncodeToString(r.rootSpan)
		s.kvByTrace[kr.TraceID] = r
	}
	s.kvByReq[kr.RequestID] = r
	if err := s.kv.Add(kr); err != nil {
		// Arrivals are generated in time order after the last Step: a
		// failure is a bug.
		panic("simulator: " + err.Error())
	}
}

// kvGroups turns KV events into log groups: those with a trace id (to be
// written with the trace's logs) and those without. It records Xid lines
// for the DCGM exporter and counts the events in the truth.
func (s *Simulator) kvGroups(events []KVEvent) (traced, traceless []logGroup) {
	for i := range events {
		ev := &events[i]
		in := s.instances[ev.GPU]
		lr := kvRecord(ev)
		s.observe(lr.TimeUnixNano)
		if ev.Op == "" {
			s.truth.KVLines++
			if m := xidLine.FindStringSubmatch(ev.Body); m != nil {
				code, _ := strconv.Atoi(m[1])
				in.xids = append(in.xids, xidEvent{lr.TimeUnixNano, float64(code)})
			}
		} else {
			s.truth.KVEvents++
		}
		var r *request // the request of the trace id
		if ev.TraceID != "" {
			if r = s.kvByTrace[ev.TraceID]; r == nil {
				r = s.kvRetry(ev, in)
			}
		}
		if owner := s.kvByReq[ev.RequestID]; owner != nil && ev.Op != "" {
			owner.truth.KVEvents++
		}
		if r != nil {
			if r.truth.Retry {
				r.end = max(r.end, lr.TimeUnixNano) // kept until a minute after (forgetKV)
			}
			s.register(r)
			r.truth.Logs++
			s.truth.TraceLogs++
			traced = append(traced, logGroup{inst: in, r: r, logs: []*logspb.LogRecord{lr}, traceID: ev.TraceID, scope: kvScope})
			continue
		}
		s.truth.TracelessLogs++
		traceless = append(traceless, logGroup{inst: in, logs: []*logspb.LogRecord{lr}, scope: kvScope})
	}
	return traced, traceless
}

// kvRetry registers a request the KV simulator made up: the retry of a
// request it cancelled mid-prefill (CancelRetry), with its own request and
// trace ids. Only its KV events carry its trace id.
func (s *Simulator) kvRetry(ev *KVEvent, in *instance) *request {
	tid, _ := hex.DecodeString(ev.TraceID)
	t := ev.Time.UTC()
	r := &request{inst: in, traceID: tid, arrival: uint64(t.UnixNano()), end: uint64(t.UnixNano())}
	r.truth = &TraceTruth{
		TraceID: ev.TraceID, RequestID: ev.RequestID, Service: in.service, Instance: in.id, Host: in.host,
		GPUUUID: in.gpuUUID, GPUIndex: in.gpuIndex, Model: in.model, Arrival: t, Finish: t, Batch: -1, Retry: true,
		RootSpanID: ev.SpanID, // the span id its KV events carry
	}
	s.kvByTrace[ev.TraceID] = r
	s.kvByReq[ev.RequestID] = r
	s.register(r)
	r.truth.open = false
	return r
}

// kvRecord encodes one KV event per the convention: kv.* attributes, the
// request id, trace and span ids when known; a Body-only record for a
// compute-sanitizer or Xid line.
func kvRecord(ev *KVEvent) *logspb.LogRecord {
	t := uint64(ev.Time.UnixNano())
	lr := &logspb.LogRecord{
		TimeUnixNano: t, ObservedTimeUnixNano: t,
		SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_DEBUG, SeverityText: "DEBUG",
	}
	if ev.TraceID != "" {
		lr.TraceId, _ = hex.DecodeString(ev.TraceID)
		lr.SpanId, _ = hex.DecodeString(ev.SpanID)
		lr.Flags = 1
	}
	if ev.Op == "" {
		lr.SeverityNumber, lr.SeverityText = logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
		lr.Body = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: ev.Body}}
		if ev.RequestID != "" {
			lr.Attributes = append(lr.Attributes, kvStr("gen_ai.request.id", ev.RequestID))
		}
		return lr
	}
	a := []*commonpb.KeyValue{kvStr("kv.op", ev.Op)}
	if ev.Block >= 0 {
		a = append(a, kvInt("kv.block.id", int64(ev.Block)))
	}
	if ev.Hash != "" {
		a = append(a, kvStr("kv.block.hash", ev.Hash))
	}
	if ev.RefCnt >= 0 {
		a = append(a, kvInt("kv.block.ref_cnt", int64(ev.RefCnt)))
	}
	if ev.Layer >= 0 {
		a = append(a, kvInt("kv.layer.index", int64(ev.Layer)))
	}
	if ev.LayerCount > 0 {
		a = append(a, kvInt("kv.layer.count", int64(ev.LayerCount)))
	}
	if ev.Addr >= 0 {
		a = append(a, kvInt("kv.write.addr", ev.Addr))
	}
	if ev.Bytes >= 0 {
		a = append(a, kvInt("kv.write.bytes", ev.Bytes))
	}
	if ev.LayerBase >= 0 {
		a = append(a, kvInt("kv.layer.base", ev.LayerBase))
	}
	if ev.LayerSize >= 0 {
		a = append(a, kvInt("kv.layer.size", ev.LayerSize))
	}
	if ev.RequestID != "" {
		a = append(a, kvStr("gen_ai.request.id", ev.RequestID))
	}
	lr.Attributes = a
	return lr
}

// xidAt is the last Xid on in's GPU at or before t (0: none).
func (in *instance) xidAt(t uint64) float64 {
	v := 0.0
	for _, x := range in.xids {
		if x.t <= t {
			v = x.code
		}
	}
	return v
}

// forgetKV drops the requests that ended long before lo from the KV maps.
func (s *Simulator) forgetKV(lo uint64) {
	const keep = uint64(time.Minute)
	for id, r := range s.kvByReq {
		if r.end+keep < lo {
			delete(s.kvByReq, id)
			if !r.aborted {
				delete(s.kvByTrace, hex.EncodeToString(r.traceID))
			}
		}
	}
}
