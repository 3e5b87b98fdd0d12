package state

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"
)

// ErrClosed is returned by operations on a closed Store or Keyspace.
var ErrClosed = errors.New("state: closed")

// Options configure a Store. The zero value is usable after EnsureDefaults.
type Options struct {
	// Dir is the directory under which each keyspace gets a subdirectory.
	// Required unless InMemory.
	Dir string
	// InMemory keeps every keyspace in memory (Pebble's in-memory
	// filesystem) instead of under Dir: for tests, and for replays that
	// need no state after they end. A keyspace closed and opened again
	// finds what it had; everything is gone once the Store is closed.
	// Memory then grows with the state, outside MemoryBudget.
	InMemory bool
	// MemoryBudget, bytes, is what CacheBytes and MemTableBytes default
	// from: half each. Default 256 MiB; at least 16 MiB.
	MemoryBudget int64
	// CacheBytes is the size of the one block cache all keyspaces share.
	// Default MemoryBudget / 2.
	CacheBytes int64
	// MemTableBytes bounds the memtables of all open keyspaces together.
	// A keyspace opened while n keyspaces are open (itself included), or
	// MaxKeyspaces if that is more, gets memtables of MemTableBytes /
	// (2n) each — Pebble holds up to two per keyspace (one being flushed)
	// — but at least MinMemTableBytes. Default MemoryBudget / 2.
	MemTableBytes int64
	// MaxKeyspaces is how many keyspaces may be open at once (e.g. the
	// partitions of the topologies an instance may run): keyspaces opened
	// early get no more than their share of MemTableBytes at that count.
	// Default 0: only those open count.
	MaxKeyspaces int
	// NoSync turns off syncing at checkpoints. By default every checkpoint
	// (Keyspace.Checkpoint) waits until its write-ahead log entry is on
	// disk, so that after a crash (SIGKILL included) local state is that of
	// the last checkpoint, not older: a restart then matches the committed
	// offsets and does not rebuild from the changelog. A sealed checkpoint
	// (Keyspace.CommitSealed) is synced in the background: only a crash in
	// the milliseconds before that sync ends leaves local state a
	// checkpoint behind. Replays of bounded input into a scratch directory
	// may set it.
	NoSync bool
	// Logger receives Pebble's background errors and warnings. Default
	// slog.Default().
	Logger *slog.Logger
}

// MinMemTableBytes is the smallest memtable a keyspace gets (see
// Options.MemTableBytes).
const MinMemTableBytes = 1 << 20

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.MemoryBudget == 0 {
		o.MemoryBudget = 256 << 20
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = o.MemoryBudget / 2
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = o.MemoryBudget / 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" && !o.InMemory {
		errs = append(errs, errors.New("state: Options.Dir is required"))
	}
	if o.MemoryBudget < 16<<20 {
		errs = append(errs, fmt.Errorf("state: Options.MemoryBudget %d is below the minimum of 16 MiB", o.MemoryBudget))
	}
	if o.CacheBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("state: Options.CacheBytes %d is below the minimum of 1 MiB", o.CacheBytes))
	}
	if o.MemTableBytes < 2*MinMemTableBytes {
		errs = append(errs, fmt.Errorf("state: Options.MemTableBytes %d is below the minimum of %d", o.MemTableBytes, 2*MinMemTableBytes))
	}
	if o.MaxKeyspaces < 0 {
		errs = append(errs, fmt.Errorf("state: Options.MaxKeyspaces %d is negative", o.MaxKeyspaces))
	}
	return errors.Join(errs...)
}

// Store opens keyspaces under one directory with one shared block cache.
// Safe for concurrent use.
type Store struct {
	opts  Options
	fs    vfs.FS
	cache *pebble.Cache
	mu    struct {
		sync.Mutex
		open   map[string]*Keyspace
		closed bool
	}
}

