package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"

	"github.com/braidlabs/braid/cmd/braid/job"
)

const runUsage = `Usage: braid run --config FILE [--brokers B] [--state-dir D] [--admin-addr A]

Runs the job against real brokers until SIGTERM or SIGINT, then takes a
final checkpoint. The configuration is README.md's "Configuration";
examples/local.yaml runs against deploy/local/kafka.sh's broker.

Flags:
`

// cmdRun runs "braid run"; --print-budget writes its table to stdout.
func cmdRun(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, runUsage)
	path := fs.String("config", "", "YAML configuration file (see README.md)")
	brokers := fs.String("brokers", "", "comma-separated brokers; overrides the file and BRAID_KAFKA_BROKERS")
	stateDir := fs.String("state-dir", "", "state directory; overrides the file and BRAID_STATE_DIR")
	printBudget := fs.Bool("print-budget", false, "print how state.memory_budget is split into shares, then exit")
	adminAddr := fs.String("admin-addr", "", `admin HTTP address of /metrics, /healthz, /readyz; overrides the file's admin.addr (default 127.0.0.1:9464; "" disables)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := job.LoadConfig(*path)
	if cfg == nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "admin-addr" {
			cfg.Admin.Addr = *adminAddr
			err = cfg.Validate()
		}
	})
	if *brokers != "" {
		cfg.Kafka.Brokers = strings.Split(*brokers, ",")
		err = cfg.Validate()
	}
	if *stateDir != "" {
		cfg.State.Dir = *stateDir
	}
	if err != nil {
		return err
	}
	if *printBudget {
		return cfg.Budget().WriteTable(stdout)
	}
	job.TuneRuntime(cfg.State.MemoryBudget)
	j, err := job.Prepare(ctx, cfg, log)
	if err != nil {
		return err
	}
	return j.Run(ctx)
}
