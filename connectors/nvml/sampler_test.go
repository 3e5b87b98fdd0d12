package nvml_test

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/nvml"
	"github.com/braidlabs/braid/connectors/nvml/fake"
)

// busy sets GPU i of l to readings that depend on i.
func busy(l *fake.Library) {
	for i, d := range l.Devs {
		d.Update(func(s *fake.State) {
			s.Memory = nvml.Memory{Total: 80 << 30, Reserved: 512 << 20, Used: uint64(i+1) << 30, Free: 80<<30 - 512<<20 - uint64(i+1)<<30}
			s.Utilization = nvml.Utilization{GPU: uint32(50 + i), Memory: uint32(30 + i)}
			s.PCIe = nvml.PCIeThroughput{TX: uint64(1e6 * (i + 1)), RX: uint64(2e6 * (i + 1))}
			s.NvLink = nvml.NvLinkBytes{TX: 1 << 30, RX: 2 << 30}
			s.NvLinkErrors = nvml.NvLinkErrors{CRCFlit: uint64(i), CRCData: 2, Replay: 3, Recovery: 4}
		})
	}
}

func TestSampleFake(t *testing.T) {
	l := fake.New(2)
	busy(l)
	devs, _ := l.Devices()
	t0 := time.Unix(1_800_000_000, 0)
	s, err := nvml.NewSampler(devs, "host-b", t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := split(t, s.Sample(t0))
	if want := withoutRates(allMetrics); !equalStrings(first[0].names, want) {
		t.Fatalf("first round\n%v, want\n%v", first[0].names, want)
	}
	for _, d := range l.Devs {
		d.Update(func(s *fake.State) { s.NvLink.TX += 5 << 30; s.NvLink.RX += 10 << 30 })
	}
	gs := split(t, s.Sample(t0.Add(5*time.Second)))
	for i, g := range gs {
		uuid := fmt.Sprintf("GPU-fake-%04d", i)
		checkResource(t, g, int64(i), uuid, "host-b")
		checkLabels(t, g, strconv.Itoa(i), uuid, fmt.Sprintf("%08X:00:00.0", i), "NVIDIA H100 80GB HBM3", "host-b")
		if !equalStrings(g.names, allMetrics) {
			t.Fatalf("gpu %d\n%v, want\n%v", i, g.names, allMetrics)
		}
		want := map[string]float64{
			nvml.MetricFBTotal: 80 << 10, nvml.MetricFBUsed: float64((i + 1) << 10), nvml.MetricFBReserved: 512,
			nvml.MetricFBFree:  80<<10 - 512 - float64((i+1)<<10),
			nvml.MetricGPUUtil: float64(50 + i), nvml.MetricMemCopyUtil: float64(30 + i),
			nvml.MetricPCIeTX: 1e6 * float64(i+1), nvml.MetricPCIeRX: 2e6 * float64(i+1),
			nvml.MetricNvLinkTX: 1 << 30, nvml.MetricNvLinkRX: 2 << 30, // 5 GiB and 10 GiB in 5 s
			nvml.MetricNvLinkBandwidth: 18 << 30,
			nvml.MetricNvLinkCRCFlit:   float64(i), nvml.MetricNvLinkCRCData: 2, nvml.MetricNvLinkReplay: 3, nvml.MetricNvLinkRecovery: 4,
			nvml.MetricXidErrors: 0,
		}
		for name, w := range want {
			if got := g.points[name].GetAsDouble(); got != w {
				t.Errorf("gpu %d %s = %v, want %v", i, name, got, w)
			}
		}
	}
}

func withoutRates(names []string) []string {
	var out []string
	for _, n := range names {
		if n != nvml.MetricNvLinkTX && n != nvml.MetricNvLinkRX {
			out = append(out, n)
		}
	}
	return out
}

// A query that fails leaves its metrics out for that GPU only; a GPU
// without NVLink has no NVLink metrics; a counter that went down restarts
// the rate instead of producing a negative one.
func TestSampleFailures(t *testing.T) {
	l := fake.New(2)
	busy(l)
	l.Devs[1].Update(func(s *fake.State) {
		s.Errs = map[fake.Query]error{
			fake.QueryNvLinkThroughput: nvml.ErrNotSupported,
			fake.QueryNvLinkErrors:     nvml.ErrNotSupported,
			fake.QueryPCIe:             errors.New("nvml: pcie tx throughput: ERROR_UNKNOWN (999)"),
		}
	})
	devs, _ := l.Devices()
	t0 := time.Unix(1_800_000_000, 0)
	s, err := nvml.NewSampler(devs, "h", t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Sample(t0)
	l.Devs[0].Update(func(s *fake.State) { s.NvLink.TX = 0 }) // driver reloaded
	gs := split(t, s.Sample(t0.Add(time.Second)))
	if want := withoutRates(allMetrics); !equalStrings(gs[0].names, want) {
		t.Errorf("gpu 0 after a counter reset\n%v, want\n%v", gs[0].names, want)
	}
	want1 := []string{nvml.MetricFBTotal, nvml.MetricFBUsed, nvml.MetricFBFree, nvml.MetricFBReserved,
		nvml.MetricGPUUtil, nvml.MetricMemCopyUtil, nvml.MetricXidErrors}
	if !equalStrings(gs[1].names, want1) {
		t.Errorf("gpu 1\n%v, want\n%v", gs[1].names, want1)
	}
	l.Devs[0].Update(func(s *fake.State) { s.NvLink.TX = 3 << 30 })
	gs = split(t, s.Sample(t0.Add(3*time.Second)))
	if got := gs[0].points[nvml.MetricNvLinkTX].GetAsDouble(); got != 1.5*(1<<30) {
		t.Errorf("rate after reset: %v, want 1.5 GiB/s", got)
	}
}

// The output depends on the devices, not on the order Devices lists them:
// the same readings give the same bytes.
func TestSampleDeterministic(t *testing.T) {
	l := fake.New(4)
	busy(l)
	devs, _ := l.Devices()
	rev := []nvml.Device{devs[3], devs[1], devs[2], devs[0]}
	now := time.Unix(1_800_000_000, 0)
	a, _ := nvml.NewSampler(devs, "h", now, nil)
	b, _ := nvml.NewSampler(rev, "h", now, nil)
	opt := proto.MarshalOptions{Deterministic: true}
	ba, _ := opt.Marshal(a.Sample(now))
	bb, _ := opt.Marshal(b.Sample(now))
	if !bytes.Equal(ba, bb) {
		t.Fatal("same readings, different bytes")
	}
	for i, g := range split(t, a.Sample(now)) {
		if g.resource["gpu.index"] != int64(i) {
			t.Fatalf("resource %d is gpu %v", i, g.resource["gpu.index"])
		}
	}
}

func TestNewSamplerErrors(t *testing.T) {
	l := fake.New(2)
	l.Devs[1].Update(func(s *fake.State) { s.Info.UUID = "GPU-fake-0000" })
	devs, _ := l.Devices()
	if _, err := nvml.NewSampler(devs, "h", time.Now(), nil); err == nil {
		t.Error("two GPUs with one uuid: no error")
	}
	l = fake.New(1)
	l.Devs[0].Update(func(s *fake.State) { s.Errs = map[fake.Query]error{fake.QueryInfo: nvml.ErrGPULost} })
	devs, _ = l.Devices()
	if _, err := nvml.NewSampler(devs, "h", time.Now(), nil); !errors.Is(err, nvml.ErrGPULost) {
		t.Errorf("info fails: got %v", err)
	}
}

func TestObserveXidUnknown(t *testing.T) {
	l := fake.New(1)
	devs, _ := l.Devices()
	s, _ := nvml.NewSampler(devs, "h", time.Now(), nil)
	if _, ok := s.ObserveXid(nvml.XidEvent{UUID: "GPU-other", Code: 13}); ok {
		t.Error("xid of an unknown GPU accepted")
	}
	if _, ok := s.ObserveXid(nvml.XidEvent{Err: errors.New("wait failed")}); ok {
		t.Error("failed wait accepted as an xid")
	}
}