// Open returns a Store rooted at opts.Dir.
func Open(opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	fs := vfs.Default
	if opts.InMemory {
		fs = vfs.NewMem()
		if opts.Dir == "" {
			opts.Dir = "state"
		}
	}
	if err := fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", opts.Dir, err)
	}
	s := &Store{opts: opts, fs: fs, cache: pebble.NewCache(opts.CacheBytes)}
	s.mu.open = make(map[string]*Keyspace)
	return s, nil
}

// Close closes every open keyspace and releases the cache. A second Close
// returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.closed = true
	open := s.mu.open
	s.mu.open = map[string]*Keyspace{}
	s.mu.Unlock()
	var errs []error
	for _, k := range open {
		if err := k.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.cache.Unref()
	return errors.Join(errs...)
}

// memTableSize is the memtable size of a keyspace opened while open
// others are open.
func (s *Store) memTableSize(open int) int64 {
	n := max(open+1, s.opts.MaxKeyspaces)
	return max(s.opts.MemTableBytes/int64(2*n), MinMemTableBytes)
}

// Keyspace opens (creating if needed) the keyspace name, e.g. "fuse-3".
// A keyspace is owned by one task: it may be opened once at a time.
func (s *Store) Keyspace(name string) (*Keyspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	if _, ok := s.mu.open[name]; ok {
		return nil, fmt.Errorf("state: keyspace %s is already open", name)
	}
	log := s.opts.Logger.With("keyspace", name)
	flushes := &flushTracker{}
	listener := eventListener(log)
	listener.FlushBegin = func(pebble.FlushInfo) { flushes.begin() }
	listener.FlushEnd = func(info pebble.FlushInfo) { flushes.end(info.Err) }
	wals := &atomic.Int64{}
	listener.WALCreated = func(pebble.WALCreateInfo) { wals.Add(1) }
	db, err := pebble.Open(filepath.Join(s.opts.Dir, name), &pebble.Options{
		FS:                          s.fs,
		Cache:                       s.cache,
		MemTableSize:                uint64(s.memTableSize(len(s.mu.open))),
		MemTableStopWritesThreshold: 2,
		Levels:                      uncompressedLevels(),
		Logger:                      pebbleLogger{log},
		EventListener:               listener,
	})
	if err != nil {
		return nil, fmt.Errorf("state: open keyspace %s: %w", name, err)
	}
	mt := s.memTableSize(len(s.mu.open))
	k := &Keyspace{name: name, db: db, store: s, sync: !s.opts.NoSync,
		largeBatch: mt / 2, flushes: flushes, memTable: mt, memNext: min(mt, initialMemTable), wals: wals, walsSeen: wals.Load()}
	k.rotated()
	k.batch = db.NewIndexedBatch()
	s.mu.open[name] = k
	return k, nil
}

// uncompressedLevels are the options of a keyspace's seven levels:
// Pebble's defaults, without block compression, with a Bloom filter per
// table. What tasks keep is short-lived — a trace's chunks are read back
// once, when it is emitted, and deleted when it is purged — so compressing
// each block at every flush and compaction, and decompressing it for that
// one read, cost CPU (a sixth of braid's in the e2e benchmark's profile)
// to save disk that is soon given back. A point read without filters
// loads an index and a data block of every level above the key's; with
// them (10 bits a key) reading chunks back took 2.1–3.0 s of CPU instead
// of 3.3–3.8 s in the e2e benchmark's profiles.
func uncompressedLevels() []pebble.LevelOptions {
	ls := make([]pebble.LevelOptions, 7)
	for i := range ls {
		ls[i].Compression = pebble.NoCompression
		ls[i].FilterPolicy = bloom.FilterPolicy(10)
		ls[i].FilterType = pebble.TableFilter
		if i > 0 {
			ls[i].TargetFileSize = ls[i-1].TargetFileSize * 2
		}
		ls[i].EnsureDefaults()
	}
	return ls
}

// MemTableSize is the memtable size a keyspace opened now would get.
func (s *Store) MemTableSize() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memTableSize(len(s.mu.open))
}

