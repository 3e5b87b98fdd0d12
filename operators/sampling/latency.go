package sampling

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/windows"
)

// latencies are a task's latency windows for the slow rule: per model,
// per pane of last event time, aggregates (windows.Agg, the alert
// windows' type) of TTFT and end-to-end latency.
type latencies struct {
	cfg          *Config
	c            *counters
	pane, window int64
	models       map[string]*modelLat
	bytes        int64
	seq          uint64   // adds so far (modelLat.used)
	forgotten    []string // models evicted since the last checkpoint
	scratch      []byte
}

type modelLat struct {
	panes   map[int64]*[2]windows.Agg // pane start → TTFT, e2e
	maxPane int64
	dirty   bool
	bytes   int64
	used    uint64 // latencies.seq at its last add

	// the thresholds for traces of pane cachePane (NaN: too few samples)
	cached    bool
	cachePane int64
	thr       [2]float64
}

func newLatencies(c *Config, cs *counters) latencies {
	return latencies{cfg: c, c: cs, pane: int64(c.Slow.Pane), window: int64(c.Slow.Window), models: map[string]*modelLat{}}
}

func floorTo(t, d int64) int64 {
	r := t % d
	if r < 0 {
		r += d
	}
	return t - r
}

// slow reports whether tr's TTFT or e2e is above its model's threshold.
func (l *latencies) slow(tr *Trace) bool {
	m := l.models[tr.Model]
	if m == nil {
		return false
	}
	p := floorTo(tr.Last, l.pane)
	if !m.cached || m.cachePane != p {
		m.thresholds(p, l)
	}
	return float64(tr.TTFT) > m.thr[0] || float64(tr.E2E) > m.thr[1]
}

// thresholds computes the thresholds for traces of pane p: per figure,
// the quantile of the panes in the window that ends one pane before p
// merged, leaving out the pane whose own quantile is highest when three
// or more panes have samples, if what is merged holds MinSamples. The pane
// just before p is left out because some of its traces may be emitted
// after those of p (flush_after, the end of the input): every trace of
// the window is in it when a trace of p is decided, in the live job as in
// a replay. A burst of slow requests within one pane does not raise the
// bar for the requests after it; a shift that lasts two panes does.
func (m *modelLat) thresholds(p int64, l *latencies) {
	p -= l.pane
	for i := range m.thr {
		worst, worstQ, n := int64(0), math.Inf(-1), 0
		for start, a := range m.panes {
			if start < p-l.window || start >= p || a[i].Count == 0 {
				continue
			}
			n++
			if q := a[i].Quantile(l.cfg.Slow.Quantile); q > worstQ || q == worstQ && start < worst {
				worst, worstQ = start, q
			}
		}
		var w windows.Agg
		for start, a := range m.panes {
			if start >= p-l.window && start < p && (n < 3 || start != worst) {
				w.Merge(&a[i])
			}
		}
		m.thr[i] = math.NaN()
		if w.Count >= float64(l.cfg.Slow.MinSamples) {
			m.thr[i] = w.Quantile(l.cfg.Slow.Quantile)
		}
	}
	m.cached, m.cachePane = true, p+l.pane
}

// add puts tr's latencies in its model's pane.
func (l *latencies) add(tr *Trace) {
	if tr.TTFT <= 0 && tr.E2E <= 0 {
		return
	}
	m := l.models[tr.Model]
	if m == nil {
		if len(l.models) >= l.cfg.MaxModels {
			l.c.untracked.Add(1)
			return
		}
		m = &modelLat{panes: map[int64]*[2]windows.Agg{}, maxPane: math.MinInt64}
		l.models[tr.Model] = m
	}
	p := floorTo(tr.Last, l.pane)
	if m.maxPane != math.MinInt64 && p < m.maxPane-l.window-l.pane {
		return // older than any window still asked for
	}
	a := m.panes[p]
	if a == nil {
		a = &[2]windows.Agg{}
		m.panes[p] = a
	}
	a[0].Add(tr.Last, finitePos(tr.TTFT), "")
	a[1].Add(tr.Last, finitePos(tr.E2E), "")
	if m.cached && p < m.cachePane-l.pane {
		m.cached = false
	}
	if p > m.maxPane {
		m.maxPane = p
		for start := range m.panes {
			if start < p-l.window-l.pane {
				delete(m.panes, start)
			}
		}
	}
	m.dirty = true
	l.seq++
	m.used = l.seq
	l.account(m)
	for l.bytes > l.cfg.MaxBytes && len(l.models) > 1 {
		l.evict(tr.Model)
	}
}

