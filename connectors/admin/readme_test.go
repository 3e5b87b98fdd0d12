package admin

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braidlabs/braid/operators/fuse"
)

// TestREADMEListsEveryMetric: every figure of the job's table (engine and
// stages, the resources table on) is named in the README, so that the
// docs cannot fall behind the table.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	st, err := fuse.New(fuse.Config{Partitions: 1, IdleGap: time.Second, AllowedLateness: 10 * time.Second,
		ResourcesTopic: "braid.resources", ResourceIdleness: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eng := &fakeEngine{}
	tb := append(StageMetrics(st), EngineMetrics(eng)...)
	if err := tb.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, name := range tb.Names() {
		if !strings.Contains(string(readme), "`"+name) {
			t.Errorf("README.md does not name %s", name)
		}
	}
}
