package fuse

import (
	"errors"
	"fmt"
	"time"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/llmmetrics"
	"github.com/braidlabs/braid/operators/resources"
	"github.com/braidlabs/braid/operators/sampling"
)

// Source is one input topic and the encoding the Collector writes to it.
type Source struct {
	Topic    string
	Signal   otlp.Signal
	Encoding otlp.Encoding
}

// Config configures the fuse stage.
type Config struct {
	// Sources are the OTLP input topics. Default: otlp_spans, otlp_logs,
	// otlp_metrics, all otlp_proto.
	Sources []Source
	// Partitions of the input topics, the repartition topic and so the
	// number of tasks. Required.
	Partitions int32
	// RepartitionTopic carries trace groups to the task that owns their
	// trace id. Default braid.fuse-repartition.
	RepartitionTopic string
	// ResolveTopic carries trace-less logs and request-id declarations to
	// the task that owns their request id. Default braid.resolve-repartition.
	ResolveTopic string
	// RequestIDs extracts request ids from spans and trace-less logs (a
	// compiled semconv.RequestIDs); nil turns the resolve stage off.
	RequestIDs RequestIDs
	// ResourcesTopic is the global table of resource time series (see
	// operators/resources): metric points without an exemplar go there and
	// fuse attaches the values in force during each request. "" turns the
	// resources stage off. The job sets <group>.resources.
	ResourcesTopic string
	// ResourceRetain: samples older than the table's watermark minus this
	// are dropped (the last of each series stays). Default 10m; it must
	// exceed the longest request plus AllowedLateness.
	ResourceRetain time.Duration
	// ResourceLimits bound the resources table (series and bytes); zero
	// fields take resources' defaults (250,000 series, 128 MiB). Past
	// either, the least recently updated series are removed.
	ResourceLimits resources.Limits
	// ResourceIdleness: a task that writes no marker to the resources topic
	// for this long stops holding the table's watermark back. Default 30s
	// (the engine's idleness).
	ResourceIdleness time.Duration
	// KVTopic carries KV-block event logs to the task that owns their
	// host (the kvgraph stage). Default braid.kvgraph-repartition.
	KVTopic string
	// KVGraph configures the kvgraph stage (pollution detection); its
	// OnIncident and Counters are the stage's own.
	KVGraph kvgraph.Config
	// Alerts is the alerts stage (operators/alerts), run in the fuse task:
	// it observes every emitted trace, resource sample and incident. nil
	// turns it off. Its StageConfig.Topic must be AlertsTopic.
	Alerts *alerts.Stage
	// LLM receives the derived LLM metrics of every trace at its first
	// emission and every new incident's pattern (operators/llmmetrics);
	// nil: none.
	LLM *llmmetrics.Recorder
	// Sampling is the sampling stage (operators/sampling), run in the fuse
	// task: it decides at every emission whether the trace is kept for
	// trace stores, and writes kept traces' spans and logs to its topics as
	// plain OTLP. nil turns it off.
	Sampling *sampling.Stage
	// AlertsTopic carries the alerts stage's partial aggregates to the
	// task that owns their group. Default braid.alerts-repartition.
	AlertsTopic string
	// ChangelogTopic receives every state change, compacted; "" keeps
	// state only locally. Default braid.fuse-changelog.
	ChangelogTopic string
	// FusedTopic, LateTopic, DLQTopic: outputs. Defaults braid.fused,
	// braid.late, braid.dlq.
	FusedTopic, LateTopic, DLQTopic string
	// FusedPartitions, LatePartitions, DLQPartitions: partition counts of
	// the outputs. Default Partitions.
	FusedPartitions, LatePartitions, DLQPartitions int32
	// IdleGap: a trace is emitted once the watermark passes its last event
	// time plus IdleGap. Default 5s.
	IdleGap time.Duration
	// AllowedLateness: members up to this far behind the watermark still
	// revise their trace; later ones go to LateTopic. Default 60s.
	AllowedLateness time.Duration
	// FlushAfter: once the task has received nothing for this long in
	// processing time (traffic stopped), the traces that received nothing
	// for this long are emitted even if the watermark has not passed them.
	// Only while the instance is live (engine.Task.Live): a job stalled
	// behind a backlog is not idle. Later members still revise them.
	// Default 10s; negative disables (replay, where only event time may
	// decide output).
	FlushAfter time.Duration
	// ClosedRetention: how long, in event time, a task remembers a trace
	// after purging it (its id and next revision, a tombstone): a member
	// that arrives for it meanwhile goes to LateTopic with braid.reason
	// "trace already closed" and braid.revision its last revision, instead
	// of starting the trace again at revision 0. Default 10m; negative
	// keeps no tombstones.
	ClosedRetention time.Duration
	// Caps per trace; what is cut is counted and the trace flagged.
	// Defaults 10000 spans, 10000 logs, 10000 points, 900 KiB of members
	// (a fused record must fit Kafka's default message.max.bytes of 1 MiB;
	// raise it on braid.fused and the brokers before raising MaxBytes).
	MaxSpans, MaxLogs, MaxPoints int
	MaxBytes                     int
	// NoDerive leaves out the derived LLM-serving figures (TTFT, TPOT,
	// tokens, per-layer statistics, anchors; see operators/semconv).
	NoDerive bool
	// JSON writes fused records as protojson instead of protobuf.
	JSON bool

	// MaxRecordBytes is the largest record value the stage writes, in
	// bytes (the job's limits.max_message_bytes). Repartition and resolve
	// records are cut at member boundaries below it; a late or dead-letter
	// copy larger than it is cut into chunks with headers braid.chunk
	// (0-based index) and braid.chunks (count) and the same key; a fused
	// trace larger than it is split into parts (FusedTrace.part/parts) — a
	// single field that cannot fit a part (the derived figures of a huge
	// trace) is left out and counted in DerivedDropped. A single member that
	// cannot fit goes to the dead-letter topic. At least 64 KiB. Default
	// 1,000,000 (the broker's default message.max.bytes, 1,048,588, minus
	// headroom for headers and batch overhead).
	MaxRecordBytes int
	// MaxClockSkew: a member whose event time is further ahead of its
	// Kafka record's timestamp than this is handled by FuturePolicy and
	// does not advance any watermark. Records without a timestamp are not
	// checked. Default 10m.
	MaxClockSkew time.Duration
	// FuturePolicy: what happens to a member too far in the future: "late"
	// (default) sends it to LateTopic with braid.reason "future event
	// time"; "restamp" gives it its record's timestamp as event time (the
	// member's bytes are unchanged).
	FuturePolicy FuturePolicy
	// ErrorPolicy: what each stage does with a record it cannot handle
	// (default dead_letter for every stage).
	ErrorPolicy ErrorPolicy
	// OnUndecodable is called once per source when more than half of its
	// first DecodeProbeMessages messages (all tasks together) fail to
	// decode, whatever ErrorPolicy.Ingest does with them: most likely the
	// source's Encoding is not what the Collector writes. It runs on the
	// goroutine of the task that read the deciding message, and must not
	// block. Default nil: not reported.
	OnUndecodable func(Undecodable)
	// MaxOpenTraceBytes bounds the task's open traces in memory: their
	// records (about 200 bytes each) and the members received since the
	// last checkpoint. When it is reached, pending members are written to
	// state at once; if the records alone still exceed it, the open traces
	// with the oldest last event time are emitted early and leave memory
	// (counted in Evicted): a member that arrives for one later revises it
	// as usual, read back from state. Default 256 MiB per task.
	MaxOpenTraceBytes int64
	// MaxWaitingLogBytes bounds the logs a task holds waiting for a span to
	// declare their request id. When it is reached, the oldest waiting
	// logs go to LateTopic with braid.reason "memory budget" (counted in
	// WaitingEvicted). Default 64 MiB per task.
	MaxWaitingLogBytes int64
	// MaxClosedTraceBytes bounds the task's tombstones of closed traces
	// (ClosedRetention; about 80 bytes each). When it is reached, the
	// oldest are forgotten before their retention ends (counted in
	// ClosedEvicted). Default 16 MiB per task.
	MaxClosedTraceBytes int64
}

