package simulator

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Regression is a time-to-first-token regression of one server of the
// realistic fleet: its prefill slows down for a while.
type Regression struct {
	// Instance is the index of the server in the fleet: host·2 + gpu.index
	// (the GPU of KVFault and Leak).
	Instance int
	// From and To bound the window [Start+From, Start+To) of event time;
	// the requests arriving in it on the server are slowed. From ≥ 0,
	// To > From.
	From, To time.Duration
	// Factor multiplies the time to first token of each such request (its
	// queue time plus its prefill): the extra time is spent in prefill, so
	// time_in_model_prefill, time_in_model_inference, time_to_first_token
	// and e2e grow, the decode spans and the finish move later. Above 1,
	// at most 1000; the factors of overlapping regressions multiply.
	Factor float64
}

// Leak is a memory leak on one GPU of the realistic fleet: KV-cache memory
// allocated and never freed, until the server restarts.
type Leak struct {
	// GPU is the index of the GPU (and of its server) in the fleet:
	// host·2 + gpu.index.
	GPU int
	// From and To bound the window [Start+From, Start+To) of event time.
	// From ≥ 0, To > From.
	From, To time.Duration
	// MiBPerMinute is the leak's growth rate, in MiB per minute of event
	// time: a sample at t in the window has MiBPerMinute·(t−Start−From)/1m
	// MiB more, rounded to whole MiB, in DCGM_FI_DEV_FB_USED (less in
	// DCGM_FI_DEV_FB_FREE), clamped at the framebuffer's size. Above 0, at
	// most 1e6; the leaks of one GPU add up.
	MiBPerMinute float64
}

// RegressionTruth is the ground truth of one Config.Regressions entry.
type RegressionTruth struct {
	// Index is the server's index in the fleet (Regression.Instance).
	Index int `json:"index"`
	// Service, Instance and Host are the server's resource service.name,
	// service.instance.id and host.name, on its spans and logs and on its
	// Prometheus scrapes alike; GPUUUID its resource gpu.uuid; Model the
	// served model (gen_ai.request.model, label model_name).
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Host     string `json:"host"`
	GPUUUID  string `json:"gpu_uuid"`
	Model    string `json:"model"`
	// From and To are the window of arrivals [From, To) in event time.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Factor is Regression.Factor.
	Factor float64 `json:"factor"`
	// TraceIDs are the slowed requests whose spans were written so far, in
	// the order they were written (their TraceTruth.Regressed is true);
	// Orphans the request ids of the slowed requests aborted so far.
	TraceIDs []string `json:"trace_ids"`
	Orphans  []string `json:"orphans,omitempty"`
}

// LeakTruth is the ground truth of one Config.Leaks entry.
type LeakTruth struct {
	// Index is the GPU's index in the fleet (Leak.GPU).
	Index int `json:"index"`
	// UUID is the GPU's DCGM label UUID (the server's gpu.uuid); GPU its
	// label gpu (the index on the host, "0" or "1"); Host the value of its
	// host label, whose name HostLabel is "Hostname" (older exporters) or
	// "hostname"; Labels all the point labels of its DCGM series and
	// Series the DCGM_FI_DEV_FB_USED series (ResourceWindow.Series).
	UUID      string            `json:"uuid"`
	GPU       string            `json:"gpu"`
	Host      string            `json:"host"`
	HostLabel string            `json:"host_label"`
	Labels    map[string]string `json:"labels"`
	Series    string            `json:"series"`
	// Exporter is the DCGM exporter's service.instance.id (host:9400).
	Exporter string `json:"exporter"`
	// Service, Instance and Model are the GPU's server's service.name,
	// service.instance.id and model.
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Model    string `json:"model"`
	// From and To are the window [From, To) in event time.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// MiBPerMinute is Leak.MiBPerMinute.
	MiBPerMinute float64 `json:"mib_per_minute"`
	// Samples is the number of DCGM_FI_DEV_FB_USED samples written so far
	// in the window; LeakedMiB the amount the last one carries (0 before
	// the first).
	Samples   int     `json:"samples"`
	LeakedMiB float64 `json:"leaked_mib"`
}

// validateOps checks Regressions and Leaks for a fleet of servers servers
// (0 when unknown).
func (c Config) validateOps(servers int) []error {
	var errs []error
	if !c.Realistic && (len(c.Regressions) > 0 || len(c.Leaks) > 0) {
		errs = append(errs, errors.New("regressions and leaks need realistic mode"))
	}
	window := func(what string, i int, from, to time.Duration) {
		if from < 0 || to <= from {
			errs = append(errs, fmt.Errorf("%s %d: window [%v, %v): want 0 ≤ from < to", what, i, from, to))
		}
	}
	for i, r := range c.Regressions {
		window("regression", i, r.From, r.To)
		if servers > 0 && (r.Instance < 0 || r.Instance >= servers) {
			errs = append(errs, fmt.Errorf("regression %d: instance %d: want 0..%d", i, r.Instance, servers-1))
		}
		if !(r.Factor > 1 && r.Factor <= 1000) {
			errs = append(errs, fmt.Errorf("regression %d: factor %v: want above 1, at most 1000", i, r.Factor))
		}
	}
	for i, l := range c.Leaks {
		window("leak", i, l.From, l.To)
		if servers > 0 && (l.GPU < 0 || l.GPU >= servers) {
			errs = append(errs, fmt.Errorf("leak %d: gpu %d: want 0..%d", i, l.GPU, servers-1))
		}
		if !(l.MiBPerMinute > 0 && l.MiBPerMinute <= 1e6) {
			errs = append(errs, fmt.Errorf("leak %d: %v MiB/min: want above 0, at most 1e6", i, l.MiBPerMinute))
		}
	}
	return errs
}

