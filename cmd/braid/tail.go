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
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/operators/braidpb"
)

const tailUsage = `Usage: braid tail [--brokers B | --config FILE] [--topic T] [--from-beginning] [--trace ID] [--json] [-n N]

Prints the records of braid.fused (read_committed), one line each or, with
--json, one JSON object each.

Flags:
`

// cmdTail runs "braid tail", printing to out.
func cmdTail(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, tailUsage)
	brokers := fs.String("brokers", "127.0.0.1:19092", "comma-separated brokers (ignored with --config)")
	config := fs.String("config", "", "take brokers, TLS/SASL and the fused topic from this braid configuration file")
	topic := fs.String("topic", "", "topic of FusedTrace records (default braid.fused, or outputs.fused of --config)")
	fromStart := fs.Bool("from-beginning", false, "read from the start of the topic instead of new records only")
	asJSON := fs.Bool("json", false, "print one JSON object per record")
	count := fs.Int("n", 0, "stop after this many records (0: run until interrupted)")
	trace := fs.String("trace", "", "print only the records of this trace id (32 hex characters), reading from the beginning of the one partition it hashes to")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var key []byte // the trace id as the record key, with --trace
	if *trace != "" {
		key = []byte(strings.ToLower(strings.TrimSpace(*trace)))
		if _, ok := otlp.ParseTraceIDHex(key); !ok {
			return fmt.Errorf("tail: --trace %q is not a trace id of 32 hex characters", *trace)
		}
	}
	start := kgo.NewOffset().AtEnd()
	if *fromStart || key != nil {
		start = kgo.NewOffset().AtStart()
	}
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...)}
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
		if !flagSet(fs, "topic") {
			*topic = cfg.Outputs.Fused
		}
	}
	opts = append(opts, kgo.ConsumeResetOffset(start), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	consume := kgo.ConsumeTopics(*topic)
	if key != nil {
		// braid partitions the fused topic by otlp.HashPartition over the
		// key: when the partition count is known, read only that
		// partition. Otherwise read them all and filter.
		if n, err := partitionCount(ctx, opts, *topic); err == nil && n > 0 {
			p := otlp.HashPartition(key, n)
			consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: {p: start}})
		}
	}
	cl, err := kgo.NewClient(append(opts, consume)...)
	if err != nil {
		return err
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
			if werr != nil || key != nil && !bytes.Equal(r.Key, key) || *count > 0 && n >= *count {
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
		if *count > 0 && n >= *count {
			return nil
		}
	}
}

// partitionCount asks the brokers for topic's partition count.
func partitionCount(ctx context.Context, opts []kgo.Opt, topic string) (int32, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
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
