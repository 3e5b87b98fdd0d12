package job

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/braidlabs/braid/connectors/admin"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/llmmetrics"
	"github.com/braidlabs/braid/operators/resources"
	"github.com/braidlabs/braid/operators/sampling"
	"github.com/braidlabs/braid/operators/semconv"
	"github.com/braidlabs/braid/state"
)

// Config is the whole configuration of a braid job. Every field can be set
// in the YAML file; the environment variables named in README.md override
// the file, and flags override both.
type Config struct {
	Kafka kafka.Config `yaml:"kafka"`
	// Group is the consumer group of the job. Default "braid".
	Group string `yaml:"group"`
	// SessionTimeout: an instance silent this long (crashed, partitioned)
	// leaves the group and its tasks move to the others. Default 45s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// InstanceID is stable per instance (the pod name in a StatefulSet);
	// it makes the transactional id. Default: the host name.
	InstanceID string `yaml:"instance_id"`

	Inputs struct {
		Spans   InputConfig `yaml:"spans"`
		Logs    InputConfig `yaml:"logs"`
		Metrics InputConfig `yaml:"metrics"`
	} `yaml:"inputs"`

	Outputs struct {
		// Fused, Late, DLQ topic names. Defaults braid.fused, braid.late,
		// braid.dlq.
		Fused string `yaml:"fused"`
		Late  string `yaml:"late"`
		DLQ   string `yaml:"dlq"`
		// Pollution and Incidents: the KV-cache pollution graph's edges
		// and root-cause incidents. Defaults braid.pollution,
		// braid.incidents.
		Pollution string `yaml:"pollution"`
		Incidents string `yaml:"incidents"`
		// Alerts: alert state changes (pending, firing, resolved) of the
		// alert rules. Default braid.alerts.
		Alerts string `yaml:"alerts"`
		// Format of fused records: "proto" (default) or "json".
		Format string `yaml:"format"`
		// Partitions of the output topics braid creates. Default: the
		// input partition count.
		Partitions int32 `yaml:"partitions"`
	} `yaml:"outputs"`

	State struct {
		// Dir holds one Pebble keyspace per task. Default ./braid-state.
		Dir string `yaml:"dir"`
		// MemoryBudget bounds everything the job holds in memory, bytes:
		// Pebble's cache and memtables, state writes before a checkpoint,
		// fetched and produced records, open traces, waiting logs, KV
		// buffers and the resources table, each a fixed share (Budget).
		// The Go runtime's soft memory limit is set to it as well.
		// Default 512 MiB, at least 64 MiB.
		MemoryBudget int64 `yaml:"memory_budget"`
	} `yaml:"state"`

	Limits struct {
		// MaxMessageBytes is the largest record braid writes to any topic
		// (outputs, internal topics, changelog): larger values are cut
		// into chunks or parts. It must not exceed the brokers'
		// message.max.bytes (default 1048588) less headroom for headers
		// and batch overhead. Default 1000000.
		MaxMessageBytes int `yaml:"max_message_bytes"`
	} `yaml:"limits"`

	// Errors is the error policy of each stage for input it cannot
	// handle: dead_letter (default: the record goes unchanged to the DLQ
	// topic with braid.reason naming the stage and cause), skip (counted
	// and dropped) or fail (the job stops; for debugging). Stages: ingest
	// (undecodable messages, members too large to write), resolve and fuse
	// (malformed internal records), kvgraph (KV events that break the
	// convention).
	Errors map[string]string `yaml:"errors"`

	// Alerts: rules evaluated in event time over windows of what braid
	// fuses and reads (operators/alerts), their lifecycle written to
	// outputs.alerts and posted to Alertmanager. On by default with the
	// default rules.
	Alerts alerts.Config `yaml:"alerts"`
	// LLMMetrics: the derived LLM metrics on /metrics (TTFT, TPOT, queue,
	// prefill, decode and e2e histograms per model and instance with
	// trace-id exemplars; batch efficiency; per-layer decode time).
	// max_series (default 2000) bounds each family's label sets;
	// max_tokens_per_second maps a model to its peak decode throughput,
	// the denominator of llm_batch_efficiency_ratio.
	LLMMetrics llmmetrics.Config `yaml:"llm_metrics"`
	// Sampling: per-tenant sampling of fused traces for trace stores
	// (operators/sampling); kept traces' spans and logs are written as
	// plain OTLP to sampling.traces_topic and sampling.logs_topic. Off by
	// default.
	Sampling sampling.Config `yaml:"sampling"`

	// CheckpointInterval, default 5s, 1s–60s.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// AtLeastOnce turns exactly-once off (no transactions; output may
	// repeat after a crash). For comparison only. Default false.
	AtLeastOnce bool `yaml:"at_least_once"`
	// OnCheckpoint, if set, is called after every checkpoint as well as
	// the job's own metrics (engine.Config.OnCheckpoint): for programs
	// that embed the job, such as the benchmarks. It must not block.
	OnCheckpoint func(engine.CheckpointInfo) `yaml:"-"`
	// CheckpointRunOn lets tasks go on past a checkpoint's barrier while
	// its transaction ends, their output held until the next begins
	// (engine.Config.RunOn). Default on; false holds them to its end.
	CheckpointRunOn *bool `yaml:"checkpoint_run_on"`
	// LocalExchange hands what a task writes to an internal topic, and its
	// watermark there, to the task of the same instance that reads that
	// partition in memory, besides the topic (engine.Config.LocalExchange).
	// Default on; false: every internal record and marker is read back
	// from Kafka once its checkpoint commits.
	LocalExchange *bool `yaml:"local_exchange"`
	// LogInterval is how often a progress line is logged. Default 30s.
	LogInterval time.Duration `yaml:"log_interval"`

	EventTime struct {
		// OutOfOrderness: bounded disorder within a partition. Default 10s.
		OutOfOrderness time.Duration `yaml:"out_of_orderness"`
		// Idleness: a silent partition stops holding the watermark back
		// after this long. Default 30s; at least twice
		// checkpoint_interval (upstream watermarks arrive once per
		// checkpoint).
		Idleness time.Duration `yaml:"idleness"`
		// CaughtUpIdleness: a partition braid has read to its end (the
		// broker's last stable offset) that receives nothing for this
		// long stops holding the watermark back, so that a sparse or
		// empty partition does not hold a live job for idleness; a
		// partition with a backlog still waits for idleness. Default
		// 200ms; at most idleness; negative: off.
		CaughtUpIdleness time.Duration `yaml:"caught_up_idleness"`
		// Alignment: a source partition read more than this ahead, in
		// event time, of the instance's slowest source partition that
		// still has a backlog is paused until that one catches up
		// (engine.Config.Alignment), so that reading a backlog does not
		// hold the members of the partitions read ahead in memory.
		// Default 1m; negative: off.
		Alignment time.Duration `yaml:"alignment"`
		// IdleGap: a trace closes when the watermark passes its last event
		// plus this gap. Default 5s.
		IdleGap time.Duration `yaml:"idle_gap"`
		// AllowedLateness: later data revises a trace (revision+1) up to
		// this far behind the watermark, beyond it goes to the late topic.
		// Default 60s.
		AllowedLateness time.Duration `yaml:"allowed_lateness"`
		// FlushAfter: a trace that received nothing for this long in
		// processing time is emitted even before the watermark passes it
		// (traffic stopped), unless the job is behind its input (a backlog
		// stalls, it is not idle). Default 10s.
		FlushAfter time.Duration `yaml:"flush_after"`
		// ClosedRetention: how long (event time) a task remembers a trace
		// it emitted and purged; a member for it meanwhile goes to the late
		// topic with reason "trace already closed" instead of starting the
		// trace again at revision 0. Bounded by the closed_traces share of
		// state.memory_budget. Default 10m; negative: not remembered.
		ClosedRetention time.Duration `yaml:"closed_retention"`
		// MaxClockSkew: a member whose event time is further ahead of its
		// Kafka record's timestamp than this does not advance any
		// watermark, and no watermark moves past the largest record
		// timestamp seen plus this. Default 10m.
		MaxClockSkew time.Duration `yaml:"max_clock_skew"`
		// Future is what happens to such a member: late (default: it goes
		// to the late topic with reason "future event time") or restamp
		// (its event time becomes the record's timestamp).
		Future string `yaml:"future"`
	} `yaml:"event_time"`

	Caps struct {
		// Per trace: spans, logs, points (default 10000 each) and bytes
		// of members (default 900 KiB, 921600).
		Spans  int `yaml:"spans"`
		Logs   int `yaml:"logs"`
		Points int `yaml:"points"`
		Bytes  int `yaml:"bytes"`
	} `yaml:"caps"`

	Correlation struct {
		// RequestIDs: where log records name their request (attribute keys,
		// body patterns) so that the resolve stage joins them to the trace
		// whose span declared that request id. Unset: semconv's defaults
		// for vLLM, SGLang, llama.cpp and Triton.
		RequestIDs *semconv.RequestIDRules `yaml:"request_ids"`
		// Resources attaches to each request the resource series (KV-cache
		// usage, preemptions, GPU memory, Xid…) in force during it.
		// Default true.
		Resources *bool `yaml:"resources"`
		// ResourceRetain: how much event time of resource samples the
		// table keeps (the last sample of each series always stays).
		// Default 10m.
		ResourceRetain time.Duration `yaml:"resource_retain"`
	} `yaml:"correlation"`

	Pollution struct {
		// BlockTTL: a KV block or request that saw no event for this long
		// (event time) is forgotten. Default 30m.
		BlockTTL time.Duration `yaml:"block_ttl"`
		// IncidentWindow: an incident that did not grow for this long
		// closes; sanitizer and Xid lines attach to an incident on the same
		// GPU at most this far from it. Default 2m.
		IncidentWindow time.Duration `yaml:"incident_window"`
		// LiveHold: while a task is caught up with its inputs (live), a KV
		// event is held at most this long of processing time for events
		// that arrive later with an earlier event time, instead of until
		// the watermark passes it, and until every task has committed the
		// KV events it read before (they come through an internal topic, a
		// checkpoint or more later: two of each task's watermark markers
		// read since); detection then does not wait on out_of_orderness.
		// Reading a backlog or replaying, the watermark alone releases
		// them. Default 1s; negative: the watermark only.
		LiveHold time.Duration `yaml:"live_hold"`
	} `yaml:"pollution"`

	// requestIDs is Correlation.RequestIDs compiled by Validate.
	requestIDs *semconv.RequestIDs

	Admin struct {
		// Addr is the host:port of the admin HTTP server (/metrics,
		// /healthz, /readyz). LoadConfig defaults it to 127.0.0.1:9464
		// (loopback); "" disables the server, and is what a Config built
		// in code has unless set.
		Addr string `yaml:"addr"`
	} `yaml:"admin"`
}

