package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/operators/braidpb"
)

func cmdTail(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:19092", "comma-separated brokers")
	topic := fs.String("topic", "braid.fused", "topic of FusedTrace records")
	fromStart := fs.Bool("from-beginning", false, "read from the start of the topic instead of new records only")
	asJSON := fs.Bool("json", false, "print one JSON object per record")
	count := fs.Int("n", 0, "stop after this many records (0: run until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := kgo.NewOffset().AtEnd()
	if *fromStart {
		start = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
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
			if werr != nil {
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
