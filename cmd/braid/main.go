// Command braid is the streaming correlation engine for LLM inference
// telemetry. See README.md.
//
//	braid run --config FILE     run the job against real brokers
//	braid demo                  in-process Kafka + simulator + job, live view
//	braid tail                  print fused records
//	braid replay                re-run the stage over a past range (forensics)
//	braid view                  the drill-down view in the browser
//	braid report                an incident's attribution report
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `braid — streaming correlation of LLM-inference traces, logs and metrics

Usage:
  braid run  --config FILE   run the job against the brokers in FILE
  braid demo [flags]         in-process Kafka, telemetry simulator and the job
  braid tail [flags]         print records of braid.fused
  braid replay [flags]       re-run the fuse stage over a past range of the
                             inputs, into a topic or a Parquet/Arrow file
  braid gpu-exporter [flags] sample GPUs through NVML, emit DCGM-named OTLP metrics
  braid graph [flags]        render a KV-pollution incident as DOT, Mermaid, JSON, SVG or PNG
  braid view [flags]         the drill-down view in the browser: latency heatmaps,
                             spike explanation, layer heatmaps, incidents, traces
  braid report [flags]       the attribution report of an incident (HTML, Markdown)

Run "braid COMMAND -h" (or "braid help COMMAND") for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of run.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // unknown command, unknown flag or a flag's bad value
)

// commands are braid's subcommands, in the order of usage.
var commands = []string{"run", "demo", "tail", "replay", "gpu-exporter", "graph", "view", "report"}

// run runs the command of args (os.Args without the program name) and
// returns its exit status: help on stdout, errors on stderr, where the
// job's log goes too.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	name, rest := args[0], args[1:]
	var err error
	switch name {
	case "run":
		err = cmdRun(ctx, rest, log, stdout)
	case "demo":
		err = runDemo(ctx, rest, log, stdout, stderr)
	case "tail":
		err = cmdTail(ctx, rest, stdout)
	case "replay":
		err = cmdReplay(ctx, rest, stdout, log)
	case "gpu-exporter":
		err = cmdGPUExporter(ctx, rest, log)
	case "graph":
		err = cmdGraph(ctx, rest, stdout)
	case "view":
		err = cmdView(ctx, rest, log, stdout)
	case "report":
		err = cmdReport(ctx, rest, log, stdout)
	case "-h", "-help", "--help", "help":
		if len(rest) > 0 && name == "help" {
			// braid help COMMAND: the command's own usage.
			return run(ctx, []string{rest[0], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "braid: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
	var help *helpRequested
	var bad *usageError
	switch {
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.usage)
		return exitOK
	case errors.As(err, &bad):
		fmt.Fprintf(stderr, "braid %s: %s", name, bad.output)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "braid: %v\n", err)
		return exitError
	}
	return exitOK
}

// helpRequested is parseFlags's error for -h or --help: not a failure,
// the command's usage goes to stdout.
type helpRequested struct{ usage string }

func (h *helpRequested) Error() string { return "help requested" }

// usageError is parseFlags's error for an unknown flag or a flag's bad
// value; output is the flag package's message and the command's usage.
type usageError struct {
	err    error
	output string
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// parseFlags parses args into fs. The flag package's own output (its
// message and fs.Usage) does not go to stderr directly: run prints the
// usage to stdout after -h/--help (a *helpRequested, exit 0) and the
// message and the usage to stderr after a bad flag (a *usageError, exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return &helpRequested{usage: out.String()}
	case err != nil:
		return &usageError{err: err, output: out.String()}
	}
	return nil
}

// usageFunc is a FlagSet's Usage: head, then the flags' defaults.
func usageFunc(fs *flag.FlagSet, head string) func() {
	return func() {
		fmt.Fprint(fs.Output(), head)
		fs.PrintDefaults()
	}
}
