package simulator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// TruthLine is one line of the ground-truth file written by WriteTruth
// (FORMAT.md): Type "request" for a request (a trace, or an orphan).
type TruthLine struct {
	Type      string `json:"type"`
	TraceID   string `json:"trace_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Service   string `json:"service,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Host      string `json:"host,omitempty"`
	GPUUUID   string `json:"gpu_uuid,omitempty"`
	GPUIndex  *int   `json:"gpu_index,omitempty"`
	Model     string `json:"model,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Route     string `json:"route,omitempty"`
	// Arrival and Finish (the abort, for an orphan) in RFC 3339 with
	// nanoseconds, UTC.
	Arrival *time.Time `json:"arrival,omitempty"`
	Finish  *time.Time `json:"finish,omitempty"`
	Orphan  bool       `json:"orphan,omitempty"`
	Error   bool       `json:"error,omitempty"`
	Split   bool       `json:"split,omitempty"`
	// Regressed: slowed by a Config.Regressions entry.
	Regressed bool `json:"regressed,omitempty"`
	// Spans, Logs (with the trace id), ExemplarPoints and EngineLogs (trace-less
	// logs naming the request id) written for the request.
	Spans          int              `json:"spans"`
	Logs           int              `json:"logs"`
	ExemplarPoints int              `json:"exemplar_points"`
	EngineLogs     int              `json:"engine_logs"`
	KVEvents       int              `json:"kv_events,omitempty"`
	Resources      []ResourceWindow `json:"resources,omitempty"`
	// The verdicts and the per-trace figures of TraceTruth
	// (Config.Verdicts).
	Verdicts         []VerdictTruth `json:"verdicts,omitempty"`
	JailbreakAttempt bool           `json:"jailbreak_attempt,omitempty"`
	GuardrailChecked bool           `json:"guardrail_checked,omitempty"`
	GuardrailBypass  bool           `json:"guardrail_bypass,omitempty"`
	Blocked          bool           `json:"blocked,omitempty"`
	PIILeak          bool           `json:"pii_leak,omitempty"`
}

func requestLine(tt *TraceTruth, realistic bool) TruthLine {
	l := TruthLine{
		Type: "request", TraceID: tt.TraceID, RequestID: tt.RequestID, Service: tt.Service, Instance: tt.Instance,
		Host: tt.Host, GPUUUID: tt.GPUUUID, Model: tt.Model, Tenant: tt.Tenant, Route: tt.Route,
		Orphan: tt.Orphan, Error: tt.Error, Split: tt.Split, Regressed: tt.Regressed,
		Spans: tt.Spans, Logs: tt.Logs, ExemplarPoints: tt.ExemplarPoints, EngineLogs: tt.RequestIDLogs, KVEvents: tt.KVEvents,
		Resources: tt.Resources,
		Verdicts:  tt.Verdicts, JailbreakAttempt: tt.JailbreakAttempt, GuardrailChecked: tt.GuardrailChecked,
		GuardrailBypass: tt.GuardrailBypass, Blocked: tt.Blocked, PIILeak: tt.PIILeak,
	}
	a, f := tt.Arrival, tt.Finish
	l.Arrival, l.Finish = &a, &f
	if realistic {
		g := tt.GPUIndex
		l.GPUIndex = &g
	}
	return l
}

// regressionLine and leakLine are the truth file's "regression" and
// "leak" lines.
type regressionLine struct {
	Type string `json:"type"`
	*RegressionTruth
}

type leakLine struct {
	Type string `json:"type"`
	*LeakTruth
}

// WriteTruth writes the ground truth of what was generated so far as JSON
// Lines (FORMAT.md): one "request" line per trace in Truth().TraceIDs
// order, then one per orphan, one "regression" line per
// Truth().Regressions entry, one "leak" line per Truth().Leaks entry, then, with Config.KVEvents, the KV
// simulator's "fault", "polluted" and "summary" lines (KVTruth.WriteJSONL).
// The same Seed and Config give the same bytes.
func (s *Simulator) WriteTruth(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, id := range s.truth.TraceIDs {
		if err := enc.Encode(requestLine(s.traces[id], s.cfg.Realistic)); err != nil {
			return fmt.Errorf("simulator: write truth: %w", err)
		}
	}
	for _, o := range s.orphans {
		if err := enc.Encode(requestLine(o, true)); err != nil {
			return fmt.Errorf("simulator: write truth: %w", err)
		}
	}
	for i := range s.truth.Regressions {
		if err := enc.Encode(regressionLine{"regression", &s.truth.Regressions[i]}); err != nil {
			return fmt.Errorf("simulator: write truth: %w", err)
		}
	}
	for i := range s.truth.Leaks {
		if err := enc.Encode(leakLine{"leak", &s.truth.Leaks[i]}); err != nil {
			return fmt.Errorf("simulator: write truth: %w", err)
		}
	}
	if s.kv != nil {
		if err := s.kv.Truth().WriteJSONL(bw); err != nil {
			return fmt.Errorf("simulator: write truth: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("simulator: write truth: %w", err)
	}
	return nil
}
