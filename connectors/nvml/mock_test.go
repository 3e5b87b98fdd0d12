//go:build cgo

package nvml_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/braidlabs/braid/connectors/nvml"
)

const (
	mockLinks    = 18 // NVLink 4 links of an H100/H200 SXM
	mockReserved = 512 << 20
	kib          = 1024
)

// rig drives a go-nvml mock server: the readings each mock device returns
// are functions of the GPU index and of round, which the test advances.
type rig struct {
	srv   *server.Server
	round atomic.Uint64
	// fieldValues: NVLink bytes through GetFieldValues (Hopper); else
	// through GetNvLinkUtilizationCounter.
	fieldValues bool
	xids        chan gonvml.EventData
	freed       atomic.Bool
}

func newRig(t *testing.T, srv *server.Server, fieldValues bool) *rig {
	t.Helper()
	r := &rig{srv: srv, fieldValues: fieldValues, xids: make(chan gonvml.EventData, 4)}
	srv.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (gonvml.EventData, gonvml.Return) {
				select {
				case ev := <-r.xids:
					return ev, gonvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() gonvml.Return { r.freed.Store(true); return gonvml.SUCCESS },
		}, gonvml.SUCCESS
	}
	for _, h := range srv.Devices {
		r.setDevice(h.(*server.Device))
	}
	return r
}

// Expected readings of GPU i in round n.
func memTotal(d *server.Device) uint64 { return d.MemoryInfo.Total }
func memUsed(i int) uint64             { return uint64(i+1) * 10 << 30 }
func gpuUtil(i int) uint32             { return uint32(10 + i) }
func memUtil(i int) uint32             { return uint32(20 + i) }
func pcieTXKiB(i int) uint32           { return uint32(1000 + i) }
func pcieRXKiB(i int) uint32           { return uint32(2000 + i) }

// Per-link cumulative NVLink KiB: grows by (i+1) MiB TX and 2(i+1) MiB RX
// per link per round.
func linkTXKiB(i int, n uint64) uint64 { return n * uint64(i+1) * kib }
func linkRXKiB(i int, n uint64) uint64 { return 2 * n * uint64(i+1) * kib }

// Per-link error counters: link l of GPU i.
func linkErr(i, l int, c gonvml.NvLinkErrorCounter) uint64 {
	return uint64(i*100 + l + int(c)*1000)
}
func errTotal(i int, c gonvml.NvLinkErrorCounter) uint64 {
	var s uint64
	for l := range mockLinks {
		s += linkErr(i, l, c)
	}
	return s
}

