package arrowexport

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

func protoSize(ft *braidpb.FusedTrace) (int, error) {
	b, err := proto.Marshal(ft)
	return len(b), err
}

// countWriter counts bytes and discards them.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// BenchmarkWrite writes b.N realistic FusedTraces (8 spans, 2 logs, 2
// points each) and closes the file; rows/s includes the encoding, the
// compression and the footer.
func BenchmarkWrite(b *testing.B) {
	// One row group of distinct traces, so that Parquet's dictionaries do
	// not make repeated rows look cheaper than real ones.
	traces := make([]*braidpb.FusedTrace, BatchRows)
	for i := range traces {
		traces[i] = sampleTrace(i, 8)
	}
	for _, f := range []Format{FormatArrow, FormatParquet} {
		b.Run("format="+f.String(), func(b *testing.B) {
			var out countWriter
			b.ReportAllocs()
			b.ResetTimer()
			w, err := NewWriter(&out, f)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				if err := w.Write(traces[i%len(traces)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(out.n)/float64(b.N), "bytes/row")
		})
	}
}
