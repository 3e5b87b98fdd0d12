package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

const tailUsage = `Usage: braid tail [--brokers B | --config FILE] [--topic T] [--from-beginning [--follow]] [--trace ID] [--json] [-n N]

Prints the records of braid.fused (read_committed), one line each or, with
--json, one JSON object each. Without --from-beginning it prints the
records written from now on until interrupted; --from-beginning (and
--trace) read from the start and stop at the end the topic had when tail
started, unless --follow. It fails within seconds when no broker answers.

Flags:
`

// pingTimeout bounds the first request to the brokers: tail fails with
// the address rather than waiting silently for a broker that is not there.
const pingTimeout = 5 * time.Second

// cmdTail runs "braid tail", printing to out.
func cmdTail(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, tailUsage)
	brokers := fs.String("brokers", "127.0.0.1:19092", "comma-separated brokers (ignored with --config)")
	config := fs.String("config", "", "take brokers, TLS/SASL and the fused topic from this braid configuration file")
	topic := fs.String("topic", "", "topic of FusedTrace records (default braid.fused, or outputs.fused of --config)")
	fromBeginning := fs.Bool("from-beginning", false, "read from the start of the topic and stop at the end it had when tail started (see --follow) instead of printing new records only")
	follow := fs.Bool("follow", false, "with --from-beginning or --trace: go on printing new records after that end, until interrupted")
	asJSON := fs.Bool("json", false, "print one JSON object per record")
	count := fs.Int("n", 0, "stop after this many records (0: no limit)")
	trace := fs.String("trace", "", "print only the records of this trace id (32 hex characters), reading from the beginning of the one partition it hashes to")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tail: unexpected arguments %q", fs.Args())
	}
	var key []byte // the trace id as the record key, with --trace
	if *trace != "" {
		key = []byte(strings.ToLower(strings.TrimSpace(*trace)))
		if _, ok := otlp.ParseTraceIDHex(key); !ok {
			return fmt.Errorf("tail: --trace %q is not a trace id of 32 hex characters", *trace)
		}
	}
	seeds := strings.Split(*brokers, ",")
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	if *topic == "" {
		*topic = "braid.fused"
	}
	if *config != "" {
		cfg, err := job.LoadConfig(*config)
		if err != nil {
			return err
		}
		if err := cfg.Kafka.Prepare(); err != nil {
			return fmt.Errorf("tail: %w", err)
		}
		opts = cfg.Kafka.Opts()
		seeds = cfg.Kafka.Brokers
		if !flagSet(fs, "topic") {
			*topic = cfg.Outputs.Fused
		}
	}
	fromStart := *fromBeginning || key != nil
	bounded := fromStart && !*follow

	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	defer adm.Close()
	if err := ping(ctx, adm, seeds); err != nil {
		return err
	}
	partitions := []int32(nil) // nil: every partition of the topic
	if key != nil {
		// braid partitions the fused topic by otlp.HashPartition over the
		// key: when the partition count is known, read only that
		// partition. Otherwise read them all and filter.
		if n, err := partitionCount(ctx, adm, *topic); err == nil && n > 0 {
			partitions = []int32{otlp.HashPartition(key, n)}
		}
	}
	start := kgo.NewOffset().AtEnd()
	if fromStart {
		start = kgo.NewOffset().AtStart()
	}
	var consume kgo.Opt
	var ends map[int32]int64 // bounded: the end offset of every partition still to read
	switch {
	case bounded:
		ends, err = endOffsets(ctx, adm, *topic, partitions)
		if err != nil {
			return err
		}
		if len(ends) == 0 {
			return nil // nothing to read
		}
		parts := map[int32]kgo.Offset{}
		for p := range ends {
			parts[p] = start
		}
		consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: parts})
	case partitions != nil:
		consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {partitions[0]: start}})
	default:
		consume = kgo.ConsumeTopics(*topic)
	}
	adm.Close()
	opts = append(opts, consume, kgo.ConsumeResetOffset(start), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if bounded {
		// Transaction markers come back too, so that the position reaches
		// the end offset exactly (braid writes in transactions: the last
		// offset of a partition is a marker).
		opts = append(opts, kgo.KeepControlRecords())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("tail: %w", err)
	}
	defer cl.Close()
	n := 0
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, e := range fs.Errors() {
			if !errors.Is(e.Err, context.Canceled) {
				return fmt.Errorf("tail %s: %w", *topic, e.Err)
			}
		}
		var werr error
		fs.EachRecord(func(r *kgo.Record) {
			if werr != nil || *count > 0 && n >= *count {
				return
			}
			if bounded {
				end, ok := ends[r.Partition]
				if !ok || r.Offset >= end {
					return // written after tail started
				}
				if r.Offset >= end-1 {
					delete(ends, r.Partition)
				}
			}
			if r.Attrs.IsControl() || key != nil && !bytes.Equal(r.Key, key) {
				return
			}
			var ft braidpb.FusedTrace
			if err := proto.Unmarshal(r.Value, &ft); err != nil {
				// JSON-format records
				if jerr := protojson.Unmarshal(r.Value, &ft); jerr != nil {
					werr = fmt.Errorf("record %d/%d: not a FusedTrace: %v", r.Partition, r.Offset, err)
					return
				}
			}
			if *asJSON {
				werr = writeJSON(out, &ft)
			} else {
				_, werr = fmt.Fprintln(out, describe(&ft))
			}
			n++
		})
		if werr != nil {
			return werr
		}
		if *count > 0 && n >= *count || bounded && len(ends) == 0 {
			return nil
		}
	}
}