// Remove deletes the keyspace name from disk. It must not be open.
func (s *Store) Remove(name string) error {
	s.mu.Lock()
	_, open := s.mu.open[name]
	s.mu.Unlock()
	if open {
		return fmt.Errorf("state: keyspace %s is open", name)
	}
	if err := s.fs.RemoveAll(filepath.Join(s.opts.Dir, name)); err != nil {
		return fmt.Errorf("state: remove keyspace %s: %w", name, err)
	}
	return nil
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
	// largeBatch is the size from which Pebble keeps a committed batch as
	// a memtable of its own (in Go memory) until it is flushed, instead of
	// copying it into the memtable; flushDue is such a batch that
	// TakeFlush has not returned yet.
	largeBatch int64
	flushDue   Flush
	flushes    *flushTracker
	// For MakeRoom: memTable is Pebble's memtable size here; memCap
	// that of the memtable in use and memNext of the next (Pebble starts
	// small and doubles, see rotated); memUsed estimates what the commits
	// since the write-ahead log last rotated take of it (wals counts the
	// rotations, walsSeen is the count memUsed goes with), and lastCommit
	// what the last commit took.
	memTable, memCap, memNext, memUsed, lastCommit int64
	wals                                           *atomic.Int64
	walsSeen                                       int64
	// seal is where Seal ended the sealed checkpoint in batch: the
	// writes before it are what CommitSealed commits; {0, 0}: none.
	seal batchMark
	// base is where the checkpoint CommitSealed is committing in the
	// background (inflight) ends in batch: batch still holds it, so that
	// reads see it until Absorb has it in the store and drops it from
	// batch; {0, 0}: none.
	base     batchMark
	inflight *inflight
	// syncing are the background syncs of the write-ahead log after
	// CommitSealed, oldest first, that Settle has not collected.
	syncing []chan error
}

// inflight is a sealed checkpoint being committed on a goroutine of its
// own (CommitSealed): done is closed when the commit has ended, with err
// and what the commit took of the memtable (cost, large) set, and flush
// the batch Pebble keeps in memory until its flush.
type inflight struct {
	done  chan struct{}
	err   error
	cost  int64
	large bool
	flush Flush
}

// batchMark is a position in a batch: its length and entry count there.
type batchMark struct {
	len   int
	count uint32
}

// flushTracker follows a keyspace's flushes (Pebble runs one at a time,
// each taking every immutable memtable there is when it begins) so that a
// committed batch's flush can be waited for without forcing one.
type flushTracker struct {
	mu           sync.Mutex
	begun, ended int64
	waiters      []flushWaiter
	closed       bool
}

type flushWaiter struct {
	after int64 // done once more than this many flushes have ended
	done  chan struct{}
}

func (f *flushTracker) begin() {
	f.mu.Lock()
	f.begun++
	f.mu.Unlock()
}

func (f *flushTracker) end(err error) {
	if err != nil {
		return // Pebble tries again
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended++
	f.release(false)
}

// begunCount returns how many flushes have begun.
func (f *flushTracker) begunCount() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begun
}

// next returns a channel closed once a flush that began after the first
// after ones has ended (or the keyspace has closed).
func (f *flushTracker) next(after int64) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := flushWaiter{after: after, done: make(chan struct{})}
	if f.closed {
		close(w.done)
	} else {
		f.waiters = append(f.waiters, w)
	}
	return w.done
}

