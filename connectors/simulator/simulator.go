package simulator

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Message is one Kafka record as the Collector's exporter writes it.
type Message struct {
	Topic string
	// Key is nil for a null key.
	Key   []byte
	Value []byte
}

// Simulator generates the Collector's export batches. It is not safe for
// concurrent use.
type Simulator struct {
	cfg Config
	rng *rand.Rand

	instances []*instance
	series    []gaugeSeries // resource point series, round robin
	cursor    int           // next series
	splitAcc  float64

	batch   int        // batches generated so far
	pending []*request // split traces whose second part waits for the next batch

	truth  Truth
	traces map[string]*TraceTruth

	// Realistic mode.
	queue   itemQueue // writes due, by export time
	seq     uint64
	rateAcc float64
	orphans []*TraceTruth

	// KV-block events (blockevents.go).
	kv        *KV
	kvBuf     []KVEvent // flushed, written batch by batch
	kvByTrace map[string]*request
	kvByReq   map[string]*request

	// Verdicts (verdicts.go): their own random source, nil without
	// Config.Verdicts.
	vrng *rand.Rand
}

// Semantic-convention schema of the spans and logs, as an OTel SDK sets it.
const schemaURL = "https://opentelemetry.io/schemas/1.40.0"

// Scope of the metrics: the Collector's Prometheus receiver.
var promScope = &commonpb.InstrumentationScope{
	Name:    "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver",
	Version: "0.165.1",
}

// vLLM's bucket bounds for vllm:e2e_request_latency_seconds.
var e2eBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

type instance struct {
	service, id, host, gpuUUID, pciBusID, model string
	sglang                                      bool
	resource                                    *resourcepb.Resource // spans, logs and the instance's metrics
	dcgm                                        *resourcepb.Resource // the DCGM exporter on its host
	traceScope, logScope                        *commonpb.InstrumentationScope

	// cumulative state of the e2e latency histogram
	count   uint64
	sum     float64
	buckets []uint64

	// Realistic fleet (fleet.go, model.go).
	port, gpuIndex                                                        int
	index                                                                 int // in the fleet: host·2 + gpuIndex
	spec                                                                  modelSpec
	flavour                                                               flavour
	noTotal                                                               bool // counters without _total
	hints                                                                 bool // engine logs carry log_schema_version and llm_context_hint
	maxSeqs                                                               int
	target, dcgmTarget                                                    *target
	metricRes                                                             *resourcepb.Resource // the Prometheus receiver's resource of the server
	series, dcgmSeries                                                    []*series
	sKV, sRunning, sWaiting, sHitRate, sPreempt, sQueries, sHits, sConfig *series
	dFBUsed, dFBFree, dFBResv, dUtil, dPCIeTx, dPCIeRx, dNVLink, dXid     *series
	active                                                                []*request // requests not ended before the current batch
	lastStart                                                             uint64     // FIFO admission
	unstarted                                                             []*request // started after the last scrape: not yet in the prefix counters
	preempt                                                               float64    // cumulative counters
	queries                                                               float64
	hits                                                                  float64
	nvlink                                                                float64
	xids                                                                  []xidEvent // Xid lines of the KV simulator, in time order
}

type gaugeSeries struct {
	inst *instance
	dcgm bool
}

// request is one generated request with everything written for it.
type request struct {
	inst     *instance
	truth    *TraceTruth
	traceID  []byte
	spans    []*tracepb.Span // children in end order, root, then the checkers' (verdicts.go)
	logs     []*logspb.LogRecord
	finish   uint64
	e2e      float64
	split    bool
	rootSpan []byte

	// Realistic mode (model.go).
	arrival, start, decodeStart, end uint64 // end = finish, or the abort
	aborted                          bool
	prompt, completion               int64
	hit                              float64
	tenant, route                    string
	idInAttr                         bool // engine logs carry the id as attribute request_id
	regressed                        bool // slowed by a Regression
	registered                       bool // in Truth.Traces

	// Verdicts (verdicts.go): the scope of each checker span among spans,
	// and the checkers' log records (written after the request's logs).
	checkers    map[*tracepb.Span]*commonpb.InstrumentationScope
	verdictLogs []*logspb.LogRecord
}

