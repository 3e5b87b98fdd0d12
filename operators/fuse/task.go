package fuse

import (
	"math"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/windows"
)

// stage is one operator of a fuse task. Each holds its own state and
// hands work on to the next by a call to its entry point (in the task) or
// a record on an internal topic (to another task). Every method runs on
// the task's goroutine; an error aborts the task's epoch.
type stage interface {
	// process handles one record of an input the topology routes to
	// the stage (input: its index among the task's inputs).
	process(t *engine.Task, rec *kgo.Record, input int) error
	// onWatermark does what the task's watermark wm makes due, a slice
	// at a time; more: some is left (engine.Backlogger).
	onWatermark(t *engine.Task, wm int64) (more bool, err error)
	// prepareCheckpoint writes what changed since the last checkpoint
	// to the task's keyspace.
	prepareCheckpoint(t *engine.Task) error
	// restore rebuilds the stage's memory from the task's keyspace.
	restore(t *engine.Task) error
	// close leaves the stage's gauges (the task's partition was revoked,
	// or the job stops).
	close()
}

// stateless is the part of stage a stage without state or timers has.
type stateless struct{}

func (stateless) process(*engine.Task, *kgo.Record, int) error  { return nil }
func (stateless) onWatermark(*engine.Task, int64) (bool, error) { return false, nil }
func (stateless) prepareCheckpoint(*engine.Task) error          { return nil }
func (stateless) restore(*engine.Task) error                    { return nil }
func (stateless) close()                                        {}

// holder is a stage that may still hand the fuse stage work timed behind
// the task's watermark: held is the earliest event time of that work
// (math.MaxInt64: none). The stages after it see the watermark capped at
// held, and so do the tasks that read the task's repartition topic
// (engine.WatermarkHolder): neither closes, by the watermark, a trace that
// work still tags.
type holder interface{ held() int64 }

// memoryReporter is a stage with a share of the memory budget, published
// in the gauges after each of the task's calls.
type memoryReporter interface{ reportMemory() }

// link is one stage of a task's topology: the inputs routed to it, and
// whether the stages after it wait for it (gate): while it has due work
// left at a watermark, they see that watermark only at the engine's next
// call.
type link struct {
	stage  stage
	inputs []int
	gate   bool
}

// topology is the fuse task, declared: its stages in the order a record
// passes them (and in which the watermark, a checkpoint and a restore
// reach them), and which input feeds which. A span read from a source
// goes ingest → fuse (in place, or through the repartition topic to the
// fuse stage of its trace's task); a log naming only a request id ingest
// → resolve → fuse; a KV event ingest → kv (here or in its host's task)
// → kvgraph's incidents → fuse (tags) and alerts; a metric point without
// an exemplar ingest → resources (the table of every instance) → alerts.
// An emitted trace goes on to alerts (and the LLM metrics) and sampling.
func topology(s *Stage, partition int32, lastInput *int64) []link {
	o := outputs{cfg: &s.cfg, c: &s.counters}
	alerts := newAlertsStage(o, partition)
	fuse := &fuser{
		outputs:   o,
		s:         s,
		partition: partition,
		traces:    map[[16]byte]*trace{},
		closed:    map[[16]byte]uint32{},
		lastInput: lastInput,
		observe:   alerts,
	}
	var sampling *samplingStage
	if s.cfg.Sampling != nil {
		sampling = &samplingStage{outputs: o, proc: s.cfg.Sampling.NewProcessor()}
		fuse.sampling = sampling
	}
	resolve := newResolver(s, o, partition, fuse.add)
	kc := s.cfg.KVGraph
	kc.Counters = &s.kvCounters
	kc.OnIncident = func(t *engine.Task, inc *braidpb.Incident) error {
		alerts.observeIncident(t, inc)
		return fuse.tag(t, inc)
	}
	kc.DLQTopic, kc.DLQPartitions = s.cfg.DLQTopic, s.cfg.DLQPartitions // rejected KV events
	if s.table != nil {
		kc.Context = s.incidentContext
	}
	kv := &kvStage{outputs: o, partition: partition, input: s.kvInput(), tagsInput: s.repartitionInput(), wm: windows.MinTime, kv: kvgraph.NewProcessor(kc, partition)}
	in := &ingest{outputs: o, s: s, partition: partition, dec: otlp.NewDecoder(), groups: map[[16]byte]int{},
		kv: kv, resolve: resolve, fuse: fuse.add}
	for _, src := range s.cfg.Sources {
		in.declare = in.declare || src.Signal == otlp.SignalLogs
	}
	var samples *resourceSampler
	if s.table != nil {
		samples = &resourceSampler{outputs: o, observe: alerts.observeSample, samples: map[semconv.Identity][]byte{}}
		in.samples = samples
	}

	ls := []link{{stage: in, inputs: seq(0, len(s.cfg.Sources))}}
	if samples != nil {
		ls = append(ls, link{stage: samples})
	}
	ls = append(ls,
		link{stage: kv, inputs: []int{s.kvInput()}},
		link{stage: resolve, inputs: []int{s.resolveInput()}, gate: true},
		link{stage: fuse, inputs: []int{s.repartitionInput()}},
		link{stage: alerts})
	if s.cfg.Alerts != nil {
		ls[len(ls)-1].inputs = []int{s.alertsInput()}
	}
	if sampling != nil {
		ls = append(ls, link{stage: sampling})
	}
	return ls
}

