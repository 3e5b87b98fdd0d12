package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
)

// watchIncidents prints every new KV-cache pollution incident of topic on
// addr, and its growth, as the kvgraph stage commits it; now is the event
// time now (how long after its root event an incident is known).
func watchIncidents(ctx context.Context, addr, topic string, out io.Writer, now func() time.Time) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	polluted := map[string]int{}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			var inc braidpb.Incident
			if proto.Unmarshal(r.Value, &inc) != nil {
				return
			}
			n, seen := polluted[inc.Id]
			if seen && n == len(inc.Polluted) {
				return // a revision that adds no victim (evidence, close)
			}
			polluted[inc.Id] = len(inc.Polluted)
			fmt.Fprintln(out, describeIncident(&inc, seen, now()))
		})
	}
}

// describeIncident is one line for an operator: what, where, root cause,
// blast radius and how long after the root event it is known.
func describeIncident(inc *braidpb.Incident, grown bool, now time.Time) string {
	verb := "INCIDENT"
	if grown {
		verb = "incident grows"
	}
	direct, propagated := 0, 0
	for _, p := range inc.Polluted {
		if p.Via == braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED {
			propagated++
		} else {
			direct++
		}
	}
	root := inc.GetRoot()
	at := time.Unix(0, int64(root.GetTimeUnixNano()))
	s := fmt.Sprintf("!! %s %s: %s on %s (%s) — root cause: request %s, block %d",
		verb, inc.Id, kvgraph.KindName(inc.Pattern), inc.Gpu, inc.Host, root.GetRequestId(), root.GetBlock())
	if root.GetLayer() >= 0 {
		s += fmt.Sprintf(", layer %d", root.GetLayer())
	}
	s += fmt.Sprintf(" at %s", at.Format("15:04:05.000"))
	if d := root.GetDetail(); d != "" {
		s += " (" + d + ")"
	}
	s += fmt.Sprintf("; %d requests polluted (%d direct, %d through the prefix cache)", len(inc.Polluted), direct, propagated)
	if len(inc.Evidence) > 0 {
		s += fmt.Sprintf("; %d supporting lines", len(inc.Evidence))
	}
	if !grown && !at.IsZero() && now.After(at) {
		s += fmt.Sprintf("; known %.1fs after the root event", now.Sub(at).Seconds())
	}
	return s + "   (braid graph --brokers … --incident " + inc.Id + ")"
}
