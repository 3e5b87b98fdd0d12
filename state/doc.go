// Package state is braid's keyed state: one Pebble keyspace per task (stage ×
// partition), written through a batch that becomes durable only at a
// checkpoint, together with the input offsets it reflects.
//
// All keyspaces of one process share one block cache, sized from the memory
// budget, so caches and Pebble live within one figure.
package state
