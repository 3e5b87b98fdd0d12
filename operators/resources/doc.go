// Package resources is the resources stage: metric points that belong to a
// resource rather than a trace (no exemplar) become per-resource time series
// in a global table that every instance reads, and fuse attaches to each
// request the values in force during it.
//
// Ingest (operators/fuse) translates each point's name into braid's
// vocabulary (semconv.NormalizeMetric; unknown names are counted, not
// kept), takes the resource identity from the resource and the point's
// labels (semconv.IdentityOf) and writes samples, grouped per identity, to
// the table's topic (Config.ResourcesTopic, default <group>.resources) in
// its checkpoint's transaction. The engine reads the topic whole on every
// instance (engine.Global) into a Table. The table's watermark comes from
// the tasks' markers on the topic (engine.GlobalWatermark): fuse emits a
// trace only once the table's watermark has passed the trace's end, so the
// values attached do not depend on how far the reader happened to be.
//
// A request matches a series by semconv.Identity.Matches (host, instance,
// model, GPU). For each matching series the request gets a
// braidpb.SeriesWindow over [root span start, root span end]: the value in
// force at start, at end, the minimum and maximum, the increase for
// counters and the number of samples.
//
// Samples older than the table's watermark minus Retain are dropped, except
// the last one of each series (still in force); a series with no sample
// since then (its pod, GPU or server is gone) is removed (Table.Removed),
// so that churn does not grow the table. Limits (MaxSeries, MaxTableBytes)
// bound it whatever the input: past them the series updated least recently
// go (Table.Evicted). Identities and metric names are repaired to valid
// UTF-8 before they reach a record.
package resources
