// Package kafkatest holds helpers for integration tests that need a real
// Kafka broker.
//
// The broker is not started here: deploy/local/kafka.sh starts a single-node
// Apache Kafka (KRaft, broker and controller in one process, transactions and
// both consumer group protocols enabled) and `make test` runs the tests with
// BRAID_KAFKA_BROKERS pointing at it. To run integration tests by hand:
//
//	deploy/local/kafka.sh start
//	eval "$(deploy/local/kafka.sh env)"
//	go test ./connectors/kafka/...
//	deploy/local/kafka.sh stop
//
// A test calls [Brokers] first: without BRAID_KAFKA_BROKERS it is skipped, or
// fails when the environment variable CI is set, so that CI never passes by
// skipping every integration test. [NewTopics] makes topics with unique names
// (tests share one broker and may run in parallel) and deletes them when the
// test ends; [Client] makes a client that is closed when the test ends.
//
// The broker has auto.create.topics.enable=false: create every topic a test
// uses with [NewTopics].
//
// The same broker has authenticated listeners (unless started with
// BRAID_KAFKA_SECURITY=none): [SASLBrokers] gives the SASL_PLAINTEXT one and
// [SASLSSLBrokers] the SASL_SSL one with the test CA's PEM file, skipping or
// failing (in CI) like [Brokers] when `kafka.sh env` did not set them. Their
// user is [SASLUser] with [SASLPassword] for PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512.
package kafkatest
