// Package deploy holds no code: its tests check the deployment files beside
// it.
//
//   - k8s/: the Kubernetes manifests of braid (StatefulSet, headless Service,
//     PodDisruptionBudget, ConfigMap with braid.yaml, an example Secret, a
//     KEDA ScaledObject or a plain HPA on consumer lag, tied together by
//     kustomization.yaml). The tests validate every object against the
//     Kubernetes JSON schemas with kubernetes-validate (strict: unknown
//     fields are errors) for Kubernetes 1.30 and the newest version it
//     bundles, the KEDA objects with the validators of the npm package
//     @kubernetes-models/keda (generated from KEDA's API types) plus a strict
//     decoding of the fields used, load the ConfigMap's braid.yaml with
//     braid's own loader, and check that the files agree with each other
//     (ports, paths, topic, group, brokers, Secret keys, replica bounds).
//   - collector/: an OpenTelemetry Collector configuration whose Kafka
//     exporter writes what braid reads; the tests parse it and check the
//     exporter's settings.
//   - local/: kafka.sh, the real single-node Kafka broker of the integration
//     tests; prometheus.sh, a real Prometheus (exemplar storage on) that
//     scrapes braid's /metrics every second.
//   - grafana/: braid-llm.json, a Grafana dashboard of braid's LLM metrics,
//     KV-cache gauges, own throughput and lag and its Alertmanager alerts;
//     connectors/admin tests it against the metrics braid exports, and its
//     Prometheus integration test runs every expression of it.
//   - local/alertmanager.sh: a real Prometheus Alertmanager with one webhook
//     receiver, for the tests of connectors/alertmanager.
//   - local/otelcol.sh: a real OpenTelemetry Collector (Kafka receiver in,
//     file exporter out) built with the Collector builder from
//     local/otelcol-builder.yaml and cached, for connectors/otelcoltest.
//
// The validators are installed on first use into the cache
// ($BRAID_CACHE_DIR, default ~/.cache/braid) from PyPI and npm, pinned.
// Where they cannot be installed the tests that need them fail when CI is
// set and are skipped otherwise, saying why.
package deploy
