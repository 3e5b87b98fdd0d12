package kvgraph

import (
	"bytes"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// slimBody is the bytes of a supporting line's body that Slim keeps.
const slimBody = 4 * MaxEvidenceText

// Slim re-encodes a KV event or supporting line (one that Check accepts)
// as the least Resource and LogRecord (wire bytes, appended to res and log)
// that ParseEvent reads as the same event: only the attributes of the
// convention, trace and span id, time ts, and for a supporting line
// slimBody bytes of its body around its marker. A task that holds or
// forwards KV events slims a large one, so that neither its buffer nor the
// record it forwards depends on what else the input record carried. ok is
// false when ParseEvent does not take the record.
func Slim(res, log, resource, logRecord []byte, ts int64) (outRes, outLog []byte, ok bool) {
	ev, ok := ParseEvent(resource, logRecord, ts, Origin{})
	if !ok {
		return res, log, false
	}
	res = appendStrAttr(res, 1, "host.name", ev.Host)
	if len(ev.GPUUUID) > 0 {
		res = appendStrAttr(res, 1, "gpu.uuid", ev.GPUUUID)
	}
	if ev.GPUIndex >= 0 {
		res = appendIntAttr(res, 1, "gpu.index", ev.GPUIndex)
	}
	if len(ev.Instance) > 0 {
		res = appendStrAttr(res, 1, "service.instance.id", ev.Instance)
	}
	log = protowire.AppendTag(log, 1, protowire.Fixed64Type) // time_unix_nano
	log = protowire.AppendFixed64(log, uint64(ts))
	if ev.Op == OpSanitizer || ev.Op == OpXid {
		body := ev.Body
		if len(body) > slimBody {
			marker := []byte("=========")
			if ev.Op == OpXid {
				marker = []byte("NVRM: Xid")
			}
			i := max(0, bytes.Index(body, marker)-slimBody/4)
			body = body[i:min(len(body), i+slimBody)]
		}
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendBytes(v, body)
		log = protowire.AppendTag(log, 5, protowire.BytesType)
		log = protowire.AppendBytes(log, v)
	} else {
		log = appendStrAttr(log, 6, "kv.op", []byte(ev.Op.String()))
		if ev.hasBlock {
			log = appendIntAttr(log, 6, "kv.block.id", ev.Block)
		}
		if ev.HasHash {
			log = appendStrAttr(log, 6, "kv.block.hash", strconv.AppendUint(nil, ev.Hash, 16))
		}
		if ev.RefCnt != -1 {
			log = appendIntAttr(log, 6, "kv.block.ref_cnt", ev.RefCnt)
		}
		if ev.hasLayer {
			log = appendIntAttr(log, 6, "kv.layer.index", ev.Layer)
		}
		if ev.Layers != 0 {
			log = appendIntAttr(log, 6, "kv.layer.count", ev.Layers)
		}
		if ev.hasAddr {
			log = appendIntAttr(log, 6, "kv.write.addr", ev.Addr)
		}
		if ev.hasBytes {
			log = appendIntAttr(log, 6, "kv.write.bytes", ev.Bytes)
		}
		if ev.hasBase {
			log = appendIntAttr(log, 6, "kv.layer.base", ev.LayerBase)
		}
		if ev.hasSize {
			log = appendIntAttr(log, 6, "kv.layer.size", ev.LayerSize)
		}
		if ev.BlockBytes != 0 {
			log = appendIntAttr(log, 6, "kv.block.bytes", ev.BlockBytes)
		}
		if len(ev.Request) > 0 {
			log = appendStrAttr(log, 6, "gen_ai.request.id", ev.Request)
		}
	}
	if ev.TraceID != ([16]byte{}) {
		log = protowire.AppendTag(log, 9, protowire.BytesType)
		log = protowire.AppendBytes(log, ev.TraceID[:])
	}
	if ev.SpanID != ([8]byte{}) {
		log = protowire.AppendTag(log, 10, protowire.BytesType)
		log = protowire.AppendBytes(log, ev.SpanID[:])
	}
	return res, log, true
}

// appendStrAttr appends field num: a KeyValue of key and a string value.
func appendStrAttr(b []byte, num protowire.Number, key string, v []byte) []byte {
	var av []byte
	av = protowire.AppendTag(av, 1, protowire.BytesType)
	av = protowire.AppendBytes(av, v)
	return appendKV(b, num, key, av)
}

// appendIntAttr appends field num: a KeyValue of key and an int value.
func appendIntAttr(b []byte, num protowire.Number, key string, v int64) []byte {
	var av []byte
	av = protowire.AppendTag(av, 3, protowire.VarintType)
	av = protowire.AppendVarint(av, uint64(v))
	return appendKV(b, num, key, av)
}

func appendKV(b []byte, num protowire.Number, key string, av []byte) []byte {
	kv := protowire.AppendTag(nil, 1, protowire.BytesType)
	kv = protowire.AppendString(kv, key)
	kv = protowire.AppendTag(kv, 2, protowire.BytesType)
	kv = protowire.AppendBytes(kv, av)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, kv)
}
