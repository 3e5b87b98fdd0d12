package view

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/state"
)

// Options configure an Index. The zero value is usable after
// EnsureDefaults, but for Dir.
type Options struct {
	// Dir holds the index's Pebble store. Required.
	Dir string
	// Retention is how much event time the index keeps, behind the latest
	// event time it has seen. Default 1h.
	Retention time.Duration
	// MaxTraces, MaxIncidents and MaxAlerts bound what the index holds
	// (the oldest go first). Defaults 200,000, 10,000 and 10,000 alert
	// episodes.
	MaxTraces    int
	MaxIncidents int
	MaxAlerts    int
	// CacheBytes is Pebble's block cache and memtables together. Default
	// 64 MiB.
	CacheBytes int64
	Logger     *slog.Logger
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.Retention == 0 {
		o.Retention = time.Hour
	}
	if o.MaxTraces == 0 {
		o.MaxTraces = 200_000
	}
	if o.MaxIncidents == 0 {
		o.MaxIncidents = 10_000
	}
	if o.MaxAlerts == 0 {
		o.MaxAlerts = 10_000
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("view: Options.Dir is required"))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("view: retention %v is negative", o.Retention))
	}
	if o.MaxTraces < 1 || o.MaxIncidents < 1 || o.MaxAlerts < 1 {
		errs = append(errs, fmt.Errorf("view: max traces %d, incidents %d, alerts %d: want at least 1 each", o.MaxTraces, o.MaxIncidents, o.MaxAlerts))
	}
	if o.CacheBytes < 16<<20 {
		errs = append(errs, fmt.Errorf("view: cache %d bytes is below the minimum of 16 MiB", o.CacheBytes))
	}
	return errors.Join(errs...)
}

// Keys of the index's keyspace.
const (
	prefixTrace    = 't' // t<16-byte trace id> → FusedTrace (latest revision, whole)
	prefixSummary  = 's' // s<16-byte trace id> → summary JSON
	prefixPart     = 'p' // p<16-byte id><4-byte revision><4-byte part> → a part of a revision not yet complete
	prefixIncident = 'i' // i<id> → Incident (latest revision)
	prefixAlert    = 'a' // a<key>\x00<episode> → Alert (latest change of the episode)
)

var summarySize = unsafe.Sizeof(summary{})

// Index holds recent fused traces, incidents and alerts: summaries in
// memory for the queries, whole records in Pebble for the pages, and the
// input position they reflect, committed with them. One writer (Apply)
// and any number of concurrent readers.
type Index struct {
	opts  Options
	store *state.Store
	ks    *state.Keyspace

	// Invalid counts records of braid's topics the index could not read.
	Invalid atomic.Int64
	// deletes are the store keys of what the last publish evicted; the
	// next Apply deletes them (the writer's own field). A crash in between
	// leaves them in the store, and the next load evicts them again.
	deletes [][]byte
	// applying is held by Apply for its whole run and by Close, so that a
	// Close waits for the Apply in flight instead of closing the store
	// under it.
	applying sync.Mutex

	mu struct {
		sync.RWMutex
		closed bool
		// traces in arrival order from head; pos maps an id to its absolute
		// place (index into ring).
		ring      []*summary
		head      int
		pos       map[[16]byte]int
		incidents map[string]*incidentEntry
		alerts    map[string]*alertEntry // by alertKey(key, episode)
		newest    int64                  // latest event time seen, unix ns
		offsets   state.Offsets
		read      map[string]int64
		lag       int64
		strs      map[string]string // interned dimension values
	}
}

type incidentEntry struct {
	sum   IncidentSummary
	last  int64 // unix ns
	trace map[[16]byte]bool
}

type alertEntry struct {
	key     string
	episode uint64
	a       *braidpb.Alert
	at      int64 // window end, unix ns
}

