package simulator

import (
	"container/heap"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The realistic mode is event driven: a request is generated when it
// arrives, with its whole life planned on its server (queue, prefill,
// decode, or an abort); what it writes (engine logs, spans, trace-id logs,
// exemplar) goes into a queue of items due at their event time plus a delay
// up to Disorder, and each batch writes the items due in its interval.
// Scrapes read the modelled state of the servers at their scrape times.

type itemKind uint8

const (
	itemArrivalLog itemKind = iota
	itemFinish              // spans, trace-id logs, finish log, exemplar
	itemAbort               // abort log; the request becomes an orphan
)

type item struct {
	at   uint64 // when the Collector exports it
	seq  uint64
	kind itemKind
	r    *request
}

type itemQueue []*item

func (q itemQueue) Len() int { return len(q) }
func (q itemQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q itemQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *itemQueue) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *itemQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return x
}

var (
	tenants = []string{"acme", "globex", "initech", "umbrella", "hooli"}
	routes  = []string{"/v1/chat/completions", "/v1/completions"}
)

func (s *Simulator) push(at uint64, kind itemKind, r *request) {
	if s.cfg.Disorder > 0 {
		at += uint64(s.rng.Int64N(int64(s.cfg.Disorder) + 1))
	}
	s.seq++
	heap.Push(&s.queue, &item{at: at, seq: s.seq, kind: kind, r: r})
}

// capTokens is the KV pool of a server, in tokens.
func (in *instance) capTokens() float64 { return float64(in.spec.numBlocks * blockSize) }

// tokensAt is the KV-cache footprint of r at t: its prompt once admitted,
// growing linearly with the tokens decoded.
func (r *request) tokensAt(t uint64) float64 {
	if t < r.start || t >= r.end || r.start >= r.end {
		return 0
	}
	tok := float64(r.prompt)
	if t > r.decodeStart && r.end > r.decodeStart {
		tok += float64(r.completion) * float64(t-r.decodeStart) / float64(r.end-r.decodeStart)
	}
	return tok
}

// state returns the number of requests running and waiting on in at t, and
// their KV demand as a fraction of the pool (above 1 under pressure).
func (in *instance) state(t uint64) (running, waiting int, demand float64) {
	for _, r := range in.active {
		if r.arrival > t || r.end <= t {
			continue
		}
		if r.start <= t && r.start < r.end {
			running++
			demand += r.tokensAt(t)
		} else {
			waiting++
		}
	}
	return running, waiting, demand / in.capTokens()
}

// admit returns the start time of a request arriving at a that needs
// `need` tokens: the first time, not before a nor before the previous
// admission (FIFO), when fewer than maxSeqs run and the running requests'
// reservations (prompt plus half the completion, vLLM's optimism) leave
// room for it.
func (in *instance) admit(a uint64, need float64) uint64 {
	t := max(a, in.lastStart)
	for {
		running, reserved := 0, 0.0
		next := uint64(math.MaxUint64)
		for _, r := range in.active {
			if r.start <= t && t < r.end && r.start < r.end {
				running++
				reserved += float64(r.prompt) + float64(r.completion)/2
				next = min(next, r.end)
			}
		}
		if running < in.maxSeqs && reserved+need <= in.capTokens() || next == math.MaxUint64 {
			return t
		}
		t = next
	}
}

