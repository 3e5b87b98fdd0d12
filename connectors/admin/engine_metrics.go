package admin

// EngineMetrics is the table of the engine's figures (see Table): records
// in and out, checkpoints and what brought them forward, backpressure and
// the engine's shares of the memory budget.
func EngineMetrics(e EngineView) Table {
	st := e.Stats()
	t := Table{
		{Name: "braid_engine_records_in_total", Value: st.RecordsIn.Load,
			Help: "Kafka records polled by the engine from every input topic, the repartition topic included."},
		{Name: "braid_engine_records_out_total", Value: st.RecordsOut.Load,
			Help: "Kafka records produced by the engine to every output topic, the repartition topic and watermark markers included."},
		{Name: "braid_checkpoints_total", Label: "outcome", LabelValue: "committed", Log: "checkpoints", Value: st.Checkpoints.Load,
			Help: "Checkpoints by outcome: committed, or aborted (the Kafka transaction aborted and state rolled back)."},
		{Name: "braid_checkpoints_total", Label: "outcome", LabelValue: "aborted", Log: "aborts", Value: st.Aborts.Load},
		{Name: "braid_followup_checkpoints_total", Value: st.FollowUpCheckpoints.Load,
			Help: "Follow-up checkpoints: run, while live, as soon as the tasks had read the watermark markers the previous checkpoint committed, " +
				"to commit what those markers released (counted in braid_checkpoints_total too)."},
		{Name: "braid_requested_checkpoints_total", Value: st.RequestedCheckpoints.Load,
			Help: "Checkpoints run before the regular schedule because a task asked for one: live KV-block events waiting for every task's commit " +
				"(counted in braid_checkpoints_total too)."},
		{Name: "braid_early_checkpoints_total", Value: st.EarlyCheckpoints.Load,
			Help: "Checkpoints brought forward because the state writes waiting for the checkpoint filled their share of the memory budget."},
		{Name: "braid_pending_state_peak_bytes", Gauge: true, Value: st.PendingStatePeak.Load,
			Help: "The largest state writes waiting for a checkpoint that any barrier found since the start: what the share state writes before checkpoint bounds, " +
				"plus at most what one poll added."},
		{Name: "braid_fetch_bytes", Gauge: true, Value: st.FetchBytes.Load,
			Help: "The size the consumer's fetches ask the brokers for, in bytes as sent: an eighth of the fetched-records share over the ratio of decompressed to compressed bytes read, so that a fetch held decompressed stays within it."},
		{Name: "braid_alignment_pauses_total", Value: st.AlignmentPauses.Load,
			Help: "Source partitions paused because they were read more than event_time.alignment ahead of the instance's slowest partition with a backlog, or because their records queued for their task passed its bound."},
		{Name: "braid_aligned_partitions", Gauge: true, Value: st.AlignedPartitions.Load,
			Help: "Source partitions paused now for event_time.alignment."},
		{Name: "braid_exchange_records_total", Label: "outcome", LabelValue: "taken", Value: st.ExchangeRecords.Load,
			Help: "Records and markers on internal topics handed between the tasks of this instance in memory (local_exchange): taken from memory; " +
				"skipped, their copies read from Kafka afterwards; left, not kept in memory (the exchange's bound, or a task opening) and processed from Kafka."},
		{Name: "braid_exchange_records_total", Label: "outcome", LabelValue: "skipped", Value: st.ExchangeSkipped.Load},
		{Name: "braid_exchange_records_total", Label: "outcome", LabelValue: "left", Value: st.ExchangeGaps.Load},
		{Name: "braid_backpressure_total", Value: st.Backpressure.Load,
			Help: "Polls held back because the records fetched and not yet processed filled their share of the memory budget."},
		{Name: "braid_clamped_event_times_total", Value: st.ClampedEvents.Load,
			Help: "Event times the engine lowered to the record timestamp plus event_time.max_clock_skew before they reached a watermark."},
	}
	if m, ok := e.(interface {
		Memory() (fetched, pendingState int64)
	}); ok {
		t = append(t,
			Metric{Name: "braid_memory_bytes", Gauge: true, Label: "share", LabelValue: "fetched", Help: MemoryHelp,
				Value: func() int64 { f, _ := m.Memory(); return f }},
			Metric{Name: "braid_memory_bytes", Gauge: true, Label: "share", LabelValue: "pending_state",
				Value: func() int64 { _, p := m.Memory(); return p }})
	}
	return t
}

// MemoryHelp is the help of braid_memory_bytes, whose rows the engine's
// table and the stages' share.
const MemoryHelp = "Estimated bytes held by each share of state.memory_budget: the stages' shares (open_traces, closed_traces, waiting_logs, kv_buffer, kv_state, resources) " +
	"and the engine's (fetched: polled records not yet processed; pending_state: state writes waiting for the checkpoint)."
