package sampling

import (
	"fmt"
	"math"

	"github.com/braidlabs/braid/engine"
)

// Stage is the sampling stage shared by the fuse tasks: its policy and its
// counters.
type Stage struct {
	cfg     Config
	tenants map[string]tenantPolicy
	c       *counters
}

type tenantPolicy struct {
	Policy
	seed uint64
}

// New validates cfg and returns the stage.
func New(cfg Config) (*Stage, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Stage{cfg: cfg, tenants: map[string]tenantPolicy{}, c: newCounters(cfg.MaxTenants)}
	for name, p := range cfg.Tenants {
		if p.Rate == nil {
			p.Rate = cfg.Rate
		}
		s.tenants[name] = tenantPolicy{Policy: p, seed: tenantSeed(name, &p)}
	}
	return s, nil
}

// Config returns the stage's configuration with defaults filled in.
func (s *Stage) Config() Config { return s.cfg }

// Config is the stage's configuration, shared (read only): no copy per
// emission.
func (p *Processor) Config() *Config { return &p.s.cfg }

// Processor is the stage in one fuse task: the latency windows of the slow
// rule, and the decisions.
type Processor struct {
	s   *Stage
	lat latencies
}

// NewProcessor returns the processor of one task.
func (s *Stage) NewProcessor() *Processor {
	return &Processor{s: s, lat: newLatencies(&s.cfg, s.c)}
}

// Decide decides whether tr is kept. first says that this is the trace's
// first decision: its latencies then join its model's window, and it is
// counted as seen. A trace kept once stays kept (the caller does not ask
// again); one dropped is asked again at each revision, since late members
// (an error, an incident tag) may bring it under a rule.
func (p *Processor) Decide(tr *Trace, first bool) Decision {
	s := p.s
	pol, seed := s.policy(tr.Tenant)
	d := Decision{Rate: s.rate(pol, tr), Randomness: randomness(seed, tr.ID)}
	keep := s.cfg.keep
	switch {
	case keep&ruleError != 0 && tr.Error:
		d.Reason = ReasonError
	case keep&rulePolluted != 0 && tr.Polluted:
		d.Reason = ReasonPolluted
	case keep&ruleQuality != 0 && tr.Quality:
		d.Reason = ReasonQuality
	case keep&ruleSlow != 0 && p.lat.slow(tr):
		d.Reason = ReasonSlow
	case d.Randomness >= threshold(d.Rate):
		d.Reason = ReasonRate
		d.Threshold = threshold(d.Rate)
	}
	if first && keep&ruleSlow != 0 {
		p.lat.add(tr)
	}
	s.c.count(tr.Tenant, d.Reason, first)
	return d
}

// Written counts records written to the sampled topics, and their bytes.
func (p *Processor) Written(records, bytes int) {
	p.s.c.records.Add(int64(records))
	p.s.c.bytes.Add(int64(bytes))
}

// Unwritable counts members left out of the sampled output because, with
// the sampling attributes, they do not fit a record.
func (p *Processor) Unwritable(n int) { p.s.c.unwritable.Add(int64(n)) }

// prefix is the stage's keyspace in the fuse task's state.
const prefix = byte('s')

// PrepareCheckpoint writes the latency windows that changed.
func (p *Processor) PrepareCheckpoint(t *engine.Task) error { return p.lat.checkpoint(t) }

// Restore reloads the latency windows.
func (p *Processor) Restore(t *engine.Task) error {
	if err := p.lat.restore(t); err != nil {
		return fmt.Errorf("sampling: %w", err)
	}
	return nil
}

// Close implements the task's leaving: its windows leave the gauges.
func (p *Processor) Close() { p.lat.close() }

func finitePos(ns int64) float64 {
	if ns <= 0 {
		return math.NaN()
	}
	return float64(ns)
}
