package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

func TestChunksRoundTrip(t *testing.T) {
	value := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160,000 bytes
	r := &kgo.Record{Topic: "t", Partition: 3, Key: []byte("trace-1"), Value: value, Timestamp: time.Unix(5, 0),
		Headers: []kgo.RecordHeader{{Key: "braid.reason", Value: []byte("x")}}}
	for _, limit := range []int{1024, 4096, 50_000, 159_999, 160_000 + 7 + 13, 1_000_000} {
		cs, err := Chunks(r, limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if RecordBytes(r) <= limit {
			if len(cs) != 1 || cs[0] != r {
				t.Fatalf("limit %d: a record within the limit was cut", limit)
			}
			continue
		}
		var a Reassembler
		var whole *kgo.Record
		for i, c := range cs {
			if n := RecordBytes(c); n > limit {
				t.Fatalf("limit %d: chunk %d has %d bytes", limit, i, n)
			}
			c.Offset = int64(10 + i)
			got, ok := a.Add(c)
			if ok != (i == len(cs)-1) {
				t.Fatalf("limit %d: chunk %d of %d: complete=%v", limit, i, len(cs), ok)
			}
			whole = got
		}
		if !bytes.Equal(whole.Value, value) || string(whole.Key) != "trace-1" || whole.Partition != 3 || !whole.Timestamp.Equal(r.Timestamp) ||
			len(whole.Headers) != 1 || whole.Headers[0].Key != "braid.reason" || whole.Offset != int64(10+len(cs)-1) {
			t.Fatalf("limit %d: reassembled record differs: key %q, %d bytes, headers %v, offset %d", limit, whole.Key, len(whole.Value), whole.Headers, whole.Offset)
		}
		if a.PendingBytes() != 0 || len(a.Pending()) != 0 || a.Dropped() != 0 {
			t.Fatalf("limit %d: reassembler holds %d bytes after completion", limit, a.PendingBytes())
		}
	}
	if _, err := Chunks(&kgo.Record{Key: bytes.Repeat([]byte("k"), 2000), Value: value}, 1024); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("a key larger than the limit: %v", err)
	}
}

func TestReassemblerSeparatesProducersAndDropsOrphans(t *testing.T) {
	mk := func(producer int64, v string) []*kgo.Record {
		cs, err := Chunks(&kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte(strings.Repeat(v, 3000))}, 1100)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			c.ProducerID = producer
		}
		return cs
	}
	a, b := mk(1, "a"), mk(2, "b")
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("want 3 chunks each, got %d and %d", len(a), len(b))
	}
	var ra Reassembler
	var done []string
	// Two producers' chunks of the same key interleave in one partition.
	for _, c := range []*kgo.Record{a[0], b[0], a[1], b[1], {Topic: "t", Key: []byte("k"), Value: []byte("plain")}, b[2], a[2]} {
		if r, ok := ra.Add(c); ok {
			done = append(done, string(r.Value[:1])+string(rune('0'+len(r.Value)/1000)))
		}
	}
	if strings.Join(done, ",") != "p0,b3,a3" {
		t.Fatalf("completed %v, want the plain record, then b's and a's", done)
	}
	// A chunk without its predecessors (a restart between chunks) is
	// dropped, as is what a restarted sequence leaves pending.
	if _, ok := ra.Add(a[1]); ok {
		t.Fatal("an orphan chunk completed")
	}
	ra.Add(a[0])
	ra.Add(a[0])
	if ra.Dropped() != 2 || len(ra.Pending()) != 1 || ra.PendingBytes() != int64(len(a[0].Value)) {
		t.Fatalf("dropped %d, pending %d (%d bytes)", ra.Dropped(), len(ra.Pending()), ra.PendingBytes())
	}
	bad := &kgo.Record{Key: []byte("k"), Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: HeaderChunk, Value: []byte("7")}, {Key: HeaderChunks, Value: []byte("2")}}}
	if _, ok := ra.Add(bad); ok {
		t.Fatal("a chunk with an index past its count completed")
	}
}

