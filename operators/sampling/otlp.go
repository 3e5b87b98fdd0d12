package sampling

import (
	"bytes"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Member is one span or log record of a kept trace, as fuse holds it.
type Member struct {
	Log      bool
	Resource []byte // opentelemetry.proto.resource.v1.Resource
	Scope    []byte // opentelemetry.proto.common.v1.InstrumentationScope
	Payload  []byte // opentelemetry.proto.trace.v1.Span or logs.v1.LogRecord
}

// Field numbers of OTLP messages (opentelemetry/proto).
const (
	fSpanTraceState = 3
	fSpanAttributes = 9
	fLogAttributes  = 6
	fLogTraceID     = 9
	fKVKey          = 1
	fKVValue        = 2
	fAnyString      = 1
	fAnyDouble      = 4
)

// Attribute keys braid adds to every sampled span and log record.
const (
	AttrReason    = "braid.sampling.reason"
	AttrRate      = "braid.sampling.rate"
	AttrThreshold = "braid.sampling.threshold" // logs only: spans carry it in tracestate ot=th
)

// Encoder builds the sampled topics' records of a kept trace, reusing its
// buffers across traces.
type Encoder struct {
	groups []group
	buf    []byte
	ts     []byte
}

type group struct {
	res, scope []byte
	items      [][]byte
	size       int
}

// Encode returns the record values (OTLP TracesData for spans, LogsData
// for logs) that carry the members of trace id with decision d's sampling
// attributes, each at most maxBytes: members are grouped by resource and
// scope in order of first appearance, and a trace too large for one
// record is cut into several. A log record without a trace id of its own
// (joined by request id) gets id, so that a trace store files it with
// the trace. It also returns the number of members that cannot fit a
// record of their own.
func (e *Encoder) Encode(id [16]byte, members []Member, d Decision, maxBytes int) (spans, logs [][]byte, unwritable int) {
	for _, log := range []bool{false, true} {
		e.groups = e.groups[:0]
		e.buf = e.buf[:0]
		// Annotate every member into buf first (items point into it only
		// after it stops growing).
		type span struct{ start, end int }
		var spansAt []span
		var owners []int
		for i := range members {
			m := &members[i]
			if m.Log != log {
				continue
			}
			start := len(e.buf)
			if log {
				e.buf = e.annotateLog(e.buf, m.Payload, id, d)
			} else {
				e.buf = e.annotateSpan(e.buf, m.Payload, d)
			}
			spansAt = append(spansAt, span{start, len(e.buf)})
			owners = append(owners, i)
		}
		if len(owners) == 0 {
			continue
		}
		for k, i := range owners {
			m := &members[i]
			item := e.buf[spansAt[k].start:spansAt[k].end]
			g := e.group(m.Resource, m.Scope)
			g.items = append(g.items, item)
			g.size += len(item) + 6
		}
		values, n := e.pack(maxBytes)
		unwritable += n
		if log {
			logs = values
		} else {
			spans = values
		}
	}
	return spans, logs, unwritable
}

func (e *Encoder) group(res, scope []byte) *group {
	for i := range e.groups {
		g := &e.groups[i]
		if bytes.Equal(g.res, res) && bytes.Equal(g.scope, scope) {
			return g
		}
	}
	e.groups = append(e.groups, group{res: res, scope: scope})
	return &e.groups[len(e.groups)-1]
}

// groupOverhead bounds the bytes a group adds besides its items: the
// ResourceSpans/ResourceLogs and ScopeSpans/ScopeLogs tags and lengths,
// resource and scope.
func groupOverhead(g *group) int { return len(g.res) + len(g.scope) + 32 }

// pack cuts the groups into record values of at most maxBytes.
func (e *Encoder) pack(maxBytes int) (values [][]byte, unwritable int) {
	type part struct {
		g     *group
		items [][]byte
	}
	var cur []part
	size := 0
	flush := func() {
		if len(cur) == 0 {
			return
		}
		var v []byte
		for _, p := range cur {
			v = appendResourceGroup(v, p.g.res, p.g.scope, p.items)
		}
		values = append(values, v)
		cur, size = cur[:0], 0
	}
	for gi := range e.groups {
		g := &e.groups[gi]
		oh := groupOverhead(g)
		for _, it := range g.items {
			need := len(it) + 6
			if oh+need > maxBytes {
				unwritable++
				continue
			}
			if len(cur) == 0 || cur[len(cur)-1].g != g {
				if size+oh+need > maxBytes {
					flush()
				}
				cur = append(cur, part{g: g})
				size += oh
			} else if size+need > maxBytes {
				flush()
				cur = append(cur, part{g: g})
				size += oh
			}
			cur[len(cur)-1].items = append(cur[len(cur)-1].items, it)
			size += need
		}
	}
	flush()
	return values, unwritable
}

// appendResourceGroup appends field 1 of TracesData/LogsData: a
// ResourceSpans/ResourceLogs {1: resource, 2: ScopeSpans/ScopeLogs {1:
// scope, 2: items}} (the field numbers are the same in both).
func appendResourceGroup(b, res, scope []byte, items [][]byte) []byte {
	inner := 0
	if len(scope) > 0 {
		inner += protowire.SizeTag(1) + protowire.SizeBytes(len(scope))
	}
	for _, it := range items {
		inner += protowire.SizeTag(2) + protowire.SizeBytes(len(it))
	}
	outer := protowire.SizeTag(1) + protowire.SizeBytes(len(res)) + protowire.SizeTag(2) + protowire.SizeBytes(inner)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(outer))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, res)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	if len(scope) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, scope)
	}
	for _, it := range items {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, it)
	}
	return b
}

