package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// checkpointKey is the changelog record that closes a checkpoint; its value
// holds the task's input offsets at that checkpoint.
var checkpointKey = []byte("\x00\x02checkpoint")

// restoreBatchBytes bounds the writes held in memory while restoring.
const restoreBatchBytes = 64 << 20

// openKeyspace opens task p's keyspace, making sure it reflects the group's
// committed offsets: local state that does not (a crash between the Kafka
// commit and the local one, a lost disk, a task that moved) is discarded and
// rebuilt from the changelog.
func (e *Engine) openKeyspace(p int32) (*state.Keyspace, error) {
	name := keyspaceName(e.topo.Name, p)
	ks, err := e.cfg.Store.Keyspace(name)
	if err != nil {
		return nil, fmt.Errorf("engine: open state for partition %d: %w", p, err)
	}
	if e.committed == nil || e.topo.Changelog == "" {
		return ks, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.TransactionTimeout)
	defer cancel()
	want, err := e.committed(ctx, p)
	if err != nil {
		ks.Close()
		return nil, err
	}
	offs, err := ks.Offsets()
	if err != nil {
		ks.Close()
		return nil, err
	}
	have := map[string]int64{}
	for topic, ps := range offs {
		if o, ok := ps[p]; ok {
			have[topic] = o
		}
	}
	if maps.Equal(have, want) {
		return ks, nil
	}
	start := time.Now()
	ks.Close()
	if err := e.cfg.Store.Remove(name); err != nil {
		return nil, err
	}
	if ks, err = e.cfg.Store.Keyspace(name); err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return ks, nil // nothing committed: a fresh start
	}
	n, err := e.restore(ctx, ks, p, want)
	if err != nil {
		ks.Close()
		return nil, fmt.Errorf("engine: restore partition %d from %s: %w", p, e.topo.Changelog, err)
	}
	e.log.Info("restored state from changelog", "partition", p, "records", n, "took", time.Since(start).Round(time.Millisecond), "local_offsets", have, "committed", want)
	return ks, nil
}

// restore replays changelog partition p into ks up to the checkpoint
// record whose offsets are want, and checkpoints ks with them.
func (e *Engine) restore(ctx context.Context, ks *state.Keyspace, p int32, want map[string]int64) (int, error) {
	opts := append([]kgo.Opt{}, e.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topo.Changelog: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	n, pending := 0, 0
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("no checkpoint record with offsets %v before the deadline: %w", want, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return n, ferr
		}
		done := false
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || aerr != nil {
				return
			}
			n++
			if string(r.Key) == string(checkpointKey) {
				got, err := decodeTaskOffsets(r.Value)
				if err != nil {
					aerr = err
					return
				}
				done = maps.Equal(got, want)
				return
			}
			if r.Value == nil {
				aerr = ks.Delete(r.Key)
			} else {
				aerr = ks.Set(r.Key, r.Value)
			}
			pending += len(r.Key) + len(r.Value)
			if pending > restoreBatchBytes {
				// Durable progress without offsets: an interrupted restore
				// does not match and starts over.
				aerr = ks.Checkpoint(state.Offsets{})
				pending = 0
			}
		})
		if aerr != nil {
			return n, aerr
		}
		if done {
			offs := state.Offsets{}
			for topic, o := range want {
				offs[topic] = map[int32]int64{p: o}
			}
			return n, ks.Checkpoint(offs)
		}
	}
}

// fetchCommitted returns the group's committed offsets of partition p.
func (e *Engine) fetchCommitted(ctx context.Context, p int32) (map[string]int64, error) {
	adm := kadm.NewClient(e.sess.Client())
	for {
		resp, err := adm.FetchOffsets(ctx, e.cfg.Group)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			out := map[string]int64{}
			for _, in := range e.topo.Inputs {
				if o, ok := resp.Lookup(in.Topic, p); ok && o.At >= 0 {
					out[in.Topic] = o.At
				}
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("engine: fetch committed offsets of group %s: %w", e.cfg.Group, errors.Join(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond): // retry (e.g. unstable offsets of a fenced zombie)
		}
	}
}

func encodeTaskOffsets(offs map[string]int64) []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(offs)))
	for t, o := range offs {
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.AppendVarint(b, o)
	}
	return b
}

func decodeTaskOffsets(b []byte) (map[string]int64, error) {
	bad := errors.New("engine: corrupt checkpoint record")
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, bad
	}
	b = b[k:]
	out := make(map[string]int64, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return nil, bad
		}
		t := string(b[k : k+int(l)])
		b = b[k+int(l):]
		o, k2 := binary.Varint(b)
		if k2 <= 0 {
			return nil, bad
		}
		b = b[k2:]
		out[t] = o
	}
	return out, nil
}
