package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/kvaccuracy/kvref"
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
}

// scoreKV reads the incidents topic to its end (read_committed) and
// scores it against truth.
func scoreKV(ctx context.Context, brokers []string, topic, logsTopic string, truth []simulator.KVFaultTruth) (KVScore, error) {
	var sc KVScore
	roots := map[string]bool{}     // gpu/request
	byGPU := map[string][]string{} // gpu → roots named there
	named := map[string]bool{}
	ids := map[string]bool{}
	err := readToEnd(ctx, brokers, topic, time.Minute, func(r *kgo.Record) {
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
	ref, err := refPolluted(ctx, brokers, logsTopic)
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
				r, p.gpu, p.Time.UTC().Format("15:04:05.000"), p.Block, p.Layer, p.Via, p.From))
		}
	}
	slices.Sort(sc.RefMissed)
	return sc, nil
}

// refPolluted reads every KV event of the logs topic back, and replays
// each GPU's (by gpu.uuid) in event-time order, ties in the order read,
// through the reference model: the requests it finds polluted.
// refPollution is a polluted request's first foreign read, on GPU gpu.
type refPollution struct {
	kvref.Pollution
	gpu string
}

func refPolluted(ctx context.Context, brokers []string, topic string) (map[string]refPollution, error) {
	byGPU := map[string][]simulator.KVEvent{}
	err := readToEnd(ctx, brokers, topic, 10*time.Minute, func(r *kgo.Record) {
		var ld logspb.LogsData // the wire layout of an export request
		if proto.Unmarshal(r.Value, &ld) != nil {
			return
		}
		for _, rl := range ld.ResourceLogs {
			ra := attrMap(rl.Resource.GetAttributes())
			gpu, inst := attrStr(ra["gpu.uuid"]), attrStr(ra["service.instance.id"])
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					a := attrMap(l.Attributes)
					op := attrStr(a["kv.op"])
					if op == "" || gpu == "" {
						continue
					}
					byGPU[gpu] = append(byGPU[gpu], simulator.KVEvent{Time: time.Unix(0, int64(l.TimeUnixNano)), Op: op,
						Block: int(attrInt(a["kv.block.id"], -1)), Hash: attrStr(a["kv.block.hash"]), RefCnt: int(attrInt(a["kv.block.ref_cnt"], -1)),
						Layer: int(attrInt(a["kv.layer.index"], -1)), LayerCount: int(attrInt(a["kv.layer.count"], 0)),
						Addr: attrInt(a["kv.write.addr"], -1), Bytes: attrInt(a["kv.write.bytes"], -1),
						LayerBase: attrInt(a["kv.layer.base"], 0), LayerSize: attrInt(a["kv.layer.size"], 0),
						RequestID: attrStr(a["gen_ai.request.id"]), Instance: inst})
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	polluted := map[string]refPollution{}
	for gpu, evs := range byGPU {
		slices.SortStableFunc(evs, func(a, b simulator.KVEvent) int { return a.Time.Compare(b.Time) })
		m, inst := kvref.New(), evs[0].Instance
		for _, ev := range evs {
			if ev.Instance != inst {
				m.Restart(0) // a new server process: a fresh pool
				inst = ev.Instance
			}
			m.Apply(ev)
		}
		for r, p := range m.Polluted() {
			polluted[r] = refPollution{p, gpu}
		}
	}
	return polluted, nil
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func attrInt(v *commonpb.AnyValue, def int64) int64 {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_StringValue:
		if n, err := strconv.ParseInt(x.StringValue, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func attrStr(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return ""
}

// readToEnd hands fn every record of topic (read_committed) up to the end
// offsets it had when called, within limit.
func readToEnd(ctx context.Context, brokers []string, topic string, limit time.Duration, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()) // a transaction's marker may end a partition
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("%s end offsets: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}
