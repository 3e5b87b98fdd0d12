package engine

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/windows"
)

// markerTimes holds, per internal input k and upstream task up (at
// k*Partitions+up), the timestamp (unix ns) of the last watermark marker
// of that task read on the input: the producer's clock when the upstream
// task prepared the checkpoint that wrote it.
type markerTimes []int64

func (t *Task) noteMarker(k int, up int32, r *kgo.Record) {
	p := int(t.e.topo.Partitions)
	if t.markers == nil {
		t.markers = make(markerTimes, len(t.e.internal)*p)
		for i := range t.markers {
			t.markers[i] = windows.MinTime
		}
	}
	ts := recordTime(r)
	if ts == windows.MinTime {
		ts = t.now.UnixNano() // no timestamp (a test's records): when it was read
	}
	if m := &t.markers[k*p+int(up)]; ts > *m {
		*m = ts
	}
}

// MarkerHorizon returns, for an internal input (an index into
// Topology.Inputs), the time (unix ns) up to which every upstream task has
// committed what it wrote on the input and this task has read it: the
// earliest, over the upstream tasks, of the timestamp of the last marker
// read from that task (a task writes its markers at the end of each
// checkpoint's records on every partition, when it prepares the
// checkpoint, and they are readable once it commits). windows.MinTime
// while some upstream task has not had a marker read (a task not running,
// a rebalance), and for an input that is not internal.
//
// What an upstream task forwards arrives a checkpoint (more under load)
// after it read it, later than what this task reads itself: a record this
// task read at processing time a is overtaken by nothing that the upstream
// tasks read before a once MarkerHorizon(input) > a — given clocks in step
// across instances. Operators that order records of one key coming from
// several tasks (the KV-event buffer) release records read before it.
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
		h = min(h, t.markers[k*p+up])
	}
	return h
}
