package fuse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/windows"
)

// The kvgraph stage runs in the same task (see operators/kvgraph): ingest
// sends every KV-block event log (attribute kv.op), compute-sanitizer line
// and NVRM Xid line to the task that owns hash(host.name) — one host's GPUs
// in one task, so propagation through a GPU's prefix cache is seen by one
// processor — in place or through Config.KVTopic. They are not trace
// members. When an incident names polluted requests, the trace of each gets
// an incident member (kindIncident) through the repartition topic, so its
// FusedTrace carries the incident id and FLAG_POLLUTED.

// kvStage is the KV-cache stage of a task: ingest's routing of KV logs to
// the task of their host (route, flush, drop), the KV events routed here,
// held in event-time order until the watermark releases them (buffer,
// release), and the kvgraph processor they go to. Its state is its own:
// the fuse stage hears of incidents through kvgraph.Config.OnIncident.
// Used on the task's goroutine only.
type kvStage struct {
	outputs   // the stage's configuration and counters (KVLogs, KVBuffered, …); the detector's are kv.Counters()
	partition int32
	input     int // the KV topic's input index (engine.Task.MarkerHorizon)
	// tagsInput: the repartition topic's input index, where the tags of
	// the incidents go (engine.Task.UpstreamWatermark); wm the watermark
	// held events were released by.
	tagsInput int
	wm        int64
	kv        *kvgraph.Processor

	// The KV events of the record being processed that go to other
	// tasks (route), per task, sent as one record each at its end
	// (flush); to lists the tasks with some.
	out []chunkWriter
	to  []int32
	key []byte // scratch

	buf        minHeap[*kvEvent] // KV events waiting for the watermark
	fresh      []*kvEvent        // buffered since the last checkpoint
	seq        uint64
	bytes      int64             // memory of buf (kvEventBytes) and ahead, bounded by KVGraph.MaxKVBufferBytes
	aheadBytes int64             // of which ahead's values
	ahead      map[uint64][]byte // by seq: members read from state ahead of their turn (readAhead)
	front      kvEvent           // the latest stored event deleted (time, seq): every KV tombstone is at or before its key
	// KV events held in state only (shedPlaces): every held event at or
	// after horizon, none before it; unplacedArrived is the latest
	// processing time one of them arrived (their LiveHold counts from it).
	unplaced        int64
	horizon         kvEvent
	unplacedArrived int64
	backlog         bool // release left events due for the next call
}

// onWatermark implements stage: it releases the held events (at most 4
// slices of them) and advances the detector's event time, never past an
// event still held (a backlog beyond this call's budget): it would expire
// and close on state those events still change. What releases them is the
// watermark of what may still bring a KV event — the sources and the
// tasks that forward to the KV topic — not the task's, which also covers
// the repartition topic: its markers wait for the tags of the incidents
// those events show (held).
func (k *kvStage) onWatermark(t *engine.Task, wm int64) (bool, error) {
	k.wm = max(k.wm, wm, t.UpstreamWatermark(k.tagsInput))
	err := k.advance(t, k.wm, 4*timerSlice)
	return k.backlogged(), err
}

func (k *kvStage) advance(t *engine.Task, wm int64, budget int) error {
	if err := k.release(t, wm, budget); err != nil {
		return err
	}
	kvWM := wm
	if ts, _, ok := k.next(); ok && ts <= wm {
		kvWM = ts - 1
	}
	return k.kv.OnWatermark(t, kvWM)
}

// prepareCheckpoint writes the events buffered since the last checkpoint
// and the detector's changes.
func (k *kvStage) prepareCheckpoint(t *engine.Task) error {
	if err := k.checkpointBuffer(t); err != nil {
		return err
	}
	return k.kv.PrepareCheckpoint(t)
}

// restore reloads the held events and the detector.
func (k *kvStage) restore(t *engine.Task) error {
	k.wm = windows.MinTime
	if err := k.restoreBuffer(t); err != nil {
		return err
	}
	return k.kv.Restore(t)
}

// held implements holder: the earliest event held (the tags of the
// incidents it and later events show are timed at their victims' reads,
// at or after it). It holds a watermark only once that watermark has
// passed it: the events a slice left due, or due by a watermark the stage
// has not been handed yet (a task's markers carry its inputs' watermark
// of the moment).
func (k *kvStage) held() int64 {
	if ts, _, ok := k.next(); ok {
		return ts
	}
	return math.MaxInt64
}