// arrive generates a request arriving at a.
func (s *Simulator) arrive(a uint64) {
	in := s.instances[s.rng.IntN(len(s.instances))]
	r := &request{inst: in, arrival: a}
	r.traceID = s.traceID(in.sglang)
	var rid [16]byte
	s.fill(rid[:])
	requestID := hex.EncodeToString(rid[:])
	if !in.sglang {
		if s.rng.IntN(5) == 0 {
			requestID = "chatcmpl-" + requestID
		} else {
			requestID = "cmpl-" + requestID
		}
	}
	r.prompt = 16 + s.rng.Int64N(4081)
	r.completion = 1 + s.rng.Int64N(1024)
	r.hit = math.Round(s.rng.Float64()*1000) / 1000
	r.tenant = tenants[s.rng.IntN(len(tenants))]
	r.route = routes[s.rng.IntN(len(routes))]
	r.idInAttr = s.rng.IntN(6) == 0
	isErr := s.rng.IntN(16) == 0
	r.aborted = s.rng.Float64() < s.cfg.AbortRatio
	f := in.spec.slowdown
	prefill := round6((float64(r.prompt)*(1-r.hit/2)/20000 + s.rng.Float64()*0.05) * f)
	decode := round6(float64(r.completion) * (0.01 + s.rng.Float64()*0.02) * f)

	r.start = in.admit(a, float64(r.prompt)+float64(r.completion)/2)
	prefill, r.regressed = s.slowPrefill(in.index, a, float64(r.start-a)/1e9, prefill)
	r.decodeStart = r.start + uint64(prefill*1e9)
	r.end = r.decodeStart + uint64(decode*1e9)
	if r.aborted {
		u := 0.1 + 0.8*s.rng.Float64()
		r.end = a + uint64(u*float64(r.end-a))
	}
	if r.start-a > uint64(maxQueueTime) && r.end > a+uint64(maxQueueTime) {
		r.aborted = true // the client gave up waiting
		r.end = a + uint64(maxQueueTime)
	}
	if r.start < r.end {
		in.lastStart = r.start
		in.unstarted = append(in.unstarted, r)
	}
	in.active = append(in.active, r)

	r.truth = &TraceTruth{
		RequestID: requestID, Service: in.service, Instance: in.id, Host: in.host,
		GPUUUID: in.gpuUUID, GPUIndex: in.gpuIndex, Model: in.model,
		Tenant: r.tenant, Route: r.route,
		Arrival: time.Unix(0, int64(a)).UTC(), Finish: time.Unix(0, int64(r.end)).UTC(),
		Error: isErr && !r.aborted, Orphan: r.aborted, Batch: -1, Regressed: r.regressed,
	}
	s.push(a, itemArrivalLog, r)
	if r.aborted {
		s.push(r.end, itemAbort, r)
		if s.kv != nil {
			s.kvAdd(r, s.gpuOf(in))
		}
		return
	}
	r.truth.TraceID = hex.EncodeToString(r.traceID)
	r.finish = r.end
	s.buildSpans(r, requestID, float64(r.start-a)/1e9, prefill, decode, isErr)
	if s.vrng != nil {
		s.addVerdicts(r)
	}
	s.push(r.end, itemFinish, r)
	if s.kv != nil {
		s.kvAdd(r, s.gpuOf(in))
	}
}

// gpuOf is the index of in's GPU in the fleet (the KV simulator's GPUs).
func (s *Simulator) gpuOf(in *instance) int {
	return slices.Index(s.instances, in)
}

