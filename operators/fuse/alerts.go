package fuse

import (
	"bytes"
	"errors"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/llmmetrics"
	"github.com/braidlabs/braid/operators/semconv"
)

// stageAlerts prefixes braid.reason for partial aggregates the alerts
// stage cannot read.
const stageAlerts = "alerts"

// alertsStage is the alerts stage of a task (operators/alerts: its
// windows, partial aggregates and rule evaluation, nil when alerts are
// off) and the feed of the derived LLM metrics (Config.LLM): it observes
// the traces the fuse stage emits, the resource samples and the incidents,
// and merges the partial aggregates of the alerts topic. Used on the
// task's goroutine only.
type alertsStage struct {
	outputs
	proc    *alerts.Processor // nil when off
	scratch []byte
}

func newAlertsStage(o outputs, partition int32) *alertsStage {
	a := &alertsStage{outputs: o}
	if o.cfg.Alerts != nil {
		a.proc = o.cfg.Alerts.NewProcessor(partition)
	}
	return a
}

// process implements stage: a partial aggregate of the alerts topic.
func (a *alertsStage) process(t *engine.Task, rec *kgo.Record, _ int) error {
	if a.proc == nil {
		return nil
	}
	err := a.proc.Process(t, rec)
	if ie := (*alerts.InvalidError)(nil); errors.As(err, &ie) {
		return a.reject(t, rec, stageAlerts, ie.Cause)
	}
	return err
}

// onWatermark implements stage: the rules are evaluated at the watermark
// of every input, the partial aggregates' included (Task.WatermarkAll).
func (a *alertsStage) onWatermark(t *engine.Task, _ int64) (bool, error) {
	if a.proc == nil {
		return false, nil
	}
	return false, a.proc.OnWatermark(t, t.WatermarkAll())
}

func (a *alertsStage) prepareCheckpoint(t *engine.Task) error {
	if a.proc == nil {
		return nil
	}
	return a.proc.PrepareCheckpoint(t)
}

func (a *alertsStage) restore(t *engine.Task) error {
	if a.proc == nil {
		return nil
	}
	return a.proc.Restore(t)
}

func (a *alertsStage) close() {
	if a.proc != nil {
		a.proc.Close()
	}
}

// wantsTraces reports whether emitted traces are observed at all.
func (a *alertsStage) wantsTraces() bool { return a.proc != nil || a.cfg.LLM != nil }

// emittedTrace is what the fuse stage hands the alerts stage and the LLM
// metrics of a trace it emits (with spans).
type emittedTrace struct {
	id       [16]byte
	last     int64 // its last event time
	identity semconv.Identity
	derived  *braidpb.Derived // nil when not derived
	errors   bool
	polluted bool    // an incident names it
	kvUsage  float64 // NaN: unknown
}

// traceIdentity is where the trace ran: the root span's place, else its
// first span's (cached for the emission in progress).
func (p *fuser) traceIdentity(sum *summary) semconv.Identity {
	e := &p.emitter
	if e.haveID {
		return e.identity
	}
	span, res := sum.rootSpan, sum.rootRes
	if span == nil {
		for i := range e.members {
			if m := &e.members[i]; m.kind == kindSpan {
				span, res = m.sortKey, m.resource
				break
			}
		}
	}
	e.identity, e.haveID, e.haveSpan = semconv.Identity{}, true, span != nil
	if span != nil {
		if !bytes.Equal(res, p.attrsOf) {
			// Traces of one resource follow each other: its attributes
			// are read once.
			p.attrs = semconv.AppendAttrs(p.attrs[:0], res, 1)
			p.attrsOf = append(p.attrsOf[:0], res...)
		}
		p.pattrs = semconv.AppendIdentityAttrs(p.pattrs[:0], span, semconv.SpanAttrs)
		e.identity = semconv.IdentityOf(p.attrs, p.pattrs)
	}
	return e.identity
}

// instanceOf is the instance label of an identity: service.instance.id,
// else the host.
func instanceOf(id *semconv.Identity) string {
	if id.Instance != "" {
		return id.Instance
	}
	return id.Host
}

