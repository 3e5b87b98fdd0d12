package engine

import (
	"encoding/binary"

	"github.com/braidlabs/braid/windows"
)

// markerTimes holds, per internal input k and upstream task up (at
// k*Partitions+up), the read horizon of the last watermark marker of that
// task read on the input: the upstream task's clock (unix ns) when it
// prepared the checkpoint that wrote it, or when it had last read its
// sources to their end if that was earlier (Task.readHorizon).
type markerTimes []int64

// reportMarker takes a watermark marker of upstream task up on internal
// topic k: its watermark and idle flag, when it was sent (its record time,
// unix ns; MinTime: unknown) and its read horizon (MaxTime: none, the
// marker of an older version).
func (t *Task) reportMarker(k int, up int32, wm int64, idle bool, sent, horizon int64) {
	t.noteMarker(k, up, sent, horizon)
	i := t.e.sources + k*int(t.e.topo.Partitions) + int(up)
	report := func(w *windows.Watermarks, i int) {
		w.Report(i, wm, idle, t.now)
		if sent != windows.MinTime {
			w.ReportSent(i, sent)
		}
	}
	report(t.all, i)
	if t.full != nil {
		report(t.full, i)
	}
	for _, u := range t.up {
		if i, ok := u.index(t.e, k, up); ok {
			report(u.w, i)
		}
	}
}

func (t *Task) noteMarker(k int, up int32, sent, horizon int64) {
	p := int(t.e.topo.Partitions)
	if t.markers == nil {
		t.markers = make(markerTimes, len(t.e.internal)*p)
		for i := range t.markers {
			t.markers[i] = windows.MinTime
		}
	}
	ts := sent
	if ts == windows.MinTime {
		ts = t.now.UnixNano() // no timestamp (a test's records): when it was read
	}
	ts = min(ts, horizon)
	if m := &t.markers[k*p+int(up)]; ts > *m {
		*m = ts
	}
}

// readHorizon is the time (unix ns, the task's clock) before which the
// task has read everything its source partitions held: now while every
// source is caught up (CaughtUp), else the last time they all were —
// a fetch or an end check after the records it read then were appended;
// windows.MinTime if never since the task opened. Now for
// a task without sources. A task's markers carry it (in the record key,
// which readers of older versions ignore), so that MarkerHorizon stays
// behind a task that reads a backlog, on any instance: what it forwards
// was appended long before it reads it.
func (t *Task) readHorizon() int64 {
	now := t.now.UnixNano()
	if t.e.sources == 0 || t.CaughtUp() {
		return now
	}
	if at := t.pub.caughtUpAt.Load(); at != 0 {
		return min(at, now)
	}
	return windows.MinTime
}

// encodeHorizon is a marker's key: its read horizon, 8 bytes big-endian.
func encodeHorizon(h int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(h)) }

func decodeHorizon(key []byte) (int64, bool) {
	if len(key) != 8 {
		return 0, false // a marker of an older version: its timestamp stands
	}
	return int64(binary.BigEndian.Uint64(key)), true
}

// MarkerHorizon returns, for an internal input (an index into
// Topology.Inputs), the time (unix ns) before which every upstream task
// has read everything its sources held, committed what it wrote on the
// input from it, and this task has read that: the earliest, over the
// upstream tasks, of the read horizon of the last marker read from that
// task (a task writes its markers at the end of each checkpoint's records
// on every partition, when it prepares the checkpoint, and they are
// readable once it commits; the horizon is when it prepared it, or when
// it had last read its sources to their end if that was earlier).
// windows.MinTime while some upstream task has not had a marker read (a
// task not running, a rebalance) or has not yet read its sources to their
// end, and for an input that is not internal.
//
// What an upstream task forwards arrives a checkpoint (more under load)
// after it read it, later than what this task reads itself: a record this
// task read at processing time a is overtaken by nothing that reached the
// upstream tasks' sources before a once MarkerHorizon(input) > a — given
// clocks in step across instances. A task reading a backlog, on this
// instance or another, holds it back. Operators that order records of one
// key coming from several tasks (the KV-event buffer) release records
// read before it.
func (t *Task) MarkerHorizon(input int) int64 {
	if input < 0 || input >= len(t.e.topo.Inputs) || !t.e.topo.Inputs[input].Internal || t.markers == nil {
		return windows.MinTime
	}
	k := t.e.xk[t.e.topo.Inputs[input].Topic]
	p := int(t.e.topo.Partitions)
	h := windows.MaxTime
	for up := range p {
		h = min(h, t.markers[k*p+up])
	}
	return h
}