// release closes the channels of the waiters that are done, or of all when
// closing. f.mu held.
func (f *flushTracker) release(closing bool) {
	f.closed = f.closed || closing
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if f.closed || f.ended > w.after {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

func (f *flushTracker) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release(true)
}

// Flush is a committed batch that Pebble holds in memory until it has
// written it to disk.
type Flush struct {
	// Bytes is the memory held: the batch's buffer and index.
	Bytes int64
	// Done is closed once the batch is on disk and its memory released,
	// or once the keyspace is closed. Nil when there is nothing to wait for.
	Done <-chan struct{}
}

// Reserved key prefix: user keys must not start with 0x00.
var offsetsKey = []byte("\x00offsets")

// Get returns a copy of the value of key appended to dst, and whether it
// exists. It sees pending writes.
func (k *Keyspace) Get(dst, key []byte) ([]byte, bool, error) {
	if k.batch == nil {
		return dst, false, ErrClosed
	}
	v, closer, err := k.batch.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, fmt.Errorf("state: get in %s: %w", k.name, err)
	}
	dst = append(dst, v...)
	if err := closer.Close(); err != nil {
		return dst, false, fmt.Errorf("state: get in %s: %w", k.name, err)
	}
	return dst, true, nil
}

// GetCommitted returns a copy of the value of key as of the last
// checkpoint, appended to dst, and whether it exists. Unlike every other
// method it is safe for concurrent use with the owner's writes (a reader
// beside the task that owns the keyspace, e.g. a query server); it must
// not be called once Close has begun.
func (k *Keyspace) GetCommitted(dst, key []byte) ([]byte, bool, error) {
	v, closer, err := k.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, fmt.Errorf("state: get in %s: %w", k.name, err)
	}
	dst = append(dst, v...)
	if err := closer.Close(); err != nil {
		return dst, false, fmt.Errorf("state: get in %s: %w", k.name, err)
	}
	return dst, true, nil
}

// Set writes key=value to the pending batch. Both are copied.
func (k *Keyspace) Set(key, value []byte) error {
	if k.batch == nil {
		return ErrClosed
	}
	return k.batch.Set(key, value, nil)
}

// PendingBytes estimates the memory held by the writes since the last
// checkpoint or rollback: the capacity of the batch's buffer (it grows by
// doubling, so up to twice its length) plus that of its index (a skiplist
// of about batchNodeBytes per entry, also grown by doubling). The
// checkpoint CommitSealed is committing is not counted: CommittingBytes
// is.
func (k *Keyspace) PendingBytes() int64 {
	if k.batch == nil || k.batch.Empty() {
		return 0
	}
	return int64(cap(k.batch.Repr())-k.base.len) + nextPow2(batchNodeBytes*int64(k.batch.Count()-k.base.count))
}

// CommittingBytes estimates the memory the pending batch holds for the
// checkpoint CommitSealed is committing, until Absorb drops it: its part
// of the batch's buffer and of its index. 0 when none is in flight.
func (k *Keyspace) CommittingBytes() int64 {
	if k.batch == nil || k.base.len == 0 {
		return 0
	}
	return int64(k.base.len) + batchNodeBytes*int64(k.base.count)
}

// batchNodeBytes is the mean size of an indexed batch's skiplist node: 20
// bytes of offsets and abbreviated key and a tower of 8-byte links, 1.33
// links on average at pebble's branching factor of 4.
const batchNodeBytes = 32

// nextPow2 returns the smallest power of two ≥ n (0 for n ≤ 0).
func nextPow2(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return 1 << bits.Len64(uint64(n-1))
}

// Delete deletes key in the pending batch.
func (k *Keyspace) Delete(key []byte) error {
	if k.batch == nil {
		return ErrClosed
	}
	return k.batch.Delete(key, nil)
}

// DeleteRange deletes every key in [start, end) with one range tombstone:
// no scan, whatever the number of keys.
func (k *Keyspace) DeleteRange(start, end []byte) error {
	if k.batch == nil {
		return ErrClosed
	}
	return k.batch.DeleteRange(start, end, nil)
}

// Iter returns an iterator over [lower, upper) that sees pending writes. The
// caller must close it before Checkpoint or Rollback.
func (k *Keyspace) Iter(lower, upper []byte) (*Iterator, error) {
	if k.batch == nil {
		return nil, ErrClosed
	}
	it, err := k.batch.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("state: iterate %s: %w", k.name, err)
	}
	return &Iterator{it: it}, nil
}

