package job

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/braidlabs/braid/operators/fuse"
)

// TestExampleLocalConfig: examples/local.yaml is a valid configuration,
// every field known, for the plain PLAINTEXT listener of
// deploy/local/kafka.sh (the address its env command prints by default),
// without TLS or SASL, and the job's stage accepts it.
func TestExampleLocalConfig(t *testing.T) {
	for _, env := range []string{"BRAID_KAFKA_BROKERS", "BRAID_GROUP", "BRAID_INSTANCE_ID", "BRAID_STATE_DIR", "BRAID_KAFKA_SASL_USERNAME", "BRAID_KAFKA_SASL_PASSWORD"} {
		t.Setenv(env, "")
	}
	c, err := LoadConfig("../../../examples/local.yaml")
	if err != nil {
		t.Fatalf("examples/local.yaml: %v", err)
	}
	script, err := os.ReadFile("../../../deploy/local/kafka.sh")
	if err != nil {
		t.Fatal(err)
	}
	host := regexp.MustCompile(`(?m)^HOST=(\S+)$`).FindSubmatch(script)
	port := regexp.MustCompile(`(?m)^PORT=\$\{BRAID_KAFKA_PORT:-(\d+)\}$`).FindSubmatch(script)
	if host == nil || port == nil {
		t.Fatal("deploy/local/kafka.sh: no HOST= or PORT=${BRAID_KAFKA_PORT:-N} line")
	}
	if want := []string{string(host[1]) + ":" + string(port[1])}; !slices.Equal(c.Kafka.Brokers, want) {
		t.Errorf("kafka.brokers %v, want kafka.sh's PLAINTEXT listener %v", c.Kafka.Brokers, want)
	}
	if c.Kafka.TLS.Enabled || c.Kafka.SASL.Mechanism != "" {
		t.Errorf("examples/local.yaml sets TLS %+v or SASL %v: the local listener is plain", c.Kafka.TLS, c.Kafka.SASL)
	}
	// examples/localfeed writes otlp_proto.
	for _, in := range []InputConfig{c.Inputs.Spans, c.Inputs.Logs, c.Inputs.Metrics} {
		if in.Encoding != "otlp_proto" {
			t.Errorf("input %s: encoding %s, want otlp_proto", in.Topic, in.Encoding)
		}
	}
	if err := c.Kafka.Prepare(); err != nil {
		t.Fatal(err)
	}
	if _, err := fuse.New(c.FuseConfig(4)); err != nil {
		t.Errorf("fuse stage: %v", err)
	}
}
