package fuse

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/otlp/wire"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/semconv"
)

// FusedTrace field numbers (operators/braidpb/braid/v1/braid.proto).
const (
	fTraceID         = 1
	fRevision        = 2
	fStart           = 3
	fEnd             = 4
	fResources       = 5
	fSpans           = 6
	fLogs            = 7
	fPoints          = 8
	fSummary         = 9
	fFlags           = 10
	fWatermark       = 11
	fDerived         = 12
	fResourceContext = 13
	fIncidents       = 14
	fPart            = 15
	fParts           = 16
	fSampling        = 17
)

// Field numbers of the other braid.v1 messages that fuse writes by hand
// (schema_test.go checks them all against the generated descriptors).
const (
	// FusedSpan, FusedLog and FusedPoint. A member's body holds the scope,
	// the payload and the origin; the resource index is written at
	// emission.
	fMemberResourceIndex = 1
	fMemberScope         = 2
	fMemberPayload       = 3 // span, log or metric; an incident member's id
	fMemberOrigin        = 4

	// Origin.
	fOriginTopic     = 1
	fOriginPartition = 2
	fOriginOffset    = 3

	// Summary.
	fSummarySpans         = 1
	fSummaryLogs          = 2
	fSummaryPoints        = 3
	fSummaryRootName      = 4
	fSummaryRootService   = 5
	fSummaryDuration      = 6
	fSummaryErrors        = 7
	fSummaryDroppedSpans  = 8
	fSummaryDroppedLogs   = 9
	fSummaryDroppedPoints = 10

	// Sampling.
	fSamplingKept      = 1
	fSamplingReason    = 2
	fSamplingRate      = 3
	fSamplingThreshold = 4
)

// emitter holds the buffers of one emission, reused across emissions.
type emitter struct {
	chunks    []byte
	members   []emitMember
	resIdx    map[string]uint32
	res       [][]byte
	incidents []string
	out       []byte
	// What the observers (alerts, LLM metrics) read of the trace being
	// emitted: its derived figures (nil: none), the KV-cache usage in
	// force at its end (NaN: unknown) and its identity.
	derived  *braidpb.Derived
	kvUsage  float64
	identity semconv.Identity
	haveID   bool
	haveSpan bool // identity read from a span (else the trace has none)
}

type emitMember struct {
	seq      uint32 // arrival order
	kind     kind
	time     int64
	sortKey  []byte // span: start time + span id; else the payload
	resource []byte
	body     []byte
}

// digestSeed seeds the digests of emitted traces (trace.digest), which
// live in memory only: a trace restored after a restart has none, and its
// next emission is a revision.
var digestSeed = maphash.MakeSeed()

// digest is the digest of an emission's content: its fields from the
// start time to the flags (members, summary, derived figures, resource
// context), its flags but REVISED, and its incidents. Never 0.
func digest(content []byte, flags []uint64, incidents []string) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	h.Write(content)
	for _, f := range flags {
		if f != uint64(braidpb.Flag_FLAG_REVISED) {
			h.WriteByte(byte(f))
		}
	}
	for _, id := range incidents {
		h.WriteString(id)
		h.WriteByte(0)
	}
	return max(h.Sum64(), 1)
}

