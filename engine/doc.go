// Package engine is braid's runtime: it runs a Topology of co-partitioned
// Kafka inputs as one task per partition number, each task on its own
// goroutine with its own state, watermarks and timers, and makes progress
// durable at checkpoints in Kafka transactions.
//
// # Tasks
//
// Task p reads partition p of every input topic. The group assignment hands
// out partitions; a task exists while any of its partitions is assigned.
// Records reach a task through a bounded channel, and the records queued
// for all tasks are bounded in bytes (Config.FetchBufferBytes), so a slow
// task slows polling instead of growing memory. A newly assigned task is
// opened — its state checked against the committed offsets, rebuilt from
// the changelog if needed — on a goroutine of its own while fetching its
// partitions is paused; the other tasks go on meanwhile.
//
// # Size limits
//
// No record braid writes exceeds Config.MaxRecordBytes: state values are
// cut into chunks in the changelog and joined on restore; for their own
// records processors use Chunks, Task.EmitChunks and Reassembler. Any other
// record over the limit fails the checkpoint, and the Harness returns
// ErrRecordTooLarge, as the broker would refuse it.
//
// # Checkpoints
//
// Every CheckpointInterval the poll loop stops dispatching and sends a
// barrier to every task. Each task drains its queue, lets its processor write
// in-memory state into its keyspace batch (Checkpointer), and sends its
// watermark to every partition of the internal topics as a marker record.
// Then the loop ends the Kafka transaction: outputs, markers and input
// offsets commit together, or abort together. After a commit each task
// checkpoints its keyspace with the offsets; after an abort each task rolls
// its keyspace back and its processor reloads (Restorer), and the consumer
// rewinds to the committed offsets.
//
// # Watermarks
//
// A task's watermark is the minimum over its source partitions (largest event
// time minus the out-of-orderness bound) and over the upstream tasks whose
// markers it reads on internal topics; idle inputs do not hold it back (see
// windows.Watermarks). A source partition the task has read to its end (the
// last stable offset the brokers report) is idle after
// Config.CaughtUpIdleness without a record, any other after Config.Idleness
// (Task.CaughtUp). Markers are records with a null key, an empty value
// and the header braid.wm. Event time is held to the record clock: no
// watermark moves past the largest Kafka record timestamp seen plus
// Config.MaxClockSkew (see Task.Observe).
//
// # Lock order
//
// The engine has one mutex, Engine.mu, guarding the task table; it is never
// held while a task runs or while waiting on a task.
package engine