// backlogged reports whether events are due that the last call left.
func (k *kvStage) backlogged() bool { return k.backlog || k.kv.Backlog() }

// close leaves the stage's gauges and forgets the held events.
func (k *kvStage) close() {
	k.c.KVBuffered.Add(-int64(len(k.buf)) - k.unplaced)
	k.addBytes(-k.bytes)
	k.buf, k.ahead, k.aheadBytes, k.unplaced = nil, nil, 0, 0
}

// isKVLog reports whether a serialized LogRecord is a KV-block event or a
// line of supporting evidence for the kvgraph stage.
func isKVLog(log []byte) bool {
	if _, ok := semconv.LookupValue(log, semconv.LogRecordAttrs, "kv.op"); ok {
		return true
	}
	body := semconv.LogBody(log)
	if body.Type != semconv.ValueString {
		return false
	}
	return bytes.HasPrefix(body.Raw(), []byte("=========")) || bytes.Contains(body.Raw(), []byte("NVRM: Xid"))
}

// route sends a KV log to the kvgraph task of its host. A KV event that
// breaks the convention goes by the kvgraph error policy, with the input
// record it came from (kvgraph.Processor.Reject); a large one is slimmed to
// what the detector reads (kvgraph.Slim), so that the records forwarded and
// the events held are bounded whatever else the input carried.
//
// The event is checked as the message held it (otlp.Item.Original): the
// decoder has repaired invalid UTF-8 in the item's bytes, and an identity
// that was invalid must be rejected, not taken repaired; its dead-letter
// copy is the log record and resource as read. What is forwarded is the
// repaired item: its identities are the ones checked, free text repaired.
func (k *kvStage) route(t *engine.Task, it *otlp.Item, rec *kgo.Record) error {
	k.c.KVLogs.Add(1)
	res, lr := it.Original()
	if err := kvgraph.Check(res, lr); err != nil {
		return k.kv.Reject(t, res, lr, kvgraph.Origin{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}, err)
	}
	if len(it.Resource)+len(it.Payload)+len(it.Scope) > kvSlimBytes {
		slim := *it
		var ok bool
		slim.Resource, slim.Payload, ok = kvgraph.Slim(nil, nil, it.Resource, it.Payload, it.Time)
		if ok {
			slim.Scope = nil
			it = &slim
		}
	}
	host, _ := semconv.Lookup(it.Resource, semconv.ResourceAttrs, "host.name")
	q := otlp.HashPartition([]byte(host), k.cfg.Partitions)
	if q == k.partition {
		w := chunkWriter{}
		w.appendItem(it, otlp.SignalLogs, rec.Topic, rec.Partition, rec.Offset)
		return k.buffer(t, w.buf, it.Time, t.Now().UnixNano())
	}
	if k.out == nil {
		k.out = make([]chunkWriter, k.cfg.Partitions)
	}
	w := &k.out[q]
	if w.n == 0 {
		k.to = append(k.to, q)
	}
	w.appendItem(it, otlp.SignalLogs, rec.Topic, rec.Partition, rec.Offset)
	return nil
}

// flush sends the KV events route collected for other tasks: one
// record per task (more only if they pass the record limit), their
// events in input order, a resource shared by consecutive events written
// once. Per event, a record of its own cost more than the detector.
func (k *kvStage) flush(t *engine.Task) error {
	for _, q := range k.to {
		w := &k.out[q]
		if err := k.emitMembers(t, k.cfg.KVTopic, q, nil, nil, w.buf); err != nil {
			return err
		}
		buf := w.buf[:0]
		if cap(buf) > kvOutKeep {
			buf = nil // a large record's: not kept for every later one
		}
		w.reset(buf)
	}
	k.to = k.to[:0]
	return nil
}

// kvOutKeep: a buffer of flush larger than this is let go after use.
const kvOutKeep = 256 << 10

// drop forgets what route collected and was not sent (the record
// before failed part way).
func (k *kvStage) drop() {
	for _, q := range k.to {
		k.out[q].reset(k.out[q].buf[:0])
	}
	k.to = k.to[:0]
}