// gpuOf is the gpu label: the GPU's uuid, else host/index.
func gpuOf(id *semconv.Identity) string {
	if id.GPUUUID != "" {
		return id.GPUUUID
	}
	if id.GPUIndex != "" && id.Host != "" {
		return id.Host + "/" + id.GPUIndex
	}
	return ""
}

// observeTrace hands the trace being emitted to the alerts stage and the
// LLM metrics, and reports whether it did: not before the trace has spans
// (where it ran and its figures come from them).
func (p *fuser) observeTrace(t *engine.Task, tr *trace, sum *summary) bool {
	if !p.observe.wantsTraces() {
		return true
	}
	if tr.spans == 0 {
		return false
	}
	e := &p.emitter
	p.observe.trace(t, &emittedTrace{id: tr.id, last: tr.last, identity: p.traceIdentity(sum), derived: e.derived,
		errors: sum.errors > 0, polluted: len(e.incidents) > 0, kvUsage: e.kvUsage})
	return true
}

// trace observes an emitted trace.
func (a *alertsStage) trace(t *engine.Task, tr *emittedTrace) {
	id := &tr.identity
	traceID := string(otlp.AppendTraceIDHex(a.scratch[:0], tr.id))
	if a.cfg.LLM != nil {
		lt := llmmetrics.FromDerived(tr.derived, instanceOf(id), traceID, tr.last)
		lt.Error = tr.errors
		a.cfg.LLM.ObserveTrace(lt)
	}
	if a.proc == nil {
		return
	}
	cfg := a.cfg.Alerts
	o := alerts.NewTraceObs()
	o.Labels = alerts.Labels{Model: id.Model, Instance: instanceOf(id), Host: id.Host, GPU: gpuOf(id), Service: id.Service}
	// A trace is observed when it is emitted, at its end — or, when its
	// emission came late (the resources table's watermark held it back
	// while a backlog is read), at the task's watermark less the stage's
	// delay: the owner never evaluates past that before the task's next
	// marker, so the trace is counted (in a later window) rather than
	// dropped as late.
	o.Time = tr.last
	if wm := t.Watermark(); knownTime(wm) {
		o.Time = max(o.Time, wm-int64(cfg.Config().Delay))
		cfg.Counters().NoteShift(o.Time - tr.last)
	}
	o.TraceID = traceID
	if d := tr.derived; d != nil {
		if o.Labels.Model == "" {
			o.Labels.Model = d.Model
		}
		sec := func(ns int64) float64 {
			if ns <= 0 {
				return math.NaN()
			}
			return float64(ns) / 1e9
		}
		o.Values[alerts.FigTTFT] = sec(d.TtftNanos)
		o.Values[alerts.FigTPOT] = sec(d.TpotNanos)
		o.Values[alerts.FigE2E] = sec(d.E2ENanos)
		o.Values[alerts.FigQueue] = sec(d.QueueTimeNanos)
		o.Values[alerts.FigPrefill] = sec(d.PrefillTimeNanos)
		o.Values[alerts.FigDecode] = sec(d.DecodeTimeNanos)
		if d.InputTokens > 0 {
			o.Values[alerts.FigInputTokens] = float64(d.InputTokens)
		}
		if d.OutputTokens > 0 {
			o.Values[alerts.FigOutputTokens] = float64(d.OutputTokens)
		}
		if d.KvCacheHitRatio != nil {
			o.Values[alerts.FigCacheHit] = *d.KvCacheHitRatio
		}
		if ttft := o.Values[alerts.FigTTFT]; !math.IsNaN(ttft) {
			o.Values[alerts.FigSlow] = b2f(ttft > cfg.SlowTTFT().Seconds())
		}
	}
	o.Values[alerts.FigError] = b2f(tr.errors)
	o.Values[alerts.FigPolluted] = b2f(tr.polluted)
	if !math.IsNaN(tr.kvUsage) {
		o.Values[alerts.FigKVUsage] = tr.kvUsage
	}
	blocked := false
	if d := tr.derived; d != nil {
		o.Labels.Tenant = d.Tenant
		blocked = quality(&o, d)
	}
	o.Values[alerts.FigSuccess] = b2f(!tr.errors && !blocked)
	a.proc.ObserveTrace(t, &o)
}

