package fuse

import (
	"encoding/binary"
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/otlp/wire"
)

// A chunk is a sequence of members of one trace, the unit of state and of
// repartition records:
//
//	member = kind:byte time:varint resource body:bytes
//	resource = uvarint(len+1) bytes, or uvarint(0): same as the previous member
//
// body holds fields 2 (scope), 3 (span / log / metric) and 4 (origin) of
// FusedSpan / FusedLog / FusedPoint (fMember*), ready to be framed into a
// FusedTrace.
type kind uint8

const (
	kindSpan  kind = 1
	kindLog   kind = 2
	kindPoint kind = 3
	// kindIncident tags the trace with a KV-cache pollution incident (from
	// the kvgraph stage); its body's field 3 is the incident id. Not a
	// span, log or point: no resource, no caps.
	kindIncident kind = 4
)

var errCorruptChunk = errors.New("fuse: corrupt member chunk")

type member struct {
	kind     kind
	time     int64
	resource []byte
	body     []byte
}

// chunkWriter appends members to a chunk.
type chunkWriter struct {
	buf     []byte
	lastRes []byte
	n       int
	// restated: the last member appended states its resource (it is
	// not the previous member's).
	restated bool
}

func (w *chunkWriter) reset(buf []byte) { w.buf, w.lastRes, w.n = buf, nil, 0 }

// appendItem encodes it as a member with its origin.
func (w *chunkWriter) appendItem(it *otlp.Item, sig otlp.Signal, topic string, partition int32, offset int64) {
	var k kind
	switch sig {
	case otlp.SignalSpans:
		k = kindSpan
	case otlp.SignalLogs:
		k = kindLog
	default:
		k = kindPoint
	}
	b := w.appendHead(w.buf, k, it.Time, it.Resource)
	// body length is not known up front: reserve, then patch by shifting.
	start := len(b)
	if len(it.Scope) > 0 {
		b = protowire.AppendTag(b, fMemberScope, protowire.BytesType)
		b = protowire.AppendBytes(b, it.Scope)
	}
	b = protowire.AppendTag(b, fMemberPayload, protowire.BytesType)
	if k == kindPoint {
		b = appendMetric(b, it)
	} else {
		b = protowire.AppendBytes(b, it.Payload)
	}
	b = protowire.AppendTag(b, fMemberOrigin, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(originSize(topic, partition, offset)))
	b = appendOrigin(b, topic, partition, offset)
	w.buf = wire.InsertLen(b, start)
	w.n++
}

// appendMember re-encodes m (from another chunk) into the writer.
func (w *chunkWriter) appendMember(m *member) {
	b := w.appendHead(w.buf, m.kind, m.time, m.resource)
	b = protowire.AppendBytes(b, m.body)
	w.buf = b
	w.n++
}

// appendHead appends a member's kind, time and resource (or the reference
// to the previous member's resource).
func (w *chunkWriter) appendHead(b []byte, k kind, t int64, resource []byte) []byte {
	b = append(b, byte(k))
	b = binary.AppendVarint(b, t)
	if w.n > 0 && string(resource) == string(w.lastRes) {
		w.restated = false
		return append(b, 0)
	}
	b = protowire.AppendVarint(b, uint64(len(resource))+1)
	w.lastRes, w.restated = resource, true
	return append(b, resource...)
}

