package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/internal/outputs"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// KVScore is braid's incidents of a backlog run against the faults the
// simulator realised (its own account, Workload.KVTruth): whether each
// fault has an incident on its GPU naming its source request as root, and
// the polluted requests named (over every revision) against the faults'
// victims, direct and propagated.
type KVScore struct {
	Incidents     int `json:"incidents"`
	FaultsFound   int `json:"faults_found"`  // an incident on the fault's GPU with the fault's source request as root
	Victims       int `json:"victims"`       // the simulator's polluted requests
	VictimsNamed  int `json:"victims_named"` // of those, named polluted by some incident
	NamedNotTruth int `json:"named_not_polluted"`
	// Against the independent reference model (kvaccuracy/kvref) replaying
	// the KV events of the logs topic: the requests it finds polluted, of
	// those the ones braid named, and those braid named that it does not.
	RefVictims  int `json:"ref_victims"`
	RefNamed    int `json:"ref_named"`
	NamedNotRef int `json:"named_not_ref"`
	// RefMissed: the requests the reference finds polluted and braid does
	// not name, with the GPU, time, block, layer and writer of their first
	// foreign read.
	RefMissed []string `json:"ref_missed,omitempty"`
	// RootsMissed: the faults (trigger, GPU, source request) no incident
	// names as root, with the roots braid named on that GPU.
	RootsMissed []string `json:"roots_missed,omitempty"`
	// FLAG_POLLUTED on the polluted requests' traces (those with spans),
	// read from the fused topic: the victims (by the simulator's truth, by
	// the reference model) whose highest revision read carries the flag,
	// and the reference's victims without it (at most 20).
	TruthTraced    int      `json:"victims_traced"`
	TruthFlagged   int      `json:"victims_flagged"`
	RefTraced      int      `json:"ref_victims_traced"`
	RefFlagged     int      `json:"ref_victims_flagged"`
	RefUnflagged   []string `json:"ref_unflagged,omitempty"`
	FusedUndecoded int      `json:"fused_undecoded"`
}

// scoreKV reads the incidents topic to its end (read_committed) and
// scores it against truth and the reference model, then reads the fused
// topic for FLAG_POLLUTED on the victims' traces (traces: the simulator's
// requests by trace id).
func scoreKV(ctx context.Context, brokers []string, topic, logsTopic, fusedTopic string, truth []simulator.KVFaultTruth, traces map[string]simulator.TraceTruth) (KVScore, error) {
	var sc KVScore
	roots := map[string]bool{}     // gpu/request
	byGPU := map[string][]string{} // gpu → roots named there
	named := map[string]bool{}
	ids := map[string]bool{}
	err := outputs.ReadToEnd(ctx, brokers, topic, time.Minute, func(r *kgo.Record) {
		inc := &braidpb.Incident{}
		if proto.Unmarshal(r.Value, inc) != nil {
			return
		}
		ids[inc.Id] = true
		if k := inc.Gpu + "/" + inc.Root.GetRequestId(); !roots[k] {
			roots[k] = true
			byGPU[inc.Gpu] = append(byGPU[inc.Gpu], inc.Root.GetRequestId())
		}
		for _, p := range inc.Polluted {
			named[p.RequestId] = true
		}
	})
	if err != nil {
		return sc, err
	}
	sc.Incidents = len(ids)
	victims := map[string]bool{}
	for _, f := range truth {
		if roots[f.GPU+"/"+f.SourceRequest] {
			sc.FaultsFound++
		} else {
			sc.RootsMissed = append(sc.RootsMissed, fmt.Sprintf("%s on %s, source %s: braid's roots there %v", f.Trigger, f.GPU, f.SourceRequest, byGPU[f.GPU]))
		}
		for _, v := range append(append([]string(nil), f.Victims...), f.Propagated...) {
			victims[v] = true
		}
	}
	sc.Victims = len(victims)
	for r := range named {
		if victims[r] {
			sc.VictimsNamed++
		} else {
			sc.NamedNotTruth++
		}
	}
	ref, err := outputs.RefPolluted(ctx, brokers, logsTopic)
	if err != nil {
		return sc, err
	}
	sc.RefVictims = len(ref)
	for r := range named {
		if _, ok := ref[r]; ok {
			sc.RefNamed++
		} else {
			sc.NamedNotRef++
		}
	}
	for r, p := range ref {
		if !named[r] {
			sc.RefMissed = append(sc.RefMissed, fmt.Sprintf("%s on %s at %s: block %d layer %d, %s from %q",
				r, p.GPU, p.Time.UTC().Format("15:04:05.000"), p.Block, p.Layer, p.Via, p.From))
		}
	}
	slices.Sort(sc.RefMissed)

	traceOf := make(map[string]string, len(traces)) // request id → trace id, for requests with spans
	for id, t := range traces {
		if t.Spans > 0 {
			traceOf[t.RequestID] = id
		}
	}
	want := map[string]bool{}
	for r := range victims {
		if id, ok := traceOf[r]; ok {
			want[id] = true
		}
	}
	for r := range ref {
		if id, ok := traceOf[r]; ok {
			want[id] = true
		}
	}
	tops := outputs.TopRevisions{}
	err = outputs.ReadToEnd(ctx, brokers, fusedTopic, 10*time.Minute, func(r *kgo.Record) {
		h, ok := outputs.ReadFusedHead(r.Value)
		if !ok {
			sc.FusedUndecoded++
		} else if want[h.TraceID] {
			tops.Add(h)
		}
	})
	if err != nil {
		return sc, err
	}
	flagged := func(req string) (traced, flag bool) {
		id, ok := traceOf[req]
		if !ok {
			return false, false // no spans: no fused trace to carry the flag
		}
		top := tops[id]
		return true, top != nil && top.Flagged
	}
	for r := range victims {
		if traced, flag := flagged(r); traced {
			sc.TruthTraced++
			if flag {
				sc.TruthFlagged++
			}
		}
	}
	for r, p := range ref {
		traced, flag := flagged(r)
		if !traced {
			continue
		}
		sc.RefTraced++
		if flag {
			sc.RefFlagged++
		} else if len(sc.RefUnflagged) < 20 {
			rev := "no fused record read"
			if top := tops[traceOf[r]]; top != nil {
				rev = fmt.Sprintf("highest revision read %d", top.Revision)
			}
			sc.RefUnflagged = append(sc.RefUnflagged, fmt.Sprintf("%s (trace %s) on %s at %s: %s", r, traceOf[r], p.GPU, p.Time.UTC().Format("15:04:05.000"), rev))
		}
	}
	slices.Sort(sc.RefUnflagged)
	return sc, nil
}
