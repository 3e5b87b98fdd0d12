package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/simulator"
)

// TestDemoRate: --rate goes from a trickle to saturation in event time.
func TestDemoRate(t *testing.T) {
	for _, tc := range []struct {
		rate      float64
		realistic bool
		batches   int
		want      int // requests arriving over the batches
	}{
		{0.2, true, 100, 4},   // 20 s
		{40, true, 50, 400},   // 10 s
		{2000, true, 5, 2000}, // 1 s
		{40, false, 10, 80},   // legacy: 8 per batch
	} {
		o := simOptions{rate: tc.rate, encoding: simulator.EncodingProto, keyed: true, realistic: tc.realistic}
		sim, err := simulator.New(o.simConfig(1, simulator.DefaultStart))
		if err != nil {
			t.Fatal(err)
		}
		for range tc.batches {
			sim.Next()
		}
		tr := sim.Truth()
		if !tc.realistic {
			if len(tr.Traces) != tc.want {
				t.Errorf("legacy rate %v: %d requests, want %d", tc.rate, len(tr.Traces), tc.want)
			}
			continue
		}
		sim.Flush()
		tr = sim.Truth()
		if got := len(tr.Traces) + len(tr.Orphans); got != tc.want {
			t.Errorf("rate %v: %d requests over %v, want %d", tc.rate, got, time.Duration(tc.batches)*200*time.Millisecond, tc.want)
		}
	}
}

// TestDemoFaults: --faults turns on KV events and injects the faults, each
// realised and in the truth.
func TestDemoFaults(t *testing.T) {
	if _, err := parseFaults("double_free,nope"); err == nil {
		t.Fatal("unknown trigger accepted")
	}
	triggers, err := parseFaults("all")
	if err != nil || len(triggers) != len(simulator.KVTriggers) {
		t.Fatalf("all: %v %v", triggers, err)
	}
	triggers, _ = parseFaults("double_free, wrong_stride")
	o := simOptions{rate: 10, encoding: simulator.EncodingProto, keyed: true, realistic: true, hosts: 1, kvEvents: true, faults: triggers}
	sim, err := simulator.New(o.simConfig(1, simulator.DefaultStart))
	if err != nil {
		t.Fatal(err)
	}
	for range 500 { // 100 s
		sim.Next()
	}
	sim.Flush()
	tr := sim.Truth()
	if tr.KVEvents == 0 || tr.KV.Summary.Faults != 2 {
		t.Fatalf("%d KV events, summary %+v", tr.KVEvents, tr.KV.Summary)
	}
}

