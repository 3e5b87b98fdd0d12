//go:build cgo

package nvml

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Open returns the host's NVML, loaded from libnvidia-ml.so.1 by Init.
func Open() Library { return NewLibrary(gonvml.New()) }

// NewLibrary adapts a go-nvml Interface: the real library or one of
// go-nvml's mocks (pkg/nvml/mock/dgxh100, …).
func NewLibrary(lib gonvml.Interface) Library { return &library{lib: lib} }

// xidWait bounds each nvmlEventSetWait so that the watcher sees ctx end.
const xidWait = 500 * time.Millisecond

type library struct {
	lib gonvml.Interface
	// devices from the last Devices call, registered by WatchXids.
	devices []*device
}

func (l *library) Init() error { return wrap("init", l.lib.Init()) }

func (l *library) Shutdown() error { return wrap("shutdown", l.lib.Shutdown()) }

func (l *library) Devices() ([]Device, error) {
	n, r := l.lib.DeviceGetCount()
	if err := wrap("device count", r); err != nil {
		return nil, err
	}
	l.devices = l.devices[:0]
	out := make([]Device, 0, n)
	for i := range n {
		h, r := l.lib.DeviceGetHandleByIndex(i)
		if err := wrap(fmt.Sprintf("device %d", i), r); err != nil {
			return nil, err
		}
		d := &device{h: h}
		l.devices = append(l.devices, d)
		out = append(out, d)
	}
	return out, nil
}

