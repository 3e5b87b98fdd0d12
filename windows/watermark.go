package windows

import (
	"math"
	"time"
)

// MinTime is the watermark before anything is known; MaxTime is the watermark
// at the end of a bounded input (replay): every timer fires.
const (
	MinTime int64 = math.MinInt64
	MaxTime int64 = math.MaxInt64
)

// Watermarks tracks the event-time watermark of one task over a fixed set of
// inputs. An input is either a source partition, whose watermark is its
// largest event time minus the bounded out-of-orderness, or an upstream task
// whose watermark arrives ready-made in markers on an internal topic.
//
// The task's watermark is the minimum over its active inputs. A source input
// that has shown no activity for longer than the idleness timeout stops
// holding the watermark back, and so does one that is caught up (SetCaughtUp:
// it has nothing more to read) once it has shown no activity for the
// caught-up idleness (SetCaughtUpIdleness). An upstream input does only
// while its markers say the upstream task is idle — not a marker sent
// before the task's current backlog began (SetStale), which the upstream
// task may have taken up since — or while it has never reported (a task
// that does not exist, as in a test harness). When every input is idle the
// watermark moves to the largest watermark among the inputs, but never past
// the ceiling (SetCeiling). Freeze disables idleness for deterministic
// replay.
//
// The watermark never goes back. Watermarks is not safe for concurrent use.
type Watermarks struct {
	bound int64 // out-of-orderness, ns
	idle  int64 // idleness timeout, ns; 0 disables idleness
	// caughtIdle is the idleness timeout of a caught-up source input, ns;
	// 0: caught-up inputs wait for the regular one.
	caughtIdle int64
	frozen     bool
	inputs     []input
	current    int64
	ceiling    int64 // the all-idle rule never passes it; MaxTime: none
	// backlogAt is the processing time (ns) at which the current backlog
	// began (a source input went stale while none was), 0 when none;
	// lastObserve the processing time of the last Observe.
	backlogAt, lastObserve int64
}

type input struct {
	max      int64 // largest event time (source) or watermark (upstream)
	seen     bool
	upstream bool
	idleFlag bool  // upstream says it is idle
	caughtUp bool  // source confirmed caught up, no activity since
	stale    bool  // its newest event was read long after it happened (SetStale)
	behind   bool  // records are known to be waiting on it (SetBehind)
	excluded bool  // never holds the watermark nor moves it (Exclude)
	activity int64 // processing time of the last activity, ns
	// reportAt: when the upstream task sent its last marker (ReportSent),
	// else when it was read, ns.
	reportAt int64
}

// NewWatermarks returns a tracker for inputs inputs, all created at processing
// time now: an input that never shows up is idle after the idleness timeout.
func NewWatermarks(inputs int, outOfOrderness, idleness time.Duration, now time.Time) *Watermarks {
	w := &Watermarks{
		bound:   int64(outOfOrderness),
		idle:    int64(idleness),
		inputs:  make([]input, inputs),
		current: MinTime,
		ceiling: MaxTime,
	}
	n := now.UnixNano()
	for i := range w.inputs {
		w.inputs[i].activity = n
		w.inputs[i].max = MinTime
	}
	return w
}

// Freeze stops processing time from moving the watermark: inputs never go
// idle (caught up or not) and an idle task never advances. Replay uses it.
func (w *Watermarks) Freeze() { w.frozen = true }

// Frozen reports whether Freeze was called.
func (w *Watermarks) Frozen() bool { return w.frozen }

// SetCaughtUpIdleness sets how long a caught-up source input (SetCaughtUp)
// may show no activity before it stops holding the watermark back. 0 (the
// default) or less: a caught-up input waits for the regular idleness
// timeout like any other.
func (w *Watermarks) SetCaughtUpIdleness(d time.Duration) { w.caughtIdle = max(int64(d), 0) }

// SetCaughtUp records whether source input i is caught up: everything its
// partition held when last asked has been read, so its silence is the
// absence of data, not a consumer behind. Activity (Observe, Touch) clears
// it: a new record makes the input active again until the next
// confirmation. An input that is not caught up (a backlog, or nothing known
// yet) holds the watermark back until the regular idleness timeout. Upstream
// inputs ignore it (their markers say whether they are idle).
func (w *Watermarks) SetCaughtUp(i int, caughtUp bool) { w.inputs[i].caughtUp = caughtUp }

// CaughtUp reports whether input i is caught up (SetCaughtUp) with no
// activity since.
func (w *Watermarks) CaughtUp(i int) bool { return w.inputs[i].caughtUp }

