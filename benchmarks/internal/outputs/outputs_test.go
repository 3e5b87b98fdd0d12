package outputs

import (
	"encoding/hex"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

func TestReadFusedHead(t *testing.T) {
	id, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f10")
	ft := &braidpb.FusedTrace{TraceId: id, Revision: 3, Part: 1, Parts: 2,
		Spans:   []*braidpb.FusedSpan{{}, {}},
		Logs:    []*braidpb.FusedLog{{}},
		Points:  []*braidpb.FusedPoint{{}, {}, {}},
		Summary: &braidpb.Summary{SpanCount: 9}}
	b, err := proto.Marshal(ft)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := ReadFusedHead(b)
	want := FusedHead{TraceID: hex.EncodeToString(id), Revision: 3, Part: 1, Parts: 2, Spans: 2, Logs: 1, Points: 3}
	if !ok || h != want {
		t.Fatalf("ReadFusedHead = %+v, %v; want %+v", h, ok, want)
	}
	if _, ok := ReadFusedHead(b[:len(b)-1]); ok {
		t.Fatal("a truncated record reads")
	}
	// Flags, packed as proto3 writes them: FLAG_POLLUTED among others.
	for _, flags := range [][]braidpb.Flag{{braidpb.Flag_FLAG_POLLUTED}, {braidpb.Flag_FLAG_NO_ROOT_SPAN, braidpb.Flag_FLAG_POLLUTED}, {braidpb.Flag_FLAG_NO_ROOT_SPAN}} {
		ft.Flags = flags
		b, err := proto.Marshal(ft)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := ReadFusedHead(b)
		if want := slices.Contains(flags, braidpb.Flag_FLAG_POLLUTED); !ok || h.Polluted != want {
			t.Errorf("flags %v: polluted %v (ok %v), want %v", flags, h.Polluted, ok, want)
		}
	}
}

// TestTopRevisions: the highest revision decides, whatever the order
// read; a flag on any part of it counts, a flag on an older one does not.
func TestTopRevisions(t *testing.T) {
	const a, b = "0102030405060708090a0b0c0d0e0f10", "1102030405060708090a0b0c0d0e0f10"
	top := TopRevisions{}
	for _, h := range []FusedHead{
		{TraceID: a, Revision: 0, Polluted: true},
		{TraceID: a, Revision: 2},
		{TraceID: a, Revision: 1, Polluted: true}, // older, read later
		{TraceID: b, Revision: 1, Part: 0},
		{TraceID: b, Revision: 1, Part: 1, Polluted: true},
		{TraceID: b, Revision: 0},
	} {
		top.Add(h)
	}
	if got := *top[a]; got != (Top{Revision: 2}) {
		t.Errorf("%s: %+v, want revision 2 unflagged", a, got)
	}
	if got := *top[b]; got != (Top{Revision: 1, Flagged: true}) {
		t.Errorf("%s: %+v, want revision 1 flagged", b, got)
	}
}
