package kvgraph

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
	"github.com/braidlabs/braid/state"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func at(ms int64) int64 { return t0 + ms*int64(time.Millisecond) }

var (
	pool = kvlog.Pool{Layers: 4, Blocks: 16, BlockBytes: 1024}
	gpu0 = kvlog.Where{Host: "node-a", GPUUUID: "GPU-0", GPUIndex: 0, Instance: "vllm-0"}
	gpu1 = kvlog.Where{Host: "node-a", GPUUUID: "GPU-1", GPUIndex: 1, Instance: "vllm-1"}
)

type harness struct {
	*engine.Harness
	t   testing.TB
	cfg Config
	off int64
	now time.Time
}

func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	return openHarness(t, state.Options{InMemory: true}, mod)
}

// newDiskHarness is newHarness with its keyspace on disk: for the tests
// that measure the Go heap, which an in-memory keyspace's files would be
// part of (as much as Pebble's flushes and compactions leave at the time).
func newDiskHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	return openHarness(t, state.Options{Dir: t.TempDir()}, mod)
}

func openHarness(t testing.TB, opts state.Options, mod func(*Config)) *harness {
	t.Helper()
	cfg := Config{IncidentWindow: 10 * time.Second, BlockTTL: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	cfg.EnsureDefaults()
	cfg.Counters = &Counters{}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Small caches: without cgo Pebble keeps them on the Go heap, which
	// the memory tests measure for the detector's state.
	opts.CacheBytes, opts.MemTableBytes = 1<<20, 4<<20
	store, err := state.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	now := time.Unix(1000, 0)
	h, err := engine.NewHarness(engine.Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Hour}, Standalone(cfg, []string{"kv"}, 1, ""), 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{Harness: h, t: t, cfg: cfg, now: now}
}

// feed sends ops of w as one message.
func (h *harness) feed(w kvlog.Where, ops ...kvlog.Op) {
	h.t.Helper()
	h.now = h.now.Add(time.Millisecond)
	h.SetNow(h.now)
	if err := h.Process(0, &kgo.Record{Value: kvlog.Marshal(w, ops...), Offset: h.off}); err != nil {
		h.t.Fatal(err)
	}
	h.off++
}

func (h *harness) edges() []*braidpb.PollutionEdge {
	h.t.Helper()
	var es []*braidpb.PollutionEdge
	for _, r := range h.Out {
		if r.Topic != h.cfg.PollutionTopic {
			continue
		}
		var e braidpb.PollutionEdge
		if err := proto.Unmarshal(r.Value, &e); err != nil {
			h.t.Fatal(err)
		}
		if string(r.Key) != e.Source {
			h.t.Fatalf("edge key %q, source %q", r.Key, e.Source)
		}
		es = append(es, &e)
	}
	return es
}

// incidents returns the latest revision of each incident, and all of them.
func (h *harness) incidents() (map[string]*braidpb.Incident, []*braidpb.Incident) {
	h.t.Helper()
	latest := map[string]*braidpb.Incident{}
	var all []*braidpb.Incident
	for _, r := range h.Out {
		if r.Topic != h.cfg.IncidentsTopic {
			continue
		}
		inc := &braidpb.Incident{}
		if err := proto.Unmarshal(r.Value, inc); err != nil {
			h.t.Fatal(err)
		}
		if string(r.Key) != inc.Id {
			h.t.Fatalf("incident key %q, id %q", r.Key, inc.Id)
		}
		all = append(all, inc)
		if old := latest[inc.Id]; old == nil || inc.Revision > old.Revision {
			latest[inc.Id] = inc
		} else if inc.Revision == old.Revision {
			h.t.Fatalf("incident %s revision %d emitted twice", inc.Id, inc.Revision)
		}
	}
	return latest, all
}

func (h *harness) only() *braidpb.Incident {
	h.t.Helper()
	latest, _ := h.incidents()
	if len(latest) != 1 {
		h.t.Fatalf("%d incidents, want 1: %v", len(latest), latest)
	}
	for _, inc := range latest {
		return inc
	}
	return nil
}

func polluted(inc *braidpb.Incident) []string {
	var ids []string
	for _, p := range inc.Polluted {
		ids = append(ids, p.RequestId)
	}
	slices.Sort(ids)
	return ids
}

func alloc(ms int64, req string, b int64) kvlog.Op {
	return kvlog.Op{Time: at(ms), Op: "alloc", Request: req, Block: b}
}

func allocHit(ms int64, req string, b int64, hash uint64) kvlog.Op {
	op := alloc(ms, req, b)
	op.Hash = hash
	return op
}

func free(ms int64, req string, b int64) kvlog.Op {
	return kvlog.Op{Time: at(ms), Op: "free", Request: req, Block: b}
}

func zero(ms int64, b int64) kvlog.Op { return kvlog.Op{Time: at(ms), Op: "zero", Block: b} }

// fill writes every layer of block b in full.
func fill(ms int64, req string, b int64, hash uint64) []kvlog.Op {
	var ops []kvlog.Op
	for l := int64(0); l < pool.Layers; l++ {
		op := pool.Write(at(ms), req, b, l, 0, pool.BlockBytes)
		op.Hash = hash
		ops = append(ops, op)
	}
	return ops
}

// readAll reads every layer of block b in full.
func readAll(ms int64, req string, b int64) []kvlog.Op {
	var ops []kvlog.Op
	for l := int64(0); l < pool.Layers; l++ {
		ops = append(ops, pool.Read(at(ms), req, b, l, 0, pool.BlockBytes))
	}
	return ops
}

func seq(parts ...any) []kvlog.Op {
	var ops []kvlog.Op
	for _, p := range parts {
		switch v := p.(type) {
		case kvlog.Op:
			ops = append(ops, v)
		case []kvlog.Op:
			ops = append(ops, v...)
		}
	}
	return ops
}
