package admin

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/operators/llmmetrics"
)

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	// Engine is read at every scrape. Required.
	Engine EngineView
	// Counters returns the fuse stage's counters; read at every scrape.
	// Optional: without it the stage's metrics are not exported.
	Counters func() Counters
	// Lag is the consumer lag, refreshed elsewhere. Optional: without it
	// braid_consumer_lag_records is not exported.
	Lag LagView
	// Now is the clock for braid_watermark_lag_seconds. Default time.Now.
	Now func() time.Time
	// LLM is the fuse stage's derived LLM metrics, read at every scrape
	// (see LLMCollector). Optional: without it those metrics are not
	// exported. With it, braid_pollution_incidents_total is exported by
	// pattern from the Recorder (llmmetrics.Recorder.ObserveIncident)
	// instead of the unlabelled Counters.Incidents.
	LLM *llmmetrics.Recorder
}

// Collector is a prometheus.Collector that reads the engine, the stage's
// counters and the consumer lag at scrape time. Create with NewCollector and
// register it on the job's registry. Safe for concurrent scrapes.
type Collector struct {
	cfg CollectorConfig
	llm *LLMCollector // nil without CollectorConfig.LLM
}

// NewCollector validates cfg.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	if cfg.Engine == nil {
		return nil, errors.New("admin: CollectorConfig.Engine is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Collector{cfg: cfg}
	if cfg.LLM != nil {
		c.llm = NewLLMCollector(cfg.LLM)
	}
	return c, nil
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics the Collector exports.
var (
	descConsumerLag = desc("braid_consumer_lag_records",
		"Records between the job's committed offset and the end offset (high watermark) of a source topic partition, "+
			"as of the last background refresh (every 10s by default; see braid_consumer_lag_refreshed_unix_seconds).",
		"topic", "partition")
	descLagRefreshed = desc("braid_consumer_lag_refreshed_unix_seconds",
		"Unix time, in seconds, of the last successful refresh of braid_consumer_lag_records.")
	descWatermarkLag = desc("braid_watermark_lag_seconds",
		"Seconds between now (processing time) and the task's event-time watermark; absent until the watermark is known.",
		"partition")
	descWatermark = desc("braid_watermark_unix_seconds",
		"The task's event-time watermark, unix seconds; absent until it is known.",
		"partition")
	descCheckpoints = desc("braid_checkpoints_total",
		"Checkpoints by outcome: committed, or aborted (the Kafka transaction aborted and state rolled back).",
		"outcome")
	descTasks = desc("braid_tasks",
		"Tasks open in this instance: one per assigned input partition.")
	descStateBytes = desc("braid_state_bytes",
		"Bytes on disk of the task's state keyspace at its last checkpoint.",
		"partition")
	descRecordsIn = desc("braid_engine_records_in_total",
		"Kafka records polled by the engine from every input topic, the repartition topic included.")
	descRecordsOut = desc("braid_engine_records_out_total",
		"Kafka records produced by the engine to every output topic, the repartition topic and watermark markers included.")

	descMessages = desc("braid_input_messages_total",
		"OTLP messages read from the source topics (spans, logs, metrics).")
	descMembers = desc("braid_members_total",
		"Members (spans, log records, metric points) cut from decoded messages.")
	descLocal = desc("braid_local_groups_total",
		"Trace groups fused by the task that read them (fast path).")
	descRepartitioned = desc("braid_repartitioned_groups_total",
		"Trace groups sent through the repartition topic to the task that owns their trace.")
	descFused = desc("braid_fused_records_total",
		"Fused records emitted, every revision.")
	descRevisions = desc("braid_fused_revisions_total",
		"Fused records emitted again with revision > 0 because late members arrived.")
	descTags = desc("braid_incident_tags_total",
		"Incident tags sent to the traces of the requests an incident names as polluted; a tag that reaches its trace after it was emitted revises it.")
	descTagsLate = desc("braid_incident_tags_late_total",
		"Incident tags that reached their trace after it was purged (past allowed_lateness after its end): dropped, counted here.")
	descIdleFlushed = desc("braid_idle_flushed_traces_total",
		"Traces emitted by the processing-time flush (flush_after without input) before event time closed them; more members or the close in event time revise them.")
	descLate = desc("braid_late_members_total",
		"Members sent to the late topic: further behind the watermark than allowed_lateness, for a trace already emitted and purged "+
			"(within closed_retention), without a declared request id, or too far in the future.")
	descDLQ = desc("braid_dlq_messages_total",
		"Input messages sent unchanged to the dead-letter topic because they could not be decoded.")
	descUnjoined = desc("braid_unjoined_members_total",
		"Members that cannot join a trace: log records without a trace id, metric points without exemplar trace ids.",
		"signal")
	descTruncated = desc("braid_truncated_members_total",
		"Members cut by a per-trace cap (caps.spans, caps.logs, caps.points, caps.bytes).")
	descOpenTraces = desc("braid_open_traces",
		"Traces open in state, not yet past the watermark plus idle_gap and allowed_lateness.")
	descDeclared = desc("braid_request_ids_declared_total",
		"Request ids declared by spans (gen_ai.request.id, rid, request_id) to the resolve stage.")
	descResolved = desc("braid_resolved_logs_total",
		"Log records without a trace id joined to a trace through their request id.")
	descUnresolved = desc("braid_unresolved_logs_total",
		"Log records whose request id no span declared within allowed_lateness; sent to the late topic.")
	descOpenRequests = desc("braid_open_requests",
		"Request ids held by the resolve stage (declared, or with logs waiting for a span).")
	descResourcePoints = desc("braid_resource_points_total",
		"Metric points without an exemplar written to the resources table.")
	descResourceSamples = desc("braid_resource_table_samples_total",
		"Samples applied to this instance's copy of the resources table.")
	descResourceSeries = desc("braid_resource_table_series",
		"Series in this instance's copy of the resources table.")
	descKVEvents = desc("braid_kv_events_total",
		"KV-block events, compute-sanitizer and Xid lines routed to the kvgraph stage.")
	descPollutionEdges = desc("braid_pollution_edges_total",
		"KV-cache pollution-graph edges emitted to the pollution topic.")
	descIncidents = desc("braid_pollution_incidents_total",
		"KV-cache pollution incidents opened (root causes found).")
	descPolluted = desc("braid_polluted_requests_total",
		"Requests found polluted by a KV-cache incident, directly or through the prefix cache.")
	descKVRestarts = desc("braid_kv_server_restarts_total",
		"Server restarts seen in KV-block events (a GPU's service.instance.id changed): the GPU's pool starts afresh.")
	descUnrelatedLines = desc("braid_kv_unrelated_lines_total",
		"Compute-sanitizer and Xid lines attached to no incident: Xids that are no memory fault, racecheck reports, host lines naming no GPU braid can place.")
	descMemory = desc("braid_memory_bytes",
		"Estimated bytes held by each share of state.memory_budget: the stages' shares (open_traces, closed_traces, waiting_logs, kv_buffer, kv_state, resources) "+
			"and the engine's (fetched: polled records not yet processed; pending_state: state writes waiting for the checkpoint).",
		"share")
	descEvictions = desc("braid_evictions_total",
		"What a full share of state.memory_budget pushed out: open traces emitted early, closed-trace tombstones forgotten early, waiting logs sent to the late topic, "+
			"KV events moved wholly to state (kv_buffer: their places too), detector blocks/requests/incidents forgotten, resource series removed.",
		"share")
	descDropped = desc("braid_dropped_total",
		"Records or items dropped by policy, by reason (errors.<stage>: skip, items cut to fit limits.max_message_bytes).",
		"reason")
	descFuture = desc("braid_future_members_total",
		"Members whose event time was further ahead of their Kafka record timestamp than event_time.max_clock_skew (late or re-stamped).")
	descRepaired = desc("braid_repaired_utf8_members_total",
		"Members whose strings held invalid UTF-8, repaired (U+FFFD) before output.")
	descBackpressure = desc("braid_backpressure_total",
		"Polls held back because the records fetched and not yet processed filled their share of the memory budget.")
	descEarlyCheckpoints = desc("braid_early_checkpoints_total",
		"Checkpoints brought forward because the state writes waiting for the checkpoint filled their share of the memory budget.")
	descPendingPeak = desc("braid_pending_state_peak_bytes",
		"The largest state writes waiting for a checkpoint that any barrier found since the start: what the share state writes before checkpoint bounds, "+
			"plus at most what one poll added.")
	descFollowUpCheckpoints = desc("braid_followup_checkpoints_total",
		"Follow-up checkpoints: run, while live, as soon as the tasks had read the watermark markers the previous checkpoint committed, "+
			"to commit what those markers released (counted in braid_checkpoints_total too).")
	descRequestedCheckpoints = desc("braid_requested_checkpoints_total",
		"Checkpoints run before the regular schedule because a task asked for one: live KV-block events waiting for every task's commit "+
			"(counted in braid_checkpoints_total too).")
	descClamped = desc("braid_clamped_event_times_total",
		"Event times the engine lowered to the record timestamp plus event_time.max_clock_skew before they reached a watermark.")
	descTimers = desc("braid_timers_pending",
		"Event-time timers pending. Every open trace has exactly one, so this is the same counter as braid_open_traces.")
)

// Describe sends the descriptors of every metric the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descConsumerLag, descLagRefreshed, descWatermarkLag, descWatermark, descCheckpoints, descTasks,
		descStateBytes, descRecordsIn, descRecordsOut,
		descMessages, descMembers, descLocal, descRepartitioned, descFused, descRevisions, descTags, descTagsLate, descIdleFlushed, descLate, descDLQ,
		descUnjoined, descTruncated, descOpenTraces, descTimers,
		descDeclared, descResolved, descUnresolved, descOpenRequests, descResourcePoints, descResourceSamples, descResourceSeries,
		descKVEvents, descPollutionEdges, descPolluted, descKVRestarts, descUnrelatedLines,
		descMemory, descEvictions, descDropped, descFuture, descRepaired, descBackpressure, descEarlyCheckpoints, descPendingPeak, descFollowUpCheckpoints, descRequestedCheckpoints, descClamped,
	} {
		ch <- d
	}
	if c.llm != nil {
		c.llm.Describe(ch) // braid_pollution_incidents_total by pattern among them
	} else {
		ch <- descIncidents
	}
}

