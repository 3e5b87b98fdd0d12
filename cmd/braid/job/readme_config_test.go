package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeConfigLoads: the configuration example in README.md is a valid
// configuration, every field known.
func TestReadmeConfigLoads(t *testing.T) {
	block := readmeYAML(t, "## Configuration")
	path := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("README configuration: %v", err)
	}
	if c.requestIDs == nil {
		t.Fatal("request id rules not compiled")
	}
	if id, ok := c.requestIDs.FromText([]byte("Receive: obj=GenerateReqInput(rid='3f2a9c')")); !ok || id != "3f2a9c" {
		t.Errorf("README rules find %q %v in an SGLang line", id, ok)
	}
}

// TestReadmeSamplingLoads: the sampling example of README.md is a valid
// sampling section.
func TestReadmeSamplingLoads(t *testing.T) {
	block := readmeYAML(t, "## Sampling for trace stores")
	path := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(path, []byte("kafka: {brokers: [kafka-0:9092]}\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("README sampling example: %v", err)
	}
	if st := c.samplingStage(1 << 20); !c.Sampling.Enabled || st == nil || len(st.Config().Tenants) != 3 || len(st.Config().Keep) != 4 {
		t.Fatalf("README sampling example: %+v", c.Sampling)
	}
}

// readmeYAML returns the first yaml block of README.md's section heading.
func readmeYAML(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), heading)
	if !ok {
		t.Fatalf("README.md has no %q section", heading)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatalf("no yaml block in README.md's %q section", heading)
	}
	block, _, _ := strings.Cut(rest, "```")
	return block
}
