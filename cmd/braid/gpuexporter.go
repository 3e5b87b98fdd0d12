package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/nvml"
)

const gpuExporterUsage = `Usage: braid gpu-exporter [--brokers B | --config FILE | --otlp-endpoint URL] [--interval 10s] [--retry]

Samples every GPU of the host through NVML each --interval and writes OTLP
metrics named as DCGM exporter names them to otlp_metrics (or an OTLP/HTTP
receiver). NVML needs a binary built with cgo. README.md, "GPU telemetry".

Flags:
`

// cmdGPUExporter runs "braid gpu-exporter" on the host's NVML.
func cmdGPUExporter(ctx context.Context, args []string, log *slog.Logger) error {
	return gpuExporter(ctx, args, nvml.Open(), log)
}

// gpuExporter is cmdGPUExporter on lib, for tests with a fake library.
func gpuExporter(ctx context.Context, args []string, lib nvml.Library, log *slog.Logger) error {
	fs := flag.NewFlagSet("gpu-exporter", flag.ContinueOnError)
	fs.Usage = usageFunc(fs, gpuExporterUsage)
	interval := fs.Duration("interval", 10*time.Second, "time between samples of every GPU")
	brokers := fs.String("brokers", "", "comma-separated Kafka brokers; overrides --config and BRAID_KAFKA_BROKERS")
	config := fs.String("config", "", "take the Kafka brokers, TLS and SASL from this braid configuration file")
	topic := fs.String("topic", nvml.DefaultTopic, "Kafka topic of the metrics")
	encoding := fs.String("encoding", string(nvml.EncodingProto), "Kafka record encoding: otlp_proto or otlp_json")
	endpoint := fs.String("otlp-endpoint", "", "send to this OTLP/HTTP receiver (http://host:4318, path /v1/metrics by default) instead of Kafka")
	host := fs.String("host", "", "host.name and Hostname label (default: the hostname)")
	retry := fs.Bool("retry", false, "when NVML cannot start (no driver yet), retry with exponential backoff instead of exiting")
	retryMax := fs.Duration("retry-max", 5*time.Minute, "cap of the --retry backoff")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gpu-exporter: unexpected arguments %q", fs.Args())
	}
	if *interval <= 0 {
		return fmt.Errorf("gpu-exporter: --interval %v must be > 0", *interval)
	}
	enc, err := nvml.ParseEncoding(*encoding)
	if err != nil {
		return fmt.Errorf("gpu-exporter: --encoding: %w", err)
	}
	log = log.With("cmd", "gpu-exporter")

	var sink nvml.Sink
	if *endpoint != "" {
		if *brokers != "" || *config != "" {
			return errors.New("gpu-exporter: --otlp-endpoint and --brokers/--config are exclusive: choose one output")
		}
		h := nvml.NewHTTPSink(*endpoint, nil)
		sink = h
		log.Info("output", "otlp_http", h.URL())
	} else {
		kc, err := exporterKafka(*config, *brokers)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append(kc.Opts(),
			kgo.RecordDeliveryTimeout(30*time.Second),
			kgo.ProducerLinger(0))...)
		if err != nil {
			return fmt.Errorf("gpu-exporter: kafka client: %w", err)
		}
		defer cl.Close()
		sink = nvml.NewKafkaSink(cl, *topic, enc)
		log.Info("output", "brokers", strings.Join(kc.Brokers, ","), "topic", *topic, "encoding", enc)
	}

	err = nvml.Run(ctx, lib, sink, nvml.Options{
		Interval: *interval,
		Host:     *host,
		Retry:    *retry,
		RetryMax: max(*retryMax, time.Second),
		Logger:   log,
	})
	if errors.Is(err, nvml.ErrNoCgo) {
		return fmt.Errorf("gpu-exporter: %w; rebuild with CGO_ENABLED=1 (go build ./cmd/braid)", err)
	}
	if !*retry && (errors.Is(err, nvml.ErrLibraryNotFound) || errors.Is(err, nvml.ErrDriverNotLoaded)) {
		return fmt.Errorf("gpu-exporter: %w (--retry waits for the driver)", err)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		log.Info("stopped before NVML started", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("gpu-exporter: %w", err)
	}
	return nil
}

// exporterKafka is the Kafka configuration: the file's kafka section (with
// TLS and SASL) when given, else BRAID_KAFKA_BROKERS and the SASL
// environment; --brokers overrides the brokers.
func exporterKafka(path, brokers string) (*kafka.Config, error) {
	var kc kafka.Config
	if path != "" {
		cfg, err := job.LoadConfig(path)
		if cfg == nil {
			return nil, err
		}
		kc = cfg.Kafka
	} else {
		kc.ApplyEnv(os.Getenv)
		if v := os.Getenv("BRAID_KAFKA_BROKERS"); v != "" {
			kc.Brokers = strings.Split(v, ",")
		}
	}
	if brokers != "" {
		kc.Brokers = strings.Split(brokers, ",")
	}
	if len(kc.Brokers) == 0 {
		return nil, errors.New("gpu-exporter: no output: give --brokers, --config, BRAID_KAFKA_BROKERS or --otlp-endpoint")
	}
	if kc.ClientID == "" {
		kc.ClientID = "braid-gpu-exporter"
	}
	kc.EnsureDefaults()
	if err := kc.Validate(); err != nil {
		return nil, fmt.Errorf("gpu-exporter: %w", err)
	}
	if err := kc.Prepare(); err != nil {
		return nil, fmt.Errorf("gpu-exporter: %w", err)
	}
	return &kc, nil
}
