package fuse

import (
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/otlp/wire"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/sampling"
	"github.com/braidlabs/braid/operators/semconv"
)

// samplingStage is the sampling stage of a task (operators/sampling): it
// decides, for each trace the fuse stage emits, whether trace stores keep
// it, and writes a kept trace's members not written before to the sampled
// topics. Its state is the sampler's (latency estimates per tenant). Used
// on the task's goroutine only.
type samplingStage struct {
	outputs
	stateless
	proc *sampling.Processor
	enc  sampling.Encoder
}

func (s *samplingStage) prepareCheckpoint(t *engine.Task) error { return s.proc.PrepareCheckpoint(t) }
func (s *samplingStage) restore(t *engine.Task) error           { return s.proc.Restore(t) }
func (s *samplingStage) close()                                 { s.proc.Close() }
func (s *samplingStage) config() *sampling.Config               { return s.proc.Config() }

// decide is the decision for trace st, being emitted: first, its first
// emission; reason and rate, the decision that kept it before (none: not
// kept so far) — it stays kept for the same reason, and its new members
// carry the same decision.
func (s *samplingStage) decide(st *sampling.Trace, first bool, reason sampling.Reason, rate float64) sampling.Decision {
	if reason == sampling.ReasonNone {
		return s.proc.Decide(st, first)
	}
	return s.proc.Again(st, reason, rate)
}

// sample decides whether tr, being emitted, is kept for trace stores
// (samplingStage), hands the members not yet written to it if so, and
// appends the decision to FusedTrace b (field 17).
func (p *fuser) sample(t *engine.Task, tr *trace, sum *summary, b []byte) ([]byte, error) {
	e := &p.emitter
	st := p.sampleTrace(tr, sum)
	d := p.sampling.decide(&st, !tr.emitted, tr.sampled, tr.sampleRate)
	if d.Kept() && tr.sampled == sampling.ReasonNone {
		tr.sampled, tr.sampleRate = d.Reason, d.Rate
	}
	if d.Kept() {
		p.sampMem = p.sampMem[:0]
		n := uint32(0)
		for i := range e.members {
			m := &e.members[i]
			n = max(n, m.seq+1)
			if m.seq < tr.sent || (m.kind != kindSpan && m.kind != kindLog) {
				continue
			}
			scope, payload, _ := memberParts(m.body)
			p.sampMem = append(p.sampMem, sampling.Member{Log: m.kind == kindLog, Resource: m.resource, Scope: scope, Payload: payload})
		}
		if len(p.sampMem) > 0 {
			p.sampling.write(t, tr.id, p.sampMem, d)
		}
		tr.sent = n
	}
	// FusedTrace.sampling
	inner := 0
	var th []byte
	if d.Kept() {
		th = sampling.AppendThreshold(nil, d.Threshold)
		inner += protowire.SizeTag(fSamplingKept) + 1 + protowire.SizeTag(fSamplingReason) + protowire.SizeBytes(len(d.Reason.String())) +
			protowire.SizeTag(fSamplingThreshold) + protowire.SizeBytes(len(th))
	}
	inner += protowire.SizeTag(fSamplingRate) + 8
	b = protowire.AppendTag(b, fSampling, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	if d.Kept() {
		b = protowire.AppendTag(b, fSamplingKept, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, fSamplingReason, protowire.BytesType)
		b = protowire.AppendString(b, d.Reason.String())
	}
	b = protowire.AppendTag(b, fSamplingRate, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(d.Rate))
	if d.Kept() {
		b = protowire.AppendTag(b, fSamplingThreshold, protowire.BytesType)
		b = protowire.AppendBytes(b, th)
	}
	return b, nil
}

// write writes members of trace id, kept by d, to the sampled topics.
func (s *samplingStage) write(t *engine.Task, id [16]byte, members []sampling.Member, d sampling.Decision) {
	cfg := s.proc.Config()
	key := otlp.AppendTraceIDHex(make([]byte, 0, 32), id)
	// Room for the key and record overhead, as for fused records.
	room := s.room(key, nil)
	spans, logs, unwritable := s.enc.Encode(id, members, d, room)
	if unwritable > 0 {
		s.proc.Unwritable(unwritable)
	}
	n, size := 0, 0
	partition := otlp.HashPartition(key, s.cfg.FusedPartitions)
	for _, out := range []struct {
		topic  string
		values [][]byte
	}{{cfg.TracesTopic, spans}, {cfg.LogsTopic, logs}} {
		for _, v := range out.values {
			t.Emit(&kgo.Record{Topic: out.topic, Partition: partition, Key: key, Value: v})
			n++
			size += len(v)
		}
	}
	s.proc.Written(n, size)
}

// sampleTrace is what the sampling decision reads of tr.
func (p *fuser) sampleTrace(tr *trace, sum *summary) sampling.Trace {
	cfg := p.sampling.config()
	e := &p.emitter
	st := sampling.Trace{ID: tr.id, Last: tr.last, Error: sum.errors > 0, Polluted: len(e.incidents) > 0}
	if d := e.derived; d != nil {
		st.Tenant, st.Model = d.Tenant, d.Model
		st.TTFT, st.E2E = d.TtftNanos, d.E2ENanos
		st.SeqLen = d.InputTokens + d.OutputTokens
		if q := d.Quality; q != nil {
			st.Quality = q.GuardrailBypass || q.PiiLeak || q.Blocked
		}
	}
	if st.E2E <= 0 && sum.haveRoot && sum.rootEnd > sum.rootStart {
		st.E2E = int64(sum.rootEnd - sum.rootStart)
	}
	need := p.cfg.Sampling.Needs(st.Tenant, st.Model)
	custom := cfg.TenantAttribute != ""
	if !custom && !need.Batch && (!need.SeqLen || st.SeqLen > 0) {
		return st
	}
	var tenantRank int
	if custom {
		st.Tenant = ""
	}
	var seq int64
	for i := range e.members {
		m := &e.members[i]
		if m.kind != kindSpan {
			continue
		}
		if custom && tenantRank < 3 {
			if v, ok := semconv.Lookup(m.sortKey, 9, cfg.TenantAttribute); ok && v != "" {
				rank := 2
				if isRootSpan(m.sortKey) {
					rank = 3
				}
				if rank > tenantRank || rank == tenantRank && v < st.Tenant {
					st.Tenant, tenantRank = v, rank
				}
			} else if tenantRank == 0 {
				if v, ok := semconv.Lookup(m.resource, 1, cfg.TenantAttribute); ok && v != "" && (st.Tenant == "" || v < st.Tenant) {
					st.Tenant = v
				}
			}
		}
		if need.Batch {
			if v, ok := semconv.LookupValue(m.sortKey, 9, semconv.KeyBatchSize); ok {
				if n, ok := v.Int(); ok && n > st.Batch {
					st.Batch = n
				}
			}
		}
		if need.SeqLen && st.SeqLen == 0 {
			if v, ok := semconv.LookupValue(m.sortKey, 9, semconv.KeySeqLen); ok {
				if n, ok := v.Int(); ok && n > seq {
					seq = n
				}
			}
		}
	}
	if st.SeqLen == 0 {
		st.SeqLen = seq
	}
	return st
}

// isRootSpan reports whether span has no parent span id (field 4).
func isRootSpan(span []byte) bool {
	for len(span) > 0 {
		num, typ, v, _, rest := wire.Next(span)
		if rest == nil {
			break
		}
		span = rest
		if num == 4 && typ == protowire.BytesType && len(v) > 0 {
			return false
		}
	}
	return true
}
