package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// LagConfig configures a LagMonitor.
type LagConfig struct {
	// Admin talks to the cluster. Required; the caller closes its client.
	Admin *kadm.Client
	// Group is the job's consumer group. Required.
	Group string
	// Topics are the input topics to watch. Required.
	Topics []string
	// Interval between refreshes. Default 10s.
	Interval time.Duration
	// Timeout bounds one refresh. Default: Interval.
	Timeout time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the refresh time, default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills unset fields with their defaults.
func (c *LagConfig) EnsureDefaults() {
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = c.Interval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every problem at once.
func (c *LagConfig) Validate() error {
	var errs []error
	if c.Admin == nil {
		errs = append(errs, errors.New("admin: LagConfig.Admin is required"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("admin: LagConfig.Group is required"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("admin: LagConfig.Topics is required"))
	}
	if c.Interval < 0 || c.Timeout < 0 {
		errs = append(errs, errors.New("admin: LagConfig.Interval and LagConfig.Timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// LagMonitor refreshes the consumer lag of a group on its input topics in
// the background: the group's committed offsets against the partitions' end
// offsets. A partition without a committed offset lags by its whole log
// (end minus start offset): the job starts reading it from the start. A
// group the broker does not know yet (GROUP_ID_NOT_FOUND) has no committed
// offsets.
//
// Run refreshes; Lags may be called concurrently from any goroutine.
type LagMonitor struct {
	cfg LagConfig
	log *slog.Logger

	mu struct {
		sync.Mutex
		lags []PartitionLag
		at   time.Time
	}
}

// NewLagMonitor validates cfg.
func NewLagMonitor(cfg LagConfig) (*LagMonitor, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Topics = slices.Clone(cfg.Topics)
	return &LagMonitor{cfg: cfg, log: cfg.Logger.With("component", "lag")}, nil
}

// Run refreshes at once and then every Interval until ctx is done. A failed
// refresh is logged and keeps the previous figures. It returns nil when ctx
// is done.
func (m *LagMonitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		err := m.Refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			m.log.Warn("consumer lag refresh", "group", m.cfg.Group, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Refresh reads the committed and end offsets once and replaces the figures
// when it succeeds. Partitions whose offsets cannot be read are left out.
func (m *LagMonitor) Refresh(ctx context.Context) error {
	adm := m.cfg.Admin
	committed, err := adm.FetchOffsetsForTopics(ctx, m.cfg.Group, m.cfg.Topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// The group has not committed yet (a job's first start, before
		// its first checkpoint): no committed offsets.
		committed, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("admin: fetch offsets of group %s: %w", m.cfg.Group, err)
	}
	// Partial answers (*kadm.ShardErrors from some brokers) are used: the
	// partitions that are missing are left out.
	ends, err := adm.ListEndOffsets(ctx, m.cfg.Topics...)
	if err != nil && !partial(err) {
		return fmt.Errorf("admin: list end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, m.cfg.Topics...)
	if err != nil && !partial(err) {
		return fmt.Errorf("admin: list start offsets: %w", err)
	}
	var lags []PartitionLag
	ends.Each(func(end kadm.ListedOffset) {
		if end.Err != nil || end.Partition < 0 {
			return
		}
		from := int64(0)
		if c, ok := committed.Lookup(end.Topic, end.Partition); ok && c.Err == nil && c.At >= 0 {
			from = c.At
		} else if s, ok := starts.Lookup(end.Topic, end.Partition); ok && s.Err == nil {
			from = s.Offset
		} else {
			return
		}
		lags = append(lags, PartitionLag{Topic: end.Topic, Partition: end.Partition, Records: max(end.Offset-from, 0)})
	})
	slices.SortFunc(lags, func(a, b PartitionLag) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	m.mu.Lock()
	m.mu.lags, m.mu.at = lags, m.cfg.Now()
	m.mu.Unlock()
	return nil
}

// partial reports whether err is a kadm shard error that some brokers
// answered despite.
func partial(err error) bool {
	se, ok := errors.AsType[*kadm.ShardErrors](err)
	return ok && !se.AllFailed
}

// Lags returns the figures of the last successful refresh and its time.
func (m *LagMonitor) Lags() ([]PartitionLag, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.lags, m.mu.at
}
