package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// Sink receives the exporter's metrics: one MetricsData per sample round
// and one per Xid event. Export may keep md only until it returns.
type Sink interface {
	Export(ctx context.Context, md *metricspb.MetricsData) error
}

// Options configure [Run]. The zero value is usable: see each field's
// default.
type Options struct {
	// Interval between sample rounds. Default 10s.
	Interval time.Duration
	// Host is the host.name resource attribute and the Hostname label.
	// Default os.Hostname().
	Host string
	// Retry keeps calling Init while it fails (a driver not installed or
	// loaded yet), with exponential backoff from RetryInitial, doubling up
	// to RetryMax, logging each attempt. Default false: the first failure
	// is returned. Never retried: ErrNoCgo.
	Retry bool
	// RetryInitial is the first backoff. Default 1s.
	RetryInitial time.Duration
	// RetryMax caps the backoff. Default 5m.
	RetryMax time.Duration
	// ExportTimeout bounds each Export, so that an unreachable sink does
	// not hold back sampling or Xid events. Default 30s.
	ExportTimeout time.Duration
	// Logger; default discards.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.Interval == 0 {
		o.Interval = 10 * time.Second
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.RetryInitial == 0 {
		o.RetryInitial = time.Second
	}
	if o.RetryMax == 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.ExportTimeout == 0 {
		o.ExportTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("nvml: interval %v must be > 0", o.Interval))
	}
	if o.RetryInitial <= 0 {
		errs = append(errs, fmt.Errorf("nvml: retry initial backoff %v must be > 0", o.RetryInitial))
	}
	if o.RetryMax < o.RetryInitial {
		errs = append(errs, fmt.Errorf("nvml: retry max backoff %v is below the initial %v", o.RetryMax, o.RetryInitial))
	}
	if o.ExportTimeout <= 0 {
		errs = append(errs, fmt.Errorf("nvml: export timeout %v must be > 0", o.ExportTimeout))
	}
	return errors.Join(errs...)
}

// Init initialises lib. Without opts.Retry it returns Init's error. With
// it, it retries every retryable failure with capped exponential backoff,
// logging each attempt, until Init succeeds or ctx ends (then ctx's error).
// opts must have its defaults.
func Init(ctx context.Context, lib Library, opts Options) error {
	backoff := opts.RetryInitial
	for attempt := 1; ; attempt++ {
		err := lib.Init()
		if err == nil {
			if attempt > 1 {
				opts.Logger.Info("nvml initialised", "attempt", attempt)
			}
			return nil
		}
		if !opts.Retry || !Retryable(err) {
			return err
		}
		opts.Logger.Warn("nvml init failed; retrying", "attempt", attempt, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("nvml: init after %d attempts: %w (last: %v)", attempt, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, opts.RetryMax)
	}
}

// Run initialises lib (see [Init]), samples every GPU each opts.Interval,
// starting at once, and sends each round to sink; it also sends each Xid
// event as soon as it arrives. A failing Export is logged and the round
// dropped (the next carries the cumulative counters and the last Xid).
// Run returns nil when ctx ends, after stopping the Xid watcher and
// shutting NVML down.
func Run(ctx context.Context, lib Library, sink Sink, opts Options) error {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if err := Init(ctx, lib, opts); err != nil {
		return err
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			log.Warn("nvml shutdown", "err", err)
		}
	}()
	devs, err := lib.Devices()
	if err != nil {
		return fmt.Errorf("nvml: list devices: %w", err)
	}
	if len(devs) == 0 {
		return errors.New("nvml: no GPUs found")
	}
	s, err := NewSampler(devs, opts.Host, opts.Now(), log)
	if err != nil {
		return err
	}
	for _, g := range s.GPUs() {
		log.Info("gpu", "index", g.Index, "uuid", g.UUID, "pci_bus_id", g.PCIBusID, "model", g.Name)
	}

	wctx, stopWatch := context.WithCancel(ctx)
	watch, err := lib.WatchXids(wctx)
	if err != nil {
		log.Warn("xid events unavailable; DCGM_FI_DEV_XID_ERRORS stays 0", "err", err)
		watch = nil
	}
	defer func() {
		stopWatch()
		if watch != nil {
			for range watch { // wait for the watcher to release its event set
			}
		}
	}()
	xids := watch // nil once closed

	export := func(md *metricspb.MetricsData, what string) {
		ectx, cancel := context.WithTimeout(ctx, opts.ExportTimeout)
		defer cancel()
		if err := sink.Export(ectx, md); err != nil && ctx.Err() == nil {
			log.Warn("export failed; dropped", "what", what, "err", err)
		}
	}
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	export(s.Sample(opts.Now()), "sample")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			export(s.Sample(opts.Now()), "sample")
		case ev, ok := <-xids:
			if !ok {
				xids = nil
				continue
			}
			if ev.Err != nil {
				log.Warn("xid event wait failed", "err", ev.Err)
				continue
			}
			log.Warn("xid", "uuid", ev.UUID, "code", ev.Code)
			if md, ok := s.ObserveXid(ev); ok {
				export(md, "xid")
			}
		}
	}
}
