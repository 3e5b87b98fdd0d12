package fuse

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// TestKVPollutionTagsTheVictimsTrace: KV-block events (read on one task)
// reach the kvgraph task of their host, are never trace members, and the
// dirty-residue incident they show tags the victim request's FusedTrace
// (fused on another task) with its id and FLAG_POLLUTED.
func TestKVPollutionTagsTheVictimsTrace(t *testing.T) {
	for _, reversed := range []bool{false, true} {
		kvPollution(t, reversed)
	}
}

// kvPollution runs the scenario with the KV events in order, or arriving
// in reverse order from two input partitions (the stage sorts them by
// event time before the detector sees them).
func kvPollution(t *testing.T, reversed bool) {
	c := newCluster(t, 3, nil)
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	where := kvlog.Where{Host: "node-a", GPUUUID: "GPU-0", GPUIndex: 0, Instance: "vllm-0"}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) }
	var victim [16]byte
	victim[0], victim[15] = 0xab, 0x01
	var ops []kvlog.Op
	// r1 fills block 1 and frees it; r2 gets it, writes a little of layer
	// 1 and reads all of it: residue of r1.
	ops = append(ops, kvlog.Op{Time: ms(0), Op: "alloc", Request: "r1", Block: 1})
	for l := range pool.Layers {
		ops = append(ops, pool.Write(ms(1), "r1", 1, l, 0, pool.BlockBytes))
	}
	ops = append(ops, kvlog.Op{Time: ms(3), Op: "free", Request: "r1", Block: 1},
		kvlog.Op{Time: ms(5), Op: "alloc", Request: "r2", Block: 1, TraceID: victim},
		pool.Write(ms(6), "r2", 1, 1, 0, 128),
		pool.Read(ms(7), "r2", 1, 1, 0, 1024))
	for i := range ops {
		ops[i].Layers = pool.Layers
	}
	if reversed {
		for i := len(ops) - 1; i >= 0; i-- {
			c.feed(2*(i%2), inLogs, nil, kvlog.Marshal(where, ops[i]))
		}
	} else {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, ops...))
	}
	c.feed(1, inSpans, nil, spansMsg(requestSpan(victim, "r2", base, base.Add(10*time.Millisecond))))
	for k := 1; k <= 8; k++ {
		at := base.Add(time.Duration(k) * 2 * time.Second)
		for p := range 3 {
			var id [16]byte
			id[0], id[1], id[2] = 0xee, byte(k), byte(p)
			c.feed(p, inSpans, nil, spansMsg(requestSpan(id, "other", at, at)))
		}
		c.checkpoint(600 * time.Millisecond)
	}
	var incidents []*braidpb.Incident
	var kvLogs int64
	for _, h := range c.hs {
		for _, r := range h.out("braid.incidents") {
			var inc braidpb.Incident
			if err := proto.Unmarshal(r.Value, &inc); err != nil {
				t.Fatal(err)
			}
			incidents = append(incidents, &inc)
		}
		kvLogs += h.stage.Counters().KVLogs.Load()
	}
	if kvLogs != int64(len(ops)) {
		t.Errorf("%d KV logs routed, want %d", kvLogs, len(ops))
	}
	if len(incidents) == 0 {
		t.Fatal("no incident emitted")
	}
	for _, inc := range incidents {
		if inc.Id != incidents[0].Id {
			t.Fatalf("reversed=%v: incidents %s and %s; want one", reversed, incidents[0].Id, inc.Id)
		}
	}
	inc := incidents[len(incidents)-1]
	if inc.Pattern != braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE || inc.Root.GetRequestId() != "r1" {
		t.Errorf("incident pattern %v root %v", inc.Pattern, inc.Root)
	}
	var tags, tagsLate int64
	for _, h := range c.hs {
		tags += h.stage.Counters().IncidentTags.Load()
		tagsLate += h.stage.Counters().IncidentTagsLate.Load()
	}
	t.Logf("incident records %d, tags %d (late %d), polluted %v", len(incidents), tags, tagsLate, inc.Polluted)
	ft := c.fused()[string(otlp.AppendTraceIDHex(nil, victim))]
	if ft == nil {
		t.Fatal("victim's trace not emitted")
	}
	if len(ft.IncidentIds) != 1 || ft.IncidentIds[0] != inc.Id || !hasFlag(ft, braidpb.Flag_FLAG_POLLUTED) {
		t.Errorf("victim's trace incidents %v flags %v, want [%s] and POLLUTED", ft.IncidentIds, ft.Flags, inc.Id)
	}
	if len(ft.Logs) != 0 {
		t.Errorf("KV events became trace members: %d logs", len(ft.Logs))
	}
}