// errorStages are the stages that take an error policy (Config.Errors).
var errorStages = []string{"ingest", "resolve", "fuse", "kvgraph"}

// ErrorPolicy is the policy of stage: dead_letter unless Errors says
// otherwise.
func (c *Config) ErrorPolicy(stage string) string {
	if p, ok := c.Errors[stage]; ok {
		return p
	}
	return "dead_letter"
}

// Budget is state.memory_budget split into its shares.
func (c *Config) Budget() Budget { return SplitBudget(c.State.MemoryBudget) }

// InputConfig is one OTLP input topic.
type InputConfig struct {
	Topic string `yaml:"topic"`
	// Encoding as the Collector's Kafka exporter names it: otlp_proto
	// (default) or otlp_json.
	Encoding string `yaml:"encoding"`
	// Disabled: the job does not read this signal (logs or metrics; spans
	// are always read), for a fleet that sends none. An input the job reads
	// that stays empty holds event time back for event_time.idleness
	// whenever the job reads a backlog: an empty partition at its end may
	// be about to receive its share of history.
	Disabled bool `yaml:"disabled"`
}

// InputTopics returns the topics of the inputs the job reads, spans
// first.
func (c *Config) InputTopics() []string {
	var topics []string
	for _, in := range c.readInputs() {
		topics = append(topics, in.Topic)
	}
	return topics
}

