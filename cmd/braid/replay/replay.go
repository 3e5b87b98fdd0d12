// Package replay re-runs braid's fuse topology over a past range of the
// input topics, into a topic or an Arrow/Parquet file: forensic replay.
//
// A replay reads the input partitions directly (no consumer group, no
// commits), runs the same fuse stage as the live job in its own temporary
// state, and never touches the live job's group, topics or state. It is
// deterministic: the same range gives byte-identical output. What decides
// output is only the records of the range — their values, offsets and
// Kafka timestamps — never the wall clock:
//
//   - the records of every input partition are merged by (record
//     timestamp, topic index, partition, offset) (see reader);
//   - one engine.Harness per partition runs on the caller's goroutine, with
//     processing time driven by record timestamps, repartitioned trace
//     groups and watermark markers routed in memory, and checkpoints at
//     data-driven points (see pipeline);
//   - fuse's processing-time flush is off (FlushAfter < 0): traces close in
//     event time only, and at the end of the range every open trace is
//     emitted.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/state"
)

// Options configure a replay.
type Options struct {
	// Config is the live job's configuration: brokers, input topics and
	// encodings, event time, caps and output format. The replay runs the
	// stage it describes. Required.
	Config *job.Config
	// From and To bound the range; the zero Bound is the start (From) or
	// current end (To) of every input partition.
	From, To Bound
	// Out is where the fused records go. Required.
	Out Output
	// StateDir is where the temporary state directory is made (and
	// removed at the end). Default os.TempDir().
	StateDir string
	// CheckpointRecords: every task checkpoints after this many input
	// records (and after every job checkpoint_interval of record time).
	// Default 1000.
	CheckpointRecords int
	// StallTimeout: an input partition that delivers nothing for this long
	// while the merge waits on it fails the replay. Default 2m.
	StallTimeout time.Duration
	// Progress, if set, gets a progress bar (give it a terminal).
	Progress io.Writer
	// Logger for warnings. Default slog.Default().
	Logger *slog.Logger
}

// Summary reports a finished replay.
type Summary struct {
	// Ranges are the resolved offset ranges, spans then logs then metrics
	// topic, by partition.
	Ranges []PartitionRange
	// Partitions of the input topics (the tasks).
	Partitions int32
	// Records is the number of input records read.
	Records int64
	// Fused is the number of fused records written; Traces of them are
	// first emissions (revision 0), Revisions later ones.
	Fused, Traces, Revisions int64
	// Late members and DLQ messages are counted, not written.
	Late, DLQ int64
	// Unjoined and Truncated members, as in the live job's counters.
	Unjoined, Truncated int64
	// Output and, for a topic, its partition count.
	Output           Output
	OutputPartitions int32
	// Elapsed is the wall-clock duration.
	Elapsed time.Duration
}

// Offsets is the number of input offsets in the ranges.
func (s *Summary) Offsets() int64 {
	var n int64
	for _, r := range s.Ranges {
		n += r.Len()
	}
	return n
}

