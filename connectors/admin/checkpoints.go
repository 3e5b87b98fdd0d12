package admin

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/braidlabs/braid/engine"
)

// CheckpointBuckets are the bucket bounds, in seconds, of the checkpoint
// histograms: 1ms to 10s.
var CheckpointBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Checkpoints records finished checkpoints: it feeds the histograms
// braid_checkpoint_pause_seconds and braid_checkpoint_commit_seconds and
// remembers the outcome of the last checkpoint for readiness. Pass its
// Observe method as engine.Config.OnCheckpoint. Safe for concurrent use.
type Checkpoints struct {
	pause  prometheus.Histogram
	commit prometheus.Histogram
	// last is the outcome of the last checkpoint: 0 none yet, 1 committed,
	// 2 aborted.
	last atomic.Int32
}

// NewCheckpoints creates the checkpoint histograms and registers them on
// reg.
func NewCheckpoints(reg prometheus.Registerer) (*Checkpoints, error) {
	if reg == nil {
		return nil, errors.New("admin: NewCheckpoints needs a registerer")
	}
	c := &Checkpoints{
		pause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "braid_checkpoint_pause_seconds",
			Help: "Seconds the tasks stopped processing for a checkpoint, from the barrier to the resume, " +
				"committed and aborted checkpoints alike.",
			Buckets: CheckpointBuckets,
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "braid_checkpoint_commit_seconds",
			Help:    "Seconds from a checkpoint's barrier to the end of its Kafka transaction (commit or abort).",
			Buckets: CheckpointBuckets,
		}),
	}
	for _, col := range []prometheus.Collector{c.pause, c.commit} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("admin: register checkpoint histograms: %w", err)
		}
	}
	return c, nil
}

// Observe records one finished checkpoint. It does not block; it is meant
// as engine.Config.OnCheckpoint.
func (c *Checkpoints) Observe(info engine.CheckpointInfo) {
	c.pause.Observe(info.Pause.Seconds())
	c.commit.Observe(info.Commit.Seconds())
	if info.Committed {
		c.last.Store(1)
	} else {
		c.last.Store(2)
	}
}

// Last reports whether a checkpoint has been observed and whether the last
// one committed.
func (c *Checkpoints) Last() (seen, committed bool) {
	switch c.last.Load() {
	case 1:
		return true, true
	case 2:
		return true, false
	}
	return false, false
}
