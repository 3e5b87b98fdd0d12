package view

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics are braid's output topics the view reads.
type Topics struct {
	Fused, Incidents, Alerts string
}

// DefaultTopics are the job's default output topics.
var DefaultTopics = Topics{Fused: "braid.fused", Incidents: "braid.incidents", Alerts: "braid.alerts"}

// Follow reads the topics into ix until ctx ends: read_committed (only
// what braid's checkpoints committed), every partition, from the position
// the index committed, or, for a partition it never read, from Retention
// before now. It needs no consumer group, so any number of views can read
// one cluster. Partitions and topics that appear later are picked up
// within discover. opts configure the client (brokers, TLS, SASL).
func Follow(ctx context.Context, ix *Index, topics Topics, log *slog.Logger, opts ...kgo.Opt) error {
	if log == nil {
		log = slog.Default()
	}
	opts = append([]kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	kinds := map[string]Kind{}
	for name, k := range map[string]Kind{topics.Fused: KindFused, topics.Incidents: KindIncident, topics.Alerts: KindAlert} {
		if name != "" {
			kinds[name] = k
		}
	}
	names := make([]string, 0, len(kinds))
	for t := range kinds {
		names = append(names, t)
	}
	f := &follower{ix: ix, cl: cl, adm: kadm.NewClient(cl), names: names, log: log, added: map[string]map[int32]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go f.discoverLoop(ctx)
	var recs []Record
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("view: fetch", "topic", t, "partition", p, "err", err)
			}
		})
		recs = recs[:0]
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, Record{Kind: kinds[r.Topic], Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
		})
		if len(recs) == 0 {
			continue
		}
		if err := ix.Apply(recs); err != nil {
			if errors.Is(err, errClosed) {
				return nil
			}
			return err
		}
	}
}

type follower struct {
	ix    *Index
	cl    *kgo.Client
	adm   *kadm.Client
	names []string
	log   *slog.Logger
	added map[string]map[int32]bool
}

// discover is how often the follower looks for new partitions and
// measures its lag.
const discover = 2 * time.Second

func (f *follower) discoverLoop(ctx context.Context) {
	t := time.NewTicker(discover)
	defer t.Stop()
	for {
		f.discover(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// discover adds the partitions not consumed yet, and records the lag.
func (f *follower) discover(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tds, err := f.adm.ListTopics(cctx, f.names...)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Debug("view: list topics", "err", err)
		}
		return
	}
	committed := f.ix.Offsets()
	since := time.Now().Add(-f.ix.opts.Retention).UnixMilli()
	add := map[string]map[int32]kgo.Offset{}
	for _, td := range tds {
		if td.Err != nil {
			continue
		}
		for p := range td.Partitions {
			if f.added[td.Topic][p] {
				continue
			}
			if f.added[td.Topic] == nil {
				f.added[td.Topic] = map[int32]bool{}
			}
			f.added[td.Topic][p] = true
			if add[td.Topic] == nil {
				add[td.Topic] = map[int32]kgo.Offset{}
			}
			if o, ok := committed[td.Topic][p]; ok {
				add[td.Topic][p] = kgo.NewOffset().At(o)
			} else {
				add[td.Topic][p] = kgo.NewOffset().AfterMilli(since)
			}
		}
	}
	if len(add) > 0 {
		f.cl.AddConsumePartitions(add)
	}
	ends, err := f.adm.ListEndOffsets(cctx, f.names...)
	if err != nil {
		return
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if n := o.Offset - committed[o.Topic][o.Partition]; n > 0 {
			lag += n
		}
	})
	f.ix.setLag(lag)
}
