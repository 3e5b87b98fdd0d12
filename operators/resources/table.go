package resources

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/windows"
)

// Sample is one value of a series at event time T (unix ns).
type Sample struct {
	T int64
	V float64
}

type series struct {
	id      semconv.Identity
	key     string // idText + "\x00" + metric, as read
	idText  string // valid UTF-8 (it goes into SeriesWindow)
	metric  string // valid UTF-8
	counter bool
	samples []Sample // by time
	// prev/next: the table's list by last update (most recent first);
	// hostIdx: the series' index in byHost[id.Host]; bytes: what it takes
	// (seriesBytes).
	prev, next *series
	hostIdx    int
	bytes      int64
}

// Limits bound the table. When a new series or sample would take the table
// past either, the series updated least recently go (Table.Evicted).
type Limits struct {
	// MaxSeries: most series held. Default 250,000.
	MaxSeries int
	// MaxTableBytes: most bytes held (series, their identities and
	// samples, estimated). Default 128 MiB.
	MaxTableBytes int64
}

// The default Limits.
const (
	DefaultMaxSeries     = 250_000
	DefaultMaxTableBytes = 128 << 20
)

// EnsureDefaults fills unset fields.
func (l *Limits) EnsureDefaults() {
	if l.MaxSeries <= 0 {
		l.MaxSeries = DefaultMaxSeries
	}
	if l.MaxTableBytes <= 0 {
		l.MaxTableBytes = DefaultMaxTableBytes
	}
}

// Table holds the resource time series. Safe for concurrent use: the
// engine's reader feeds it, tasks query it.
type Table struct {
	retain int64

	mu struct {
		sync.RWMutex
		series map[string]*series // key
		byHost map[string][]*series
		wm     *engine.GlobalWatermark
		fed    int
		limits Limits
		bytes  int64
		lru    series // sentinel: lru.next is the most recently updated
	}
	// Samples applied, records that did not decode, samples pruned, series
	// removed idle (no sample for longer than the retention), series
	// evicted by the Limits.
	Samples, Malformed, Pruned, Removed, Evicted atomic.Int64
	// Bytes is the estimated memory of the table (a gauge).
	Bytes atomic.Int64
}

// NewTable returns a table for a topic of partitions partitions written by
// as many tasks; samples older than the watermark minus retain go (the last
// of each series stays), and so do series with no sample since then. It
// has the default Limits (SetLimits).
func NewTable(partitions int32, idleness, retain time.Duration, now time.Time) *Table {
	t := &Table{retain: int64(retain)}
	t.mu.series = map[string]*series{}
	t.mu.byHost = map[string][]*series{}
	t.mu.wm = engine.NewGlobalWatermark(partitions, partitions, idleness, now)
	t.mu.lru.next, t.mu.lru.prev = &t.mu.lru, &t.mu.lru
	t.mu.limits.EnsureDefaults()
	return t
}

// SetLimits sets the table's limits (zero fields: the defaults) and
// evicts what is over them.
func (t *Table) SetLimits(l Limits) {
	l.EnsureDefaults()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.limits = l
	t.enforceLocked(nil)
}

// Global returns the engine.Global that feeds the table from topic.
func (t *Table) Global(topic string) engine.Global {
	return engine.Global{Topic: topic, Feed: t.Feed, End: t.End}
}

// Feed applies one record of the table's topic (data or marker).
func (t *Table) Feed(r *kgo.Record, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.wm.Observe(r, now) {
		return
	}
	if err := decodeSamples(r.Value, t.addLocked); err != nil {
		t.Malformed.Add(1)
	}
	if t.mu.fed++; t.mu.fed%4096 == 0 {
		t.pruneLocked(t.mu.wm.Current(now))
	}
}

// End marks the input complete (replay).
func (t *Table) End() {
	t.mu.Lock()
	t.mu.wm.End()
	t.mu.Unlock()
}

// Watermark is the table's watermark at processing time now.
func (t *Table) Watermark(now time.Time) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.wm.Current(now)
}

// Series is the number of series in the table.
func (t *Table) Series() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.mu.series)
}

// Add inserts a sample (tests and in-process use; Feed decodes records).
func (t *Table) Add(id semconv.Identity, metric string, counter bool, s Sample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addLocked(id, metric, counter, s)
}