// readInput is an input the job reads, with its signal.
type readInput struct {
	InputConfig
	signal otlp.Signal
}

// readInputs returns the inputs the job reads (spans always, logs and
// metrics unless disabled), spans first: the one place that decides it.
func (c *Config) readInputs() []readInput {
	ins := []readInput{{c.Inputs.Spans, otlp.SignalSpans}}
	for _, in := range []readInput{{c.Inputs.Logs, otlp.SignalLogs}, {c.Inputs.Metrics, otlp.SignalMetrics}} {
		if !in.Disabled {
			ins = append(ins, in)
		}
	}
	return ins
}

// LoadConfig reads path (if not empty), then the environment.
func LoadConfig(path string) (*Config, error) {
	c := &Config{}
	// Set before decoding, so that an explicit addr: "" disables it.
	c.Admin.Addr = admin.DefaultAddr
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	c.applyEnv(os.Getenv)
	c.EnsureDefaults()
	return c, c.Validate()
}

func (c *Config) applyEnv(get func(string) string) {
	c.Kafka.ApplyEnv(get)
	if v := get("BRAID_KAFKA_BROKERS"); v != "" {
		c.Kafka.Brokers = strings.Split(v, ",")
	}
	if v := get("BRAID_GROUP"); v != "" {
		c.Group = v
	}
	if v := get("BRAID_INSTANCE_ID"); v != "" {
		c.InstanceID = v
	}
	if v := get("BRAID_STATE_DIR"); v != "" {
		c.State.Dir = v
	}
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	c.Kafka.EnsureDefaults()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Group, "braid")
	if c.InstanceID == "" {
		h, _ := os.Hostname()
		c.InstanceID = h
	}
	def(&c.Inputs.Spans.Topic, "otlp_spans")
	def(&c.Inputs.Logs.Topic, "otlp_logs")
	def(&c.Inputs.Metrics.Topic, "otlp_metrics")
	for _, in := range []*InputConfig{&c.Inputs.Spans, &c.Inputs.Logs, &c.Inputs.Metrics} {
		def(&in.Encoding, "otlp_proto")
	}
	def(&c.Outputs.Fused, "braid.fused")
	def(&c.Outputs.Late, "braid.late")
	def(&c.Outputs.DLQ, "braid.dlq")
	def(&c.Outputs.Pollution, "braid.pollution")
	def(&c.Outputs.Incidents, "braid.incidents")
	def(&c.Outputs.Alerts, "braid.alerts")
	def(&c.Outputs.Format, "proto")
	def(&c.State.Dir, "braid-state")
	if c.State.MemoryBudget == 0 {
		c.State.MemoryBudget = 512 << 20
	}
	if c.Limits.MaxMessageBytes == 0 {
		c.Limits.MaxMessageBytes = 1_000_000
	}
	if c.EventTime.MaxClockSkew == 0 {
		c.EventTime.MaxClockSkew = 10 * time.Minute
	}
	if c.EventTime.Alignment == 0 {
		c.EventTime.Alignment = time.Minute
	}
	def(&c.EventTime.Future, "late")
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 5 * time.Second
	}
	if c.LogInterval == 0 {
		c.LogInterval = 30 * time.Second
	}
	if c.Correlation.RequestIDs == nil {
		r := semconv.DefaultRequestIDRules()
		c.Correlation.RequestIDs = &r
	}
	if c.CheckpointRunOn == nil {
		on := true
		c.CheckpointRunOn = &on
	}
	if c.LocalExchange == nil {
		on := true
		c.LocalExchange = &on
	}
	if c.Correlation.Resources == nil {
		on := true
		c.Correlation.Resources = &on
	}
	if c.Correlation.ResourceRetain == 0 {
		c.Correlation.ResourceRetain = 10 * time.Minute
	}
}

