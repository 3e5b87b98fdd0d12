package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

// watchAlerts prints every alert state change of topic on addr (the alerts
// stage's braid.alerts) as the job commits it.
func watchAlerts(ctx context.Context, addr, topic string, out io.Writer) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			var a braidpb.Alert
			if proto.Unmarshal(r.Value, &a) != nil {
				return
			}
			fmt.Fprintln(out, describeAlert(&a))
		})
	}
}

// alertExemplars is how many trace or incident ids describeAlert prints.
const alertExemplars = 3

// describeAlert is one line for an operator: when (event time of the
// window that changed it), the new state, the rule and its group, the
// value against the threshold and the first requests or incidents behind
// it.
func describeAlert(a *braidpb.Alert) string {
	state := strings.TrimPrefix(a.GetState().String(), "ALERT_STATE_")
	at := time.Unix(0, int64(a.GetWindowEndUnixNano())).Format("15:04:05")
	var b strings.Builder
	fmt.Fprintf(&b, "** ALERT %-8s %s  %s {%s}", state, at, a.GetRule(), labelSet(a.GetGroup()))
	if a.Value != nil {
		fmt.Fprintf(&b, "  value %s", strconv.FormatFloat(a.GetValue(), 'g', 4, 64))
		if a.Threshold != nil {
			fmt.Fprintf(&b, " vs threshold %s", strconv.FormatFloat(a.GetThreshold(), 'g', 4, 64))
		}
	}
	fmt.Fprintf(&b, "  %s, episode %d", a.GetSeverity(), a.GetEpisode())
	if ids := a.GetTraceIds(); len(ids) > 0 {
		fmt.Fprintf(&b, "; traces %s", firstIDs(ids))
	}
	if ids := a.GetIncidentIds(); len(ids) > 0 {
		fmt.Fprintf(&b, "; incidents %s", firstIDs(ids))
	}
	return b.String()
}

// labelSet renders labels as Prometheus does: name="value", by name.
func labelSet(m map[string]string) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return strings.Join(parts, ",")
}

func firstIDs(ids []string) string {
	if len(ids) <= alertExemplars {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:alertExemplars], ", ") + fmt.Sprintf(" (+%d)", len(ids)-alertExemplars)
}
