package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKfakeFencedInstanceStops starts a second engine with the first
// one's transactional id (the job derives it from the group and the
// instance id, so two instances with one instance id share it): the first
// one must stop within 10s with an error that says it was fenced, the
// second must take every task, and the committed output must count every
// record exactly once — nothing the fenced instance had in its open
// transaction comes out. The first batch of input is out before the second
// engine starts; the second batch comes right after it starts (busy: the
// first may still read it) or once it has every task (idle: the first has
// nothing to write, so only the group tells it).
func TestKfakeFencedInstanceStops(t *testing.T) {
	for _, c := range []struct {
		name       string
		instanceID string // "": dynamic members sharing a transactional id (a misconfiguration)
		busy       bool
		want       []error // the fenced instance's error is one of these
	}{
		{"static/idle", "i0", false, []error{kerr.FencedInstanceID}},
		{"static/busy", "i0", true, []error{kerr.FencedInstanceID, kerr.ProducerFenced}},
		{"dynamic/busy", "", true, []error{kerr.ProducerFenced}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeEnv(t, 2)
			const keys, n = 4, 80
			const txnID = "counter-i0"
			cfg := func() Config {
				cfg := f.config(t, t.TempDir(), txnID)
				cfg.InstanceID = c.instanceID
				return cfg
			}
			f.produce(t, keys, n, 1)
			a := start(t, f.engine(t, cfg()))
			w := f.watch(t)
			w.until(t, 10*time.Second, "the first batch out", f.reached(), a)
			b := start(t, f.engine(t, cfg()))
			if c.busy {
				f.produce(t, keys, n, 1001)
			}
			select {
			case <-a.done:
			case <-b.done:
				t.Fatalf("the new instance stopped: %v", b.err)
			case <-time.After(10 * time.Second):
				t.Fatalf("the fenced instance is still running after 10s (tasks %v; the new one has %v)", taskSet(a.e), taskSet(b.e))
			}
			if !slices.ContainsFunc(c.want, func(want error) bool { return errors.Is(a.err, want) }) {
				t.Errorf("the fenced instance stopped with %v, want an error that is one of %v", a.err, c.want)
			}
			t.Logf("the fenced instance stopped with: %v", a.err)
			waitCond(t, 10*time.Second, "the new instance has every task", func() bool { return len(taskSet(b.e)) == int(f.partitions) }, b)
			if !c.busy {
				f.produce(t, keys, n, 1001)
			}
			w.until(t, 10*time.Second, "the second batch out", f.reached(), b)
			if err := b.stop(t); err != nil {
				t.Fatalf("the new instance: %v", err)
			}
			checkOutput(t, byKey(t, f.readAll(t, f.out, kgo.ReadCommitted())), f.want())
		})
	}
}