// Input indexes of the internal topics, after the sources, in the order
// Stage.Topology lists them.
func (s *Stage) resolveInput() int     { return len(s.cfg.Sources) }
func (s *Stage) kvInput() int          { return len(s.cfg.Sources) + 1 }
func (s *Stage) repartitionInput() int { return len(s.cfg.Sources) + 2 }
func (s *Stage) alertsInput() int      { return len(s.cfg.Sources) + 3 }

// seq is from, from+1, …, to-1.
func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// task runs a topology as the engine's processor of one partition.
type task struct {
	links     []link
	route     []stage // by input index
	reporters []memoryReporter
	// alertsInput: the alerts stage's partial aggregates, which are not
	// input that keeps traces open (fuser.flushIdle).
	alertsInput      int
	repartitionInput int
	lastInput        int64 // processing time of the last other record, ns
	backlog          bool
}

func newTask(s *Stage, partition int32) *task {
	tk := &task{alertsInput: -1, repartitionInput: s.repartitionInput()}
	if s.cfg.Alerts != nil {
		tk.alertsInput = s.alertsInput()
	}
	tk.links = topology(s, partition, &tk.lastInput)
	for _, l := range tk.links {
		for _, i := range l.inputs {
			for len(tk.route) <= i {
				tk.route = append(tk.route, nil)
			}
			tk.route[i] = l.stage
		}
		if r, ok := l.stage.(memoryReporter); ok {
			tk.reporters = append(tk.reporters, r)
		}
	}
	return tk
}

// Process implements engine.Processor: the record goes to the stage its
// input is routed to.
func (tk *task) Process(t *engine.Task, rec *kgo.Record, input int) error {
	if input != tk.alertsInput {
		tk.lastInput = t.Now().UnixNano()
	}
	err := tk.route[input].process(t, rec, input)
	tk.reportMemory()
	return err
}

// OnWatermark implements engine.WatermarkHandler: each stage in order
// does what wm makes due, up to what the holders before it have caught
// up with; a gate with work left holds back the rest.
func (tk *task) OnWatermark(t *engine.Task, wm int64) error {
	defer tk.reportMemory()
	tk.backlog = false
	for _, l := range tk.links {
		more, err := l.stage.onWatermark(t, wm)
		if err != nil {
			return err
		}
		if h, ok := l.stage.(holder); ok {
			wm = min(wm, h.held())
		}
		if more {
			tk.backlog = true
			if l.gate {
				return nil
			}
		}
	}
	return nil
}

// Backlog implements engine.Backlogger.
func (tk *task) Backlog() bool { return tk.backlog }

// HeldWatermark implements engine.WatermarkHolder: the repartition topic's
// markers, what the fuse stages of other tasks close traces by, are held.
func (tk *task) HeldWatermark(input int) int64 {
	h := int64(math.MaxInt64)
	if input != tk.repartitionInput {
		return h
	}
	for _, l := range tk.links {
		if s, ok := l.stage.(holder); ok {
			h = min(h, s.held())
		}
	}
	return h
}

// PrepareCheckpoint implements engine.Checkpointer.
func (tk *task) PrepareCheckpoint(t *engine.Task) error {
	defer tk.reportMemory()
	for _, l := range tk.links {
		if err := l.stage.prepareCheckpoint(t); err != nil {
			return err
		}
	}
	return nil
}

// Restore implements engine.Restorer.
func (tk *task) Restore(t *engine.Task) error {
	defer tk.reportMemory()
	tk.lastInput = 0
	for _, l := range tk.links {
		if err := l.stage.restore(t); err != nil {
			return err
		}
	}
	return nil
}

// Close implements engine.Closer.
func (tk *task) Close() error {
	for _, l := range tk.links {
		l.stage.close()
	}
	return nil
}

func (tk *task) reportMemory() {
	for _, r := range tk.reporters {
		r.reportMemory()
	}
}
