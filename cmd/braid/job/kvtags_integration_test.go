package job

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/braidpb"
)

// TestIntegrationPollutedTracesTaggedInABacklog: a fleet's history with
// KV-cache faults of every trigger, produced before braid starts, is read
// as a backlog; every request the simulator's truth says was polluted, and
// that has spans, gets FLAG_POLLUTED and its incident's id in the latest
// revision of its FusedTrace — however far the watermark ran ahead while
// the detector worked — and no incident tag is lost.
func TestIntegrationPollutedTracesTaggedInABacklog(t *testing.T) {
	if raceEnabled {
		t.Skip("the backlog of KV events is too slow under the race detector on 2 cores; make test runs this test without -race")
	}
	t.Parallel() // beside the other paced job tests
	brokers := kafkatest.Brokers(t)
	outs := kafkatest.NewTopics(t, brokers, 1, "braid.incidents", "braid.pollution")
	start := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	cfg := simulator.Config{Seed: 23, Realistic: true, KVEvents: true, Hosts: 2, RequestsPerBatch: 2, BatchInterval: time.Second, Start: start}
	triggers := simulator.KVTriggers
	for i, tr := range triggers {
		cfg.KV.Faults = append(cfg.KV.Faults, simulator.KVFault{Trigger: tr, At: start.Add(10*time.Second + time.Duration(i)*15*time.Second), GPU: -1})
	}
	var sim *simulator.Simulator
	tj := startJobWith(t, simulator.EncodingProto, 4, func(c *Config) {
		c.Outputs.Incidents, c.Outputs.Pollution = outs[0], outs[1]
		// The defaults for event time.
		c.EventTime.OutOfOrderness, c.EventTime.IdleGap, c.EventTime.AllowedLateness, c.EventTime.FlushAfter = 0, 0, 0, 0
		c.EventTime.Idleness = 30 * time.Second
		// The history is in the topics before braid starts: a backlog.
		cfg.Topics = simulator.Topics{Spans: c.Inputs.Spans.Topic, Logs: c.Inputs.Logs.Topic, Metrics: c.Inputs.Metrics.Topic}
		var err error
		if sim, err = simulator.New(cfg); err != nil {
			t.Fatal(err)
		}
		var msgs []simulator.Message
		for range 180 {
			msgs = append(msgs, sim.Next()...)
		}
		msgs = append(msgs, sim.Flush()...)
		prod := kafkatest.Client(t, brokers, kgo.RecordPartitioner(simulator.Partitioner()))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := simulator.Produce(ctx, prod, msgs); err != nil {
			t.Fatal(err)
		}
	})
	truth := sim.Truth()
	if len(truth.KV.Faults) < len(triggers)-1 || len(truth.KV.Polluted) == 0 {
		t.Fatalf("workload realised %d faults, %d polluted requests", len(truth.KV.Faults), len(truth.KV.Polluted))
	}
	// The polluted requests whose traces braid fuses (a cancelled
	// request's retry has no spans: only its KV events carry its trace).
	spans := map[string]bool{}
	for _, tt := range truth.Traces {
		if tt.Spans > 0 {
			spans[tt.TraceID] = true
		}
	}
	victims := map[string]string{} // trace id → request id
	for _, p := range truth.KV.Polluted {
		if spans[p.TraceID] {
			victims[p.TraceID] = p.RequestID
		}
	}
	if len(victims) == 0 {
		t.Fatal("no polluted request has a trace with spans")
	}
	fused := tj.reader(tj.cfg.Outputs.Fused)
	incidents := tj.reader(outs[0])
	tagged := func(got map[string]*braidpb.FusedTrace) (n int, missing []string) {
		for tid, rid := range victims {
			ft := got[tid]
			if ft != nil && slices.Contains(ft.Flags, braidpb.Flag_FLAG_POLLUTED) && len(ft.IncidentIds) > 0 {
				n++
			} else if len(missing) < 8 {
				missing = append(missing, rid+" ("+tid+")")
			}
		}
		return n, missing
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		fused.poll()
		incidents.poll()
		n, _ := tagged(latest(t, fused.recs))
		if n == len(victims) || time.Now().After(deadline) {
			break
		}
	}
	got := latest(t, fused.recs)
	n, missing := tagged(got)
	// Each tag names an incident braid wrote, holding that request.
	holds := map[string]map[string]bool{}
	for _, r := range incidents.recs {
		var inc braidpb.Incident
		if err := proto.Unmarshal(r.Value, &inc); err != nil {
			t.Fatal(err)
		}
		if holds[inc.Id] == nil {
			holds[inc.Id] = map[string]bool{}
		}
		for _, p := range inc.Polluted {
			holds[inc.Id][p.RequestId] = true
		}
	}
	for tid, rid := range victims {
		ft := got[tid]
		if ft == nil {
			continue
		}
		for _, id := range ft.IncidentIds {
			if !holds[id][rid] {
				t.Errorf("trace %s of %s names incident %s, which does not hold it", tid, rid, id)
			}
		}
	}
	c := tj.job.Counters()
	tags, late := c.IncidentTags.Load(), c.IncidentTagsLate.Load()
	t.Logf("%d of %d polluted requests' traces tagged; %d incident tags, %d late; %d incidents, %d fused records",
		n, len(victims), tags, late, len(holds), len(fused.recs))
	if n < len(victims) {
		t.Errorf("%d of %d polluted requests' traces lack FLAG_POLLUTED or the incident id: %s", len(victims)-n, len(victims), strings.Join(missing, ", "))
		for _, r := range incidents.recs {
			var inc braidpb.Incident
			if err := proto.Unmarshal(r.Value, &inc); err == nil {
				var ps []string
				for _, p := range inc.Polluted {
					ps = append(ps, fmt.Sprintf("%s/%x", p.RequestId, p.TraceId))
				}
				t.Logf("incident %s rev %d %v root %s: polluted %v", inc.Id, inc.Revision, inc.Pattern, inc.GetRoot().GetRequestId(), ps)
			}
		}
	}
	if late != 0 {
		t.Errorf("%d incident tags came after their trace was emitted and were dropped", late)
	}
}
