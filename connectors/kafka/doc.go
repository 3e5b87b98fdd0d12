// Package kafka connects braid to Kafka with franz-go: client options from
// configuration (TLS, mutual TLS and SASL PLAIN / SCRAM-SHA-256 /
// SCRAM-SHA-512 included), and creation and checking of the topics a job
// needs.
//
// A program loads a [Config], applies the environment ([Config.ApplyEnv]),
// fills defaults, validates, then calls [Config.Prepare] once, which reads
// the certificate, key and password files, before it makes clients from
// [Config.Opts].
package kafka
