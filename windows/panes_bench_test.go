package windows

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkPanesAdd adds latency-like samples of keys group keys at 1000
// samples per second of event time, advancing the watermark every second
// (reports merged and delivered, old panes dropped): the steady state of an
// alert rule over 1-minute windows sliding by 10 s.
func BenchmarkPanesAdd(b *testing.B) {
	for _, keys := range []int{10, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			p, err := NewPanes(Spec{Size: time.Minute, Slide: 10 * time.Second}, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 1))
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("model=m%d,instance=i%d", i%7, i)
			}
			ids := make([]string, 64)
			for i := range ids {
				ids[i] = fmt.Sprintf("%032x", i)
			}
			fn := func(string, int64, *Agg, bool) {}
			t := int64(1_700_000_000) * int64(time.Second)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				t += int64(time.Millisecond)
				v := math.Exp(math.Log(0.2) + r.NormFloat64())
				p.Add(names[i%keys], t-r.Int64N(int64(2*time.Second)), v, ids[i%len(ids)])
				i++
				if i%1000 == 0 {
					p.Advance(t-int64(2*time.Second), fn)
				}
			}
			b.ReportMetric(float64(p.Bytes())/float64(max(p.Keys(), 1)), "B/key")
		})
	}
}
