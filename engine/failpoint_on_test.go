//go:build failpoints

package engine

import (
	"testing"
	"time"
)

func TestParseFailpoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		name string
		n    int64
		hold bool
		for_ time.Duration
	}{
		{"", "", 0, false, 0},
		{"after-end-txn", "after-end-txn", 1, false, 0},
		{"after-end-txn:3", "after-end-txn", 3, false, 0},
		{"after-poll:hold", "after-poll", 1, true, 0},
		{"after-poll:hold=2s", "after-poll", 1, true, 2 * time.Second},
		{"after-poll:4:hold=500ms", "after-poll", 4, true, 500 * time.Millisecond},
	} {
		s := parseFailpoint(c.in)
		if s.name != c.name || s.count.Load() != c.n || s.hold != c.hold || s.for_ != c.for_ {
			t.Errorf("%q: got %q n=%d hold=%v for=%v", c.in, s.name, s.count.Load(), s.hold, s.for_)
		}
	}
	s := parseFailpoint("after-poll:2:hold")
	if s.due("after-poll", false) || s.due("other", true) {
		t.Error("a kill point or another name matched a hold point")
	}
	if s.due("after-poll", true) || !s.due("after-poll", true) || s.due("after-poll", true) {
		t.Error("the hold did not come on exactly the second pass")
	}
}