// Iterator walks a key range of a keyspace in key order:
//
//	for it.First(); it.Valid(); it.Next() { … it.Key(), it.Value() … }
//	if err := it.Close(); err != nil { … }
//
// Key and Value are valid until the iterator moves; copy what you keep.
// Close returns the first error the walk met (Error reports it earlier).
type Iterator struct{ it *pebble.Iterator }

// First moves to the first key of the range and reports whether there is one.
func (i *Iterator) First() bool { return i.it.First() }

// Next moves to the next key and reports whether there is one.
func (i *Iterator) Next() bool { return i.it.Next() }

// Valid reports whether the iterator is at a key.
func (i *Iterator) Valid() bool { return i.it.Valid() }

// Key is the current key.
func (i *Iterator) Key() []byte { return i.it.Key() }

// Value is the current value.
func (i *Iterator) Value() []byte { return i.it.Value() }

// Error is the error that stopped the walk, if any.
func (i *Iterator) Error() error { return i.it.Error() }

// Close releases the iterator and returns the error that stopped the
// walk, if any.
func (i *Iterator) Close() error { return i.it.Close() }

// Offsets is the input position a checkpoint reflects: topic → partition →
// next offset to read.
type Offsets map[string]map[int32]int64

// Checkpoint commits the pending batch together with offsets. Unless the
// store has NoSync, it returns once the commit is on disk.
func (k *Keyspace) Checkpoint(offsets Offsets) error {
	if k.batch == nil {
		return ErrClosed
	}
	if err := k.absorb(true); err != nil {
		return err
	}
	if err := k.Settle(true); err != nil {
		return err
	}
	if k.seal.len > 0 {
		return errors.New("state: Checkpoint with a sealed checkpoint pending")
	}
	if err := k.batch.Set(offsetsKey, encodeOffsets(offsets), nil); err != nil {
		return err
	}
	opt := pebble.NoSync
	if k.sync {
		opt = pebble.Sync
	}
	if err := k.commit(k.batch, k.PendingBytes(), opt); err != nil {
		return err
	}
	k.batch, k.seal = k.db.NewIndexedBatch(), batchMark{}
	return nil
}

// commit commits b, which holds held bytes of memory, and closes it;
// TakeFlush then tells whether Pebble keeps it in memory until its flush.
func (k *Keyspace) commit(b *pebble.Batch, held int64, opt *pebble.WriteOptions) error {
	c := &inflight{}
	commitTo(c, k.name, k.flushes, b, held, k.largeBatch, opt)
	if c.err != nil {
		return c.err
	}
	k.committed(c)
	return nil
}

// commitTo commits b, which holds held bytes of memory, closes it, and
// sets c's outcome (all but done). It touches nothing of the keyspace but
// its flushes: CommitSealed runs it on a goroutine of its own.
func commitTo(c *inflight, name string, flushes *flushTracker, b *pebble.Batch, held, largeBatch int64, opt *pebble.WriteOptions) {
	c.large, c.cost = int64(b.Len()) >= largeBatch, int64(b.Len())+memNodeBytes*int64(b.Count())
	// Before the commit: the flush Pebble schedules for a large batch
	// may begin before Commit returns.
	begun := flushes.begunCount()
	if err := b.Commit(opt); err != nil {
		c.err = fmt.Errorf("state: checkpoint %s: %w", name, err)
		return
	}
	if err := b.Close(); err != nil {
		c.err = fmt.Errorf("state: checkpoint %s: %w", name, err)
		return
	}
	if c.large {
		// Pebble queued the batch, immutable, for a flush it has
		// scheduled: the first flush to begin after the commit did
		// takes it. (One that began during the commit, before the batch
		// was queued, ends the wait early: the count is low for a
		// while, never stuck.)
		c.flush = Flush{Bytes: held, Done: flushes.next(begun)}
	}
}