// seriesBytes estimates what sr takes: the struct, its strings (identity,
// text, key, metric), its map entry and byHost slot, its samples.
func seriesBytes(sr *series) int64 {
	const fixed = 200 + 64 + 8 // struct, map entry, byHost slot
	id := &sr.id
	n := len(id.Service) + len(id.Instance) + len(id.Host) + len(id.GPUUUID) + len(id.GPUIndex) + len(id.Model)
	return int64(fixed + n + len(sr.idText) + len(sr.key) + len(sr.metric) + 16*cap(sr.samples))
}

// REQUIRES: t.mu held.
func (t *Table) addLocked(id semconv.Identity, metric string, counter bool, s Sample) {
	idText := id.String()
	key := idText + "\x00" + metric
	sr := t.mu.series[key]
	if sr == nil {
		sr = &series{id: id, key: key, idText: validUTF8(idText), metric: validUTF8(metric), counter: counter}
		t.mu.series[key] = sr
		sr.hostIdx = len(t.mu.byHost[id.Host])
		t.mu.byHost[id.Host] = append(t.mu.byHost[id.Host], sr)
	} else {
		sr.prev.next, sr.next.prev = sr.next, sr.prev // unlink
	}
	// Most recently updated first.
	sr.prev, sr.next = &t.mu.lru, t.mu.lru.next
	sr.next.prev, t.mu.lru.next = sr, sr
	t.Samples.Add(1)
	n := len(sr.samples)
	if n == 0 || sr.samples[n-1].T < s.T {
		sr.samples = append(sr.samples, s)
	} else if i := sort.Search(n, func(i int) bool { return sr.samples[i].T >= s.T }); sr.samples[i].T == s.T {
		sr.samples[i] = s // a re-scrape of the same instant: last wins
	} else {
		sr.samples = slices.Insert(sr.samples, i, s)
	}
	t.sizeLocked(sr)
	t.enforceLocked(sr)
}

// sizeLocked updates the table's bytes for a change of sr.
//
// REQUIRES: t.mu held.
func (t *Table) sizeLocked(sr *series) {
	b := seriesBytes(sr)
	t.mu.bytes += b - sr.bytes
	t.Bytes.Add(b - sr.bytes)
	sr.bytes = b
}

// enforceLocked evicts the least recently updated series, never keep, while
// the table is over its limits.
//
// REQUIRES: t.mu held.
func (t *Table) enforceLocked(keep *series) {
	l := &t.mu.limits
	for len(t.mu.series) > l.MaxSeries || t.mu.bytes > l.MaxTableBytes {
		sr := t.mu.lru.prev
		if sr == &t.mu.lru || sr == keep {
			return
		}
		t.removeLocked(sr)
		t.Evicted.Add(1)
	}
}

// removeLocked forgets sr.
//
// REQUIRES: t.mu held.
func (t *Table) removeLocked(sr *series) {
	delete(t.mu.series, sr.key)
	hs := t.mu.byHost[sr.id.Host]
	last := len(hs) - 1
	hs[sr.hostIdx] = hs[last]
	hs[sr.hostIdx].hostIdx = sr.hostIdx
	hs[last] = nil
	if last == 0 {
		delete(t.mu.byHost, sr.id.Host)
	} else {
		t.mu.byHost[sr.id.Host] = hs[:last]
	}
	sr.prev.next, sr.next.prev = sr.next, sr.prev
	sr.prev, sr.next = nil, nil
	t.mu.bytes -= sr.bytes
	t.Bytes.Add(-sr.bytes)
}

// REQUIRES: t.mu held.
func (t *Table) pruneLocked(wm int64) {
	if t.retain <= 0 || wm == windows.MinTime || wm == windows.MaxTime {
		return
	}
	cut := wm - t.retain
	for _, sr := range t.mu.series {
		n := len(sr.samples)
		if n > 0 && sr.samples[n-1].T < cut {
			// Idle for longer than the retention: a series of a pod, GPU
			// or server that is gone.
			t.Pruned.Add(int64(n))
			t.removeLocked(sr)
			t.Removed.Add(1)
			continue
		}
		// Keep the last sample before cut: it is in force at cut.
		i := sort.Search(n, func(i int) bool { return sr.samples[i].T >= cut })
		if i > 1 {
			k := copy(sr.samples, sr.samples[i-1:])
			t.Pruned.Add(int64(n - k))
			sr.samples = sr.samples[:k]
			if cap(sr.samples) > 4*k+8 {
				sr.samples = slices.Clip(slices.Clone(sr.samples))
			}
			t.sizeLocked(sr)
		}
	}
}