// TestIncidentCarriesResourceContext: an incident's evidence holds the
// series of its GPU and of the server whose KV events showed it, from the
// resources stage — not another GPU's.
func TestIncidentCarriesResourceContext(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.ResourcesTopic = "braid.resources"; cfg.ResourceIdleness = time.Second })
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	where := kvlog.Where{Host: "h1", GPUUUID: "GPU-1", GPUIndex: 0, Instance: "h1:8000"}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) }
	for _, s := range []scrape{{base, 0.5, 1, 1000, 5}, {base.Add(time.Second), 0.9, 3, 1200, 5}} {
		c.feed(0, inMetrics, nil, scrapeMsg(s))
	}
	ops := []kvlog.Op{{Time: ms(0), Op: "alloc", Request: "r1", Block: 1}}
	for l := range pool.Layers {
		ops = append(ops, pool.Write(ms(1), "r1", 1, l, 0, pool.BlockBytes))
	}
	ops = append(ops, kvlog.Op{Time: ms(3), Op: "free", Request: "r1", Block: 1},
		kvlog.Op{Time: ms(1500), Op: "alloc", Request: "r2", Block: 1},
		pool.Read(ms(1600), "r2", 1, 1, 0, 1024))
	c.feed(0, inLogs, nil, kvlog.Marshal(where, ops...))
	for k := 1; k <= 8; k++ {
		at := base.Add(time.Duration(k) * 2 * time.Second)
		c.feed(0, inMetrics, nil, scrapeMsg(scrape{at, 0.2, 3, 1000, 5}))
		c.checkpoint(600 * time.Millisecond)
	}
	var inc *braidpb.Incident
	for _, r := range c.hs[0].out("braid.incidents") {
		inc = &braidpb.Incident{}
		if err := proto.Unmarshal(r.Value, inc); err != nil {
			t.Fatal(err)
		}
	}
	if inc == nil {
		t.Fatal("no incident")
	}
	got := map[string]bool{}
	for _, w := range inc.GetResources().GetSeries() {
		got[w.Metric+"|"+seriesPlaceOf(w.Resource)] = true
	}
	for _, want := range []string{"kv_cache_usage|instance=h1:8000", "preemptions|instance=h1:8000", "gpu_fb_used_mib|gpu=GPU-1"} {
		if !got[want] {
			t.Errorf("incident context lacks %s: %v", want, got)
		}
	}
	if got["gpu_fb_used_mib|gpu=GPU-2"] {
		t.Error("incident context holds another GPU's series")
	}
}

func seriesPlaceOf(id string) string {
	var inst, gpu string
	for _, part := range strings.Split(id, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "instance":
			inst = v
		case "gpu_uuid":
			gpu = v
		}
	}
	if gpu != "" {
		return "gpu=" + gpu
	}
	return "instance=" + inst
}

// hostOn returns a host name whose KV events go to task q of n.
func hostOn(q, n int32) string {
	for i := 0; ; i++ {
		h := "node-" + strconv.Itoa(i)
		if otlp.HashPartition([]byte(h), n) == q {
			return h
		}
	}
}

// residueOps: r2 reads what r1 left in block 1 (one dirty-residue
// incident).
func residueOps(pool kvlog.Pool, ms func(int64) int64) []kvlog.Op {
	ops := []kvlog.Op{{Time: ms(0), Op: "alloc", Request: "r1", Block: 1}}
	for l := range pool.Layers {
		ops = append(ops, pool.Write(ms(1), "r1", 1, l, 0, pool.BlockBytes))
	}
	return append(ops, kvlog.Op{Time: ms(3), Op: "free", Request: "r1", Block: 1},
		kvlog.Op{Time: ms(5), Op: "alloc", Request: "r2", Block: 1},
		pool.Read(ms(7), "r2", 1, 1, 0, 1024))
}

// cleanLifecycles is n clean block lifecycles (alloc, write, read, zero,
// free) on blocks 2–7, 4 ms apart from 10 ms on.
func cleanLifecycles(pool kvlog.Pool, ms func(int64) int64, n int64) []kvlog.Op {
	var ops []kvlog.Op
	for i := range n {
		b := 2 + i%6
		req := "c" + strconv.FormatInt(i, 10)
		ops = append(ops, kvlog.Op{Time: ms(10 + 4*i), Op: "alloc", Request: req, Block: b},
			pool.Write(ms(11+4*i), req, b, 0, 0, 1024), pool.Read(ms(12+4*i), req, b, 0, 0, 1024),
			kvlog.Op{Time: ms(13 + 4*i), Op: "zero", Block: b}, kvlog.Op{Time: ms(13 + 4*i), Op: "free", Request: req, Block: b})
	}
	return ops
}

// advance moves event time on every task by n steps of 2s (a span on each)
// and checkpoints.
func (c *cluster) advance(n int) {
	for k := 1; k <= n; k++ {
		at := base.Add(time.Duration(k) * 2 * time.Second)
		for p := range c.hs {
			var id [16]byte
			id[0], id[1], id[2] = 0xee, byte(k), byte(p)
			c.feed(p, inSpans, nil, spansMsg(requestSpan(id, "other", at, at)))
		}
		c.checkpoint(600 * time.Millisecond)
	}
}

func (c *cluster) incidents() []*braidpb.Incident {
	c.t.Helper()
	var out []*braidpb.Incident
	for _, h := range c.hs {
		for _, r := range h.out("braid.incidents") {
			inc := &braidpb.Incident{}
			if err := proto.Unmarshal(r.Value, inc); err != nil {
				c.t.Fatal(err)
			}
			out = append(out, inc)
		}
	}
	return out
}

