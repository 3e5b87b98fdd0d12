package sampling

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// OtherTenant is the tenant label of the tenants counted beyond
// MaxTenants.
const OtherTenant = "other"

// counters are the stage's, per tenant: bounded, safe for concurrent use.
type counters struct {
	mu      sync.RWMutex
	max     int
	tenants map[string]*tenantCounts

	records, bytes, unwritable      atomic.Int64
	windowBytes, evicted, untracked atomic.Int64
}

type tenantCounts struct {
	seen    atomic.Int64
	dropped atomic.Int64 // at the trace's first decision
	revised atomic.Int64 // dropped at first, kept by a later revision
	kept    [numReasons]atomic.Int64
}

func newCounters(max int) *counters {
	return &counters{max: max, tenants: map[string]*tenantCounts{}}
}

func (c *counters) tenant(name string) *tenantCounts {
	c.mu.RLock()
	tc := c.tenants[name]
	c.mu.RUnlock()
	if tc != nil {
		return tc
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tc = c.tenants[name]; tc != nil {
		return tc
	}
	if len(c.tenants) >= c.max {
		name = OtherTenant
		if tc = c.tenants[name]; tc != nil {
			return tc
		}
	}
	tc = &tenantCounts{}
	c.tenants[name] = tc
	return tc
}

func (c *counters) count(tenant string, r Reason, first bool) {
	tc := c.tenant(strings.ToValidUTF8(tenant, "\uFFFD"))
	switch {
	case first:
		tc.seen.Add(1)
		if r == ReasonNone {
			tc.dropped.Add(1)
		}
	case r != ReasonNone:
		tc.revised.Add(1)
	}
	if r != ReasonNone {
		tc.kept[r].Add(1)
	}
}

// TenantCounts are one tenant's counts. Every trace is Seen once, at its
// first decision, and then Dropped or kept (Kept, by reason); a trace
// dropped at first and kept by a later revision (a late error or incident)
// is also counted in Revised and under its reason in Kept, so the traces
// finally dropped are Dropped − Revised.
type TenantCounts struct {
	Tenant  string
	Seen    int64
	Dropped int64
	Revised int64
	Kept    map[string]int64 // by reason: rate, error, polluted, quality, slow
}

// Counts is a snapshot of the stage's counters.
type Counts struct {
	Tenants []TenantCounts // sorted by tenant
	// Records and Bytes written to the sampled topics; Unwritable: members
	// left out because they do not fit a record with the sampling
	// attributes.
	Records, Bytes, Unwritable int64
	// WindowBytes is the memory of the slow rule's latency windows (all
	// tasks); Evicted counts models forgotten to stay within MaxBytes,
	// Untracked traces of models beyond MaxModels.
	WindowBytes, Evicted, Untracked int64
}

// Counts returns a snapshot of the counters.
func (s *Stage) Counts() Counts {
	c := s.c
	c.mu.RLock()
	out := Counts{Tenants: make([]TenantCounts, 0, len(c.tenants))}
	for name, tc := range c.tenants {
		t := TenantCounts{Tenant: name, Seen: tc.seen.Load(), Dropped: tc.dropped.Load(), Revised: tc.revised.Load(),
			Kept: map[string]int64{}}
		for r := ReasonRate; r < numReasons; r++ {
			t.Kept[r.String()] = tc.kept[r].Load()
		}
		out.Tenants = append(out.Tenants, t)
	}
	c.mu.RUnlock()
	sort.Slice(out.Tenants, func(i, j int) bool { return out.Tenants[i].Tenant < out.Tenants[j].Tenant })
	out.Records, out.Bytes, out.Unwritable = c.records.Load(), c.bytes.Load(), c.unwritable.Load()
	out.WindowBytes, out.Evicted, out.Untracked = c.windowBytes.Load(), c.evicted.Load(), c.untracked.Load()
	return out
}

// Reasons lists the reasons a trace is kept for, as counted.
func Reasons() []string { return append([]string(nil), reasonNames[1:]...) }