// validUTF8 is s with invalid UTF-8 replaced by U+FFFD (s itself when
// valid): series names and identities go into protobuf records.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Windows returns, for every series that matches req (see
// semconv.Identity.Matches), its window over [start, end], sorted by metric
// then resource.
func (t *Table) Windows(req semconv.Identity, start, end int64) []*braidpb.SeriesWindow {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*braidpb.SeriesWindow
	for _, sr := range t.mu.byHost[req.Host] {
		if !req.Matches(sr.id) {
			continue
		}
		if w := window(sr, start, end); w != nil {
			out = append(out, w)
		}
	}
	sortWindows(out)
	return out
}

// WindowsOn returns the windows over [start, end] of every series on host
// that match accepts, sorted as Windows sorts them.
func (t *Table) WindowsOn(host string, match func(series semconv.Identity) bool, start, end int64) []*braidpb.SeriesWindow {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*braidpb.SeriesWindow
	for _, sr := range t.mu.byHost[host] {
		if !match(sr.id) {
			continue
		}
		if w := window(sr, start, end); w != nil {
			out = append(out, w)
		}
	}
	sortWindows(out)
	return out
}

func sortWindows(out []*braidpb.SeriesWindow) {
	slices.SortFunc(out, func(a, b *braidpb.SeriesWindow) int {
		if c := strings.Compare(a.Metric, b.Metric); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
}

// window summarises sr over [start, end]; nil if it has no sample at or
// before end.
func window(sr *series, start, end int64) *braidpb.SeriesWindow {
	s := sr.samples
	// first index with T > start, and with T > end
	i := sort.Search(len(s), func(i int) bool { return s[i].T > start })
	j := sort.Search(len(s), func(i int) bool { return s[i].T > end })
	if j == 0 {
		return nil
	}
	w := &braidpb.SeriesWindow{Metric: sr.metric, Resource: sr.idText, Counter: sr.counter,
		AtEnd: s[j-1].V, Samples: uint32(j - i), Min: math.Inf(1), Max: math.Inf(-1)}
	from := i
	if i > 0 {
		v := s[i-1].V
		w.AtStart = &v
		from = i - 1
	}
	for _, x := range s[from:j] {
		w.Min = min(w.Min, x.V)
		w.Max = max(w.Max, x.V)
	}
	if sr.counter && w.AtStart != nil {
		d := w.AtEnd - *w.AtStart
		w.Delta = &d
	}
	return w
}

// Record values of the table's topic: a sequence of samples of one
// identity (the record key is its text):
//
//	value  = version(1) identity sample*
//	identity = 6 × string (service, instance, host, gpu uuid, gpu index, model)
//	sample = metric:string counter:byte time:varint value:float64 (big endian bits)
//	string = uvarint length, bytes
var errMalformed = errors.New("resources: malformed sample record")

// AppendIdentity starts a record value for id.
func AppendIdentity(b []byte, id semconv.Identity) []byte {
	b = append(b, 1)
	for _, s := range []string{id.Service, id.Instance, id.Host, id.GPUUUID, id.GPUIndex, id.Model} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// AppendSample appends one sample to a record value.
func AppendSample(b []byte, metric string, counter bool, s Sample) []byte {
	b = binary.AppendUvarint(b, uint64(len(metric)))
	b = append(b, metric...)
	c := byte(0)
	if counter {
		c = 1
	}
	b = append(b, c)
	b = binary.AppendVarint(b, s.T)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(s.V))
}

func decodeSamples(b []byte, fn func(semconv.Identity, string, bool, Sample)) error {
	if len(b) < 1 || b[0] != 1 {
		return errMalformed
	}
	b = b[1:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	var id semconv.Identity
	for _, p := range []*string{&id.Service, &id.Instance, &id.Host, &id.GPUUUID, &id.GPUIndex, &id.Model} {
		s, ok := str()
		if !ok {
			return errMalformed
		}
		*p = s
	}
	for len(b) > 0 {
		metric, ok := str()
		if !ok || len(b) < 1 {
			return errMalformed
		}
		counter := b[0] == 1
		b = b[1:]
		ts, k := binary.Varint(b)
		if k <= 0 || len(b) < k+8 {
			return errMalformed
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(b[k:]))
		b = b[k+8:]
		fn(id, metric, counter, Sample{T: ts, V: v})
	}
	return nil
}