// ping fails, within pingTimeout, when no broker of seeds answers.
func ping(ctx context.Context, cl *kgo.Client, seeds []string) error {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	err := cl.Ping(pctx)
	if err == nil || ctx.Err() != nil {
		return ctx.Err()
	}
	hint := ""
	if loopback(seeds) {
		hint = " (is `make run` or deploy/local/kafka.sh running?)"
	}
	return fmt.Errorf("tail: no Kafka broker answers at %s%s: %w", strings.Join(seeds, ","), hint, err)
}

// loopback reports whether every address of seeds is on this machine.
func loopback(seeds []string) bool {
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return false
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return len(seeds) > 0
}

// endOffsets returns the last stable offset of each partition of topic
// (of partitions, when not nil) that has records below it.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions []int32) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, fmt.Errorf("tail: topic %s does not exist", topic)
	}
	if err != nil {
		return nil, fmt.Errorf("tail: end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("tail: start offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if partitions != nil && !slices.Contains(partitions, o.Partition) {
			return
		}
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Offset < o.Offset {
			out[o.Partition] = o.Offset
		}
	})
	return out, nil
}

// partitionCount asks the brokers for topic's partition count.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := kafka.PartitionCounts(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		return 0, err
	}
	return counts[topic], nil
}

// describe renders one line for a person.
func describe(ft *braidpb.FusedTrace) string {
	s := ft.GetSummary()
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s rev %d  spans %d logs %d points %d", hex.EncodeToString(ft.TraceId), ft.Revision, s.GetSpanCount(), s.GetLogCount(), s.GetPointCount())
	if s.GetRootSpanName() != "" {
		fmt.Fprintf(&b, "  root %q (%s) %v", s.GetRootSpanName(), s.GetRootServiceName(), time.Duration(s.GetDurationNano()).Round(time.Microsecond))
	}
	if s.GetErrorSpanCount() > 0 {
		fmt.Fprintf(&b, "  errors %d", s.GetErrorSpanCount())
	}
	if len(ft.Flags) > 0 {
		var fl []string
		for _, f := range ft.Flags {
			fl = append(fl, strings.TrimPrefix(f.String(), "FLAG_"))
		}
		fmt.Fprintf(&b, "  [%s]", strings.Join(fl, ","))
	}
	return b.String()
}

// writeJSON writes ft as protojson with the trace id in hex beside it (proto
// JSON renders bytes as base64).
func writeJSON(out io.Writer, ft *braidpb.FusedTrace) error {
	body, err := protojson.Marshal(ft)
	if err != nil {
		return err
	}
	line, err := json.Marshal(struct {
		TraceID  string          `json:"trace_id"`
		Revision uint32          `json:"revision"`
		Fused    json.RawMessage `json:"fused"`
	}{hex.EncodeToString(ft.TraceId), ft.Revision, body})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", line)
	return err
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
