package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/simulator"
)

func TestSamplingCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	seen := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_sampling_seen_total"}, []string{"tenant"})
	kept := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "braid_sampling_kept_total"}, []string{"tenant", "reason"})
	records := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_sampling_records_total"})
	bytes := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_sampling_bytes_total"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "braid_alerts_observations_total"})
	reg.MustRegister(seen, kept, records, bytes, other)
	seen.WithLabelValues("").Add(90)
	seen.WithLabelValues("a").Add(10)
	kept.WithLabelValues("", "rate").Add(9)
	kept.WithLabelValues("a", "rate").Add(1)
	kept.WithLabelValues("a", "error").Add(2)
	records.Add(24)
	bytes.Add(1000)
	other.Add(7)

	sc, err := samplingCounters(reg)
	if err != nil {
		t.Fatal(err)
	}
	if sc == nil || sc.Seen != 100 || sc.Tenants != 2 || sc.Kept["rate"] != 10 || sc.Kept["error"] != 2 ||
		sc.KeptTotal != 12 || sc.Records != 24 || sc.Bytes != 1000 {
		t.Fatalf("got %+v", sc)
	}
	if sc, err := samplingCounters(prometheus.NewRegistry()); err != nil || sc != nil {
		t.Fatalf("no sampling metrics: got %+v, %v", sc, err)
	}
}

func TestSamplingCostAndMedian(t *testing.T) {
	on := []Phase{{Round: 1, CPUSec: 10, AllFusedCPUSec: 12, SettledCPUSec: 13}, {Round: 2, CPUSec: 11, AllFusedCPUSec: 14}, {Round: 3, Error: "x"}}
	off := []Phase{{Round: 1, CPUSec: 10, AllFusedCPUSec: 10, SettledCPUSec: 10}, {Round: 2, CPUSec: 10, AllFusedCPUSec: 10, SettledCPUSec: 11}, {Round: 3, CPUSec: 1}}
	mOn, mOff := median(on), median(off)
	// Round 2 of on did not reach window 3: left out of its median.
	if mOn.SettledCPUSec != 13 || mOn.AllFusedCPUSec != 13 || mOn.CPUSec != 10.5 {
		t.Fatalf("median on: %+v", mOn)
	}
	c := samplingCost(on, off, mOn, mOff)
	if len(c.AllFusedPerRound) != 2 || c.AllFusedPerRound[0] != 1.2 || c.AllFusedPerRound[1] != 1.4 || len(c.SettledPerRound) != 1 {
		t.Fatalf("per round: %+v", c)
	}
	if c.AllFusedCPURatio != 13.0/10 {
		t.Fatalf("ratio %v", c.AllFusedCPURatio)
	}
}

// TestTraceCount counts the span messages of a simulated workload, in both
// encodings, as the Collector contender's watcher counts what it wrote.
func TestTraceCount(t *testing.T) {
	for _, enc := range []string{simulator.EncodingProto, simulator.EncodingJSON} {
		topics := simulator.Topics{Spans: "s", Logs: "l", Metrics: "m"}
		sim, err := simulator.New(simulator.Config{Seed: 1, Encoding: enc, Topics: topics})
		if err != nil {
			t.Fatal(err)
		}
		oenc := otlp.EncodingProto
		if enc == simulator.EncodingJSON {
			oenc = otlp.EncodingJSON
		}
		c := newTraceCount(oenc, 100, 500*time.Millisecond)
		var msgs []simulator.Message
		for range 4 {
			msgs = append(msgs, sim.Next()...)
		}
		msgs = append(msgs, sim.Flush()...)
		t0 := time.Unix(1700000000, 0)
		for _, m := range msgs {
			if m.Topic == topics.Spans {
				c.add(m.Value, t0)
			}
		}
		tr := sim.Truth()
		wl := Workload{Spans: tr.Spans, Traces: 4 * simulator.DefaultRequestsPerBatch}
		var r CollectorRun
		c.fill(&r)
		split := tr.SpanMessages - wl.Traces // the split traces' second records
		if !c.complete(wl) || r.Spans != int64(tr.Spans) || r.Traces != wl.Traces || r.Undecodable != 0 || r.Messages != int64(tr.SpanMessages) ||
			split == 0 || r.SplitTraces != split || r.ReleasedAgain != 0 {
			t.Fatalf("encoding %v: counted %+v, want %d spans, %d traces, %d messages, %d split", enc, r, tr.Spans, wl.Traces, tr.SpanMessages, split)
		}
		// A trace's spans written again a second later: released again.
		for _, m := range msgs {
			if m.Topic == topics.Spans {
				c.add(m.Value, t0.Add(time.Second))
				break
			}
		}
		c.add([]byte("not otlp"), t0)
		if c.fill(&r); r.Undecodable != 1 || r.ReleasedAgain != 1 {
			t.Fatalf("undecodable and released again: %+v", r)
		}
	}
}

// TestOtelcolConfig checks that the Collector of deploy/local/otelcol.sh,
// if it is built, accepts the generated config.
func TestOtelcolConfig(t *testing.T) {
	cfg := otelcolConfig(otelcolSettings{Brokers: []string{"127.0.0.1:9092", "h:1"}, Group: "g's", In: "in", Out: "out",
		Encoding: "otlp_json", Codec: "snappy", Wait: 1500 * time.Millisecond, Traces: 1234})
	for _, want := range []string{"brokers: ['127.0.0.1:9092', 'h:1']", "group_id: 'g''s'", "topics: ['in']", "wait_duration: 1.5s",
		"topic: 'out'", "encoding: otlp_json", "partition_traces_by_id: true", "compression: snappy", "queue_size: 1234", "level: none"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	bin, why, err := collectorBin("")
	if err != nil || bin == "" {
		t.Skipf("no Collector to validate the config with: %s %v", why, err)
	}
	path := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(bin, "validate", "--config=file:"+path).CombinedOutput(); err != nil {
		t.Fatalf("%s validate: %v\n%s\n%s", bin, err, b, cfg)
	}
}

// TestCollectorBin: without a build of deploy/local/otelcol.sh the
// contender is left out with the reason; off turns it off; a path that is
// not an executable is an error.
func TestCollectorBin(t *testing.T) {
	t.Setenv("BRAID_CACHE_DIR", t.TempDir())
	if bin, why, err := collectorBin(""); err != nil || bin != "" || !strings.Contains(why, "not built") {
		t.Errorf("no build: got %q, %q, %v", bin, why, err)
	}
	if bin, why, err := collectorBin("off"); err != nil || bin != "" || why == "" {
		t.Errorf("off: got %q, %q, %v", bin, why, err)
	}
	if _, _, err := collectorBin(t.TempDir()); err == nil {
		t.Error("a directory: no error")
	}
}