// FuturePolicy says what happens to a member whose event time is more than
// MaxClockSkew ahead of its record's timestamp.
type FuturePolicy string

// Future policies.
const (
	FutureLate    FuturePolicy = "late"
	FutureRestamp FuturePolicy = "restamp"
)

// OnError is what a stage does with a record it cannot handle: the
// kvgraph stage's policy type, so that every stage takes the same values.
type OnError = kvgraph.ErrorPolicy

// Error actions (STYLE.md).
const (
	// DeadLetter sends the record unchanged to DLQTopic with braid.reason
	// "<stage>: <cause>" and braid.topic/partition/offset, counts it in
	// DLQ, and goes on.
	DeadLetter = kvgraph.PolicyDeadLetter
	// Skip drops the record, counts it in Skipped, and goes on.
	Skip = kvgraph.PolicySkip
	// Fail ends the job with the error.
	Fail = kvgraph.PolicyFail
)

// ErrorPolicy is the error action of each stage fuse runs (the job's
// errors.<stage>); "" is DeadLetter. The kvgraph stage's is
// KVGraph.ErrorPolicy.
type ErrorPolicy struct {
	Ingest  OnError // undecodable input messages, members too large to write
	Resolve OnError // malformed resolve records
	Fuse    OnError // malformed repartition records
}