// kvSlimBytes: a KV log whose resource, scope and record take more is
// slimmed before it is held or forwarded. A slimmed event is at most a few
// KiB (the bounds of kvgraph.Check), far below any record limit.
const kvSlimBytes = 4096

// process buffers KV logs routed here for the kvgraph processor, each
// read (for KVGraph.LiveHold) when the task that forwarded it read it.
func (k *kvStage) process(t *engine.Task, rec *kgo.Record, _ int) error {
	read := forwardedAt(t)
	return readMembers(rec.Value, func(m *member) error {
		w := chunkWriter{}
		w.appendMember(m)
		return k.buffer(t, w.buf, m.time, read)
	})
}

// forwardedAt is when the task that forwarded the record being processed
// read what it holds (processing time, unix ns): the record's timestamp
// (engine.Task.RecordTime), which its producer set while processing the
// input record the events came in (or the broker's append time, moments
// later), never later than now. The live hold counts from then:
// MarkerHorizon bounds what other tasks read before a time, whichever task
// reads it, and a forwarded event waited a checkpoint already. Now when
// the record has no timestamp.
func forwardedAt(t *engine.Task) int64 {
	now := t.Now().UnixNano()
	if ts := t.RecordTime(); ts != windows.MinTime {
		return min(now, ts)
	}
	return now
}

// The kvgraph processor follows each block's life op by op, so it must see
// a GPU's events in the order they happened, and they do not arrive so:
// servers export in batches, the Collector batches again, a host's events
// come from several input partitions. The task holds KV events in event
// time order (in state, so a restart loses none) and hands them over once
// the watermark has passed them; one that arrives behind the watermark goes
// at once (counted in KVLateEvents). Live (the task caught up with its
// inputs) the earliest held event also goes once it has waited
// KVGraph.LiveHold of processing time and every task has since committed
// what it forwarded here (engine.Task.MarkerHorizon): the watermark trails
// the freshest data by the out-of-orderness bound, detection need not.
type kvEvent struct {
	time    int64
	seq     uint64
	arrived int64  // processing time it was read, here or by the task that forwarded it (or restored), ns
	member  []byte // one member: the log record, its resource and origin; nil when spilled
	stored  bool   // has a key in the keyspace
	spilled bool   // its member is in the keyspace only (the share was full)
}

const prefixKV = byte('v')

// buffer holds rec, one member at event time ts, until the watermark
// passes ts. When the held events' members take more than
// MaxKVBufferBytes, a new one goes to state at once and only its place is
// kept in memory (Counters.KVSpilled); it is read back when its turn
// comes. When the places alone fill the share, the latest half of them
// leave memory too (Counters.KVShed): every held event from the first of
// those on (horizon) is in state only, and an event that arrives at or
// after it goes there at once; they come back in key order, a share's
// half at a time, once the events before them are released (refill).
// Order is kept however long the hold and however far apart the inputs
// are read: nothing goes to the detector before the watermark (or, live,
// LiveHold) releases it.
func (k *kvStage) buffer(t *engine.Task, rec []byte, ts, read int64) error {
	if ts <= t.Watermark() {
		k.c.KVLateEvents.Add(1)
		return k.hand(t, rec)
	}
	ev := &kvEvent{time: ts, seq: k.seq, arrived: read, member: rec}
	k.seq++
	k.c.KVBuffered.Add(1)
	if k.unplaced > 0 && !ev.before(&k.horizon) {
		// Among the events in state only: it waits there with them.
		if err := t.State.Set(kvKey(k.key[:0], ev), rec); err != nil {
			return fmt.Errorf("fuse: write KV event: %w", err)
		}
		k.unplaced++
		k.unplacedArrived = max(k.unplacedArrived, read)
		return nil
	}
	k.buf.push(ev)
	k.fresh = append(k.fresh, ev)
	k.addBytes(kvEventBytes(ev))
	// Over the share: members go to state, the latest first (a min-heap's
	// last slots hold the events needed last), down to 7/8 of it and while
	// any member is in memory, so that the walk back over the members
	// already spilled comes once per eighth of the share, not once per
	// event (every new place takes memory too: spilling only back to the
	// limit walked the whole spilled tail for each event held, quadratic
	// in a long hold).
	//
	// The new event goes first, at no cost: once the buffer is over the
	// share it usually is enough, and the walk, which passes over every
	// spilled event behind the last member in memory, comes once per
	// eighth of the share's members. The walk stops when no member of a
	// held event is left in memory (read-ahead copies are not theirs).
	if limit := k.cfg.KVGraph.MaxKVBufferBytes; k.bytes > limit {
		if err := k.spill(t, ev); err != nil {
			return err
		}
		if k.bytes > limit {
			for i := len(k.buf) - 1; i >= 0 && k.bytes > limit-limit/8 && k.heldMemberBytes() > 0; i-- {
				if err := k.spill(t, k.buf[i]); err != nil {
					return err
				}
			}
		}
		if k.bytes > limit {
			return k.shedPlaces(t)
		}
	}
	return nil
}