// evict forgets the model updated longest ago other than keep.
func (l *latencies) evict(keep string) {
	var name string
	var old *modelLat
	for n, m := range l.models {
		if n != keep && (old == nil || m.used < old.used) {
			name, old = n, m
		}
	}
	delete(l.models, name)
	l.forgotten = append(l.forgotten, name)
	l.bytes -= old.bytes
	l.c.windowBytes.Add(-old.bytes)
	l.c.evicted.Add(1)
}

func (l *latencies) account(m *modelLat) {
	n := int64(64)
	for _, a := range m.panes {
		n += int64(a[0].Bytes() + a[1].Bytes())
	}
	l.bytes += n - m.bytes
	l.c.windowBytes.Add(n - m.bytes)
	m.bytes = n
}

// checkpoint writes every model whose panes changed, and deletes those
// forgotten.
func (l *latencies) checkpoint(t *engine.Task) error {
	for _, name := range l.forgotten {
		if _, back := l.models[name]; !back {
			if err := t.State.Delete(append([]byte{prefix}, name...)); err != nil {
				return err
			}
		}
	}
	l.forgotten = l.forgotten[:0]
	var err error
	l.each(func(name string, v []byte) {
		if err == nil {
			err = t.State.Set(append([]byte{prefix}, name...), v)
		}
	})
	return err
}

// each calls fn with the record of every model whose panes changed, and
// marks it clean: version 1, the pane count, then per pane its start and
// both aggregates (length-prefixed). v is valid during the call only.
func (l *latencies) each(fn func(name string, v []byte)) {
	for name, m := range l.models {
		if !m.dirty {
			continue
		}
		m.dirty = false
		starts := make([]int64, 0, len(m.panes))
		for s := range m.panes {
			starts = append(starts, s)
		}
		slices.Sort(starts)
		b := append(l.scratch[:0], 1)
		b = binary.AppendUvarint(b, uint64(len(starts)))
		for _, s := range starts {
			b = binary.AppendVarint(b, s)
			for i := range 2 {
				agg := m.panes[s][i].AppendBinary(nil)
				b = binary.AppendUvarint(b, uint64(len(agg)))
				b = append(b, agg...)
			}
		}
		l.scratch = b
		fn(name, b)
	}
}

var errCorrupt = errors.New("corrupt latency window record")

// close forgets every window (the task leaves).
func (l *latencies) close() {
	clear(l.models)
	l.c.windowBytes.Add(-l.bytes)
	l.bytes = 0
	l.forgotten = l.forgotten[:0]
}

func (l *latencies) restore(t *engine.Task) error {
	l.close()
	it, err := t.State.Iter([]byte{prefix}, []byte{prefix + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[1:])
		m, err := decodeModel(it.Value())
		if err != nil {
			return err
		}
		l.models[name] = m
		l.account(m)
	}
	return it.Error()
}

func decodeModel(b []byte) (*modelLat, error) {
	if len(b) < 1 || b[0] != 1 {
		return nil, errCorrupt
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > 1024 {
		return nil, errCorrupt
	}
	b = b[k:]
	m := &modelLat{panes: map[int64]*[2]windows.Agg{}, maxPane: math.MinInt64}
	for range n {
		s, k := binary.Varint(b)
		if k <= 0 {
			return nil, errCorrupt
		}
		b = b[k:]
		a := &[2]windows.Agg{}
		for i := range 2 {
			sz, k := binary.Uvarint(b)
			if k <= 0 || sz > uint64(len(b)-k) {
				return nil, errCorrupt
			}
			if err := a[i].UnmarshalBinary(b[k : k+int(sz)]); err != nil {
				return nil, err
			}
			b = b[k+int(sz):]
		}
		m.panes[s] = a
		m.maxPane = max(m.maxPane, s)
	}
	return m, nil
}