func (r *rig) setDevice(d *server.Device) {
	i := d.Index
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		p := gonvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for j := range len(d.PciBusID) {
			p.BusId[j] = int8(d.PciBusID[j])
		}
		return p, gonvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		t := memTotal(d)
		return gonvml.Memory_v2{Total: t, Reserved: mockReserved, Used: memUsed(i), Free: t - mockReserved - memUsed(i)}, gonvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{Gpu: gpuUtil(i), Memory: memUtil(i)}, gonvml.SUCCESS
	}
	d.GetPcieThroughputFunc = func(c gonvml.PcieUtilCounter) (uint32, gonvml.Return) {
		switch c {
		case gonvml.PCIE_UTIL_TX_BYTES:
			return pcieTXKiB(i), gonvml.SUCCESS
		case gonvml.PCIE_UTIL_RX_BYTES:
			return pcieRXKiB(i), gonvml.SUCCESS
		}
		return 0, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.GetNvLinkStateFunc = func(l int) (gonvml.EnableState, gonvml.Return) {
		if l >= mockLinks {
			return 0, gonvml.ERROR_INVALID_ARGUMENT
		}
		return gonvml.FEATURE_ENABLED, gonvml.SUCCESS
	}
	d.GetFieldValuesFunc = func(vs []gonvml.FieldValue) gonvml.Return {
		if !r.fieldValues {
			return gonvml.ERROR_NOT_SUPPORTED
		}
		n := r.round.Load()
		for k := range vs {
			v := &vs[k]
			if v.ScopeId >= mockLinks {
				v.NvmlReturn = uint32(gonvml.ERROR_INVALID_ARGUMENT)
				continue
			}
			var x uint64
			switch v.FieldId {
			case gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
				x = linkTXKiB(i, n)
			case gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				x = linkRXKiB(i, n)
			default:
				v.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
				continue
			}
			v.NvmlReturn = uint32(gonvml.SUCCESS)
			v.ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.NativeEndian.PutUint64(v.Value[:], x)
		}
		return gonvml.SUCCESS
	}
	d.GetNvLinkUtilizationControlFunc = func(l, c int) (gonvml.NvLinkUtilizationControl, gonvml.Return) {
		return gonvml.NvLinkUtilizationControl{Units: uint32(gonvml.NVLINK_COUNTER_UNIT_BYTES)}, gonvml.SUCCESS
	}
	d.GetNvLinkUtilizationCounterFunc = func(l, c int) (uint64, uint64, gonvml.Return) {
		n := r.round.Load()
		return linkRXKiB(i, n) * kib, linkTXKiB(i, n) * kib, gonvml.SUCCESS // rx, tx in bytes
	}
	d.GetNvLinkErrorCounterFunc = func(l int, c gonvml.NvLinkErrorCounter) (uint64, gonvml.Return) {
		return linkErr(i, l, c), gonvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) {
		return gonvml.EventTypeXidCriticalError | gonvml.EventTypeSingleBitEccError, gonvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, set gonvml.EventSet) gonvml.Return {
		if types != gonvml.EventTypeXidCriticalError {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		return gonvml.SUCCESS
	}
}

func TestMockDGX(t *testing.T) {
	for _, tc := range []struct {
		name        string
		srv         func() *server.Server
		model       string
		fieldValues bool
	}{
		{"dgxh100/field-values", dgxh100.New, "NVIDIA H100 80GB HBM3", true},
		{"dgxh200/utilization-counter", dgxh200.New, "NVIDIA H200 141GB HBM3e", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.srv(), tc.fieldValues)
			lib := nvml.NewLibrary(r.srv)
			if err := lib.Init(); err != nil {
				t.Fatal(err)
			}
			devs, err := lib.Devices()
			if err != nil || len(devs) != 8 {
				t.Fatalf("devices: %d, %v", len(devs), err)
			}
			t0 := time.Unix(1_700_000_000, 0)
			s, err := nvml.NewSampler(devs, "node-7", t0, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.round.Store(1)
			first := split(t, s.Sample(t0.Add(time.Second)))
			for _, g := range first {
				if _, ok := g.points[nvml.MetricNvLinkTX]; ok {
					t.Fatalf("NVLink rate in the first round: %v", g.names)
				}
			}
			r.round.Store(3) // two rounds' worth of bytes in 10s
			now := t0.Add(11 * time.Second)
			gs := split(t, s.Sample(now))
			if len(gs) != 8 {
				t.Fatalf("%d resources, want 8", len(gs))
			}
			for i, g := range gs {
				d := r.srv.Devices[i].(*server.Device)
				checkResource(t, g, int64(i), d.UUID, "node-7")
				checkLabels(t, g, strconv.Itoa(i), d.UUID, d.PciBusID, tc.model, "node-7")
				if !equalStrings(g.names, allMetrics) {
					t.Fatalf("gpu %d metrics\n%v, want\n%v", i, g.names, allMetrics)
				}
				mib := func(b uint64) float64 { return float64(b >> 20) }
				want := map[string]float64{
					nvml.MetricFBTotal:         mib(memTotal(d)),
					nvml.MetricFBUsed:          mib(memUsed(i)),
					nvml.MetricFBFree:          mib(memTotal(d) - mockReserved - memUsed(i)),
					nvml.MetricFBReserved:      512,
					nvml.MetricGPUUtil:         float64(gpuUtil(i)),
					nvml.MetricMemCopyUtil:     float64(memUtil(i)),
					nvml.MetricPCIeTX:          float64(pcieTXKiB(i)) * kib,
					nvml.MetricPCIeRX:          float64(pcieRXKiB(i)) * kib,
					nvml.MetricNvLinkTX:        float64(mockLinks*(linkTXKiB(i, 3)-linkTXKiB(i, 1))*kib) / 10,
					nvml.MetricNvLinkRX:        float64(mockLinks*(linkRXKiB(i, 3)-linkRXKiB(i, 1))*kib) / 10,
					nvml.MetricNvLinkBandwidth: float64(mockLinks * (linkTXKiB(i, 3) + linkRXKiB(i, 3)) * kib),
					nvml.MetricNvLinkCRCFlit:   float64(errTotal(i, gonvml.NVLINK_ERROR_DL_CRC_FLIT)),
					nvml.MetricNvLinkCRCData:   float64(errTotal(i, gonvml.NVLINK_ERROR_DL_CRC_DATA)),
					nvml.MetricNvLinkReplay:    float64(errTotal(i, gonvml.NVLINK_ERROR_DL_REPLAY)),
					nvml.MetricNvLinkRecovery:  float64(errTotal(i, gonvml.NVLINK_ERROR_DL_RECOVERY)),
					nvml.MetricXidErrors:       0,
				}
				for name, w := range want {
					p := g.points[name]
					if got := p.GetAsDouble(); got != w {
						t.Errorf("gpu %d %s = %v, want %v", i, name, got, w)
					}
					if p.GetTimeUnixNano() != uint64(now.UnixNano()) {
						t.Errorf("gpu %d %s time %d", i, name, p.GetTimeUnixNano())
					}
					if sums[name] && p.GetStartTimeUnixNano() != uint64(t0.UnixNano()) {
						t.Errorf("gpu %d %s start %d", i, name, p.GetStartTimeUnixNano())
					}
				}
			}
			if gs[0].metrics[nvml.MetricFBTotal].GetUnit() != "MiB" || gs[0].metrics[nvml.MetricPCIeTX].GetUnit() != "By/s" {
				t.Errorf("units: %q %q", gs[0].metrics[nvml.MetricFBTotal].GetUnit(), gs[0].metrics[nvml.MetricPCIeTX].GetUnit())
			}
			if err := lib.Shutdown(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An Xid reported through the mock's EventSet reaches the watcher's
// channel with its GPU's uuid, is sent at once as a point, and becomes the
// GPU's DCGM_FI_DEV_XID_ERRORS in the next rounds; the event set is freed
// when the watch ends.
func TestMockXid(t *testing.T) {
	r := newRig(t, dgxh100.New(), true)
	lib := nvml.NewLibrary(r.srv)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	s, err := nvml.NewSampler(devs, "node-7", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := lib.WatchXids(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d3 := r.srv.Devices[3].(*server.Device)
	// Not an Xid: ignored.
	r.xids <- gonvml.EventData{Device: d3, EventType: gonvml.EventTypeSingleBitEccError, EventData: 1}
	r.xids <- gonvml.EventData{Device: d3, EventType: gonvml.EventTypeXidCriticalError, EventData: 79}
	var ev nvml.XidEvent
	select {
	case ev = <-evs:
	case <-time.After(10 * time.Second):
		t.Fatal("no xid event within 10s")
	}
	if ev.Err != nil || ev.UUID != d3.UUID || ev.Code != 79 || ev.Time.IsZero() {
		t.Fatalf("event %+v, want uuid %s code 79", ev, d3.UUID)
	}
	md, ok := s.ObserveXid(ev)
	if !ok {
		t.Fatal("ObserveXid: unknown GPU")
	}
	gs := split(t, md)
	if len(gs) != 1 || !equalStrings(gs[0].names, []string{nvml.MetricXidErrors}) {
		t.Fatalf("xid point: %+v", gs)
	}
	checkResource(t, gs[0], 3, d3.UUID, "node-7")
	p := gs[0].points[nvml.MetricXidErrors]
	if p.GetAsDouble() != 79 || attrs(p.GetAttributes())["err_code"] != "79" || p.GetTimeUnixNano() != uint64(ev.Time.UnixNano()) {
		t.Errorf("xid point %v", p)
	}
	for i, g := range split(t, s.Sample(time.Now())) {
		want := 0.0
		if i == 3 {
			want = 79
		}
		if got := g.points[nvml.MetricXidErrors].GetAsDouble(); got != want {
			t.Errorf("gpu %d last xid %v, want %v", i, got, want)
		}
	}
	cancel()
	deadline := time.After(10 * time.Second)
	for range evs {
		select {
		case <-deadline:
			t.Fatal("watch channel not closed within 10s of cancel")
		default:
		}
	}
	if !r.freed.Load() {
		t.Error("event set not freed")
	}
}

// Run against the mock: Init, a first round at once, Shutdown when ctx
// ends.
func TestMockRun(t *testing.T) {
	r := newRig(t, dgxh200.New(), false)
	var inits, shutdowns atomic.Int32
	r.srv.InitFunc = func() gonvml.Return { inits.Add(1); return gonvml.SUCCESS }
	r.srv.ShutdownFunc = func() gonvml.Return { shutdowns.Add(1); return gonvml.SUCCESS }
	sink := &memSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nvml.Run(ctx, nvml.NewLibrary(r.srv), sink, nvml.Options{Interval: time.Hour, Host: "h"})
	}()
	md := sink.wait(t, 1)[0]
	if n := len(md.GetResourceMetrics()); n != 8 {
		t.Fatalf("%d resources, want 8", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if inits.Load() != 1 || shutdowns.Load() != 1 || !r.freed.Load() {
		t.Errorf("inits %d, shutdowns %d, event set freed %v", inits.Load(), shutdowns.Load(), r.freed.Load())
	}
}

func TestMockInitErrors(t *testing.T) {
	for _, tc := range []struct {
		ret  gonvml.Return
		want error
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, nvml.ErrLibraryNotFound},
		{gonvml.ERROR_DRIVER_NOT_LOADED, nvml.ErrDriverNotLoaded},
	} {
		srv := dgxh100.New()
		srv.InitFunc = func() gonvml.Return { return tc.ret }
		err := nvml.NewLibrary(srv).Init()
		if !errors.Is(err, tc.want) || !nvml.Retryable(err) {
			t.Errorf("%v: got %v, want %v", tc.ret, err, tc.want)
		}
	}
}

// The real library: on this host without a driver Init reports the
// library missing; on a GPU host it works and the sampler reads real
// memory sizes.
func TestRealLibrary(t *testing.T) {
	lib := nvml.Open()
	err := lib.Init()
	if err != nil {
		if !errors.Is(err, nvml.ErrLibraryNotFound) && !errors.Is(err, nvml.ErrDriverNotLoaded) {
			t.Fatalf("Init without a GPU: %v", err)
		}
		t.Logf("no NVIDIA driver here: %v", err)
		return
	}
	defer lib.Shutdown()
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	s, err := nvml.NewSampler(devs, "h", time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range split(t, s.Sample(time.Now())) {
		if g.points[nvml.MetricFBTotal].GetAsDouble() <= 0 {
			t.Errorf("gpu %d: FB total %v", i, g.points[nvml.MetricFBTotal])
		}
		t.Logf("gpu %d: %v", i, g.names)
	}
}
