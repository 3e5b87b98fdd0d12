package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
	"github.com/braidlabs/braid/windows"
)

// eventObserver observes the event time in the record's value (decimal
// unix ns) on sources.
type eventObserver struct{}

func (eventObserver) Process(t *Task, r *kgo.Record, input int) error {
	ts, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		return err
	}
	t.Observe(input, ts)
	return nil
}

func ev(recordTime time.Time, eventTime int64) *kgo.Record {
	return &kgo.Record{Timestamp: recordTime, Value: strconv.AppendInt(nil, eventTime, 10)}
}

const year = int64(365 * 24 * time.Hour)

func clockHarness(t *testing.T, store *state.Store, skew time.Duration, now time.Time, internal bool) *Harness {
	t.Helper()
	inputs := []Input{{Topic: "src"}}
	if internal {
		inputs = append(inputs, Input{Topic: "mid", Internal: true})
	}
	topo := Topology{Name: "clock", Partitions: 1, Inputs: inputs, Changelog: "clock-changelog",
		NewProcessor: func(*Task) (Processor, error) { return eventObserver{}, nil }}
	h, err := NewHarness(Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Minute, MaxClockSkew: skew}, topo, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestEventTimeClampedByRecordTime(t *testing.T) {
	rec := time.Unix(1_800_000_000, 0)
	r := rec.UnixNano()
	const skew = 10 * time.Minute
	for _, c := range []struct {
		name string
		recs []*kgo.Record
		want int64 // watermark after processing, before idleness
	}{
		{"within the skew", []*kgo.Record{ev(rec, r+int64(5*time.Minute))}, r + int64(5*time.Minute) - int64(time.Second)},
		{"a year ahead: clamped to record time + skew", []*kgo.Record{ev(rec, r+year)}, r + int64(skew) - int64(time.Second)},
		{"the maximum int64", []*kgo.Record{ev(rec, windows.MaxTime)}, r + int64(skew) - int64(time.Second)},
		{"no record timestamp: no bound", []*kgo.Record{{Value: []byte(strconv.FormatInt(r+year, 10))}}, r + year - int64(time.Second)},
		{"behind the record: unchanged", []*kgo.Record{ev(rec, r-year)}, r - year - int64(time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, err := state.Open(state.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			h := clockHarness(t, store, skew, time.Unix(1000, 0), false)
			defer h.Close()
			if err := h.Process(0, c.recs...); err != nil {
				t.Fatal(err)
			}
			if got := h.Watermark(); got != c.want {
				t.Fatalf("watermark %d, want %d (%+v)", got, c.want, time.Duration(got-c.want))
			}
		})
	}
}

// TestAllIdleRuleStopsAtRecordTimePlusSkew: an upstream task's marker a
// year ahead, then a lull: the all-idle rule moves the watermark only to
// the largest record timestamp seen plus the skew.
func TestAllIdleRuleStopsAtRecordTimePlusSkew(t *testing.T) {
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Unix(1000, 0)
	h := clockHarness(t, store, 10*time.Minute, now, true)
	defer h.Close()
	rec := time.Unix(1_800_000_000, 0)
	if err := h.Process(0, ev(rec, rec.UnixNano())); err != nil {
		t.Fatal(err)
	}
	marker := &kgo.Record{Timestamp: rec, Headers: []kgo.RecordHeader{{Key: markerHeader, Value: encodeMarker(0, rec.UnixNano()+year, true)}}}
	if err := h.Process(1, marker); err != nil {
		t.Fatal(err)
	}
	h.SetNow(now.Add(time.Hour)) // every input idle
	if err := h.Advance(); err != nil {
		t.Fatal(err)
	}
	if want := rec.UnixNano() + int64(10*time.Minute); h.Watermark() != want {
		t.Fatalf("all-idle watermark %v after the record time, want the skew (10m)", time.Duration(h.Watermark()-rec.UnixNano()))
	}
}

// TestRestoredWatermarkClamped: a watermark checkpointed a year ahead (by a
// run that allowed any skew) is lowered on restore to the largest record
// timestamp seen plus the skew.
func TestRestoredWatermarkClamped(t *testing.T) {
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Unix(1000, 0)
	rec := time.Unix(1_800_000_000, 0)
	h := clockHarness(t, store, 1000*24*time.Hour, now, false)
	if err := h.Process(0, ev(rec, rec.UnixNano()+year)); err != nil {
		t.Fatal(err)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if h.Watermark() < rec.UnixNano()+year/2 {
		t.Fatalf("setup: watermark %d not a year ahead", h.Watermark())
	}
	h.Close()
	h = clockHarness(t, store, 10*time.Minute, now, false)
	defer h.Close()
	bound := rec.UnixNano() + int64(10*time.Minute)
	if h.Watermark() != bound {
		t.Fatalf("restored watermark %v after the record time, want 10m", time.Duration(h.Watermark()-rec.UnixNano()))
	}
	// New records at the record clock go on from there.
	if err := h.Process(0, ev(rec.Add(time.Hour), rec.Add(time.Hour).UnixNano())); err != nil {
		t.Fatal(err)
	}
	if want := rec.Add(time.Hour).UnixNano() - int64(time.Second); h.Watermark() != want {
		t.Fatalf("watermark %d after a record an hour later, want %d", h.Watermark(), want)
	}
	if h.Task().MaxClockSkew() != 10*time.Minute {
		t.Fatalf("Task.MaxClockSkew %v", h.Task().MaxClockSkew())
	}
}

func TestWatermarksValueFormats(t *testing.T) {
	wm, rec, maxima, ok := decodeWatermarks(encodeWatermarks(5, 7, []int64{1, 2, windows.MinTime}))
	if !ok || wm != 5 || rec != 7 || len(maxima) != 3 || maxima[2] != windows.MinTime {
		t.Fatalf("round trip: %d %d %v %v", wm, rec, maxima, ok)
	}
	old := append(make([]byte, 8, 24), make([]byte, 16)...)
	old[7] = 9
	if wm, rec, maxima, ok := decodeWatermarks(old); !ok || wm != 9 || rec != windows.MinTime || len(maxima) != 2 {
		t.Fatalf("earlier format: %d %d %v %v", wm, rec, maxima, ok)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 17)} {
		if _, _, _, ok := decodeWatermarks(bad); ok {
			t.Errorf("%d bytes decoded", len(bad))
		}
	}
}
