package braidproc

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/braidlabs/braid/cmd/braid/job"
)

// TestConfigYAML: the file a benchmark writes is what braid's own loader
// reads back, field for field.
func TestConfigYAML(t *testing.T) {
	// The loader lets the environment override the file (CI exports the
	// test broker); the file alone is under test here.
	for _, v := range []string{"BRAID_KAFKA_BROKERS", "BRAID_GROUP", "BRAID_INSTANCE_ID", "BRAID_STATE_DIR"} {
		t.Setenv(v, "")
	}
	c := Config{Brokers: []string{"127.0.0.1:39092", "127.0.0.1:39093"}, Group: "g", Instance: "i-0",
		Inputs: [3]string{"s", "l", "m"}, Outputs: [5]string{"f", "late", "dlq", "p", "inc"},
		StateDir: t.TempDir(), MemoryBudget: 1 << 30, Admin: "127.0.0.1:9999", CheckpointInterval: time.Second, Alignment: time.Minute}
	path := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(path, []byte(c.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := job.LoadConfig(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.YAML())
	}
	if len(got.Kafka.Brokers) != 2 || got.Group != "g" || got.InstanceID != "i-0" ||
		got.Inputs.Spans.Topic != "s" || got.Inputs.Logs.Topic != "l" || got.Inputs.Metrics.Topic != "m" ||
		got.Outputs.Fused != "f" || got.Outputs.Late != "late" || got.Outputs.DLQ != "dlq" || got.Outputs.Pollution != "p" || got.Outputs.Incidents != "inc" ||
		got.State.Dir != c.StateDir || got.State.MemoryBudget != 1<<30 || got.Admin.Addr != "127.0.0.1:9999" || got.CheckpointInterval != time.Second || got.EventTime.Alignment != time.Minute {
		t.Errorf("loaded %+v from\n%s", got, c.YAML())
	}
}
