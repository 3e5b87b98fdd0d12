package alerts

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkObserveTrace measures what one fused trace costs the alerts
// stage's combiner (ObserveTrace into every group set, its checkpoint's
// partials amortised), with the built-in rules, and without the quality
// and safety ones (the recording rules, BraidGuardrailBypass and
// BraidPIILeak: the set grouped by model and tenant), side by side. The
// traces carry every figure, 8 models × 5 tenants × 16 instances.
func BenchmarkObserveTrace(b *testing.B) {
	for _, bc := range []struct {
		name string
		keep func(Rule) bool
	}{
		{"rules=default", func(Rule) bool { return true }},
		{"rules=default-without-quality", func(r Rule) bool {
			return r.Record == "" && r.Name != "BraidGuardrailBypass" && r.Name != "BraidPIILeak"
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rules := slices.DeleteFunc(DefaultRules(), func(r Rule) bool { return !bc.keep(r) })
			off := false
			r := newRigWith(b, StageConfig{Alerts: Config{DefaultRules: &off, Rules: rules}, Delay: time.Second, AllowedLateness: 30 * time.Second})
			rng := rand.New(rand.NewPCG(1, 2))
			obs := make([]TraceObs, 4096)
			for i := range obs {
				o := NewTraceObs()
				o.Labels = Labels{Model: fmt.Sprint("model-", i%8), Tenant: fmt.Sprint("tenant-", i%5), Instance: fmt.Sprint("host-", i%16, ":8000"),
					Host: fmt.Sprint("host-", i%16), GPU: fmt.Sprint("GPU-", i%16)}
				o.TraceID = strings.Repeat(fmt.Sprintf("%02x", i%256), 16)
				for f := range o.Values {
					o.Values[f] = rng.Float64()
				}
				obs[i] = o
			}
			task := r.h.Task()
			t0 := int64(1_000_000_000_000)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				o := &obs[i%len(obs)]
				o.Time = t0 + int64(i)*int64(time.Millisecond) // 1,000 traces a second of event time
				r.proc.ObserveTrace(task, o)
				if i%5000 == 4999 { // a checkpoint every 5 s of event time
					if err := r.proc.PrepareCheckpoint(task); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