// TestDemoAlerts runs the demo (in-process Kafka, simulator, job) with one
// KV fault and no other fault: the alerts stage's BraidKVCachePollution
// fires on the incident, and the demo prints it with the incident id.
func TestDemoAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for tens of seconds")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, []string{"--addr", addr, "--admin-addr", "", "--quiet", "--state-dir", t.TempDir(),
			"--hosts", "1", "--rate", "5", "--faults", "double_free", "--regression", "", "--leak", "",
			"--fast-forward", "1m", "--speed", "5"},
			slog.New(slog.NewTextHandler(io.Discard, nil)), &out, &errOut)
	}()
	deadline := time.Now().Add(3 * time.Minute)
	firing := regexp.MustCompile(`(?m)^\*\* ALERT FIRING +\S+  BraidKVCachePollution \{gpu="[^"]+"\}  value 1 vs threshold 0  critical, episode 1; incidents inc-[0-9a-f]+$`)
	for !firing.MatchString(errOut.String()) {
		select {
		case err := <-done:
			t.Fatalf("demo ended: %v\n%s", err, errOut.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no FIRING line for BraidKVCachePollution after 3m:\n%s", errOut.String())
		}
	}
	if !strings.Contains(errOut.String(), "!! INCIDENT inc-") {
		t.Errorf("the alert came without its incident line:\n%s", errOut.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !strings.Contains(out.String(), "braid.alerts") {
		t.Errorf("the demo does not say where alerts go:\n%s", out.String())
	}
}

// TestDemoOps: --regression and --leak parse into the simulator's faults,
// "" turns them off, and bad values are refused.
func TestDemoOps(t *testing.T) {
	regs, err := parseRegression(defaultRegression)
	if err != nil || len(regs) != 1 || regs[0] != (simulator.Regression{Instance: 1, Factor: 20, From: time.Minute, To: 6 * time.Minute}) {
		t.Fatalf("default regression %+v %v", regs, err)
	}
	leaks, err := parseLeak(defaultLeak)
	if err != nil || len(leaks) != 1 || leaks[0] != (simulator.Leak{GPU: 0, MiBPerMinute: 8000, From: 90 * time.Second, To: 8 * time.Minute}) {
		t.Fatalf("default leak %+v %v", leaks, err)
	}
	if r, err := parseRegression(""); r != nil || err != nil {
		t.Fatalf("empty regression: %v %v", r, err)
	}
	for _, bad := range []string{"server=1,factor=6,from=1m", "server=x,factor=6,from=1m,to=2m", "server=1,factor=6,from=1m,to=2m,gpu=1", "server=1,server=2,factor=6,from=1m,to=2m", "1,6,1m,2m"} {
		if _, err := parseRegression(bad); err == nil {
			t.Errorf("regression %q accepted", bad)
		}
	}
	if _, err := parseLeak("gpu=0,rate=8000,from=90s,to=soon"); err == nil {
		t.Error("bad leak accepted")
	}
	jumps, err := parseJump(defaultJump)
	if err != nil || len(jumps) != 1 || jumps[0] != (simulator.VerdictJump{Tenant: "umbrella", JailbreakRate: 0.8, From: 2 * time.Minute, To: 6 * time.Minute}) {
		t.Fatalf("default jump %+v %v", jumps, err)
	}
	if j, err := parseJump(""); j != nil || err != nil {
		t.Fatalf("empty jump: %v %v", j, err)
	}
	for _, bad := range []string{"tenant=acme,rate=2,from=1m,to=2m", "tenant=acme,rate=0.5,from=2m,to=1m", "tenant=acme,rate=0.5,from=1m", "tenant=acme,rate=0.5,from=1m,to=2m,gpu=1"} {
		if _, err := parseJump(bad); err == nil {
			t.Errorf("jump %q accepted", bad)
		}
	}
	// The simulator validates the rest (indexes, factors, windows) and
	// realises the faults.
	o := simOptions{rate: 20, encoding: simulator.EncodingProto, keyed: true, realistic: true, regressions: regs, leaks: leaks, jumps: jumps}
	sim, err := simulator.New(o.simConfig(1, simulator.DefaultStart))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 * 100 { // 100 s
		sim.Next()
	}
	tr := sim.Truth()
	if len(tr.Regressions) != 1 || len(tr.Regressions[0].TraceIDs) == 0 || len(tr.Leaks) != 1 || tr.Leaks[0].Samples == 0 {
		t.Fatalf("faults not realised: %+v %+v", tr.Regressions, tr.Leaks)
	}
	verdicts := 0
	for _, tt := range tr.Traces {
		verdicts += len(tt.Verdicts)
	}
	if verdicts == 0 {
		t.Fatal("the demo's fleet reports no verdicts")
	}
	o.hosts, o.regressions = 1, []simulator.Regression{{Instance: 5, Factor: 2, From: 0, To: time.Minute}}
	if _, err := simulator.New(o.simConfig(1, simulator.DefaultStart)); err == nil {
		t.Error("regression on server 5 of a 2-server fleet accepted")
	}
}

// TestDemoClock: event time runs speed times the wall clock from start
// until it meets the wall clock, then follows it.
func TestDemoClock(t *testing.T) {
	w0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := newDemoClock(w0, 5, 10*time.Minute)
	if got := w0.Sub(c.start); got != 8*time.Minute || c.catchUp != 2*time.Minute {
		t.Fatalf("start %v behind, catch-up %v", got, c.catchUp)
	}
	for _, tc := range []struct{ wall, event time.Duration }{
		{0, -8 * time.Minute}, {time.Minute, -3 * time.Minute}, {2 * time.Minute, 2 * time.Minute}, {5 * time.Minute, 5 * time.Minute},
	} {
		if got := c.at(w0.Add(tc.wall)).Sub(w0); got != tc.event {
			t.Errorf("at wall +%v: event %v, want %v", tc.wall, got, tc.event)
		}
	}
	if c := newDemoClock(w0, 5, 0); c.start != w0 || c.at(w0.Add(time.Second)) != w0.Add(time.Second) {
		t.Errorf("no fast-forward: %+v", c)
	}
}

// demoSeed is the simulator seed of a test's demo: BRAID_DEMO_SEED when
// set (to play a failed run again), else one from the clock. A failed
// test names it.
func demoSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if v := os.Getenv("BRAID_DEMO_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("BRAID_DEMO_SEED %q: %v", v, err)
		}
		seed = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the demo ran with seed %d (BRAID_DEMO_SEED=%d plays it again)", seed, seed)
		}
	})
	return seed
}
