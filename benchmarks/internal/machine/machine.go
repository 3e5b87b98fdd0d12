// Package machine describes the machine a benchmark ran on, for its JSON
// result: CPUs, memory, Go version and the load average (the machine may be
// shared); and the CPU time processes on it spent.
package machine

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Info is the machine part of a benchmark result.
type Info struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB string `json:"memory_gib"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	// LoadAvg is /proc/loadavg at the start and at the end of the run: the
	// machine may be shared.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

// Read describes this machine, with the load average now as LoadAvgStart.
func Read() Info {
	m := Info{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	m.LoadAvgStart = LoadAvg()
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemoryGiB = strconv.FormatFloat(kb/(1<<20), 'f', 1, 64)
			}
		}
	}
	return m
}

// LoadAvg is the 1, 5 and 15 minute load average, "" where unknown.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// ProcCPU is the user+system time of process pid from /proc, 0 if unknown.
func ProcCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

// BrokerPID is the pid of the local broker deploy/local/kafka.sh started
// ($BRAID_KAFKA_DIR/broker.pid, default /tmp/braid-kafka), 0 if none.
func BrokerPID() int {
	dir := os.Getenv("BRAID_KAFKA_DIR")
	if dir == "" {
		dir = "/tmp/braid-kafka"
	}
	b, err := os.ReadFile(filepath.Join(dir, "broker.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
