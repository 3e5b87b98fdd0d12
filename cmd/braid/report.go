package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/report"
	"github.com/braidlabs/braid/connectors/view"
)

const reportUsage = `braid report writes the attribution report of a KV-cache incident: root
cause and the rule that fired, the evidence timeline with the Kafka
coordinates of every input record (re-read to confirm them), blast radius,
per-layer heatmap, alerts, latency impact, a replay command, and the known
failure modes its features retrieve from braid's knowledge base. Written
as <ID>.html (self-contained), <ID>.md and <ID>-layers.svg, from braid's
own topics (braid.incidents, braid.fused, braid.alerts, read_committed).

  braid report --incident ID --brokers HOST:PORT [--out DIR]
  braid report --incident ID --config FILE [--out DIR]

With --llm-url (an OpenAI-compatible endpoint, e.g. vLLM's) the report
adds a summary, marked as generated, with the prompt it was made from.
`

// llmOptions are the flags of the optional generated summary.
type llmOptions struct {
	url, model, keyEnv string
	timeout            time.Duration
}

func (l *llmOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&l.url, "llm-url", os.Getenv("BRAID_LLM_URL"), "OpenAI-compatible endpoint for a generated summary (POST URL/v1/chat/completions); empty: none (default $BRAID_LLM_URL)")
	fs.StringVar(&l.model, "llm-model", "", "model the endpoint serves")
	fs.StringVar(&l.keyEnv, "llm-key-env", "BRAID_LLM_API_KEY", "environment variable holding the endpoint's API key (sent as a bearer token when set)")
	fs.DurationVar(&l.timeout, "llm-timeout", time.Minute, "how long the summary may take; past it the report has none")
}

func (l *llmOptions) llm() *report.LLM {
	if l.url == "" {
		return nil
	}
	return &report.LLM{URL: l.url, Model: l.model, APIKey: os.Getenv(l.keyEnv), Timeout: l.timeout}
}

func cmdReport(ctx context.Context, args []string, log *slog.Logger, out io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), reportUsage); fs.PrintDefaults() }
	id := fs.String("incident", "", "incident id (inc-…), as braid.incidents keys it (required)")
	brokers := fs.String("brokers", os.Getenv("BRAID_KAFKA_BROKERS"), "comma-separated brokers (default $BRAID_KAFKA_BROKERS; ignored with --config)")
	config := fs.String("config", "", "take brokers, TLS/SASL and the output topics from this braid configuration file")
	dir := fs.String("out", ".", "directory the report's files are written to")
	viewURL := fs.String("view-url", "", "base URL of the view, for links into it (default: none)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to read braid's topics for the incident and its traces")
	retention := fs.Duration("retention", 6*time.Hour, "how far back braid's topics are read (wall clock), and the event time of braid.fused kept behind the newest trace")
	var lo llmOptions
	lo.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("report: --incident ID is required")
	}
	topics, opts, cfgPath, err := topicsSource("report", *config, *brokers)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "braid-report-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ix, err := view.Open(view.Options{Dir: tmp, Retention: *retention, Logger: log})
	if err != nil {
		return err
	}
	defer ix.Close()
	fctx, cancel := context.WithCancel(ctx)
	followed, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		followed <- view.Follow(fctx, ix, topics, log, opts...)
	}()
	defer func() { cancel(); <-stopped }() // before the index closes
	if err := caughtUp(ctx, ix, *id, *wait, followed); err != nil {
		return err
	}
	rd, err := report.NewKafkaReader(10*time.Second, opts...)
	if err != nil {
		return err
	}
	defer rd.Close()
	r, err := report.Build(ctx, ix, *id, report.Options{Reader: rd, ViewURL: *viewURL, Config: cfgPath, LLM: lo.llm()})
	if err != nil {
		return err
	}
	paths, err := r.WriteFiles(*dir)
	if err != nil {
		return err
	}
	top := "none"
	if len(r.Known) > 0 {
		top = fmt.Sprintf("%s (%s)", r.Known[0].Entry.Title, r.Known[0].Entry.ID)
	}
	fmt.Fprintf(out, "braid report: incident %s, %s, %d victims; known cause: %s\n", r.ID, r.Pattern, len(r.Victims), top)
	for _, p := range paths {
		fmt.Fprintf(out, "  %s\n", p)
	}
	return nil
}

// topicsSource: braid's output topics and the client options of --config
// or --brokers, and the configuration file (braid.yaml with --brokers) for
// commands it names; cmd prefixes errors.
func topicsSource(cmd, config, brokers string) (view.Topics, []kgo.Opt, string, error) {
	switch {
	case config != "":
		cfg, err := job.LoadConfig(config)
		if err != nil {
			return view.Topics{}, nil, "", err
		}
		if err := cfg.Kafka.Prepare(); err != nil {
			return view.Topics{}, nil, "", fmt.Errorf("%s: %w", cmd, err)
		}
		return view.Topics{Fused: cfg.Outputs.Fused, Incidents: cfg.Outputs.Incidents, Alerts: cfg.Outputs.Alerts}, cfg.Kafka.Opts(), config, nil
	case brokers != "":
		return view.DefaultTopics, []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, "braid.yaml", nil
	}
	return view.Topics{}, nil, "", fmt.Errorf("%s: give --brokers HOST:PORT (or $BRAID_KAFKA_BROKERS) or --config FILE", cmd)
}

// caughtUp waits until the index holds incident id and has read its
// topics to their ends (lag 0), for at most d.
func caughtUp(ctx context.Context, ix *view.Index, id string, d time.Duration, followed <-chan error) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		inc, err := ix.Incident(id)
		if err != nil {
			return err
		}
		st := ix.Status()
		if inc != nil && st.Lag == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-followed:
			return fmt.Errorf("report: reading braid's topics: %v", err)
		case <-deadline.C:
			if inc == nil {
				return fmt.Errorf("report: incident %q is not in braid.incidents (read for %v; %d incidents indexed)", id, d, st.Incidents)
			}
			return nil // report what was read
		case <-tick.C:
		}
	}
}

// viewReporter renders reports for the view from its index, re-reading
// input records through opts' brokers.
func viewReporter(ix *view.Index, opts []kgo.Opt, llm *report.LLM) view.Reporter {
	return func(ctx context.Context, id, format string) ([]byte, string, error) {
		rd, err := report.NewKafkaReader(5*time.Second, opts...)
		if err != nil {
			return nil, "", err
		}
		defer rd.Close()
		r, err := report.Build(ctx, ix, id, report.Options{Reader: rd, RelativeLinks: true, LLM: llm})
		if err != nil {
			return nil, "", err
		}
		var b bytes.Buffer
		if format == "json" {
			body, err := json.Marshal(r)
			return body, "application/json", err
		}
		if format == "md" {
			r.Markdown(&b, "")
			return b.Bytes(), "text/markdown; charset=utf-8", nil
		}
		if err := r.HTML(&b); err != nil {
			return nil, "", err
		}
		return b.Bytes(), "text/html; charset=utf-8", nil
	}
}