// TestKVRejectedEventGoesToTheDLQWithItsInputRecord: a KV event whose
// gen_ai.request.id is invalid UTF-8 is dead-lettered by the task that read
// it, with the input record's topic, partition and offset, before it is
// forwarded; the good events of the same message still make their
// incident.
func TestKVRejectedEventGoesToTheDLQWithItsInputRecord(t *testing.T) {
	c := newCluster(t, 3, nil)
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) }
	where := kvlog.Where{Host: hostOn(2, 3), GPUUUID: "GPU-0", GPUIndex: 0}
	ops := append(residueOps(pool, ms), pool.Write(ms(4), "rZZZZZ", 3, 0, 0, 64))
	v := bytes.ReplaceAll(kvlog.Marshal(where, ops...), []byte("rZZZZZ"), []byte("r\xff\xfe\xc3(9"))
	c.hs[0].off = 41
	c.feed(0, inLogs, nil, v)
	c.advance(8)
	dl := c.hs[0].out("braid.dlq")
	if len(dl) != 1 {
		t.Fatalf("%d DLQ records on the reading task, want 1", len(dl))
	}
	hdr := map[string]string{}
	for _, h := range dl[0].Headers {
		hdr[h.Key] = string(h.Value)
	}
	if hdr["braid.reason"] != "kvgraph: invalid UTF-8 in gen_ai.request.id" || hdr["braid.topic"] != c.hs[0].stage.Topology().Inputs[inLogs].Topic ||
		hdr["braid.partition"] != "0" || hdr["braid.offset"] != "41" {
		t.Fatalf("DLQ headers %v", hdr)
	}
	// The record as read: the request id's bytes as they came, not repaired.
	if !bytes.Contains(dl[0].Value, []byte("r\xff\xfe\xc3(9")) {
		t.Fatalf("DLQ value %q lacks the invalid request id", dl[0].Value)
	}
	if n := c.hs[0].stage.KVCounters().Rejected.Load(); n != 1 {
		t.Fatalf("rejected %d", n)
	}
	incs := c.incidents()
	if len(incs) == 0 || incs[len(incs)-1].Root.GetRequestId() != "r1" {
		t.Fatalf("incidents %v", incs)
	}
}

// TestKVLargeEventIsSlimmed: a KV event in a record with megabytes of
// other attributes is forwarded as what the detector reads: the forward
// record is small, and detection is the same.
func TestKVLargeEventIsSlimmed(t *testing.T) {
	c := newCluster(t, 3, nil)
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) }
	where := kvlog.Where{Host: hostOn(1, 3), GPUUUID: "GPU-0", GPUIndex: 0}
	ld := kvlog.LogsData(where, residueOps(pool, ms)...)
	junk := strings.Repeat("j", 300_000)
	for _, lr := range ld.ResourceLogs[0].ScopeLogs[0].LogRecords {
		lr.Attributes = append(lr.Attributes, &commonpb.KeyValue{Key: "x.junk", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: junk}}})
	}
	ld.ResourceLogs[0].Resource.Attributes = append(ld.ResourceLogs[0].Resource.Attributes,
		&commonpb.KeyValue{Key: "k8s.pod.labels", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: junk}}})
	v, err := proto.Marshal(ld)
	if err != nil {
		t.Fatal(err)
	}
	c.hs[0].feed(inLogs, nil, v)
	fwd := c.hs[0].out("braid.kvgraph-repartition")
	if len(fwd) == 0 {
		t.Fatal("nothing forwarded")
	}
	for _, r := range fwd {
		if len(r.Value) > 4096 {
			t.Fatalf("forward record of %d bytes", len(r.Value))
		}
	}
	c.drain()
	c.advance(8)
	incs := c.incidents()
	if len(incs) == 0 {
		t.Fatal("no incident")
	}
	inc := incs[len(incs)-1]
	if inc.Root.GetRequestId() != "r1" || len(inc.Polluted) != 1 || inc.Polluted[0].RequestId != "r2" || inc.Host != where.Host {
		t.Fatalf("incident %v", inc)
	}
}

// TestKVBufferIsBounded: with MaxKVBufferBytes reached by the places
// alone, the latest held events leave memory for state instead of the
// buffer growing; they still reach the detector in event-time order, so
// detection is the same.
func TestKVBufferIsBounded(t *testing.T) {
	const limit = 8 << 10
	c := newCluster(t, 1, func(cfg *Config) { cfg.KVGraph.MaxKVBufferBytes = limit })
	pool, ms, where := kvFixture()
	// Many clean lifecycles on other blocks, all ahead of the watermark.
	ops := append(residueOps(pool, ms), cleanLifecycles(pool, ms, 200)...)
	h := c.hs[0]
	for i := 0; i < len(ops); i += 10 {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, ops[i:min(i+10, len(ops))]...))
		if n := h.stage.KVCounters().KVBufferBytes.Load(); n > limit {
			t.Fatalf("KV buffer holds %d bytes > %d", n, limit)
		}
	}
	shed := h.stage.Counters().KVShed.Load()
	if shed == 0 {
		t.Fatal("no place left memory")
	}
	if len(c.incidents()) != 0 {
		t.Fatal("an incident before the watermark passed its events")
	}
	c.advance(8)
	incs := c.incidents()
	if len(incs) == 0 {
		t.Fatal("no incident")
	}
	inc := incs[len(incs)-1]
	if inc.Root.GetRequestId() != "r1" || len(inc.Polluted) != 1 {
		t.Fatalf("incident %v", inc)
	}
	if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
		t.Errorf("%d events still held", n)
	}
	t.Logf("%d of %d events shed to state", shed, len(ops))
}