// New returns a simulator for cfg (defaults applied).
func New(cfg Config) (*Simulator, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	s := &Simulator{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(uint64(cfg.Seed), 0x62726169645f7369)), // "braid_si"
		traces: make(map[string]*TraceTruth),
	}
	if cfg.Realistic {
		s.makeFleet()
		s.startOps()
		if cfg.Verdicts != nil {
			s.startVerdicts()
		}
		if cfg.KVEvents {
			if err := s.startKV(); err != nil {
				return nil, err
			}
		}
	} else {
		s.makeInstances()
	}
	return s, nil
}

func (s *Simulator) makeInstances() {
	type spec struct {
		service, model string
		sglang         bool
	}
	specs := []spec{
		{"vllm", "meta-llama/Llama-3.1-8B-Instruct", false},
		{"vllm", "meta-llama/Llama-3.1-8B-Instruct", false},
		{"vllm", "mistralai/Mistral-7B-Instruct-v0.3", false},
		{"sglang", "Qwen/Qwen2.5-7B-Instruct", true},
	}
	for i, sp := range specs {
		in := &instance{
			service:  sp.service,
			id:       s.uuid(),
			host:     fmt.Sprintf("gpu-node-%d", i+1),
			gpuUUID:  "GPU-" + s.uuid(),
			pciBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10),
			model:    sp.model,
			sglang:   sp.sglang,
			buckets:  make([]uint64, len(e2eBounds)+1),
		}
		in.resource = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			kvStr("service.name", in.service),
			kvStr("service.instance.id", in.id),
			kvStr("host.name", in.host),
			kvStr("gpu.uuid", in.gpuUUID),
			kvStr("model_name", in.model),
		}}
		in.dcgm = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			kvStr("service.name", "dcgm-exporter"),
			kvStr("service.instance.id", in.host+":9400"),
			kvStr("host.name", in.host),
		}}
		if sp.sglang {
			in.traceScope = &commonpb.InstrumentationScope{Name: "sglang", Version: "0.5.4"}
			in.logScope = &commonpb.InstrumentationScope{Name: "sglang.srt.managers.scheduler"}
		} else {
			in.traceScope = &commonpb.InstrumentationScope{Name: "vllm.llm_engine", Version: "0.11.0"}
			in.logScope = &commonpb.InstrumentationScope{Name: "vllm.v1.engine.async_llm"}
		}
		s.instances = append(s.instances, in)
	}
	for _, in := range s.instances {
		s.series = append(s.series, gaugeSeries{inst: in}, gaugeSeries{inst: in, dcgm: true})
	}
}

// uuid returns a random version-4 style UUID string.
func (s *Simulator) uuid() string {
	var b [16]byte
	s.fill(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (s *Simulator) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], s.rng.Uint64())
		copy(b[i:], w[:])
	}
}

// spanID returns 8 random bytes, never all zero.
func (s *Simulator) spanID() []byte {
	b := make([]byte, 8)
	for {
		s.fill(b)
		if binary.LittleEndian.Uint64(b) != 0 {
			return b
		}
	}
}

// traceID returns a fresh trace id: 16 random bytes, or for SGLang 8 zero
// bytes then 8 random ones. Never all zero, never one of the traces in
// Truth.
func (s *Simulator) traceID(sglang bool) []byte {
	for {
		b := make([]byte, 16)
		s.fill(b)
		if sglang {
			clear(b[:8])
		}
		if _, dup := s.traces[hex.EncodeToString(b)]; dup || [16]byte(b) == [16]byte{} {
			continue
		}
		return b
	}
}

// EventTime is the simulated event time of the last batch: batch n (from 0)
// has event time Config.Start + n*Config.BatchInterval, the time the
// Collector exports it, and its records' event times lie in the interval
// before it, (EventTime-BatchInterval-Disorder, EventTime]. Zero before the
// first batch.
func (s *Simulator) EventTime() time.Time {
	if s.batch == 0 {
		return time.Time{}
	}
	return s.batchTime(s.batch - 1)
}

func (s *Simulator) batchTime(n int) time.Time {
	return s.cfg.Start.Add(time.Duration(n) * s.cfg.BatchInterval)
}

