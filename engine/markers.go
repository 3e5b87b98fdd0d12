package engine

import "github.com/braidlabs/braid/windows"

// markerReads records when this task read the watermark markers of each
// upstream task on each internal input: the processing times (unix ns) of
// the last two, per internal input k and upstream task up at
// k*Partitions+up.
type markerReads [][2]int64

func (t *Task) noteMarker(k int, up int32) {
	p := int(t.e.topo.Partitions)
	if t.markers == nil {
		t.markers = make(markerReads, len(t.e.internal)*p)
		for i := range t.markers {
			t.markers[i] = [2]int64{windows.MinTime, windows.MinTime}
		}
	}
	m := &t.markers[k*p+int(up)]
	m[0], m[1] = m[1], t.now.UnixNano()
}

// MarkerHorizon returns, for an internal input (an index into
// Topology.Inputs), the processing time (unix ns) before which every
// upstream task has committed at least one checkpoint that this task has
// read in full: the earliest, over the upstream tasks, of the time this
// task read the second-to-last of that task's markers on the input.
// windows.MinTime while some upstream task has not had two markers read
// (a task not running, a rebalance), and for an input that is not
// internal.
//
// Markers come at the end of each checkpoint's records on every partition
// of an internal topic, and a checkpoint is readable only once committed,
// so what an upstream task forwards lags what this task reads itself by up
// to a checkpoint, and more under load. A record this task read from a
// source at processing time a has been overtaken by nothing an upstream
// task read before a (and forwarded) once MarkerHorizon(input) > a: two
// markers read since a span at least one whole checkpoint of each upstream
// task. Operators that reorder records of one key from several tasks
// (the KV-event buffer) release records read before it.
func (t *Task) MarkerHorizon(input int) int64 {
	if input < 0 || input >= len(t.e.topo.Inputs) || !t.e.topo.Inputs[input].Internal || t.markers == nil {
		return windows.MinTime
	}
	k := -1
	for i, name := range t.e.internal {
		if name == t.e.topo.Inputs[input].Topic {
			k = i
		}
	}
	if k < 0 {
		return windows.MinTime
	}
	p := int(t.e.topo.Partitions)
	h := windows.MaxTime
	for up := range p {
		h = min(h, t.markers[k*p+up][0])
	}
	return h
}