// TestKVLiveHold: caught up with its inputs, a task hands a held KV event
// to the detector once it has waited KVGraph.LiveHold of processing time
// and every task has committed what it read before (two markers of each
// read since), long before the watermark (which trails the freshest data by
// the out-of-orderness bound) passes it; behind its inputs, beside a task
// of its instance that reads a backlog (which reads a host's older events
// later), with LiveHold negative, or while markers do not come, only the
// watermark releases events.
func TestKVLiveHold(t *testing.T) {
	pool, ms, where := kvFixture()
	for _, tc := range []struct {
		name       string
		hold       time.Duration
		caughtUp   bool
		sibling    bool // another task of the instance reads a backlog
		behind     bool // the other task (another instance's) reads a backlog
		checkpoint bool // markers come (two checkpoints)
		want       bool // an incident before the watermark passes the events
	}{
		{"live", 0, true, false, false, true, true},
		{"backlog", 0, false, false, false, true, false},
		{"sibling reads a backlog", 0, true, true, false, true, false},
		{"another instance reads a backlog", 0, true, false, true, true, false},
		{"hold off", -1, true, false, false, true, false},
		{"no markers", 0, true, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2, func(cfg *Config) { cfg.KVGraph.LiveHold = tc.hold })
			owner := int(otlp.HashPartition([]byte(where.Host), 2))
			h := c.hs[owner]
			c.feed(owner, inLogs, nil, kvlog.Marshal(where, residueOps(pool, ms)...))
			if tc.caughtUp {
				h.MarkCaughtUp()
			}
			if !tc.behind {
				c.hs[1-owner].MarkCaughtUp()
			}
			if tc.sibling {
				h.AddSiblingBehind()
			}
			step := func(d time.Duration) {
				if tc.checkpoint {
					c.checkpoint(d)
					return
				}
				for _, h := range c.hs {
					h.now = h.now.Add(d)
					h.SetNow(h.now)
					if err := h.Advance(); err != nil {
						t.Fatal(err)
					}
				}
				c.drain()
			}
			// Within the hold nothing goes: a later event may still come
			// with an earlier time.
			step(500 * time.Millisecond)
			if n := h.stage.Counters().KVBuffered.Load(); n != int64(len(residueOps(pool, ms))) {
				t.Fatalf("after 0.5s %d events held, want all %d", n, len(residueOps(pool, ms)))
			}
			step(700 * time.Millisecond)
			if wm := h.Watermark(); wm >= ms(0) {
				t.Fatalf("watermark %d passed the events (%d): the test shows nothing", wm, ms(0))
			}
			got := len(c.incidents()) > 0
			held := h.stage.Counters().KVBuffered.Load()
			if got != tc.want || (held == 0) != tc.want {
				t.Fatalf("after 1.2s: incident %v, %d events held; want incident %v", got, held, tc.want)
			}
			if tc.want {
				if inc := c.incidents()[0]; inc.Root.GetRequestId() != "r1" {
					t.Errorf("incident root %v, want r1", inc.Root)
				}
			}
		})
	}
}

// TestKVLiveHoldCountsFromTheForwardersRead: a KV event that another task
// read and forwarded reaches its host's task a checkpoint later; its live
// hold counts from when the forwarder read it (the forwarded record's
// timestamp, which the producing client sets), so once the markers of that
// checkpoint show every task has committed what it read up to LiveHold
// after it, it goes to the detector on arrival — not LiveHold after. A
// record without a timestamp is held from its arrival, as before.
func TestKVLiveHoldCountsFromTheForwardersRead(t *testing.T) {
	pool, ms, where := kvFixture()
	for _, stamped := range []bool{true, false} {
		t.Run(fmt.Sprintf("stamped=%v", stamped), func(t *testing.T) {
			c := newCluster(t, 2, nil)
			owner := int(otlp.HashPartition([]byte(where.Host), 2))
			other := 1 - owner
			c.hs[owner].MarkCaughtUp()
			// The other task reads the host's events and forwards them in
			// its transaction: readable by the owner after its checkpoint.
			c.hs[other].feed(inLogs, nil, kvlog.Marshal(where, residueOps(pool, ms)...))
			c.hs[other].MarkCaughtUp() // and has read to its sources' ends
			forwarded := 0
			for _, r := range c.hs[other].Out {
				if r.Topic == "braid.kvgraph-repartition" {
					forwarded++
					if stamped {
						r.Timestamp = c.hs[other].now
					}
				}
			}
			if forwarded == 0 {
				t.Fatal("nothing forwarded: the test shows nothing")
			}
			c.checkpoint(2 * time.Second) // the record, then the markers, then the watermark's turn
			h := c.hs[owner]
			if wm := h.Watermark(); wm >= ms(0) {
				t.Fatalf("watermark %d passed the events (%d): the test shows nothing", wm, ms(0))
			}
			got := len(c.incidents()) > 0
			held := h.stage.Counters().KVBuffered.Load()
			if got != stamped || (held == 0) != stamped {
				t.Fatalf("on arrival: incident %v, %d events held; want incident %v", got, held, stamped)
			}
			if !stamped {
				// Held from its arrival: LiveHold and the next markers later.
				c.checkpoint(1200 * time.Millisecond)
				if len(c.incidents()) == 0 {
					t.Fatalf("no incident LiveHold after arrival; %d events held", h.stage.Counters().KVBuffered.Load())
				}
			}
		})
	}
}