// ForgetTraces drops from Truth the traces whose spans were all written
// (those of split traces still pending and those of requests in flight
// stay) and the orphans, keeping the
// totals. Truth holds every trace otherwise, so a long-running demo should
// call it now and then.
func (s *Simulator) ForgetTraces() {
	clear(s.orphans)
	s.orphans = s.orphans[:0]
	keep := s.truth.TraceIDs[:0]
	for _, id := range s.truth.TraceIDs {
		if tt := s.traces[id]; tt.PendingSpans > 0 || tt.open {
			keep = append(keep, id)
			continue
		}
		delete(s.traces, id)
	}
	clear(s.truth.TraceIDs[len(keep):])
	s.truth.TraceIDs = keep
}

// Truth reports what was generated so far. The result is a copy.
func (s *Simulator) Truth() Truth {
	t := s.truth
	t.TraceIDs = slices.Clone(t.TraceIDs)
	t.Traces = make(map[string]TraceTruth, len(s.traces))
	for k, v := range s.traces {
		tt := *v
		tt.SpanIDs = slices.Clone(v.SpanIDs)
		tt.Resources = slices.Clone(v.Resources)
		tt.Verdicts = slices.Clone(v.Verdicts)
		t.Traces[k] = tt
	}
	if s.kv != nil {
		t.KV = s.kv.Truth()
	}
	cloneOps(&t)
	t.Orphans = make([]TraceTruth, len(s.orphans))
	for i, o := range s.orphans {
		t.Orphans[i] = *o
		t.Orphans[i].Resources = slices.Clone(o.Resources)
	}
	return t
}

// Next returns the messages of the next Collector export batch, in the order
// the Collector would produce them: the span messages, then the log
// messages, then the metrics message.
func (s *Simulator) Next() []Message {
	if s.cfg.Realistic {
		return s.stepRealistic(s.arrivals())
	}
	n := s.batch
	s.batch++
	s.truth.Batches = s.batch
	end := uint64(s.batchTime(n).UnixNano())

	reqs := make([]*request, s.cfg.RequestsPerBatch)
	for i := range reqs {
		reqs[i] = s.newRequest(n, end)
	}

	// Spans: second parts of the previous batch's split traces first (the
	// batch was cut just before them), then this batch's traces, with the
	// first parts of the traces being split now at the end.
	var groups []spanGroup
	for _, r := range s.pending {
		groups = append(groups, spanGroup{r, r.spans[1:]})
	}
	var firsts []spanGroup
	var pending []*request
	for _, r := range reqs {
		if r.split {
			firsts = append(firsts, spanGroup{r, r.spans[:1]})
			pending = append(pending, r)
			continue
		}
		groups = append(groups, spanGroup{r, r.spans})
	}
	groups = append(groups, firsts...)
	for _, r := range s.pending {
		s.truth.PendingSpans -= r.truth.PendingSpans
		r.truth.PendingSpans = 0
	}
	s.pending = pending
	for _, r := range pending {
		r.truth.PendingSpans = len(r.spans) - 1
		s.truth.PendingSpans += r.truth.PendingSpans
	}

	msgs := s.spanMessages(groups)
	msgs = append(msgs, s.logMessages(n, end, reqs)...)
	msgs = append(msgs, s.metricMessages(end, reqs)...)
	return msgs
}

// Flush returns the messages for split traces still pending (second
// halves), so a finite run is complete. It returns nil when none is pending.
func (s *Simulator) Flush() []Message {
	var msgs []Message
	if s.cfg.Realistic {
		msgs = s.flushRealistic()
	}
	if len(s.pending) == 0 {
		return msgs
	}
	var groups []spanGroup
	for _, r := range s.pending {
		groups = append(groups, spanGroup{r, r.spans[1:]})
		s.truth.PendingSpans -= r.truth.PendingSpans
		r.truth.PendingSpans = 0
	}
	s.pending = nil
	return append(msgs, s.spanMessages(groups)...)
}

func (s *Simulator) observe(ns uint64) {
	t := time.Unix(0, int64(ns)).UTC()
	if t.After(s.truth.LastEventTime) {
		s.truth.LastEventTime = t
	}
}

// eventTime returns a random time in (end-BatchInterval, end] moved back by up
// to Disorder.
func (s *Simulator) eventTime(end uint64) uint64 {
	t := end - uint64(s.rng.Int64N(int64(s.cfg.BatchInterval)))
	if s.cfg.Disorder > 0 {
		t -= uint64(s.rng.Int64N(int64(s.cfg.Disorder) + 1))
	}
	return t
}

