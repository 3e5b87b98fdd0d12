package main

import (
	"encoding/hex"
	"slices"
	"sync"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/internal/outputs"
	"github.com/braidlabs/braid/operators/braidpb"
)

// members is what one input message carries of one trace: the members braid
// fuses into its FusedTrace (spans, log records with its trace id that are
// not KV-block events, exemplar points).
type members struct {
	spans, logs, points int
}

// kvScope is the instrumentation scope of the simulator's KV-block log
// records (connectors/simulator): KV events, sanitizer and Xid lines. They
// carry the request's trace id but are not members of its FusedTrace.
const kvScope = "braid.kv"

// spanCount counts the spans of a TracesData.
func spanCount(b []byte) int {
	n := 0
	each(b, 1, func(rs []byte) { // resource_spans
		each(rs, 2, func(ss []byte) { // scope_spans
			each(ss, 2, func([]byte) { n++ }) // spans
		})
	})
	return n
}

// memberLogCount counts the log records of a LogsData outside the KV scope.
func memberLogCount(b []byte) int {
	n := 0
	each(b, 1, func(rl []byte) { // resource_logs
		each(rl, 2, func(sl []byte) { // scope_logs
			name := ""
			each(sl, 1, func(scope []byte) {
				each(scope, 1, func(v []byte) { name = string(v) })
			})
			if name == kvScope {
				return
			}
			each(sl, 2, func([]byte) { n++ }) // log_records
		})
	})
	return n
}

// exemplarTraces counts, per trace id (hex), the data points of a
// MetricsData whose exemplars carry it.
func exemplarTraces(b []byte) map[string]int {
	var md metricspb.MetricsData
	if err := proto.Unmarshal(b, &md); err != nil {
		return nil
	}
	out := map[string]int{}
	point := func(exs []*metricspb.Exemplar) {
		seen := map[string]bool{}
		for _, e := range exs {
			if len(e.TraceId) != 16 || allZero(e.TraceId) {
				continue
			}
			id := hex.EncodeToString(e.TraceId)
			if !seen[id] {
				seen[id] = true
				out[id]++
			}
		}
	}
	for _, rm := range md.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case *metricspb.Metric_Histogram:
					for _, p := range d.Histogram.DataPoints {
						point(p.Exemplars)
					}
				case *metricspb.Metric_ExponentialHistogram:
					for _, p := range d.ExponentialHistogram.DataPoints {
						point(p.Exemplars)
					}
				case *metricspb.Metric_Sum:
					for _, p := range d.Sum.DataPoints {
						point(p.Exemplars)
					}
				case *metricspb.Metric_Gauge:
					for _, p := range d.Gauge.DataPoints {
						point(p.Exemplars)
					}
				}
			}
		}
	}
	return out
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// each calls f with the value of every length-delimited field num of the
// message b, in order; it stops at the first malformed field.
func each(b []byte, num protowire.Number, f func([]byte)) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return
		}
		b = b[l:]
		if typ == protowire.BytesType && n == num {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return
			}
			f(v)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return
		}
		b = b[l:]
	}
}

// trace is what the benchmark knows of one trace: what was written of it
// (members and when) and the FusedTrace revisions read.
type trace struct {
	first   time.Time // first record carrying a member handed to the producer
	lastAck time.Time // latest ack of such a record
	unacked int       // records handed to the producer, not acked yet
	want    members   // members written

	revs      map[uint32]*revision
	firstRead time.Time // first FusedTrace record of any revision
}

// done reports whether a revision holding every member written so far was
// read (the drain's test; the result is decided on the final counts).
func (tr *trace) done() bool {
	if tr.unacked > 0 {
		return false
	}
	for _, r := range tr.revs {
		if r.holds(tr.want) {
			return true
		}
	}
	return false
}

// revision is one FusedTrace revision read, its parts summed.
type revision struct {
	got    members
	parts  uint32 // 0: one record
	seen   uint32
	readAt time.Time // when its last part was read
}

func (r *revision) complete() bool { return r.parts == 0 || r.seen >= r.parts }

func (r *revision) holds(m members) bool {
	return r.complete() && r.got.spans >= m.spans && r.got.logs >= m.logs && r.got.points >= m.points
}

