package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/braidlabs/braid/state"
	"github.com/braidlabs/braid/windows"
)

// Input is one topic a topology reads. Task p reads partition p of it.
type Input struct {
	Topic string
	// Internal marks a topic written by the tasks of this job (a
	// repartition topic). Every task sends its watermark to every partition
	// of every internal input at each checkpoint.
	Internal bool
	// From names the internal inputs whose records a task may forward to
	// this internal topic (after holding them, e.g. until a join partner
	// arrives); they must be listed before it. The watermark a task sends
	// on this topic covers its sources and those inputs, so nothing it
	// forwards is behind the markers it sent before. Empty: only records
	// read from sources are written to it.
	From []string
	// Aside marks an internal input whose markers do not hold the
	// watermark that fires the task's timers (WatermarkHandler,
	// Task.Watermark): what the processor derives from its own output
	// and sends to other tasks (partial aggregates of what they emitted)
	// would otherwise hold back, by the hops of its From, the very output
	// it is derived from. The processor reads the watermark that covers
	// it with Task.WatermarkAll.
	Aside bool
	// Deferred marks an internal input that the processor writes only when
	// it prepares a checkpoint (Checkpointer: partial aggregates of what
	// it emitted since), so that its markers hold only right after that
	// output: the local exchange (Config.LocalExchange) sends no progress
	// markers on it, only each checkpoint's.
	Deferred bool
}

// Topology is what the engine runs: co-partitioned inputs and the processor
// of a task.
type Topology struct {
	// Name prefixes keyspaces and transactional ids.
	Name string
	// Inputs are read co-partitioned: every input must have Partitions
	// partitions.
	Inputs []Input
	// Partitions is the number of tasks.
	Partitions int32
	// Changelog is the compacted topic (Partitions partitions) to which
	// every state change is written in the checkpoint's transaction; ""
	// keeps state only locally. A task whose local state does not match
	// the group's committed offsets is rebuilt from it.
	Changelog string
	// NewProcessor builds the processor of task t. t.State is open.
	NewProcessor func(t *Task) (Processor, error)
	// Globals are topics of Partitions partitions that every instance
	// reads whole (see Global).
	Globals []Global
}

// Config configures an Engine.
type Config struct {
	// ClientOpts carry brokers, client id and security. Required.
	ClientOpts []kgo.Opt
	// Group is the consumer group id. Required.
	Group string
	// TransactionalID is stable per instance so that a restarted instance
	// fences its predecessor. Required.
	TransactionalID string
	// SessionTimeout: a member silent this long leaves the group and its
	// tasks move. Default 45s.
	SessionTimeout time.Duration
	// InstanceID, if set, makes the instance a static group member: a
	// restarted instance takes its place back without a rebalance (pod
	// names in a StatefulSet).
	InstanceID string
	// CheckpointInterval, default 5s; 1s–60s.
	CheckpointInterval time.Duration
	// OutOfOrderness bounds event-time disorder within a partition.
	// Default 10s.
	OutOfOrderness time.Duration
	// Idleness: an input silent for longer stops holding the watermark
	// back. Default 30s.
	Idleness time.Duration
	// CaughtUpIdleness: a source partition that is caught up (the task
	// has read up to the partition's end as the broker last reported it,
	// the last stable offset) and received no record for this long of
	// processing time stops holding the watermark back, so that a sparse
	// or empty partition does not hold a live task for Idleness. A
	// partition with a backlog still waits for Idleness. Default 200ms;
	// negative: off (every partition waits for Idleness). At most
	// Idleness.
	CaughtUpIdleness time.Duration
	// Alignment bounds how far, in event time, the instance reads one of
	// its source partitions ahead of another that still has a backlog
	// (Flink's watermark alignment): a source partition whose newest
	// event time is more than Alignment past that of the slowest source
	// partition with a backlog of any of the instance's tasks is paused
	// until the slowest catches up. Members of traces that only the slow
	// source can close then wait in Kafka, not in the open traces in
	// memory. A source that has read to its end (caught up) never holds
	// the others: there is nothing to wait for. With alignment on, a
	// source partition also pauses while its records queued for its task
	// pass an even part of half FetchBufferBytes, a partition contributes
	// at most 256 KiB to a fetch, and fetches wait at most 100ms at the
	// broker. 0: off.
	Alignment time.Duration
	// TickInterval is how often an idle task re-evaluates its watermark.
	// Default 200ms.
	TickInterval time.Duration
	// TransactionTimeout, default CheckpointInterval + 1m; must exceed
	// CheckpointInterval by at least 10s.
	TransactionTimeout time.Duration
	// Store holds the keyspaces of the tasks. Required.
	Store *state.Store
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Now is the processing-time clock, default time.Now.
	Now func() time.Time
	// MaxPollRecords bounds one poll. Default 10000.
	MaxPollRecords int
	// QueueDepth is the number of polled batches a task may have queued.
	// Default 8.
	QueueDepth int
	// AtLeastOnce turns exactly-once off: no transactions; at a checkpoint
	// the producer is flushed and then the offsets are committed, so a
	// crash may repeat output. For comparison in benchmarks; default off.
	AtLeastOnce bool
	// RunOn lets tasks go on past a checkpoint's barrier: the records
	// polled before the checkpoint are dispatched once every task has
	// prepared, and processed while the transaction ends, their output
	// held until the next one begins, so the pause a task sees is its
	// barrier and the start of its local commit (which runs on beside
	// it: state.Keyspace.CommitSealed), not the broker's round trips nor
	// Pebble's commit. Off (the
	// zero value): every task waits from its barrier until the
	// transaction has ended; braid's job turns it on unless configured
	// otherwise (checkpoint_run_on). The final checkpoint, and every
	// checkpoint under AtLeastOnce, hold the tasks.
	RunOn bool
	// LocalExchange hands what a task writes to an internal topic, and the
	// watermark it would send there, to the task of the destination
	// partition in memory when that runs on the same instance, as well as
	// writing it to the topic (exchange.go): downstream watermarks follow
	// the sources within a checkpoint instead of a commit later. It holds
	// at most FetchBufferBytes/4 bytes; what does not fit is read from
	// Kafka. Off (the zero value); braid's job turns it on unless
	// configured otherwise (local_exchange). Not under AtLeastOnce.
	LocalExchange bool
	// OnCheckpoint, if set, is called on the Run goroutine after every
	// checkpoint (metrics). It must not block.
	OnCheckpoint func(CheckpointInfo)
	// MaxRecordBytes is the largest record braid writes, in bytes of key,
	// value and headers (RecordBytes). Changelog records above it are cut
	// into chunks; any other record above it fails the checkpoint (the
	// Harness returns the error). Default 1,000,000 (DefaultMaxRecordBytes:
	// the broker's default message.max.bytes, 1,048,588, minus headroom).
	MaxRecordBytes int
	// MaxClockSkew bounds how far event time may run ahead of the Kafka
	// record timestamps (the producers' and brokers' clocks): Task.Observe
	// never lets a source's maximum pass the record's timestamp plus it,
	// the all-idle rule never moves a watermark past the largest record
	// timestamp seen plus it, and a restored watermark beyond that is
	// lowered. Operators send members further ahead to the late topic
	// themselves (or re-stamp them); this is the engine's safety net.
	// Default 10m.
	MaxClockSkew time.Duration
	// ProducerBufferBytes bounds the records produced but not yet
	// acknowledged by the brokers, in bytes (franz-go's MaxBufferedBytes):
	// a task that emits past it waits. Default 64 MiB; at least twice
	// MaxRecordBytes.
	ProducerBufferBytes int64
	// FetchBufferBytes bounds the records polled but not yet processed by
	// the tasks, in bytes (RecordBytes): the poll loop stops polling while
	// the tasks' queues hold more, and a poll takes no more records than
	// fit, at the mean record size, in the room left here and in
	// PendingStateBytes. The client's own fetch buffer is bounded
	// at half of it decompressed (4 concurrent fetches of
	// FetchBufferBytes/8 each, at least MaxRecordBytes: a fetch asks for
	// that over the ratio of decompressed to compressed bytes read so far,
	// see fetchSizer), so fetched input takes at most about 1.5 ×
	// FetchBufferBytes (plus a batch per fetch). A smaller share
	// (/32) read the input partitions further apart in event time: the KV
	// buffer overflowed (86 incidents instead of 6 on the 600 MB KV fleet
	// of the memory benchmark); fetches sized by that fleet's 8.5:1 ratio
	// (about FetchBufferBytes/68 as sent) gave 6. Default 64 MiB.
	FetchBufferBytes int64
	// PendingStateBytes bounds the state writes of all tasks that wait
	// for the next checkpoint (Pebble's indexed batches, which the tasks
	// read through, counted by capacity), and the committed ones Pebble
	// holds until its flush. The barrier reaches a task behind the records
	// queued for it, so the engine counts those too, at the state bytes per
	// input byte the last checkpoints saw: it stops polling while the
	// pending writes and what the queued input will add reach the bound,
	// and brings the checkpoint forward once the pending writes fill half
	// of it. Default 64 MiB.
	PendingStateBytes int64
	// FollowUpWait bounds how long a follow-up checkpoint waits for this
	// instance's tasks to read the watermark markers that the checkpoint
	// before it committed on the internal topics. While every task is
	// caught up with its sources, a checkpoint is followed (before the
	// next regular one) by up to as many follow-up checkpoints as the
	// internal topics have hops (Input.From): each runs as soon as every
	// task has read past the markers the previous one committed, or after
	// FollowUpWait, and only if meanwhile a task's watermark moved, it
	// emitted, or a marker it would send changed (while no task has, and
	// some task has not read its markers yet, it waits on, up to the next
	// regular checkpoint). So output that the
	// markers release is committed about a commit later instead of at the
	// next regular checkpoint. Not while a task reads a backlog.
	// Default min(CheckpointInterval/2, 500ms); negative: off. At most
	// CheckpointInterval/2.
	FollowUpWait time.Duration
	// RequestSpacing is the least time from a regular or requested
	// checkpoint to a requested one (Task.RequestCheckpoint): a steady
	// stream of requests brings about one checkpoint, with its
	// follow-ups, per RequestSpacing. Default 1s.
	RequestSpacing time.Duration
}

