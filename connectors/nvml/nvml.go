package nvml

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Adapters wrap them, so test with errors.Is.
var (
	// ErrNoCgo is returned by Init in a binary built with CGO_ENABLED=0:
	// go-nvml loads libnvidia-ml through cgo, so such a binary cannot read
	// GPUs at all. Retrying does not help.
	ErrNoCgo = errors.New("nvml: built without cgo: NVML unavailable")
	// ErrLibraryNotFound: libnvidia-ml.so.1 could not be loaded (no NVIDIA
	// driver on this host, or not in the library path).
	ErrLibraryNotFound = errors.New("nvml: NVML library not found (libnvidia-ml.so.1): is the NVIDIA driver installed?")
	// ErrDriverNotLoaded: the library is there but the kernel driver is not
	// running.
	ErrDriverNotLoaded = errors.New("nvml: NVIDIA kernel driver not loaded")
	// ErrNotSupported: the device or driver does not support the query (an
	// NVLink counter on a GPU without NVLink, a PCIe counter in a VM). The
	// sampler leaves the metric out for that GPU.
	ErrNotSupported = errors.New("nvml: not supported")
	// ErrGPULost: the GPU fell off the bus or otherwise stopped answering.
	ErrGPULost = errors.New("nvml: GPU is lost")
)

// Retryable reports whether Init may succeed later after failing with err: a
// driver not yet installed or loaded may be by the next attempt; a binary
// without cgo never will.
func Retryable(err error) bool {
	return err != nil && !errors.Is(err, ErrNoCgo)
}

// Library is the NVML library: the few calls braid makes, behind an
// interface so that the engine side stays pure Go and testable with
// [github.com/braidlabs/braid/connectors/nvml/fake].
//
// Init must succeed before any other method is called, and Shutdown is
// called once, after the channel of WatchXids is closed. Implementations
// are safe for use by the sampler goroutine and the Xid watcher at once.
type Library interface {
	// Init loads and initialises NVML. It returns an error wrapping
	// ErrLibraryNotFound where there is no driver, ErrNoCgo in a binary
	// built without cgo.
	Init() error
	// Shutdown releases NVML.
	Shutdown() error
	// Devices returns every GPU, in NVML index order. The Device values
	// stay valid until Shutdown.
	Devices() ([]Device, error)
	// WatchXids registers every GPU that supports it for critical Xid
	// events and sends each event on the returned channel until ctx ends;
	// then it releases the event set and closes the channel. It returns
	// an error wrapping ErrNotSupported when no GPU supports Xid events.
	WatchXids(ctx context.Context) (<-chan XidEvent, error)
}

// Device is one GPU. Every method returns an error wrapping
// ErrNotSupported when the GPU or driver cannot answer that query, and may
// be called from one goroutine at a time.
type Device interface {
	// Info returns what identifies the GPU; it does not change while NVML
	// is initialised.
	Info() (DeviceInfo, error)
	// Memory returns the frame buffer's sizes (nvmlDeviceGetMemoryInfo_v2).
	Memory() (Memory, error)
	// Utilization returns the percentages of the last sample period
	// (nvmlDeviceGetUtilizationRates).
	Utilization() (Utilization, error)
	// PCIeThroughput returns PCIe throughput over the last 20 ms
	// (nvmlDeviceGetPcieThroughput).
	PCIeThroughput() (PCIeThroughput, error)
	// NvLinkThroughput returns data bytes sent and received over all
	// active NVLinks since the driver loaded: cumulative counters.
	NvLinkThroughput() (NvLinkBytes, error)
	// NvLinkErrors returns the NVLink error counters summed over all
	// active links (nvmlDeviceGetNvLinkErrorCounter): cumulative.
	NvLinkErrors() (NvLinkErrors, error)
}

// DeviceInfo identifies a GPU.
type DeviceInfo struct {
	// Index is NVML's index (the `gpu` label of DCGM exporter).
	Index int
	// UUID is "GPU-…".
	UUID string
	// PCIBusID is "00000000:04:00.0" as NVML writes it.
	PCIBusID string
	// Name is the model name, "NVIDIA H100 80GB HBM3".
	Name string
}

// Memory is the frame buffer in bytes.
type Memory struct {
	Total, Reserved, Free, Used uint64
}

// Utilization is in percent, 0–100.
type Utilization struct {
	// GPU: time one or more kernels ran.
	GPU uint32
	// Memory: time device memory was read or written.
	Memory uint32
}

// PCIeThroughput is in bytes per second.
type PCIeThroughput struct {
	TX, RX uint64
}

// NvLinkBytes are cumulative data bytes over all active links.
type NvLinkBytes struct {
	TX, RX uint64
}

// NvLinkErrors are cumulative error counts over all active links.
type NvLinkErrors struct {
	// CRCFlit: flow-control digit CRC errors.
	CRCFlit uint64
	// CRCData: data CRC errors.
	CRCData uint64
	// Replay: retransmissions.
	Replay uint64
	// Recovery: link recoveries.
	Recovery uint64
}

// XidEvent is a critical Xid error a GPU reported, or a failure of the
// wait for one (Err set, UUID and Code unset).
type XidEvent struct {
	// UUID of the GPU.
	UUID string
	// Code is the Xid (13, 31, 43, 79, …).
	Code uint64
	// Time the watcher received it.
	Time time.Time
	// Err is a failure of the event wait; the watcher keeps going.
	Err error
}