// emit writes the FusedTrace of tr with its current revision — unless it
// would say what its last emission said (the same members, figures,
// resource context, flags and incidents): a revision carries something
// new.
func (p *fuser) emit(t *engine.Task, tr *trace, wm int64) error {
	e := &p.emitter
	e.chunks = e.chunks[:0]
	e.members = e.members[:0]
	if tr.stored != nil {
		// Kept since they were written; a revision, if one comes, reads
		// them from state.
		e.chunks = append(e.chunks, tr.stored...)
		p.forget(tr)
	} else {
		for c := uint32(0); c < tr.chunks; c++ {
			var ok bool
			var err error
			if e.chunks, ok, err = t.State.Get(e.chunks, dataKey(p.key[:0], tr.id, c)); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("fuse: trace %x: chunk %d of %d missing", tr.id, c, tr.chunks)
			}
		}
		p.s.counters.ChunkReads.Add(int64(tr.chunks))
	}
	e.chunks = append(e.chunks, tr.pending...)
	err := readMembers(e.chunks, func(m *member) error {
		_, payload, _ := memberParts(m.body)
		em := emitMember{seq: uint32(len(e.members)), kind: m.kind, time: m.time, resource: m.resource, body: m.body, sortKey: payload}
		e.members = append(e.members, em)
		return nil
	})
	if err != nil {
		return err
	}
	// Canonical order: by kind, event time, then content, so that the same
	// members give the same bytes whatever order they arrived in.
	slices.SortStableFunc(e.members, func(a, b emitMember) int {
		if a.kind != b.kind {
			return int(a.kind) - int(b.kind)
		}
		if a.time != b.time {
			if a.time < b.time {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.sortKey, b.sortKey)
	})
	if e.resIdx == nil {
		e.resIdx = map[string]uint32{}
	}
	clear(e.resIdx)
	e.res = e.res[:0]
	var sum summary
	e.incidents = e.incidents[:0]
	for i := range e.members {
		m := &e.members[i]
		if m.kind == kindIncident {
			if !slices.Contains(e.incidents, string(m.sortKey)) {
				e.incidents = append(e.incidents, string(m.sortKey))
			}
			continue
		}
		if _, ok := e.resIdx[string(m.resource)]; !ok {
			e.resIdx[string(m.resource)] = uint32(len(e.res))
			e.res = append(e.res, m.resource)
		}
		switch m.kind {
		case kindSpan:
			sum.addSpan(m.sortKey, m.resource)
		case kindLog:
			if !hasTraceID(m.sortKey) {
				sum.resolvedLogs++
			}
		}
	}

	start := tr.first
	if sum.minStart != 0 && int64(sum.minStart) < start {
		start = int64(sum.minStart)
	}
	b := e.out[:0]
	b = protowire.AppendTag(b, fTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tr.id[:])
	if tr.revision > 0 {
		b = protowire.AppendTag(b, fRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(tr.revision))
	}
	content := len(b) // what a revision compares: from here to the flags
	b = protowire.AppendTag(b, fStart, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(start))
	b = protowire.AppendTag(b, fEnd, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(tr.last))
	for _, r := range e.res {
		b = protowire.AppendTag(b, fResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	for i := range e.members {
		m := &e.members[i]
		field := protowire.Number(fSpans)
		switch m.kind {
		case kindLog:
			field = fLogs
		case kindPoint:
			field = fPoints
		case kindIncident:
			continue
		}
		idx := e.resIdx[string(m.resource)]
		size := len(m.body)
		if idx != 0 {
			size += protowire.SizeTag(fMemberResourceIndex) + protowire.SizeVarint(uint64(idx))
		}
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		if idx != 0 {
			b = protowire.AppendTag(b, fMemberResourceIndex, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(idx))
		}
		b = append(b, m.body...)
	}
	sum.spans, sum.logs, sum.points = tr.spans, tr.logs, tr.points
	sum.dropped = tr.dropped
	if !sum.haveRoot && start >= 0 && tr.last >= start { // no wrap at the ends of the range
		sum.duration = uint64(tr.last - start)
	}
	b = sum.append(b)
	e.derived, e.kvUsage, e.haveID = nil, math.NaN(), false
	invalidAnchors := 0
	if !p.cfg.NoDerive {
		var err error
		if b, invalidAnchors, err = p.appendDerived(b, tr); err != nil {
			return err
		}
	}
	if p.s.table != nil {
		var err error
		if b, err = p.appendResourceContext(b, &sum, start, tr.last); err != nil {
			return err
		}
	}
	flagsAt := len(b)
	var flags []uint64
	if !sum.haveRoot {
		flags = append(flags, uint64(braidpb.Flag_FLAG_NO_ROOT_SPAN))
	}
	if sum.errors > 0 {
		flags = append(flags, uint64(braidpb.Flag_FLAG_ERROR))
	}
	if tr.dropped != [3]uint32{} {
		flags = append(flags, uint64(braidpb.Flag_FLAG_TRUNCATED))
	}
	if tr.revision > 0 {
		flags = append(flags, uint64(braidpb.Flag_FLAG_REVISED))
	}
	if sum.resolvedLogs > 0 {
		flags = append(flags, uint64(braidpb.Flag_FLAG_RESOLVED_BY_REQUEST_ID))
	}
	if invalidAnchors > 0 {
		flags = append(flags, uint64(braidpb.Flag_FLAG_INVALID_ANCHOR))
	}
	if len(e.incidents) > 0 {
		flags = append(flags, uint64(braidpb.Flag_FLAG_POLLUTED))
	}
	if len(flags) > 0 {
		n := 0
		for _, f := range flags {
			n += protowire.SizeVarint(f)
		}
		b = protowire.AppendTag(b, fFlags, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, f := range flags {
			b = protowire.AppendVarint(b, f)
		}
	}
	if knownTime(wm) {
		b = protowire.AppendTag(b, fWatermark, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, uint64(wm))
	}
	slices.Sort(e.incidents)
	for _, id := range e.incidents {
		b = protowire.AppendTag(b, fIncidents, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	e.out = b
	if tr.digest != 0 || p.flushing {
		// The first emission of a trace that event time may close with
		// nothing new (the processing-time flush), and the ones after.
		d := digest(b[content:flagsAt], flags, e.incidents)
		if tr.emitted && d == tr.digest {
			// What the last emission said, as it said it (a trace the
			// processing-time flush emitted before the resources table
			// had its window, closed in event time with nothing new):
			// no revision. The sampling decision follows from the same
			// members, so it is the one already taken.
			p.s.counters.Unrevised.Add(1)
			return nil
		}
		tr.digest = d
	}
	if p.sampling != nil {
		var err error
		if b, err = p.sample(t, tr, &sum, b); err != nil {
			return err
		}
	}
	e.out = b

	if !tr.observed {
		// The first emission with spans (a trace whose logs came first
		// is observed once its spans are in).
		tr.observed = p.observeTrace(t, tr, &sum)
	}
	if err := p.emitTrace(t, tr, b); err != nil {
		return err
	}
	p.s.counters.Fused.Add(1)
	if tr.revision > 0 {
		p.s.counters.Revisions.Add(1)
	}
	tr.emitted = true
	tr.revision++
	return nil
}

// emitTrace writes the FusedTrace b of tr: one record, or parts with the
// same key when it does not fit MaxRecordBytes (see FusedTrace.part).
func (p *fuser) emitTrace(t *engine.Task, tr *trace, b []byte) error {
	key := otlp.AppendTraceIDHex(make([]byte, 0, 32), tr.id)
	headers := []kgo.RecordHeader{{Key: "braid.revision", Value: strconv.AppendUint(nil, uint64(tr.revision), 10)}}
	room := p.room(key, headers)
	value, err := p.encodeTrace(append([]byte(nil), b...))
	if err != nil {
		return err
	}
	partition := otlp.HashPartition(key, p.cfg.FusedPartitions)
	if len(value) <= room {
		t.Emit(&kgo.Record{Topic: p.cfg.FusedTopic, Partition: partition, Key: key, Value: value, Headers: headers})
		return nil
	}
	// Cut the protobuf at field boundaries so that each part, encoded with
	// its header, fits; a part that does not is cut again; a single field
	// that cannot fit (derived figures of a huge trace; in JSON, a member
	// that grows past the limit) is left out and counted.
	limit := room - 128 // the part's header fields and record headers
	if p.cfg.JSON {
		limit = int(float64(limit) * float64(len(b)) / float64(len(value)) * 0.9)
	}
	queue := cutFields(b, max(limit, 1024))
	var parts [][]byte
	for len(queue) > 0 {
		part := queue[0]
		queue = queue[1:]
		v, err := p.encodeTrace(p.partHeader(tr, 1<<28, 1<<28, part))
		if err != nil {
			return err
		}
		if len(v) <= room {
			parts = append(parts, part)
			continue
		}
		if halves := cutFields(part, len(part)/2); len(halves) > 1 {
			queue = append(halves, queue...)
			continue
		}
		num, _, _ := protowire.ConsumeTag(part)
		if num == fDerived || num == fResourceContext {
			p.s.counters.DerivedDropped.Add(1)
		} else {
			p.s.counters.TooLarge.Add(1)
		}
	}
	p.s.counters.Parts.Add(1)
	for i, part := range parts {
		v, err := p.encodeTrace(p.partHeader(tr, i, len(parts), part))
		if err != nil {
			return err
		}
		h := append(append([]kgo.RecordHeader(nil), headers...),
			kgo.RecordHeader{Key: "braid.part", Value: strconv.AppendInt(nil, int64(i), 10)},
			kgo.RecordHeader{Key: "braid.parts", Value: strconv.AppendInt(nil, int64(len(parts)), 10)})
		t.Emit(&kgo.Record{Topic: p.cfg.FusedTopic, Partition: partition, Key: key, Value: v, Headers: h})
	}
	return nil
}

// partHeader returns part i of n of tr's FusedTrace: trace_id, revision,
// part and parts, then the part's fields.
func (p *fuser) partHeader(tr *trace, i, n int, part []byte) []byte {
	v := protowire.AppendTag(make([]byte, 0, 40+len(part)), fTraceID, protowire.BytesType)
	v = protowire.AppendBytes(v, tr.id[:])
	if tr.revision > 0 {
		v = protowire.AppendTag(v, fRevision, protowire.VarintType)
		v = protowire.AppendVarint(v, uint64(tr.revision))
	}
	v = protowire.AppendTag(v, fPart, protowire.VarintType)
	v = protowire.AppendVarint(v, uint64(i))
	v = protowire.AppendTag(v, fParts, protowire.VarintType)
	v = protowire.AppendVarint(v, uint64(n))
	return append(v, part...)
}

// encodeTrace returns the record value of FusedTrace b: b itself, or its
// protojson.
func (p *fuser) encodeTrace(b []byte) ([]byte, error) {
	if !p.cfg.JSON {
		return b, nil
	}
	var ft braidpb.FusedTrace
	if err := proto.Unmarshal(b, &ft); err != nil {
		return nil, fmt.Errorf("fuse: re-read fused trace: %w", err)
	}
	v, err := protojson.Marshal(&ft)
	if err != nil {
		return nil, fmt.Errorf("fuse: fused trace as JSON: %w", err)
	}
	return v, nil
}

// cutFields cuts protobuf message b at field boundaries into pieces of at
// most limit bytes (a single larger field is a piece of its own).
func cutFields(b []byte, limit int) [][]byte {
	var parts [][]byte
	start, off := 0, 0
	for off < len(b) {
		_, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			break
		}
		m := protowire.ConsumeFieldValue(0, typ, b[off+n:])
		if m < 0 {
			break
		}
		if off > start && off+n+m-start > limit {
			parts = append(parts, b[start:off])
			start = off
		}
		off += n + m
	}
	return append(parts, b[start:])
}

// appendDerived appends field 12, the LLM-serving figures of the members
// (semconv.Deriver), and returns the number of invalid alignment anchors.
func (p *fuser) appendDerived(b []byte, tr *trace) ([]byte, int, error) {
	d := &p.deriver
	d.Reset()
	if ids, ok := p.cfg.RequestIDs.(*semconv.RequestIDs); ok {
		d.IDs = ids
	}
	for i := range p.emitter.members {
		m := &p.emitter.members[i]
		switch m.kind {
		case kindSpan:
			d.AddSpan(m.sortKey, m.resource)
		case kindLog:
			d.AddLog(m.sortKey, m.resource)
		}
	}
	dm := d.DerivedScratch() // the emission is done with it before the next
	p.emitter.derived = dm
	b, err := appendMessage(b, fDerived, dm)
	if err != nil {
		p.s.counters.DerivedDropped.Add(1)
		return b, 0, nil
	}
	return b, d.InvalidAnchors(), nil
}

// appendMessage appends m, marshalled deterministically, as field of b,
// nothing when it is empty. On an error (a string that is not valid UTF-8
// even once repaired, marshalRepaired) b is returned as it was.
func appendMessage(b []byte, field protowire.Number, m proto.Message) ([]byte, error) {
	opts := proto.MarshalOptions{Deterministic: true}
	n := opts.Size(m)
	if n == 0 {
		return b, nil
	}
	start := len(b)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	opts.UseCachedSize = true // as Size left them
	if out, err := opts.MarshalAppend(b, m); err == nil && len(out)-len(b) == n {
		return out, nil
	}
	b = b[:start]
	v, err := marshalRepaired(m)
	if err != nil || len(v) == 0 {
		return b, err
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v), nil
}

// marshalRepaired marshals m deterministically; a string from input that is
// not valid UTF-8 (which the decoder repairs, so this is a second line) is
// repaired first.
func marshalRepaired(m proto.Message) ([]byte, error) {
	opts := proto.MarshalOptions{Deterministic: true}
	v, err := opts.Marshal(m)
	if err != nil && braidpb.RepairUTF8(m) {
		v, err = opts.Marshal(m)
	}
	return v, err
}

// appendResourceContext appends field 13: the resource series in force
// during the request — the root span's window at the root span's place,
// else the trace's window at its first span's place.
func (p *fuser) appendResourceContext(b []byte, sum *summary, start, end int64) ([]byte, error) {
	id := p.traceIdentity(sum)
	if !p.emitter.haveSpan {
		return b, nil
	}
	if sum.rootSpan != nil && sum.rootEnd >= sum.rootStart && sum.rootStart != 0 {
		start, end = int64(sum.rootStart), int64(sum.rootEnd)
	}
	ws := p.s.table.Windows(id, start, end)
	for _, w := range ws {
		if w.Metric == semconv.KVCacheUsage {
			p.emitter.kvUsage = w.AtEnd
		}
	}
	if len(ws) == 0 {
		return b, nil
	}
	b, err := appendMessage(b, fResourceContext, &braidpb.ResourceContext{Series: ws})
	if err != nil {
		p.s.counters.DerivedDropped.Add(1)
	}
	return b, nil
}

// summary derives the Summary message from the spans.
type summary struct {
	spans, logs, points uint32
	dropped             [3]uint32
	haveRoot            bool
	rootName            []byte
	rootService         []byte
	duration            uint64
	errors              uint32
	minStart            uint64 // earliest span start, 0 if none
	resolvedLogs        uint32 // logs without a trace id of their own (joined by request id)
	rootSpan, rootRes   []byte
	rootStart, rootEnd  uint64
}

// hasTraceID reports whether LogRecord log has a non-zero trace_id (9);
// its first trace_id counts.
func hasTraceID(log []byte) bool {
	for len(log) > 0 {
		num, typ, v, _, rest := wire.Next(log)
		if rest == nil {
			break
		}
		log = rest
		if num == 9 && typ == protowire.BytesType {
			return len(bytes.Trim(v, "\x00")) > 0
		}
	}
	return false
}

func (s *summary) addSpan(span, resource []byte) {
	var parent, name []byte
	var start, end uint64
	var status int32
	for b := span; len(b) > 0; {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		switch {
		case num == 4 && typ == protowire.BytesType:
			parent = v
		case num == 5 && typ == protowire.BytesType:
			name = v
		case num == 7 && typ == protowire.Fixed64Type:
			start = x
		case num == 8 && typ == protowire.Fixed64Type:
			end = x
		case num == 15 && typ == protowire.BytesType:
			status = statusCode(v)
		}
	}
	if status == 2 {
		s.errors++
	}
	if start != 0 && (s.minStart == 0 || start < s.minStart) {
		s.minStart = start
	}
	if len(parent) == 0 && !s.haveRoot {
		s.haveRoot = true
		s.rootSpan, s.rootRes = span, resource
		s.rootStart, s.rootEnd = start, end
		s.rootName = name
		s.rootService = serviceName(resource)
		if end > start {
			s.duration = end - start
		}
	}
}

// statusCode returns Status.code.
func statusCode(b []byte) (code int32) {
	for len(b) > 0 {
		num, typ, _, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		if num == 3 && typ == protowire.VarintType {
			code = int32(x)
		}
	}
	return code
}

// serviceName returns the service.name string attribute of a Resource.
func serviceName(res []byte) []byte {
	if v, ok := semconv.LookupValue(res, semconv.ResourceAttrs, "service.name"); ok && v.Type == semconv.ValueString {
		return v.Raw()
	}
	return nil
}

func (s *summary) append(b []byte) []byte {
	var m []byte
	u := func(num protowire.Number, v uint32) {
		if v != 0 {
			m = protowire.AppendTag(m, num, protowire.VarintType)
			m = protowire.AppendVarint(m, uint64(v))
		}
	}
	u(fSummarySpans, s.spans)
	u(fSummaryLogs, s.logs)
	u(fSummaryPoints, s.points)
	if len(s.rootName) > 0 {
		m = protowire.AppendTag(m, fSummaryRootName, protowire.BytesType)
		m = protowire.AppendBytes(m, s.rootName)
	}
	if len(s.rootService) > 0 {
		m = protowire.AppendTag(m, fSummaryRootService, protowire.BytesType)
		m = protowire.AppendBytes(m, s.rootService)
	}
	if s.duration != 0 {
		m = protowire.AppendTag(m, fSummaryDuration, protowire.Fixed64Type)
		m = protowire.AppendFixed64(m, s.duration)
	}
	u(fSummaryErrors, s.errors)
	u(fSummaryDroppedSpans, s.dropped[0])
	u(fSummaryDroppedLogs, s.dropped[1])
	u(fSummaryDroppedPoints, s.dropped[2])
	b = protowire.AppendTag(b, fSummary, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// late sends m to the late topic as a one-item OTLP message of its signal.
func (p *fuser) late(t *engine.Task, id [16]byte, m *member) {
	key := otlp.AppendTraceIDHex(make([]byte, 0, 32), id)
	p.s.counters.Late.Add(1)
	p.sendLate(t, key, m, "event time "+strconv.FormatInt(m.time, 10)+" is beyond allowed lateness at watermark "+strconv.FormatInt(t.Watermark(), 10))
}

// sendLate writes m to the late topic under key with reason, and extra
// headers if any.
func (o *outputs) sendLate(t *engine.Task, key []byte, m *member, reason string, extra ...kgo.RecordHeader) {
	_, _, origin := memberParts(m.body)
	topic, part, off := parseOrigin(origin)
	signal := "spans"
	switch m.kind {
	case kindLog:
		signal = "logs"
	case kindPoint:
		signal = "metrics"
	}
	o.emitChunked(t, &kgo.Record{
		Topic:     o.cfg.LateTopic,
		Partition: otlp.HashPartition(key, o.cfg.LatePartitions),
		Key:       key,
		Value:     oneItemMessage(m),
		Headers: append([]kgo.RecordHeader{
			{Key: "braid.reason", Value: []byte(reason)},
			{Key: "braid.signal", Value: []byte(signal)},
			{Key: "braid.topic", Value: []byte(topic)},
			{Key: "braid.partition", Value: strconv.AppendInt(nil, int64(part), 10)},
			{Key: "braid.offset", Value: strconv.AppendInt(nil, off, 10)},
		}, extra...),
	})
}

// oneItemMessage re-encodes m as a one-item OTLP message of its signal:
// TracesData / LogsData / MetricsData share the field numbers
// (resource_x=1 { resource=1, scope_x=2 { scope=1, items=2 } }).
func oneItemMessage(m *member) []byte {
	scope, payload, _ := memberParts(m.body)
	var inner []byte
	if len(scope) > 0 {
		inner = protowire.AppendTag(inner, 1, protowire.BytesType)
		inner = protowire.AppendBytes(inner, scope)
	}
	inner = protowire.AppendTag(inner, 2, protowire.BytesType)
	inner = protowire.AppendBytes(inner, payload)
	var rs []byte
	if len(m.resource) > 0 {
		rs = protowire.AppendTag(rs, 1, protowire.BytesType)
		rs = protowire.AppendBytes(rs, m.resource)
	}
	rs = protowire.AppendTag(rs, 2, protowire.BytesType)
	rs = protowire.AppendBytes(rs, inner)
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	return protowire.AppendBytes(msg, rs)
}
