package kvgraph

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/operators/kvgraph/kvlog"
)

// FuzzKVGraph feeds messages through the stage (engine.Harness, one task
// kept across inputs so that state builds up) and checks that nothing
// panics or fails, that every record written unmarshals and is under
// MaxRecordBytes, and that no state value reaches it.
func FuzzKVGraph(f *testing.F) {
	for _, m := range story() {
		f.Add(kvlog.Marshal(m.w, m.ops...))
	}
	f.Add(corrupt(kvlog.Marshal(gpu0, pool.Write(at(1), placeholder, 1, 0, 0, 64))))
	f.Add(kvlog.Marshal(gpu0, kvlog.Op{Time: at(2), Op: "write", Request: "r", Block: 1 << 40, Layer: 1 << 20, Addr: -1, Bytes: 1 << 62, HasRange: true}))
	h := newHarness(f, nil)
	n := 0
	f.Fuzz(func(t *testing.T, v []byte) {
		h.t = t
		if err := h.Process(0, &kgo.Record{Value: v, Offset: h.off}); err != nil {
			t.Fatal(err)
		}
		h.off++
		if n++; n%64 == 0 {
			if err := h.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			h.checkState()
		}
		h.checkOutputs()
		h.Out = h.Out[:0]
	})
}
