// Package otelcoltest runs a real OpenTelemetry Collector for integration
// tests: a Kafka receiver reading OTLP protobuf from the test's topics and
// file exporters writing what it read as OTLP JSON, which [Collector.Traces]
// and [Collector.Logs] decode into the OTLP proto types
// (go.opentelemetry.io/proto/otlp). With it a test checks that what braid
// writes to Kafka is what a real Collector reads, or feeds braid records a
// real Collector has seen.
//
// The Collector is deploy/local/otelcol.sh's: a distribution built with the
// Collector builder from deploy/local/otelcol-builder.yaml (the contrib
// kafkareceiver and fileexporter v0.165.1, with groupbytrace and the Kafka
// exporter for the e2e benchmark) on first use and cached under
// $BRAID_CACHE_DIR. The first build takes minutes (the module proxy, then
// a large compile); later ones nothing.
//
//	deploy/local/kafka.sh start
//	eval "$(deploy/local/kafka.sh env)"
//	go test ./connectors/otelcoltest
//
// [Start] needs the broker of [kafkatest.Brokers] unless [Options.Brokers]
// names one: without it the test is skipped, or fails when CI is set. When
// the Collector cannot be built (no module proxy, no Go) the test fails in
// CI and is skipped elsewhere, with the tail of the build log; a Collector
// that does not start fails the test.
//
// Only tests import this package.
package otelcoltest
