package engine

import (
	"maps"
	"strings"
	"testing"
	"time"
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
