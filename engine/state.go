package engine

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// State is a task's keyed state: its keyspace, and — when the topology has
// a changelog — every change mirrored to the task's changelog partition in
// the checkpoint's transaction, so the state can be rebuilt on any
// instance. Writes become durable at the next committed checkpoint. Used on
// the task's goroutine only.
//
// A change whose key and value exceed MaxRecordBytes goes to the changelog
// in chunks (see "Changelog chunks" in DESIGN.md); restore puts it back
// together. Values of any size can be stored.
type State struct {
	ks        *state.Keyspace
	changelog string // topic, "" for none
	partition int32
	emit      func(*kgo.Record)
	limit     int // MaxRecordBytes
	// chunked: key → number of changelog chunks of its last logged value,
	// for the keys whose value went in more than one chunk. Mirrored in
	// the keyspace under chunkedPrefix (not logged), so it follows
	// checkpoints and rollbacks.
	chunked map[string]int
}

// Reserved key prefixes (user keys must not start with 0x00):
// chunkKeyPrefix names the changelog records of chunks 1… of a value
// (restore holds them there until their head record comes); chunkedPrefix
// the local record of how many chunks a key's value has in the changelog.
var (
	chunkKeyPrefix = []byte("\x00\x03")
	chunkKeyEnd    = []byte("\x00\x04")
	chunkedPrefix  = []byte("\x00\x04")
	chunkedEnd     = []byte("\x00\x05")
)

// chunkKey is the changelog key of chunk i ≥ 1 of key's value: unique per
// (key, i), so compaction keeps every chunk of the latest value.
func chunkKey(key []byte, i int) []byte {
	b := make([]byte, 0, len(chunkKeyPrefix)+binary.MaxVarintLen64+len(key)+4)
	b = append(b, chunkKeyPrefix...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint32(b, uint32(i))
}

func chunkedKey(key []byte) []byte { return append(append([]byte(nil), chunkedPrefix...), key...) }

// Get appends the value of key to dst and reports whether it exists.
func (s *State) Get(dst, key []byte) ([]byte, bool, error) { return s.ks.Get(dst, key) }

// Iter iterates [lower, upper), seeing pending writes. Close it before the
// checkpoint.
func (s *State) Iter(lower, upper []byte) (*state.Iterator, error) { return s.ks.Iter(lower, upper) }

// Set writes key = value.
func (s *State) Set(key, value []byte) error {
	if err := s.ks.Set(key, value); err != nil {
		return err
	}
	return s.log(key, value)
}

// Delete deletes key.
func (s *State) Delete(key []byte) error {
	if err := s.ks.Delete(key); err != nil {
		return err
	}
	return s.log(key, nil)
}

// DeleteRange deletes every key in [start, end) with one range tombstone in
// the keyspace. The changelog, being compacted by key, gets a tombstone for
// each key in the range, so only that range is read.
func (s *State) DeleteRange(start, end []byte) error {
	if s.changelog != "" {
		it, err := s.ks.Iter(start, end)
		if err != nil {
			return err
		}
		var keys [][]byte
		for it.First(); it.Valid(); it.Next() {
			keys = append(keys, append([]byte(nil), it.Key()...))
		}
		if err := it.Close(); err != nil {
			return err
		}
		for _, k := range keys {
			if err := s.log(k, nil); err != nil {
				return err
			}
		}
	}
	return s.ks.DeleteRange(start, end)
}

// Size is the keyspace's approximate size on disk.
func (s *State) Size() uint64 { return s.ks.Size() }

// log mirrors key = value (nil: a delete) to the changelog. A value that
// does not fit one record goes as chunks 1… under their chunk keys, then
// the head record (chunk 0, headers HeaderChunk and HeaderChunks) under
// key; chunks a previous, longer value of key left in the changelog get
// tombstones, so that compaction removes them.
func (s *State) log(key, value []byte) error {
	if s.changelog == "" {
		return nil
	}
	n := 1
	var room int
	if value != nil && len(key)+len(value) > s.limit {
		// Every chunk has room for the same share: the chunk key is the
		// longest key used.
		room = s.limit - len(chunkKey(key, 0)) - chunkHeaderBytes
		if room < 1 {
			return fmt.Errorf("%w: state key of %d bytes leaves no room within MaxRecordBytes %d", ErrRecordTooLarge, len(key), s.limit)
		}
		n = (len(value) + room - 1) / room
	}
	if n > 1 {
		count := strconv.AppendInt(nil, int64(n), 10)
		for i := 1; i < n; i++ {
			s.emit(&kgo.Record{Topic: s.changelog, Partition: s.partition, Key: chunkKey(key, i),
				Value:   append([]byte(nil), value[i*room:min((i+1)*room, len(value))]...),
				Headers: chunkHeaders(i, count)})
		}
	}
	old := s.chunked[string(key)]
	for i := max(n, 1); i < old; i++ {
		s.emit(&kgo.Record{Topic: s.changelog, Partition: s.partition, Key: chunkKey(key, i)})
	}
	r := &kgo.Record{Topic: s.changelog, Partition: s.partition, Key: append([]byte(nil), key...)}
	switch {
	case n > 1:
		r.Value = append([]byte(nil), value[:room]...)
		r.Headers = chunkHeaders(0, strconv.AppendInt(nil, int64(n), 10))
	case value != nil:
		r.Value = append(make([]byte, 0, len(value)), value...)
	}
	s.emit(r)
	switch {
	case n > 1:
		if s.chunked == nil {
			s.chunked = map[string]int{}
		}
		s.chunked[string(key)] = n
		return s.ks.Set(chunkedKey(key), binary.AppendUvarint(nil, uint64(n)))
	case old > 0:
		delete(s.chunked, string(key))
		return s.ks.Delete(chunkedKey(key))
	}
	return nil
}

func chunkHeaders(i int, count []byte) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: HeaderChunk, Value: strconv.AppendInt(nil, int64(i), 10)}, {Key: HeaderChunks, Value: count}}
}

// loadChunked reads the chunk counts of the keys whose value is chunked in
// the changelog, as of the keyspace's current (committed) contents.
func (s *State) loadChunked() error {
	s.chunked = nil
	if s.changelog == "" {
		return nil
	}
	it, err := s.ks.Iter(chunkedPrefix, chunkedEnd)
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		n, k := binary.Uvarint(it.Value())
		if k <= 0 {
			continue
		}
		if s.chunked == nil {
			s.chunked = map[string]int{}
		}
		s.chunked[string(it.Key()[len(chunkedPrefix):])] = int(n)
	}
	return it.Close()
}
