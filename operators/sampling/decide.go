package sampling

import (
	"encoding/binary"
	"math"
	"strconv"
)

// Trace is what a decision reads of a fused trace.
type Trace struct {
	ID       [16]byte
	Tenant   string
	Model    string
	Batch    int64 // largest batch size of its spans, 0 if unknown
	SeqLen   int64 // input + output tokens, else the largest seq_len of its spans
	Error    bool  // a span with an error status
	Polluted bool  // FLAG_POLLUTED or an incident id
	Quality  bool  // a guardrail bypass, a PII leak or a blocked request
	TTFT     int64 // ns, 0 if unknown
	E2E      int64 // ns, 0 if unknown
	Last     int64 // latest member event time, unix ns
}

// Reason is why a trace was kept.
type Reason uint8

// Reasons. ReasonNone: dropped.
const (
	ReasonNone Reason = iota
	ReasonRate
	ReasonError
	ReasonPolluted
	ReasonQuality
	ReasonSlow
	numReasons
)

var reasonNames = [numReasons]string{"", "rate", "error", "polluted", "quality", "slow"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Rule reports whether r is a rule's (kept whatever the rate).
func (r Reason) Rule() bool { return r > ReasonRate && r < numReasons }

// Decision is the sampling decision for a trace.
type Decision struct {
	Reason Reason // ReasonNone: dropped
	// Rate is the probability the policy gives the trace, whatever the
	// rule that may keep it.
	Rate float64
	// Threshold is the OpenTelemetry rejection threshold of the kept
	// trace (tracestate ot=th, 56 bits): 0 for one kept by a rule, since
	// every such trace is kept; (1 − Rate)·2⁵⁶ for one kept by rate.
	Threshold uint64
	// Randomness is the trace's 56-bit randomness value (tracestate
	// ot=rv): a hash of its id seeded by its tenant's seed.
	Randomness uint64
}

// Kept reports whether the trace is kept.
func (d Decision) Kept() bool { return d.Reason != ReasonNone }

const maxThreshold = 1 << 56

// threshold returns the rejection threshold of rate p: a trace is kept
// when its randomness is at least (1 − p)·2⁵⁶.
func threshold(p float64) uint64 {
	switch {
	case p >= 1:
		return 0
	case !(p > 0):
		return maxThreshold
	}
	return maxThreshold - uint64(math.Round(p*maxThreshold))
}

// randomness is the 56-bit hash of id seeded with seed (SplitMix64's
// finalizer over both halves): uniform, and the same on every instance
// and in a replay.
func randomness(seed uint64, id [16]byte) uint64 {
	x := mix(seed ^ binary.BigEndian.Uint64(id[:8]))
	x = mix(x ^ binary.BigEndian.Uint64(id[8:]))
	return x >> 8
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// AppendThreshold appends th in the tracestate encoding: 14 hex digits
// with trailing zeros removed, "0" for 0.
func AppendThreshold(b []byte, th uint64) []byte {
	if th == 0 {
		return append(b, '0')
	}
	if th >= maxThreshold {
		th = maxThreshold - 1
	}
	var d [14]byte
	const hex = "0123456789abcdef"
	for i := 13; i >= 0; i-- {
		d[i] = hex[th&15]
		th >>= 4
	}
	n := 14
	for n > 1 && d[n-1] == '0' {
		n--
	}
	return append(b, d[:n]...)
}

// appendRandomness appends rv as 14 hex digits.
func appendRandomness(b []byte, rv uint64) []byte {
	const hex = "0123456789abcdef"
	for i := 13; i >= 0; i-- {
		b = append(b, hex[(rv>>(4*uint(i)))&15])
	}
	return b
}

// policy returns the policy and seed for tenant.
func (s *Stage) policy(tenant string) (*Policy, uint64) {
	if tp, ok := s.tenants[tenant]; ok {
		return &tp.Policy, tp.seed
	}
	return &s.cfg.Policy, tenantSeed(tenant, nil)
}

// Rate returns the probability the policy gives tr.
func (s *Stage) Rate(tr *Trace) float64 {
	p, _ := s.policy(tr.Tenant)
	return s.rate(p, tr)
}

func (s *Stage) rate(p *Policy, tr *Trace) float64 {
	f, ok := p.Models[tr.Model]
	if !ok {
		f, ok = p.Models["*"]
	}
	if !ok {
		if p.Rate != nil {
			return *p.Rate
		}
		return *s.cfg.Rate
	}
	hi := 1.0
	if f.Max != nil {
		hi = *f.Max
	}
	r := f.Base + f.Batch*float64(tr.Batch) + f.SeqLen*float64(tr.SeqLen)
	if math.IsNaN(r) {
		return f.Min
	}
	return min(max(r, f.Min), hi)
}

// Needs says which of a trace's figures the rate of tenant and model
// reads: the caller may skip finding the others.
type Needs struct{ Batch, SeqLen bool }

// Needs returns what the rate function of tenant and model reads.
func (s *Stage) Needs(tenant, model string) Needs {
	p, _ := s.policy(tenant)
	f, ok := p.Models[model]
	if !ok {
		f, ok = p.Models["*"]
	}
	if !ok {
		return Needs{}
	}
	return Needs{Batch: f.Batch != 0, SeqLen: f.SeqLen != 0}
}

// Again returns the decision of a trace kept before for reason at rate,
// for its new members: the same reason, rate and threshold.
func (p *Processor) Again(tr *Trace, reason Reason, rate float64) Decision {
	_, seed := p.s.policy(tr.Tenant)
	d := Decision{Reason: reason, Rate: rate, Randomness: randomness(seed, tr.ID)}
	if reason == ReasonRate {
		d.Threshold = threshold(rate)
	}
	return d
}