// buildSpans writes r's spans and trace-id logs (the legacy shapes plus the
// GenAI conventions' request attributes).
func (s *Simulator) buildSpans(r *request, requestID string, queue, prefill, decode float64, isErr bool) {
	in := r.inst
	queue = round6(queue)
	ttft := round6(queue + prefill)
	r.e2e = round6(float64(r.end-r.arrival) / 1e9)
	rootID := s.spanID()
	r.rootSpan = rootID
	batchSize := 1 + s.rng.Int64N(64)
	seqLen := r.prompt + r.completion
	child := func(name string, start uint64, attrs ...*commonpb.KeyValue) *tracepb.Span {
		return &tracepb.Span{
			TraceId: r.traceID, SpanId: s.spanID(), ParentSpanId: rootID,
			Flags: 0x101, Name: name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
			StartTimeUnixNano: start, EndTimeUnixNano: r.end,
			Attributes: attrs, Status: &tracepb.Status{},
		}
	}
	r.spans = append(r.spans, child("llm.prefill", r.start,
		kvInt("batch_size", batchSize), kvInt("seq_len", r.prompt), kvDouble("kv_cache_hit_ratio", r.hit)))
	nLayers := 2 + s.rng.IntN(3)
	layers := s.rng.Perm(32)[:nLayers]
	slices.Sort(layers)
	step := (r.end - r.decodeStart) / uint64(nLayers+1)
	for i, l := range layers {
		r.spans = append(r.spans, child(fmt.Sprintf("llm.decode.layer.%d", l), r.decodeStart+uint64(i)*step,
			kvInt("layer_id", int64(l)), kvInt("batch_size", batchSize), kvInt("seq_len", seqLen),
			kvDouble("kv_cache_hit_ratio", r.hit), kvBool("is_speculative", s.rng.IntN(4) == 0)))
	}
	r.spans = append(r.spans, child("llm.sampling", r.end-min(r.end-r.decodeStart, uint64(s.rng.Int64N(2_000_000)+100_000)),
		kvInt("batch_size", batchSize), kvInt("seq_len", seqLen)))

	attrs := []*commonpb.KeyValue{
		kvStr("gen_ai.operation.name", "chat"),
		kvStr("gen_ai.request.id", requestID),
		kvStr("gen_ai.request.model", in.model),
		kvStr("gen_ai.response.model", in.model),
	}
	if !in.sglang {
		attrs = append(attrs, kvInt("gen_ai.usage.prompt_tokens", r.prompt), kvInt("gen_ai.usage.completion_tokens", r.completion))
	}
	if in.sglang || in.flavour == flavourVLLM && in.gpuIndex == 0 {
		attrs = append(attrs, kvInt("gen_ai.usage.input_tokens", r.prompt), kvInt("gen_ai.usage.output_tokens", r.completion))
	}
	attrs = append(attrs,
		kvDouble("gen_ai.latency.time_in_queue", queue),
		kvDouble("gen_ai.latency.time_to_first_token", ttft),
		kvDouble("gen_ai.latency.e2e", r.e2e),
		kvDouble("gen_ai.latency.time_in_model_prefill", prefill),
		kvDouble("gen_ai.latency.time_in_model_decode", decode),
		kvDouble("gen_ai.latency.time_in_model_inference", round6(prefill+decode)),
	)
	name := "llm_request"
	if in.sglang {
		attrs = append(attrs, kvStr("rid", requestID))
		name = "Generate Req " + requestID
	}
	status := &tracepb.Status{}
	if isErr {
		status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "request aborted: preempted too many times"}
	}
	r.spans = append(r.spans, &tracepb.Span{
		TraceId: r.traceID, SpanId: rootID, Flags: 0x101,
		Name: name, Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: r.arrival, EndTimeUnixNano: r.end,
		Attributes: attrs, Status: status,
	})
	r.truth.RootSpanID = hex.EncodeToString(rootID)

	for i := 0; i < s.cfg.LogsPerRequest; i++ {
		sev, sevText := logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
		var body string
		spanID := rootID
		switch {
		case i == 0 && isErr:
			sev, sevText = logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
			body = fmt.Sprintf("Aborted request %s: preempted too many times", requestID)
		case i == 0:
			body = fmt.Sprintf("Request %s finished: %s", requestID, "stop")
		default:
			spanID = r.spans[(i-1)%(len(r.spans)-1)].SpanId
			body = fmt.Sprintf("Request %s: prompt_tokens=%d completion_tokens=%d e2e=%.3fs", requestID, r.prompt, r.completion, r.e2e)
		}
		r.logs = append(r.logs, &logspb.LogRecord{
			TimeUnixNano: r.end, ObservedTimeUnixNano: r.end,
			SeverityNumber: sev, SeverityText: sevText,
			Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}},
			Attributes: []*commonpb.KeyValue{kvStr("code.function.name", "output_handler")},
			Flags:      1,
			TraceId:    r.traceID, SpanId: spanID,
		})
	}
}

