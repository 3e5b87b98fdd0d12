package simulator

import (
	"bufio"
	"encoding/json"
	"io"
	"time"
)

// KVTruth is the ground truth of a KV simulation (KV.md): the realised
// faults, the polluted requests and a summary.
type KVTruth struct {
	Faults   []KVFaultTruth
	Polluted []KVPolluted
	Summary  KVSummary
}

// KVFaultTruth is one realised fault.
type KVFaultTruth struct {
	Fault         int       `json:"fault"` // index in KVConfig.Faults
	Pattern       KVPattern `json:"pattern"`
	Trigger       KVTrigger `json:"trigger"`
	Time          time.Time `json:"time"` // its first faulty event
	GPU           string    `json:"gpu"`  // gpu.uuid
	GPUIndex      int       `json:"gpu_index"`
	Block         int       `json:"block"`
	Layer         int       `json:"layer"` // -1: all layers / block-level
	SourceRequest string    `json:"source_request"`
	Victims       []string  `json:"victims"`    // polluted directly
	Propagated    []string  `json:"propagated"` // polluted through the prefix cache
	Sanitizer     bool      `json:"sanitizer"`  // compute-sanitizer lines emitted
	Xid           bool      `json:"xid"`        // an NVRM Xid line follows
}

// KVPolluted is one polluted request.
type KVPolluted struct {
	RequestID   string    `json:"request_id"`
	TraceID     string    `json:"trace_id"`
	Pattern     KVPattern `json:"pattern"`
	Trigger     KVTrigger `json:"trigger"`
	RootRequest string    `json:"root_request"` // the fault's source request
	Via         string    `json:"via"`          // "direct" or "propagated"
	From        string    `json:"from,omitempty"`
	Time        time.Time `json:"time"`
	Fault       int       `json:"fault"`
}

// KVSummary counts what a simulation did.
type KVSummary struct {
	Requests    int `json:"requests"` // including the retries it created
	Events      int `json:"events"`
	Faults      int `json:"faults"` // realised
	Unrealised  int `json:"unrealised"`
	Polluted    int `json:"polluted"`
	Direct      int `json:"direct"`
	Propagated  int `json:"propagated"`
	Preemptions int `json:"preemptions"`
	Swaps       int `json:"swaps"`
	Evictions   int `json:"evictions"`
	Aborted     int `json:"aborted"`
	Restarts    int `json:"restarts,omitempty"`
}

// Truth returns the ground truth so far (complete after Flush). The
// returned value shares nothing with the simulator.
func (k *KV) Truth() KVTruth {
	var t KVTruth
	for _, f := range k.realised {
		t.Faults = append(t.Faults, KVFaultTruth{
			Fault: f.id, Pattern: f.spec.Trigger.Pattern(), Trigger: f.spec.Trigger,
			Time: f.time, GPU: k.gpus[f.gpu].UUID, GPUIndex: f.gpu,
			Block: f.block, Layer: f.layer, SourceRequest: f.source,
			Victims:    append([]string{}, f.victims...),
			Propagated: append([]string{}, f.propagated...),
			Sanitizer:  f.sanitizer, Xid: f.xid,
		})
	}
	t.Polluted = append([]KVPolluted(nil), k.polluted...)
	t.Summary = k.stats
	t.Summary.Faults = len(k.realised)
	t.Summary.Unrealised = len(k.pending)
	t.Summary.Polluted = len(k.polluted)
	for _, p := range k.polluted {
		if p.Via == "direct" {
			t.Summary.Direct++
		} else {
			t.Summary.Propagated++
		}
	}
	return t
}

// PollutedSet returns the ids of the polluted requests.
func (t KVTruth) PollutedSet() map[string]bool {
	m := make(map[string]bool, len(t.Polluted))
	for _, p := range t.Polluted {
		m[p.RequestID] = true
	}
	return m
}

// Roots maps each realised fault (index in KVConfig.Faults) to its source
// request.
func (t KVTruth) Roots() map[int]string {
	m := make(map[int]string, len(t.Faults))
	for _, f := range t.Faults {
		m[f.Fault] = f.SourceRequest
	}
	return m
}

// WriteJSONL writes the truth as JSON Lines: one "fault" line per realised
// fault, one "polluted" line per polluted request, then one "summary" line.
func (t KVTruth) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, f := range t.Faults {
		if err := enc.Encode(struct {
			Type string `json:"type"`
			KVFaultTruth
		}{"fault", f}); err != nil {
			return err
		}
	}
	for _, p := range t.Polluted {
		if err := enc.Encode(struct {
			Type string `json:"type"`
			KVPolluted
		}{"polluted", p}); err != nil {
			return err
		}
	}
	if err := enc.Encode(struct {
		Type string `json:"type"`
		KVSummary
	}{"summary", t.Summary}); err != nil {
		return err
	}
	return bw.Flush()
}
