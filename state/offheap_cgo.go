//go:build cgo

package state

// PebbleOffHeap reports whether Pebble allocates its block cache and its
// memtables outside the Go heap: built with cgo, it takes them from the C
// allocator, where the Go runtime's memory limit does not see them.
const PebbleOffHeap = true