// TestKVBufferSpillsInOrder: when the held events' members overflow
// MaxKVBufferBytes, new ones are kept in state (only their places in
// memory) and read back in their turn — across a restart too — so the
// detector sees the events in event-time order although they arrived in
// reverse: one incident (the residue), no place shed.
func TestKVBufferSpillsInOrder(t *testing.T) {
	const limit = 96 << 10
	c := newCluster(t, 1, func(cfg *Config) { cfg.KVGraph.MaxKVBufferBytes = limit })
	pool, ms, where := kvFixture()
	ops := append(residueOps(pool, ms), cleanLifecycles(pool, ms, 200)...)
	h := c.hs[0]
	var chunks [][]kvlog.Op
	for i := len(ops); i > 0; i -= 10 { // latest first
		chunks = append(chunks, ops[max(i-10, 0):i])
	}
	c.feedKVRestartingHalfway(where, chunks, limit)
	spilled := h.stage.Counters().KVSpilled.Load()
	if spilled == 0 {
		t.Fatal("nothing spilled: the test shows nothing")
	}
	if shed := h.stage.Counters().KVShed.Load(); shed != 0 {
		t.Fatalf("%d places shed: the share should hold them", shed)
	}
	c.advance(8)
	incs := c.incidents()
	ids := map[string]bool{}
	for _, inc := range incs {
		ids[inc.Id] = true
	}
	if len(ids) != 1 {
		t.Fatalf("%d incidents, want the one residue: %v", len(ids), incs)
	}
	if inc := incs[len(incs)-1]; inc.Root.GetRequestId() != "r1" || len(inc.Polluted) != 1 {
		t.Fatalf("incident %v", inc)
	}
	if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
		t.Errorf("%d events still held after the watermark passed them all", n)
	}
	if n := h.stage.KVCounters().KVBufferBytes.Load(); n != 0 {
		t.Errorf("KV buffer reports %d bytes with nothing held (read-ahead accounting)", n)
	}
	t.Logf("%d of %d events spilled", spilled, len(ops))
}

// TestKVBufferReadAheadAcrossRestart: spilled events are read back a scan
// at a time (members of the next ones ahead of their turn); a restart
// between two releases drops what was read ahead and reads it again from
// state, so the detector still sees every event once, in order: one
// incident, nothing held or counted afterwards.
func TestKVBufferReadAheadAcrossRestart(t *testing.T) {
	const limit = 96 << 10
	c := newCluster(t, 1, func(cfg *Config) { cfg.KVGraph.MaxKVBufferBytes = limit })
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(10*time.Millisecond) } // 0–8 s
	where := kvlog.Where{Host: "node-a", GPUUUID: "GPU-0", GPUIndex: 0}
	ops := append(residueOps(pool, ms), cleanLifecycles(pool, ms, 200)...)
	h := c.hs[0]
	for i := 0; i < len(ops); i += 10 {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, ops[i:min(i+10, len(ops))]...))
	}
	spilled := h.stage.Counters().KVSpilled.Load()
	if spilled == 0 {
		t.Fatal("nothing spilled: the test shows nothing")
	}
	for k := 1; k <= 8; k++ {
		at := base.Add(time.Duration(k) * 2 * time.Second)
		var id [16]byte
		id[0], id[1] = 0xee, byte(k)
		c.feed(0, inSpans, nil, spansMsg(requestSpan(id, "other", at, at)))
		if k == 3 {
			if left := h.stage.Counters().KVBuffered.Load(); left == 0 || left == int64(len(ops)) {
				t.Fatalf("%d of %d events held before the restart: want some released, some not", left, len(ops))
			}
			if err := h.Restart(); err != nil { // drops what was read ahead since the checkpoint
				t.Fatal(err)
			}
		}
		c.checkpoint(600 * time.Millisecond)
	}
	if shed := h.stage.Counters().KVShed.Load(); shed != 0 {
		t.Fatalf("%d places shed: the share should hold them", shed)
	}
	incs := c.incidents()
	ids := map[string]bool{}
	for _, inc := range incs {
		ids[inc.Id] = true
	}
	if len(ids) != 1 || incs[len(incs)-1].Root.GetRequestId() != "r1" {
		t.Fatalf("%d incidents, want the one residue of r1: %v", len(ids), incs)
	}
	if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
		t.Errorf("%d events still held", n)
	}
	if n := h.stage.KVCounters().KVBufferBytes.Load(); n != 0 {
		t.Errorf("KV buffer reports %d bytes with nothing held", n)
	}
	if n := h.stage.KVCounters().Events.Load(); n < int64(len(ops)) {
		t.Errorf("detector saw %d events, %d were fed", n, len(ops))
	}
	t.Logf("%d of %d events spilled", spilled, len(ops))
}