// offsetKey names one input record.
type offsetKey struct {
	partition int32
	offset    int64
}

// incidentRead is one Incident record read and when.
type incidentRead struct {
	at  time.Time
	inc *braidpb.Incident
}

// tracker follows what was written and what was read. The producer's
// callbacks, the reader and the produce loop share it.
type tracker struct {
	mu     sync.Mutex
	traces map[string]*trace
	// logAcks: when each record of the logs topic was acked (KV events
	// live there), for the incidents' evidence.
	logAcks   map[offsetKey]time.Time
	incidents []incidentRead
	// tops: each trace's highest revision read (what a consumer keeps)
	// and whether it carries FLAG_POLLUTED.
	tops      outputs.TopRevisions
	fused     int // FusedTrace records read
	undecoded int // output records that did not decode
}

func newTracker() *tracker {
	return &tracker{traces: map[string]*trace{}, logAcks: map[offsetKey]time.Time{}, tops: outputs.TopRevisions{}}
}

// written records that a message carrying m of each trace id was handed
// to the producer at now.
func (t *tracker) written(now time.Time, ms map[string]members) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, m := range ms {
		tr := t.traces[id]
		if tr == nil {
			tr = &trace{first: now, revs: map[uint32]*revision{}}
			t.traces[id] = tr
		}
		tr.unacked++
		tr.want.spans += m.spans
		tr.want.logs += m.logs
		tr.want.points += m.points
	}
}

// acked records the broker's ack at now of a record carrying ids (and, for
// the logs topic, of the record at key).
func (t *tracker) acked(now time.Time, ids []string, logs bool, key offsetKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if logs {
		t.logAcks[key] = now
	}
	for _, id := range ids {
		if tr := t.traces[id]; tr != nil {
			tr.unacked--
			if now.After(tr.lastAck) {
				tr.lastAck = now
			}
		}
	}
}

// readFused records a FusedTrace record read at now.
func (t *tracker) readFused(now time.Time, v []byte) {
	h, ok := outputs.ReadFusedHead(v)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok {
		t.undecoded++
		return
	}
	t.fused++
	tr := t.traces[h.TraceID]
	if tr == nil {
		// A trace whose members this run did not write: none.
		tr = &trace{revs: map[uint32]*revision{}}
		t.traces[h.TraceID] = tr
	}
	if tr.firstRead.IsZero() {
		tr.firstRead = now
	}
	t.tops.Add(h)
	r := tr.revs[h.Revision]
	if r == nil {
		r = &revision{parts: h.Parts}
		tr.revs[h.Revision] = r
	}
	r.got.spans += h.Spans
	r.got.logs += h.Logs
	r.got.points += h.Points
	r.seen++
	r.readAt = now
}

// readIncident records an Incident record read at now.
func (t *tracker) readIncident(now time.Time, v []byte) {
	var inc braidpb.Incident
	err := proto.Unmarshal(v, &inc)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.undecoded++
		return
	}
	t.incidents = append(t.incidents, incidentRead{at: now, inc: &inc})
}

// pending is the number of traces first written in [from, to) for which
// no revision holding all their members has been read yet.
func (t *tracker) pending(from, to time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tr := range t.traces {
		if in(tr.first, from, to) && !tr.done() {
			n++
		}
	}
	return n
}

// incidentOn reports whether an incident record on gpu whose first edge is
// at or after since (event time, less a second) was read.
func (t *tracker) incidentOn(gpu string, since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.incidents {
		if r.inc.Gpu == gpu && int64(r.inc.FirstUnixNano)+int64(time.Second) >= since.UnixNano() {
			return true
		}
	}
	return false
}

func in(t, from, to time.Time) bool { return !t.Before(from) && t.Before(to) }

// Latency is a distribution of latencies, milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	MinMs float64 `json:"min_ms"`
}

// distribution is the nearest-rank percentiles of ds.
func distribution(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Latency{Count: len(s), P50Ms: ms(rank(0.50)), P90Ms: ms(rank(0.90)), P99Ms: ms(rank(0.99)), MaxMs: ms(s[len(s)-1]), MinMs: ms(s[0])}
}
