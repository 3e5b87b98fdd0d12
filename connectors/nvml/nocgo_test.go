//go:build !cgo

package nvml_test

import (
	"errors"
	"testing"

	"github.com/braidlabs/braid/connectors/nvml"
)

func TestOpenWithoutCgo(t *testing.T) {
	err := nvml.Open().Init()
	if !errors.Is(err, nvml.ErrNoCgo) || nvml.Retryable(err) {
		t.Fatalf("got %v, want ErrNoCgo, not retryable", err)
	}
	if err.Error() != "nvml: built without cgo: NVML unavailable" {
		t.Errorf("message %q", err)
	}
}