// Open opens (or creates) the index in opts.Dir and loads what it held.
func Open(opts Options) (*Index, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	st, err := state.Open(state.Options{Dir: opts.Dir, MemoryBudget: opts.CacheBytes, NoSync: true, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	ks, err := st.Keyspace("view")
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("view: %w", err)
	}
	ix := &Index{opts: opts, store: st, ks: ks}
	ix.mu.pos = map[[16]byte]int{}
	ix.mu.incidents = map[string]*incidentEntry{}
	ix.mu.alerts = map[string]*alertEntry{}
	ix.mu.read = map[string]int64{}
	ix.mu.strs = map[string]string{}
	if err := ix.load(); err != nil {
		ix.Close()
		return nil, err
	}
	return ix, nil
}

// load reads the summaries, incidents, alerts and offsets of the store.
func (ix *Index) load() error {
	offs, err := ix.ks.Offsets()
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	ix.mu.offsets = offs
	it, err := ix.ks.Iter(nil, nil)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	var sums []*summary
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) == 0 {
			continue
		}
		switch k[0] {
		case prefixSummary:
			if len(k) != 17 {
				continue
			}
			s := &summary{}
			if json.Unmarshal(v, s) != nil {
				ix.Invalid.Add(1)
				continue
			}
			copy(s.ID[:], k[1:])
			ix.intern(s)
			sums = append(sums, s)
		case prefixIncident:
			var inc braidpb.Incident
			if proto.Unmarshal(v, &inc) != nil {
				ix.Invalid.Add(1)
				continue
			}
			ix.mu.incidents[inc.Id] = newIncidentEntry(&inc)
		case prefixAlert:
			var a braidpb.Alert
			if proto.Unmarshal(v, &a) != nil {
				ix.Invalid.Add(1)
				continue
			}
			e := newAlertEntry(&a, alertKeyOfStoreKey(k))
			ix.mu.alerts[alertKey(e.key, e.episode)] = e
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	slices.SortFunc(sums, func(a, b *summary) int { return cmp.Compare(a.End, b.End) })
	for _, s := range sums {
		ix.mu.pos[s.ID] = len(ix.mu.ring)
		ix.mu.ring = append(ix.mu.ring, s)
		ix.mu.newest = max(ix.mu.newest, s.End)
	}
	for _, e := range ix.mu.incidents {
		ix.mu.newest = max(ix.mu.newest, e.last)
	}
	ix.deletes = ix.publish(pending{}, ix.mu.offsets, nil)
	return nil
}

// Close closes the store. Queries after Close return errClosed.
func (ix *Index) Close() error {
	ix.applying.Lock()
	defer ix.applying.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.mu.closed {
		return nil
	}
	ix.mu.closed = true
	err := ix.ks.Close()
	return errors.Join(err, ix.store.Close())
}

var errClosed = errors.New("view: index closed")

// Offsets returns the input position the index reflects (topic →
// partition → next offset), nil when it has read nothing.
func (ix *Index) Offsets() state.Offsets {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := state.Offsets{}
	for t, ps := range ix.mu.offsets {
		out[t] = map[int32]int64{}
		for p, o := range ps {
			out[t][p] = o
		}
	}
	return out
}

// Record is one record of braid's topics, as Apply takes it.
type Record struct {
	Kind      Kind
	Topic     string
	Partition int32
	Offset    int64
	// Key is the record's Kafka key: for braid.alerts the alert's key
	// (rule/group, as in its generatorURL).
	Key   []byte
	Value []byte
}

// Kind is what a topic holds.
type Kind int

const (
	KindFused Kind = iota + 1
	KindIncident
	KindAlert
)

// pending is what one Apply publishes to memory once committed.
type pending struct {
	traces    []*summary
	incidents []*incidentEntry
	alerts    []*alertEntry
}

// Apply indexes records and commits them with the position after them, in
// one batch; then the queries see them. Records it cannot read are counted
// (Invalid) and skipped. Only one goroutine may call Apply.
func (ix *Index) Apply(recs []Record) error {
	ix.applying.Lock()
	defer ix.applying.Unlock()
	ix.mu.RLock()
	closed := ix.mu.closed
	offs := state.Offsets{}
	for t, ps := range ix.mu.offsets {
		offs[t] = map[int32]int64{}
		for p, o := range ps {
			offs[t][p] = o
		}
	}
	ix.mu.RUnlock()
	if closed {
		return errClosed
	}
	var pend pending
	read := map[string]int64{}
	for i := range recs {
		r := &recs[i]
		if offs[r.Topic] == nil {
			offs[r.Topic] = map[int32]int64{}
		}
		offs[r.Topic][r.Partition] = r.Offset + 1
		read[r.Topic]++
		var err error
		switch r.Kind {
		case KindFused:
			err = ix.applyFused(r, &pend)
		case KindIncident:
			err = ix.applyIncident(r, &pend)
		case KindAlert:
			err = ix.applyAlert(r, &pend)
		}
		if err != nil {
			var bad badRecord
			if errors.As(err, &bad) {
				ix.Invalid.Add(1)
				ix.opts.Logger.Debug("view: skipping record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				continue
			}
			ix.ks.Rollback()
			return err
		}
	}
	// What the last Apply evicted from memory leaves the store now.
	for _, k := range ix.deletes {
		if err := ix.ks.Delete(k); err != nil {
			ix.ks.Rollback()
			return err
		}
	}
	if err := ix.ks.Checkpoint(offs); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	ix.deletes = ix.publish(pend, offs, read)
	return nil
}

type badRecord struct{ err error }

func (b badRecord) Error() string { return b.err.Error() }

func (ix *Index) applyFused(r *Record, pend *pending) error {
	var ft braidpb.FusedTrace
	if err := unmarshal(r.Value, &ft); err != nil {
		return badRecord{fmt.Errorf("fused record: %w", err)}
	}
	if r.Value[0] == '{' { // outputs.format json: stored as protobuf
		b, err := proto.Marshal(&ft)
		if err != nil {
			return err
		}
		r.Value = b
	}
	if len(ft.TraceId) != 16 {
		return badRecord{fmt.Errorf("fused record: trace id of %d bytes", len(ft.TraceId))}
	}
	value := r.Value
	if ft.Parts > 1 {
		whole, done, err := ix.addPart(&ft, r.Value)
		if err != nil || !done {
			return err
		}
		value = whole
		ft.Reset()
		if err := proto.Unmarshal(whole, &ft); err != nil {
			return badRecord{fmt.Errorf("fused record parts: %w", err)}
		}
	}
	var id [16]byte
	copy(id[:], ft.TraceId)
	// An older revision than the one indexed (a re-read) is ignored.
	ix.mu.RLock()
	if p, ok := ix.mu.pos[id]; ok && ix.mu.ring[p].Revision > ft.Revision {
		ix.mu.RUnlock()
		return nil
	}
	ix.mu.RUnlock()
	s := summarize(&ft)
	sj, err := json.Marshal(&s)
	if err != nil {
		return err
	}
	if err := ix.ks.Set(traceKey(prefixTrace, id), value); err != nil {
		return err
	}
	if err := ix.ks.Set(traceKey(prefixSummary, id), sj); err != nil {
		return err
	}
	// Several revisions of a trace in one batch: the last wins.
	for i, p := range pend.traces {
		if p.ID == id {
			pend.traces = slices.Delete(pend.traces, i, i+1)
			break
		}
	}
	pend.traces = append(pend.traces, &s)
	return nil
}

// addPart stores one part of a revision written as parts; when the last
// arrives it returns the whole (the parts' values concatenated in order)
// and deletes them.
func (ix *Index) addPart(ft *braidpb.FusedTrace, value []byte) ([]byte, bool, error) {
	if ft.Part >= ft.Parts || ft.Parts > 1<<16 {
		return nil, false, badRecord{fmt.Errorf("fused record: part %d of %d", ft.Part, ft.Parts)}
	}
	if err := ix.ks.Set(partKey(ft.TraceId, ft.Revision, ft.Part), value); err != nil {
		return nil, false, err
	}
	if ft.Part != ft.Parts-1 {
		return nil, false, nil
	}
	var whole []byte
	n := uint32(0)
	for p := uint32(0); p < ft.Parts; p++ {
		k := partKey(ft.TraceId, ft.Revision, p)
		v, ok, err := ix.ks.Get(nil, k)
		if err != nil {
			return nil, false, err
		}
		if ok {
			whole = append(whole, v...)
			n++
		}
		if err := ix.ks.Delete(k); err != nil {
			return nil, false, err
		}
	}
	// Parts of earlier revisions that never completed go too.
	if err := ix.ks.DeleteRange(partKey(ft.TraceId, 0, 0), partKey(ft.TraceId, ft.Revision, 0)); err != nil {
		return nil, false, err
	}
	if n != ft.Parts {
		return nil, false, badRecord{fmt.Errorf("fused record: %d of %d parts of revision %d", n, ft.Parts, ft.Revision)}
	}
	return whole, true, nil
}

// unmarshal reads a record of braid's topics: protobuf, or protojson
// (outputs.format json; a protobuf message never starts with '{', which
// would be an unsupported group field).
func unmarshal(b []byte, m proto.Message) error {
	if len(b) == 0 {
		return errors.New("empty value")
	}
	if b[0] == '{' {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
	}
	return proto.Unmarshal(b, m)
}

func traceKey(prefix byte, id [16]byte) []byte {
	k := make([]byte, 17)
	k[0] = prefix
	copy(k[1:], id[:])
	return k
}

func partKey(id []byte, rev, part uint32) []byte {
	k := make([]byte, 0, 25)
	k = append(k, prefixPart)
	k = append(k, id...)
	k = append(k, byte(rev>>24), byte(rev>>16), byte(rev>>8), byte(rev))
	return append(k, byte(part>>24), byte(part>>16), byte(part>>8), byte(part))
}

func (ix *Index) applyIncident(r *Record, pend *pending) error {
	var inc braidpb.Incident
	if err := unmarshal(r.Value, &inc); err != nil {
		return badRecord{fmt.Errorf("incident record: %w", err)}
	}
	if r.Value[0] == '{' {
		b, err := proto.Marshal(&inc)
		if err != nil {
			return err
		}
		r.Value = b
	}
	if inc.Id == "" {
		return badRecord{errors.New("incident record without an id")}
	}
	ix.mu.RLock()
	old := ix.mu.incidents[inc.Id]
	ix.mu.RUnlock()
	if old != nil && old.sum.Revision > inc.Revision {
		return nil
	}
	if err := ix.ks.Set(append([]byte{prefixIncident}, inc.Id...), r.Value); err != nil {
		return err
	}
	pend.incidents = append(pend.incidents, newIncidentEntry(&inc))
	return nil
}

func newIncidentEntry(inc *braidpb.Incident) *incidentEntry {
	e := &incidentEntry{sum: incidentSummary(inc), last: int64(inc.LastUnixNano), trace: map[[16]byte]bool{}}
	for _, p := range inc.Polluted {
		if len(p.TraceId) == 16 {
			e.trace[[16]byte(p.TraceId)] = true
		}
	}
	if r := inc.GetRoot(); len(r.GetTraceId()) == 16 {
		e.trace[[16]byte(r.TraceId)] = true
	}
	return e
}

func (ix *Index) applyAlert(r *Record, pend *pending) error {
	var a braidpb.Alert
	if err := unmarshal(r.Value, &a); err != nil {
		return badRecord{fmt.Errorf("alert record: %w", err)}
	}
	if r.Value[0] == '{' {
		b, err := proto.Marshal(&a)
		if err != nil {
			return err
		}
		r.Value = b
	}
	if a.Rule == "" {
		return badRecord{errors.New("alert record without a rule")}
	}
	e := newAlertEntry(&a, string(r.Key))
	if err := ix.ks.Set(alertStoreKey(e.key, e.episode), r.Value); err != nil {
		return err
	}
	pend.alerts = append(pend.alerts, e)
	return nil
}

// newAlertEntry indexes a under key, its record's Kafka key, or when
// that is not the alert's (no key, another rule's) under AlertKeyOf(a).
func newAlertEntry(a *braidpb.Alert, key string) *alertEntry {
	if !strings.HasPrefix(key, a.Rule+"/") || strings.ContainsRune(key, 0) {
		key = AlertKeyOf(a)
	}
	// Its time: the end of the window it was evaluated on, or, from a
	// writer that leaves that out, the latest time it carries.
	at := a.WindowEndUnixNano
	if at == 0 {
		at = max(a.ActiveSinceUnixNano, a.StartsAtUnixNano, a.EndsAtUnixNano)
	}
	return &alertEntry{key: key, episode: a.Episode, a: a, at: int64(at)}
}

// AlertKeyOf is an alert's key as braid.alerts writes it, rebuilt from
// the record: rule/group, the group's labels as name="value" (Go-quoted)
// joined by ",", in name order (the alerts stage writes them in the
// rule's group_by order, name order for the default rules).
func AlertKeyOf(a *braidpb.Alert) string {
	names := make([]string, 0, len(a.Group))
	for k := range a.Group {
		names = append(names, k)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteString(a.Rule)
	b.WriteByte('/')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + strconv.Quote(a.Group[k]))
	}
	return b.String()
}

func alertKey(key string, episode uint64) string {
	return key + "\x00" + strconv.FormatUint(episode, 10)
}

func alertStoreKey(key string, episode uint64) []byte {
	return append([]byte{prefixAlert}, alertKey(key, episode)...)
}

// alertKeyOfStoreKey is the alert key of an alertStoreKey.
func alertKeyOfStoreKey(k []byte) string {
	key, _, _ := strings.Cut(string(k[1:]), "\x00")
	return key
}

func oldestIncidents(m map[string]*incidentEntry, n int) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(m[a].last, m[b].last) })
	return ids[:min(n, len(ids))]
}

