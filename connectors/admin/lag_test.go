package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLagMonitor(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 5 records in partition 0, 3 in partition 1, and some elsewhere.
	var recs []*kgo.Record
	for i := range 8 {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: int32(min(i/5, 1)), Value: fmt.Appendf(nil, "%d", i)})
	}
	recs = append(recs, &kgo.Record{Topic: "other", Partition: 0, Value: []byte("x")})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	// The group has committed partition 0 up to offset 2; partition 1 not
	// at all (lags by its whole log).
	var offs kadm.Offsets
	offs.AddOffset("in", 0, 2, -1)
	if err := adm.CommitAllOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}

	m, err := NewLagMonitor(LagConfig{Admin: adm, Group: "g", Topics: []string{"in"}, Interval: time.Hour,
		Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	if lags, at := m.Lags(); lags != nil || !at.IsZero() {
		t.Fatalf("before a refresh: %v at %v", lags, at)
	}
	// Run refreshes at once.
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, at := m.Lags(); !at.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no refresh within 20s")
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	rcancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	lags, at := m.Lags()
	if got, want := fmt.Sprint(lags), "[{in 0 3} {in 1 3}]"; got != want || !at.Equal(testNow) {
		t.Errorf("lags %s at %v, want %s at %v", got, at, want, testNow)
	}

	// The group catches up.
	offs.AddOffset("in", 0, 5, -1)
	offs.AddOffset("in", 1, 3, -1)
	if err := adm.CommitAllOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if lags, _ := m.Lags(); fmt.Sprint(lags) != "[{in 0 0} {in 1 0}]" {
		t.Errorf("after catching up: %v", lags)
	}

	// A group that has not committed anything yet (a job's first start:
	// the broker answers GROUP_ID_NOT_FOUND) has no committed offsets, and
	// every partition lags by its whole log.
	fresh, err := NewLagMonitor(LagConfig{Admin: adm, Group: "fresh", Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Refresh(ctx); err != nil {
		t.Fatalf("refresh of a group with no offsets: %v", err)
	}
	if lags, _ := fresh.Lags(); fmt.Sprint(lags) != "[{in 0 5} {in 1 3}]" {
		t.Errorf("group with no offsets: %v", lags)
	}

	// A topic that does not exist fails the refresh.
	m2, err := NewLagMonitor(LagConfig{Admin: adm, Group: "g", Topics: []string{"missing"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Refresh(ctx); err == nil {
		t.Error("refresh of a missing topic succeeded")
	}
}
