package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

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
	// RootsMissed: the faults (trigger, GPU, source request) no incident
	// names as root, with the roots braid named on that GPU.
	RootsMissed []string `json:"roots_missed,omitempty"`
}

// scoreKV reads the incidents topic to its end (read_committed) and
// scores it against truth.
func scoreKV(ctx context.Context, brokers []string, topic string, truth []simulator.KVFaultTruth) (KVScore, error) {
	var sc KVScore
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()) // a transaction's marker ends the partition
	if err != nil {
		return sc, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return sc, fmt.Errorf("incidents end offsets: %w", err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	roots := map[string]bool{}     // gpu/request
	byGPU := map[string][]string{} // gpu → roots named there
	named := map[string]bool{}
	ids := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return sc, fmt.Errorf("read %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
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
	return sc, nil
}
