// Package machine describes the machine a benchmark ran on, for its JSON
// result: CPUs, memory, Go version and the load average (the machine may be
// shared).
package machine

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
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
