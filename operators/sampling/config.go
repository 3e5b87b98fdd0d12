package sampling

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// Config configures the sampling stage (the job's `sampling:` section).
type Config struct {
	// Enabled turns the stage on. Default off.
	Enabled bool `yaml:"enabled"`
	// TracesTopic receives the kept traces' spans as OTLP TracesData,
	// LogsTopic their logs as OTLP LogsData (otlp_proto, keyed by the trace
	// id in 32 lower-case hex digits, as the Collector's kafkaexporter
	// writes them). Defaults braid.sampled.spans and braid.sampled.logs.
	TracesTopic string `yaml:"traces_topic"`
	LogsTopic   string `yaml:"logs_topic"`
	// TenantAttribute is the span or resource attribute that names a
	// trace's tenant (the root span's first, then any span's, then a
	// resource's). Default "": the tenant braid derives (tenant.id,
	// tenant_id or tenant, else a context hint's; Derived.tenant).
	TenantAttribute string `yaml:"tenant_attribute"`
	// Policy applies to tenants not listed in Tenants (and to traces
	// without a tenant).
	Policy `yaml:",inline"`
	// Tenants: the policy of each named tenant.
	Tenants map[string]Policy `yaml:"tenants"`
	// Keep lists the rules that keep a trace whatever its rate: "error"
	// (an error status), "polluted" (FLAG_POLLUTED or an incident id),
	// "quality" (a guardrail bypass, a PII leak or a blocked request), "slow"
	// (TTFT or end-to-end latency above its model's current quantile; see
	// Slow). Default all four; an empty list given explicitly keeps by rate
	// only.
	Keep []string `yaml:"keep"`
	// Slow configures the "slow" rule.
	Slow Slow `yaml:"slow"`
	// MaxTenants bounds the tenants counted by name in the counters; the
	// rest are counted under "other". Default 1000.
	MaxTenants int `yaml:"max_tenants"`
	// MaxModels bounds the models whose latency each task tracks for the
	// slow rule; a trace of a model beyond it is never slow. Default 256.
	MaxModels int `yaml:"max_models"`
	// MaxBytes bounds each task's latency windows (the job sets it from
	// state.memory_budget); past it the model updated longest ago is
	// forgotten (Counts.Evicted). Default 8 MiB.
	MaxBytes int64 `yaml:"-"`

	keep    uint8 // rule bits
	keepSet bool  // Keep was given (even empty)
}

// Policy is a tenant's sampling policy.
type Policy struct {
	// Rate is the probability of keeping a trace that no rule keeps and
	// whose model has no entry in Models, in [0, 1]. Default: the top-level
	// rate for a listed tenant; 0.1 at the top level.
	Rate *float64 `yaml:"rate"`
	// Seed makes the tenant's decisions independent of other tenants' (the
	// hash of the trace id is seeded with it). Default: a hash of the
	// tenant's name.
	Seed *uint64 `yaml:"seed"`
	// Models: the rate as a function of batch size and sequence length,
	// per model name ("*": any model not listed).
	Models map[string]RateFunc `yaml:"models"`
}

// RateFunc is clamp(base + batch·batch_size + seq_len·seq_len, min, max).
// batch_size is the largest batch_size attribute of the trace's spans (0
// when none); seq_len is its input plus output tokens, else the largest
// seq_len attribute of its spans.
type RateFunc struct {
	Base   float64  `yaml:"base"`
	Batch  float64  `yaml:"batch"`
	SeqLen float64  `yaml:"seq_len"`
	Min    float64  `yaml:"min"`
	Max    *float64 `yaml:"max"` // default 1
}

// Slow configures the slow rule: a trace is slow when its TTFT or its
// end-to-end latency is above its model's current Quantile: that of its
// model's traces in the Window that ends a Pane before the trace's own
// pane (panes aligned to Pane, each holding the traces whose last event
// time falls in it, as the task saw them at their first emission),
// leaving out the pane whose own quantile is highest when three or more
// have samples; fewer than MinSamples traces decide nothing. A burst of slow requests within one
// pane does not raise the bar for the requests after it.
// Traces of a model are spread over the tasks by trace id, so each task's
// window is a uniform sample of the model's traffic.
type Slow struct {
	Quantile   float64       `yaml:"quantile"`    // default 0.99
	Window     time.Duration `yaml:"window"`      // default 5m (the built-in alert rules' window)
	Pane       time.Duration `yaml:"pane"`        // default 1m
	MinSamples int           `yaml:"min_samples"` // default 200
}