// engineLog is an engine log line about r without a trace id: vLLM's
// "Added/Finished/Aborted request <id>.", SGLang's "Receive: obj=…" and
// "Finish: rid=…". Some carry the id in attribute request_id instead of the
// body; the servers with hints add log_schema_version and llm_context_hint
// (a few malformed).
func (s *Simulator) engineLog(r *request, kind itemKind) *logspb.LogRecord {
	in, id := r.inst, r.truth.RequestID
	var body, fn string
	switch {
	case in.sglang && kind == itemArrivalLog:
		fn = "_handle_batch_request"
		obj := "rid='" + id + "', "
		if r.idInAttr {
			obj = ""
		}
		body = fmt.Sprintf("Receive: obj=GenerateReqInput(%stext=None, input_ids=<%d tokens>, sampling_params={'max_new_tokens': %d, 'temperature': 0.7}, stream=False)", obj, r.prompt, r.completion)
	case in.sglang && kind == itemFinish:
		fn = "handle_loop"
		if r.idInAttr {
			body = fmt.Sprintf("Finish: prompt_tokens=%d, completion_tokens=%d, e2e_latency=%.3f", r.prompt, r.completion, r.e2e)
		} else {
			body = fmt.Sprintf("Finish: rid=%s, prompt_tokens=%d, completion_tokens=%d, e2e_latency=%.3f", id, r.prompt, r.completion, r.e2e)
		}
	case in.sglang:
		fn = "abort_request"
		body = "Abort request rid=" + id
		if r.idInAttr {
			body = "Abort request"
		}
	default:
		fn = "add_request"
		verb := map[itemKind]string{itemArrivalLog: "Added", itemFinish: "Finished", itemAbort: "Aborted"}[kind]
		if kind != itemArrivalLog {
			fn = "output_handler"
		}
		if r.idInAttr {
			body = verb + " request."
		} else {
			body = verb + " request " + id + "."
		}
	}
	attrs := []*commonpb.KeyValue{kvStr("code.function.name", fn)}
	if r.idInAttr {
		attrs = append(attrs, kvStr("request_id", id))
	}
	if in.hints {
		hint := fmt.Sprintf("model=%s;tenant=%s;route=%s", in.model, r.tenant, r.route)
		if s.rng.IntN(10) == 0 {
			switch s.rng.IntN(3) {
			case 0:
				hint = fmt.Sprintf("model=%s;tenant=%s;route", in.model, r.tenant)
			case 1:
				hint = fmt.Sprintf("model=%s;;tenant=%s", in.model, r.tenant)
			default:
				hint = in.model + "|" + r.tenant
			}
			s.truth.MalformedContextHints++
		}
		attrs = append(attrs, kvStr("log_schema_version", "1.0"), kvStr("llm_context_hint", hint))
		s.truth.ContextHints++
	}
	t := r.arrival
	if kind != itemArrivalLog {
		t = r.end
	}
	return &logspb.LogRecord{
		TimeUnixNano: t, ObservedTimeUnixNano: t,
		SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
		Body:       &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}},
		Attributes: attrs,
	}
}

// arrivals returns the number of requests arriving in the next batch.
func (s *Simulator) arrivals() int {
	if s.cfg.Rate == 0 {
		return s.cfg.RequestsPerBatch
	}
	s.rateAcc += s.cfg.Rate * s.cfg.BatchInterval.Seconds()
	n := int(s.rateAcc)
	s.rateAcc -= float64(n)
	return n
}