// Defaults of Config's buffer bounds.
const (
	DefaultProducerBufferBytes = 64 << 20
	DefaultFetchBufferBytes    = 64 << 20
	DefaultPendingStateBytes   = 64 << 20
	// producerBufferRecords bounds the records the producer buffers
	// (franz-go's MaxBufferedRecords); the byte bound is the one that
	// matters, this one only caps per-record overhead.
	producerBufferRecords = 1 << 18
)

// CheckpointInfo describes one finished checkpoint.
type CheckpointInfo struct {
	// Pause is how long tasks stopped processing: barrier to resume. A
	// task that runs on (Config.RunOn) stops for the barrier and
	// for applying the outcome: Pause is Barrier plus the longest apply
	// then.
	Pause time.Duration
	// Cycle is from the barrier to the outcome applied in every task and
	// polling resumed (the pause of a task held until the end).
	Cycle time.Duration
	// RanOn: the tasks went on past the barrier (Config.RunOn).
	RanOn bool
	// Barrier is from the barrier to every task having prepared (its
	// queued input processed, its state and output handed over).
	Barrier time.Duration
	// Commit is barrier to the end of the Kafka transaction.
	Commit time.Duration
	// Committed is false when the transaction aborted.
	Committed bool
	// Tasks is the number of tasks that took part.
	Tasks int
	// FollowUp: a follow-up checkpoint (Config.FollowUpWait).
	FollowUp bool
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 45 * time.Second // as franz-go's
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 5 * time.Second
	}
	if c.OutOfOrderness == 0 {
		c.OutOfOrderness = 10 * time.Second
	}
	if c.Idleness == 0 {
		c.Idleness = 30 * time.Second
	}
	if c.CaughtUpIdleness == 0 {
		c.CaughtUpIdleness = DefaultCaughtUpIdleness
	}
	if c.TickInterval == 0 {
		c.TickInterval = 200 * time.Millisecond
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = c.CheckpointInterval + time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 10000
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = 8
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.ProducerBufferBytes == 0 {
		c.ProducerBufferBytes = DefaultProducerBufferBytes
	}
	if c.FetchBufferBytes == 0 {
		c.FetchBufferBytes = DefaultFetchBufferBytes
	}
	if c.PendingStateBytes == 0 {
		c.PendingStateBytes = DefaultPendingStateBytes
	}
	if c.RequestSpacing <= 0 {
		c.RequestSpacing = time.Second
	}
	if c.FollowUpWait == 0 {
		c.FollowUpWait = min(c.CheckpointInterval/2, DefaultFollowUpWait)
	}
}

// DefaultFollowUpWait is the default of Config.FollowUpWait (when
// CheckpointInterval is at least 1s).
const DefaultFollowUpWait = 500 * time.Millisecond

// DefaultMaxClockSkew is the default of Config.MaxClockSkew.
const DefaultMaxClockSkew = 10 * time.Minute

// DefaultCaughtUpIdleness is the default of Config.CaughtUpIdleness.
const DefaultCaughtUpIdleness = 200 * time.Millisecond

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Group == "" {
		errs = append(errs, errors.New("engine: Config.Group is required"))
	}
	if c.TransactionalID == "" {
		errs = append(errs, errors.New("engine: Config.TransactionalID is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("engine: Config.Store is required"))
	}
	if c.CheckpointInterval < time.Second || c.CheckpointInterval > time.Minute {
		errs = append(errs, fmt.Errorf("engine: Config.CheckpointInterval %v is outside 1s–60s", c.CheckpointInterval))
	}
	if c.TransactionTimeout < c.CheckpointInterval+10*time.Second {
		errs = append(errs, fmt.Errorf("engine: Config.TransactionTimeout %v must exceed CheckpointInterval %v by at least 10s", c.TransactionTimeout, c.CheckpointInterval))
	}
	if c.MaxRecordBytes < 1024 {
		errs = append(errs, fmt.Errorf("engine: Config.MaxRecordBytes %d is below the minimum of 1024", c.MaxRecordBytes))
	}
	if c.ProducerBufferBytes < 2*int64(c.MaxRecordBytes) {
		errs = append(errs, fmt.Errorf("engine: Config.ProducerBufferBytes %d must be at least twice MaxRecordBytes %d", c.ProducerBufferBytes, c.MaxRecordBytes))
	}
	if c.FetchBufferBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("engine: Config.FetchBufferBytes %d is below the minimum of 1 MiB", c.FetchBufferBytes))
	}
	if c.MaxClockSkew < 0 {
		errs = append(errs, fmt.Errorf("engine: Config.MaxClockSkew %v must not be negative", c.MaxClockSkew))
	}
	if c.OutOfOrderness < 0 || c.Idleness < 0 {
		errs = append(errs, errors.New("engine: Config.OutOfOrderness and Config.Idleness must not be negative"))
	}
	if c.FollowUpWait > c.CheckpointInterval/2 {
		errs = append(errs, fmt.Errorf("engine: Config.FollowUpWait %v exceeds half of CheckpointInterval %v", c.FollowUpWait, c.CheckpointInterval))
	}
	if c.Alignment < 0 {
		errs = append(errs, fmt.Errorf("engine: Config.Alignment %v is negative", c.Alignment))
	}
	if c.CaughtUpIdleness > c.Idleness {
		errs = append(errs, fmt.Errorf("engine: Config.CaughtUpIdleness %v exceeds Idleness %v", c.CaughtUpIdleness, c.Idleness))
	}
	return errors.Join(errs...)
}

