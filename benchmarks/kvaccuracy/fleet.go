package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/benchmarks/kvaccuracy/kvref"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// FleetScenario is a run of the realistic fleet (the simulator's
// Config.Realistic, as `braid demo` runs it): vLLM, SGLang and TGI servers
// whose requests share the fleet's system prompts, with KV-block events on
// the logs topic as the Collector writes them, and every trigger injected
// once, the first 10 s after the start, then one every 20 s, each on a GPU
// the simulator picks. Unlike the suite's scenarios (a steady load the KV
// simulator's own test generator makes), requests come from the fleet's
// traffic, and the faults meet: two on one GPU, a fault's writer a victim
// of another's.
type FleetScenario struct {
	Seed     int64
	Hosts    int     // two GPUs each
	Rate     float64 // requests per second of event time
	Duration time.Duration
}

// FleetResult is Result plus the grouping a report shows: for each fault,
// the victims of its incidents (those on its GPU rooted at its source
// request, else the one naming most of its victims — not another fault's
// own incident unless this fault's source is in it, merged) against its
// victims in the simulator's truth.
type FleetResult struct {
	Result
	GroupTP, GroupFP, GroupFN int
	GroupPrecision            float64 `json:"group_precision"`
	GroupRecall               float64 `json:"group_recall"`
	// Unmatched: incidents that are no fault's (on no fault's GPU with its
	// root or victims).
	Unmatched int `json:"unmatched_incidents"`
}

// RunFleet simulates sc and runs the detector over its KV-block log
// records in event-time order (the order the fuse stage hands them to the
// detector once the watermark passes them), one engine task, a checkpoint
// every 20,000 records. Victims are scored against the simulator's truth
// and against the reference model (kvref), fed from the records' OTLP
// attributes as read here, not by braid's parser.
func RunFleet(sc FleetScenario, dir string) (FleetResult, error) {
	cfg := simulator.Config{Seed: sc.Seed, Start: start, BatchInterval: 200 * time.Millisecond, Realistic: true, Rate: sc.Rate, Hosts: sc.Hosts, KVEvents: true}
	for i, t := range simulator.KVTriggers {
		cfg.KV.Faults = append(cfg.KV.Faults, simulator.KVFault{Trigger: t, At: start.Add(10*time.Second + time.Duration(i)*20*time.Second), GPU: -1})
	}
	sim, err := simulator.New(cfg)
	if err != nil {
		return FleetResult{}, err
	}
	type record struct {
		t int64
		v []byte
		e simulator.KVEvent
	}
	var recs []record
	gpus := map[string]int{}
	for until := start.Add(sc.Duration); sim.EventTime().Before(until); {
		for _, m := range sim.Next() {
			if m.Topic != "otlp_logs" {
				continue
			}
			var ld logspb.LogsData
			if err := proto.Unmarshal(m.Value, &ld); err != nil {
				return FleetResult{}, err
			}
			for _, rl := range ld.ResourceLogs {
				uuid, instance := attr(rl.GetResource().GetAttributes(), "gpu.uuid"), attr(rl.GetResource().GetAttributes(), "service.instance.id")
				for _, sl := range rl.ScopeLogs {
					for _, lr := range sl.LogRecords {
						ev, ok := kvEvent(lr)
						if !ok || uuid == "" {
							continue
						}
						g, seen := gpus[uuid]
						if !seen {
							g = len(gpus)
							gpus[uuid] = g
						}
						ev.GPU, ev.Instance = g, instance
						// One record per event: the detector gets them one
						// by one, in event-time order.
						one := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: rl.Resource,
							ScopeLogs: []*logspb.ScopeLogs{{Scope: sl.Scope, LogRecords: []*logspb.LogRecord{lr}}}}}}
						v, err := proto.Marshal(one)
						if err != nil {
							return FleetResult{}, err
						}
						recs = append(recs, record{t: int64(lr.TimeUnixNano), v: v, e: ev})
					}
				}
			}
		}
	}
	slices.SortStableFunc(recs, func(a, b record) int { return cmp.Compare(a.t, b.t) })

	d, err := openDetector(dir)
	if err != nil {
		return FleetResult{}, err
	}
	defer d.close()
	ref := kvref.New()
	instances := map[int]string{}
	t0 := time.Now()
	for i, r := range recs {
		if old, ok := instances[r.e.GPU]; ok && old != r.e.Instance {
			ref.Restart(r.e.GPU)
		}
		instances[r.e.GPU] = r.e.Instance
		ref.Apply(r.e)
		if err := d.Process(0, &kgo.Record{Topic: "otlp_logs", Value: r.v, Offset: int64(i)}); err != nil {
			return FleetResult{}, err
		}
		if i%20000 == 19999 {
			if err := d.Checkpoint(); err != nil {
				return FleetResult{}, err
			}
			if err := d.collect(); err != nil {
				return FleetResult{}, err
			}
		}
	}
	if err := d.Finish(); err != nil {
		return FleetResult{}, err
	}
	if err := d.collect(); err != nil {
		return FleetResult{}, err
	}
	res := FleetResult{Result: Result{Name: fmt.Sprintf("fleet/seed%d", sc.Seed), Load: "fleet", GPUs: len(gpus), EventTimeS: sc.Duration.Seconds(),
		Events: len(recs), WallS: time.Since(t0).Seconds(), Edges: d.cfg.Counters.Edges.Load()}}
	truth := sim.Truth().KV
	score(&res.Result, truth, d.incidents, d.cfg.IncidentWindow)
	scoreRef(&res.Result, ref.Polluted(), d.incidents)
	scoreGroups(&res, truth, d.incidents)
	return res, nil
}

