// Package braidproc runs the braid binary for the benchmarks that measure it
// as a process (benchmarks/memory, benchmarks/latency): it builds
// ./cmd/braid, starts `braid run --config`, keeps the tail of its log, stops
// it with SIGTERM, and deletes the topics a run created.
package braidproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Build compiles ./cmd/braid (run from the repository root) into dir as
// `make build` does, without cgo (Pebble's block cache and memtables then
// live on the Go heap, under the memory limit braid sets), or with cgo
// (they are C memory, beside it), and returns the binary's path.
func Build(dir string, cgo bool) (string, error) {
	bin := filepath.Join(dir, "braid")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/braid")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build braid: %v\n%s", err, out)
	}
	return bin, nil
}

// Proc is a running `braid run`.
type Proc struct {
	cmd *exec.Cmd
	// Done receives how the process ended, once.
	Done chan error
	log  *ring
}

// Start runs `bin run --config cfgPath`; echo copies its log to stderr.
func Start(bin, cfgPath string, echo bool) (*Proc, error) {
	p := &Proc{cmd: exec.Command(bin, "run", "--config", cfgPath), Done: make(chan error, 1), log: &ring{max: 64 << 10, echo: echo}}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start braid: %w", err)
	}
	go func() { p.Done <- p.cmd.Wait() }()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits up to two minutes; "" for a clean exit.
func (p *Proc) Stop() string {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.Done:
		p.Done <- err
		if err != nil {
			return err.Error()
		}
		return ""
	case <-time.After(2 * time.Minute):
		p.Kill()
		return "did not stop within 2m of SIGTERM"
	}
}

// Kill kills the process unless it has exited.
func (p *Proc) Kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
	}
}

// Tail is the last 64 KiB of the process's output.
func (p *Proc) Tail() string { return p.log.String() }

// ring keeps the last max bytes written. The process's stdout and stderr
// are the same writer, so exec writes to it from one goroutine.
type ring struct {
	buf  []byte
	max  int
	echo bool
}

func (r *ring) Write(b []byte) (int, error) {
	if r.echo {
		os.Stderr.Write(b)
	}
	r.buf = append(r.buf, b...)
	if len(r.buf) > r.max {
		r.buf = append([]byte(nil), r.buf[len(r.buf)-r.max:]...)
	}
	return len(b), nil
}

func (r *ring) String() string { return string(r.buf) }

// DeleteTopics deletes the topics named prefix-…, the ones braid created
// for its group (group.…) and names (topics the caller created, which the
// broker may not list yet), within a minute.
func DeleteTopics(adm *kadm.Client, prefix, group string, names ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	names = slices.Clone(names)
	for _, n := range td.Names() {
		if (strings.HasPrefix(n, prefix+"-") || strings.HasPrefix(n, group+".")) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("delete topics: %w", err)
	}
	var errs []error
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// Config is what a benchmark's braid.yaml names: the broker, the group and
// instance, the input topics (spans, logs, metrics), the output topics
// (fused, late, dlq, pollution, incidents), the state directory, and
// optionally the memory budget (0: braid's default) and the admin address
// ("": any free loopback port).
type Config struct {
	Brokers            []string
	Group, Instance    string
	Inputs             [3]string
	Outputs            [5]string
	StateDir           string
	MemoryBudget       int64
	Admin              string
	CheckpointInterval time.Duration // 0: braid's default
	Alignment          time.Duration // event_time.alignment; 0: braid's default
}

// YAML is c as braid's configuration file.
func (c Config) YAML() string {
	state := fmt.Sprintf("{dir: %s}", c.StateDir)
	if c.MemoryBudget > 0 {
		state = fmt.Sprintf("{dir: %s, memory_budget: %d}", c.StateDir, c.MemoryBudget)
	}
	admin := c.Admin
	if admin == "" {
		admin = "127.0.0.1:0"
	}
	y := fmt.Sprintf(`kafka:
  brokers: [%s]
group: %s
instance_id: %s
inputs:
  spans: {topic: %s}
  logs: {topic: %s}
  metrics: {topic: %s}
outputs: {fused: %s, late: %s, dlq: %s, pollution: %s, incidents: %s}
state: %s
log_interval: 10s
admin: {addr: %q}
`, strings.Join(c.Brokers, ","), c.Group, c.Instance, c.Inputs[0], c.Inputs[1], c.Inputs[2],
		c.Outputs[0], c.Outputs[1], c.Outputs[2], c.Outputs[3], c.Outputs[4], state, admin)
	if c.CheckpointInterval > 0 {
		y += fmt.Sprintf("checkpoint_interval: %s\n", c.CheckpointInterval)
	}
	if c.Alignment != 0 {
		y += fmt.Sprintf("event_time: {alignment: %s}\n", c.Alignment)
	}
	return y
}