func appendMetric(b []byte, it *otlp.Item) []byte {
	// Metric{name=1, description=2, unit=3, <data>=5|7|9|10|11}
	size := 0
	if len(it.Name) > 0 {
		size += protowire.SizeTag(1) + protowire.SizeBytes(len(it.Name))
	}
	if len(it.MetricDescription) > 0 {
		size += protowire.SizeTag(2) + protowire.SizeBytes(len(it.MetricDescription))
	}
	if len(it.MetricUnit) > 0 {
		size += protowire.SizeTag(3) + protowire.SizeBytes(len(it.MetricUnit))
	}
	dataSize := protowire.SizeTag(1) + protowire.SizeBytes(len(it.Payload))
	withTemporality := it.PointType == otlp.PointSum || it.PointType == otlp.PointHistogram || it.PointType == otlp.PointExpHistogram
	if withTemporality && it.Temporality != 0 {
		dataSize += protowire.SizeTag(2) + protowire.SizeVarint(uint64(it.Temporality))
	}
	if it.PointType == otlp.PointSum && it.Monotonic {
		dataSize += protowire.SizeTag(3) + 1
	}
	size += protowire.SizeTag(protowire.Number(it.PointType)) + protowire.SizeBytes(dataSize)
	b = protowire.AppendVarint(b, uint64(size))
	if len(it.Name) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, it.Name)
	}
	if len(it.MetricDescription) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, it.MetricDescription)
	}
	if len(it.MetricUnit) > 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, it.MetricUnit)
	}
	b = protowire.AppendTag(b, protowire.Number(it.PointType), protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(dataSize))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, it.Payload)
	if withTemporality && it.Temporality != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(it.Temporality))
	}
	if it.PointType == otlp.PointSum && it.Monotonic {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

func originSize(topic string, partition int32, offset int64) int {
	n := protowire.SizeTag(fOriginTopic) + protowire.SizeBytes(len(topic))
	if partition != 0 {
		n += protowire.SizeTag(fOriginPartition) + protowire.SizeVarint(uint64(partition))
	}
	if offset != 0 {
		n += protowire.SizeTag(fOriginOffset) + protowire.SizeVarint(uint64(offset))
	}
	return n
}

func appendOrigin(b []byte, topic string, partition int32, offset int64) []byte {
	b = protowire.AppendTag(b, fOriginTopic, protowire.BytesType)
	b = protowire.AppendString(b, topic)
	if partition != 0 {
		b = protowire.AppendTag(b, fOriginPartition, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(partition))
	}
	if offset != 0 {
		b = protowire.AppendTag(b, fOriginOffset, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(offset))
	}
	return b
}

// readMembers calls fn for every member of chunk. Slices alias chunk.
func readMembers(chunk []byte, fn func(*member) error) error {
	var m member
	var lastRes []byte
	for len(chunk) > 0 {
		m.kind = kind(chunk[0])
		if m.kind < kindSpan || m.kind > kindIncident {
			return errCorruptChunk
		}
		chunk = chunk[1:]
		t, n := binary.Varint(chunk)
		if n <= 0 {
			return errCorruptChunk
		}
		m.time = t
		chunk = chunk[n:]
		rl, n := protowire.ConsumeVarint(chunk)
		if n < 0 {
			return errCorruptChunk
		}
		chunk = chunk[n:]
		if rl == 0 {
			m.resource = lastRes
		} else {
			rl--
			if rl > uint64(len(chunk)) {
				return errCorruptChunk
			}
			m.resource = chunk[:rl:rl]
			lastRes = m.resource
			chunk = chunk[rl:]
		}
		body, n := protowire.ConsumeBytes(chunk)
		if n < 0 {
			return errCorruptChunk
		}
		m.body = body
		chunk = chunk[n:]
		if err := fn(&m); err != nil {
			return err
		}
	}
	return nil
}

// chunkPrefix returns where to cut chunk so that the first part is at most
// limit bytes where possible: at the start of the last member before limit
// that writes its resource in full (a member that refers to its
// predecessor's resource cannot start a chunk), else at the first such
// member after limit, else nowhere (the whole chunk).
func chunkPrefix(chunk []byte, limit int) (int, error) {
	if len(chunk) <= limit {
		return len(chunk), nil
	}
	cut := 0
	for off := 0; off < len(chunk); {
		size, explicit, err := memberSize(chunk[off:])
		if err != nil {
			return 0, err
		}
		if off > 0 && explicit {
			if off > limit {
				if cut == 0 {
					cut = off
				}
				break
			}
			cut = off
		}
		off += size
	}
	if cut == 0 {
		return len(chunk), nil
	}
	return cut, nil
}

// memberSize returns the encoded size of the first member of b and whether
// it writes its resource in full.
func memberSize(b []byte) (int, bool, error) {
	if len(b) < 1 {
		return 0, false, errCorruptChunk
	}
	i := 1
	_, n := binary.Varint(b[i:])
	if n <= 0 {
		return 0, false, errCorruptChunk
	}
	i += n
	rl, n := protowire.ConsumeVarint(b[i:])
	if n < 0 {
		return 0, false, errCorruptChunk
	}
	i += n
	explicit := rl != 0
	if explicit {
		i += int(rl - 1)
	}
	if i > len(b) {
		return 0, false, errCorruptChunk
	}
	_, n = protowire.ConsumeBytes(b[i:])
	if n < 0 {
		return 0, false, errCorruptChunk
	}
	return i + n, explicit, nil
}

// memberParts splits a member body into scope, payload (span / log / metric)
// and origin.
func memberParts(body []byte) (scope, payload, origin []byte) {
	for len(body) > 0 {
		num, typ, v, _, rest := wire.Next(body)
		if rest == nil {
			break
		}
		body = rest
		if typ != protowire.BytesType {
			continue
		}
		switch num {
		case fMemberScope:
			scope = v
		case fMemberPayload:
			payload = v
		case fMemberOrigin:
			origin = v
		}
	}
	return
}

// parseOrigin decodes an Origin message.
func parseOrigin(b []byte) (topic string, partition int32, offset int64) {
	for len(b) > 0 {
		num, typ, v, x, rest := wire.Next(b)
		if rest == nil {
			break
		}
		b = rest
		switch {
		case num == fOriginTopic && typ == protowire.BytesType:
			topic = string(v)
		case num == fOriginPartition && typ == protowire.VarintType:
			partition = int32(x)
		case num == fOriginOffset && typ == protowire.VarintType:
			offset = int64(x)
		}
	}
	return
}
