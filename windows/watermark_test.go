package windows

import (
	"testing"
	"time"
)

func TestWatermarks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const s = int64(time.Second)
	type step struct {
		op    string // observe, touch, report, idle-report, caught-up, lagging, ceiling, clamp, current, idle
		input int
		ts    int64
		now   time.Duration
		want  int64
	}
	tests := []struct {
		name     string
		inputs   int
		upstream []int
		steps    []step
	}{
		{"min over inputs minus bound", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s},
			{op: "current", want: MinTime}, // input 1 unseen, not idle yet
			{op: "observe", input: 1, ts: 20 * s},
			{op: "current", want: 8 * s},
			{op: "observe", input: 0, ts: 30 * s},
			{op: "current", want: 18 * s},
		}},
		{"never goes back", 1, nil, []step{
			{op: "observe", input: 0, ts: 10 * s},
			{op: "current", want: 8 * s},
			{op: "observe", input: 0, ts: 5 * s},
			{op: "current", want: 8 * s},
		}},
		{"idle input stops holding back", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 50 * s, now: 6 * time.Second},
			{op: "current", now: 6 * time.Second, want: 48 * s},
		}},
		{"all idle moves to the largest input watermark", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 30 * s, now: 0},
			{op: "current", now: time.Second, want: 8 * s},
			{op: "current", now: 10 * time.Second, want: 28 * s},
			{op: "current", now: time.Hour, want: 28 * s}, // no wall-clock drift
		}},
		{"all idle stops at the ceiling", 2, nil, []step{
			{op: "ceiling", ts: 20 * s},
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 365 * 24 * 3600 * s, now: 0}, // a year ahead
			{op: "current", now: time.Second, want: 8 * s},
			{op: "current", now: 10 * time.Second, want: 20 * s},
			{op: "ceiling", ts: 25 * s},
			{op: "current", now: 20 * time.Second, want: 25 * s},
			{op: "ceiling", ts: 5 * s}, // a lower ceiling does not move it back
			{op: "current", now: 30 * time.Second, want: 25 * s},
		}},
		{"ceiling below the inputs' watermark", 1, nil, []step{
			{op: "ceiling", ts: MinTime},
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "current", now: time.Hour, want: MinTime},
		}},
		{"no ceiling: the largest input watermark", 1, nil, []step{
			{op: "ceiling", ts: MaxTime},
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "current", now: time.Hour, want: 8 * s},
		}},
		{"ceiling leaves active inputs alone", 1, nil, []step{
			{op: "ceiling", ts: 3 * s},
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "current", now: time.Second, want: 8 * s},
		}},
		{"clamp lowers a restored watermark and maxima", 2, nil, []step{
			{op: "observe", input: 0, ts: 1000 * s, now: 0},
			{op: "observe", input: 1, ts: 1000 * s, now: 0},
			{op: "current", want: 998 * s},
			{op: "clamp", ts: 50 * s, want: 1},
			{op: "clamp", ts: 50 * s, want: 0},
			{op: "observe", input: 0, ts: 60 * s, now: time.Second},
			{op: "observe", input: 1, ts: 70 * s, now: time.Second},
			{op: "current", now: time.Second, want: 58 * s},
		}},
		{"a caught-up input stops holding back after the caught-up idleness", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 50 * s, now: 0},
			{op: "caught-up", input: 0, now: 100 * time.Millisecond},
			{op: "current", now: 150 * time.Millisecond, want: 8 * s}, // quiet for 150ms only
			{op: "current", now: 250 * time.Millisecond, want: 48 * s},
			{op: "idle", now: 250 * time.Millisecond, want: 0}, // input 1 is active
		}},
		{"a caught-up input that never had a record", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "caught-up", input: 1, now: 0},
			{op: "current", now: 0, want: MinTime},
			{op: "current", now: 250 * time.Millisecond, want: 8 * s},
		}},
		{"a new record makes a caught-up input active until confirmed again", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 50 * s, now: 0},
			{op: "caught-up", input: 0, now: 0},
			{op: "current", now: 300 * time.Millisecond, want: 48 * s},
			{op: "observe", input: 0, ts: 11 * s, now: time.Second},
			{op: "observe", input: 1, ts: 60 * s, now: time.Second},
			// Input 0 holds the watermark again (it never goes back).
			{op: "current", now: 1500 * time.Millisecond, want: 48 * s},
			{op: "caught-up", input: 0, now: 1500 * time.Millisecond},
			{op: "current", now: 1500 * time.Millisecond, want: 58 * s},
			{op: "touch", input: 0, now: 2 * time.Second},
			{op: "observe", input: 1, ts: 70 * s, now: 2 * time.Second},
			{op: "current", now: 2500 * time.Millisecond, want: 58 * s}, // touched: active again
		}},
		{"a lagging input still holds until the regular idleness", 2, nil, []step{
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 50 * s, now: 0},
			{op: "caught-up", input: 0, now: 0},
			{op: "lagging", input: 0, now: 100 * time.Millisecond}, // a backlog showed up
			{op: "caught-up", input: 1, now: 100 * time.Millisecond},
			{op: "current", now: 4 * time.Second, want: 8 * s},
			{op: "current", now: 6 * time.Second, want: 48 * s}, // both idle: the largest
		}},
		{"every input caught up: the largest input watermark", 2, nil, []step{
			{op: "ceiling", ts: 45 * s},
			{op: "observe", input: 0, ts: 10 * s, now: 0},
			{op: "observe", input: 1, ts: 50 * s, now: 0},
			{op: "caught-up", input: 0, now: 0},
			{op: "caught-up", input: 1, now: 0},
			{op: "idle", now: 100 * time.Millisecond, want: 0},
			{op: "current", now: 100 * time.Millisecond, want: 8 * s},
			{op: "idle", now: 300 * time.Millisecond, want: 1},
			{op: "current", now: 300 * time.Millisecond, want: 45 * s}, // bounded by the ceiling
		}},
		{"upstream inputs ignore caught-up", 2, []int{1}, []step{
			{op: "observe", input: 0, ts: 100 * s},
			{op: "report", input: 1, ts: 40 * s},
			{op: "caught-up", input: 1},
			{op: "current", now: time.Minute, want: 40 * s},
		}},
		{"upstream reports are watermarks, idle upstreams excluded", 2, []int{1}, []step{
			{op: "observe", input: 0, ts: 100 * s},
			{op: "report", input: 1, ts: 40 * s},
			{op: "current", want: 40 * s},
			{op: "idle-report", input: 1, ts: 41 * s},
			{op: "current", want: 98 * s},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWatermarks(tc.inputs, 2*time.Second, 5*time.Second, t0)
			w.SetCaughtUpIdleness(200 * time.Millisecond)
			for _, u := range tc.upstream {
				w.MarkUpstream(u)
			}
			for i, st := range tc.steps {
				switch st.op {
				case "observe":
					w.Observe(st.input, st.ts, at(st.now))
				case "touch":
					w.Touch(st.input, at(st.now))
				case "caught-up", "lagging":
					w.SetCaughtUp(st.input, st.op == "caught-up")
				case "idle":
					if got := w.Idle(at(st.now)); got != (st.want == 1) {
						t.Fatalf("step %d: idle %v", i, got)
					}
				case "report":
					w.Report(st.input, st.ts, false, at(st.now))
				case "idle-report":
					w.Report(st.input, st.ts, true, at(st.now))
				case "ceiling":
					w.SetCeiling(st.ts)
				case "clamp":
					if got := w.Clamp(st.ts); got != (st.want == 1) {
						t.Fatalf("step %d: clamp lowered %v", i, got)
					}
				case "current":
					if got := w.Current(at(st.now)); got != st.want {
						t.Fatalf("step %d: watermark %d, want %d", i, got, st.want)
					}
				}
			}
		})
	}
}