// stepRealistic generates one batch in realistic mode with n arrivals.
func (s *Simulator) stepRealistic(n int) []Message {
	b := s.batch
	s.batch++
	s.truth.Batches = s.batch
	end := uint64(s.batchTime(b).UnixNano())
	lo := end - uint64(s.cfg.BatchInterval)

	for _, in := range s.instances {
		in.active = slices.DeleteFunc(in.active, func(r *request) bool { return r.end <= lo })
	}
	times := make([]uint64, n)
	for i := range times {
		times[i] = end - uint64(s.rng.Int64N(int64(s.cfg.BatchInterval)))
	}
	slices.Sort(times)
	for _, a := range times {
		s.arrive(a)
	}
	var kvTraced, kvTraceless []logGroup
	if s.kv != nil {
		evs := s.kv.Step(time.Unix(0, int64(end)+1))
		k := 0
		for k < len(s.kvBuf) && uint64(s.kvBuf[k].Time.UnixNano()) <= end {
			k++
		}
		evs = append(evs, s.kvBuf[:k]...)
		s.kvBuf = s.kvBuf[k:]
		kvTraced, kvTraceless = s.kvGroups(evs)
	}
	scrapes := s.scrape(lo, end)

	var finished []*request
	var engine []logGroup
	for len(s.queue) > 0 && s.queue[0].at <= end {
		it := heap.Pop(&s.queue).(*item)
		r := it.r
		if it.kind == itemFinish {
			finished = append(finished, r)
		}
		lr := s.engineLog(r, it.kind)
		engine = append(engine, logGroup{inst: r.inst, logs: []*logspb.LogRecord{lr}})
		r.truth.RequestIDLogs++
		s.truth.TracelessLogs++
		s.observe(lr.TimeUnixNano)
		if it.kind == itemAbort {
			r.truth.Resources = s.resourceTruth(r)
			s.orphans = append(s.orphans, r.truth)
			if r.regressed {
				s.regressed(r)
			}
		}
	}

	for _, r := range finished {
		r.truth.Batch = b
		r.truth.Resources = s.resourceTruth(r)
		s.splitAcc += s.cfg.SplitRatio
		if s.splitAcc >= 1 {
			s.splitAcc--
			r.split = true
		}
		r.truth.Split = r.split
		s.register(r)
		if r.regressed {
			s.regressed(r)
		}
		r.truth.open = false
	}
	msgs := s.spanMessages(s.spanGroups(finished))
	msgs = append(msgs, s.writeLogs(finished, kvTraced, append(engine, kvTraceless...))...)
	msgs = append(msgs, s.realisticMetrics(finished, scrapes)...)
	if s.batch%64 == 0 {
		s.pruneSamples()
		if s.kv != nil {
			s.forgetKV(lo)
		}
	}
	return msgs
}

// register adds r to Truth.Traces when the first record carrying its trace
// id is written: its spans, or before them a KV event.
func (s *Simulator) register(r *request) {
	if r.registered {
		return
	}
	r.registered = true
	r.truth.open = true
	s.traces[r.truth.TraceID] = r.truth
	s.truth.TraceIDs = append(s.truth.TraceIDs, r.truth.TraceID)
}

// spanGroups orders a batch's span groups as Next does: second parts of
// the previous batch's split traces, this batch's whole traces, first parts
// of the traces split now; and moves the pending accounting along.
func (s *Simulator) spanGroups(reqs []*request) []spanGroup {
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
	return groups
}

// writeLogs writes the trace-id logs of reqs, the other groups with a
// trace id (KV events) and the trace-less groups, keyed (one message per
// trace id) or not, as logMessages does.
func (s *Simulator) writeLogs(reqs []*request, kvTraced, traceless []logGroup) []Message {
	var traced []logGroup
	for _, r := range reqs {
		if len(r.logs) == 0 {
			continue
		}
		traced = append(traced, logGroup{inst: r.inst, r: r, logs: r.logs, traceID: r.truth.TraceID})
		r.truth.Logs += len(r.logs)
		s.truth.TraceLogs += len(r.logs)
		s.observe(r.end)
	}
	traced = append(traced, kvTraced...)
	// The checkers' records after every other group (of their trace id,
	// keyed), so that the others' blocks and order are as they are without
	// verdicts.
	var checkers []logGroup
	for _, r := range reqs {
		if len(r.verdictLogs) == 0 {
			continue
		}
		checkers = append(checkers, logGroup{inst: r.inst, r: r, logs: r.verdictLogs, traceID: r.truth.TraceID, scope: evaluatorScope})
		r.truth.Logs += len(r.verdictLogs)
		s.truth.TraceLogs += len(r.verdictLogs)
	}
	var msgs []Message
	if s.cfg.Keying == KeyByTraceID {
		var order []string
		byID := map[string][]logGroup{}
		for _, g := range append(traced, checkers...) {
			if byID[g.traceID] == nil {
				order = append(order, g.traceID)
			}
			byID[g.traceID] = append(byID[g.traceID], g)
		}
		for _, id := range order {
			msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Key: []byte(id), Value: s.encode(mergeLogGroups(byID[id]))})
		}
		if len(traceless) > 0 {
			msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Value: s.encode(mergeLogGroups(traceless))})
		}
	} else if len(traced)+len(traceless)+len(checkers) > 0 {
		msgs = append(msgs, Message{Topic: s.cfg.Topics.Logs, Value: s.encode(mergeLogGroups(slices.Concat(traced, traceless, checkers)))})
	}
	s.truth.LogMessages += len(msgs)
	return msgs
}

