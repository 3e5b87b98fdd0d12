// Package windows holds braid's pure event-time math: watermarks over a set
// of inputs with bounded out-of-orderness and idleness, and the lateness rule.
// It depends on the standard library only and never reads a clock itself:
// callers pass the processing time in, so every function is deterministic.
package windows
