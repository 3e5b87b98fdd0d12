// Package alertmanager delivers braid's alert state changes to Prometheus
// Alertmanager through its v2 API (POST /api/v2/alerts), the way Prometheus
// itself does.
//
// A [Sink] keeps the latest state of each alert episode, keyed by
// [Alert.Key]. [Sink.Update] records a change; [Sink.Run] posts changes at
// once and re-sends every firing alert every [Config.ResendInterval] with
// endsAt = now + 4 × ResendInterval, so that Alertmanager never resolves a
// firing alert by timeout while braid runs, and does resolve it within
// four intervals after braid stops sending. A resolved alert is sent with
// its end time and then forgotten once every Alertmanager took it.
//
// Every configured Alertmanager gets every alert (they are peers of one
// cluster, or independent instances; they deduplicate notifications among
// themselves). Each has its own delivery state: a failed post is retried
// with jittered exponential backoff without holding up the others.
//
// Re-posting an alert that Alertmanager already has — the same labels, so
// the same fingerprint, and the same startsAt — updates its end time and
// does not notify again: Alertmanager's notification log remembers which
// alerts of a group it notified. This is what makes a braid restart, which
// re-sends every firing alert, safe.
//
// The Sink's memory is bounded by [Config.MaxAlerts]; when it is full, the
// oldest resolved alert not yet delivered is dropped (and counted) to make
// room, or, when every alert is firing, the new one is refused.
package alertmanager
