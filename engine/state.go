package engine

import (
	"github.com/cockroachdb/pebble"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// State is a task's keyed state: its keyspace, and — when the topology has
// a changelog — every change mirrored to the task's changelog partition in
// the checkpoint's transaction, so the state can be rebuilt on any
// instance. Writes become durable at the next committed checkpoint. Used on
// the task's goroutine only.
type State struct {
	ks        *state.Keyspace
	changelog string // topic, "" for none
	partition int32
	emit      func(*kgo.Record)
}

// Get appends the value of key to dst and reports whether it exists.
func (s *State) Get(dst, key []byte) ([]byte, bool, error) { return s.ks.Get(dst, key) }

// Iter iterates [lower, upper), seeing pending writes. Close it before the
// checkpoint.
func (s *State) Iter(lower, upper []byte) (*pebble.Iterator, error) { return s.ks.Iter(lower, upper) }

// Set writes key = value.
func (s *State) Set(key, value []byte) error {
	if err := s.ks.Set(key, value); err != nil {
		return err
	}
	s.log(key, value)
	return nil
}

// Delete deletes key.
func (s *State) Delete(key []byte) error {
	if err := s.ks.Delete(key); err != nil {
		return err
	}
	s.log(key, nil)
	return nil
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
		for it.First(); it.Valid(); it.Next() {
			s.log(it.Key(), nil)
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return s.ks.DeleteRange(start, end)
}

// Size is the keyspace's approximate size on disk.
func (s *State) Size() uint64 { return s.ks.Size() }

func (s *State) log(key, value []byte) {
	if s.changelog == "" {
		return
	}
	r := &kgo.Record{Topic: s.changelog, Partition: s.partition, Key: append([]byte(nil), key...)}
	if value != nil {
		r.Value = append(make([]byte, 0, len(value)), value...)
	}
	s.emit(r)
}
