package simulator

import (
	"testing"
	"time"
)

// TestKVRestart: a restart ends the events of the requests that were
// running (they never free), its events carry the new instance id, the
// capture writes and zeroes the null block without a request, and block 0
// is never allocated; with NullBlockJunk the zero is missing and the
// padded reads that follow are the fault's victims.
func TestKVRestart(t *testing.T) {
	at := kvStart.Add(90 * time.Second)
	for _, junk := range []bool{false, true} {
		cfg := KVConfig{Seed: 3, Layers: 4, BlocksPerGPU: 64, NullBlock: true, Restarts: []KVRestart{{GPU: 0, At: at}}}
		if junk {
			cfg.Faults = []KVFault{{Trigger: NullBlockJunk, At: kvStart, GPU: 0}}
		}
		running := map[string]bool{} // requests of GPU 0 with events before the restart
		after := map[string]bool{}
		var captures, zeros, padded, allocs0 int
		instances := map[string]bool{}
		truth := kvRun(t, cfg, 2, kvLoad(4, 2, 4*time.Minute, time.Second), func(ev KVEvent) {
			if ev.GPU != 0 || ev.Op == "" {
				return
			}
			if ev.Time.Before(at) {
				if ev.Instance != "" {
					t.Fatalf("event before the restart has instance %q", ev.Instance)
				}
				running[ev.RequestID] = true
				if ev.Op == OpFree || ev.Op == OpSwapOut {
					delete(running, ev.RequestID) // may have finished
				}
				return
			}
			instances[ev.Instance] = true
			if ev.RequestID == "" && ev.Op == OpWrite && ev.Block == 0 {
				captures++
			}
			if ev.Op == OpZero && ev.Block == 0 {
				zeros++
			}
			if ev.Op == OpAlloc && ev.Block == 0 {
				allocs0++
			}
			if ev.Op == OpRead && ev.Block == 0 {
				padded++
			}
			if ev.RequestID != "" {
				after[ev.RequestID] = true
			}
		})
		for id := range running {
			if after[id] {
				t.Errorf("junk=%v: request %s of the old process has events after the restart", junk, id)
			}
		}
		if len(instances) != 1 || !instances["vllm-0-r1"] || captures != cfg.Layers || allocs0 != 0 || padded == 0 {
			t.Fatalf("junk=%v: instances %v, captures %d, allocs of block 0 %d, padded reads %d", junk, instances, captures, allocs0, padded)
		}
		if truth.Summary.Restarts != 1 {
			t.Errorf("junk=%v: %d restarts in the summary", junk, truth.Summary.Restarts)
		}
		if !junk {
			if zeros != 1 || len(truth.Polluted) != 0 {
				t.Fatalf("clean restart: %d zeros, %d polluted", zeros, len(truth.Polluted))
			}
			continue
		}
		if zeros != 0 || len(truth.Faults) != 1 || truth.Faults[0].SourceRequest != "" || truth.Faults[0].Block != 0 || len(truth.Faults[0].Victims) == 0 {
			t.Fatalf("junk restart: %d zeros, faults %+v", zeros, truth.Faults)
		}
		t.Logf("junk: %d padded reads, %d victims", padded, len(truth.Faults[0].Victims))
	}
}