// Engine runs a Topology. Create with New, run with Run.
type Engine struct {
	cfg  Config
	topo Topology
	log  *slog.Logger

	sess session
	// fetches sizes the client's fetches (Run).
	fetches *fetchSizer

	mu struct {
		sync.Mutex
		// assigned: partition → topics of that partition currently assigned.
		assigned map[int32]map[string]bool
		// fresh: partitions assigned (and paused) since the Run goroutine
		// last looked.
		fresh map[int32]bool
		// published figures of the open tasks.
		tasks map[int32]*published
	}
	// tasks is touched only by the Run goroutine.
	tasks map[int32]*Task
	// aligned: the source partitions of each task that the Run goroutine
	// paused for Config.Alignment (bit i: source i), as published by the
	// task (published.ahead).
	aligned map[int32]uint64
	// floor: the least of the tasks' published floors, the newest event
	// time of the instance's slowest source partition with a backlog,
	// against which every task aligns its sources (Task.align).
	floor atomic.Int64
	// qbound: queueBound as Engine.align last computed it.
	qbound atomic.Int64
	// polled counts records dispatched since the last checkpoint (Run
	// goroutine only).
	polled int
	// recordBytes is the mean RecordBytes of the records dispatched
	// (a moving average; 0 before the first): pollSize turns the room
	// left for input into a number of records with it. Run goroutine.
	recordBytes int64
	// queued is the RecordBytes of the records dispatched to tasks and not
	// yet processed; a task signals drained when it lowers it.
	queued atomic.Int64
	// pending is the memory of every task's state writes since the last
	// checkpoint (Task.setPending).
	pending atomic.Int64
	// processed is the RecordBytes of the records the tasks processed
	// since the last checkpoint; amp, in thousandths, the state bytes
	// written per input byte processed, as the last checkpoints measured
	// it (at least the last one's, decaying by a quarter per checkpoint;
	// 0 until one is measured).
	processed atomic.Int64
	amp       atomic.Int64
	// flushing is the memory of committed state batches that Pebble holds
	// until their flush (state.Keyspace.TakeFlush): it counts against
	// PendingStateBytes, but a checkpoint cannot free it, so it holds
	// polling without bringing a checkpoint forward.
	flushing atomic.Int64
	drained  chan struct{}
	// opening: tasks being opened off the Run goroutine (Run goroutine
	// only); each sends its result to opened, then calls wake (the cancel
	// of the poll in progress).
	opening map[int32]*opening
	opened  chan openResult
	// restoring holds a token per restore from the changelog under way
	// (maxConcurrentRestores).
	restoring chan struct{}
	openWG    sync.WaitGroup
	wake      atomic.Pointer[context.CancelFunc]

	inputIndex map[string]int
	srcIndex   []int    // input index → source index (-1 for internal)
	sources    int      // inputs that are not internal
	srcTopics  []string // source index → topic
	internal   []string
	// xk numbers the topics the local exchange numbers records on:
	// internal topic k → k, global topic i of Topology.Globals →
	// len(internal)+i (the index of their sequences, Task.seqOut).
	xk map[string]int
	// internalFrom[k] lists the internal inputs (indexes into internal)
	// whose records may be forwarded to internal topic k.
	internalFrom [][]int
	// aside[k]: internal input k is Input.Aside; anyAside: some is.
	aside    []bool
	anyAside bool
	// deferred[k]: internal input k is Input.Deferred.
	deferred []bool
	// hops is the number of marker hops on the longest path through the
	// internal topics (1 without From, 0 without internal topics): the
	// most follow-up checkpoints after a regular one.
	hops int

	// marks holds the offsets of the markers produced in the current
	// transaction (markerPromise).
	marks markerOffsets
	// follow is the follow-up checkpoint in waiting (Run goroutine only);
	// followWait counts the tasks that have not read past their markers
	// yet, followUseful says that one of them moved its watermark or
	// emitted since the checkpoint.
	follow       followUp
	followWait   atomic.Int64
	followUseful atomic.Bool
	// wantAt is the earliest checkpoint a task asked for
	// (Task.RequestCheckpoint; unix ns, 0: none); lastStart is when the
	// last checkpoint began (unix ns): requests at or before it are met.
	// lastFresh is when the last regular or requested checkpoint began
	// (Run goroutine only): the next requested one comes RequestSpacing
	// later at the earliest.
	wantAt    atomic.Int64
	lastStart atomic.Int64
	lastFresh time.Time

	// The local exchange (exchange.go): the inbox of each partition's
	// task, xown[p] whether partition p is assigned to this instance
	// (messages to others are not kept), the epoch (messages of an older
	// one are dropped), the bytes it holds and their bound.
	xch    []*inbox
	xown   []atomic.Bool
	xepoch atomic.Uint64
	xbytes atomic.Int64
	xlimit int64
	// gx: the global tables' end of the exchange (globalExchange).
	gx globalExchange

	// sink replaces the transactional producer in a Harness.
	sink func(*kgo.Record)
	// committed returns the group's committed offsets of partition p of
	// every input topic; nil in a Harness.
	committed func(ctx context.Context, p int32) (map[string]int64, error)

	// chunkMu keeps the chunks of one record together (EmitChunks).
	chunkMu    sync.Mutex
	produceErr atomic.Pointer[error]
	// produceAborts counts the checkpoints in a row that a retryable
	// produce error aborted (Run goroutine).
	produceAborts int
	stats         Stats
}

// maxProduceAborts is how many checkpoints in a row a retryable produce
// error may abort before the job stops: an error that comes back each
// time the input is read again is not the broker's passing state.
const maxProduceAborts = 5

// retryableProduce reports whether a failed produce is worth going back to
// the last checkpoint for: the transaction, not the record, was the
// problem. INVALID_PRODUCER_EPOCH is what a transaction the coordinator
// aborted on timeout answers; TRANSACTION_ABORTABLE (KIP-890) and the
// retriable errors are the broker's passing state. A record too large,
// an authorization failure, or PRODUCER_FENCED (another instance with this
// transactional id) would come back: those stop the job.
func retryableProduce(err error) bool {
	switch {
	case errors.Is(err, ErrRecordTooLarge), errors.Is(err, kerr.ProducerFenced):
		return false
	case errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.TransactionAbortable),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries):
		return true
	}
	return kerr.IsRetriable(err)
}

// Stats are the engine's counters. Safe for concurrent reads.
type Stats struct {
	RecordsIn       atomic.Int64
	RecordsOut      atomic.Int64
	Checkpoints     atomic.Int64
	Aborts          atomic.Int64
	LastPauseNanos  atomic.Int64
	LastCommitNanos atomic.Int64
	// ClampedEvents counts event times Task.Observe lowered to the record
	// timestamp plus MaxClockSkew.
	ClampedEvents atomic.Int64
	// Backpressure counts the polls held back because the tasks' queues
	// held more than FetchBufferBytes.
	Backpressure atomic.Int64
	// EarlyCheckpoints counts checkpoints brought forward because the
	// tasks' pending state writes passed Config.PendingStateBytes.
	EarlyCheckpoints atomic.Int64
	// PendingStatePeak is the largest total of pending state writes a
	// checkpoint's barrier found (bytes, the high-water mark of what
	// PendingStateBytes bounds).
	PendingStatePeak atomic.Int64
	// FetchBytes is the size of the client's fetches now, in bytes as
	// the brokers send them: the fetch buffer's share over the measured
	// ratio of decompressed to compressed bytes (fetchSizer).
	FetchBytes atomic.Int64
	// FollowUpCheckpoints counts follow-up checkpoints
	// (Config.FollowUpWait), committed or not; Checkpoints and Aborts
	// count them too.
	FollowUpCheckpoints atomic.Int64
	// RequestedCheckpoints counts checkpoints that came before the
	// regular schedule because a task asked for one
	// (Task.RequestCheckpoint), committed or not.
	RequestedCheckpoints atomic.Int64
	// AlignmentPauses counts source partitions paused because they ran
	// more than Config.Alignment ahead of their task's slowest source
	// with a backlog; AlignedPartitions is how many are paused now.
	AlignmentPauses   atomic.Int64
	AlignedPartitions atomic.Int64
	// ExchangeRecords counts internal records processed from the local
	// exchange (Config.LocalExchange), ExchangeSkipped the copies read
	// from Kafka that were processed already, ExchangeGaps the records
	// the exchange left to Kafka because its memory was full.
	ExchangeRecords atomic.Int64
	ExchangeSkipped atomic.Int64
	ExchangeGaps    atomic.Int64
}

// New validates cfg and topo.
func New(cfg Config, topo Topology) (*Engine, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if topo.Name == "" || len(topo.Inputs) == 0 || topo.Partitions <= 0 || topo.NewProcessor == nil {
		return nil, errors.New("engine: Topology needs Name, Inputs, Partitions > 0 and NewProcessor")
	}
	e := &Engine{cfg: cfg, topo: topo, log: cfg.Logger, tasks: map[int32]*Task{}, aligned: map[int32]uint64{}, inputIndex: map[string]int{}, xk: map[string]int{}}
	e.floor.Store(windows.MaxTime)
	e.xch = make([]*inbox, topo.Partitions)
	for p := range e.xch {
		e.xch[p] = newInbox()
	}
	e.xown = make([]atomic.Bool, topo.Partitions)
	e.gx.init(len(topo.Globals), int(topo.Partitions))
	e.xlimit = cfg.FetchBufferBytes / 4
	e.mu.assigned = map[int32]map[string]bool{}
	e.mu.fresh = map[int32]bool{}
	e.opening = map[int32]*opening{}
	e.opened = make(chan openResult, topo.Partitions)
	e.restoring = make(chan struct{}, maxConcurrentRestores)
	e.drained = make(chan struct{}, 1)
	e.mu.tasks = map[int32]*published{}
	var hops []int // per internal input
	for i, in := range topo.Inputs {
		if _, dup := e.inputIndex[in.Topic]; dup {
			return nil, fmt.Errorf("engine: input topic %s listed twice", in.Topic)
		}
		e.inputIndex[in.Topic] = i
		if in.Internal {
			from := make([]int, 0, len(in.From))
			for _, name := range in.From {
				j := slices.Index(e.internal, name)
				if j < 0 {
					return nil, fmt.Errorf("engine: input %s: From %s is not an internal input listed before it", in.Topic, name)
				}
				from = append(from, j)
			}
			e.xk[in.Topic] = len(e.internal)
			e.internal = append(e.internal, in.Topic)
			e.internalFrom = append(e.internalFrom, from)
			e.aside = append(e.aside, in.Aside)
			e.deferred = append(e.deferred, in.Deferred)
			e.anyAside = e.anyAside || in.Aside
			h := 1 // hops of the markers on this topic: one more than any in From
			for _, j := range from {
				h = max(h, hops[j]+1)
			}
			hops = append(hops, h)
			e.hops = max(e.hops, h)
			e.srcIndex = append(e.srcIndex, -1)
		} else {
			if len(in.From) > 0 || in.Aside || in.Deferred {
				return nil, fmt.Errorf("engine: input %s: From, Aside and Deferred are for internal inputs", in.Topic)
			}
			e.srcIndex = append(e.srcIndex, e.sources)
			e.srcTopics = append(e.srcTopics, in.Topic)
			e.sources++
		}
	}
	for i, g := range topo.Globals {
		e.xk[g.Topic] = len(e.internal) + i
	}
	return e, nil
}

