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
	"context"
	"fmt"
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

Run "braid COMMAND -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(ctx, os.Args[2:], log)
	case "demo":
		err = cmdDemo(ctx, os.Args[2:], log)
	case "tail":
		err = cmdTail(ctx, os.Args[2:], os.Stdout)
	case "replay":
		err = cmdReplay(ctx, os.Args[2:], os.Stdout, log)
	case "gpu-exporter":
		err = cmdGPUExporter(ctx, os.Args[2:], log)
	case "graph":
		err = cmdGraph(ctx, os.Args[2:], os.Stdout)
	case "view":
		err = cmdView(ctx, os.Args[2:], log, os.Stdout)
	case "report":
		err = cmdReport(ctx, os.Args[2:], log, os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "braid: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "braid: %v\n", err)
		os.Exit(1)
	}
}