// Validate reports every problem at once, naming the offending field.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.Kafka.Validate())
	for name, in := range map[string]InputConfig{"inputs.spans": c.Inputs.Spans, "inputs.logs": c.Inputs.Logs, "inputs.metrics": c.Inputs.Metrics} {
		if _, err := otlp.ParseEncoding(in.Encoding); err != nil && !in.Disabled {
			errs = append(errs, fmt.Errorf("config: %s.encoding: %w", name, err))
		}
	}
	if c.Inputs.Spans.Disabled {
		errs = append(errs, errors.New("config: inputs.spans.disabled: spans cannot be disabled (traces are what the job fuses)"))
	}
	if c.Outputs.Format != "proto" && c.Outputs.Format != "json" {
		errs = append(errs, fmt.Errorf("config: outputs.format %q is neither proto nor json", c.Outputs.Format))
	}
	if c.CheckpointInterval < time.Second || c.CheckpointInterval > time.Minute {
		errs = append(errs, fmt.Errorf("config: checkpoint_interval %v is outside 1s–60s", c.CheckpointInterval))
	}
	if idle := c.EventTime.Idleness; idle != 0 && idle < 2*c.CheckpointInterval {
		// Upstream tasks' watermarks reach a task once per checkpoint,
		// through the repartition topic: shorter idleness declares them
		// idle between two markers and runs the watermark ahead of data
		// still on its way, which then lands in the late topic.
		errs = append(errs, fmt.Errorf("config: event_time.idleness %v must be at least twice checkpoint_interval %v", idle, c.CheckpointInterval))
	}
	idle := c.EventTime.Idleness
	if idle == 0 {
		idle = 30 * time.Second // the engine's default
	}
	if cu := c.EventTime.CaughtUpIdleness; cu > idle {
		errs = append(errs, fmt.Errorf("config: event_time.caught_up_idleness %v exceeds event_time.idleness %v", cu, idle))
	}
	if err := c.LLMMetrics.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: llm_metrics: %w", err))
	}
	if !c.Alerts.Disabled {
		if _, err := c.Alerts.Compile(); err != nil {
			errs = append(errs, fmt.Errorf("config: %w", err))
		}
	}
	if c.Sampling.Enabled {
		if _, err := sampling.New(c.Sampling); err != nil {
			errs = append(errs, fmt.Errorf("config: %w", err))
		}
	}
	if c.State.MemoryBudget < MinMemoryBudget {
		errs = append(errs, fmt.Errorf("config: state.memory_budget %d is below the minimum of %d (64 MiB)", c.State.MemoryBudget, MinMemoryBudget))
	}
	if m := c.Limits.MaxMessageBytes; m < 64<<10 || m > 64<<20 {
		errs = append(errs, fmt.Errorf("config: limits.max_message_bytes %d is outside 64 KiB–64 MiB", m))
	}
	if c.EventTime.MaxClockSkew < time.Second {
		errs = append(errs, fmt.Errorf("config: event_time.max_clock_skew %v is below 1s", c.EventTime.MaxClockSkew))
	}
	if f := c.EventTime.Future; f != "late" && f != "restamp" {
		errs = append(errs, fmt.Errorf("config: event_time.future %q is neither late nor restamp", f))
	}
	for _, stage := range slices.Sorted(maps.Keys(c.Errors)) {
		if !slices.Contains(errorStages, stage) {
			errs = append(errs, fmt.Errorf("config: errors.%s: unknown stage (want one of %s)", stage, strings.Join(errorStages, ", ")))
		}
		if p := c.Errors[stage]; p != "dead_letter" && p != "skip" && p != "fail" {
			errs = append(errs, fmt.Errorf("config: errors.%s: policy %q is none of dead_letter, skip, fail", stage, p))
		}
	}
	if c.InstanceID == "" {
		errs = append(errs, errors.New("config: instance_id is empty and the host name is unknown"))
	}
	if c.Correlation.RequestIDs != nil {
		ids, err := c.Correlation.RequestIDs.Compile()
		if err != nil {
			errs = append(errs, fmt.Errorf("config: correlation.request_ids: %w", err))
		}
		c.requestIDs = ids
	}
	if c.Admin.Addr != "" {
		if err := admin.CheckAddr(c.Admin.Addr); err != nil {
			errs = append(errs, fmt.Errorf("config: admin.addr: %w", err))
		}
	}
	return errors.Join(errs...)
}