// publish makes a committed Apply visible and evicts what no longer fits:
// traces beyond MaxTraces or older than Retention behind the newest event
// time (oldest first), and likewise incidents and alert episodes. It
// returns the evicted items' store keys.
func (ix *Index) publish(pend pending, offs state.Offsets, read map[string]int64) (evicted [][]byte) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, s := range pend.traces {
		ix.intern(s)
		ix.mu.newest = max(ix.mu.newest, s.End)
		if p, ok := ix.mu.pos[s.ID]; ok {
			ix.mu.ring[p] = s
			continue
		}
		ix.mu.pos[s.ID] = len(ix.mu.ring)
		ix.mu.ring = append(ix.mu.ring, s)
	}
	for _, e := range pend.incidents {
		ix.mu.newest = max(ix.mu.newest, e.last)
		ix.mu.incidents[e.sum.ID] = e
	}
	for _, e := range pend.alerts {
		ix.mu.alerts[alertKey(e.key, e.episode)] = e
	}
	cutoff := ix.mu.newest - int64(ix.opts.Retention)
	// Traces, oldest first.
	for ix.mu.head < len(ix.mu.ring) {
		s := ix.mu.ring[ix.mu.head]
		if s != nil && len(ix.mu.pos) <= ix.opts.MaxTraces && s.End >= cutoff {
			break
		}
		if s != nil {
			delete(ix.mu.pos, s.ID)
			evicted = append(evicted, traceKey(prefixTrace, s.ID), traceKey(prefixSummary, s.ID))
		}
		ix.mu.ring[ix.mu.head] = nil
		ix.mu.head++
	}
	if ix.mu.head > 1024 && ix.mu.head > len(ix.mu.ring)/2 {
		ring := make([]*summary, 0, len(ix.mu.ring)-ix.mu.head+1024)
		for _, s := range ix.mu.ring[ix.mu.head:] {
			if s != nil {
				ix.mu.pos[s.ID] = len(ring)
				ring = append(ring, s)
			}
		}
		ix.mu.ring, ix.mu.head = ring, 0
	}
	dropIncident := func(id string) {
		delete(ix.mu.incidents, id)
		evicted = append(evicted, append([]byte{prefixIncident}, id...))
	}
	for id, e := range ix.mu.incidents {
		if e.last < cutoff {
			dropIncident(id)
		}
	}
	if over := len(ix.mu.incidents) - ix.opts.MaxIncidents; over > 0 {
		for _, id := range oldestIncidents(ix.mu.incidents, over) {
			dropIncident(id)
		}
	}
	dropAlert := func(k string) {
		delete(ix.mu.alerts, k)
		evicted = append(evicted, append([]byte{prefixAlert}, k...))
	}
	for k, e := range ix.mu.alerts {
		if e.at < cutoff {
			dropAlert(k)
		}
	}
	if over := len(ix.mu.alerts) - ix.opts.MaxAlerts; over > 0 {
		type ka struct {
			k  string
			at int64
		}
		all := make([]ka, 0, len(ix.mu.alerts))
		for k, e := range ix.mu.alerts {
			all = append(all, ka{k, e.at})
		}
		slices.SortFunc(all, func(a, b ka) int { return cmp.Compare(a.at, b.at) })
		for _, x := range all[:over] {
			dropAlert(x.k)
		}
	}
	ix.mu.offsets = offs
	for t, n := range read {
		ix.mu.read[t] += n
	}
	return evicted
}

