//go:build !cgo

package state

// PebbleOffHeap reports whether Pebble allocates its block cache and its
// memtables outside the Go heap: built without cgo, they are Go memory.
const PebbleOffHeap = false
