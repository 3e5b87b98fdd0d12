package fuse

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/sampling"
	"github.com/braidlabs/braid/operators/semconv"
)

// FuzzFuseStage: whatever two input messages hold, the stage (two tasks,
// request-id joins on) neither fails nor panics, every record it writes
// fits the record limit, and every fused, late and dead-letter record
// unmarshals (fused parts and braid.chunk records reassembled).
func FuzzFuseStage(f *testing.F) {
	for _, g := range genTraces(rand.New(rand.NewPCG(1, 1)), 2, base) {
		f.Add(uint8(0), spansMsg(g.spans...), uint8(1), logsMsg(g.logs...), int64(0))
		f.Add(uint8(2), pointsMsg(g.point), uint8(0), invalidUTF8(spansMsg(requestSpan(g.id, placeholder, base, base.Add(time.Second)))), int64(time.Hour))
	}
	f.Add(uint8(1), logsMsg(ridLogs("cmpl-abc", 3, base, 10)...), uint8(0), spansMsg(requestSpan([16]byte{1}, "cmpl-abc", base, base.Add(time.Second))), int64(-time.Hour))
	ids, err := semconv.DefaultRequestIDRules().Compile()
	if err != nil {
		f.Fatal(err)
	}
	one := 1.0
	f.Fuzz(func(t *testing.T, in1 uint8, v1 []byte, in2 uint8, v2 []byte, skew int64) {
		// Every trace kept, so that every one is re-encoded for trace
		// stores.
		smp, err := sampling.New(sampling.Config{Enabled: true, Policy: sampling.Policy{Rate: &one}})
		if err != nil {
			t.Fatal(err)
		}
		c := newCluster(t, 2, func(cfg *Config) {
			cfg.Sampling = smp
			cfg.RequestIDs = ids
			cfg.MaxRecordBytes = 64 << 10
			cfg.MaxBytes = 256 << 10
		})
		ts := base.Add(time.Duration(skew))
		for i, m := range []struct {
			in uint8
			v  []byte
		}{{in1, v1}, {in2, v2}} {
			h := c.hs[i%2]
			h.now = h.now.Add(10 * time.Millisecond)
			h.SetNow(h.now)
			if err := h.Process(int(m.in%3), &kgo.Record{Value: m.v, Timestamp: ts, Offset: int64(i)}); err != nil {
				t.Fatal(err)
			}
			c.drain()
		}
		c.checkpoint(time.Second)
		for _, h := range c.hs {
			if err := h.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		c.drain()
		for _, h := range c.hs {
			if err := h.Finish(); err != nil {
				t.Fatal(err)
			}
			checkFits(t, h.Out, h.stage.cfg.MaxRecordBytes)
			h.fused() // unmarshals every fused record
			checkCopies(t, h.out("braid.late"))
			checkCopies(t, h.out("braid.dlq"))
		}
	})
}

// checkCopies reassembles braid.chunk records and checks that every late or
// dead-letter copy that names its signal unmarshals as OTLP.
func checkCopies(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	var pending []byte
	for _, r := range recs {
		v := r.Value
		if n := hdr(r, "braid.chunks"); n != "" {
			i, _ := strconv.Atoi(hdr(r, "braid.chunk"))
			if i == 0 {
				pending = pending[:0]
			}
			pending = append(pending, v...)
			if strconv.Itoa(i+1) != n {
				continue
			}
			v = bytes.Clone(pending)
		}
		var m proto.Message
		switch hdr(r, "braid.signal") {
		case "spans":
			m = &tracepb.TracesData{}
		case "logs":
			m = &logspb.LogsData{}
		case "metrics":
			m = &metricspb.MetricsData{}
		default:
			continue // a dead-letter copy of undecodable input, unchanged
		}
		if err := proto.Unmarshal(v, m); err != nil {
			t.Fatalf("%s copy (reason %q) does not unmarshal: %v", r.Topic, hdr(r, "braid.reason"), err)
		}
	}
}