// FuseConfig maps c onto the fuse stage for partitions input partitions
// (the live job and braid replay run the same stage).
func (c *Config) FuseConfig(partitions int32) fuse.Config {
	out := c.Outputs.Partitions
	var rids fuse.RequestIDs
	switch {
	case c.requestIDs != nil:
		rids = c.requestIDs
	case c.Correlation.RequestIDs != nil:
		if ids, err := c.Correlation.RequestIDs.Compile(); err == nil {
			rids = ids
		}
	default:
		rids = semconv.DefaultRequestIDs()
	}
	var resourcesTopic string
	if (c.Correlation.Resources == nil || *c.Correlation.Resources) && !c.Inputs.Metrics.Disabled {
		// The table is fed from metric points: none without that input.
		resourcesTopic = c.Group + ".resources"
	}
	var sources []fuse.Source
	for _, in := range c.readInputs() {
		enc, _ := otlp.ParseEncoding(in.Encoding) // Validate refused a bad one
		sources = append(sources, fuse.Source{Topic: in.Topic, Signal: in.signal, Encoding: enc})
	}
	budget := c.Budget()
	perTask := func(share int64) int64 { return max(share/int64(max(partitions, 1)), 1<<20) }
	policy := func(stage string) fuse.OnError { return fuse.OnError(c.ErrorPolicy(stage)) }
	return fuse.Config{
		MaxRecordBytes:      c.Limits.MaxMessageBytes,
		MaxClockSkew:        c.EventTime.MaxClockSkew,
		FuturePolicy:        fuse.FuturePolicy(c.EventTime.Future),
		ErrorPolicy:         fuse.ErrorPolicy{Ingest: policy("ingest"), Resolve: policy("resolve"), Fuse: policy("fuse")},
		MaxOpenTraceBytes:   perTask(budget.OpenTraces),
		MaxWaitingLogBytes:  perTask(budget.WaitingLogs),
		MaxClosedTraceBytes: perTask(budget.ClosedTraces),
		ResourceLimits:      resources.Limits{MaxTableBytes: budget.Resources},
		RequestIDs:          rids,
		ResourcesTopic:      resourcesTopic,
		ResourceRetain:      c.Correlation.ResourceRetain,
		ResourceIdleness:    c.EventTime.Idleness,
		Sources:             sources,
		Partitions:          partitions,
		RepartitionTopic:    c.Group + ".fuse-repartition",
		ResolveTopic:        c.Group + ".resolve-repartition",
		KVTopic:             c.Group + ".kvgraph-repartition",
		KVGraph: kvgraph.Config{
			PollutionTopic: c.Outputs.Pollution,
			IncidentsTopic: c.Outputs.Incidents,
			Partitions:     out,
			BlockTTL:       c.Pollution.BlockTTL,
			IncidentWindow: c.Pollution.IncidentWindow,
			LiveHold:       c.Pollution.LiveHold,
			JSON:           c.Outputs.Format == "json",
			ErrorPolicy:    policy("kvgraph"),
			MaxRecordBytes: c.Limits.MaxMessageBytes,
			// The KV buffer and the detector state are per task.
			MaxKVBufferBytes: perTask(budget.KVBuffer),
			MaxStateBytes:    perTask(budget.KVState),
		},
		ChangelogTopic:  c.Group + ".fuse-changelog",
		FusedTopic:      c.Outputs.Fused,
		LateTopic:       c.Outputs.Late,
		DLQTopic:        c.Outputs.DLQ,
		FusedPartitions: out,
		LatePartitions:  out,
		DLQPartitions:   out,
		IdleGap:         c.EventTime.IdleGap,
		AllowedLateness: c.EventTime.AllowedLateness,
		FlushAfter:      c.EventTime.FlushAfter,
		ClosedRetention: c.EventTime.ClosedRetention,
		MaxSpans:        c.Caps.Spans,
		MaxLogs:         c.Caps.Logs,
		MaxPoints:       c.Caps.Points,
		MaxBytes:        c.Caps.Bytes,
		JSON:            c.Outputs.Format == "json",
		Alerts:          c.alertsStage(partitions),
		AlertsTopic:     c.Group + ".alerts-repartition",
		Sampling:        c.samplingStage(perTask(budget.Sampling)),
	}
}