// Rule bits (Config.Keep), in the order a trace's reason is named.
const (
	ruleError uint8 = 1 << iota
	rulePolluted
	ruleQuality
	ruleSlow
)

var ruleNames = []string{"error", "polluted", "quality", "slow"}

const defaultRate = 0.1

// EnsureDefaults fills in zero fields.
func (c *Config) EnsureDefaults() {
	if c.TracesTopic == "" {
		c.TracesTopic = "braid.sampled.spans"
	}
	if c.LogsTopic == "" {
		c.LogsTopic = "braid.sampled.logs"
	}
	if c.Rate == nil {
		r := defaultRate
		c.Rate = &r
	}
	if c.Keep == nil && !c.keepSet {
		c.Keep = slices.Clone(ruleNames)
	}
	c.keepSet = true
	if c.MaxTenants <= 0 {
		c.MaxTenants = 1000
	}
	if c.MaxModels <= 0 {
		c.MaxModels = 256
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8 << 20
	}
	if c.Slow.Quantile == 0 {
		c.Slow.Quantile = 0.99
	}
	if c.Slow.Window <= 0 {
		c.Slow.Window = 5 * time.Minute
	}
	if c.Slow.Pane <= 0 {
		c.Slow.Pane = time.Minute
	}
	if c.Slow.MinSamples <= 0 {
		c.Slow.MinSamples = 200
	}
}

// Validate reports what is wrong with c, all of it.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("sampling: "+format, args...)) }
	if c.TracesTopic == c.LogsTopic {
		bad("traces_topic and logs_topic must differ (both %q)", c.TracesTopic)
	}
	c.keep = 0
	for _, k := range c.Keep {
		i := slices.Index(ruleNames, k)
		if i < 0 {
			bad("keep: unknown rule %q (known: %v)", k, ruleNames)
			continue
		}
		c.keep |= 1 << i
	}
	checkPolicy := func(where string, p *Policy) {
		if p.Rate != nil && !(*p.Rate >= 0 && *p.Rate <= 1) {
			bad("%s: rate %v is not in [0, 1]", where, *p.Rate)
		}
		for m, f := range p.Models {
			if m == "" {
				bad("%s: models: empty model name (use \"*\" for any model)", where)
			}
			for _, v := range []float64{f.Base, f.Batch, f.SeqLen, f.Min} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					bad("%s: models: %s: coefficients must be finite", where, m)
				}
			}
			hi := 1.0
			if f.Max != nil {
				hi = *f.Max
			}
			if !(f.Min >= 0 && hi <= 1 && f.Min <= hi) {
				bad("%s: models: %s: need 0 <= min <= max <= 1 (min %v, max %v)", where, m, f.Min, hi)
			}
		}
	}
	checkPolicy("sampling", &c.Policy)
	for name, p := range c.Tenants {
		checkPolicy(fmt.Sprintf("tenants: %s", name), &p)
	}
	if !(c.Slow.Quantile > 0 && c.Slow.Quantile < 1) {
		bad("slow: quantile %v is not in (0, 1)", c.Slow.Quantile)
	}
	if c.Slow.Window < c.Slow.Pane {
		bad("slow: window %v is shorter than its pane %v", c.Slow.Window, c.Slow.Pane)
	} else if c.Slow.Window/c.Slow.Pane > 60 {
		bad("slow: window %v holds more than 60 panes of %v", c.Slow.Window, c.Slow.Pane)
	}
	return errors.Join(errs...)
}

// tenantSeed is a tenant's seed: its Seed, else the FNV-1a hash of its
// name.
func tenantSeed(name string, p *Policy) uint64 {
	if p != nil && p.Seed != nil {
		return *p.Seed
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}
