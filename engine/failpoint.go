//go:build !failpoints

package engine

import "context"

// failpoint marks a point in the checkpoint protocol where crash tests kill
// the process. Without the failpoints build tag it compiles to nothing.
func failpoint(string) {}

// failpointHold marks a point where crash tests hold the loop (see
// failpoint_on.go). Without the failpoints build tag it compiles to nothing.
func failpointHold(context.Context, string) {}
