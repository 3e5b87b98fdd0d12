// Package kafka connects braid to Kafka with franz-go: client options from
// configuration, and creation and checking of the topics a job needs.
package kafka
