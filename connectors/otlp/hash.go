package otlp

import "encoding/hex"

// HashPartition returns the partition the Collector's Kafka exporter
// (franz-go StickyKeyPartitioner with SaramaCompatHasher(fnv1a-32)) assigns
// to key among n partitions. Like kgo.SaramaCompatHasher it takes the
// remainder of the hash as an int32 and then negates a negative remainder,
// which is abs(int32(fnv1a_32(key))) % n without the overflow of abs at
// math.MinInt32. It does not allocate. n must be positive; HashPartition
// returns 0 otherwise. A null key is not hashed by the exporter (it uses a
// sticky partition), so this applies to non-nil keys only.
func HashPartition(key []byte, n int32) int32 {
	if n <= 0 {
		return 0
	}
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for _, c := range key {
		h ^= uint32(c)
		h *= prime32
	}
	p := int32(h) % n
	if p < 0 {
		p = -p
	}
	return p
}

// AppendTraceIDHex appends the 32 lower-case hex chars of id, which is the
// record key the exporter writes with partition_traces_by_id /
// partition_logs_by_trace_id.
func AppendTraceIDHex(dst []byte, id [16]byte) []byte {
	return hex.AppendEncode(dst, id[:])
}

// ParseTraceIDHex parses 32 hex chars (either case) as a trace id. ok is
// false if s is not exactly 32 hex digits. An all-zero id parses (ok true);
// whether it is acceptable is up to the caller.
func ParseTraceIDHex(s []byte) (id [16]byte, ok bool) {
	if len(s) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], s); err != nil {
		return [16]byte{}, false
	}
	return id, true
}