func (s *Simulator) newRequest(batch int, end uint64) *request {
	// About 1 request in 8 goes to the SGLang instance.
	var in *instance
	if s.rng.IntN(8) == 0 {
		in = s.instances[3]
	} else {
		in = s.instances[s.rng.IntN(3)]
	}
	r := &request{inst: in}
	r.traceID = s.traceID(in.sglang)
	var rid [16]byte
	s.fill(rid[:])
	requestID := hex.EncodeToString(rid[:])
	if !in.sglang {
		requestID = "cmpl-" + requestID
	}

	r.finish = s.eventTime(end)
	prompt := 16 + s.rng.Int64N(4081)
	completion := 1 + s.rng.Int64N(1024)
	queue := round6(s.rng.Float64() * 0.5)
	prefill := round6(float64(prompt)/20000 + s.rng.Float64()*0.05)
	decode := round6(float64(completion) * (0.01 + s.rng.Float64()*0.02))
	ttft := round6(queue + prefill)
	r.e2e = round6(queue + prefill + decode)
	isErr := s.rng.IntN(16) == 0
	arrival := r.finish - uint64(r.e2e*1e9)
	prefillStart := arrival + uint64(queue*1e9)
	decodeStart := arrival + uint64(ttft*1e9)

	rootID := s.spanID()
	r.rootSpan = rootID
	batchSize := 1 + s.rng.Int64N(64)
	seqLen := prompt + completion
	hit := math.Round(s.rng.Float64()*1000) / 1000

	child := func(name string, start uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
		return &tracepb.Span{
			TraceId: r.traceID, SpanId: s.spanID(), ParentSpanId: rootID,
			Flags: 0x101, Name: name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: start, EndTimeUnixNano: r.finish,
			Attributes: attrs, Status: &tracepb.Status{},
		}
	}
	r.spans = append(r.spans, child("llm.prefill", prefillStart,
		kvInt("batch_size", batchSize), kvInt("seq_len", prompt), kvDouble("kv_cache_hit_ratio", hit)))
	nLayers := 2 + s.rng.IntN(3)
	layers := s.rng.Perm(32)[:nLayers]
	slices.Sort(layers)
	step := uint64(decode*1e9) / uint64(nLayers+1)
	for i, l := range layers {
		r.spans = append(r.spans, child(fmt.Sprintf("llm.decode.layer.%d", l), decodeStart+uint64(i)*step,
			kvInt("layer_id", int64(l)), kvInt("batch_size", batchSize), kvInt("seq_len", seqLen),
			kvDouble("kv_cache_hit_ratio", hit), kvBool("is_speculative", s.rng.IntN(4) == 0)))
	}
	r.spans = append(r.spans, child("llm.sampling", r.finish-min(uint64(decode*1e9), uint64(s.rng.Int64N(2_000_000)+100_000)),
		kvInt("batch_size", batchSize), kvInt("seq_len", seqLen)))

	rootAttrs := []*commonpb.KeyValue{
		kvStr("gen_ai.request.id", requestID),
		kvStr("gen_ai.response.model", in.model),
		kvInt("gen_ai.usage.prompt_tokens", prompt),
		kvInt("gen_ai.usage.completion_tokens", completion),
		kvDouble("gen_ai.latency.time_in_queue", queue),
		kvDouble("gen_ai.latency.time_to_first_token", ttft),
		kvDouble("gen_ai.latency.e2e", r.e2e),
		kvDouble("gen_ai.latency.time_in_model_prefill", prefill),
		kvDouble("gen_ai.latency.time_in_model_decode", decode),
		kvDouble("gen_ai.latency.time_in_model_inference", round6(prefill+decode)),
	}
	if in.sglang {
		rootAttrs = append(rootAttrs, kvStr("rid", requestID))
	}
	status := &tracepb.Status{}
	if isErr {
		status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "request aborted: preempted too many times"}
	}
	r.spans = append(r.spans, &tracepb.Span{
		TraceId: r.traceID, SpanId: rootID, Flags: 0x101,
		Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: arrival, EndTimeUnixNano: r.finish,
		Attributes: rootAttrs, Status: status,
	})

	// Logs carrying the trace id, all at the finish time.
	for i := 0; i < s.cfg.LogsPerRequest; i++ {
		sev, sevText := logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
		var body string
		spanID := rootID
		switch {
		case i == 0 && isErr:
			sev, sevText = logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
			body = fmt.Sprintf("Aborted request %s: preempted too many times", requestID)
		case i == 0:
			body = fmt.Sprintf("Finished request %s", requestID)
		default:
			spanID = r.spans[(i-1)%(len(r.spans)-1)].SpanId
			body = fmt.Sprintf("Request %s: prompt_tokens=%d completion_tokens=%d e2e=%.3fs", requestID, prompt, completion, r.e2e)
		}
		r.logs = append(r.logs, &logspb.LogRecord{
			TimeUnixNano: r.finish, ObservedTimeUnixNano: r.finish,
			SeverityNumber: sev, SeverityText: sevText,
			Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}},
			Attributes: []*commonpb.KeyValue{kvStr("code.function.name", "output_handler")},
			Flags:      1,
			TraceId:    r.traceID, SpanId: spanID,
		})
	}

	// Split: the cumulative ratio decides, so that exactly SplitRatio of
	// the traces are split over a run.
	s.splitAcc += s.cfg.SplitRatio
	if s.splitAcc >= 1 {
		s.splitAcc--
		r.split = true
	}

	tid := hex.EncodeToString(r.traceID)
	r.truth = &TraceTruth{
		TraceID:    tid,
		RequestID:  requestID,
		Service:    in.service,
		Instance:   in.id,
		Batch:      batch,
		Arrival:    time.Unix(0, int64(arrival)).UTC(),
		Finish:     time.Unix(0, int64(r.finish)).UTC(),
		RootSpanID: hex.EncodeToString(rootID),
		Split:      r.split,
		Error:      isErr,
	}
	s.traces[tid] = r.truth
	s.truth.TraceIDs = append(s.truth.TraceIDs, tid)
	return r
}

