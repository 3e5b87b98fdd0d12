package job

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/state"
)

// Job is a prepared braid job: topics checked and created, state open.
type Job struct {
	cfg    *Config
	stage  *fuse.Stage
	engine *engine.Engine
	store  *state.Store
}

// Prepare checks the input topics, creates the output and internal topics
// and opens the state.
func Prepare(ctx context.Context, cfg *Config, log *slog.Logger) (*Job, error) {
	if log == nil {
		log = slog.Default()
	}
	cl, err := kgo.NewClient(cfg.Kafka.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	partitions, err := kafka.CoPartitioned(ctx, adm, cfg.Inputs.Spans.Topic, cfg.Inputs.Logs.Topic, cfg.Inputs.Metrics.Topic)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	stage, err := fuse.New(cfg.fuseConfig(partitions))
	if err != nil {
		return nil, err
	}
	fc := stage.Config()
	err = kafka.EnsureTopics(ctx, adm, cfg.Kafka.Replication,
		kafka.Topic{Name: fc.RepartitionTopic, Partitions: partitions},
		kafka.Topic{Name: fc.ChangelogTopic, Partitions: partitions, Compacted: true},
		kafka.Topic{Name: fc.FusedTopic, Partitions: fc.FusedPartitions},
		kafka.Topic{Name: fc.LateTopic, Partitions: fc.LatePartitions},
		kafka.Topic{Name: fc.DLQTopic, Partitions: fc.DLQPartitions},
	)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	store, err := state.Open(state.Options{Dir: filepath.Join(cfg.State.Dir, cfg.Group), MemoryBudget: cfg.State.MemoryBudget})
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Config{
		ClientOpts:         cfg.Kafka.Opts(),
		Group:              cfg.Group,
		TransactionalID:    cfg.Group + "-" + cfg.InstanceID,
		CheckpointInterval: cfg.CheckpointInterval,
		OutOfOrderness:     cfg.EventTime.OutOfOrderness,
		Idleness:           cfg.EventTime.Idleness,
		Store:              store,
		Logger:             log,
	}, stage.Topology())
	if err != nil {
		store.Close()
		return nil, err
	}
	log.Info("braid job prepared", "partitions", partitions, "group", cfg.Group, "fused", fc.FusedTopic)
	return &Job{cfg: cfg, stage: stage, engine: eng, store: store}, nil
}

// Run runs the job until ctx is done, then checkpoints and closes.
func (j *Job) Run(ctx context.Context) error {
	defer j.store.Close()
	return j.engine.Run(ctx)
}

// Counters are the fuse stage's live counters.
func (j *Job) Counters() *fuse.Counters { return j.stage.Counters() }

// Engine is the job's engine, for its stats.
func (j *Job) Engine() *engine.Engine { return j.engine }

// Stage is the job's fuse stage.
func (j *Job) Stage() *fuse.Stage { return j.stage }
