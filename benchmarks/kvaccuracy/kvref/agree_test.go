package kvref

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// load is benchmarks/kvaccuracy's load: arrivals gap/2..3gap/2 apart per
// GPU, 1–9 s long, prompts of 20–320 tokens, up to 200 output tokens.
func load(seed int64, gpus int, d, gap time.Duration) []simulator.KVRequest {
	rng := rand.New(rand.NewSource(seed))
	var out []simulator.KVRequest
	for g := 0; g < gpus; g++ {
		for t := start.Add(time.Duration(rng.Int63n(int64(gap)))); t.Before(start.Add(d)); t = t.Add(gap/2 + time.Duration(rng.Int63n(int64(gap)))) {
			out = append(out, simulator.KVRequest{
				RequestID: fmt.Sprintf("cmpl-%d-%d", g, len(out)), TraceID: fmt.Sprintf("%032x", len(out)+1), SpanID: fmt.Sprintf("%016x", len(out)+1),
				GPU: g, Arrival: t, Finish: t.Add(time.Second + time.Duration(rng.Int63n(int64(8*time.Second)))),
				PromptTokens: 20 + rng.Intn(300), OutputTokens: rng.Intn(200), Prefix: simulator.KVAutoPrefix,
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Arrival.Before(out[j].Arrival) })
	return out
}

type run struct {
	name    string
	trigger simulator.KVTrigger
	seed    int64
	heavy   bool
}

// simulate runs one scenario (benchmarks/kvaccuracy's Run, without the
// detector): 2 GPUs, faults one per GPU in turn.
func simulate(t testing.TB, r run, d time.Duration, faults int) ([]simulator.KVEvent, simulator.KVTruth) {
	t.Helper()
	blocks, share, groups, pressure, gap := 256, 0.5, 4, 0.2, 2*time.Second
	if r.heavy {
		blocks, share, groups, pressure, gap = 64, 0.9, 3, 0.5, 500*time.Millisecond
	}
	const gpusN = 2
	cfg := simulator.KVConfig{Seed: r.seed, Layers: 8, BlocksPerGPU: blocks, PrefixShare: share, PrefixGroups: groups, Pressure: pressure}
	if r.trigger != "" {
		for i := 0; i < faults; i++ {
			cfg.Faults = append(cfg.Faults, simulator.KVFault{Trigger: r.trigger, GPU: i % gpusN,
				At: start.Add(time.Minute + time.Duration(i/gpusN)*40*time.Second + time.Duration(i%gpusN)*7*time.Second)})
		}
	}
	var gpus []simulator.KVGPU
	for i := 0; i < gpusN; i++ {
		gpus = append(gpus, simulator.KVGPU{Host: fmt.Sprintf("node-%d", i/2), UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", i), Index: i % 2,
			Instance: fmt.Sprintf("vllm-%d", i), Service: "vllm"})
	}
	sim, err := simulator.NewKV(cfg, gpus)
	if err != nil {
		t.Fatal(err)
	}
	reqs := load(r.seed, gpusN, d, gap)
	var evs []simulator.KVEvent
	i := 0
	for until := start.Add(10 * time.Second); i < len(reqs); until = until.Add(10 * time.Second) {
		for ; i < len(reqs) && reqs[i].Arrival.Before(until); i++ {
			if err := sim.Add(reqs[i]); err != nil {
				t.Fatal(err)
			}
		}
		evs = append(evs, sim.Step(until)...)
	}
	evs = append(evs, sim.Flush()...)
	return evs, sim.Truth()
}

// TestAgreesWithSimulatorTruth replays the simulator's events of a clean
// run and of every trigger, over a few seeds, and compares the requests
// the model finds polluted with the simulator's truth. The truth is
// owner-based (a live owner is polluted when another request writes into
// its block), the model read-based (polluted only when a read returns
// foreign content). The model must find nothing in clean runs, and only
// requests the truth has, but for one class where the truth is short (see
// whyOnlyModel). Every difference is classified and logged (go test -v).
func TestAgreesWithSimulatorTruth(t *testing.T) {
	var runs []run
	for seed := int64(1); seed <= 4; seed++ {
		runs = append(runs, run{name: "clean", seed: seed})
		for _, trig := range simulator.KVTriggers {
			runs = append(runs, run{name: string(trig), trigger: trig, seed: seed*10 + int64(len(runs))})
		}
	}
	runs = append(runs, run{name: "clean/heavy", seed: 5, heavy: true})
	for i, trig := range simulator.KVTriggers {
		runs = append(runs, run{name: string(trig) + "/heavy", trigger: trig, seed: int64(7 + i%2), heavy: true})
	}
	type agg struct {
		truth, model, both, onlyTruth, onlyModel, faults int
		why                                              map[string]int
	}
	sum := map[string]*agg{}
	var names []string
	for _, r := range runs {
		d := 150 * time.Second
		if r.heavy {
			d = 100 * time.Second
		}
		evs, truth := simulate(t, r, d, 4)
		m := New()
		for _, e := range evs {
			m.Apply(e)
		}
		got, want := m.Polluted(), truth.PollutedSet()
		lines := map[string]simulator.KVPolluted{}
		for _, p := range truth.Polluted {
			lines[p.RequestID] = p
		}
		var onlyTruth, onlyModel []string
		both := 0
		for id := range want {
			if _, ok := got[id]; ok {
				both++
			} else {
				onlyTruth = append(onlyTruth, id)
			}
		}
		for id := range got {
			if !want[id] {
				onlyModel = append(onlyModel, id)
			}
		}
		sort.Strings(onlyTruth)
		sort.Strings(onlyModel)
		a := sum[r.name]
		if a == nil {
			a = &agg{why: map[string]int{}}
			sum[r.name] = a
			names = append(names, r.name)
		}
		a.truth += len(want)
		a.model += len(got)
		a.both += both
		a.onlyTruth += len(onlyTruth)
		a.onlyModel += len(onlyModel)
		a.faults += len(truth.Faults)
		t.Logf("%-22s seed %2d: %d events, faults %d, truth %d model %d both %d only-truth %d only-model %d",
			r.name, r.seed, len(evs), len(truth.Faults), len(want), len(got), both, len(onlyTruth), len(onlyModel))
		if r.trigger != "" && len(truth.Faults) == 0 {
			t.Errorf("%s seed %d: no fault realised", r.name, r.seed)
		}
		if r.trigger == "" && len(got) != 0 {
			t.Errorf("%s seed %d: the model finds %d polluted in a clean run: %v", r.name, r.seed, len(got), onlyModel)
		}
		gpuOf := map[int]int{}
		for _, f := range truth.Faults {
			gpuOf[f.Fault] = f.GPUIndex
		}
		lay := layout{blocks: 256}
		if r.heavy {
			lay.blocks = 64
		}
		for _, id := range onlyTruth {
			why, detail := whyOnlyTruth(evs, lines, lines[id], gpuOf[lines[id].Fault], lay)
			a.why["only-truth: "+why]++
			t.Logf("    only-truth %s (%s, %s from %q): %s\n%s", id, lines[id].Via, lines[id].Time.Format("15:04:05.000000"), lines[id].From, why, detail)
		}
		for _, id := range onlyModel {
			why, detail := whyOnlyModel(evs, got[id])
			a.why["only-model: "+why]++
			t.Logf("    only-model %s (%+v): %s\n%s", id, got[id], why, detail)
			if why == "" {
				t.Errorf("%s seed %d: the model finds %s polluted, the truth does not: %+v; events touching block %d:\n%s",
					r.name, r.seed, id, got[id], got[id].Block, dump(evs, got[id], lay, 60))
			}
		}
	}
	for _, n := range names {
		a := sum[n]
		t.Logf("%-22s faults %3d truth %4d model %4d both %4d only-truth %4d only-model %4d", n, a.faults, a.truth, a.model, a.both, a.onlyTruth, a.onlyModel)
		var ws []string
		for w := range a.why {
			ws = append(ws, w)
		}
		sort.Strings(ws)
		for _, w := range ws {
			t.Logf("    %3d %s", a.why[w], w)
		}
	}
}

// layout is the simulator's pool layout (KV.md "Pool layout"), used only to
// explain differences: 8 layers of blocks × 4096 bytes.
type layout struct{ blocks int64 }

const bb = 4096

func (l layout) slot(b, layer int) (int64, int64) {
	lo := int64(layer)*l.blocks*bb + int64(b)*bb
	return lo, lo + bb
}

// Hash-over-unwritten-layers is the one class of model-only pollution: a
// request fills a block's hash (the write that fills it carries its hash)
// while some of the block's layers were never written in its tenure
// (cancel_retry's retry, which believes half the layers computed); a later
// prefix hit on that hash reads those layers' residue. The truth taints the
// retry's writes only after its first polluted read, which comes after its
// writes, so it misses every hit on the block.
const hashOverUnwritten = "hit on a hash whose filler never wrote the layer read (residue under a hash)"

// whyOnlyModel explains a pollution the truth does not have, "" if it
// cannot.
func whyOnlyModel(evs []simulator.KVEvent, p Pollution) (string, string) {
	// the hash p's request hit at p.Block
	hash := ""
	for _, e := range evs {
		if e.GPU == p.GPU && !e.Time.After(p.Time) && e.Block == p.Block && e.RequestID == p.Request && (e.Op == simulator.OpAlloc || e.Op == simulator.OpSwapIn) {
			hash = e.Hash
		}
	}
	if hash == "" {
		return "", "not a hit"
	}
	// the last tenure of the block (alloc without a hash) whose writes carried it
	var filler string
	var layers map[int]bool
	var cur string
	var curLayers map[int]bool
	for _, e := range evs {
		if e.GPU != p.GPU || e.Time.After(p.Time) || e.Block != p.Block {
			continue
		}
		switch {
		case e.Op == simulator.OpAlloc && e.Hash == "" || e.Op == simulator.OpSwapIn:
			cur, curLayers = e.RequestID, map[int]bool{}
		case e.Op == simulator.OpWrite && e.RequestID == cur && cur != "":
			curLayers[e.Layer] = true
			if e.Hash == hash {
				filler, layers = cur, curLayers
			}
		}
	}
	if filler == "" {
		return "", "no write carried the hash"
	}
	if !layers[p.Layer] {
		var ls []int
		for l := range layers {
			ls = append(ls, l)
		}
		sort.Ints(ls)
		return hashOverUnwritten, fmt.Sprintf("      %s filled block %d with hash %s writing only layers %v; %s hit it and read layer %d", filler, p.Block, hash, ls, p.Request, p.Layer)
	}
	return "", ""
}

// Recomputed is the class of truth-only propagation: the source, polluted,
// was preempted (freed all its blocks), and on resuming recomputed its
// prompt into new blocks, with the shared prefix's hashes; the truth taints
// those writes (from the position it was polluted at), the model does not:
// they are recomputed from the request's tokens, and a prompt block with
// the group's hash is the group's content.
const recomputed = "propagated through a block its source rewrote after a recompute preemption"

// whyOnlyTruth explains why the model does not find a request the truth
// has polluted. Direct: the truth's time is a write into the request's
// block (the overwrite it counts); what did the request do with those
// bytes next? Propagated: the truth's time is the read of a block its
// source wrote; when did the source write it?
func whyOnlyTruth(evs []simulator.KVEvent, lines map[string]simulator.KVPolluted, line simulator.KVPolluted, gpu int, lay layout) (string, string) {
	q := line.RequestID
	at := -1
	held := map[int]bool{}
	for i, e := range evs {
		if e.GPU != gpu {
			continue
		}
		if e.Time.Equal(line.Time) {
			at = i
			break
		}
		if e.RequestID == q {
			switch e.Op {
			case simulator.OpAlloc, simulator.OpSwapIn:
				held[e.Block] = true
			case simulator.OpFree, simulator.OpSwapOut:
				delete(held, e.Block)
			}
		}
	}
	if at < 0 {
		return "no event at the truth's time", ""
	}
	w := evs[at]
	if line.Via == Propagated && w.Op == simulator.OpRead {
		return whyPropagated(evs, lines, line, w)
	}
	if w.Op != simulator.OpWrite {
		return "the truth's event is a " + w.Op, fmt.Sprintf("      %+v", w)
	}
	// the bytes of q's blocks the write hit
	type hitRange struct {
		block, layer int
		left         [][2]int64
	}
	var hits []*hitRange
	for b := range held {
		for l := 0; l < 8; l++ {
			lo, hi := lay.slot(b, l)
			lo, hi = max(lo, w.Addr), min(hi, w.Addr+w.Bytes)
			if lo < hi {
				hits = append(hits, &hitRange{b, l, [][2]int64{{lo, hi}}})
			}
		}
	}
	head := fmt.Sprintf("      %s write for block %d layer %d at %d+%d", w.RequestID, w.Block, w.Layer, w.Addr, w.Bytes)
	if len(hits) == 0 {
		return "the write hit none of its blocks' slots", head
	}
	sort.Slice(hits, func(i, j int) bool {
		return hits[i].block < hits[j].block || hits[i].block == hits[j].block && hits[i].layer < hits[j].layer
	})
	h := hits[0]
	head += fmt.Sprintf(" hits %s's block %d layer %d %v", q, h.block, h.layer, h.left)
	var trail []string
	reads, rewrote := 0, false
	for _, e := range evs[at+1:] {
		if e.GPU != gpu || e.Block != h.block || e.RequestID != q {
			continue
		}
		if len(trail) < 6 {
			trail = append(trail, fmt.Sprintf("      then %s %s L=%d %d+%d", q, e.Op, e.Layer, e.Addr, e.Bytes))
		}
		switch e.Op {
		case simulator.OpWrite:
			h.left = subtract(h.left, e.Addr, e.Addr+e.Bytes)
			if len(h.left) == 0 {
				rewrote = true
			}
		case simulator.OpRead:
			if e.Layer == h.layer && overlaps(h.left, e.Addr, e.Addr+e.Bytes) {
				return "read the overwritten bytes (model disagrees)", head + "\n" + strings.Join(trail, "\n")
			}
			reads++
		case simulator.OpFree, simulator.OpSwapOut:
			detail := head + "\n" + strings.Join(trail, "\n")
			switch {
			case rewrote:
				return "rewrote the overwritten bytes itself before reading them", detail
			case reads > 0:
				return "its reads of the block never covered the overwritten bytes, then " + e.Op, detail
			}
			return "let go of the block (" + e.Op + ") without reading it again", detail
		}
	}
	return "never read the overwritten bytes before the run ended", head + "\n" + strings.Join(trail, "\n")
}

func whyPropagated(evs []simulator.KVEvent, lines map[string]simulator.KVPolluted, line simulator.KVPolluted, rd simulator.KVEvent) (string, string) {
	src, ok := lines[line.From]
	if !ok {
		return "propagated from a request the truth has not polluted", ""
	}
	// the source's holdings over time: when did it last write the block
	// before the read, and did it let go of everything between its
	// pollution and that write?
	held := map[int]bool{}
	emptied := false
	var last simulator.KVEvent
	lastEmptied := false
	for _, e := range evs {
		if e.GPU != rd.GPU || !e.Time.Before(rd.Time) || e.RequestID != line.From {
			continue
		}
		switch e.Op {
		case simulator.OpAlloc, simulator.OpSwapIn:
			held[e.Block] = true
		case simulator.OpFree, simulator.OpSwapOut:
			delete(held, e.Block)
			if len(held) == 0 && !e.Time.Before(src.Time) {
				emptied = true
			}
		case simulator.OpWrite:
			if e.Block == rd.Block {
				last, lastEmptied = e, emptied
			}
		}
	}
	detail := fmt.Sprintf("      %s polluted at %s; it wrote block %d (hash %s) at %s; %s read it at %s",
		line.From, src.Time.Format("15:04:05.000000"), rd.Block, last.Hash, last.Time.Format("15:04:05.000000"), line.RequestID, rd.Time.Format("15:04:05.000000"))
	if lastEmptied {
		return recomputed, detail
	}
	return "propagated, other", detail
}

func subtract(rs [][2]int64, lo, hi int64) [][2]int64 {
	var out [][2]int64
	for _, r := range rs {
		if r[1] <= lo || r[0] >= hi {
			out = append(out, r)
			continue
		}
		if r[0] < lo {
			out = append(out, [2]int64{r[0], lo})
		}
		if r[1] > hi {
			out = append(out, [2]int64{hi, r[1]})
		}
	}
	return out
}

func overlaps(rs [][2]int64, lo, hi int64) bool {
	for _, r := range rs {
		if r[0] < hi && lo < r[1] {
			return true
		}
	}
	return false
}

// dump prints the last n events of p's GPU, up to p's read, that concern
// p's block or touch its slot in any layer, or are p's request's block ops.
func dump(evs []simulator.KVEvent, p Pollution, lay layout, n int) string {
	inSlot := func(e simulator.KVEvent) bool {
		if e.Addr < 0 {
			return false
		}
		for l := 0; l < 8; l++ {
			lo, hi := lay.slot(p.Block, l)
			if e.Addr < hi && e.Addr+e.Bytes > lo {
				return true
			}
		}
		return false
	}
	var out []string
	for _, e := range evs {
		if e.GPU != p.GPU || e.Time.After(p.Time) {
			continue
		}
		if e.Block == p.Block || inSlot(e) || e.RequestID == p.Request && e.Op != simulator.OpRead && e.Op != simulator.OpWrite {
			out = append(out, fmt.Sprintf("  %s %-8s req=%-12s b=%-3d L=%-2d addr=%d+%d hash=%s ref=%d", e.Time.Format("15:04:05.000000"), e.Op, e.RequestID, e.Block, e.Layer, e.Addr, e.Bytes, e.Hash, e.RefCnt))
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}
