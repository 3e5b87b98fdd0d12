package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// checkpointKey is the changelog record that closes a checkpoint; its value
// holds the task's input offsets at that checkpoint.
var checkpointKey = []byte("\x00\x02checkpoint")

// openKeyspace opens task p's keyspace, making sure it reflects the group's
// committed offsets: local state that does not (a crash between the Kafka
// commit and the local one, a lost disk, a task that moved) is discarded and
// rebuilt from the changelog. seek, when not nil, holds the offsets the
// task's consumption must go back to: the changelog had no checkpoint with
// the committed offsets, and the state is that of its latest checkpoint.
func (e *Engine) openKeyspace(ctx context.Context, p int32) (ks *state.Keyspace, seek map[string]int64, err error) {
	name := keyspaceName(e.topo.Name, p)
	ks, err = e.cfg.Store.Keyspace(name)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: open state for partition %d: %w", p, err)
	}
	if e.committed == nil || e.topo.Changelog == "" {
		return ks, nil, nil
	}
	want, err := e.committed(ctx, p)
	if err != nil {
		return nil, nil, errors.Join(err, ks.Close())
	}
	offs, err := ks.Offsets()
	if err != nil {
		return nil, nil, errors.Join(err, ks.Close())
	}
	have := map[string]int64{}
	for topic, ps := range offs {
		if o, ok := ps[p]; ok {
			have[topic] = o
		}
	}
	if maps.Equal(have, want) {
		return ks, nil, nil
	}
	start := time.Now()
	if err := ks.Close(); err != nil {
		return nil, nil, fmt.Errorf("engine: close stale state of partition %d: %w", p, err)
	}
	if err := e.cfg.Store.Remove(name); err != nil {
		return nil, nil, err
	}
	if ks, err = e.cfg.Store.Keyspace(name); err != nil {
		return nil, nil, err
	}
	if len(want) == 0 {
		return ks, nil, nil // nothing committed: a fresh start
	}
	// At most maxConcurrentRestores at once: each holds its fetches and
	// a checkpoint's writes.
	select {
	case e.restoring <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, errors.Join(fmt.Errorf("engine: restore partition %d: %w", p, ctx.Err()), ks.Close())
	}
	res, err := e.restore(ctx, ks, p, want)
	<-e.restoring
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("engine: restore partition %d from %s: %w", p, e.topo.Changelog, err), ks.Close())
	}
	took := time.Since(start).Round(time.Millisecond)
	if res.why != "" {
		e.log.Warn("restored state from the changelog's latest checkpoint, not the committed one; consumption goes back to its offsets",
			"partition", p, "why", res.why, "records", res.records, "took", took, "committed", want, "resume_at", res.offsets)
		return ks, res.offsets, nil
	}
	e.log.Info("restored state from changelog", "partition", p, "records", res.records, "took", took, "local_offsets", have, "committed", want)
	return ks, nil, nil
}

type restoreResult struct {
	records int
	// offsets of the checkpoint the state reflects.
	offsets map[string]int64
	// why is set when that is not the committed checkpoint.
	why string
}