// shedPlaces is buffer's last resort, the places alone over the share:
// the read-ahead copies go, then the latest half of the held events leave
// memory for state, the first of them the new horizon (every held event
// at or after it is in state only). One sort per half share of new
// places: the heap sorted is a heap still.
func (k *kvStage) shedPlaces(t *engine.Task) error {
	for seq, v := range k.ahead {
		delete(k.ahead, seq)
		k.addAheadBytes(-int64(len(v)))
	}
	if k.bytes <= k.cfg.KVGraph.MaxKVBufferBytes || len(k.buf) < 2 {
		return nil
	}
	slices.SortFunc(k.buf, func(a, b *kvEvent) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	keep := len(k.buf) / 2
	for _, ev := range k.buf[keep:] {
		if err := k.spill(t, ev); err != nil {
			return err
		}
		if !ev.stored { // a member spill wrote; one in memory only is written here
			return fmt.Errorf("fuse: KV event at %d (seq %d) shed without a copy in state", ev.time, ev.seq)
		}
		k.addBytes(-kvPlaceBytes)
		k.unplacedArrived = max(k.unplacedArrived, ev.arrived)
	}
	k.horizon = kvEvent{time: k.buf[keep].time, seq: k.buf[keep].seq}
	shed := len(k.buf) - keep
	k.unplaced += int64(shed)
	k.c.KVShed.Add(int64(shed))
	clear(k.buf[keep:])
	k.buf = k.buf[:keep]
	// The events kept may still hold members over the share.
	for i := len(k.buf) - 1; i >= 0 && k.bytes > k.cfg.KVGraph.MaxKVBufferBytes; i-- {
		if err := k.spill(t, k.buf[i]); err != nil {
			return err
		}
	}
	return nil
}

// refill brings the events in state only back into memory, from
// horizon on in key order, while they take at most half the share
// (their places, and their members while there is room), and moves
// horizon past them. The buffer holds no place then (its events all
// came before horizon and left): what it reads are the next events due.
func (k *kvStage) refill(t *engine.Task) error {
	start := kvKey(nil, &k.horizon)
	it, err := t.State.Iter(start, []byte{prefixKV + 1})
	if err != nil {
		return fmt.Errorf("fuse: read KV events held in state: %w", err)
	}
	defer it.Close()
	room := k.cfg.KVGraph.MaxKVBufferBytes / 2
	for it.First(); it.Valid(); it.Next() {
		key, ok := kvKeyEvent(it.Key())
		if !ok {
			continue
		}
		if len(k.buf) > 0 && k.bytes+kvPlaceBytes > room {
			k.horizon = key
			return nil
		}
		v := it.Value()
		ev := &kvEvent{time: key.time, seq: key.seq, arrived: k.unplacedArrived, stored: true}
		if k.bytes+int64(len(v))+kvPlaceBytes <= room {
			ev.member = append([]byte(nil), v...)
		} else {
			ev.spilled = true
		}
		k.buf = append(k.buf, ev) // in key order: a heap
		k.addBytes(kvEventBytes(ev))
		k.unplaced--
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("fuse: read KV events held in state: %w", err)
	}
	if k.unplaced != 0 {
		return fmt.Errorf("fuse: %d KV events held in state missing", k.unplaced)
	}
	k.unplacedArrived = math.MinInt64
	return nil
}

// next is the earliest held event's time and processing time of
// arrival; ok false when none is held.
func (k *kvStage) next() (ts, arrived int64, ok bool) {
	if len(k.buf) > 0 {
		return k.buf[0].time, k.buf[0].arrived, true
	}
	if k.unplaced > 0 {
		return k.horizon.time, k.unplacedArrived, true
	}
	return 0, 0, false
}

// spill keeps ev's member in state only.
func (k *kvStage) spill(t *engine.Task, ev *kvEvent) error {
	if ev.spilled || ev.member == nil {
		return nil
	}
	if !ev.stored {
		if err := t.State.Set(kvKey(k.key[:0], ev), ev.member); err != nil {
			return fmt.Errorf("fuse: write KV event: %w", err)
		}
	}
	k.addBytes(-int64(len(ev.member)))
	ev.member, ev.stored, ev.spilled = nil, true, true
	k.c.KVSpilled.Add(1)
	return nil
}

// kvEventBytes is what a held event takes in memory (its member, the
// struct and its heap slot), bytes.
func kvEventBytes(ev *kvEvent) int64 { return int64(len(ev.member)) + kvPlaceBytes }

// kvPlaceBytes is what a held event takes without its member.
const kvPlaceBytes = 64

// heldMemberBytes is the memory of the held events' members (kvBytes less
// their places and the read-ahead copies).
func (k *kvStage) heldMemberBytes() int64 {
	return k.bytes - k.aheadBytes - kvPlaceBytes*int64(len(k.buf))
}

func (k *kvStage) addBytes(n int64) {
	k.bytes += n
	k.kv.Counters().KVBufferBytes.Add(n)
}

// addAheadBytes counts n bytes of read-ahead members, part of kvBytes.
func (k *kvStage) addAheadBytes(n int64) {
	k.addBytes(n)
	k.aheadBytes += n
}

func (k *kvStage) hand(t *engine.Task, rec []byte) error {
	return readMembers(rec, func(m *member) error {
		_, payload, origin := memberParts(m.body)
		topic, part, off := parseOrigin(origin)
		return k.kv.Add(t, m.resource, payload, m.time, kvgraph.Origin{Topic: topic, Partition: part, Offset: off})
	})
}

// release hands the buffered events up to wm to the kvgraph processor, in
// event-time order, at most budget of them; live, also the earliest events
// held for KVGraph.LiveHold, and it asks for the checkpoint whose markers
// release the earliest one left (engine.Task.RequestCheckpoint).
func (k *kvStage) release(t *engine.Task, wm int64, budget int) error {
	k.backlog = false
	heldSince := int64(math.MinInt64) // events buffered at or before it may go early
	if hold := k.cfg.KVGraph.LiveHold; hold > 0 && t.Live() {
		// Held LiveHold, and every task has read everything its sources
		// held up to LiveHold after it and committed what it forwarded
		// here from it (the disorder allowed between tasks): a host's
		// events read on other tasks come through the kvgraph topic a
		// checkpoint or more later. A task reading a backlog, here or
		// on another instance, holds the horizon back (it reads a
		// host's older events after this one read newer ones); only
		// while every task of the instance is live besides.
		if h := t.MarkerHorizon(k.input); h != math.MinInt64 {
			heldSince = min(t.Now().UnixNano(), h) - int64(hold)
		}
	}
	for n := 0; ; n++ {
		ts, arrived, ok := k.next()
		if !ok || ts > wm && arrived > heldSince {
			if ok && heldSince != math.MinInt64 {
				// The earliest event left waits for the markers of a
				// checkpoint taken LiveHold after it was read: ask for
				// that one rather than wait for the regular schedule,
				// liveHoldSlack later, so that every task has read its
				// sources to their end since then.
				t.RequestCheckpoint(arrived + int64(k.cfg.KVGraph.LiveHold+liveHoldSlack))
			}
			return nil
		}
		if n == budget {
			k.backlog = true
			return nil
		}
		if len(k.buf) == 0 {
			if err := k.refill(t); err != nil {
				return err
			}
		}
		if err := k.pop(t); err != nil {
			return err
		}
	}
}

// liveHoldSlack: a held event asks for the checkpoint this long after its
// LiveHold ends. The markers of a checkpoint show when each task last read
// its sources to their end (engine.Task.MarkerHorizon); under a steady
// stream a task is caught up between fetches, and the end checker looks
// every engine.EndCheckInterval: a checkpoint right at the end of the hold
// would seldom show every task past it.
const liveHoldSlack = engine.EndCheckInterval

// pop hands the earliest held event to the kvgraph processor.
func (k *kvStage) pop(t *engine.Task) error {
	ev := k.buf.pop()
	k.c.KVBuffered.Add(-1)
	k.addBytes(-kvEventBytes(ev))
	m := ev.member
	if v, ok := k.ahead[ev.seq]; ok {
		delete(k.ahead, ev.seq)
		k.addAheadBytes(-int64(len(v)))
		if m == nil {
			m = v
		}
	} else if ev.spilled {
		var err error
		if m, err = k.readAhead(t, ev); err != nil {
			return err
		}
	}
	if ev.stored {
		if err := t.State.Delete(kvKey(k.key[:0], ev)); err != nil {
			return err
		}
		if k.front.before(ev) {
			k.front.time, k.front.seq = ev.time, ev.seq
		}
	}
	ev.member = nil // released: checkpointBuffer skips it
	return k.hand(t, m)
}

// kvReadAhead is how many stored events a spilled one's read brings back
// with it: the held events leave in key order, so the keys after a
// spilled event's are the next to leave, and one scan of them costs far
// less than a point read each (a point read seeks every level of the
// LSM; the scan seeks once).
const kvReadAhead = 64

// readAhead reads ev's member from state, and the members of the next
// stored events into ahead while the share has room for them (counted
// in kvBytes; an event held in memory too drops its copy when it leaves),
// up to horizon (the events after it are read by refill).
//
// An event before the latest one deleted (front: one that arrived out of
// order after later ones were released, as LiveHold releases them) is
// read alone, with a point read: the keys after it are the tombstones of
// the events released meanwhile, which a scan would step over one by one
// (on a 3 GB backlog whose buffer released events early, hundreds of
// thousands for every such event: 90 % of the CPU).
func (k *kvStage) readAhead(t *engine.Task, ev *kvEvent) ([]byte, error) {
	key := kvKey(k.key[:0], ev)
	if ev.before(&k.front) {
		k.c.KVPointReads.Add(1)
		m, ok, err := t.State.Get(nil, key)
		if err == nil && !ok {
			err = fmt.Errorf("fuse: spilled KV event at %d (seq %d) missing from state", ev.time, ev.seq)
		}
		return m, err
	}
	it, err := t.State.Iter(key, []byte{prefixKV + 1})
	if err != nil {
		return nil, fmt.Errorf("fuse: read spilled KV event: %w", err)
	}
	defer it.Close()
	if !it.First() || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("fuse: read spilled KV event: %w", err)
		}
		return nil, fmt.Errorf("fuse: spilled KV event at %d (seq %d) missing from state", ev.time, ev.seq)
	}
	m := append([]byte(nil), it.Value()...)
	if k.ahead == nil {
		k.ahead = make(map[uint64][]byte, kvReadAhead)
	}
	var horizon []byte
	if k.unplaced > 0 {
		horizon = kvKey(nil, &k.horizon)
	}
	for n := 1; n < kvReadAhead && it.Next(); n++ {
		key, v := it.Key(), it.Value()
		if len(key) != 17 || k.bytes+int64(len(v)) > k.cfg.KVGraph.MaxKVBufferBytes ||
			horizon != nil && bytes.Compare(key, horizon) >= 0 {
			break
		}
		seq := binary.BigEndian.Uint64(key[9:])
		if old, ok := k.ahead[seq]; ok { // read ahead before: replaced
			k.addAheadBytes(-int64(len(old)))
		}
		k.ahead[seq] = append([]byte(nil), v...)
		k.addAheadBytes(int64(len(v)))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("fuse: read spilled KV event: %w", err)
	}
	return m, nil
}

