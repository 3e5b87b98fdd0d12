//go:build failpoints

package engine

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// With the failpoints build tag, BRAID_FAILPOINT=name:n kills the process
// with SIGKILL the n-th time (default 1) it passes failpoint name. Crash
// tests build braid with -tags failpoints; production builds never do.
var (
	fpName  string
	fpCount atomic.Int64
)

func init() {
	v := os.Getenv("BRAID_FAILPOINT")
	if v == "" {
		return
	}
	name, n, _ := strings.Cut(v, ":")
	fpName = name
	c, err := strconv.Atoi(n)
	if err != nil || c < 1 {
		c = 1
	}
	fpCount.Store(int64(c))
}

func failpoint(name string) {
	if name != fpName || fpName == "" {
		return
	}
	if fpCount.Add(-1) == 0 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