// restore replays changelog partition p into the empty keyspace ks up to
// the checkpoint record whose offsets are want, and checkpoints ks with
// them. A changelog that ends (read_committed) without such a record is
// replayed to its latest checkpoint record instead; the result says so.
func (e *Engine) restore(ctx context.Context, ks *state.Keyspace, p int32, want map[string]int64) (restoreResult, error) {
	opts := append([]kgo.Opt{}, e.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topo.Changelog: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers come back too, so the position reaches the
		// end offset exactly.
		kgo.KeepControlRecords(),
	)
	var res restoreResult
	cl, err := newSizedClient(opts, e.fetchShare())
	if err != nil {
		return res, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, e.topo.Changelog)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return res, fmt.Errorf("list end offset: %w", err)
	}
	end, ok := ends.Lookup(e.topo.Changelog, p)
	if !ok {
		return res, fmt.Errorf("no end offset for partition %d", p)
	}
	r := restorer{ks: ks}
	var last map[string]int64 // offsets of the latest checkpoint record
	pos := int64(0)
	found := false
	for !found && pos < end.Offset {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("replayed %d records up to offset %d of %d: %w", res.records, pos, end.Offset, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if kerr.IsRetriable(err) {
				e.log.Warn("changelog fetch failed; retrying", "partition", p, "err", err)
				return
			}
			ferr = err
		})
		if ferr != nil {
			return res, fmt.Errorf("fetch at offset %d: %w", pos, ferr)
		}
		var aerr error
		fs.EachRecord(func(rec *kgo.Record) {
			if found || aerr != nil {
				return
			}
			pos = rec.Offset + 1
			if rec.Attrs.IsControl() {
				return
			}
			res.records++
			if string(rec.Key) == string(checkpointKey) {
				got, err := decodeTaskOffsets(rec.Value)
				if err != nil {
					aerr = err
					return
				}
				last = got
				found = maps.Equal(got, want)
				aerr = r.checkpointed()
				return
			}
			aerr = r.apply(rec)
		})
		if aerr != nil {
			return res, aerr
		}
	}
	res.offsets = want
	switch {
	case found:
	case last == nil:
		// Nothing to go back to: keep the committed offsets with what the
		// changelog holds (without a checkpoint record: nothing, normally).
		e.log.Error("changelog has no checkpoint record; state starts from what it holds, at the committed offsets",
			"partition", p, "changelog", e.topo.Changelog, "records", res.records, "end_offset", end.Offset, "committed", want)
	default:
		res.why = fmt.Sprintf("the changelog ends at offset %d without a checkpoint record with the committed offsets %v; its latest has %v", end.Offset, want, last)
		res.offsets = last
	}
	// Writes after the last checkpoint record are no checkpoint's.
	if err := r.ks.Rollback(); err != nil {
		return res, err
	}
	if err := ks.DeleteRange(chunkKeyPrefix, chunkKeyEnd); err != nil {
		return res, err
	}
	offs := state.Offsets{}
	for topic, o := range res.offsets {
		offs[topic] = map[int32]int64{p: o}
	}
	return res, ks.Checkpoint(offs)
}

// restorer applies changelog records to a keyspace, putting chunked values
// back together.
type restorer struct {
	ks      *state.Keyspace
	pending int // bytes applied since the last checkpoint record
	// chunked: keys whose value was chunked, set in this restore.
	chunked map[string]bool
}

// checkpointed is called at each checkpoint record: what was applied so far
// is a consistent state, committed to the keyspace (without offsets, so an
// interrupted restore does not match and starts over), so that what
// follows can be rolled back if no later checkpoint record closes it.
func (r *restorer) checkpointed() error {
	if r.pending == 0 {
		return nil
	}
	r.pending = 0
	return r.ks.Checkpoint(state.Offsets{})
}

func (r *restorer) apply(rec *kgo.Record) error {
	r.pending += len(rec.Key) + len(rec.Value)
	if bytes.HasPrefix(rec.Key, chunkKeyPrefix) {
		// Chunk 1… of a value whose head record follows.
		if rec.Value == nil {
			return r.ks.Delete(rec.Key)
		}
		return r.ks.Set(rec.Key, rec.Value)
	}
	if r.chunked[string(rec.Key)] {
		delete(r.chunked, string(rec.Key))
		if err := r.ks.Delete(chunkedKey(rec.Key)); err != nil {
			return err
		}
	}
	if rec.Value == nil {
		return r.ks.Delete(rec.Key)
	}
	i, n, chunk := chunkOf(rec)
	if !chunk {
		return r.ks.Set(rec.Key, rec.Value)
	}
	if i != 0 || n == 0 {
		return fmt.Errorf("changelog record at offset %d has malformed chunk headers", rec.Offset)
	}
	v := append([]byte(nil), rec.Value...)
	for c := 1; c < n; c++ {
		var ok bool
		var err error
		v, ok, err = r.ks.Get(v, chunkKey(rec.Key, c))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("changelog record at offset %d: chunk %d of %d is missing", rec.Offset, c, n)
		}
	}
	if r.chunked == nil {
		r.chunked = map[string]bool{}
	}
	r.chunked[string(rec.Key)] = true
	if err := r.ks.Set(chunkedKey(rec.Key), binary.AppendUvarint(nil, uint64(n))); err != nil {
		return err
	}
	return r.ks.Set(rec.Key, v)
}

// fetchCommitted returns the group's committed offsets of partition p,
// stable ones: while a transaction that commits offsets of the group is
// open (the task's previous owner finishing its last checkpoint), the
// broker answers UNSTABLE_OFFSET_COMMIT and this waits. An unstable read
// would give the offsets before that transaction: the state would be
// restored to them while consumption (kgo always fetches stable offsets)
// resumes after it, and what that transaction emitted would be emitted
// again.
func (e *Engine) fetchCommitted(ctx context.Context, p int32) (map[string]int64, error) {
	adm := kadm.NewClient(e.sess.Client())
	for {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), e.cfg.Group)
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
