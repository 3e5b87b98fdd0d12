package engine

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

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
	store, err := state.Open(state.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	topo := Topology{Name: "x", Partitions: 2, NewProcessor: func(*Task) (Processor, error) { return observer{}, nil },
		Inputs: []Input{{Topic: "src"}, {Topic: "a", Internal: true}, {Topic: "b", Internal: true, From: []string{"a"}}}}
	now := time.Unix(1000, 0)
	h, err := NewHarness(Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Minute}, topo, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
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