// intern makes the summary's dimension strings shared with the others'.
func (ix *Index) intern(s *summary) {
	for _, p := range []*string{&s.Model, &s.Instance, &s.Host, &s.GPU, &s.Service, &s.Tenant, &s.Incident} {
		if *p == "" {
			continue
		}
		if v, ok := ix.mu.strs[*p]; ok {
			*p = v
			continue
		}
		if len(ix.mu.strs) < 1<<20 {
			ix.mu.strs[*p] = *p
		}
	}
}

// setLag records the consumer's lag behind the topics' ends.
func (ix *Index) setLag(lag int64) {
	ix.mu.Lock()
	ix.mu.lag = lag
	ix.mu.Unlock()
}

// trace returns the stored FusedTrace of id.
func (ix *Index) trace(id [16]byte) (*braidpb.FusedTrace, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.mu.closed {
		return nil, errClosed
	}
	if _, ok := ix.mu.pos[id]; !ok {
		return nil, nil
	}
	v, ok, err := ix.ks.GetCommitted(nil, traceKey(prefixTrace, id))
	if err != nil || !ok {
		return nil, err
	}
	var ft braidpb.FusedTrace
	if err := proto.Unmarshal(v, &ft); err != nil {
		return nil, err
	}
	return &ft, nil
}

// incident returns the stored Incident of id.
func (ix *Index) incident(id string) (*braidpb.Incident, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.mu.closed {
		return nil, errClosed
	}
	if ix.mu.incidents[id] == nil {
		return nil, nil
	}
	v, ok, err := ix.ks.GetCommitted(nil, append([]byte{prefixIncident}, id...))
	if err != nil || !ok {
		return nil, err
	}
	var inc braidpb.Incident
	if err := proto.Unmarshal(v, &inc); err != nil {
		return nil, err
	}
	return &inc, nil
}