// MarkUpstream declares input i an upstream task whose watermark is reported
// through Report instead of being derived from event times.
func (w *Watermarks) MarkUpstream(i int) { w.inputs[i].upstream = true }

// Exclude makes input i count for nothing: it never holds the watermark
// back and never carries it forward (the all-idle rule ignores it), what
// is reported on it notwithstanding. For a tracker that shares its layout
// with another but leaves some inputs out.
func (w *Watermarks) Exclude(i int) { w.inputs[i].excluded = true }

// Observe records an event at event time ts on source input i.
func (w *Watermarks) Observe(i int, ts int64, now time.Time) {
	in := &w.inputs[i]
	if ts > in.max {
		in.max = ts
	}
	in.seen = true
	in.caughtUp = false
	in.activity = now.UnixNano()
	w.lastObserve = in.activity
}

// Max returns the largest event time (source) or watermark (upstream) seen
// on input i, MinTime if none.
func (w *Watermarks) Max(i int) int64 { return w.inputs[i].max }

// SetStale records whether source input i's newest event was read more than
// the out-of-orderness bound after it happened, by its record's timestamp: a
// backlog written late (a Collector catching up after an outage, history
// replayed into a topic). While any source input is stale no input is
// excluded for being caught up — more of that backlog may be on its way,
// to this partition or to one that has shown nothing yet, behind the
// others — only by the regular idleness.
//
// The moment a backlog begins (an input goes stale while none is) is kept:
// an upstream task's idle flag sent before it is not trusted (see
// isIdle).
func (w *Watermarks) SetStale(i int, stale bool) {
	if w.inputs[i].stale == stale {
		return // the common case, once per newest event: nothing to scan
	}
	was := w.backlog()
	w.inputs[i].stale = stale
	switch now := w.backlog(); {
	case now && !was:
		w.backlogAt = w.lastObserve
	case !now:
		w.backlogAt = 0
	}
}

// SetBehind records whether source input i is known to be behind: its
// partition holds records the task has not processed yet (the broker's end
// offset is past the task's position). An input that is behind is never
// idle, however long it shows no activity — a partition starved of fetches
// while others deliver a backlog is slow, not silent, and declaring it idle
// would send what it holds late.
func (w *Watermarks) SetBehind(i int, behind bool) { w.inputs[i].behind = behind }

// Touch records activity on input i without an event time (a record that
// could not be decoded still proves the input is alive).
func (w *Watermarks) Touch(i int, now time.Time) {
	w.inputs[i].activity = now.UnixNano()
	w.inputs[i].caughtUp = false
}

// Report records an upstream task's watermark wm on input i; idle reports
// that the upstream task itself had no active input.
func (w *Watermarks) Report(i int, wm int64, idle bool, now time.Time) {
	in := &w.inputs[i]
	if wm > in.max {
		in.max = wm
	}
	in.seen = true
	in.idleFlag = idle
	in.activity = now.UnixNano()
	in.reportAt = in.activity
}

// ReportSent records when the marker Report just took was sent (the
// upstream task's clock, its record's timestamp), for the idle flag's
// age (isIdle); without it the time it was read stands.
func (w *Watermarks) ReportSent(i int, sent int64) { w.inputs[i].reportAt = sent }

// Current computes the watermark at processing time now.
func (w *Watermarks) Current(now time.Time) int64 {
	n := now.UnixNano()
	backlog := w.backlog()
	wm := MaxTime
	active := false
	for i := range w.inputs {
		in := &w.inputs[i]
		if in.excluded || (!w.frozen && w.isIdle(in, n, backlog)) {
			continue
		}
		active = true
		v := in.max
		if !in.upstream && v != MinTime {
			v -= w.bound
		}
		if v < wm {
			wm = v
		}
	}
	if !active {
		// Every input is idle: what the inputs have shown is all there is
		// for now, so the watermark moves to the largest of theirs (as
		// Flink's StatusWatermarkValve does). It never runs ahead of the
		// data: processing-time flushes (the operators') close what is
		// still open.
		wm = min(w.maxWatermark(), w.ceiling)
	}
	if wm > w.current {
		w.current = wm
	}
	return w.current
}

// Idle reports whether every input is idle at processing time now; a task
// passes this on to downstream tasks with its watermark.
func (w *Watermarks) Idle(now time.Time) bool {
	if w.frozen {
		return false
	}
	n := now.UnixNano()
	backlog := w.backlog()
	for i := range w.inputs {
		if !w.isIdle(&w.inputs[i], n, backlog) {
			return false
		}
	}
	return true
}