func kvKey(dst []byte, ev *kvEvent) []byte {
	dst = append(dst, prefixKV)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ev.time)^(1<<63))
	return binary.BigEndian.AppendUint64(dst, ev.seq)
}

// checkpointBuffer writes the events buffered since the last checkpoint.
func (k *kvStage) checkpointBuffer(t *engine.Task) error {
	for _, ev := range k.fresh {
		if len(ev.member) == 0 {
			continue // released already
		}
		if err := t.State.Set(kvKey(k.key[:0], ev), ev.member); err != nil {
			return fmt.Errorf("fuse: write KV event: %w", err)
		}
		ev.stored = true
	}
	clear(k.fresh)
	k.fresh = k.fresh[:0]
	return nil
}

// restoreBuffer reloads the buffered events: every one is in state, from the
// first key on, and refill brings them back as it does after a shed
// (their places while they take at most half the share, their members
// while there is room).
func (k *kvStage) restoreBuffer(t *engine.Task) error {
	k.c.KVBuffered.Add(-int64(len(k.buf)) - k.unplaced)
	k.addBytes(-k.bytes)
	k.buf, k.fresh, k.seq = k.buf[:0], k.fresh[:0], 0
	k.unplaced, k.unplacedArrived = 0, t.Now().UnixNano()
	clear(k.ahead)
	k.aheadBytes = 0
	err := eachKey(t, prefixKV, func(key, _ []byte) error {
		ev, ok := kvKeyEvent(key)
		if !ok {
			return nil
		}
		if k.unplaced == 0 {
			k.horizon = ev
		}
		k.unplaced++
		k.seq = max(k.seq, ev.seq+1)
		return nil
	})
	k.c.KVBuffered.Add(k.unplaced)
	if err != nil || k.unplaced == 0 {
		return err
	}
	return k.refill(t)
}