// committed notes a commit that has ended well: what it took of the
// memtable, and the batch Pebble holds until its flush (TakeFlush).
func (k *Keyspace) committed(c *inflight) {
	k.noteCommit(c.cost, c.large)
	if c.flush.Done != nil {
		k.flushDue = c.flush
	}
}

// noteCommit updates the estimate of the memtable's use with a committed
// batch of cost bytes in the memtable (large: Pebble keeps it as a
// memtable of its own, and rotated the write-ahead log for it).
func (k *Keyspace) noteCommit(cost int64, large bool) {
	// The commit may have rotated the memtable: the batch is then the
	// new one's first.
	k.seeRotations()
	if large {
		k.memUsed, k.lastCommit = 0, 0
		return
	}
	k.memUsed += cost
	k.lastCommit = cost
}

// memNodeBytes estimates what a memtable entry takes besides its key and
// value: its skiplist node (offsets, tower) in the arena.
const memNodeBytes = 48

// MakeRoom rotates the memtable now when a commit the size of the last
// one might not fit in what is left of it. Pebble rotates a full
// memtable inside the commit that overflows it, and a rotation closes
// the write-ahead log with a sync and syncs its directory: two disk
// syncs inside a checkpoint's local commit (tens of milliseconds on a
// slow disk, the outliers of the checkpoint pause). Called between
// checkpoints, it pays them outside the pause; the memtable is flushed in
// the background as Pebble would have. Not while the memtable before is
// still being flushed: the rotation would wait for that flush.
func (k *Keyspace) MakeRoom() error {
	if k.batch == nil {
		return ErrClosed
	}
	if k.inflight != nil {
		// What the commit in flight takes is not known yet: Absorb
		// knows.
		return nil
	}
	k.seeRotations()
	if k.lastCommit == 0 || k.memUsed+2*k.lastCommit < k.memCap {
		return nil
	}
	if k.db.Metrics().MemTable.Count > 1 {
		// The last memtable is still being flushed: a rotation now
		// would wait for it (a write stall, Pebble keeps two). Pebble
		// rotates in the commit that needs it, as without MakeRoom.
		return nil
	}
	if k.memUsed < k.memCap/2 {
		// Pebble does not grow the next memtable after a flush asked
		// for with less than half of it used.
		k.memNext = k.memCap
	}
	if _, err := k.db.AsyncFlush(); err != nil {
		return fmt.Errorf("state: rotate memtable of %s: %w", k.name, err)
	}
	k.seeRotations()
	return nil
}

// initialMemTable is the size of Pebble's first memtable; each new one
// doubles it, up to Options.MemTableSize.
const initialMemTable = 256 << 10

// seeRotations follows the memtable rotations Pebble made since the last
// look (in a commit that overflowed the memtable, for a large batch).
func (k *Keyspace) seeRotations() {
	for n := k.wals.Load(); k.walsSeen < n; k.walsSeen++ {
		k.rotated()
	}
}

// rotated moves the estimate to a new, empty memtable.
func (k *Keyspace) rotated() {
	k.memCap, k.memNext, k.memUsed = k.memNext, min(2*k.memNext, k.memTable), 0
}

// Seal ends the checkpoint in the pending batch: offsets are written with
// it, and the writes up to here are what CommitSealed commits. Writes after
// Seal belong to the next checkpoint; reads see all of them.
func (k *Keyspace) Seal(offsets Offsets) error {
	if k.batch == nil {
		return ErrClosed
	}
	if k.seal.len > 0 {
		return errors.New("state: Seal over a sealed checkpoint")
	}
	if err := k.batch.Set(offsetsKey, encodeOffsets(offsets), nil); err != nil {
		return err
	}
	k.seal = batchMark{len: k.batch.Len(), count: k.batch.Count()}
	return nil
}

