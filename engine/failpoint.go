//go:build !failpoints

package engine

// failpoint marks a point in the checkpoint protocol where crash tests kill
// the process. Without the failpoints build tag it compiles to nothing.
func failpoint(string) {}