// Stats returns the engine's live counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Run consumes until ctx is done, then makes a final checkpoint (bounded by
// the transaction timeout) and leaves the group.
func (e *Engine) Run(ctx context.Context) (err error) {
	topics := make([]string, len(e.topo.Inputs))
	for i, in := range e.topo.Inputs {
		topics[i] = in.Topic
	}
	opts := append([]kgo.Opt{}, e.cfg.ClientOpts...)
	if e.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(e.cfg.InstanceID))
	}
	if e.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(e.cfg.SessionTimeout))
	}
	opts = append(opts,
		kgo.ConsumerGroup(e.cfg.Group),
		kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.Balancers(CoPartitionedBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers come to the poll loop (and are never
		// processed): a task's position then moves past the marker that
		// ends a transactional producer's partition, as the consumer's
		// does, so that it can be seen to reach the partition's end.
		kgo.KeepControlRecords(),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onRevoked),
		kgo.MaxBufferedRecords(producerBufferRecords),
		kgo.MaxBufferedBytes(int(min(e.cfg.ProducerBufferBytes, 1<<40))),
		// Room for a record of MaxRecordBytes with its record and batch
		// overhead; the broker's own limit is message.max.bytes.
		kgo.ProducerBatchMaxBytes(int32(min(e.cfg.MaxRecordBytes+48_000, 1<<30))),
	)
	e.fetches = newFetchSizer(e.fetchShare(), &e.stats.FetchBytes)
	if e.cfg.Alignment > 0 {
		// A partition resumed is fetched only once the fetch under way
		// returns; one of partitions at their end waits the broker's
		// whole wait (franz-go's default 5s), the instance's slowest
		// partition among them.
		opts = append(opts, kgo.FetchMaxWait(alignedFetchWait))
		e.fetches.partition = alignedPartitionFetchBytes
	}
	opts = append(opts, e.fetches.opts()...)
	var sess session
	if e.cfg.AtLeastOnce {
		opts = append(opts, kgo.DisableAutoCommit())
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("engine: create client: %w", err)
		}
		sess = atLeastOnce{cl}
	} else {
		opts = append(opts, kgo.TransactionalID(e.cfg.TransactionalID), kgo.TransactionTimeout(e.cfg.TransactionTimeout))
		s, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			return fmt.Errorf("engine: create client: %w", err)
		}
		sess = s
	}
	e.sess = sess
	e.fetches.attach(sess.Client())
	e.committed = e.fetchCommitted
	gctx, stopGlobals := context.WithCancel(context.Background())
	globalsDone := make(chan struct{})
	go func() {
		defer close(globalsDone)
		if err := e.readGlobals(gctx); err != nil {
			e.log.Error("global tables stopped", "err", err)
		}
	}()
	ectx, stopEnds := context.WithCancel(context.Background())
	endsDone := make(chan struct{})
	go func() {
		defer close(endsDone)
		e.watchEnds(ectx, sess.Client())
	}()
	defer func() {
		stopEnds()
		<-endsDone
		stopGlobals()
		<-globalsDone
		e.stopOpening()
		if cerr := e.closeTasks(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		sess.Close()
	}()

	if err := sess.Begin(); err != nil {
		return fmt.Errorf("engine: begin transaction: %w", err)
	}
	next := e.cfg.Now().Add(e.cfg.CheckpointInterval)
	for {
		due := e.follow.due(next)
		if at := e.wanted(due); at.Before(due) && !e.follow.armed && e.live() {
			// A request comes first. An armed follow-up meets it
			// (followUpDue): the poll must not end before that is due.
			due = at
		}
		e.align()
		e.waitQueued(ctx, due)
		pollCtx, cancel := context.WithDeadline(ctx, due)
		e.wake.Store(&cancel)
		if len(e.opened) > 0 || e.freshAssignment() {
			// A task finished opening, or partitions were assigned,
			// while no poll was there to end: act on it now.
			cancel()
		}
		if e.follow.armed && e.followWait.Load() <= 0 {
			cancel() // the tasks have read the markers: follow up now
		}
		var fetches kgo.Fetches
		if !e.stateFull() {
			fetches = sess.PollRecords(pollCtx, e.pollSize())
		}
		// Else the tasks' pending writes are full: checkpoint now,
		// without polling first. A poll would return what the client
		// has buffered even so, and in a backlog that is a fetch's
		// worth of records processed, and written to state, before
		// the barrier.
		e.wake.Store(nil)
		cancel()
		if fetches.NumRecords() > 0 {
			afterPoll(ctx, fetches)
		}
		if err := e.pollErr(fetches); err != nil {
			return err
		}
		if err := e.applyAssignment(); err != nil {
			return err
		}
		if err := e.taskErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			// Everything the last poll returned is dispatched before the
			// barrier: the session commits the polled offsets with this
			// checkpoint, so the records must be in it.
			if err := e.finalCheckpoint(fetches); err != nil {
				return fmt.Errorf("engine: final checkpoint: %w", err)
			}
			return nil
		}
		// What the poll returned goes to the tasks now, or — when a
		// checkpoint comes first — once they have passed its barrier, to
		// be processed while its transaction ends (checkpoint).
		ahead := fetches
		now := e.cfg.Now()
		if now.Before(next) && e.stateFull() {
			// The writes waiting for the checkpoint are what the tasks
			// hold in memory besides their caches: commit them now.
			e.stats.EarlyCheckpoints.Add(1)
			next = now
		}
		if now.Before(next) && e.followUpDue(now) {
			// Commit what the markers of the last checkpoint released;
			// the regular schedule stays.
			step := e.follow.step + 1
			e.follow = followUp{}
			if e.followUseful.Load() || e.requestDue(now) {
				e.stats.FollowUpCheckpoints.Add(1)
				if err := e.checkpoint(true, step, ahead); err != nil {
					return err
				}
				ahead = nil
			}
		}
		if now = e.cfg.Now(); now.Before(next) && !e.follow.armed && e.requestDue(now) && e.live() {
			// A task asked for a checkpoint by now (live KV events
			// waiting on every task's commit) and no follow-up is on
			// its way to meet it: one like a regular checkpoint, with
			// its follow-ups; the schedule stays. Not while some task
			// reads a backlog: a task that has caught up with its own
			// sources would otherwise bring a checkpoint a second to
			// the whole instance until the others have.
			e.stats.RequestedCheckpoints.Add(1)
			if err := e.checkpoint(true, 0, ahead); err != nil {
				return err
			}
			ahead = nil
		}
		if !now.Before(next) {
			if err := e.checkpoint(true, 0, ahead); err != nil {
				return err
			}
			ahead = nil
			// At a fixed rate: the checkpoint's own pause and its
			// follow-ups do not stretch the interval (the watermark a
			// regular checkpoint carries downstream ages by at most
			// one interval), unless it ran past the next one.
			next = next.Add(e.cfg.CheckpointInterval)
			if now := e.cfg.Now(); next.Before(now) {
				next = now.Add(e.cfg.CheckpointInterval)
			}
		}
		e.dispatch(ahead)
	}
}

// pollErr logs the fetch errors of a poll and returns the one that ends
// the job, if any.
func (e *Engine) pollErr(fetches kgo.Fetches) error {
	var fatal error
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			fatal = err
			return
		}
		if errors.Is(err, kerr.FencedInstanceID) {
			// Another instance joined the group with this one's
			// InstanceID and took its tasks; its producer, with the
			// same transactional id, fences this one's. The group
			// will not take this instance back: it is the zombie.
			fatal = fmt.Errorf("another member joined group %s with instance id %s: %w", e.cfg.Group, e.cfg.InstanceID, err)
			return
		}
		e.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
	})
	if fatal != nil {
		return fmt.Errorf("engine: poll: %w", fatal)
	}
	return nil
}

