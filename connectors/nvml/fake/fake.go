// Package fake is a pure-Go [nvml.Library] for tests of the exporter
// without a GPU and without cgo: devices whose readings a test sets, Init
// failures to script, and Xid events to inject.
package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/braidlabs/braid/connectors/nvml"
)

// Query names a Device method, to make it fail with [State.Errs].
type Query string

const (
	QueryInfo             Query = "info"
	QueryMemory           Query = "memory"
	QueryUtilization      Query = "utilization"
	QueryPCIe             Query = "pcie"
	QueryNvLinkThroughput Query = "nvlink_throughput"
	QueryNvLinkErrors     Query = "nvlink_errors"
)

// State is what a Device reports.
type State struct {
	Info         nvml.DeviceInfo
	Memory       nvml.Memory
	Utilization  nvml.Utilization
	PCIe         nvml.PCIeThroughput
	NvLink       nvml.NvLinkBytes
	NvLinkErrors nvml.NvLinkErrors
	// Errs makes a query fail with the error.
	Errs map[Query]error
}

// Device is a GPU whose readings the test sets. Safe for concurrent use.
type Device struct {
	mu sync.Mutex
	s  State
}

// NewDevice returns a device in state s.
func NewDevice(s State) *Device { return &Device{s: s} }

// Update changes the device's state under its lock.
func (d *Device) Update(f func(*State)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.s)
}

func read[T any](d *Device, q Query, get func(*State) T) (T, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.s.Errs[q]; err != nil {
		var zero T
		return zero, err
	}
	return get(&d.s), nil
}

func (d *Device) Info() (nvml.DeviceInfo, error) {
	return read(d, QueryInfo, func(s *State) nvml.DeviceInfo { return s.Info })
}
func (d *Device) Memory() (nvml.Memory, error) {
	return read(d, QueryMemory, func(s *State) nvml.Memory { return s.Memory })
}
func (d *Device) Utilization() (nvml.Utilization, error) {
	return read(d, QueryUtilization, func(s *State) nvml.Utilization { return s.Utilization })
}
func (d *Device) PCIeThroughput() (nvml.PCIeThroughput, error) {
	return read(d, QueryPCIe, func(s *State) nvml.PCIeThroughput { return s.PCIe })
}
func (d *Device) NvLinkThroughput() (nvml.NvLinkBytes, error) {
	return read(d, QueryNvLinkThroughput, func(s *State) nvml.NvLinkBytes { return s.NvLink })
}
func (d *Device) NvLinkErrors() (nvml.NvLinkErrors, error) {
	return read(d, QueryNvLinkErrors, func(s *State) nvml.NvLinkErrors { return s.NvLinkErrors })
}

// Library is a fake NVML. Safe for concurrent use.
type Library struct {
	// Devs are the GPUs Devices returns.
	Devs []*Device

	mu       sync.Mutex
	initErrs []error
	inits    int
	shutdown int
	watchErr error
	xids     chan nvml.XidEvent
}

// New returns a library with n H100-like GPUs: 80 GiB, index i, uuid
// "GPU-fake-000i", bus 0000000i:00:00.0, all readings zero but the memory.
func New(n int) *Library {
	l := &Library{xids: make(chan nvml.XidEvent, 64)}
	for i := range n {
		l.Devs = append(l.Devs, NewDevice(State{
			Info: nvml.DeviceInfo{
				Index:    i,
				UUID:     fmt.Sprintf("GPU-fake-%04d", i),
				PCIBusID: fmt.Sprintf("%08X:00:00.0", i),
				Name:     "NVIDIA H100 80GB HBM3",
			},
			Memory: nvml.Memory{Total: 80 << 30, Reserved: 512 << 20, Free: 80<<30 - 512<<20},
		}))
	}
	return l
}

// FailInit makes the next len(errs) Init calls return errs in order.
func (l *Library) FailInit(errs ...error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initErrs = append(l.initErrs, errs...)
}

// FailWatch makes WatchXids return err.
func (l *Library) FailWatch(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchErr = err
}

// Inits returns how many times Init was called.
func (l *Library) Inits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inits
}

// Shutdowns returns how many times Shutdown was called.
func (l *Library) Shutdowns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shutdown
}

// InjectXid queues an Xid event of the GPU with uuid for the watcher (up to
// 64 queued; more block).
func (l *Library) InjectXid(uuid string, code uint64) {
	l.xids <- nvml.XidEvent{UUID: uuid, Code: code, Time: time.Now()}
}

func (l *Library) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inits++
	if len(l.initErrs) > 0 {
		err := l.initErrs[0]
		l.initErrs = l.initErrs[1:]
		return err
	}
	return nil
}

func (l *Library) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shutdown++
	return nil
}

func (l *Library) Devices() ([]nvml.Device, error) {
	out := make([]nvml.Device, len(l.Devs))
	for i, d := range l.Devs {
		out[i] = d
	}
	return out, nil
}

func (l *Library) WatchXids(ctx context.Context) (<-chan nvml.XidEvent, error) {
	l.mu.Lock()
	err := l.watchErr
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make(chan nvml.XidEvent)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-l.xids:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

var _ nvml.Library = (*Library)(nil)