func round6(f float64) float64 { return math.Round(f*1e6) / 1e6 }

type spanGroup struct {
	r     *request
	spans []*tracepb.Span
}

func (s *Simulator) encode(m proto.Message) []byte {
	if s.cfg.Encoding == EncodingJSON {
		return marshalJSON(m)
	}
	return marshalProto(m)
}

// spanMessages writes span groups: keyed, one message per group (each group
// is one trace); unkeyed, one message for all, consecutive groups of the
// same instance sharing a ResourceSpans block.
func (s *Simulator) spanMessages(groups []spanGroup) []Message {
	if len(groups) == 0 {
		return nil
	}
	count := func(g spanGroup) {
		for _, sp := range g.spans {
			g.r.truth.SpanIDs = append(g.r.truth.SpanIDs, hex.EncodeToString(sp.SpanId))
			s.observe(sp.EndTimeUnixNano)
		}
		g.r.truth.Spans += len(g.spans)
		g.r.truth.SpanMessages++
		s.truth.Spans += len(g.spans)
	}
	var msgs []Message
	if s.cfg.Keying == KeyByTraceID {
		for _, g := range groups {
			rs := resourceSpans(g.r.inst, nil)
			addSpans(rs, g.r, g.spans)
			td := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{rs}}
			msgs = append(msgs, Message{Topic: s.cfg.Topics.Spans, Key: []byte(g.r.truth.TraceID), Value: s.encode(td)})
			count(g)
		}
	} else {
		td := &tracepb.TracesData{}
		var last *tracepb.ResourceSpans
		var lastInst *instance
		for _, g := range groups {
			if g.r.inst != lastInst {
				last = resourceSpans(g.r.inst, nil)
				lastInst = g.r.inst
				td.ResourceSpans = append(td.ResourceSpans, last)
			}
			addSpans(last, g.r, g.spans)
			count(g)
		}
		msgs = append(msgs, Message{Topic: s.cfg.Topics.Spans, Value: s.encode(td)})
	}
	s.truth.SpanMessages += len(msgs)
	return msgs
}

func resourceSpans(in *instance, spans []*tracepb.Span) *tracepb.ResourceSpans {
	return &tracepb.ResourceSpans{
		Resource:   in.resource,
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: in.traceScope, Spans: spans, SchemaUrl: schemaURL}},
		SchemaUrl:  schemaURL,
	}
}