// kvKeyEvent is the time and seq of a KV event's key (kvKey); ok false
// for a key of another shape.
func kvKeyEvent(k []byte) (kvEvent, bool) {
	if len(k) != 17 {
		return kvEvent{}, false
	}
	return kvEvent{time: int64(binary.BigEndian.Uint64(k[1:]) ^ (1 << 63)), seq: binary.BigEndian.Uint64(k[9:])}, true
}

// before orders buffered events by time, then arrival.
func (a *kvEvent) before(b *kvEvent) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	return a.seq < b.seq
}

// tag tags the traces of an incident's polluted requests (those not
// given before: kvgraph hands each over once), each at the event time it
// was polluted (within its request, so the trace is revised, not
// reopened): in place, or through the repartition topic to the task of
// the trace. It runs inside the kvgraph processor's calls, on the task's
// goroutine, which return its error.
func (p *fuser) tag(t *engine.Task, inc *braidpb.Incident) error {
	for _, v := range inc.Polluted {
		if len(v.TraceId) != 16 {
			continue
		}
		tr := [16]byte(v.TraceId)
		var body []byte
		body = protowire.AppendTag(body, fMemberPayload, protowire.BytesType)
		body = protowire.AppendString(body, inc.Id)
		w := chunkWriter{}
		w.appendMember(&member{kind: kindIncident, time: int64(v.TimeUnixNano), body: body})
		p.key = otlp.AppendTraceIDHex(p.key[:0], tr)
		q := otlp.HashPartition(p.key, p.cfg.Partitions)
		p.s.counters.IncidentTags.Add(1)
		if q == p.partition {
			if err := p.add(t, tr, w.buf); err != nil {
				return err
			}
			continue
		}
		t.Emit(&kgo.Record{Topic: p.cfg.RepartitionTopic, Partition: q, Key: append([]byte(nil), p.key...), Value: w.buf})
	}
	return nil
}

// incidentContext is the resources stage's context of a pollution
// incident: the series of its GPU (by uuid, else index, on its host) and of
// the server instance whose KV events showed it, whatever their model.
func (s *Stage) incidentContext(host, gpu string, gpuIndex int64, instance string, start, end int64) *braidpb.ResourceContext {
	index := ""
	if gpuIndex >= 0 {
		index = strconv.FormatInt(gpuIndex, 10)
	}
	uuid := gpu
	if strings.HasPrefix(gpu, host+"/") {
		uuid = "" // not a uuid: the detector's host/gpuN key
	}
	ws := s.table.WindowsOn(host, func(series semconv.Identity) bool {
		if series.HasGPU() {
			return (uuid != "" && series.GPUUUID == uuid) || (series.GPUUUID == "" && index != "" && series.GPUIndex == index)
		}
		return instance != "" && series.Instance == instance
	}, start, end)
	if len(ws) == 0 {
		return nil
	}
	return &braidpb.ResourceContext{Series: ws}
}
