package admin

import "github.com/braidlabs/braid/operators/fuse"

// StageMetrics is the table of the stages' figures (see Table): what
// /metrics exports, and, under their log keys, what the job's counters
// line and the demo's progress line show. Stages the job does not run
// (alerts, sampling, the resources table) have no rows.
func StageMetrics(stage *fuse.Stage) Table {
	c, kc := stage.Counters(), stage.KVCounters()
	cfg := stage.Config()
	t := Table{
		{Name: "braid_input_messages_total", Log: "messages", Value: c.Messages.Load,
			Help: "OTLP messages read from the source topics (spans, logs, metrics)."},
		{Name: "braid_members_total", Log: "members", Value: c.Members.Load,
			Help: "Members (spans, log records, metric points) cut from decoded messages."},
		{Name: "braid_local_groups_total", Value: c.Local.Load,
			Help: "Trace groups fused by the task that read them (fast path)."},
		{Name: "braid_repartitioned_groups_total", Value: c.Repartitioned.Load,
			Help: "Trace groups sent through the repartition topic to the task that owns their trace."},
		{Name: "braid_fused_records_total", Log: "fused", Value: c.Fused.Load,
			Help: "Fused records emitted, every revision."},
		{Name: "braid_fused_revisions_total", Log: "revisions", Value: c.Revisions.Load,
			Help: "Fused records emitted again with revision > 0 because late members arrived."},
		{Name: "braid_incident_tags_total", Value: c.IncidentTags.Load,
			Help: "Incident tags sent to the traces of the requests an incident names as polluted; a tag that reaches its trace after it was emitted revises it."},
		{Name: "braid_incident_tags_late_total", Value: c.IncidentTagsLate.Load,
			Help: "Incident tags that reached their trace after it was purged (past allowed_lateness after its end): dropped, counted here."},
		{Name: "braid_idle_flushed_traces_total", Value: c.IdleFlushed.Load,
			Help: "Traces emitted by the processing-time flush (flush_after without input) before event time closed them; more members or the close in event time revise them."},
		{Name: "braid_unrevised_traces_total", Value: c.Unrevised.Load,
			Help: "Re-emissions not written because the record would say what the trace's last one said (a trace the processing-time flush emitted, closed in event time with nothing new)."},
		{Name: "braid_late_members_total", Log: "late", Value: c.Late.Load,
			Help: "Members sent to the late topic: further behind the watermark than allowed_lateness, for a trace already emitted and purged " +
				"(within closed_retention), without a declared request id, or too far in the future."},
		{Name: "braid_dlq_messages_total", Log: "dlq", Value: c.DLQ.Load,
			Help: "Input messages sent unchanged to the dead-letter topic because they could not be decoded."},
		{Name: "braid_unjoined_members_total", Label: "signal", LabelValue: "logs", Value: c.UnjoinedLogs.Load,
			Help: "Members that cannot join a trace: log records without a trace id, metric points without exemplar trace ids."},
		{Name: "braid_unjoined_members_total", Label: "signal", LabelValue: "metrics", Value: c.UnjoinedPoint.Load},
		{Name: "braid_truncated_members_total", Value: c.Truncated.Load,
			Help: "Members cut by a per-trace cap (caps.spans, caps.logs, caps.points, caps.bytes)."},
		{Name: "braid_future_members_total", Value: c.Future.Load,
			Help: "Members whose event time was further ahead of their Kafka record timestamp than event_time.max_clock_skew (late or re-stamped)."},
		{Name: "braid_repaired_utf8_members_total", Value: c.RepairedUTF8.Load,
			Help: "Members whose strings held invalid UTF-8, repaired (U+FFFD) before output."},
		{Name: "braid_trace_chunk_reads_total", Value: c.ChunkReads.Load,
			Help: "Chunks of open traces read back from state to emit them: their members left memory after a checkpoint wrote them (the open_traces share was full, a revision, a restart). Steady growth while traces are first emitted: the share is too small for the input rate."},
		{Name: "braid_open_traces", Gauge: true, Log: "open_traces", Value: c.OpenTraces.Load,
			Help: "Traces open in state, not yet past the watermark plus idle_gap and allowed_lateness."},
		{Name: "braid_timers_pending", Gauge: true, Value: c.OpenTraces.Load,
			Help: "Event-time timers pending. Every open trace has exactly one, so this is the same counter as braid_open_traces."},

		{Name: "braid_request_ids_declared_total", Value: c.Declared.Load,
			Help: "Request ids declared by spans (gen_ai.request.id, rid, request_id) to the resolve stage."},
		{Name: "braid_resolved_logs_total", Log: "resolved", Value: c.Resolved.Load,
			Help: "Log records without a trace id joined to a trace through their request id."},
		{Name: "braid_unresolved_logs_total", Log: "unresolved", Value: c.Unresolved.Load,
			Help: "Log records whose request id no span declared within allowed_lateness; sent to the late topic."},
		{Name: "braid_open_requests", Gauge: true, Value: c.OpenRequests.Load,
			Help: "Request ids held by the resolve stage (declared, or with logs waiting for a span)."},

		{Name: "braid_resource_points_total", Log: "resource_points", Value: c.ResourcePoint.Load,
			Help: "Metric points without an exemplar written to the resources table."},

		{Name: "braid_kv_events_total", Log: "kv_events", Value: c.KVLogs.Load,
			Help: "KV-block events, compute-sanitizer and Xid lines routed to the kvgraph stage."},
		{Name: "braid_kv_late_events_total", Log: "kv_late_events", Value: c.KVLateEvents.Load,
			Help: "KV-block events that arrived behind the watermark: handed to the detector at once, out of their order."},
		{Name: "braid_pollution_edges_total", Value: kc.Edges.Load,
			Help: "KV-cache pollution-graph edges emitted to the pollution topic."},
		{Name: "braid_polluted_requests_total", Value: kc.Polluted.Load,
			Help: "Requests found polluted by a KV-cache incident, directly or through the prefix cache."},
		{Name: "braid_kv_server_restarts_total", Value: kc.Restarts.Load,
			Help: "Server restarts seen in KV-block events (a GPU's service.instance.id changed): the GPU's pool starts afresh."},
		{Name: "braid_kv_unrelated_lines_total", Value: kc.Unrelated.Load,
			Help: "Compute-sanitizer and Xid lines attached to no incident: Xids that are no memory fault, racecheck reports, host lines naming no GPU braid can place."},
	}
	// With the LLM metrics, braid_pollution_incidents_total is theirs, by
	// pattern; the log line keeps the sum.
	incidents := Metric{Name: "braid_pollution_incidents_total", Log: "incidents", Value: kc.Incidents.Load,
		Help: "KV-cache pollution incidents opened (root causes found)."}
	if cfg.LLM != nil {
		incidents.Name, incidents.Help = "", ""
	}
	t = append(t, incidents)

	share := func(name string, gauge bool, value string, v func() int64) Metric {
		m := Metric{Name: name, Gauge: gauge, Label: "share", LabelValue: value, Value: v}
		if gauge {
			m.Help = MemoryHelp
		} else {
			m.Help = "What a full share of state.memory_budget pushed out: open traces emitted early, closed-trace tombstones forgotten early, waiting logs sent to the late topic, " +
				"KV events moved wholly to state (kv_buffer: their places too), detector blocks/requests/incidents forgotten, resource series removed, sampling windows forgotten."
		}
		return m
	}
	t = append(t,
		share("braid_memory_bytes", true, "open_traces", c.OpenTraceBytes.Load),
		share("braid_memory_bytes", true, "closed_traces", c.ClosedTraceBytes.Load),
		share("braid_memory_bytes", true, "waiting_logs", c.WaitingLogBytes.Load),
		share("braid_memory_bytes", true, "kv_buffer", kc.KVBufferBytes.Load),
		share("braid_memory_bytes", true, "kv_state", kc.StateBytes.Load),
		share("braid_evictions_total", false, "open_traces", c.Evicted.Load),
		share("braid_evictions_total", false, "closed_traces", c.ClosedEvicted.Load),
		share("braid_evictions_total", false, "waiting_logs", c.WaitingEvicted.Load),
		share("braid_evictions_total", false, "kv_buffer", c.KVShed.Load),
		share("braid_evictions_total", false, "kv_state", func() int64 {
			return kc.EvictedBlocks.Load() + kc.EvictedRequests.Load() + kc.EvictedIncidents.Load()
		}),

		Metric{Name: "braid_dropped_total", Label: "reason", LabelValue: "skip policy",
			Value: func() int64 { return c.Skipped.Load() + kc.Rejected.Load() - kc.DeadLettered.Load() },
			Help:  "Records or items dropped by policy, by reason (errors.<stage>: skip, items cut to fit limits.max_message_bytes)."},
		Metric{Name: "braid_dropped_total", Label: "reason", LabelValue: "derived fields that did not fit", Value: c.DerivedDropped.Load},
		Metric{Name: "braid_dropped_total", Label: "reason", LabelValue: "supporting lines over the incident caps", Value: kc.EvidenceDropped.Load},
		Metric{Name: "braid_dropped_total", Label: "reason", LabelValue: "unwritable kvgraph records", Value: kc.Unwritable.Load},
	)
	if tb := stage.Resources(); tb != nil {
		t = append(t,
			Metric{Name: "braid_resource_table_samples_total", Value: tb.Samples.Load,
				Help: "Samples applied to this instance's copy of the resources table."},
			Metric{Name: "braid_resource_table_series", Gauge: true, Value: func() int64 { return int64(tb.Series()) },
				Help: "Series in this instance's copy of the resources table."},
			share("braid_memory_bytes", true, "resources", tb.Bytes.Load),
			share("braid_evictions_total", false, "resources", tb.Evicted.Load),
		)
	}
	if sc := cfg.Sampling; sc != nil {
		t = append(t,
			share("braid_memory_bytes", true, "sampling_windows", func() int64 { return sc.Counts().WindowBytes }),
			share("braid_evictions_total", false, "sampling_windows", func() int64 { return sc.Counts().Evicted }),
		)
	}
	if a := cfg.Alerts; a != nil {
		ac := a.Counters()
		t = append(t,
			Metric{Name: "braid_alerts_observations_total", Value: ac.Observations.Load,
				Help: "Observations the alerts stage took (a trace, sample or incident, per rule group)."},
			Metric{Name: "braid_alerts_partials_total", Value: ac.Partials.Load,
				Help: "Records of partial aggregates written to the alerts repartition topic."},
			Metric{Name: "braid_alerts_late_total", Value: ac.Late.Load,
				Help: "Partial aggregates dropped: their windows were evaluated more than allowed lateness ago."},
			Metric{Name: "braid_alerts_revised_total", Value: ac.Revised.Load,
				Help: "Window evaluations repeated because late data changed them."},
			Metric{Name: "braid_alerts_overflow_total", Value: ac.Overflow.Load,
				Help: "Observations dropped because a task held alerts.max_groups groups."},
			Metric{Name: "braid_alerts_invalid_total", Value: ac.Invalid.Load,
				Help: "Alerts repartition records that could not be read (dead-lettered)."},
			Metric{Name: "braid_alerts_evaluations_total", Value: ac.Evaluations.Load,
				Help: "Evaluations of a rule over a group's window."},
			Metric{Name: "braid_alerts_changes_total", Log: "alert_changes", Value: ac.Changes.Load,
				Help: "Alert state changes written to the alerts topic."},
			Metric{Name: "braid_alerts_shifted_total", Value: ac.Shifted.Load,
				Help: "Traces the alerts stage observed later than their end, because they were emitted after the task's watermark had passed it (reading a backlog): they count in a later window."},
			Metric{Name: "braid_alerts_shift_max_seconds", Gauge: true, Scale: 1e-9, Value: ac.ShiftMax.Load,
				Help: "The most event time by which the alerts stage observed a trace after its end (see braid_alerts_shifted_total)."},
			Metric{Name: "braid_alerts_firing", Gauge: true, Log: "alerts_firing", Value: ac.Firing.Load,
				Help: "Alerts firing now."},
			Metric{Name: "braid_alerts_groups", Gauge: true, Value: ac.Groups.Load,
				Help: "Rule groups the alerts stage holds."},
			Metric{Name: "braid_alerts_memory_bytes", Gauge: true, Value: ac.Bytes.Load,
				Help: "Memory of the alerts stage's windows (approximate)."},
		)
	}
	return t
}