// annotateSpan appends span with its trace_state carrying the decision
// (ot=th:…;rv:…, merged into what it had) and the sampling attributes.
func (e *Encoder) annotateSpan(b, span []byte, d Decision) []byte {
	var old []byte
	eachField(span, func(num protowire.Number, typ protowire.Type, field, value []byte) {
		if num == fSpanTraceState && typ == protowire.BytesType {
			old, _ = protowire.ConsumeBytes(value)
		} else {
			b = append(b, field...)
		}
	})
	e.ts = mergeTraceState(e.ts[:0], old, d)
	b = protowire.AppendTag(b, fSpanTraceState, protowire.BytesType)
	b = protowire.AppendBytes(b, e.ts)
	b = appendStringKV(b, fSpanAttributes, AttrReason, d.Reason.String())
	return appendDoubleKV(b, fSpanAttributes, AttrRate, d.Rate)
}

func (e *Encoder) annotateLog(b, log []byte, id [16]byte, d Decision) []byte {
	b = append(b, log...)
	if !hasTraceID(log) {
		// The log's own empty trace_id fields, if any, stay: the last one
		// read wins.
		b = protowire.AppendTag(b, fLogTraceID, protowire.BytesType)
		b = protowire.AppendBytes(b, id[:])
	}
	b = appendStringKV(b, fLogAttributes, AttrReason, d.Reason.String())
	b = appendDoubleKV(b, fLogAttributes, AttrRate, d.Rate)
	return appendStringKV(b, fLogAttributes, AttrThreshold, string(AppendThreshold(nil, d.Threshold)))
}

func appendStringKV(b []byte, field protowire.Number, k, v string) []byte {
	anyLen := protowire.SizeTag(fAnyString) + protowire.SizeBytes(len(v))
	kvLen := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(k)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(anyLen)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kvLen))
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendDoubleKV(b []byte, field protowire.Number, k string, v float64) []byte {
	anyLen := protowire.SizeTag(fAnyDouble) + 8
	kvLen := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(k)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(anyLen)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kvLen))
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// hasTraceID reports whether LogRecord log has a non-zero trace_id.
func hasTraceID(log []byte) bool {
	has := false
	eachField(log, func(num protowire.Number, typ protowire.Type, _, value []byte) {
		if num == fLogTraceID && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(value)
			has = slices.ContainsFunc(v, func(c byte) bool { return c != 0 })
		}
	})
	return has
}

// eachField calls fn with every top-level field of msg: its number, wire
// type, whole encoding (tag and value) and encoded value; it stops at the
// first malformed field.
func eachField(msg []byte, fn func(num protowire.Number, typ protowire.Type, field, value []byte)) {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[off+n:])
		if m < 0 {
			return
		}
		fn(num, typ, msg[off:off+n+m], msg[off+n:off+n+m])
		off += n + m
	}
}

// maxListMembers is the W3C limit on tracestate list members.
const maxListMembers = 32

// mergeTraceState appends the W3C tracestate old with its OpenTelemetry
// member (ot) carrying d's threshold and randomness, first as the W3C
// rules ask of a modified member. The ot member's other sub-keys and the
// other vendors' members are kept (at most 32 members in all); an
// upstream th or rv is replaced, since the decision is braid's.
func mergeTraceState(b, old []byte, d Decision) []byte {
	b = append(b, "ot=th:"...)
	b = AppendThreshold(b, d.Threshold)
	b = append(b, ";rv:"...)
	b = appendRandomness(b, d.Randomness)
	members := 1
	var rest []string
	for _, lm := range strings.Split(string(old), ",") {
		lm = strings.TrimSpace(lm)
		if lm == "" {
			continue
		}
		if v, ok := strings.CutPrefix(lm, "ot="); ok {
			for _, kv := range strings.Split(v, ";") {
				if kv == "" || strings.HasPrefix(kv, "th:") || strings.HasPrefix(kv, "rv:") {
					continue
				}
				b = append(b, ';')
				b = append(b, kv...)
			}
			continue
		}
		rest = append(rest, lm)
	}
	for _, lm := range rest {
		if members == maxListMembers {
			break
		}
		b = append(b, ',')
		b = append(b, lm...)
		members++
	}
	return b
}