func (e *ErrorPolicy) ensureDefaults() {
	for _, p := range []*OnError{&e.Ingest, &e.Resolve, &e.Fuse} {
		if *p == "" {
			*p = DeadLetter
		}
	}
}

func (e *ErrorPolicy) validate() error {
	var errs []error
	for _, s := range []struct {
		name string
		p    OnError
	}{{"ingest", e.Ingest}, {"resolve", e.Resolve}, {"fuse", e.Fuse}} {
		switch s.p {
		case DeadLetter, Skip, Fail:
		default:
			errs = append(errs, fmt.Errorf("fuse: ErrorPolicy %s %q is not dead_letter, skip or fail", s.name, s.p))
		}
	}
	return errors.Join(errs...)
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if len(c.Sources) == 0 {
		c.Sources = []Source{
			{Topic: "otlp_spans", Signal: otlp.SignalSpans, Encoding: otlp.EncodingProto},
			{Topic: "otlp_logs", Signal: otlp.SignalLogs, Encoding: otlp.EncodingProto},
			{Topic: "otlp_metrics", Signal: otlp.SignalMetrics, Encoding: otlp.EncodingProto},
		}
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.RepartitionTopic, "braid.fuse-repartition")
	def(&c.ResolveTopic, "braid.resolve-repartition")
	def(&c.KVTopic, "braid.kvgraph-repartition")
	def(&c.AlertsTopic, "braid.alerts-repartition")
	c.KVGraph.EnsureDefaults()
	def(&c.ChangelogTopic, "braid.fuse-changelog")
	def(&c.FusedTopic, "braid.fused")
	def(&c.LateTopic, "braid.late")
	def(&c.DLQTopic, "braid.dlq")
	for _, p := range []*int32{&c.FusedPartitions, &c.LatePartitions, &c.DLQPartitions} {
		if *p == 0 {
			*p = c.Partitions
		}
	}
	if c.IdleGap == 0 {
		c.IdleGap = 5 * time.Second
	}
	if c.AllowedLateness == 0 {
		c.AllowedLateness = 60 * time.Second
	}
	if c.ResourceRetain == 0 {
		c.ResourceRetain = 10 * time.Minute
	}
	if c.ResourceIdleness == 0 {
		c.ResourceIdleness = 30 * time.Second
	}
	if c.FlushAfter == 0 {
		c.FlushAfter = 10 * time.Second
	}
	if c.ClosedRetention == 0 {
		c.ClosedRetention = 10 * time.Minute
	}
	for _, p := range []*int{&c.MaxSpans, &c.MaxLogs, &c.MaxPoints} {
		if *p == 0 {
			*p = 10000
		}
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 900 << 10
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1_000_000
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = 10 * time.Minute
	}
	if c.FuturePolicy == "" {
		c.FuturePolicy = FutureLate
	}
	c.ErrorPolicy.ensureDefaults()
	if c.MaxOpenTraceBytes == 0 {
		c.MaxOpenTraceBytes = 256 << 20
	}
	if c.MaxWaitingLogBytes == 0 {
		c.MaxWaitingLogBytes = 64 << 20
	}
	if c.MaxClosedTraceBytes == 0 {
		c.MaxClosedTraceBytes = 16 << 20
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Partitions <= 0 {
		errs = append(errs, fmt.Errorf("fuse: Partitions %d must be positive", c.Partitions))
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		if s.Topic == "" {
			errs = append(errs, fmt.Errorf("fuse: Sources[%d].Topic is empty", i))
		}
		if seen[s.Topic] {
			errs = append(errs, fmt.Errorf("fuse: Sources[%d].Topic %s is listed twice", i, s.Topic))
		}
		seen[s.Topic] = true
		if s.Signal < otlp.SignalSpans || s.Signal > otlp.SignalMetrics {
			errs = append(errs, fmt.Errorf("fuse: Sources[%d].Signal is not set", i))
		}
		if s.Encoding != otlp.EncodingProto && s.Encoding != otlp.EncodingJSON {
			errs = append(errs, fmt.Errorf("fuse: Sources[%d].Encoding is not set", i))
		}
	}
	if seen[c.RepartitionTopic] {
		errs = append(errs, fmt.Errorf("fuse: RepartitionTopic %s is also a source", c.RepartitionTopic))
	}
	if seen[c.ResolveTopic] || c.ResolveTopic == c.RepartitionTopic {
		errs = append(errs, fmt.Errorf("fuse: ResolveTopic %s is also a source or the repartition topic", c.ResolveTopic))
	}
	if seen[c.KVTopic] || c.KVTopic == c.RepartitionTopic || c.KVTopic == c.ResolveTopic {
		errs = append(errs, fmt.Errorf("fuse: KVTopic %s is also a source or another internal topic", c.KVTopic))
	}
	if err := c.KVGraph.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.IdleGap < 0 || c.AllowedLateness < 0 {
		errs = append(errs, errors.New("fuse: IdleGap and AllowedLateness must not be negative"))
	}
	if c.MaxSpans < 1 || c.MaxLogs < 1 || c.MaxPoints < 1 || c.MaxBytes < 1024 {
		errs = append(errs, errors.New("fuse: MaxSpans, MaxLogs, MaxPoints must be ≥ 1 and MaxBytes ≥ 1024"))
	}
	if c.MaxRecordBytes < minRecordBytes {
		errs = append(errs, fmt.Errorf("fuse: MaxRecordBytes %d is below %d", c.MaxRecordBytes, minRecordBytes))
	}
	if c.MaxClockSkew < 0 {
		errs = append(errs, errors.New("fuse: MaxClockSkew must not be negative"))
	}
	if c.FuturePolicy != FutureLate && c.FuturePolicy != FutureRestamp {
		errs = append(errs, fmt.Errorf("fuse: FuturePolicy %q is not late or restamp", c.FuturePolicy))
	}
	if err := c.ErrorPolicy.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxOpenTraceBytes < 0 || c.MaxWaitingLogBytes < 0 || c.MaxClosedTraceBytes < 0 {
		errs = append(errs, errors.New("fuse: MaxOpenTraceBytes, MaxWaitingLogBytes and MaxClosedTraceBytes must not be negative"))
	}
	return errors.Join(errs...)
}

// minRecordBytes is the smallest MaxRecordBytes: room for a member's
// framing and a part's header fields.
const minRecordBytes = 64 << 10