// scoreGroups scores each fault's incidents (FleetResult).
func scoreGroups(res *FleetResult, truth simulator.KVTruth, all []*braidpb.Incident) {
	latest := latestRevisions(all)
	sources := map[string]bool{}
	for _, f := range truth.Faults {
		sources[f.GPU+"/"+f.SourceRequest] = true
	}
	holds := func(inc *braidpb.Incident, req string) bool {
		for _, e := range inc.Edges {
			if e.SourceRequest == req || e.TargetRequest == req {
				return true
			}
		}
		return false
	}
	matched := map[string]bool{}
	for _, f := range truth.Faults {
		want := map[string]bool{}
		for _, v := range append(slices.Clone(f.Victims), f.Propagated...) {
			want[v] = true
		}
		var mine []*braidpb.Incident
		for _, inc := range latest {
			if inc.Gpu == f.GPU && inc.Root.GetRequestId() == f.SourceRequest {
				mine = append(mine, inc) // its own, and continuations of it
			}
		}
		if len(mine) == 0 {
			var best *braidpb.Incident
			bestN := 0
			for _, inc := range latest {
				if inc.Root.GetRequestId() != f.SourceRequest && sources[inc.Gpu+"/"+inc.Root.GetRequestId()] && !holds(inc, f.SourceRequest) {
					continue // another fault's own incident, this one not merged into it
				}
				n := 0
				for _, p := range inc.Polluted {
					if inc.Gpu == f.GPU && want[p.RequestId] {
						n++
					}
				}
				if n > bestN || n == bestN && n > 0 && inc.Id < best.Id {
					best, bestN = inc, n
				}
			}
			if best != nil {
				mine = append(mine, best)
			}
		}
		got := map[string]bool{}
		for _, inc := range mine {
			matched[inc.Id] = true
			for _, p := range inc.Polluted {
				if got[p.RequestId] {
					continue
				}
				got[p.RequestId] = true
				if want[p.RequestId] {
					res.GroupTP++
				} else {
					res.GroupFP++
				}
			}
		}
		for v := range want {
			if !got[v] {
				res.GroupFN++
			}
		}
	}
	for id, inc := range latest {
		if !matched[id] && !hasSuffix(inc.Root.GetDetail(), "(merged into another incident)") {
			res.Unmatched++
		}
	}
	res.GroupPrecision, res.GroupRecall = ratio(res.GroupTP, res.GroupTP+res.GroupFP), ratio(res.GroupTP, res.GroupTP+res.GroupFN)
}

// kvEvent reads a KV-block log record's attributes (INPUTS.md §5) into the
// simulator's event, as the reference model takes them.
func kvEvent(lr *logspb.LogRecord) (simulator.KVEvent, bool) {
	ev := simulator.KVEvent{Time: time.Unix(0, int64(lr.TimeUnixNano)).UTC(), Block: -1, RefCnt: -1, Layer: -1, Addr: -1, Bytes: -1, LayerBase: -1, LayerSize: -1,
		RequestID: attr(lr.Attributes, "gen_ai.request.id")}
	ev.Op = attr(lr.Attributes, "kv.op")
	if ev.Op == "" {
		return ev, false // a sanitizer or Xid line, or another log
	}
	ev.Hash = attr(lr.Attributes, "kv.block.hash")
	for _, a := range lr.Attributes {
		v, ok := a.GetValue().GetValue().(*commonpb.AnyValue_IntValue)
		if !ok {
			continue
		}
		switch a.Key {
		case "kv.block.id":
			ev.Block = int(v.IntValue)
		case "kv.block.ref_cnt":
			ev.RefCnt = int(v.IntValue)
		case "kv.layer.index":
			ev.Layer = int(v.IntValue)
		case "kv.layer.count":
			ev.LayerCount = int(v.IntValue)
		case "kv.write.addr":
			ev.Addr = v.IntValue
		case "kv.write.bytes":
			ev.Bytes = v.IntValue
		case "kv.layer.base":
			ev.LayerBase = v.IntValue
		case "kv.layer.size":
			ev.LayerSize = v.IntValue
		}
	}
	return ev, true
}

func attr(as []*commonpb.KeyValue, key string) string {
	for _, a := range as {
		if a.Key == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}