// Collect reads the views and sends the current values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.llm != nil {
		c.llm.Collect(ch)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	st := c.cfg.Engine.Stats()
	counter(descRecordsIn, st.RecordsIn.Load())
	counter(descRecordsOut, st.RecordsOut.Load())
	counter(descCheckpoints, st.Checkpoints.Load(), "committed")
	counter(descCheckpoints, st.Aborts.Load(), "aborted")
	counter(descBackpressure, st.Backpressure.Load())
	counter(descEarlyCheckpoints, st.EarlyCheckpoints.Load())
	counter(descFollowUpCheckpoints, st.FollowUpCheckpoints.Load())
	counter(descRequestedCheckpoints, st.RequestedCheckpoints.Load())
	gauge(descPendingPeak, float64(st.PendingStatePeak.Load()))
	counter(descClamped, st.ClampedEvents.Load())
	if m, ok := c.cfg.Engine.(interface {
		Memory() (fetched, pendingState int64)
	}); ok {
		fetched, pending := m.Memory()
		gauge(descMemory, float64(fetched), "fetched")
		gauge(descMemory, float64(pending), "pending_state")
	}

	tasks := c.cfg.Engine.Tasks()
	gauge(descTasks, float64(len(tasks)))
	now := c.cfg.Now()
	for _, t := range tasks {
		p := strconv.Itoa(int(t.Partition))
		gauge(descStateBytes, float64(t.StateBytes), p)
		if t.Watermark == math.MinInt64 {
			continue
		}
		gauge(descWatermark, float64(t.Watermark)/1e9, p)
		gauge(descWatermarkLag, float64(now.UnixNano())/1e9-float64(t.Watermark)/1e9, p)
	}

	if c.cfg.Lag != nil {
		lags, at := c.cfg.Lag.Lags()
		if !at.IsZero() {
			gauge(descLagRefreshed, float64(at.UnixNano())/1e9)
		}
		for _, l := range lags {
			gauge(descConsumerLag, float64(l.Records), l.Topic, strconv.Itoa(int(l.Partition)))
		}
	}

	if c.cfg.Counters != nil {
		k := c.cfg.Counters()
		counter(descMessages, k.Messages)
		counter(descMembers, k.Members)
		counter(descLocal, k.Local)
		counter(descRepartitioned, k.Repartitioned)
		counter(descFused, k.Fused)
		counter(descRevisions, k.Revisions)
		counter(descTags, k.IncidentTags)
		counter(descTagsLate, k.TagsLate)
		counter(descIdleFlushed, k.IdleFlushed)
		counter(descLate, k.Late)
		counter(descDLQ, k.DLQ)
		counter(descUnjoined, k.UnjoinedLogs, "logs")
		counter(descUnjoined, k.UnjoinedPoints, "metrics")
		counter(descTruncated, k.Truncated)
		gauge(descOpenTraces, float64(k.OpenTraces))
		gauge(descTimers, float64(k.OpenTraces))
		counter(descDeclared, k.Declared)
		counter(descResolved, k.Resolved)
		counter(descUnresolved, k.Unresolved)
		gauge(descOpenRequests, float64(k.OpenRequests))
		counter(descResourcePoints, k.ResourcePoints)
		counter(descResourceSamples, k.ResourceSamples)
		gauge(descResourceSeries, float64(k.ResourceSeries))
		counter(descKVEvents, k.KVEvents)
		counter(descPollutionEdges, k.PollutionEdges)
		if c.llm == nil {
			counter(descIncidents, k.Incidents)
		}
		counter(descPolluted, k.PollutedRequests)
		counter(descKVRestarts, k.KVRestarts)
		counter(descUnrelatedLines, k.UnrelatedLines)
		counter(descFuture, k.Future)
		counter(descRepaired, k.RepairedUTF8)
		for _, share := range slices.Sorted(maps.Keys(k.MemoryBytes)) {
			gauge(descMemory, float64(k.MemoryBytes[share]), share)
		}
		for _, share := range slices.Sorted(maps.Keys(k.Evictions)) {
			counter(descEvictions, k.Evictions[share], share)
		}
		for _, reason := range slices.Sorted(maps.Keys(k.Dropped)) {
			counter(descDropped, k.Dropped[reason], reason)
		}
	}
}
