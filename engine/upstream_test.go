package engine

import (
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// upstreamHarness opens task 0 of topo (out-of-orderness 1s, idleness 1m)
// on a store of its own, both closed when the test ends.
func upstreamHarness(t *testing.T, topo Topology, now time.Time) *Harness {
	t.Helper()
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h, err := NewHarness(Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Minute}, topo, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// abTopology: a source and internal inputs a and b (From a).
func abTopology(partitions int32) Topology {
	return Topology{Name: "x", Partitions: partitions, NewProcessor: func(*Task) (Processor, error) { return observer{}, nil },
		Inputs: []Input{{Topic: "src"}, {Topic: "a", Internal: true}, {Topic: "b", Internal: true, From: []string{"a"}}}}
}

type observer struct{}

// Process observes the record's timestamp as its event time.
func (observer) Process(t *Task, r *kgo.Record, input int) error {
	t.Observe(input, r.Timestamp.UnixNano())
	return nil
}

// TestMarkersCoverWhatMayBeForwarded: on an internal topic fed only by
// sources the marker is the source watermark; on one that held records may
// be forwarded to (From), it is held back by that input's upstream tasks.
func TestMarkersCoverWhatMayBeForwarded(t *testing.T) {
	if _, err := New(Config{}, Topology{Name: "x", Partitions: 1, NewProcessor: func(*Task) (Processor, error) { return observer{}, nil },
		Inputs: []Input{{Topic: "src"}, {Topic: "b", Internal: true, From: []string{"a"}}, {Topic: "a", Internal: true}}}); err == nil {
		t.Fatal("From naming a later input accepted")
	}
	h := upstreamHarness(t, abTopology(2), time.Unix(1000, 0))
	if err := h.Process(0, &kgo.Record{Timestamp: time.Unix(0, 50e9)}); err != nil {
		t.Fatal(err)
	}
	// Upstream tasks 0 and 1 report watermarks 10s and 20s on "a".
	for up, wm := range []int64{10e9, 20e9} {
		if err := h.Process(1, &kgo.Record{Headers: []kgo.RecordHeader{{Key: markerHeader, Value: encodeMarker(int32(up), wm, false)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range h.Out {
		if len(r.Headers) == 1 && r.Headers[0].Key == markerHeader {
			_, wm, _, _ := decodeMarker(r.Headers[0].Value)
			got[r.Topic] = wm
		}
	}
	if got["a"] != 49e9 || got["b"] != 10e9 {
		t.Errorf("markers a=%d b=%d, want the source watermark 49s on a and 10s (a's slowest upstream) on b", got["a"], got["b"])
	}
}

// wmRecorder observes record timestamps as event times and remembers the
// watermarks its timers were fired with.
type wmRecorder struct{ fired []int64 }

func (p *wmRecorder) Process(t *Task, r *kgo.Record, input int) error {
	t.Observe(input, r.Timestamp.UnixNano())
	return nil
}

func (p *wmRecorder) OnWatermark(t *Task, wm int64) error {
	p.fired = append(p.fired, wm)
	return nil
}

func marker(up int32, wm int64) *kgo.Record {
	return &kgo.Record{Headers: []kgo.RecordHeader{{Key: markerHeader, Value: encodeMarker(up, wm, false)}}}
}

func markersOut(h *Harness) map[string]int64 {
	got := map[string]int64{}
	for _, r := range h.Out {
		if len(r.Headers) == 1 && r.Headers[0].Key == markerHeader {
			_, wm, _, _ := decodeMarker(r.Headers[0].Value)
			got[r.Topic] = wm
		}
	}
	return got
}

// TestAsideInputDoesNotHoldTimers: the markers of an Aside input hold the
// watermark that covers every input (WatermarkAll), not the one timers
// fire on; what the task sends on the Aside topic still covers its From.
func TestAsideInputDoesNotHoldTimers(t *testing.T) {
	rec := &wmRecorder{}
	mk := func(*Task) (Processor, error) { return rec, nil }
	if _, err := New(Config{}, Topology{Name: "x", Partitions: 1, NewProcessor: mk,
		Inputs: []Input{{Topic: "src", Aside: true}}}); err == nil {
		t.Fatal("Aside on a source input accepted")
	}
	h := upstreamHarness(t, Topology{Name: "x", Partitions: 2, NewProcessor: mk,
		Inputs: []Input{{Topic: "src"}, {Topic: "a", Internal: true}, {Topic: "z", Internal: true, Aside: true, From: []string{"a"}}}}, time.Unix(1000, 0))
	if err := h.Process(0, &kgo.Record{Timestamp: time.Unix(50, 0)}); err != nil {
		t.Fatal(err)
	}
	for up := range int32(2) {
		if err := h.Process(1, marker(up, 40e9)); err != nil {
			t.Fatal(err)
		}
		if err := h.Process(2, marker(up, 10e9+int64(up)*5e9)); err != nil {
			t.Fatal(err)
		}
	}
	tk := h.Task()
	if wm, all := tk.Watermark(), tk.WatermarkAll(); wm != 40e9 || all != 10e9 {
		t.Errorf("Watermark %d, WatermarkAll %d; want 40s (source 49s, a's upstreams 40s) and 10s (z's slowest upstream)", wm, all)
	}
	if n := len(rec.fired); n == 0 || rec.fired[n-1] != 40e9 {
		t.Errorf("timers fired at %v, want last at 40s", rec.fired)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := markersOut(h); got["a"] != 49e9 || got["z"] != 40e9 {
		t.Errorf("markers a=%d z=%d, want 49s (sources) and 40s (a's upstreams: z's From)", got["a"], got["z"])
	}
	// Restarted from the checkpoint: the same watermarks.
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if wm, all := h.Task().Watermark(), h.Task().WatermarkAll(); wm != 40e9 || all != 10e9 {
		t.Errorf("after a restart: Watermark %d, WatermarkAll %d; want 40s and 10s", wm, all)
	}
}

// TestFollowUpMarkersCarryTheSourcesWatermark: every checkpoint's
// markers, a follow-up's as a regular one's, carry the sources' watermark
// of its own moment (bounded by the upstream markers read), however far the
// sources have moved since the last regular checkpoint.
func TestFollowUpMarkersCarryTheSourcesWatermark(t *testing.T) {
	h := upstreamHarness(t, abTopology(1), time.Unix(1000, 0))
	step := func(ts, upstream int64) map[string]int64 {
		t.Helper()
		h.Out = nil
		if err := h.Process(0, &kgo.Record{Timestamp: time.Unix(ts, 0)}); err != nil {
			t.Fatal(err)
		}
		if err := h.Process(1, marker(0, upstream*1e9)); err != nil {
			t.Fatal(err)
		}
		if err := h.t.prepare(); err != nil {
			t.Fatal(err)
		}
		if err := h.t.commit(); err != nil {
			t.Fatal(err)
		}
		return markersOut(h)
	}
	if got := step(50, 50); got["a"] != 49e9 || got["b"] != 49e9 {
		t.Errorf("regular: a=%d b=%d, want 49s", got["a"], got["b"])
	}
	// A follow-up: the sources moved on, the upstream marker read is
	// still the regular checkpoint's.
	if got := step(60, 50); got["a"] != 59e9 || got["b"] != 50e9 {
		t.Errorf("follow-up: a=%d b=%d, want the sources' 59s on a and b held by a's marker at 50s", got["a"], got["b"])
	}
	if got := step(70, 70); got["a"] != 69e9 || got["b"] != 69e9 {
		t.Errorf("next: a=%d b=%d, want 69s", got["a"], got["b"])
	}
}

// TestFollowUpMarkersOfIdleSources: a task whose sources were idle at the
// regular checkpoint has no source watermark to hold its follow-ups'
// markers to; they carry what its upstream tasks' markers allow.
func TestFollowUpMarkersOfIdleSources(t *testing.T) {
	start := time.Unix(1000, 0)
	h := upstreamHarness(t, abTopology(1), start)
	h.SetNow(start.Add(2 * time.Minute)) // the source, never seen, is idle
	step := func(wm int64) int64 {
		t.Helper()
		h.Out = nil
		if err := h.Process(1, marker(0, wm)); err != nil {
			t.Fatal(err)
		}
		if err := h.t.prepare(); err != nil {
			t.Fatal(err)
		}
		if err := h.t.commit(); err != nil {
			t.Fatal(err)
		}
		return markersOut(h)["b"]
	}
	if got := step(30e9); got != 30e9 {
		t.Errorf("regular: b=%d, want a's 30s", got)
	}
	if got := step(40e9); got != 40e9 {
		t.Errorf("follow-up: b=%d, want a's 40s", got)
	}
}

// holding observes record timestamps as event times and holds its
// markers on input 2 ("b") at held (WatermarkHolder).
type holding struct{ held int64 }

func (p *holding) Process(t *Task, r *kgo.Record, input int) error {
	t.Observe(input, r.Timestamp.UnixNano())
	return nil
}

func (p *holding) HeldWatermark(input int) int64 {
	if input == 2 {
		return p.held
	}
	return math.MaxInt64
}

// TestHeldWatermarkCapsMarkers: a processor that may still forward work
// to a topic timed behind the watermark holds the markers it sends on that
// topic at that time — only there, and only below the watermark it would
// send anyway; released, the markers follow the watermark again. The
// watermark upstream of the held topic is not held.
func TestHeldWatermarkCapsMarkers(t *testing.T) {
	p := &holding{held: 30e9}
	topo := abTopology(1)
	topo.NewProcessor = func(*Task) (Processor, error) { return p, nil }
	h := upstreamHarness(t, topo, time.Unix(1000, 0))
	if err := h.Process(0, &kgo.Record{Timestamp: time.Unix(0, 50e9)}); err != nil {
		t.Fatal(err)
	}
	if err := h.Process(1, marker(0, 40e9)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		held  int64
		wantB int64 // From a: 40s
	}{
		{30e9, 30e9},
		{45e9, 40e9},
		{math.MaxInt64, 40e9},
	} {
		p.held = c.held
		h.Out = h.Out[:0]
		if err := h.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if got := markersOut(h); got["a"] != 49e9 || got["b"] != c.wantB {
			t.Errorf("held %d: markers a=%d b=%d, want 49s (sources) and %d", c.held, got["a"], got["b"], c.wantB)
		}
		if wm := h.Task().UpstreamWatermark(2); wm != 40e9 {
			t.Errorf("held %d: upstream watermark of b %d, want 40s", c.held, wm)
		}
	}
	if wm := h.Task().UpstreamWatermark(0); wm != math.MinInt64 {
		t.Errorf("upstream watermark of a source %d, want MinTime", wm)
	}
}

// TestMarkersCarryTheReadHorizon: a task's markers carry the time before
// which it has read everything its sources held — none before it has
// read them to their end, the checkpoint's time while caught up, the
// moment it last was while it reads a backlog — and MarkerHorizon is the
// earliest over the upstream tasks' markers read (an older marker without
// one: its timestamp).
func TestMarkersCarryTheReadHorizon(t *testing.T) {
	start := time.Unix(1000, 0)
	h := upstreamHarness(t, abTopology(2), start)
	horizons := func() []int64 {
		var hs []int64
		for _, r := range h.Out {
			if _, _, ok := Marker(r); ok && r.Topic == "a" {
				v, ok := decodeHorizon(r.Key)
				if !ok {
					t.Fatalf("marker without a read horizon: key %x", r.Key)
				}
				hs = append(hs, v)
			}
		}
		h.Out = nil
		return hs
	}
	at := func(d time.Duration) {
		h.SetNow(start.Add(d))
		if err := h.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	at(time.Second)
	if hs := horizons(); len(hs) != 2 || hs[0] != math.MinInt64 || hs[1] != math.MinInt64 {
		t.Fatalf("never caught up: horizons %v, want none (MinInt64) to each partition", hs)
	}
	h.MarkCaughtUp()
	at(2 * time.Second)
	if hs := horizons(); hs[0] != start.Add(2*time.Second).UnixNano() {
		t.Fatalf("caught up: horizon %d, want the checkpoint's time", hs[0])
	}
	// A source record: behind again (a backlog) until the brokers say
	// otherwise; the horizon stays at the last time it was caught up.
	h.SetNow(start.Add(3 * time.Second))
	h.MarkCaughtUp()
	if err := h.Process(0, &kgo.Record{Timestamp: time.Unix(0, 50e9), Offset: 0}); err != nil {
		t.Fatal(err)
	}
	at(9 * time.Second)
	if hs := horizons(); hs[0] != start.Add(3*time.Second).UnixNano() {
		t.Fatalf("reading a backlog: horizon %d, want when it was last caught up, %d", hs[0], start.Add(3*time.Second).UnixNano())
	}

	// Reading markers: upstream 0's says 7s, upstream 1's is an older
	// version's, without a horizon: its timestamp, 8s, stands.
	m0 := marker(0, 1e9)
	m0.Timestamp, m0.Key = start.Add(9*time.Second), encodeHorizon(start.Add(7*time.Second).UnixNano())
	m1 := marker(1, 1e9)
	m1.Timestamp = start.Add(8 * time.Second)
	for _, m := range []*kgo.Record{m0, m1} {
		if err := h.Process(1, m); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := h.t.MarkerHorizon(1), start.Add(7*time.Second).UnixNano(); got != want {
		t.Errorf("MarkerHorizon %d, want upstream 0's read horizon %d", got, want)
	}
}