// CommitSealed commits the sealed checkpoint (Seal) on a goroutine of its
// own and returns: the writes made since Seal, and those made while the
// commit runs, go on in the pending batch, and reads see the checkpoint
// there until Absorb drops it from the batch once the commit has ended.
// The write-ahead log is then synced in the background too (unless the
// store has NoSync; Settle waits for it). A crash before that sync ends
// leaves the keyspace at an earlier checkpoint, as a crash before the
// commit would. What the commit took is known once Absorb (or a method
// that waits for the commit: the next CommitSealed, Checkpoint,
// Rollback, Close) has returned.
func (k *Keyspace) CommitSealed() error {
	if k.batch == nil {
		return ErrClosed
	}
	if k.seal.len == 0 {
		return errors.New("state: CommitSealed without Seal")
	}
	if err := k.absorb(true); err != nil {
		return err
	}
	// A sync still running for an earlier commit is not waited for: the
	// log is synced in order, a later sync covers it.
	if err := k.Settle(false); err != nil {
		return err
	}
	sealed := k.db.NewBatch()
	if err := sealed.SetRepr(batchPart(k.batch.Repr(), batchHeaderLen, k.seal.len, k.seal.count)); err != nil {
		return fmt.Errorf("state: checkpoint %s: %w", k.name, err)
	}
	held := int64(sealed.Len()) + nextPow2(batchNodeBytes*int64(k.seal.count))
	c := &inflight{done: make(chan struct{})}
	var synced chan error
	if k.sync {
		synced = make(chan error, 1)
		k.syncing = append(k.syncing, synced)
	}
	name, db, flushes, large := k.name, k.db, k.flushes, k.largeBatch
	go func() {
		commitTo(c, name, flushes, sealed, held, large, pebble.NoSync)
		err := c.err // c is the owner's once done is closed
		close(c.done)
		if synced != nil {
			synced <- syncLog(db, name, err)
		}
	}()
	k.base, k.seal, k.inflight = k.seal, batchMark{}, c
	return nil
}

// Committing is closed once the commit CommitSealed began has ended; nil
// when none is in flight. The owner then calls Absorb.
func (k *Keyspace) Committing() <-chan struct{} {
	if k.inflight == nil {
		return nil
	}
	return k.inflight.done
}

// Absorb, once the commit CommitSealed began has ended, drops the
// committed checkpoint from the pending batch (reads find it in the store
// now) and returns the commit's error. It does nothing while the commit
// runs or when none is in flight.
func (k *Keyspace) Absorb() error {
	if k.batch == nil {
		return ErrClosed
	}
	return k.absorb(false)
}

// absorb is Absorb; with wait, it waits for the commit first.
func (k *Keyspace) absorb(wait bool) error {
	c := k.inflight
	if c == nil {
		return nil
	}
	if !wait {
		select {
		case <-c.done:
		default:
			return nil
		}
	}
	<-c.done
	k.inflight = nil
	base := k.base
	k.base = batchMark{}
	if c.err != nil {
		return c.err
	}
	k.committed(c)
	// The writes since the checkpoint, in a batch of their own.
	rest := k.db.NewIndexedBatch()
	if n := k.batch.Count() - base.count; n > 0 {
		repr := k.batch.Repr()
		tail := k.db.NewBatch()
		if err := tail.SetRepr(batchPart(repr, base.len, len(repr), n)); err != nil {
			return fmt.Errorf("state: checkpoint %s: %w", k.name, err)
		}
		if err := rest.Apply(tail, nil); err != nil {
			return fmt.Errorf("state: checkpoint %s: %w", k.name, err)
		}
		tail.Close()
	}
	if k.seal.len > 0 {
		// Sealed since: the mark moves with the writes.
		k.seal = batchMark{len: k.seal.len - base.len + batchHeaderLen, count: k.seal.count - base.count}
	}
	k.batch.Close()
	k.batch = rest
	return nil
}

// syncLog syncs db's write-ahead log, unless the commit before failed
// (then its error is the sync's).
func syncLog(db *pebble.DB, name string, failed error) error {
	if failed != nil {
		return failed
	}
	if err := db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("state: sync checkpoint of %s: %w", name, err)
	}
	return nil
}