func (l *library) WatchXids(ctx context.Context) (<-chan XidEvent, error) {
	if l.devices == nil {
		if _, err := l.Devices(); err != nil {
			return nil, err
		}
	}
	set, r := l.lib.EventSetCreate()
	if err := wrap("event set create", r); err != nil {
		return nil, err
	}
	registered := 0
	var errs []error
	for i, d := range l.devices {
		types, r := d.h.GetSupportedEventTypes()
		if r != gonvml.SUCCESS || types&gonvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if err := wrap(fmt.Sprintf("register xid events of device %d", i), d.h.RegisterEvents(gonvml.EventTypeXidCriticalError, set)); err != nil {
			errs = append(errs, err)
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return nil, fmt.Errorf("nvml: xid events: %w", errors.Join(append(errs, ErrNotSupported)...))
	}
	ch := make(chan XidEvent, 16)
	go func() {
		defer close(ch)
		defer set.Free()
		for ctx.Err() == nil {
			data, r := set.Wait(uint32(xidWait / time.Millisecond))
			var ev XidEvent
			switch r {
			case gonvml.ERROR_TIMEOUT:
				continue
			case gonvml.SUCCESS:
				if data.EventType&gonvml.EventTypeXidCriticalError == 0 {
					continue
				}
				ev = XidEvent{Code: data.EventData, Time: time.Now()}
				if data.Device == nil {
					ev.Err = fmt.Errorf("nvml: xid %d without a device", data.EventData)
					break
				}
				if u, r := data.Device.GetUUID(); r == gonvml.SUCCESS {
					ev.UUID = u
				} else {
					ev.Err = wrap(fmt.Sprintf("uuid of the device of xid %d", data.EventData), r)
				}
			default:
				ev = XidEvent{Time: time.Now(), Err: wrap("event set wait", r)}
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Err != nil && ev.UUID == "" && r != gonvml.SUCCESS {
				// A failing wait may fail at once again: pause before the next.
				t := time.NewTimer(time.Second)
				select {
				case <-ctx.Done():
					t.Stop()
				case <-t.C:
				}
			}
		}
	}()
	return ch, nil
}

type device struct {
	h gonvml.Device
}

func (d *device) Info() (DeviceInfo, error) {
	var info DeviceInfo
	var r gonvml.Return
	if info.Index, r = d.h.GetIndex(); r != gonvml.SUCCESS {
		return info, wrap("index", r)
	}
	if info.UUID, r = d.h.GetUUID(); r != gonvml.SUCCESS {
		return info, wrap("uuid", r)
	}
	if info.Name, r = d.h.GetName(); r != gonvml.SUCCESS {
		return info, wrap("name", r)
	}
	pci, r := d.h.GetPciInfo()
	if r != gonvml.SUCCESS {
		return info, wrap("pci info", r)
	}
	info.PCIBusID = cString(pci.BusId[:])
	return info, nil
}

func (d *device) Memory() (Memory, error) {
	m, r := d.h.GetMemoryInfo_v2()
	switch r {
	case gonvml.SUCCESS:
		return Memory{Total: m.Total, Reserved: m.Reserved, Free: m.Free, Used: m.Used}, nil
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
		// Drivers before R510 have only v1, without reserved memory.
		m1, r := d.h.GetMemoryInfo()
		if r != gonvml.SUCCESS {
			return Memory{}, wrap("memory info", r)
		}
		return Memory{Total: m1.Total, Free: m1.Free, Used: m1.Used}, nil
	}
	return Memory{}, wrap("memory info v2", r)
}

func (d *device) Utilization() (Utilization, error) {
	u, r := d.h.GetUtilizationRates()
	if r != gonvml.SUCCESS {
		return Utilization{}, wrap("utilization rates", r)
	}
	return Utilization{GPU: u.Gpu, Memory: u.Memory}, nil
}

func (d *device) PCIeThroughput() (PCIeThroughput, error) {
	tx, r := d.h.GetPcieThroughput(gonvml.PCIE_UTIL_TX_BYTES)
	if r != gonvml.SUCCESS {
		return PCIeThroughput{}, wrap("pcie tx throughput", r)
	}
	rx, r := d.h.GetPcieThroughput(gonvml.PCIE_UTIL_RX_BYTES)
	if r != gonvml.SUCCESS {
		return PCIeThroughput{}, wrap("pcie rx throughput", r)
	}
	// NVML reports KB/s (KiB).
	return PCIeThroughput{TX: uint64(tx) * 1024, RX: uint64(rx) * 1024}, nil
}

// links returns the active NVLinks, or ErrNotSupported if there are none.
func (d *device) links() ([]int, error) {
	var links []int
	for l := range gonvml.NVLINK_MAX_LINKS {
		st, r := d.h.GetNvLinkState(l)
		switch r {
		case gonvml.SUCCESS:
			if st == gonvml.FEATURE_ENABLED {
				links = append(links, l)
			}
			continue
		case gonvml.ERROR_INVALID_ARGUMENT, gonvml.ERROR_NOT_SUPPORTED:
			// Past the GPU's last link, or no NVLink at all.
		default:
			return nil, wrap(fmt.Sprintf("nvlink %d state", l), r)
		}
		break
	}
	if len(links) == 0 {
		return nil, fmt.Errorf("nvml: no active nvlink: %w", ErrNotSupported)
	}
	return links, nil
}

func (d *device) NvLinkThroughput() (NvLinkBytes, error) {
	links, err := d.links()
	if err != nil {
		return NvLinkBytes{}, err
	}
	// Hopper and later: per-link field values, in KiB.
	fields := make([]gonvml.FieldValue, 0, 2*len(links))
	for _, l := range links {
		fields = append(fields,
			gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l)},
			gonvml.FieldValue{FieldId: gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l)})
	}
	if r := d.h.GetFieldValues(fields); r == gonvml.SUCCESS {
		var b NvLinkBytes
		ok := true
		for i, f := range fields {
			v, good := fieldUint(f)
			if !good {
				ok = false
				break
			}
			if i%2 == 0 {
				b.TX += v * 1024
			} else {
				b.RX += v * 1024
			}
		}
		if ok {
			return b, nil
		}
	}
	// Older GPUs: utilization counter 0, when it counts bytes.
	var b NvLinkBytes
	for _, l := range links {
		c, r := d.h.GetNvLinkUtilizationControl(l, 0)
		if r != gonvml.SUCCESS {
			return NvLinkBytes{}, wrap(fmt.Sprintf("nvlink %d utilization control", l), r)
		}
		if gonvml.NvLinkUtilizationCountUnits(c.Units) != gonvml.NVLINK_COUNTER_UNIT_BYTES {
			return NvLinkBytes{}, fmt.Errorf("nvml: nvlink %d counter 0 counts units %d, not bytes: %w", l, c.Units, ErrNotSupported)
		}
		rx, tx, r := d.h.GetNvLinkUtilizationCounter(l, 0)
		if r != gonvml.SUCCESS {
			return NvLinkBytes{}, wrap(fmt.Sprintf("nvlink %d utilization counter", l), r)
		}
		b.TX += tx
		b.RX += rx
	}
	return b, nil
}