type logGroup struct {
	inst *instance
	r    *request // nil for trace-less logs
	logs []*logspb.LogRecord
	// traceID keys the group in keyed mode when r is unknown (KV events);
	// scope overrides the instance's log scope.
	traceID string
	scope   *commonpb.InstrumentationScope
}

func resourceLogs(in *instance, scope *commonpb.InstrumentationScope, logs []*logspb.LogRecord) *logspb.ResourceLogs {
	if scope == nil {
		scope = in.logScope
	}
	return &logspb.ResourceLogs{
		Resource:  in.resource,
		ScopeLogs: []*logspb.ScopeLogs{{Scope: scope, LogRecords: logs}},
		SchemaUrl: schemaURL,
	}
}

// mergeLogGroups puts consecutive groups of the same instance into one
// ResourceLogs block.
func mergeLogGroups(groups []logGroup) *logspb.LogsData {
	ld := &logspb.LogsData{}
	var last *logspb.ResourceLogs
	var lastInst *instance
	var lastScope *commonpb.InstrumentationScope
	for _, g := range groups {
		if g.inst != lastInst || g.scope != lastScope {
			last = resourceLogs(g.inst, g.scope, nil)
			lastInst, lastScope = g.inst, g.scope
			ld.ResourceLogs = append(ld.ResourceLogs, last)
		}
		last.ScopeLogs[0].LogRecords = append(last.ScopeLogs[0].LogRecords, g.logs...)
	}
	return ld
}

func (s *Simulator) logMessages(batch int, end uint64, reqs []*request) []Message {
	var traced []logGroup
	for _, r := range reqs {
		if len(r.logs) == 0 {
			continue
		}
		traced = append(traced, logGroup{inst: r.inst, r: r, logs: r.logs})
		r.truth.Logs += len(r.logs)
		s.truth.TraceLogs += len(r.logs)
		s.observe(r.finish)
	}

	// Engine logs without a trace id: the first names a request of the
	// batch by its id only, the others are periodic engine statistics.
	var traceless []logGroup
	for j := 0; j < s.cfg.TracelessLogs; j++ {
		t := s.eventTime(end)
		var in *instance
		var body string
		if j == 0 {
			r := reqs[s.rng.IntN(len(reqs))]
			in = r.inst
			if in.sglang {
				body = fmt.Sprintf("Receive: obj=GenerateReqInput(rid='%s')", r.truth.RequestID)
			} else {
				body = fmt.Sprintf("Added request %s.", r.truth.RequestID)
			}
			r.truth.RequestIDLogs++
			// The request was added when it arrived, but engines log in
			// batches too: keep the record's time inside this batch.
		} else {
			in = s.instances[(batch+j)%len(s.instances)]
			body = fmt.Sprintf("Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
				s.rng.Float64()*20000, s.rng.Float64()*5000, s.rng.IntN(64), s.rng.IntN(8), s.rng.Float64()*100, s.rng.Float64()*100)
		}
		traceless = append(traceless, logGroup{inst: in, logs: []*logspb.LogRecord{{
			TimeUnixNano: t, ObservedTimeUnixNano: t,
			SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
			Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}},
			Attributes: []*commonpb.KeyValue{kvStr("code.function.name", "log_engine")},
		}}})
		s.truth.TracelessLogs++
		s.observe(t)
	}

	var msgs []Message
	if s.cfg.Keying == KeyByTraceID {
		for _, g := range traced {
			ld := mergeLogGroups([]logGroup{g})
			msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Key: []byte(g.r.truth.TraceID), Value: s.encode(ld)})
		}
		if len(traceless) > 0 {
			msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Value: s.encode(mergeLogGroups(traceless))})
		}
	} else if len(traced)+len(traceless) > 0 {
		msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Value: s.encode(mergeLogGroups(append(traced, traceless...)))})
	}
	s.truth.LogMessages += len(msgs)
	return msgs
}