// flushRealistic runs batches without arrivals until every request in
// flight has been written, then writes the split traces' second parts.
func (s *Simulator) flushRealistic() []Message {
	var msgs []Message
	for len(s.queue) > 0 {
		msgs = append(msgs, s.stepRealistic(0)...)
	}
	if s.kv != nil {
		s.kvBuf = append(s.kvBuf, s.kv.Flush()...)
		for len(s.kvBuf) > 0 {
			msgs = append(msgs, s.stepRealistic(0)...)
		}
	}
	return msgs
}

// pruneSamples drops the samples no request in flight can still need: all
// but the last one before the earliest arrival in flight.
func (s *Simulator) pruneSamples() {
	cut := uint64(math.MaxUint64)
	for _, it := range s.queue {
		cut = min(cut, it.r.arrival)
	}
	for _, in := range s.instances {
		for _, se := range slices.Concat(in.series, in.dcgmSeries) {
			i := sort.Search(len(se.samples), func(i int) bool { return se.samples[i].t > cut })
			if i > 1 {
				se.samples = slices.Delete(se.samples, 0, i-1)
			}
		}
	}
}

// realisticMetrics writes the batch's metrics message: the exemplar
// histogram points of the finished requests, then the scrapes.
func (s *Simulator) realisticMetrics(finished []*request, scrapes []*metricspb.ResourceMetrics) []Message {
	md := &metricspb.MetricsData{}
	if !s.cfg.NoExemplars && len(finished) > 0 {
		md.ResourceMetrics = s.exemplarBlocks(finished)
	}
	md.ResourceMetrics = append(md.ResourceMetrics, scrapes...)
	if len(md.ResourceMetrics) == 0 {
		return nil
	}
	s.truth.MetricMessages++
	return []Message{{Topic: s.cfg.Topics.Metrics, Value: s.encode(md)}}
}

// exemplarBlocks writes one histogram point per request, as metricMessages
// does, in the servers' Prometheus resources.
func (s *Simulator) exemplarBlocks(reqs []*request) []*metricspb.ResourceMetrics {
	sorted := slices.Clone(reqs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].end < sorted[j].end })
	start := uint64(s.cfg.Start.Add(-time.Hour).UnixNano())
	var out []*metricspb.ResourceMetrics
	for _, in := range s.instances {
		var h *metricspb.Histogram
		for _, r := range sorted {
			if r.inst != in {
				continue
			}
			if h == nil {
				name := "vllm:e2e_request_latency_seconds"
				if in.sglang {
					name = "sglang:e2e_request_latency_seconds"
				}
				h = &metricspb.Histogram{AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}
				out = append(out, &metricspb.ResourceMetrics{
					Resource: in.metricRes,
					ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: promScope, Metrics: []*metricspb.Metric{{
						Name: name, Description: "Histogram of e2e request latency in seconds.", Unit: "s",
						Data: &metricspb.Metric_Histogram{Histogram: h},
					}}}},
				})
			}
			in.count++
			in.sum = round6(in.sum + r.e2e)
			in.buckets[sort.SearchFloat64s(e2eBounds, r.e2e)]++
			sum := in.sum
			h.DataPoints = append(h.DataPoints, &metricspb.HistogramDataPoint{
				Attributes:        s.serverLabels(in),
				StartTimeUnixNano: start, TimeUnixNano: r.end,
				Count: in.count, Sum: &sum,
				BucketCounts:   slices.Clone(in.buckets),
				ExplicitBounds: e2eBounds,
				Exemplars: []*metricspb.Exemplar{{
					TimeUnixNano: r.end,
					Value:        &metricspb.Exemplar_AsDouble{AsDouble: r.e2e},
					SpanId:       r.rootSpan, TraceId: r.traceID,
				}},
			})
			r.truth.ExemplarPoints++
			s.truth.ExemplarPoints++
			s.observe(r.end)
		}
	}
	return out
}

func (s *Simulator) serverLabels(in *instance) []*commonpb.KeyValue {
	return in.sKV.labels
}
