package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble"
)

// ErrClosed is returned by operations on a closed Store or Keyspace.
var ErrClosed = errors.New("state: closed")

// Options configure a Store. The zero value is usable after EnsureDefaults.
type Options struct {
	// Dir is the directory under which each keyspace gets a subdirectory.
	// Required.
	Dir string
	// MemoryBudget is the number of bytes shared by the block cache and the
	// memtables of all keyspaces. Default 256 MiB.
	MemoryBudget int64
	// Sync makes checkpoints fsync the write-ahead log. Default false: the
	// changelog in Kafka is the durable copy, the local store a cache.
	Sync bool
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.MemoryBudget == 0 {
		o.MemoryBudget = 256 << 20
	}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("state: Options.Dir is required"))
	}
	if o.MemoryBudget < 16<<20 {
		errs = append(errs, fmt.Errorf("state: Options.MemoryBudget %d is below the minimum of 16 MiB", o.MemoryBudget))
	}
	return errors.Join(errs...)
}

// Store opens keyspaces under one directory with one shared block cache.
// Safe for concurrent use.
type Store struct {
	opts  Options
	cache *pebble.Cache
	mu    struct {
		sync.Mutex
		open map[string]*Keyspace
	}
}

// Open returns a Store rooted at opts.Dir.
func Open(opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", opts.Dir, err)
	}
	s := &Store{opts: opts, cache: pebble.NewCache(opts.MemoryBudget / 2)}
	s.mu.open = make(map[string]*Keyspace)
	return s, nil
}

// Close closes every open keyspace and releases the cache.
func (s *Store) Close() error {
	s.mu.Lock()
	open := s.mu.open
	s.mu.open = map[string]*Keyspace{}
	s.mu.Unlock()
	var errs []error
	for _, k := range open {
		errs = append(errs, k.Close())
	}
	s.cache.Unref()
	return errors.Join(errs...)
}

// Keyspace opens (creating if needed) the keyspace name, e.g. "fuse-3".
// A keyspace is owned by one task: it may be opened once at a time.
func (s *Store) Keyspace(name string) (*Keyspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.open[name]; ok {
		return nil, fmt.Errorf("state: keyspace %s is already open", name)
	}
	memtable := s.opts.MemoryBudget / 8
	if memtable > 64<<20 {
		memtable = 64 << 20
	}
	db, err := pebble.Open(filepath.Join(s.opts.Dir, name), &pebble.Options{
		Cache:        s.cache,
		MemTableSize: uint64(memtable),
		Logger:       quietLogger{},
	})
	if err != nil {
		return nil, fmt.Errorf("state: open keyspace %s: %w", name, err)
	}
	k := &Keyspace{name: name, db: db, store: s, sync: s.opts.Sync}
	k.batch = db.NewIndexedBatch()
	s.mu.open[name] = k
	return k, nil
}

// Remove deletes the keyspace name from disk. It must not be open.
func (s *Store) Remove(name string) error {
	s.mu.Lock()
	_, open := s.mu.open[name]
	s.mu.Unlock()
	if open {
		return fmt.Errorf("state: keyspace %s is open", name)
	}
	return os.RemoveAll(filepath.Join(s.opts.Dir, name))
}

// Keyspace is the state of one task. Writes go to a pending batch that reads
// see; Checkpoint makes them durable atomically with the offsets, Rollback
// discards them. Not safe for concurrent use: one task owns it.
type Keyspace struct {
	name  string
	db    *pebble.DB
	store *Store
	batch *pebble.Batch
	sync  bool
}

// Reserved key prefix: user keys must not start with 0x00.
var offsetsKey = []byte("\x00offsets")

// Get returns a copy of the value of key appended to dst, and whether it
// exists. It sees pending writes.
func (k *Keyspace) Get(dst, key []byte) ([]byte, bool, error) {
	v, closer, err := k.batch.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, fmt.Errorf("state: get in %s: %w", k.name, err)
	}
	dst = append(dst, v...)
	closer.Close()
	return dst, true, nil
}

// Set writes key=value to the pending batch. Both are copied.
func (k *Keyspace) Set(key, value []byte) error { return k.batch.Set(key, value, nil) }

// Delete deletes key in the pending batch.
func (k *Keyspace) Delete(key []byte) error { return k.batch.Delete(key, nil) }

// DeleteRange deletes every key in [start, end) with one range tombstone:
// no scan, whatever the number of keys.
func (k *Keyspace) DeleteRange(start, end []byte) error { return k.batch.DeleteRange(start, end, nil) }

// Iter returns an iterator over [lower, upper) that sees pending writes. The
// caller must close it before Checkpoint or Rollback. Keys and values are
// valid until the iterator moves.
func (k *Keyspace) Iter(lower, upper []byte) (*pebble.Iterator, error) {
	return k.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
}

// Offsets is the input position a checkpoint reflects: topic → partition →
// next offset to read.
type Offsets map[string]map[int32]int64

// Checkpoint commits the pending batch together with offsets.
func (k *Keyspace) Checkpoint(offsets Offsets) error {
	if err := k.batch.Set(offsetsKey, encodeOffsets(offsets), nil); err != nil {
		return err
	}
	opt := pebble.NoSync
	if k.sync {
		opt = pebble.Sync
	}
	if err := k.batch.Commit(opt); err != nil {
		return fmt.Errorf("state: checkpoint %s: %w", k.name, err)
	}
	k.batch.Close()
	k.batch = k.db.NewIndexedBatch()
	return nil
}

// Rollback discards every write since the last checkpoint.
func (k *Keyspace) Rollback() {
	k.batch.Close()
	k.batch = k.db.NewIndexedBatch()
}

// Offsets returns the offsets recorded by the last checkpoint (nil if none).
func (k *Keyspace) Offsets() (Offsets, error) {
	v, closer, err := k.db.Get(offsetsKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeOffsets(v)
}

// Size is the approximate on-disk size of the keyspace in bytes.
func (k *Keyspace) Size() uint64 {
	m := k.db.Metrics()
	return m.DiskSpaceUsage()
}

// Close discards pending writes and closes the keyspace.
func (k *Keyspace) Close() error {
	k.store.mu.Lock()
	delete(k.store.mu.open, k.name)
	k.store.mu.Unlock()
	if k.batch != nil {
		k.batch.Close()
		k.batch = nil
	}
	return k.db.Close()
}

func encodeOffsets(o Offsets) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(o)))
	for t, ps := range o {
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.AppendUvarint(b, uint64(len(ps)))
		for p, off := range ps {
			b = binary.AppendVarint(b, int64(p))
			b = binary.AppendVarint(b, off)
		}
	}
	return b
}

func decodeOffsets(b []byte) (Offsets, error) {
	r := bytes.NewReader(b)
	bad := errors.New("state: corrupt offsets record")
	nt, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, bad
	}
	o := make(Offsets, nt)
	for range nt {
		l, err := binary.ReadUvarint(r)
		if err != nil || l > uint64(r.Len()) {
			return nil, bad
		}
		t := make([]byte, l)
		r.Read(t)
		np, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, bad
		}
		ps := make(map[int32]int64, np)
		for range np {
			p, err1 := binary.ReadVarint(r)
			off, err2 := binary.ReadVarint(r)
			if err1 != nil || err2 != nil {
				return nil, bad
			}
			ps[int32(p)] = off
		}
		o[string(t)] = ps
	}
	return o, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}