// metricMessages writes the batch's points as one null-key message: per
// instance, a histogram point of vllm:e2e_request_latency_seconds (or
// sglang:...) per request with an exemplar pointing at it, and the gauge
// points of the round robin over the resource series.
func (s *Simulator) metricMessages(end uint64, reqs []*request) []Message {
	type block struct {
		res     *resourcepb.Resource
		metrics []*metricspb.Metric
	}
	var blocks []*block
	byRes := map[*resourcepb.Resource]*block{}
	get := func(res *resourcepb.Resource) *block {
		b := byRes[res]
		if b == nil {
			b = &block{res: res}
			byRes[res] = b
			blocks = append(blocks, b)
		}
		return b
	}
	// The servers' process start, before any event time.
	start := uint64(s.cfg.Start.Add(-time.Hour - s.cfg.BatchInterval - s.cfg.Disorder).UnixNano())

	if !s.cfg.NoExemplars {
		sorted := slices.Clone(reqs)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].finish < sorted[j].finish })
		hists := map[*instance]*metricspb.Metric{}
		for _, in := range s.instances { // fixed order of blocks
			for _, r := range sorted {
				if r.inst == in {
					get(in.resource)
					break
				}
			}
		}
		for _, r := range sorted {
			in := r.inst
			in.count++
			in.sum = round6(in.sum + r.e2e)
			in.buckets[sort.SearchFloat64s(e2eBounds, r.e2e)]++ // bucket i holds (bounds[i-1], bounds[i]]
			h := hists[in]
			if h == nil {
				name := "vllm:e2e_request_latency_seconds"
				if in.sglang {
					name = "sglang:e2e_request_latency_seconds"
				}
				h = &metricspb.Metric{
					Name: name, Description: "Histogram of e2e request latency in seconds.", Unit: "s",
					Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
						AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
					}},
				}
				hists[in] = h
				b := get(in.resource)
				b.metrics = append(b.metrics, h)
			}
			sum := in.sum
			hist := h.GetHistogram()
			hist.DataPoints = append(hist.DataPoints, &metricspb.HistogramDataPoint{
				Attributes:        []*commonpb.KeyValue{kvStr("model_name", in.model), kvStr("engine", "0")},
				StartTimeUnixNano: start, TimeUnixNano: r.finish,
				Count: in.count, Sum: &sum,
				BucketCounts:   slices.Clone(in.buckets), // per bucket, cumulative over time
				ExplicitBounds: e2eBounds,
				Exemplars: []*metricspb.Exemplar{{
					TimeUnixNano: r.finish,
					Value:        &metricspb.Exemplar_AsDouble{AsDouble: r.e2e},
					SpanId:       r.rootSpan, TraceId: r.traceID,
				}},
			})
			r.truth.ExemplarPoints++
			s.truth.ExemplarPoints++
			s.observe(r.finish)
		}
	}

	for j := 0; j < s.cfg.ResourcePoints; j++ {
		se := s.series[s.cursor]
		s.cursor = (s.cursor + 1) % len(s.series)
		t := s.eventTime(end)
		in := se.inst
		var m *metricspb.Metric
		if se.dcgm {
			m = gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", float64(20000+s.rng.IntN(59000)), t,
				kvStr("gpu", "0"), kvStr("UUID", in.gpuUUID), kvStr("pci_bus_id", in.pciBusID),
				kvStr("device", "nvidia0"), kvStr("modelName", "NVIDIA H100 80GB HBM3"), kvStr("Hostname", in.host))
			b := get(in.dcgm)
			b.metrics = append(b.metrics, m)
		} else {
			name, desc := "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
			if in.sglang {
				name, desc = "sglang:token_usage", "The token usage."
			}
			m = gauge(name, desc, math.Round(s.rng.Float64()*1000)/1000, t, kvStr("model_name", in.model), kvStr("engine", "0"))
			b := get(in.resource)
			b.metrics = append(b.metrics, m)
		}
		s.truth.ResourcePoints++
		s.observe(t)
	}

	if len(blocks) == 0 {
		return nil
	}
	md := &metricspb.MetricsData{}
	for _, b := range blocks {
		md.ResourceMetrics = append(md.ResourceMetrics, &metricspb.ResourceMetrics{
			Resource:     b.res,
			ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: promScope, Metrics: b.metrics}},
		})
	}
	s.truth.MetricMessages++
	return []Message{{Topic: s.cfg.Topics.Metrics, Value: s.encode(md)}}
}

func gauge(name, desc string, v float64, t uint64, attrs ...*commonpb.KeyValue) *metricspb.Metric {
	return &metricspb.Metric{
		Name: name, Description: desc,
		Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{{
			Attributes: attrs, TimeUnixNano: t,
			Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v},
		}}}},
	}
}

func kvStr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func kvInt(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func kvDouble(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func kvBool(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}
