//go:build failpoints

package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// With the failpoints build tag, BRAID_FAILPOINT selects one failpoint:
//
//	name[:n]               kill the process with SIGKILL the n-th time
//	                       (default 1) it passes failpoint name;
//	name[:n]:hold[=D]      hold the loop there the n-th time, for D (a Go
//	                       duration) or, without D, until the run's context
//	                       is cancelled (SIGTERM), then go on.
//
// A hold writes "braid failpoint <name>: holding" to stderr when it starts,
// so that a crash test knows when to send its signal. Hold points:
// after-poll (between a poll that returned records and their dispatch).
// Crash tests build braid with -tags failpoints; production builds never do.
var fp = parseFailpoint(os.Getenv("BRAID_FAILPOINT"))

type failpointSpec struct {
	name  string
	count atomic.Int64
	hold  bool
	for_  time.Duration // 0: until the context ends
}

func parseFailpoint(v string) *failpointSpec {
	s := &failpointSpec{}
	if v == "" {
		return s
	}
	parts := strings.Split(v, ":")
	s.name = parts[0]
	c := 1
	for _, p := range parts[1:] {
		switch {
		case p == "hold":
			s.hold = true
		case strings.HasPrefix(p, "hold="):
			s.hold = true
			if d, err := time.ParseDuration(strings.TrimPrefix(p, "hold=")); err == nil && d > 0 {
				s.for_ = d
			}
		default:
			if n, err := strconv.Atoi(p); err == nil && n >= 1 {
				c = n
			}
		}
	}
	s.count.Store(int64(c))
	return s
}

// due reports whether this pass of failpoint name is the selected one.
func (s *failpointSpec) due(name string, hold bool) bool {
	if s.name == "" || name != s.name || hold != s.hold {
		return false
	}
	return s.count.Add(-1) == 0
}

func failpoint(name string) {
	if fp.due(name, false) {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

func failpointHold(ctx context.Context, name string) {
	if !fp.due(name, true) {
		return
	}
	fmt.Fprintf(os.Stderr, "braid failpoint %s: holding\n", name)
	if fp.for_ == 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTimer(fp.for_)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