// runOnWith gives the tasks, past a run-on barrier, what was polled before
// it and what the client has fetched since (up to QueueDepth polls that do
// not wait, while the input is not full): no poll may run while the
// transaction ends. It returns a poll's error that ends the job.
func (e *Engine) runOnWith(ahead kgo.Fetches) error {
	e.dispatch(ahead)
	for range e.cfg.QueueDepth {
		if e.inputFull() {
			return nil
		}
		more := e.sess.PollRecords(nil, e.pollSize()) //nolint:staticcheck // nil: take what is buffered, do not wait
		if err := e.pollErr(more); err != nil {
			return err
		}
		if more.NumRecords() == 0 {
			return nil
		}
		e.dispatch(more)
	}
	return nil
}

// sealedOffsets are the input offsets of every task's checkpoint sealed at
// the barrier of a run-on checkpoint: topic → partition → next offset. Run
// goroutine, after the barrier's replies.
func (e *Engine) sealedOffsets() map[string]map[int32]int64 {
	offs := map[string]map[int32]int64{}
	for p, t := range e.tasks {
		for topic, o := range t.sealOffs {
			if offs[topic] == nil {
				offs[topic] = map[int32]int64{}
			}
			offs[topic][p] = o
		}
	}
	return offs
}

// commitSealed sets the offsets req commits to offs, those of the tasks'
// sealed checkpoints, and leaves out a partition that has none (no task
// of this checkpoint read it): its committed offset stays.
func commitSealed(req *kmsg.TxnOffsetCommitRequest, offs map[string]map[int32]int64) {
	topics := req.Topics[:0]
	for _, tp := range req.Topics {
		parts := tp.Partitions[:0]
		for _, p := range tp.Partitions {
			o, ok := offs[tp.Topic][p.Partition]
			if !ok {
				continue
			}
			if o != p.Offset {
				p.Offset, p.LeaderEpoch = o, -1
			}
			parts = append(parts, p)
		}
		if tp.Partitions = parts; len(parts) > 0 {
			topics = append(topics, tp)
		}
	}
	req.Topics = topics
}

// dispatch sends what a poll returned to the tasks. Run goroutine.
func (e *Engine) dispatch(fetches kgo.Fetches) {
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if len(ftp.Records) == 0 {
			return
		}
		t := e.tasks[ftp.Partition]
		if t == nil {
			return // revoked meanwhile; the transaction aborts
		}
		e.polled += len(ftp.Records) // markers too: they move the committed offsets
		n, data := int64(0), 0
		for _, r := range ftp.Records {
			n += int64(RecordBytes(r))
			if !r.Attrs.IsControl() {
				data++
			}
		}
		e.stats.RecordsIn.Add(int64(data))
		e.queued.Add(n)
		input := e.inputIndex[ftp.Topic]
		if src := e.srcIndex[input]; src >= 0 && src < len(t.pub.queued) {
			t.pub.queued[src].Add(n)
		}
		if mean := n / int64(len(ftp.Records)); e.recordBytes == 0 {
			e.recordBytes = mean
		} else {
			e.recordBytes += (mean - e.recordBytes) / 8
		}
		// The partition's end when it was fetched: read_committed
		// reads up to the last stable offset.
		end := ftp.LastStableOffset
		if end < 0 {
			end = ftp.HighWatermark
		}
		t.in <- taskMsg{kind: msgRecords, input: input, recs: ftp.Records, bytes: n, end: end}
	})
}

// ampOne is an amplification of 1 in Engine.amp's thousandths.
const ampOne = 1000

// stateAhead is the tasks' pending state writes plus what the input queued
// for them is expected to add before they reach a barrier.
func (e *Engine) stateAhead() int64 {
	return e.pending.Load() + e.flushing.Load() + e.queued.Load()*e.ampNow()/ampOne
}

// ampNow is the state bytes per input byte (in thousandths) expected of
// the input not processed yet: the last checkpoints' measure, or this
// epoch's so far when it writes more per byte (the first epoch, a change
// of input), or ampPrior before anything is measured.
func (e *Engine) ampNow() int64 {
	p, a := e.pending.Load(), e.amp.Load()
	if in := e.processed.Load(); in >= ampMinInput {
		if live := p * ampOne / in; a == 0 || live > a {
			a = live
		}
	} else if a == 0 {
		a = ampPrior
	}
	return max(a, 1)
}

const (
	// ampMinInput is the least input an amplification is measured over.
	ampMinInput = 256 << 10
	// ampPrior is the amplification assumed until one is measured: the
	// first records queued before any is processed stay within an eighth
	// of the bound's room.
	ampPrior = 8 * ampOne
)

// stateShort reports whether the room left for state writes before the
// checkpoint is taken by what is pending and queued: polling waits.
func (e *Engine) stateShort() bool {
	return e.stateAhead() >= e.cfg.PendingStateBytes
}

// stateFull reports whether the checkpoint should come now: the pending
// writes fill half the bound. The other half is room for what the input
// queued meanwhile will add before the barrier (stateShort holds polling
// so that it fits), for a batch buffer's growth by doubling, and for the
// last checkpoint's batch while Pebble flushes it.
func (e *Engine) stateFull() bool {
	return e.pending.Load() >= e.cfg.PendingStateBytes/2
}

// atBarrier notes the pending state writes that the checkpoint whose
// barrier every task has just passed found (Stats.PendingStatePeak), and
// updates the state bytes per input byte from its epoch. Run goroutine,
// tasks held.
func (e *Engine) atBarrier() {
	in, out := e.processed.Swap(0), e.pending.Load()
	if held := out + e.flushing.Load(); held > e.stats.PendingStatePeak.Load() {
		e.stats.PendingStatePeak.Store(held)
	}
	if in < ampMinInput {
		return // too little input to say
	}
	a := e.amp.Load() * 3 / 4
	if m := out * ampOne / in; m > a {
		a = m
	}
	e.amp.Store(max(a, 1))
}