func TestFreezeIgnoresIdleness(t *testing.T) {
	t0 := time.Unix(0, 0)
	w := NewWatermarks(2, 0, time.Second, t0)
	w.Freeze()
	w.Observe(0, 100, t0)
	if got := w.Current(t0.Add(time.Hour)); got != MinTime {
		t.Fatalf("frozen watermark %d, want MinTime while input 1 is unseen", got)
	}
	w.SetCaughtUpIdleness(time.Millisecond)
	w.SetCaughtUp(1, true)
	if got := w.Current(t0.Add(time.Hour)); got != MinTime || w.Idle(t0.Add(time.Hour)) {
		t.Fatalf("frozen watermark %d (idle %v) with input 1 caught up, want MinTime and not idle", got, w.Idle(t0.Add(time.Hour)))
	}
	if !w.Frozen() {
		t.Fatal("Frozen() is false after Freeze")
	}
	w.Advance(MaxTime)
	if w.Last() != MaxTime {
		t.Fatalf("Advance(MaxTime) gave %d", w.Last())
	}
}

func TestIsLate(t *testing.T) {
	if IsLate(5, MinTime, 0) {
		t.Error("nothing is late before a watermark")
	}
	if !IsLate(5, 20, 10) || IsLate(10, 20, 10) || IsLate(15, 20, 10) {
		t.Error("late iff ts + allowed lateness < watermark")
	}
}

// TestUpstreamIsWaitedFor: an upstream task that has reported holds the
// watermark back however long its next marker takes (a slow checkpoint, a
// task moving between instances); it stops holding it only when it says it
// is idle. One that never reported is idle after the timeout.
func TestUpstreamIsWaitedFor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewWatermarks(3, time.Second, 5*time.Second, t0)
	w.MarkUpstream(1)
	w.MarkUpstream(2)
	w.Observe(0, 100e9, t0)
	w.Report(1, 50e9, false, t0)
	if got := w.Current(t0.Add(time.Minute)); got != 50e9 {
		t.Fatalf("watermark %d a minute after upstream 1's last marker, want its 50s (upstream 2 never reported: idle)", got)
	}
	w.Report(1, 60e9, true, t0.Add(2*time.Minute))
	if got := w.Current(t0.Add(2 * time.Minute)); got != 99e9 {
		// Every input is idle now (the source since long, upstream 1 by
		// its flag, upstream 2 never seen): the largest watermark.
		t.Fatalf("watermark %d once upstream 1 is idle, want 99s", got)
	}
}