// TestKVEventsForwardedInOneRecordPerTask: the KV events of one input
// record that belong to other tasks' detectors go out as one record per
// task, in input order, and every one of them reaches its task's buffer.
func TestKVEventsForwardedInOneRecordPerTask(t *testing.T) {
	c := newCluster(t, 3, nil)
	pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
	ms := func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) }
	a := kvlog.Where{Host: hostOn(1, 3), GPUUUID: "GPU-a", Instance: "vllm-a"}
	b := kvlog.Where{Host: hostOn(2, 3), GPUUUID: "GPU-b", Instance: "vllm-b"}
	opsA, opsB := cleanLifecycles(pool, ms, 2), cleanLifecycles(pool, ms, 3)
	for _, ops := range [][]kvlog.Op{opsA, opsB} {
		for i := range ops {
			ops[i].Layers = pool.Layers
		}
	}
	// One logs message with both servers' resources (concatenated
	// encodings of a message merge their repeated fields).
	msg := append(kvlog.Marshal(a, opsA...), kvlog.Marshal(b, opsB...)...)
	h0 := c.hs[0]
	h0.feed(inLogs, nil, msg)
	per := map[int32]int{}
	for _, r := range h0.out("braid.kvgraph-repartition") {
		per[r.Partition]++
		n, times := 0, []int64(nil)
		if err := readMembers(r.Value, func(m *member) error {
			n++
			times = append(times, m.time)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := map[int32][]kvlog.Op{1: opsA, 2: opsB}[r.Partition]
		if n != len(want) {
			t.Errorf("record to task %d holds %d events, want %d", r.Partition, n, len(want))
		}
		for i := range min(n, len(want)) {
			if times[i] != want[i].Time {
				t.Errorf("task %d: event %d at %d, want %d (input order)", r.Partition, i, times[i], want[i].Time)
				break
			}
		}
	}
	if per[1] != 1 || per[2] != 1 || len(per) != 2 {
		t.Errorf("records per task %v, want one to task 1 and one to task 2", per)
	}
	c.drain()
	for q, want := range map[int]int{1: len(opsA), 2: len(opsB)} {
		if got := c.hs[q].stage.Counters().KVBuffered.Load(); got != int64(want) {
			t.Errorf("task %d buffered %d KV events, want %d", q, got, want)
		}
	}
}

// TestKVLiveHoldRequestsACheckpoint: live, a held KV event asks for the
// checkpoint whose markers release it — LiveHold after it was read — so
// detection does not wait for the regular schedule; behind its inputs the
// task asks for none (the watermark releases events there).
func TestKVLiveHoldRequestsACheckpoint(t *testing.T) {
	pool, ms, where := kvFixture()
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("live=%v", live), func(t *testing.T) {
			c := newCluster(t, 1, nil)
			h := c.hs[0]
			hold := h.stage.Config().KVGraph.LiveHold + liveHoldSlack
			if live {
				h.MarkCaughtUp()
			}
			c.checkpoint(time.Second) // every task has sent markers: the horizon exists
			if r := h.Requested(); r != 0 {
				t.Fatalf("requested a checkpoint at %d before any KV event", r)
			}
			c.feed(0, inLogs, nil, kvlog.Marshal(where, residueOps(pool, ms)...))
			read := h.now.UnixNano()
			if live {
				// The fetch reached the partition's end (the engine
				// judges that before the watermark's turn).
				h.MarkCaughtUp()
			}
			if err := h.Advance(); err != nil {
				t.Fatal(err)
			}
			if n := h.stage.Counters().KVBuffered.Load(); n == 0 {
				t.Fatal("no KV event held: the test shows nothing")
			}
			if !live {
				if r := h.Requested(); r != 0 {
					t.Fatalf("behind its inputs, requested a checkpoint at %d", r)
				}
				return
			}
			if r, want := h.Requested(), read+int64(hold); r != want {
				t.Fatalf("requested a checkpoint at %d, want LiveHold and its slack after the read, %d", r, want)
			}
			// LiveHold passes without a checkpoint: the events wait, the
			// request stands.
			h.now = h.now.Add(hold)
			h.SetNow(h.now)
			if err := h.Advance(); err != nil {
				t.Fatal(err)
			}
			if len(c.incidents()) != 0 || h.Requested() == 0 {
				t.Fatalf("before the requested checkpoint: %d incidents, request %d; want none and the request", len(c.incidents()), h.Requested())
			}
			// The requested checkpoint: its markers release the events.
			c.checkpoint(0)
			if len(c.incidents()) == 0 {
				t.Fatalf("no incident after the requested checkpoint; %d events held", h.stage.Counters().KVBuffered.Load())
			}
			if r := h.Requested(); r != 0 {
				t.Fatalf("request %d left after the checkpoint met it and nothing is held", r)
			}
		})
	}
}