// quality sets the figures of the trace's verdicts: per kind, 1 when a
// check of that kind flagged or blocked it, 0 when every one passed it,
// absent without a decided check; the kind's highest score; the guardrail
// figures when a guardrail checked the prompt. It reports whether a
// verdict blocked the request.
func quality(o *alerts.TraceObs, d *braidpb.Derived) (blocked bool) {
	q := d.GetQuality()
	if q == nil {
		return false
	}
	for _, v := range d.Verdicts {
		flag, score := -1, -1
		switch v.Kind {
		case semconv.KindHallucination:
			flag, score = alerts.FigHallucination, alerts.FigHallucinationScore
		case semconv.KindPII:
			flag = alerts.FigPII
		case semconv.KindJailbreak:
			flag, score = alerts.FigJailbreak, alerts.FigJailbreakScore
		case semconv.KindToxicity:
			flag, score = alerts.FigToxicity, alerts.FigToxicityScore
		case semconv.KindSensitivity:
			score = alerts.FigSensitivity
		}
		if flag >= 0 && v.Decision != "" {
			hit := b2f(v.Decision == semconv.DecisionFlag || v.Decision == semconv.DecisionBlock)
			if f := o.Values[flag]; math.IsNaN(f) || hit > f {
				o.Values[flag] = hit
			}
		}
		if score >= 0 && v.Score != nil {
			if f := o.Values[score]; math.IsNaN(f) || *v.Score > f {
				o.Values[score] = *v.Score
			}
		}
	}
	o.Values[alerts.FigBlocked] = b2f(q.Blocked)
	if !math.IsNaN(o.Values[alerts.FigPII]) {
		o.Values[alerts.FigPIILeak] = b2f(q.PiiLeak)
	}
	if q.GuardrailChecked || q.GuardrailBypass {
		o.Values[alerts.FigGuardrailChecked] = 1
		o.Values[alerts.FigGuardrailBypass] = b2f(q.GuardrailBypass)
	}
	return q.Blocked
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observeSample hands a resource sample of canonical metric name to the
// alerts stage, when a rule reads it.
func (a *alertsStage) observeSample(t *engine.Task, id *semconv.Identity, name string, v float64, at int64) {
	if llm := a.cfg.LLM; llm != nil {
		switch name {
		case semconv.KVCacheUsage:
			llm.SetKVFigure(gpuOf(id), instanceOf(id), llmmetrics.KVUtilisation, v)
		case semconv.KVCacheFragmentation:
			llm.SetKVFigure(gpuOf(id), instanceOf(id), llmmetrics.KVFragmentation, v)
		}
	}
	if a.proc == nil || !a.cfg.Alerts.Wants(name) {
		return
	}
	l := alerts.Labels{Model: id.Model, Instance: instanceOf(id), Host: id.Host, GPU: gpuOf(id), Service: id.Service}
	a.proc.ObserveSample(t, &l, name, v, at)
}

// observeIncident hands a new incident to the alerts stage, timed at the
// task's watermark less the stage's delay (see alerts.ObserveIncident).
func (a *alertsStage) observeIncident(t *engine.Task, inc *braidpb.Incident) {
	if a.cfg.LLM != nil && inc.Revision == 0 {
		a.cfg.LLM.ObserveIncident(inc.Pattern.String())
	}
	if a.proc == nil || inc.Revision != 0 || !a.cfg.Alerts.WantsIncidents() {
		return
	}
	wm := t.Watermark()
	if !knownTime(wm) {
		wm = int64(inc.LastUnixNano)
	}
	gpu := inc.Gpu
	l := alerts.Labels{GPU: gpu, Host: inc.Host, Instance: inc.Host, Pattern: inc.Pattern.String()}
	a.proc.ObserveIncident(t, &l, inc.Id, wm-int64(a.cfg.Alerts.Config().Delay))
}