func (d *device) NvLinkErrors() (NvLinkErrors, error) {
	links, err := d.links()
	if err != nil {
		return NvLinkErrors{}, err
	}
	var e NvLinkErrors
	counters := []struct {
		c   gonvml.NvLinkErrorCounter
		dst *uint64
	}{
		{gonvml.NVLINK_ERROR_DL_CRC_FLIT, &e.CRCFlit},
		{gonvml.NVLINK_ERROR_DL_CRC_DATA, &e.CRCData},
		{gonvml.NVLINK_ERROR_DL_REPLAY, &e.Replay},
		{gonvml.NVLINK_ERROR_DL_RECOVERY, &e.Recovery},
	}
	read := 0
	for _, l := range links {
		for _, c := range counters {
			v, r := d.h.GetNvLinkErrorCounter(l, c.c)
			switch r {
			case gonvml.SUCCESS:
				*c.dst += v
				read++
			case gonvml.ERROR_NOT_SUPPORTED:
			default:
				return NvLinkErrors{}, wrap(fmt.Sprintf("nvlink %d error counter %d", l, c.c), r)
			}
		}
	}
	if read == 0 {
		return NvLinkErrors{}, fmt.Errorf("nvml: nvlink error counters: %w", ErrNotSupported)
	}
	return e, nil
}

// fieldUint decodes a successful field value as an unsigned integer.
func fieldUint(f gonvml.FieldValue) (uint64, bool) {
	if gonvml.Return(f.NvmlReturn) != gonvml.SUCCESS {
		return 0, false
	}
	v := f.Value[:]
	switch gonvml.ValueType(f.ValueType) {
	case gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG:
		return binary.NativeEndian.Uint64(v), true
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.NativeEndian.Uint32(v)), true
	case gonvml.VALUE_TYPE_SIGNED_LONG_LONG:
		if s := int64(binary.NativeEndian.Uint64(v)); s >= 0 {
			return uint64(s), true
		}
	case gonvml.VALUE_TYPE_DOUBLE:
		if x := math.Float64frombits(binary.NativeEndian.Uint64(v)); x >= 0 {
			return uint64(x), true
		}
	}
	return 0, false
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// wrap turns an NVML return into nil or an error wrapping this package's
// sentinel for it.
func wrap(op string, r gonvml.Return) error {
	var s error
	switch r {
	case gonvml.SUCCESS:
		return nil
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		s = ErrLibraryNotFound
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		s = ErrDriverNotLoaded
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
		s = ErrNotSupported
	case gonvml.ERROR_GPU_IS_LOST:
		s = ErrGPULost
	default:
		return fmt.Errorf("nvml: %s: %s (%d)", op, r.Error(), int32(r))
	}
	return &opError{op: op, err: s}
}

// opError is a failed NVML call wrapping this package's sentinel.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string {
	return "nvml: " + e.op + ": " + strings.TrimPrefix(e.err.Error(), "nvml: ")
}

func (e *opError) Unwrap() error { return e.err }