// waitQueued holds the poll loop while the tasks' queues hold more than
// FetchBufferBytes, or while the state writes pending and expected from
// the queued input reach PendingStateBytes (stateShort), until they drain,
// the pending writes call for a checkpoint (stateFull), the checkpoint is
// due or ctx ends.
func (e *Engine) waitQueued(ctx context.Context, next time.Time) {
	held := func() bool { return e.inputFull() && !e.stateFull() }
	if !held() {
		return
	}
	e.stats.Backpressure.Add(1)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for held() {
		select {
		case <-e.drained:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// pollSize is how many records the next poll may take: as many as fit,
// at the mean record size, into the room the tasks' queues have left
// (FetchBufferBytes) and into what the state writes may still grow by
// before the checkpoint (PendingStateBytes, at the measured writes per
// input byte), at least one and at most MaxPollRecords. A poll returns
// what the client has buffered, and a backlog's fetch holds more than
// either share: without the bound one poll of large records (KV-block
// events) filled both twice over before the barrier could come.
func (e *Engine) pollSize() int {
	most := e.cfg.MaxPollRecords
	if e.recordBytes <= 0 {
		return min(most, pollFirst)
	}
	room := min(e.cfg.FetchBufferBytes-e.queued.Load(), (e.cfg.PendingStateBytes-e.stateAhead())*ampOne/e.ampNow())
	return int(min(max(room/e.recordBytes, 1), int64(most)))
}

// pollFirst bounds the polls before a record size is known.
const pollFirst = 16

// inputFull reports whether the tasks' queues hold more than
// FetchBufferBytes, or the state writes pending and expected from the
// queued input reach PendingStateBytes (stateShort): no more may be
// polled for now.
func (e *Engine) inputFull() bool {
	return e.queued.Load() > e.cfg.FetchBufferBytes || e.stateShort()
}

// afterPoll runs between a poll that returned records and their dispatch:
// the failpoint after-poll, replaced by tests to hold the loop in the window
// where a SIGTERM used to lose the polled records.
var afterPoll = func(ctx context.Context, _ kgo.Fetches) { failpointHold(ctx, "after-poll") }

func (e *Engine) taskErr() error {
	for _, t := range e.tasks {
		select {
		case err := <-t.errc:
			return fmt.Errorf("engine: task %d: %w", t.Partition, err)
		default:
		}
	}
	return nil
}

// checkpoint runs one checkpoint: barrier, prepare, end the transaction,
// apply the outcome in every task, and begin the next transaction. step is
// 0 for a regular checkpoint, n for the n-th follow-up after one. ahead is
// what the last poll returned, not dispatched yet: when the tasks run on
// (Config.RunOn, begin), it goes to them once they have passed the
// barrier, to be processed while the transaction ends, and the offsets the
// transaction commits are those of the barrier; otherwise it is dispatched
// before the barrier. It runs to its end whatever happens to Run's context
// (the final checkpoint follows it).
func (e *Engine) checkpoint(begin bool, step int, ahead kgo.Fetches) error {
	start := time.Now()
	runOn := begin && e.cfg.RunOn && !e.cfg.AtLeastOnce
	if !runOn || e.assignmentChanging() {
		// Before the tasks change: what was polled is for the tasks
		// that were there when it was.
		e.dispatch(ahead)
		ahead = nil
	}
	if err := e.applyAssignment(); err != nil {
		return err
	}
	now := e.cfg.Now()
	e.metRequests(now.UnixNano())
	if step == 0 {
		e.lastFresh = now
	}
	replies := make(chan error, len(e.tasks))
	for _, t := range e.tasks {
		t.in <- taskMsg{kind: msgBarrier, reply: replies, runOn: runOn}
	}
	var prepErr error
	for range e.tasks {
		if err := <-replies; err != nil && prepErr == nil {
			prepErr = err
		}
	}
	barrier := time.Since(start)
	e.atBarrier()
	// The transaction's end gets TransactionTimeout from here, not from
	// the checkpoint's start: a task that was slow to reach the barrier
	// does not use up the time the broker has to answer.
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.TransactionTimeout)
	defer cancel()
	// What the tasks published is what they prepared with: a task held
	// waits for the outcome, one that runs on holds its output.
	live := e.live()
	try := kgo.TryCommit
	if prepErr != nil || e.produceErr.Load() != nil {
		try = kgo.TryAbort
	}
	polled := e.polled
	e.polled = 0
	if runOn {
		// The session commits the offsets of everything polled, ahead
		// too: the commit gets the barrier's instead, those the tasks'
		// checkpoints have.
		offs := e.sealedOffsets()
		ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
			commitSealed(req, offs)
			return nil
		})
		if try == kgo.TryCommit {
			if err := e.runOnWith(ahead); err != nil {
				try, prepErr = kgo.TryAbort, err
			}
		}
	}
	if try == kgo.TryCommit && polled == 0 && !e.cfg.AtLeastOnce && !e.stillMember(ctx) {
		// Nothing was polled in this transaction, so End sends no offset
		// commit and the broker cannot fence a member that was removed
		// from the group (a paused zombie): check membership ourselves.
		e.log.Warn("not a group member any more; aborting the checkpoint")
		try = kgo.TryAbort
	}
	failpoint("before-end-txn")
	committed, endErr := e.sess.End(ctx, try)
	if committed {
		failpoint("after-end-txn")
	}
	// End flushed: every marker's promise has run.
	marks := e.marks.take()
	e.stats.LastCommitNanos.Store(int64(time.Since(start)))
	if perr := e.produceErr.Swap(nil); perr != nil {
		switch {
		case prepErr == nil && !committed && retryableProduce(*perr) && e.produceAborts < maxProduceAborts:
			// The transaction was lost on the broker's side (timed
			// out while a task was stuck, aborted by the coordinator):
			// nothing of it is committed, the tasks reload the last
			// checkpoint and the input is read again.
			e.produceAborts++
			e.log.Warn("produce failed; transaction aborted, going back to the last checkpoint", "err", *perr, "in_a_row", e.produceAborts)
		default:
			e.log.Error("produce failed; transaction aborted", "err", *perr)
			if prepErr == nil {
				prepErr = *perr
			}
		}
	} else if committed {
		e.produceAborts = 0
	}
	if endErr != nil {
		e.log.Warn("end transaction", "err", endErr)
	}
	if errors.Is(endErr, kerr.ProducerFenced) {
		// A newer producer with this transactional id (a restarted or
		// duplicate instance) aborted the transaction; this producer can
		// never begin another.
		return fmt.Errorf("engine: fenced by another instance with transactional id %s: %w", e.cfg.TransactionalID, endErr)
	}
	if begin {
		err := e.sess.Begin()
		if err != nil && endErr != nil {
			// End failed part way (its context ran out while the broker
			// was slow) and left the transaction open: abort it — nothing
			// of it committed (committed is false), the tasks reload the
			// last checkpoint — and begin anew rather than end the job.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, aerr := e.sess.End(actx, kgo.TryAbort)
			cancel()
			committed = false
			if err = e.sess.Begin(); err != nil {
				err = fmt.Errorf("%w (after the failed end: %v; abort: %v)", err, endErr, aerr)
			}
		}
		if err != nil {
			return fmt.Errorf("engine: begin transaction: %w", err)
		}
	}
	outcome := msgCommit
	var follow map[int32][]int64
	if !committed {
		outcome = msgAbort
		e.bumpExchange() // what the tasks exchanged is rolled back
		e.stats.Aborts.Add(1)
		e.follow = followUp{}
	} else {
		if e.stats.Checkpoints.Add(1) == 1 {
			e.log.Info("first checkpoint committed", "tasks", len(e.tasks))
		}
		if begin {
			follow = e.armFollowUp(marks, live, step)
		}
	}
	for _, t := range e.tasks {
		t.in <- taskMsg{kind: outcome, reply: replies, follow: follow[t.Partition]}
	}
	var applyErr error
	for range e.tasks {
		if err := <-replies; err != nil && applyErr == nil {
			applyErr = err
		}
	}
	cycle := time.Since(start)
	pause := cycle
	if runOn {
		// The tasks stopped for their barrier and for applying the
		// outcome; they ran on in between.
		pause = barrier
		var apply time.Duration
		for _, t := range e.tasks {
			apply = max(apply, t.applied)
		}
		pause += apply
	}
	e.stats.LastPauseNanos.Store(int64(pause))
	if e.cfg.OnCheckpoint != nil {
		e.cfg.OnCheckpoint(CheckpointInfo{Pause: pause, Cycle: cycle, RanOn: runOn, Barrier: barrier, Commit: time.Duration(e.stats.LastCommitNanos.Load()), Committed: committed, Tasks: len(e.tasks), FollowUp: step > 0})
	}
	if applyErr != nil {
		return fmt.Errorf("engine: apply checkpoint: %w", applyErr)
	}
	if prepErr != nil {
		return fmt.Errorf("engine: checkpoint: %w", prepErr)
	}
	if endErr != nil && ctx.Err() != nil {
		return fmt.Errorf("engine: end transaction: %w", endErr)
	}
	if !committed && !begin && prepErr == nil {
		if endErr == nil {
			return errFinalAborted
		}
		return fmt.Errorf("engine: final checkpoint aborted: %v", endErr)
	}
	return nil
}

// errFinalAborted: the final checkpoint's transaction ended in an abort
// without an error of the engine's or of the broker's answer to End: the
// session found the transaction abortable (an offset commit the group or
// coordinator refused for the moment, a transaction the broker had
// aborted).
var errFinalAborted = errors.New("engine: final checkpoint aborted")

// Stopping: how often the final checkpoint is tried, and how long each
// retry may read to get back to where the aborted one was.
const (
	finalAttempts = 3
	finalReread   = 10 * time.Second
)

// finalCheckpoint makes the last checkpoint before Run returns, with what
// the last poll returned. If its transaction is aborted for a passing
// reason (errFinalAborted), the tasks are back at the last committed
// checkpoint and the consumer at its offsets: in a new transaction the
// engine reads again up to where the client had read (for at most
// finalReread) and tries again, finalAttempts times in all, so that a
// stop commits what the instance processed rather than leaving it to be
// read again. Run goroutine.
func (e *Engine) finalCheckpoint(fetches kgo.Fetches) error {
	for attempt := 1; ; attempt++ {
		target := e.sess.Client().UncommittedOffsets()
		err := e.checkpoint(false, 0, fetches)
		if !errors.Is(err, errFinalAborted) || attempt == finalAttempts {
			return err
		}
		e.log.Warn("final checkpoint aborted; reading again to where it was and trying again", "attempt", attempt)
		if err := e.sess.Begin(); err != nil {
			return fmt.Errorf("engine: begin transaction: %w", err)
		}
		if fetches, err = e.readTo(target); err != nil {
			return err
		}
	}
}