// Run replays opts.From–opts.To into opts.Out. On an error a partial
// output file is removed; records already produced to a topic stay.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	start := time.Now()
	if opts.Config == nil {
		return nil, errors.New("replay: Options.Config is required")
	}
	if opts.Out.Topic == "" && opts.Out.Path == "" {
		return nil, errors.New("replay: Options.Out is required")
	}
	if opts.CheckpointRecords <= 0 {
		opts.CheckpointRecords = 1000
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = 2 * time.Minute
	}
	if opts.StateDir == "" {
		opts.StateDir = os.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg := opts.Config
	copts := cfg.Kafka.Opts()
	topics := cfg.InputTopics()

	cl, err := kgo.NewClient(copts...)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	partitions, err := kafka.CoPartitioned(ctx, adm, topics...)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	fc := cfg.FuseConfig(partitions)
	fc.FlushAfter = -1 // event time only
	// Alerts are a live concern (and write to braid.alerts): a replay
	// fuses, it does not page.
	fc.Alerts = nil
	stage, err := fuse.New(fc)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	fc = stage.Config()
	if t := opts.Out.Topic; t != "" {
		if slices.Contains(topics, t) || slices.Contains([]string{fc.FusedTopic, fc.LateTopic, fc.DLQTopic, fc.RepartitionTopic, fc.ResolveTopic, fc.KVTopic, fc.KVGraph.PollutionTopic, fc.KVGraph.IncidentsTopic, fc.ChangelogTopic, cfg.Outputs.Alerts, cfg.Group + ".alerts-repartition"}, t) {
			return nil, fmt.Errorf("replay: --out topic:%s is a topic of the live job; replay into a topic of its own", t)
		}
	}
	ranges, err := resolveRanges(ctx, adm, topics, partitions, opts.From, opts.To)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if r.Len() > 0 && r.From < r.LogStart {
			opts.Logger.Warn("replay: part of the range was deleted by retention", "topic", r.Topic, "partition", r.Partition,
				"from", r.From, "log_start", r.LogStart, "missing", min(r.LogStart, r.To)-r.From)
		}
	}
	sum := &Summary{Ranges: ranges, Partitions: partitions, Output: opts.Out}

	dir, err := os.MkdirTemp(opts.StateDir, "braid-replay-")
	if err != nil {
		return nil, fmt.Errorf("replay: state: %w", err)
	}
	defer os.RemoveAll(dir)
	sopts := cfg.StateOptions(dir, partitions, nil)
	sopts.NoSync = true // a scratch store, removed at the end
	store, err := state.Open(sopts)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer store.Close()

	var out sink
	if t := opts.Out.Topic; t != "" {
		ts, n, err := newTopicSink(ctx, copts, cfg.Kafka.Replication, t, fc.FusedPartitions)
		if err != nil {
			return nil, err
		}
		out, sum.OutputPartitions = ts, n
	} else {
		out, err = newFileSink(opts.Out.Path, opts.Out.Format, fc.JSON)
		if err != nil {
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok {
			out.abort()
		}
	}()

	kf, err := newKafkaFetcher(copts, ranges)
	if err != nil {
		return nil, err
	}
	defer kf.close()
	rd := newReader(kf, ranges, opts.StallTimeout)

	pl := newPipeline(pipelineConfig{
		stage:             stage,
		store:             store,
		outOfOrderness:    cfg.EventTime.OutOfOrderness,
		idleness:          cfg.EventTime.Idleness,
		checkpointRecords: opts.CheckpointRecords,
		checkpointEvery:   cfg.CheckpointInterval,
		logger:            opts.Logger,
		sink: func(r *kgo.Record) error {
			if r.Topic == fc.FusedTopic {
				return out.write(r)
			}
			return nil // late and dlq: counted by the stage
		},
	})
	defer pl.close()

	var bar *progressBar
	if opts.Progress != nil {
		bar = newProgressBar(opts.Progress)
	}
	c := stage.Counters()
	for {
		rec, input, err := rd.next(ctx)
		if err != nil {
			bar.done()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("replay: interrupted after %d records: %w", rd.read, ctx.Err())
			}
			return nil, err
		}
		if rec == nil {
			break
		}
		if err := pl.feed(input, rec); err != nil {
			bar.done()
			return nil, err
		}
		if bar != nil {
			d, t := rd.progress()
			bar.update(d, t, c.Fused.Load(), false)
		}
	}
	if err := pl.finish(); err != nil {
		bar.done()
		return nil, err
	}
	if bar != nil {
		d, t := rd.progress()
		bar.update(d, t, c.Fused.Load(), true)
		bar.done()
	}
	pl.close()
	ok = true // close cleans up after itself
	if err := out.close(); err != nil {
		if fs, isFile := out.(*fileSink); isFile {
			os.Remove(fs.path)
		}
		return nil, err
	}
	sum.Records = rd.read
	sum.Fused, sum.Revisions = c.Fused.Load(), c.Revisions.Load()
	sum.Traces = sum.Fused - sum.Revisions
	sum.Late, sum.DLQ = c.Late.Load(), c.DLQ.Load()
	sum.Unjoined, sum.Truncated = c.UnjoinedLogs.Load()+c.UnjoinedPoint.Load(), c.Truncated.Load()
	sum.Elapsed = time.Since(start)
	return sum, nil
}
