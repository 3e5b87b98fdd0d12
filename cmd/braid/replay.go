package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/cmd/braid/replay"
)

const replayUsage = `Usage: braid replay --config FILE --from FROM [--to TO] --out OUT [--brokers B]

Re-runs the job's fuse stage over a past range of its input topics, in its
own temporary state, without a consumer group or commits: the live job's
group, topics and state are not touched. The same range gives byte-identical
output.

  FROM, TO   an RFC 3339 time (2026-01-02T15:04:05Z), resolved per input
             partition to the first offset whose record timestamp is at or
             after it (TO excluded); or TOPIC:PARTITION:OFFSET,... (TO
             excluded; partitions not listed run from the start of the log
             or to its current end). FROM may be "earliest"; TO defaults to
             the current end of every partition.
  OUT        topic:NAME (fused records as the live job writes them; the
             topic is created if missing), or a path ending in .parquet or
             .arrow.

Flags:
`

func cmdReplay(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), replayUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", "", "the job's YAML configuration file (see README.md)")
	from := fs.String("from", "", `start of the range: RFC 3339 time, TOPIC:PARTITION:OFFSET,... or "earliest" (required)`)
	to := fs.String("to", "", "end of the range, excluded: RFC 3339 time or TOPIC:PARTITION:OFFSET,... (default: the current end)")
	outFlag := fs.String("out", "", "topic:NAME, or a path ending in .parquet or .arrow (required)")
	brokers := fs.String("brokers", "", "comma-separated brokers; overrides the file and BRAID_KAFKA_BROKERS")
	stateDir := fs.String("state-dir", "", "where the temporary state directory is made (default: the system's temporary directory)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("replay: unexpected arguments %q", fs.Args())
	}
	if *from == "" {
		return errors.New("replay: --from is required (a time, TOPIC:PARTITION:OFFSET,... or earliest)")
	}
	fromB, err1 := replay.ParseFrom(*from)
	toB, err2 := replay.ParseTo(*to)
	dst, err3 := replay.ParseOutput(*outFlag)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	cfg, err := job.LoadConfig(*path)
	if cfg == nil {
		return err
	}
	if *brokers != "" {
		cfg.Kafka.Brokers = strings.Split(*brokers, ",")
		err = cfg.Validate()
	}
	if err != nil {
		return err
	}
	opts := replay.Options{Config: cfg, From: fromB, To: toB, Out: dst, StateDir: *stateDir, Logger: log}
	if replay.IsTerminal(os.Stderr) {
		opts.Progress = os.Stderr
	}
	sum, err := replay.Run(ctx, opts)
	if err != nil {
		return err
	}
	printSummary(out, sum, fromB, toB)
	return nil
}

func printSummary(w io.Writer, s *replay.Summary, from, to replay.Bound) {
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Records) / s.Elapsed.Seconds()
	}
	fromS, toS := from.String(), to.String()
	if from.IsZero() {
		fromS = "earliest"
	}
	if to.IsZero() {
		toS = "latest"
	}
	fmt.Fprintf(w, "braid replay: from %s to %s: %d records (of %d offsets) read from %d partitions × 3 topics in %v (%.0f records/s)\n",
		fromS, toS, s.Records, s.Offsets(), s.Partitions, s.Elapsed.Round(time.Millisecond), rate)
	fmt.Fprintf(w, "  fused %d traces (%d records, %d revisions); late %d members, dlq %d messages (counted, not written); unjoined %d, truncated %d\n",
		s.Traces, s.Fused, s.Revisions, s.Late, s.DLQ, s.Unjoined, s.Truncated)
	if s.Output.Topic != "" {
		fmt.Fprintf(w, "  output: topic %s (%d partitions)\n", s.Output.Topic, s.OutputPartitions)
	} else {
		fmt.Fprintf(w, "  output: %s\n", s.Output)
	}
}
