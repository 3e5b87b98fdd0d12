package view

import (
	"encoding/hex"
	"time"

	"github.com/braidlabs/braid/operators/braidpb"
)

// Incident returns the newest indexed revision of incident id, nil when
// the index does not hold it.
func (ix *Index) Incident(id string) (*braidpb.Incident, error) { return ix.incident(id) }

// Request is what the index holds of one fused trace: where it ran, for
// whom, and its latencies (0 when unknown).
type Request struct {
	TraceID                    string
	Start, End                 time.Time
	Model, Instance, Host, GPU string
	Tenant, Service            string
	TTFT, TPOT, E2E            time.Duration
	InputTokens                int64
	Error, Polluted, Preempted bool
}

func requestOf(s *summary) Request {
	return Request{TraceID: hex.EncodeToString(s.ID[:]), Start: time.Unix(0, s.Start), End: time.Unix(0, s.End),
		Model: s.Model, Instance: s.Instance, Host: s.Host, GPU: s.GPU, Tenant: s.Tenant, Service: s.Service,
		TTFT: time.Duration(s.TTFT), TPOT: time.Duration(s.TPOT), E2E: time.Duration(s.E2E), InputTokens: s.InputTokens,
		Error: s.Error, Polluted: s.Polluted, Preempted: s.Preempted}
}

// Request returns the indexed trace of traceID (16 bytes); false when the
// index does not hold it.
func (ix *Index) Request(traceID []byte) (Request, bool) {
	if len(traceID) != 16 {
		return Request{}, false
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i, ok := ix.mu.pos[[16]byte(traceID)]
	if !ok {
		return Request{}, false
	}
	s := ix.mu.ring[i]
	if s == nil {
		return Request{}, false
	}
	return requestOf(s), true
}

// Requests returns the indexed traces of q's range and filters, in index
// order, at most limit (0: no limit).
func (ix *Index) Requests(q Query, limit int) []Request {
	var out []Request
	ix.scan(&q, func(s *summary) {
		if limit <= 0 || len(out) < limit {
			out = append(out, requestOf(s))
		}
	})
	return out
}
