package job

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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

// TestReadmeConfigStatesTheDefaults: every field of the README's
// configuration example that is not one of a deployment's own choices
// (brokers, replication, instance id, state directory) holds its default,
// so that the example is also the table of defaults. It is loaded beside a
// file with only those choices, and what the two make of the engine, the
// stages and the state store, with every default filled in, must agree
// field by field.
func TestReadmeConfigStatesTheDefaults(t *testing.T) {
	dir := t.TempDir()
	load := func(name, yaml string) *Config {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}
	readme := load("readme.yaml", readmeYAML(t, "## Configuration"))
	own := load("own.yaml", `kafka: {brokers: [kafka-0:9092, kafka-1:9092], replication: 3}
instance_id: braid-0
state: {dir: /var/lib/braid}
`)
	effective := func(c *Config) map[string]any {
		ec := c.EngineConfig(c.Budget())
		ec.ClientOpts = nil // functions, from the same kafka section
		ec.EnsureDefaults()
		fc := c.FuseConfig(4)
		fc.EnsureDefaults()
		m := map[string]any{"engine": ec, "fuse": fc, "state": c.StateOptions("", 4, nil), "budget": c.Budget()}
		if fc.Alerts != nil {
			m["alerts"] = fc.Alerts.Config()
		}
		if fc.Sampling != nil {
			m["sampling"] = fc.Sampling.Config()
		}
		return m
	}
	r, o := effective(readme), effective(own)
	for _, k := range []string{"engine", "fuse", "state", "budget", "alerts", "sampling"} {
		if (r[k] == nil) != (o[k] == nil) {
			t.Errorf("README turns %s %s", k, map[bool]string{true: "off", false: "on"}[r[k] == nil])
			continue
		}
		if r[k] == nil {
			continue
		}
		for _, d := range diffFields(reflect.ValueOf(r[k]), reflect.ValueOf(o[k]), k, 0) {
			t.Errorf("README gives %s", d)
		}
	}
}

// diffFields lists the exported fields where a and b differ, as "path = a,
// the default b"; functions are not compared.
func diffFields(a, b reflect.Value, path string, depth int) []string {
	switch {
	case a.Kind() == reflect.Func || depth > 8:
		return nil
	case a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil():
		return diffFields(a.Elem(), b.Elem(), path, depth+1)
	case a.Kind() == reflect.Struct:
		var out []string
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() {
				out = append(out, diffFields(a.Field(i), b.Field(i), path+"."+f.Name, depth+1)...)
			}
		}
		return out
	case a.Kind() == reflect.Slice && a.Len() == b.Len() && a.Type().Elem().Kind() == reflect.Struct:
		var out []string
		for i := range a.Len() {
			out = append(out, diffFields(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1)...)
		}
		return out
	}
	if !a.CanInterface() || reflect.DeepEqual(a.Interface(), b.Interface()) {
		return nil
	}
	if k := a.Kind(); (k == reflect.Slice || k == reflect.Map) && a.Len() == 0 && b.Len() == 0 {
		return nil // nil and empty: the same setting
	}
	return []string{fmt.Sprintf("%s = %v, the default %v", path, a.Interface(), b.Interface())}
}