// samplingStage is the sampling stage of the job, nil when off (or
// invalid: Validate reports that).
func (c *Config) samplingStage(maxBytes int64) *sampling.Stage {
	if !c.Sampling.Enabled {
		return nil
	}
	sc := c.Sampling
	sc.MaxBytes = maxBytes
	st, err := sampling.New(sc)
	if err != nil {
		return nil
	}
	return st
}

// alertsStage is the alerts stage of the job, nil when off (or invalid:
// Validate reports that).
func (c *Config) alertsStage(partitions int32) *alerts.Stage {
	if c.Alerts.Disabled {
		return nil
	}
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	st, err := alerts.NewStage(alerts.StageConfig{
		Alerts: c.Alerts, Topic: c.Group + ".alerts-repartition", OutputTopic: c.Outputs.Alerts,
		OutputPartitions: c.Outputs.Partitions, Partitions: partitions,
		// A trace is observed when it is emitted: idle_gap after its last
		// event, which the watermark reaches out_of_orderness after it.
		Delay:           or(c.EventTime.IdleGap, 5*time.Second) + or(c.EventTime.OutOfOrderness, 10*time.Second),
		AllowedLateness: or(c.EventTime.AllowedLateness, 60*time.Second),
		MaxRecordBytes:  c.Limits.MaxMessageBytes,
	})
	if err != nil {
		return nil
	}
	return st
}

