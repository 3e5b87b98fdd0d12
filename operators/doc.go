// Package operators holds braid's correlation logic. Each stage is a
// subpackage: fuse (ingest + trace-keyed fusion) for now; resolve, kvgraph and
// alerts follow the same shape — an engine.Processor per task, state in the
// task's keyspace, outputs emitted through the task.
package operators
