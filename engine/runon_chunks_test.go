package engine

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// chunker keeps what fuse keeps of a trace: per key, a count in memory (a
// Restorer reloads it from state) of chunks stored under keys of their own,
// a record appending one, and every fifth purging them all (their keys are
// used again by the next ones). Before each append it reads every chunk
// its count says is there: a write state lost, or a count that outlived a
// rollback, fails the task.
type chunker struct {
	n    map[string]uint32
	cost time.Duration
	held *atomic.Int64
}

func chunkMetaKey(k []byte) []byte { return append([]byte("m"), k...) }
func chunkDataKey(k []byte, i uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte("d"), k...), i)
}

func (c *chunker) Process(t *Task, r *kgo.Record, _ int) error {
	if t.holding {
		c.held.Add(1)
	}
	time.Sleep(c.cost) // the work of processing the record, not synchronisation
	k := string(r.Key)
	n := c.n[k]
	for i := range n {
		if _, ok, err := t.State.Get(nil, chunkDataKey(r.Key, i)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("key %s: chunk %d of %d missing", k, i, n)
		}
	}
	if n == 4 {
		for i := range n {
			if err := t.State.Delete(chunkDataKey(r.Key, i)); err != nil {
				return err
			}
		}
		c.n[k] = 0
		return t.State.Delete(chunkMetaKey(r.Key))
	}
	if err := t.State.Set(chunkDataKey(r.Key, n), r.Value); err != nil {
		return err
	}
	c.n[k] = n + 1
	return t.State.Set(chunkMetaKey(r.Key), binary.BigEndian.AppendUint32(nil, n+1))
}

func (c *chunker) Restore(t *Task) error {
	clear(c.n)
	it, err := t.State.Iter([]byte("m"), []byte("n"))
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		c.n[string(it.Key()[1:])] = binary.BigEndian.Uint32(it.Value())
	}
	return it.Close()
}

// TestKfakeRunOnKeepsStateWhole runs chunker with tasks running on past
// slow transaction ends, through aborts (failed offset commits), a kill and
// restarts from the same directory and from an empty one (state rebuilt
// from the changelog): no chunk its counts name is ever missing, and every
// record is read.
func TestKfakeRunOnKeepsStateWhole(t *testing.T) {
	f := newFakeEnv(t, 2)
	f.c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		f.c.SleepControl(func() { time.Sleep(60 * time.Millisecond) }) // a slow broker, not synchronisation
		return nil, nil, false
	})
	var held atomic.Int64
	dir := t.TempDir()
	run := func(dir string, fault bool, n int, kill bool) {
		t.Helper()
		cfg := f.config(t, dir, "chunker-0")
		cfg.RunOn = true
		cfg.MaxPollRecords = 20
		topo := f.topology()
		topo.NewProcessor = func(*Task) (Processor, error) {
			return &chunker{n: map[string]uint32{}, cost: time.Millisecond, held: &held}, nil
		}
		e, err := New(cfg, topo)
		if err != nil {
			t.Fatal(err)
		}
		f.produce(t, 7, n, int64(len(f.input))+1)
		r := start(t, e)
		var fh *kfake.FaultHandle
		if fault {
			fh = f.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError, Count: 3})
		}
		want := int64(n)
		if kill {
			want /= 2
		}
		waitCond(t, 60*time.Second, "the input read", func() bool { return e.Stats().RecordsIn.Load() >= want }, r)
		if fh != nil {
			waitCond(t, 60*time.Second, "three aborts", func() bool { return fh.Hits() >= 3 && e.Stats().Aborts.Load() >= 3 }, r)
			cps := e.Stats().Checkpoints.Load()
			waitCond(t, 60*time.Second, "two checkpoints after them", func() bool { return e.Stats().Checkpoints.Load() >= cps+2 }, r)
		}
		if kill {
			if err := r.kill(t); err == nil {
				t.Log("killed")
			}
		} else if err := r.stop(t); err != nil {
			t.Fatalf("run: %v", err)
		}
		if err := cfg.Store.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(dir, true, 3000, false)
	run(dir, false, 3000, true)
	run(dir, true, 2000, false)
	run(t.TempDir(), false, 1000, false)
	if held.Load() == 0 {
		t.Error("no record was processed while a transaction ended")
	}
	t.Logf("%d records processed while running on", held.Load())
}
