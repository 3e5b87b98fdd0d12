package arrowexport

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/braidlabs/braid/operators/braidpb"
)

// needPyArrow returns the python3 to run, installing pyarrow with pip when
// it is missing. Where that is impossible (no python3, no network) the test
// fails if the environment variable CI is set, and is skipped otherwise.
func needPyArrow(t *testing.T) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("pyarrow is required when CI is set: "+format, args...)
		}
		t.Skipf("pyarrow unavailable: "+format, args...)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		unavailable("python3 not found: %v", err)
	}
	if exec.Command(py, "-c", "import pyarrow").Run() == nil {
		return py
	}
	t.Logf("installing pyarrow: %s -m pip install --quiet pyarrow", py)
	out, err := exec.Command(py, "-m", "pip", "install", "--quiet", "pyarrow").CombinedOutput()
	if err != nil {
		unavailable("pip install pyarrow failed (no network?): %v\n%s", err, out)
	}
	if out, err := exec.Command(py, "-c", "import pyarrow").CombinedOutput(); err != nil {
		unavailable("import pyarrow still fails after pip install: %v\n%s", err, out)
	}
	return py
}

// TestPyArrow writes an Arrow and a Parquet file (and an empty one of
// each) and checks them with pyarrow in testdata/check.py.
func TestPyArrow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3")
	}
	py := needPyArrow(t)
	dir := t.TempDir()
	var traces []*braidpb.FusedTrace
	for i := 0; i < 20; i++ {
		traces = append(traces, sampleTrace(i, 1+i%6))
	}
	traces = append(traces, oddTrace())
	paths := map[string][]*braidpb.FusedTrace{
		"fused.arrow": traces, "fused.parquet": traces,
		"empty.feather": nil, "empty.parquet": nil,
	}
	for name, trs := range paths {
		f, err := FormatForPath(name)
		if err != nil {
			t.Fatal(err)
		}
		// Batches of 8 rows: several record batches / row groups.
		if err := os.WriteFile(filepath.Join(dir, name), writeAll(t, f, 8, trs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, filepath.Join("testdata", "check.py"),
		filepath.Join(dir, "fused.arrow"), filepath.Join(dir, "fused.parquet"),
		filepath.Join(dir, "empty.feather"), filepath.Join(dir, "empty.parquet"),
		strconv.Itoa(len(traces)), hex.EncodeToString(traces[0].GetTraceId()))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil || strings.TrimSpace(stdout.String()) != "ok" {
		t.Fatalf("check.py: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}