// bigState writes the value it is given as the record's value under the
// record's key, and emits the record unchanged to topic out.
type bigState struct{ out string }

func (p bigState) Process(t *Task, r *kgo.Record, _ int) error {
	if p.out != "" {
		t.Emit(&kgo.Record{Topic: p.out, Key: r.Key, Value: r.Value})
		return nil
	}
	if r.Value == nil {
		return t.State.Delete(r.Key)
	}
	return t.State.Set(r.Key, r.Value)
}

// compact keeps the last record of each key, in log order, as Kafka's
// log compaction does (tombstones kept).
func compact(recs []*kgo.Record) []*kgo.Record {
	last := map[string]int{}
	for i, r := range recs {
		last[string(r.Key)] = i
	}
	var out []*kgo.Record
	for i, r := range recs {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	return out
}

// replay rebuilds a keyspace from changelog records as restore does.
func replay(t *testing.T, store *state.Store, name string, recs []*kgo.Record) *state.Keyspace {
	t.Helper()
	ks, err := store.Keyspace(name)
	if err != nil {
		t.Fatal(err)
	}
	r := restorer{ks: ks}
	for _, rec := range recs {
		if string(rec.Key) == string(checkpointKey) {
			err = r.checkpointed()
		} else {
			err = r.apply(rec)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := ks.DeleteRange(chunkKeyPrefix, chunkKeyEnd); err != nil {
		t.Fatal(err)
	}
	if err := ks.Checkpoint(state.Offsets{}); err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestChangelogChunksSurviveCompaction writes state values over
// MaxRecordBytes, then shorter ones, then deletes: every changelog record
// fits, and a replay of the compacted changelog gives back exactly the
// live values, with no chunk left over.
func TestChangelogChunksSurviveCompaction(t *testing.T) {
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const limit = 4096
	topo := Topology{Name: "big", Partitions: 1, Changelog: "big-changelog", Inputs: []Input{{Topic: "in"}},
		NewProcessor: func(*Task) (Processor, error) { return bigState{}, nil }}
	h, err := NewHarness(Config{Store: store, MaxRecordBytes: limit}, topo, 0, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	val := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	steps := [][]*kgo.Record{
		{{Key: []byte("a"), Value: val('a', 5*limit)}, {Key: []byte("b"), Value: val('b', 3*limit)}, {Key: []byte("c"), Value: val('c', 2*limit)}},
		{{Key: []byte("a"), Value: val('A', 2*limit)}, {Key: []byte("b"), Value: val('B', 10)}, {Key: []byte("c"), Value: nil}},
		// A restart between steps: the chunk counts come from the keyspace.
		nil,
		{{Key: []byte("a"), Value: val('x', 3*limit)}, {Key: []byte("d"), Value: val('d', 4*limit)}},
	}
	want := map[string][]byte{}
	for i, recs := range steps {
		if recs == nil {
			if err := h.Restart(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := h.Process(0, recs...); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if err := h.Checkpoint(); err != nil {
			t.Fatalf("step %d: checkpoint: %v", i, err)
		}
		for _, r := range recs {
			if r.Value == nil {
				delete(want, string(r.Key))
			} else {
				want[string(r.Key)] = r.Value
			}
		}
	}
	var log []*kgo.Record
	for _, r := range h.Out {
		if r.Topic == topo.Changelog {
			if n := RecordBytes(r); n > limit {
				t.Fatalf("changelog record %q has %d bytes, over %d", r.Key, n, limit)
			}
			log = append(log, r)
		}
	}
	for name, recs := range map[string][]*kgo.Record{"full": log, "compacted": compact(log)} {
		ks := replay(t, store, "replay-"+name, recs)
		it, err := ks.Iter(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		for it.First(); it.Valid(); it.Next() {
			if k := it.Key(); k[0] != 0 || bytes.HasPrefix(k, chunkKeyPrefix) {
				got[string(k)] = append([]byte(nil), it.Value()...)
			}
		}
		it.Close()
		ks.Close()
		if len(got) != len(want) {
			t.Errorf("%s replay: %d keys, want %d (%q)", name, len(got), len(want), keys(got))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Errorf("%s replay: key %q has %d bytes, want %d", name, k, len(got[k]), len(v))
			}
		}
	}
	// Compaction leaves nothing of the old chunks but tombstones.
	live := 0
	for _, r := range compact(log) {
		if bytes.HasPrefix(r.Key, chunkKeyPrefix) && r.Value != nil {
			live++
		}
	}
	room := limit - len(chunkKey([]byte("a"), 0)) - chunkHeaderBytes
	if n := (3*limit+room-1)/room - 1 + (4*limit+room-1)/room - 1; live != n { // chunks 1… of a's and d's last values
		t.Errorf("compacted changelog holds %d live chunk records, want %d", live, n)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHarnessRejectsRecordsOverTheLimit: what the broker would refuse fails
// Process, as the produce error fails the engine's checkpoint.
func TestHarnessRejectsRecordsOverTheLimit(t *testing.T) {
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	topo := Topology{Name: "rej", Partitions: 1, Inputs: []Input{{Topic: "in"}},
		NewProcessor: func(*Task) (Processor, error) { return bigState{out: "out"}, nil }}
	h, err := NewHarness(Config{Store: store, MaxRecordBytes: 2000}, topo, 0, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Task().MaxRecordBytes() != 2000 {
		t.Fatalf("Task.MaxRecordBytes %d", h.Task().MaxRecordBytes())
	}
	if err := h.Process(0, &kgo.Record{Key: []byte("k"), Value: make([]byte, 1999)}); err != nil {
		t.Fatalf("a record of 2000 bytes: %v", err)
	}
	err = h.Process(0, &kgo.Record{Key: []byte("k"), Value: make([]byte, 2000)})
	if !errors.Is(err, ErrRecordTooLarge) || !strings.Contains(err.Error(), "2001 bytes to out") {
		t.Fatalf("a record of 2001 bytes: %v", err)
	}
	if err := h.Checkpoint(); err != nil {
		t.Fatalf("checkpoint after the rejection was reported: %v", err)
	}
}

// TestChunkCountsFollowAborts: after an aborted checkpoint the task's
// record of chunked keys is the committed one, so a later write tombstones
// exactly the chunks the changelog holds.
func TestChunkCountsFollowAborts(t *testing.T) {
	store, err := state.Open(state.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const limit = 2048
	topo := Topology{Name: "abort", Partitions: 1, Changelog: "abort-changelog", Inputs: []Input{{Topic: "in"}},
		NewProcessor: func(*Task) (Processor, error) { return bigState{}, nil }}
	h, err := NewHarness(Config{Store: store, MaxRecordBytes: limit}, topo, 0, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	set := func(n int) {
		t.Helper()
		if err := h.Process(0, &kgo.Record{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), n)}); err != nil {
			t.Fatal(err)
		}
	}
	set(3 * limit) // 4 chunks, committed
	if err := h.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	set(8 * limit) // 9 chunks, aborted
	if err := h.Abort(); err != nil {
		t.Fatal(err)
	}
	h.Out = nil
	set(10) // one record: tombstones for chunks 1-3 of the committed value
	var tombs []int
	for _, r := range h.Out {
		if bytes.HasPrefix(r.Key, chunkKeyPrefix) {
			if r.Value != nil {
				t.Fatalf("a chunk written for a 10-byte value")
			}
			tombs = append(tombs, int(r.Key[len(r.Key)-1]))
		}
	}
	if fmt.Sprint(tombs) != "[1 2 3]" {
		t.Fatalf("tombstones for chunks %v, want [1 2 3]", tombs)
	}
}