// TestKVBufferShedKeepsOrder: events arriving far out of order through a
// buffer whose share holds a fraction of their places (they leave memory
// for state and come back in key order, across a restart too) reach the
// detector as through an unbounded buffer: the same incidents and edges,
// every event once, nothing held or counted afterwards.
func TestKVBufferShedKeepsOrder(t *testing.T) {
	pool, ms, where := kvFixture()
	ops := append(residueOps(pool, ms), cleanLifecycles(pool, ms, 300)...)
	var chunks [][]kvlog.Op
	for i := 0; i < len(ops); i += 10 {
		chunks = append(chunks, ops[i:min(i+10, len(ops))])
	}
	rand.New(rand.NewPCG(85, 86)).Shuffle(len(chunks), func(i, j int) { chunks[i], chunks[j] = chunks[j], chunks[i] })
	type outcome struct {
		incidents     []string
		edges, events int64
	}
	run := func(limit int64) outcome {
		c := newCluster(t, 1, func(cfg *Config) {
			if limit > 0 {
				cfg.KVGraph.MaxKVBufferBytes = limit
			}
		})
		h := c.hs[0]
		c.feedKVRestartingHalfway(where, chunks, limit)
		if limit > 0 && h.stage.Counters().KVShed.Load() == 0 {
			t.Fatal("no place left memory: the test shows nothing")
		}
		c.advance(8)
		kc := h.stage.KVCounters()
		if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
			t.Errorf("limit %d: %d events still held", limit, n)
		}
		if n := kc.KVBufferBytes.Load(); n != 0 {
			t.Errorf("limit %d: KV buffer reports %d bytes with nothing held", limit, n)
		}
		o := outcome{edges: kc.Edges.Load(), events: kc.Events.Load()}
		seen := map[string]bool{}
		for _, inc := range c.incidents() {
			if seen[inc.Id] {
				continue // a revision
			}
			seen[inc.Id] = true
			var pol []string
			for _, r := range inc.Polluted {
				pol = append(pol, r.RequestId)
			}
			o.incidents = append(o.incidents, inc.Root.GetRequestId()+"→"+strings.Join(pol, ","))
		}
		slices.Sort(o.incidents)
		t.Logf("limit %d: %d shed, %d spilled, %d incidents %v, %d edges", limit, h.stage.Counters().KVShed.Load(),
			h.stage.Counters().KVSpilled.Load(), len(o.incidents), o.incidents, o.edges)
		return o
	}
	want := run(0)
	if want.events != int64(len(ops)) {
		t.Fatalf("unbounded: the detector handled %d KV ops, want each of the %d once", want.events, len(ops))
	}
	if len(want.incidents) != 1 || want.incidents[0] != "r1→r2" {
		t.Fatalf("unbounded: incidents %v, want the one residue r1→r2", want.incidents)
	}
	for _, limit := range []int64{4 << 10, 16 << 10} {
		if got := run(limit); !reflect.DeepEqual(got, want) {
			t.Errorf("limit %d: %+v, want as unbounded %+v", limit, got, want)
		}
	}
}

// TestKVLiveOutOfOrderReadsAlone: live, LiveHold releases events before the
// watermark passes them, and events that arrive afterwards with earlier
// times are held behind the tombstones of those released; spilled, they
// are read back alone (a point read), not by a scan over those
// tombstones, and each reaches the detector once.
func TestKVLiveOutOfOrderReadsAlone(t *testing.T) {
	const limit = 8 << 10
	c := newCluster(t, 1, func(cfg *Config) { cfg.KVGraph.MaxKVBufferBytes = limit })
	pool, ms, where := kvFixture()
	ops := cleanLifecycles(pool, ms, 200)
	later, earlier := ops[len(ops)/2:], ops[:len(ops)/2]
	h := c.hs[0]
	release := func() {
		h.MarkCaughtUp() // the fetch reached the partition's end
		for range 3 {
			c.checkpoint(time.Second)
		}
	}
	for i := 0; i < len(later); i += 10 {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, later[i:min(i+10, len(later))]...))
	}
	release()
	if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
		t.Fatalf("%d events held after LiveHold passed: the test shows nothing", n)
	}
	for i := 0; i < len(earlier); i += 10 {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, earlier[i:min(i+10, len(earlier))]...))
	}
	if wm := h.Watermark(); wm >= earlier[0].Time {
		t.Fatalf("watermark %d passed the earlier events: the test shows nothing", wm)
	}
	release()
	kc := h.stage.KVCounters()
	if n := h.stage.Counters().KVPointReads.Load(); n == 0 {
		t.Fatal("no event read back alone: the test shows nothing")
	}
	if got := kc.Events.Load(); got != int64(len(ops)) {
		t.Fatalf("the detector handled %d KV ops, want each of the %d once", got, len(ops))
	}
	if n := h.stage.Counters().KVBuffered.Load(); n != 0 {
		t.Errorf("%d events still held", n)
	}
	if n := kc.KVBufferBytes.Load(); n != 0 {
		t.Errorf("KV buffer reports %d bytes with nothing held", n)
	}
	t.Logf("%d events read back alone, %d spilled", h.stage.Counters().KVPointReads.Load(), h.stage.Counters().KVSpilled.Load())
}

