package main

import (
	"context"
	"flag"
	"log/slog"
	"strings"

	"github.com/braidlabs/braid/cmd/braid/job"
)

func cmdRun(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "YAML configuration file (see README.md)")
	brokers := fs.String("brokers", "", "comma-separated brokers; overrides the file and BRAID_KAFKA_BROKERS")
	stateDir := fs.String("state-dir", "", "state directory; overrides the file and BRAID_STATE_DIR")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := job.LoadConfig(*path)
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
	j, err := job.Prepare(ctx, cfg, log)
	if err != nil {
		return err
	}
	return j.Run(ctx)
}