// startOps fills in the truth of the regressions and leaks once the fleet
// exists.
func (s *Simulator) startOps() {
	at := func(d time.Duration) time.Time { return s.cfg.Start.Add(d).UTC() }
	for _, r := range s.cfg.Regressions {
		in := s.instances[r.Instance]
		s.truth.Regressions = append(s.truth.Regressions, RegressionTruth{
			Index: r.Instance, Service: in.service, Instance: in.id, Host: in.host, GPUUUID: in.gpuUUID, Model: in.model,
			From: at(r.From), To: at(r.To), Factor: r.Factor, TraceIDs: []string{},
		})
	}
	for _, l := range s.cfg.Leaks {
		in := s.instances[l.GPU]
		labels := labelMap(in.dFBUsed.labels)
		hl := "hostname"
		if _, ok := labels["Hostname"]; ok {
			hl = "Hostname"
		}
		s.truth.Leaks = append(s.truth.Leaks, LeakTruth{
			Index: l.GPU, UUID: in.gpuUUID, GPU: labels["gpu"], Host: labels[hl], HostLabel: hl,
			Labels: labels, Series: in.dFBUsed.id, Exporter: in.dcgmTarget.instance,
			Service: in.service, Instance: in.id, Model: in.model,
			From: at(l.From), To: at(l.To), MiBPerMinute: l.MiBPerMinute,
		})
	}
}

// inWindow reports whether t is in [Start+from, Start+to).
func (s *Simulator) inWindow(t uint64, from, to time.Duration) bool {
	d := int64(t) - s.cfg.Start.UnixNano()
	return d >= int64(from) && d < int64(to)
}

// ttftFactor is the product of the factors of the regressions of server i
// whose window holds the arrival a (1 for none).
func (s *Simulator) ttftFactor(i int, a uint64) float64 {
	f := 1.0
	for _, r := range s.cfg.Regressions {
		if r.Instance == i && s.inWindow(a, r.From, r.To) {
			f *= r.Factor
		}
	}
	return f
}

// leakMiB is the memory leaked on GPU i at t, in MiB (unrounded), and
// whether a leak's window holds t.
func (s *Simulator) leakMiB(i int, t uint64) (float64, bool) {
	mib, any := 0.0, false
	for _, l := range s.cfg.Leaks {
		if l.GPU == i && s.inWindow(t, l.From, l.To) {
			any = true
			since := time.Duration(int64(t) - s.cfg.Start.UnixNano() - int64(l.From))
			mib += l.MiBPerMinute * since.Minutes()
		}
	}
	return mib, any
}

// leakSample records a DCGM_FI_DEV_FB_USED sample of GPU i carrying mib
// leaked MiB (as written) in the truth of the leaks whose window holds t.
func (s *Simulator) leakSample(i int, t uint64, mib float64) {
	for k, l := range s.cfg.Leaks {
		if l.GPU == i && s.inWindow(t, l.From, l.To) {
			s.truth.Leaks[k].Samples++
			s.truth.Leaks[k].LeakedMiB = mib
		}
	}
}

// regressed records a slowed request written: its trace (spans) or, for an
// orphan, its abort.
func (s *Simulator) regressed(r *request) {
	for k, rg := range s.cfg.Regressions {
		if rg.Instance != r.inst.index || !s.inWindow(r.arrival, rg.From, rg.To) {
			continue
		}
		rt := &s.truth.Regressions[k]
		if r.aborted {
			rt.Orphans = append(rt.Orphans, r.truth.RequestID)
		} else {
			rt.TraceIDs = append(rt.TraceIDs, r.truth.TraceID)
		}
	}
}

// slowPrefill returns the prefill time of a request of server i arriving
// at a, queued queue seconds, whose prefill would take prefill seconds: the
// same without a regression, else longer by (factor−1)·TTFT.
func (s *Simulator) slowPrefill(i int, a uint64, queue, prefill float64) (float64, bool) {
	if len(s.cfg.Regressions) == 0 {
		return prefill, false
	}
	f := s.ttftFactor(i, a)
	if f == 1 {
		return prefill, false
	}
	ttft := round6(round6(queue) + prefill)
	return round6(prefill + (f-1)*ttft), true
}

// fbLeak returns the framebuffer use of GPU i at t with its leak: used
// plus the leaked MiB rounded, at most the framebuffer less its reserve.
func (s *Simulator) fbLeak(i int, t uint64, used float64) float64 {
	if len(s.cfg.Leaks) == 0 {
		return used
	}
	mib, ok := s.leakMiB(i, t)
	if !ok {
		return used
	}
	leaked := max(used, min(used+math.Round(mib), gpuTotalMiB-gpuResvMiB))
	s.leakSample(i, t, leaked-used)
	return leaked
}

// cloneOps deep-copies the regression and leak truth.
func cloneOps(t *Truth) {
	t.Regressions = slices.Clone(t.Regressions)
	for i := range t.Regressions {
		t.Regressions[i].TraceIDs = slices.Clone(t.Regressions[i].TraceIDs)
		t.Regressions[i].Orphans = slices.Clone(t.Regressions[i].Orphans)
	}
	t.Leaks = slices.Clone(t.Leaks)
	for i := range t.Leaks {
		t.Leaks[i].Labels = maps.Clone(t.Leaks[i].Labels)
	}
}
