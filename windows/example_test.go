package windows_test

import (
	"fmt"
	"time"

	"github.com/braidlabs/braid/windows"
)

func ExamplePanes() {
	sec := int64(time.Second)
	p, err := windows.NewPanes(windows.Spec{Size: 10 * time.Second, Slide: 5 * time.Second}, 0)
	if err != nil {
		panic(err)
	}
	for i, ms := range []float64{120, 80, 950, 100} {
		p.Add("model=llama,instance=a", int64(i)*2*sec, ms, fmt.Sprintf("trace%d", i))
	}
	p.Advance(30*sec, func(key string, end int64, agg *windows.Agg, revision bool) {
		fmt.Printf("%s [%ds, %ds): n=%v max=%v p50≈%.0f", key, (end-10*sec)/sec, end/sec, agg.Count, agg.Max, agg.Quantile(0.5))
		if ex := agg.Exemplars(); len(ex) > 0 {
			fmt.Printf(" worst=%s", ex[0].ID)
		}
		fmt.Println()
	})
	// Output:
	// model=llama,instance=a [-5s, 5s): n=3 max=950 p50≈120 worst=trace2
	// model=llama,instance=a [0s, 10s): n=4 max=950 p50≈100 worst=trace2
	// model=llama,instance=a [5s, 15s): n=1 max=100 p50≈100 worst=trace3
	// model=llama,instance=a [10s, 20s): n=0 max=0 p50≈NaN
}
