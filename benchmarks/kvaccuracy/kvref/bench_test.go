package kvref

import (
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// BenchmarkApply replays a heavy 100 s run of 2 GPUs (about 190,000 events).
func BenchmarkApply(b *testing.B) {
	evs, _ := simulate(b, run{trigger: simulator.DoubleFree, seed: 7, heavy: true}, 100*time.Second, 4)
	b.ResetTimer()
	for range b.N {
		m := New()
		for _, e := range evs {
			m.Apply(e)
		}
	}
	b.ReportMetric(float64(len(evs)), "events/op")
}