// readTo polls, dispatching what it gets, until the client's position has
// reached target on every partition, or finalReread has passed; it
// returns the last poll, not dispatched (the checkpoint does that before
// its barrier).
func (e *Engine) readTo(target map[string]map[int32]kgo.EpochOffset) (kgo.Fetches, error) {
	deadline := time.Now().Add(finalReread)
	reached := func() bool {
		pos := e.sess.Client().UncommittedOffsets()
		for topic, ps := range target {
			for p, o := range ps {
				if at, ok := pos[topic][p]; !ok || at.Offset < o.Offset {
					if e.tasks[p] == nil {
						continue // no task here any more
					}
					return false
				}
			}
		}
		return true
	}
	var last kgo.Fetches
	for !reached() && time.Now().Before(deadline) {
		e.dispatch(last)
		last = nil
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		e.waitQueued(ctx, deadline)
		if !e.stateFull() {
			last = e.sess.PollRecords(ctx, e.pollSize())
		}
		cancel()
		if err := e.pollErr(last); err != nil {
			return nil, err
		}
		if err := e.taskErr(); err != nil {
			return nil, err
		}
	}
	return last, nil
}

func (e *Engine) onAssigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	// Nothing is fetched for a new partition until its task is open
	// (install resumes it): called before fetching of m begins.
	cl.PauseFetchPartitions(m)
	e.mu.Lock()
	defer e.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			if e.mu.assigned[p] == nil {
				e.mu.assigned[p] = map[string]bool{}
			}
			e.mu.assigned[p][topic] = true
			e.mu.fresh[p] = true
			e.xown[p].Store(true)
		}
	}
	if wake := e.wake.Load(); wake != nil {
		(*wake)() // end the poll in progress: start opening the tasks now
	}
}

// assignmentChanging reports whether applyAssignment would close or
// install a task now. Run goroutine.
func (e *Engine) assignmentChanging() bool {
	if len(e.opened) > 0 || e.freshAssignment() {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for p := range e.tasks {
		if e.mu.assigned[p] == nil {
			return true
		}
	}
	return false
}

// freshAssignment reports whether partitions were assigned since
// applyAssignment last looked.
func (e *Engine) freshAssignment() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.fresh) > 0
}

func (e *Engine) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			delete(e.mu.assigned[p], topic)
			if len(e.mu.assigned[p]) == 0 {
				delete(e.mu.assigned, p)
				e.xown[p].Store(false)
			}
		}
	}
}

// opening is a task being opened (its state restored) off the Run
// goroutine.
type opening struct {
	cancel context.CancelFunc
	// reopen: the partition was revoked and assigned again meanwhile, so
	// what this opening compared with may be out of date; open again.
	reopen bool
}

type openResult struct {
	p   int32
	t   *Task
	err error
}

// applyAssignment closes the tasks of revoked partitions, starts opening
// tasks for newly assigned ones, and installs the tasks whose opening has
// finished. Opening — reading the committed offsets, rebuilding state from
// the changelog, the processor's Restore — runs on a goroutine of its own,
// however long it takes: the partition's fetching is paused meanwhile
// (onAssigned), the task takes no part in checkpoints, and the other tasks
// go on. Called from the Run goroutine only.
func (e *Engine) applyAssignment() error {
	e.mu.Lock()
	want := make(map[int32]bool, len(e.mu.assigned))
	for p := range e.mu.assigned {
		want[p] = true
	}
	fresh := e.mu.fresh
	e.mu.fresh = map[int32]bool{}
	e.mu.Unlock()
	for p, t := range e.tasks {
		if !want[p] || fresh[p] {
			// Revoked, or revoked and assigned again since the last look
			// (another member may have committed meanwhile): close, and
			// open again below if it is still ours.
			if err := e.closeTask(p, t); err != nil {
				return err
			}
		}
	}
	for p, o := range e.opening {
		if !want[p] || fresh[p] {
			o.cancel()
			o.reopen = want[p]
		}
	}
	for done := false; !done; {
		select {
		case r := <-e.opened:
			if err := e.install(r, want); err != nil {
				return err
			}
		default:
			done = true
		}
	}
	for p := range want {
		if e.tasks[p] == nil && e.opening[p] == nil {
			e.startOpen(p)
		}
	}
	return nil
}

func (e *Engine) closeTask(p int32, t *Task) error {
	delete(e.tasks, p)
	e.unalign(p)
	e.mu.Lock()
	delete(e.mu.tasks, p)
	e.mu.Unlock()
	if err := t.close(); err != nil {
		return fmt.Errorf("engine: close task %d: %w", p, err)
	}
	return nil
}

func (e *Engine) startOpen(p int32) {
	ctx, cancel := context.WithCancel(context.Background())
	e.opening[p] = &opening{cancel: cancel}
	e.openWG.Add(1)
	go func() {
		defer e.openWG.Done()
		start := time.Now()
		t, err := e.openTaskNoRun(ctx, p)
		cancel()
		if err == nil && time.Since(start) > time.Second {
			e.log.Info("task opened", "stage", e.topo.Name, "partition", p, "took", time.Since(start).Round(time.Millisecond))
		}
		e.opened <- openResult{p: p, t: t, err: err}
		if wake := e.wake.Load(); wake != nil {
			(*wake)() // end the poll in progress, so the task starts now
		}
	}()
}

// install takes a finished opening: the task starts and its partitions are
// fetched again.
func (e *Engine) install(r openResult, want map[int32]bool) error {
	o := e.opening[r.p]
	delete(e.opening, r.p)
	if o == nil || o.reopen || !want[r.p] {
		if r.t != nil {
			if err := r.t.closeNoRun(); err != nil {
				e.log.Warn("close task opened for a revoked partition", "partition", r.p, "err", err)
			}
		}
		if o != nil && o.reopen && want[r.p] {
			e.startOpen(r.p)
		}
		return nil
	}
	if r.err != nil {
		return r.err
	}
	t := r.t
	if t.seek != nil {
		e.seek(r.p, t.seek)
	}
	go t.run()
	e.log.Info("task assigned", "stage", e.topo.Name, "partition", r.p)
	e.tasks[r.p] = t
	e.mu.Lock()
	e.mu.tasks[r.p] = &t.pub
	e.mu.Unlock()
	e.unalign(r.p)
	e.resume(r.p)
	return nil
}

// alignedFetchWait is the longest a fetch waits at the broker for
// records with alignment on (Config.Alignment).
const alignedFetchWait = 100 * time.Millisecond

// queueBound is how many bytes of a source partition's records a task
// may have queued with alignment on before the partition pauses: an
// even part of half the fetched-records share.
func (e *Engine) queueBound() int64 {
	n := int64(max(len(e.tasks), 1) * max(e.sources, 1))
	return max(e.cfg.FetchBufferBytes/(2*n), 64<<10)
}

// align pauses the source partitions that their tasks found too far ahead
// of their slowest source with a backlog (Config.Alignment), and resumes
// those no longer ahead. Run goroutine.
func (e *Engine) align() {
	if e.cfg.Alignment <= 0 || e.sess == nil {
		return
	}
	floor := int64(windows.MaxTime)
	for _, t := range e.tasks {
		floor = min(floor, t.pub.floor.Load())
	}
	if e.floor.Swap(floor) != floor {
		for _, t := range e.tasks {
			t.wakeAlign()
		}
	}
	pause, resume := map[string][]int32{}, map[string][]int32{}
	bound := e.queueBound()
	e.qbound.Store(bound)
	for p, t := range e.tasks {
		// A source whose records wait in the task's queue beyond the
		// bound pauses as well: what is queued is processed however far
		// ahead it runs, so the queue bounds how far a source overshoots.
		full := t.pub.full.Load()
		for i := range t.pub.queued {
			switch q := t.pub.queued[i].Load(); {
			case q > bound:
				full |= 1 << i
			case q <= bound/2:
				full &^= 1 << i
			}
		}
		t.pub.full.Store(full)
		was, now := e.aligned[p], t.pub.ahead.Load()|full
		for changed := was ^ now; changed != 0; changed &= changed - 1 {
			i := bits.TrailingZeros64(changed)
			if now&(1<<i) != 0 {
				pause[e.srcTopics[i]] = append(pause[e.srcTopics[i]], p)
				e.stats.AlignmentPauses.Add(1)
			} else {
				resume[e.srcTopics[i]] = append(resume[e.srcTopics[i]], p)
			}
		}
		e.stats.AlignedPartitions.Add(int64(bits.OnesCount64(now) - bits.OnesCount64(was)))
		if now == 0 {
			delete(e.aligned, p)
		} else {
			e.aligned[p] = now
		}
	}
	if len(pause) > 0 {
		e.sess.Client().PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		e.sess.Client().ResumeFetchPartitions(resume)
	}
}

// unalign forgets the alignment pauses of partition p's sources, for a
// task that closes or is installed (which resumes its partitions).
func (e *Engine) unalign(p int32) {
	if was := e.aligned[p]; was != 0 {
		e.stats.AlignedPartitions.Add(-int64(bits.OnesCount64(was)))
		delete(e.aligned, p)
	}
}