// Maxima returns, per input, the largest event time (sources) or reported
// watermark (upstreams) seen, MinTime where none: what a checkpoint keeps
// so that a restarted task resumes where it was.
func (w *Watermarks) Maxima() []int64 {
	out := make([]int64, len(w.inputs))
	for i := range w.inputs {
		out[i] = w.inputs[i].max
	}
	return out
}

// RestoreMaxima sets the inputs' maxima from a checkpoint (as from
// Maxima); extra values are ignored. Restored inputs count as seen but not
// as active: idleness still applies from now on.
func (w *Watermarks) RestoreMaxima(m []int64) {
	for i := range w.inputs {
		if i < len(m) && m[i] != MinTime {
			w.inputs[i].max = m[i]
			w.inputs[i].seen = true
		}
	}
}

// SetCeiling bounds the all-idle rule: when every input is idle the
// watermark moves to the largest input watermark, but never past c (the
// engine passes the largest record timestamp seen plus the allowed clock
// skew, so that no event time ahead of the broker's clock can carry the
// watermark there). MaxTime, the default, is no ceiling. The ceiling does
// not lower a watermark already reached; see Clamp.
func (w *Watermarks) SetCeiling(c int64) { w.ceiling = c }

// Ceiling returns the ceiling set by SetCeiling.
func (w *Watermarks) Ceiling() int64 { return w.ceiling }

// Clamp lowers the watermark and every input's maximum that are above c to
// c, and reports whether anything was lowered. For a restored checkpoint
// whose watermark is ahead of any evidence: the one exception to "never
// goes back", made before the tracker is used.
func (w *Watermarks) Clamp(c int64) bool {
	lowered := false
	if w.current > c {
		w.current, lowered = c, true
	}
	for i := range w.inputs {
		if w.inputs[i].max > c {
			w.inputs[i].max, lowered = c, true
		}
	}
	return lowered
}

// Last returns the watermark computed by the last call of Current.
func (w *Watermarks) Last() int64 { return w.current }

// Advance moves the watermark to wm if that is later, e.g. to MaxTime at the
// end of a bounded input.
func (w *Watermarks) Advance(wm int64) {
	if wm > w.current {
		w.current = wm
	}
}

// backlog reports whether any source input is stale (SetStale): a backlog
// is being written, and a caught-up input — even one that has shown
// nothing yet — may be next to receive its share of it, behind the
// others. Caught-up idleness is then off for every input.
func (w *Watermarks) backlog() bool {
	for i := range w.inputs {
		if w.inputs[i].stale && !w.inputs[i].upstream {
			return true
		}
	}
	return false
}

// isIdle reports whether in stops holding the watermark back at processing
// time n; backlog is w.backlog().
func (w *Watermarks) isIdle(in *input, n int64, backlog bool) bool {
	if in.excluded {
		return true
	}
	if in.upstream {
		// An upstream task idle since before this task's backlog began
		// may have taken up its share of that backlog since: its idle
		// flag stands again only once a marker sent during the backlog
		// repeats it (a checkpoint later). Else this task runs the
		// watermark over its own share of the backlog, and what that
		// upstream task forwards of the same event times arrives late.
		if in.idleFlag && !(backlog && w.backlogAt != 0 && in.reportAt < w.backlogAt) {
			return true
		}
		if in.seen {
			// An upstream task that has reported is waited for: its
			// markers come once per checkpoint, and a pause (a slow
			// checkpoint, the task moving to another instance) is not
			// silence. Only its own idle flag excludes it.
			return false
		}
	} else if in.behind {
		return false
	} else if in.caughtUp && !backlog && w.caughtIdle > 0 && n-in.activity > w.caughtIdle {
		return true
	}
	return w.idle > 0 && n-in.activity > w.idle
}

// maxWatermark is the largest watermark any input allows.
func (w *Watermarks) maxWatermark() int64 {
	m := MinTime
	for i := range w.inputs {
		in := &w.inputs[i]
		if !in.seen || in.max == MinTime || in.excluded {
			continue
		}
		v := in.max
		if !in.upstream {
			v -= w.bound
		}
		m = max(m, v)
	}
	return m
}

// IsLate reports whether an event at ts is beyond allowed lateness at
// watermark wm: the data it belongs to may already have been purged.
func IsLate(ts, wm int64, allowedLateness time.Duration) bool {
	if wm == MinTime {
		return false
	}
	return ts+int64(allowedLateness) < wm
}