// TestStaleInputIsNotCaughtUpIdle: a caught-up input whose newest event was
// read long after it happened (SetStale: a backlog being written) holds the
// watermark until the regular idleness; a live one stops after the
// caught-up idleness.
func TestStaleInputIsNotCaughtUpIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, stale := range []bool{false, true} {
		w := NewWatermarks(2, 0, 30*time.Second, now)
		w.SetCaughtUpIdleness(200 * time.Millisecond)
		w.Observe(0, 100, now)
		w.Observe(1, 500, now)
		w.SetStale(0, stale)
		w.SetCaughtUp(0, true)
		got := w.Current(now.Add(time.Second))
		want := int64(100)
		if !stale {
			want = 500 // input 0 is caught up and idle: input 1 alone
		}
		if got != want {
			t.Errorf("stale=%v: watermark %d after 1s, want %d", stale, got, want)
		}
	}
}

// TestBacklogHoldsEmptyCaughtUpInput: while one input reads a backlog
// (stale), a caught-up input that has shown nothing yet is not excluded —
// the backlog may reach its partition next — until the regular idleness.
// With live input it is excluded after the caught-up idleness.
func TestBacklogHoldsEmptyCaughtUpInput(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, stale := range []bool{false, true} {
		w := NewWatermarks(2, 0, 30*time.Second, now)
		w.SetCaughtUpIdleness(200 * time.Millisecond)
		w.SetCaughtUp(0, true) // empty partition, at its end
		w.Observe(1, 500, now)
		w.SetStale(1, stale)
		got := w.Current(now.Add(time.Second))
		want := MinTime
		if !stale {
			want = 500
		}
		if got != want {
			t.Errorf("stale=%v: watermark %d after 1s, want %d", stale, got, want)
		}
		if got := w.Current(now.Add(31 * time.Second)); got != 500 {
			t.Errorf("stale=%v: watermark %d after the regular idleness, want 500", stale, got)
		}
	}
}

// TestBehindInputIsNeverIdle: a source input with records waiting (behind)
// holds the watermark however long it is silent; once caught up, the
// regular idleness applies from its last activity.
func TestBehindInputIsNeverIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	w := NewWatermarks(2, 0, 5*time.Second, now)
	w.Observe(0, 100, now)
	w.Observe(1, 500, now)
	w.SetBehind(0, true)
	if got := w.Current(now.Add(time.Minute)); got != 100 {
		t.Fatalf("watermark %d with input 0 behind, want 100", got)
	}
	if w.Idle(now.Add(time.Minute)) {
		t.Fatal("idle with an input behind")
	}
	w.SetBehind(0, false)
	if got := w.Current(now.Add(time.Minute)); got != 500 {
		t.Fatalf("watermark %d once input 0 caught up and idle, want 500", got)
	}
}

// TestIdleUpstreamBeforeABacklog: an upstream task idle since before this
// task's backlog began (its sources were empty when it sent the marker)
// holds the watermark once the backlog comes — it may be reading its share
// of it — until a marker sent during the backlog says it is idle still.
// With live input, or a marker sent after the backlog began, it does not.
func TestIdleUpstreamBeforeABacklog(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, stale := range []bool{false, true} {
		w := NewWatermarks(2, 0, 30*time.Second, now)
		w.MarkUpstream(1)
		w.Report(1, MinTime, true, now) // idle: nothing to read yet
		w.ReportSent(1, now.UnixNano())
		w.Observe(0, 60_000, now.Add(time.Second)) // the backlog reaches input 0
		w.SetStale(0, stale)
		got := w.Current(now.Add(2 * time.Second))
		want := MinTime
		if !stale {
			want = 60_000
		}
		if got != want {
			t.Errorf("stale=%v: watermark %d with the upstream idle since before, want %d", stale, got, want)
		}
		// Its next marker, sent during the backlog, still idle: it had
		// nothing of it.
		w.Report(1, MinTime, true, now.Add(3*time.Second))
		w.ReportSent(1, now.Add(3*time.Second).UnixNano())
		if got := w.Current(now.Add(3 * time.Second)); got != 60_000 {
			t.Errorf("stale=%v: watermark %d after an idle marker sent during the backlog, want 60000", stale, got)
		}
	}
	// Reported without a send time: the time it was read stands.
	w := NewWatermarks(2, 0, 30*time.Second, now)
	w.MarkUpstream(1)
	w.Report(1, MinTime, true, now.Add(5*time.Second))
	w.Observe(0, 60_000, now.Add(time.Second))
	w.SetStale(0, true)
	if got := w.Current(now.Add(6 * time.Second)); got != 60_000 {
		t.Errorf("watermark %d with an idle marker read after the backlog began, want 60000", got)
	}
}