// feedKVRestartingHalfway feeds the chunks of KV ops to task 0 in turn,
// checking after each that the KV buffer holds at most limit bytes (0: no
// check), with a checkpoint and a restart after half of them.
func (c *cluster) feedKVRestartingHalfway(where kvlog.Where, chunks [][]kvlog.Op, limit int64) {
	c.t.Helper()
	h := c.hs[0]
	for i, ch := range chunks {
		c.feed(0, inLogs, nil, kvlog.Marshal(where, ch...))
		if n := h.stage.KVCounters().KVBufferBytes.Load(); limit > 0 && n > limit {
			c.t.Fatalf("KV buffer holds %d bytes > %d", n, limit)
		}
		if i == len(chunks)/2 {
			if err := h.Checkpoint(); err != nil {
				c.t.Fatal(err)
			}
			if err := h.Restart(); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// kvFixture is the KV tests' pool (2 layers of 8 blocks of 1 KiB), event
// times in milliseconds from base, and one GPU.
func kvFixture() (kvlog.Pool, func(int64) int64, kvlog.Where) {
	return kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024},
		func(n int64) int64 { return base.UnixNano() + n*int64(time.Millisecond) },
		kvlog.Where{Host: "node-a", GPUUUID: "GPU-0", GPUIndex: 0}
}

// TestKVBacklogTagsTheVictimBeforeItsTraceCloses: read as a backlog, the
// watermark jumps far past 60,000 KV events at once, which the stage
// releases a slice at a time. The victim's trace must not close by that
// watermark before the incident its read shows has tagged it: the KV
// stage holds the watermark its task's markers on the repartition topic
// carry (what the fuse stages of other tasks close traces by) at its
// earliest event held, and the watermark its own fuse stage sees. The
// victim's trace is emitted once, with FLAG_POLLUTED; no tag is late.
func TestKVBacklogTagsTheVictimBeforeItsTraceCloses(t *testing.T) {
	for _, n := range []int32{1, 3} {
		t.Run(strconv.Itoa(int(n))+" tasks", func(t *testing.T) {
			c := newCluster(t, n, nil)
			pool := kvlog.Pool{Layers: 2, Blocks: 8, BlockBytes: 1024}
			where := kvlog.Where{Host: hostOn(0, n), GPUUUID: "GPU-0", GPUIndex: 0, Instance: "vllm-0"}
			ms := func(x int64) int64 { return base.UnixNano() + x*int64(time.Millisecond) }
			var victim [16]byte
			victim[0] = 0xab
			for otlp.HashPartition(otlp.AppendTraceIDHex(nil, victim), n) != n-1 {
				victim[15]++ // on the last task: another than the host's when n > 1
			}
			c.advance(2) // every task has every marker
			// 60,000 clean events, then r2 reads what r1 left in block 1.
			const lifecycles = 12000
			start := int64(5000)
			ops := cleanLifecycles(pool, func(x int64) int64 { return ms(start + x) }, lifecycles)
			at := func(x int64) int64 { return ms(start + 4*lifecycles + 100 + x) }
			ops = append(ops, kvlog.Op{Time: at(0), Op: "alloc", Request: "r1", Block: 1})
			for l := range pool.Layers {
				ops = append(ops, pool.Write(at(1), "r1", 1, l, 0, pool.BlockBytes))
			}
			ops = append(ops, kvlog.Op{Time: at(3), Op: "free", Request: "r1", Block: 1},
				kvlog.Op{Time: at(5), Op: "alloc", Request: "r2", Block: 1, TraceID: victim},
				pool.Read(at(7), "r2", 1, 1, 0, 1024))
			for i := range ops {
				ops[i].Layers = pool.Layers
			}
			for i := 0; i < len(ops); i += 1000 {
				c.feed(0, inLogs, nil, kvlog.Marshal(where, ops[i:min(i+1000, len(ops))]...))
			}
			c.feed(int(n-1), inSpans, nil, spansMsg(requestSpan(victim, "r2", time.Unix(0, at(5)), time.Unix(0, at(8)))))
			// Then the backlog's next input, minutes of event time later,
			// on every task: the watermark passes the victim's trace's
			// close (idle gap, allowed lateness) by far.
			jump := func(k int64) {
				next := base.Add(time.Duration(k) * 5 * time.Minute)
				for p := range c.hs {
					var id [16]byte
					id[0], id[1], id[2] = 0xee, byte(k), byte(p)
					c.feed(p, inSpans, nil, spansMsg(requestSpan(id, "other", next, next)))
					c.feed(p, inLogs, nil, logsMsg(engineLog(next, "tick")))
				}
			}
			jump(1)
			// The host's task, a slice of its events released: its
			// markers on the repartition topic hold at its earliest.
			h := c.hs[0]
			if h.stage.Counters().KVBuffered.Load() == 0 {
				t.Fatal("every KV event released at once: no backlog to hold")
			}
			h.Out = nil
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			for _, r := range h.Out {
				if _, wm, ok := engine.Marker(r); ok && r.Topic == "braid.fuse-repartition" && wm > at(7) {
					t.Errorf("repartition marker at %v while the victim's read (%v) is held", time.Unix(0, wm), time.Unix(0, at(7)))
				}
			}
			c.drain()
			// Checkpoints while the host's task works through its
			// events, a slice per call (no Advance loop): the other
			// tasks' markers pass the victim's trace's close meanwhile.
			for k := int64(2); k <= 4; k++ {
				jump(k)
				for _, h := range c.hs {
					h.now = h.now.Add(600 * time.Millisecond)
					h.SetNow(h.now)
					if err := h.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				c.drain()
			}
			for k := int64(5); k <= 7; k++ {
				jump(k)
				c.checkpoint(600 * time.Millisecond)
			}
			if len(c.incidents()) == 0 {
				t.Fatal("no incident")
			}
			var late, tags int64
			for _, h := range c.hs {
				late += h.stage.Counters().IncidentTagsLate.Load()
				tags += h.stage.Counters().IncidentTags.Load()
			}
			ft := c.fused()[string(otlp.AppendTraceIDHex(nil, victim))]
			if ft == nil {
				t.Fatal("victim's trace not emitted")
			}
			if !hasFlag(ft, braidpb.Flag_FLAG_POLLUTED) || ft.Revision != 0 || late != 0 || tags == 0 {
				t.Errorf("victim's trace revision %d flags %v; %d tags, %d late: want revision 0 with FLAG_POLLUTED, none late", ft.Revision, ft.Flags, tags, late)
			}
		})
	}
}
