package engine

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/braidlabs/braid/state"
)

func TestMarkerRoundTrip(t *testing.T) {
	for _, c := range []struct {
		task int32
		wm   int64
		idle bool
	}{{0, -1 << 63, false}, {7, 1767225600000000000, true}, {1023, 5, false}} {
		task, wm, idle, ok := decodeMarker(encodeMarker(c.task, c.wm, c.idle))
		if !ok || task != c.task || wm != c.wm || idle != c.idle {
			t.Errorf("marker %+v came back as %d %d %v %v", c, task, wm, idle, ok)
		}
	}
	if _, _, _, ok := decodeMarker([]byte{1, 2}); ok {
		t.Error("a truncated marker decoded")
	}
}

func TestTaskOffsetsRoundTrip(t *testing.T) {
	in := map[string]int64{"otlp_spans": 12, "otlp_logs": 0, "braid.fuse-repartition": 1 << 40}
	out, err := decodeTaskOffsets(encodeTaskOffsets(in))
	if err != nil || !maps.Equal(in, out) {
		t.Fatalf("offsets %v came back as %v (%v)", in, out, err)
	}
	if _, err := decodeTaskOffsets([]byte{3, 200}); err == nil {
		t.Fatal("corrupt checkpoint record decoded")
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{CheckpointInterval: 30 * time.Second, TransactionTimeout: 35 * time.Second}
	c.EnsureDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"Group", "TransactionalID", "Store", "TransactionTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	c = Config{CheckpointInterval: 30 * time.Second}
	c.EnsureDefaults()
	if c.TransactionTimeout < c.CheckpointInterval+10*time.Second {
		t.Errorf("default transaction timeout %v too short for interval %v", c.TransactionTimeout, c.CheckpointInterval)
	}
	c = Config{}
	c.EnsureDefaults()
	if c.MaxRecordBytes != 1_000_000 || c.MaxClockSkew != 10*time.Minute || c.ProducerBufferBytes != 64<<20 || c.FetchBufferBytes != 64<<20 {
		t.Errorf("defaults: MaxRecordBytes %d, MaxClockSkew %v, ProducerBufferBytes %d, FetchBufferBytes %d",
			c.MaxRecordBytes, c.MaxClockSkew, c.ProducerBufferBytes, c.FetchBufferBytes)
	}
	c = Config{MaxRecordBytes: 10, MaxClockSkew: -time.Second, ProducerBufferBytes: 5, FetchBufferBytes: 100}
	c.EnsureDefaults()
	err = c.Validate()
	for _, want := range []string{"MaxRecordBytes", "MaxClockSkew", "ProducerBufferBytes", "FetchBufferBytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestFollowUpWaitDefaults(t *testing.T) {
	for _, c := range []struct{ interval, want time.Duration }{{time.Second, 500 * time.Millisecond}, {5 * time.Second, 500 * time.Millisecond}} {
		cfg := Config{CheckpointInterval: c.interval}
		cfg.EnsureDefaults()
		if cfg.FollowUpWait != c.want {
			t.Errorf("interval %v: FollowUpWait %v, want %v", c.interval, cfg.FollowUpWait, c.want)
		}
	}
	cfg := Config{Group: "g", TransactionalID: "x", CheckpointInterval: 2 * time.Second, FollowUpWait: 1500 * time.Millisecond}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "FollowUpWait") {
		t.Errorf("FollowUpWait over half the interval: error %v", err)
	}
}

// TestFollowUpHops: a regular checkpoint gets as many follow-ups as the
// markers take hops through the internal topics — two for fuse's shape,
// where the repartition topic's markers carry what came in on the others.
func TestFollowUpHops(t *testing.T) {
	proc := func(*Task) (Processor, error) { return nil, nil }
	for _, c := range []struct {
		inputs []Input
		want   int
	}{
		{[]Input{{Topic: "src"}}, 0},
		{[]Input{{Topic: "src"}, {Topic: "mid", Internal: true}}, 1},
		{[]Input{{Topic: "spans"}, {Topic: "resolve", Internal: true}, {Topic: "kv", Internal: true},
			{Topic: "repartition", Internal: true, From: []string{"resolve", "kv"}}}, 2},
		{[]Input{{Topic: "a", Internal: true}, {Topic: "b", Internal: true, From: []string{"a"}},
			{Topic: "c", Internal: true, From: []string{"b"}}, {Topic: "d", Internal: true, From: []string{"a"}}}, 3},
	} {
		e, err := New(Config{Group: "g", TransactionalID: "x", Store: &state.Store{}}, Topology{Name: "t", Inputs: c.inputs, Partitions: 1, NewProcessor: proc})
		if err != nil {
			t.Fatal(err)
		}
		if e.hops != c.want {
			t.Errorf("inputs %v: %d hops, want %d", c.inputs, e.hops, c.want)
		}
	}
}