// EngineConfig is the engine's configuration for c, with the instance's
// shares of budget; the caller sets Store, Logger and OnCheckpoint.
func (c *Config) EngineConfig(budget Budget) engine.Config {
	return engine.Config{
		ClientOpts:         c.Kafka.Opts(),
		Group:              c.Group,
		TransactionalID:    c.Group + "-" + c.InstanceID,
		InstanceID:         c.InstanceID,
		SessionTimeout:     c.SessionTimeout,
		AtLeastOnce:        c.AtLeastOnce,
		RunOn:              c.CheckpointRunOn == nil || *c.CheckpointRunOn,
		LocalExchange:      c.LocalExchange == nil || *c.LocalExchange,
		CheckpointInterval: c.CheckpointInterval,
		OutOfOrderness:     c.EventTime.OutOfOrderness,
		Idleness:           c.EventTime.Idleness,
		CaughtUpIdleness:   c.EventTime.CaughtUpIdleness,
		Alignment:          max(c.EventTime.Alignment, 0), // negative: off
		MaxRecordBytes:     c.Limits.MaxMessageBytes,
		MaxClockSkew:       c.EventTime.MaxClockSkew,
		// Totals of the instance, whatever number of tasks it runs.
		ProducerBufferBytes: budget.ProducerBuffer,
		FetchBufferBytes:    budget.FetchBuffer,
		PendingStateBytes:   budget.StateBatch,
	}
}

// StateOptions are the state store's options for a store in dir serving
// partitions tasks: Pebble's cache and memtables take their shares of the
// memory budget.
func (c *Config) StateOptions(dir string, partitions int32, log *slog.Logger) state.Options {
	b := c.Budget()
	return state.Options{
		Dir:           dir,
		MemoryBudget:  c.State.MemoryBudget,
		CacheBytes:    b.PebbleCache,
		MemTableBytes: b.PebbleMemTables,
		MaxKeyspaces:  int(partitions),
		Logger:        log,
	}
}
