package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/view"
)

const viewUsage = `braid view serves the drill-down view: latency heatmaps, spike
explanation, decoder-layer heatmaps, pollution graphs and traces, from an
index of braid's own topics (braid.fused, braid.incidents, braid.alerts,
read_committed) kept in --state-dir. Any number of views can read one
cluster (no consumer group); a restart resumes where the index stopped.

  braid view --brokers HOST:PORT [--addr 127.0.0.1:9465]
  braid view --config FILE        (brokers, TLS/SASL and topics of the job)

Bound to loopback by default; any other address needs a bearer token
(--token or BRAID_VIEW_TOKEN), which the pages take from ?token=… once.
`

// viewOptions are the flags of braid view.
type viewOptions struct {
	addr, token, stateDir string
	opts                  view.Options
	llm                   llmOptions
}

func (v *viewOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&v.addr, "addr", view.DefaultAddr, "HTTP listen address (loopback by default; others need --token)")
	fs.StringVar(&v.token, "token", "", "bearer token the API requires (default $BRAID_VIEW_TOKEN)")
	fs.StringVar(&v.stateDir, "state-dir", "braid-view", "directory of the view's index")
	fs.DurationVar(&v.opts.Retention, "retention", time.Hour, "event time the index keeps behind the newest it has seen")
	fs.IntVar(&v.opts.MaxTraces, "max-traces", 200_000, "traces the index keeps at most (the oldest go first)")
	v.llm.register(fs)
}

func cmdView(ctx context.Context, args []string, log *slog.Logger, out io.Writer) error {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), viewUsage); fs.PrintDefaults() }
	brokers := fs.String("brokers", os.Getenv("BRAID_KAFKA_BROKERS"), "comma-separated brokers (default $BRAID_KAFKA_BROKERS; ignored with --config)")
	config := fs.String("config", "", "take brokers, TLS/SASL and the output topics from this braid configuration file")
	var vo viewOptions
	vo.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if vo.token == "" {
		vo.token = os.Getenv("BRAID_VIEW_TOKEN")
	}
	topics, opts, _, err := topicsSource("view", *config, *brokers)
	if err != nil {
		return err
	}
	return runView(ctx, vo, topics, opts, log, func(addr string) {
		fmt.Fprintf(out, "braid view: %s\n", view.URL(addr))
	})
}

// runView opens the index, follows the topics into it and serves it
// until ctx ends; ready gets the listening address.
func runView(ctx context.Context, vo viewOptions, topics view.Topics, opts []kgo.Opt, log *slog.Logger, ready func(string)) error {
	if err := view.CheckAccess(vo.addr, vo.token); err != nil {
		return err
	}
	vo.opts.Dir, vo.opts.Logger = vo.stateDir, log
	ix, err := view.Open(vo.opts)
	if err != nil {
		return err
	}
	defer ix.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- view.Follow(ctx, ix, topics, log, opts...) }()
	rep := view.WithReporter(viewReporter(ix, opts, vo.llm.llm()))
	go func() { errc <- view.Serve(ctx, ix, vo.addr, vo.token, view.Assets(), log, ready, rep) }()
	err = <-errc
	cancel()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