// resume fetches partition p of every input again.
func (e *Engine) resume(p int32) {
	if e.sess == nil {
		return
	}
	tps := map[string][]int32{}
	for _, in := range e.topo.Inputs {
		tps[in.Topic] = []int32{p}
	}
	e.sess.Client().ResumeFetchPartitions(tps)
}

// stopOpening cancels every opening and closes the tasks they produce.
func (e *Engine) stopOpening() {
	for _, o := range e.opening {
		o.cancel()
	}
	e.openWG.Wait()
	for done := false; !done; {
		select {
		case r := <-e.opened:
			if r.t != nil {
				if err := r.t.closeNoRun(); err != nil {
					e.log.Warn("close task", "partition", r.p, "err", err)
				}
			}
		default:
			done = true
		}
	}
	clear(e.opening)
}

// seek moves consumption of partition p of every input to offs (the start
// for an input offs lacks): the task's state is that of the checkpoint
// with these offsets. The session commits them with the next checkpoint.
func (e *Engine) seek(p int32, offs map[string]int64) {
	set := map[string]map[int32]kgo.EpochOffset{}
	for _, in := range e.topo.Inputs {
		o, ok := offs[in.Topic]
		if !ok {
			o = 0
		}
		set[in.Topic] = map[int32]kgo.EpochOffset{p: {Epoch: -1, Offset: o}}
	}
	e.sess.Client().SetOffsets(set)
}

func (e *Engine) closeTasks() error {
	var errs []error
	for p, t := range e.tasks {
		if err := t.close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close task %d: %w", p, err))
		}
		delete(e.tasks, p)
	}
	e.mu.Lock()
	clear(e.mu.tasks)
	e.mu.Unlock()
	return errors.Join(errs...)
}

// published holds what a task publishes for observers.
type published struct {
	watermark  atomic.Int64
	stateBytes atomic.Int64
	records    atomic.Int64
	// pending is the memory of the state writes since the last
	// checkpoint (state.Keyspace.PendingBytes).
	pending atomic.Int64
	// caughtUp is Task.CaughtUp; needStart: the position of some source
	// partition is not known to the task (nothing read or committed), so
	// the end checker also asks for the log start offset.
	caughtUp  atomic.Bool
	needStart atomic.Bool
	// ahead: the task's source partitions more than Config.Alignment
	// ahead of its slowest source with a backlog (bit i: source i), for
	// the Run goroutine to pause (Engine.align).
	ahead atomic.Uint64
	// queued[i]: the bytes of source i's records dispatched to the task
	// and not yet processed (kept with alignment on); full: the sources
	// paused for that (bit i), set by the Run goroutine (Engine.align).
	queued []atomic.Int64
	full   atomic.Uint64
	// floor: the newest event time of the task's slowest source
	// partition with a backlog (windows.MaxTime: none), for the
	// instance's floor (Engine.floor).
	floor atomic.Int64
	// caughtUpAt: the task's processing time (unix ns) when it last
	// published caughtUp true (Engine.live).
	caughtUpAt atomic.Int64
	// ends is where the end checker leaves what the brokers said.
	ends endReport
}

// setPending publishes the memory of t's state writes since the last
// checkpoint, and wakes the poll loop when the tasks' total passes
// Config.PendingStateBytes so that it brings the checkpoint forward. Task
// goroutine.
func (t *Task) setPending() {
	n := t.ks.PendingBytes()
	t.e.pending.Add(n - t.pub.pending.Swap(n))
	if t.e.stateFull() {
		if wake := t.e.wake.Load(); wake != nil {
			(*wake)()
		}
	}
}

// TaskStat is a snapshot of one open task.
type TaskStat struct {
	Partition int32
	// Watermark is the event-time watermark, unix ns (math.MinInt64
	// before any is known).
	Watermark int64
	// StateBytes is the keyspace's size on disk at the last checkpoint.
	StateBytes int64
	// Records read by the task since it opened.
	Records int64
	// CaughtUp is Task.CaughtUp.
	CaughtUp bool
}

// Tasks returns a snapshot of every open task, by partition. Safe for
// concurrent use.
func (e *Engine) Tasks() []TaskStat {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]TaskStat, 0, len(e.mu.tasks))
	for p, t := range e.mu.tasks {
		out = append(out, TaskStat{Partition: p, Watermark: t.watermark.Load(), StateBytes: t.stateBytes.Load(), Records: t.records.Load(), CaughtUp: t.caughtUp.Load()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Watermarks returns the event-time watermark of every open task, unix ns.
// Safe for concurrent use.
func (e *Engine) Watermarks() map[int32]int64 {
	m := map[int32]int64{}
	for _, t := range e.Tasks() {
		m[t.Partition] = t.Watermark
	}
	return m
}

func (e *Engine) produce(r *kgo.Record) { e.produceWith(r, e.promise) }

func (e *Engine) produceWith(r *kgo.Record, promise func(*kgo.Record, error)) {
	if n := RecordBytes(r); n > e.cfg.MaxRecordBytes {
		err := fmt.Errorf("%w: %d bytes to %s[%d] exceed MaxRecordBytes %d", ErrRecordTooLarge, n, r.Topic, r.Partition, e.cfg.MaxRecordBytes)
		e.produceErr.CompareAndSwap(nil, &err)
		return
	}
	e.stats.RecordsOut.Add(1)
	if e.sink != nil {
		e.sink(r)
		return
	}
	e.sess.Produce(context.Background(), r, promise)
}

func (e *Engine) promise(r *kgo.Record, err error) {
	if errors.Is(err, kgo.ErrAborting) {
		// The transaction is aborting (a rebalance, a failed commit): its
		// records go with it, and the tasks roll back. Not a failure of
		// its own.
		return
	}
	if err != nil {
		err = fmt.Errorf("produce to %s[%d]: %w", r.Topic, r.Partition, err)
		e.produceErr.CompareAndSwap(nil, &err)
	}
}

// Marker header: the watermark an upstream task sends to internal topics.
const markerHeader = "braid.wm"

func encodeMarker(task int32, wm int64, idle bool) []byte {
	b := make([]byte, 0, 16)
	b = binary.AppendVarint(b, int64(task))
	b = binary.BigEndian.AppendUint64(b, uint64(wm))
	if idle {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

func decodeMarker(b []byte) (task int32, wm int64, idle bool, ok bool) {
	t, n := binary.Varint(b)
	if n <= 0 || len(b) != n+9 {
		return 0, 0, false, false
	}
	return int32(t), int64(binary.BigEndian.Uint64(b[n:])), b[n+8] == 1, true
}

func keyspaceName(topo string, p int32) string { return topo + "-" + strconv.Itoa(int(p)) }

// stillMember reports whether the group still lists this client's member
// id. A check error counts as not a member: the checkpoint aborts and its
// work is redone, which is always safe.
func (e *Engine) stillMember(ctx context.Context) bool {
	cl := e.sess.Client()
	id, _ := cl.GroupMetadata()
	if id == "" {
		return false
	}
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, e.cfg.Group)
	if err != nil {
		return false
	}
	g, ok := groups[e.cfg.Group]
	if !ok || g.Err != nil {
		return false
	}
	for _, m := range g.Members {
		if m.MemberID == id {
			return true
		}
	}
	return false
}

// session is what the engine needs of its Kafka client: a
// kgo.GroupTransactSession, or atLeastOnce.
type session interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Begin() error
	End(ctx context.Context, commit kgo.TransactionEndTry) (bool, error)
	Client() *kgo.Client
	Close()
}

// atLeastOnce is a session without transactions: End flushes the producer,
// then commits the polled offsets.
type atLeastOnce struct{ cl *kgo.Client }

func (s atLeastOnce) PollRecords(ctx context.Context, n int) kgo.Fetches {
	return s.cl.PollRecords(ctx, n)
}

func (s atLeastOnce) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	s.cl.Produce(ctx, r, promise)
}

func (s atLeastOnce) Begin() error { return nil }

func (s atLeastOnce) End(ctx context.Context, commit kgo.TransactionEndTry) (bool, error) {
	if commit == kgo.TryAbort {
		return false, errors.New("engine: cannot abort without transactions")
	}
	if err := s.cl.Flush(ctx); err != nil {
		return false, err
	}
	if err := s.cl.CommitUncommittedOffsets(ctx); err != nil {
		return false, err
	}
	return true, nil
}

func (s atLeastOnce) Client() *kgo.Client { return s.cl }
func (s atLeastOnce) Close()              { s.cl.Close() }

// Memory returns the bytes of the records polled and not yet processed and
// of the tasks' state writes waiting for the next checkpoint or, committed,
// for Pebble's flush. Safe for concurrent use.
func (e *Engine) Memory() (fetched, pendingState int64) {
	return e.queued.Load(), e.pending.Load() + e.flushing.Load()
}
