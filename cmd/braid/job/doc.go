// Package job wires a braid job from its Config: Kafka topics, the fuse
// stage, state and the engine. The braid binary, the integration tests and
// the benchmarks all run the job through Run.
package job
