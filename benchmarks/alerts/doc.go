// Package alerts measures the alerts stage's quantile sketches against
// exact quantiles on the end-to-end benchmark's workload (see
// benchmarks/README.md, "Alerts"). It holds tests only.
package alerts