// batchPart is a batch of the entries repr holds in [from, to), count of
// them: a copy, with a header of its own.
func batchPart(repr []byte, from, to int, count uint32) []byte {
	data := make([]byte, batchHeaderLen, batchHeaderLen+to-from)
	binary.LittleEndian.PutUint32(data[8:], count)
	return append(data, repr[from:to]...)
}

// batchHeaderLen is the length of a Pebble batch's header (sequence
// number and count).
const batchHeaderLen = 12

// Settle returns the first error of CommitSealed's background syncs that
// have ended — with wait, after waiting for every one; without, of those
// that have ended so far.
func (k *Keyspace) Settle(wait bool) error {
	var err error
	for ; len(k.syncing) > 0; k.syncing = k.syncing[1:] {
		var e error
		if wait {
			e = <-k.syncing[0]
		} else {
			select {
			case e = <-k.syncing[0]:
			default:
				return err
			}
		}
		err = cmp.Or(err, e)
	}
	k.syncing = nil
	return err
}

// TakeFlush returns the batch a commit ended since the last call left in
// memory until its flush (a batch of half a memtable or more: Pebble keeps
// it as a memtable of its own), and forgets it; the zero Flush when there
// is none. A commit that CommitSealed runs in the background has ended
// once Absorb (or a method that waits for it) has returned.
func (k *Keyspace) TakeFlush() Flush {
	f := k.flushDue
	k.flushDue = Flush{}
	return f
}

// Rollback discards every write since the last checkpoint (a sealed one
// not committed included). On a closed keyspace it does nothing. It
// returns the error of a background sync that has ended (Settle).
func (k *Keyspace) Rollback() error {
	if k.batch == nil {
		return nil
	}
	err := errors.Join(k.absorb(true), k.Settle(false))
	k.batch.Close() // a batch's Close only returns it to the pool
	k.batch = k.db.NewIndexedBatch()
	k.seal = batchMark{}
	return err
}

// Offsets returns the offsets recorded by the last checkpoint (nil if none).
func (k *Keyspace) Offsets() (Offsets, error) {
	if k.batch == nil {
		return nil, ErrClosed
	}
	v, closer, err := k.db.Get(offsetsKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: read offsets of %s: %w", k.name, err)
	}
	o, derr := decodeOffsets(v)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("state: read offsets of %s: %w", k.name, err)
	}
	return o, derr
}

// Size is the approximate on-disk size of the keyspace in bytes (0 once
// closed).
func (k *Keyspace) Size() uint64 {
	if k.batch == nil {
		return 0
	}
	m := k.db.Metrics()
	return m.DiskSpaceUsage()
}

// Close discards pending writes and closes the keyspace. A second Close
// returns ErrClosed, as does every other method afterwards.
func (k *Keyspace) Close() error {
	if k.batch == nil {
		return ErrClosed
	}
	k.store.mu.Lock()
	if k.store.mu.open[k.name] == k {
		delete(k.store.mu.open, k.name)
	}
	k.store.mu.Unlock()
	cerr := errors.Join(k.absorb(true), k.Settle(true))
	k.batch.Close()
	k.batch = nil
	k.flushes.close()
	if err := k.db.Close(); err != nil {
		return errors.Join(cerr, fmt.Errorf("state: close keyspace %s: %w", k.name, err))
	}
	return cerr
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

// pebbleLogger passes Pebble's messages to slog: informational ones at
// debug level, errors at error level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...interface{}) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (l pebbleLogger) Errorf(format string, args ...interface{}) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is for Pebble's invariant violations: it must not return.
func (l pebbleLogger) Fatalf(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble: fatal: " + msg)
	panic("state: pebble: " + msg)
}

// eventListener logs what in Pebble's background goes wrong or slows
// writes down.
func eventListener(log *slog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) { log.Error("pebble background error", "err", err) },
		DiskSlow: func(info pebble.DiskSlowInfo) {
			log.Warn("pebble disk slow", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() { log.Info("pebble write stall ended") },
	}
}
