package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/admin"
	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/fuse"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/operators/llmmetrics"
	"github.com/braidlabs/braid/state"
)

// Job is a prepared braid job: topics checked and created, state open.
type Job struct {
	cfg    *Config
	stage  *fuse.Stage
	engine *engine.Engine
	store  *state.Store
	log    *slog.Logger
	obs    *observability
	alerts *alertForwarder // nil: no Alertmanager configured
}

// Prepare checks the input topics, creates the output and internal topics
// and opens the state.
func Prepare(ctx context.Context, cfg *Config, log *slog.Logger) (*Job, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Kafka.Prepare(); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	cl, err := kgo.NewClient(cfg.Kafka.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	partitions, err := kafka.CoPartitioned(ctx, adm, cfg.InputTopics()...)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	llm, err := llmmetrics.New(cfg.LLMMetrics)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	fcfg := cfg.FuseConfig(partitions)
	fcfg.LLM = llm
	fcfg.OnUndecodable = func(u fuse.Undecodable) { warnUndecodable(log, cfg, u) }
	var recorded *admin.RecordedCollector
	if fcfg.Alerts != nil {
		// braid_kv_health_score: the health rule's score, per instance.
		fcfg.Alerts.SetOnValue(func(rule string, g alerts.Labels, v float64) {
			if rule == alerts.HealthRule {
				llm.SetKVFigure(g.GPU, g.Instance, llmmetrics.KVHealth, v/100)
			}
		})
		// The recording rules' values, on /metrics.
		recorded = admin.NewRecordedCollector(admin.RecordedConfig{
			MaxSeries: fcfg.Alerts.Config().Alerts.MaxGroups, Help: fcfg.Alerts.RecordHelp()})
		fcfg.Alerts.SetOnRecord(func(r alerts.Recorded) {
			recorded.Set(admin.RecordedSample{Record: r.Record, Labels: r.Labels, Value: r.Value, WindowEnd: r.WindowEnd, Window: r.Window})
		})
	}
	stage, err := fuse.New(fcfg)
	if err != nil {
		return nil, err
	}
	fc := stage.Config()
	topics := []kafka.Topic{
		{Name: fc.RepartitionTopic, Partitions: partitions},
		{Name: fc.ResolveTopic, Partitions: partitions},
		{Name: fc.KVTopic, Partitions: partitions},
		{Name: fc.KVGraph.PollutionTopic, Partitions: fc.KVGraph.Partitions},
		{Name: fc.KVGraph.IncidentsTopic, Partitions: fc.KVGraph.Partitions},
		{Name: fc.ChangelogTopic, Partitions: partitions, Compacted: true},
		{Name: fc.FusedTopic, Partitions: fc.FusedPartitions},
		{Name: fc.LateTopic, Partitions: fc.LatePartitions},
		{Name: fc.DLQTopic, Partitions: fc.DLQPartitions},
	}
	if fc.Alerts != nil {
		ac := fc.Alerts.Config()
		topics = append(topics, kafka.Topic{Name: fc.AlertsTopic, Partitions: partitions},
			kafka.Topic{Name: ac.OutputTopic, Partitions: ac.OutputPartitions})
	}
	if sc := fc.Sampling; sc != nil {
		topics = append(topics, kafka.Topic{Name: sc.Config().TracesTopic, Partitions: fc.FusedPartitions},
			kafka.Topic{Name: sc.Config().LogsTopic, Partitions: fc.FusedPartitions})
	}
	if fc.ResourcesTopic != "" {
		// Read whole by every instance at start: keep an hour, at least
		// the table's retention.
		topics = append(topics, kafka.Topic{Name: fc.ResourcesTopic, Partitions: partitions, Retention: max(time.Hour, 2*fc.ResourceRetain)})
	}
	if err = kafka.EnsureTopics(ctx, adm, cfg.Kafka.Replication, topics...); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	budget := cfg.Budget()
	obs, err := newObservability()
	if err != nil {
		return nil, err
	}
	store, err := state.Open(cfg.StateOptions(filepath.Join(cfg.State.Dir, cfg.Group), partitions, log))
	if err != nil {
		return nil, err
	}
	ec := cfg.EngineConfig(budget)
	ec.Store, ec.Logger = store, log
	ec.OnCheckpoint = onCheckpoint(obs.checkpoints.Observe, cfg.OnCheckpoint)
	eng, err := engine.New(ec, stage.Topology())
	if err != nil {
		store.Close()
		return nil, err
	}
	if err := obs.attach(cfg, eng, stage, recorded, log); err != nil {
		store.Close()
		return nil, err
	}
	fwd, err := newAlertForwarder(cfg, log)
	if err != nil {
		store.Close()
		return nil, err
	}
	log.Info("braid job prepared", "partitions", partitions, "group", cfg.Group, "fused", fc.FusedTopic)
	return &Job{cfg: cfg, stage: stage, engine: eng, store: store, log: log, obs: obs, alerts: fwd}, nil
}

// warnUndecodable logs, once per input topic, that most of its first
// records do not decode, naming the encoding setting to check.
func warnUndecodable(log *slog.Logger, cfg *Config, u fuse.Undecodable) {
	log.Warn(undecodableMessage(cfg, u), "topic", u.Source.Topic, "encoding", u.Source.Encoding.String(),
		"failed", u.Failed, "read", u.Read, "setting", "inputs."+u.Source.Signal.String()+".encoding")
}

// undecodableMessage is warnUndecodable's message.
func undecodableMessage(cfg *Config, u fuse.Undecodable) string {
	var b strings.Builder
	fmt.Fprintf(&b, "most records of topic %s fail to decode as %s (%d of the first %d; e.g. %s)",
		u.Source.Topic, u.Source.Encoding, u.Failed, u.Read, u.Example)
	switch cfg.ErrorPolicy("ingest") {
	case "dead_letter":
		fmt.Fprintf(&b, " and go to %s", cfg.Outputs.DLQ)
	case "skip":
		b.WriteString(" and are dropped (errors.ingest: skip)")
	}
	if u.OtherEncoding {
		other := otlp.EncodingJSON
		if u.Source.Encoding == otlp.EncodingJSON {
			other = otlp.EncodingProto
		}
		fmt.Fprintf(&b, "; they decode as %s", other)
	}
	fmt.Fprintf(&b, "; is inputs.%s.encoding right for this topic? (otlp_proto|otlp_json)", u.Source.Signal)
	return b.String()
}

// Run runs the job until ctx is done, then checkpoints and closes.
func (j *Job) Run(ctx context.Context) error {
	defer j.store.Close()
	stopAdmin := j.obs.start(ctx) // beside the engine, stopped after it
	defer stopAdmin()
	progress, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(j.cfg.LogInterval)
		defer tick.Stop()
		for {
			select {
			case <-progress.Done():
				return
			case <-tick.C:
				j.logCounters("braid progress", nil)
			}
		}
	}()
	fwdDone := make(chan struct{})
	if j.alerts != nil {
		go func() {
			defer close(fwdDone)
			if err := j.alerts.run(progress); err != nil {
				j.log.Error("alert forwarder", "err", err)
			}
		}()
	} else {
		close(fwdDone)
	}
	err := j.engine.Run(ctx)
	stop()
	<-done
	<-fwdDone
	j.logCounters("braid job stopped", err)
	return err
}

func (j *Job) logCounters(msg string, err error) {
	args := j.obs.metrics.LogArgs()
	if err != nil {
		args = append(args, "err", err)
	}
	j.log.Info(msg, args...)
}

// Metrics is the job's table of figures: the engine's and the stages'.
func (j *Job) Metrics() admin.Table { return j.obs.metrics }

// Counters are the fuse stage's live counters.
func (j *Job) Counters() *fuse.Counters { return j.stage.Counters() }

// KVCounters are the live counters of the kvgraph stage.
func (j *Job) KVCounters() *kvgraph.Counters { return j.stage.KVCounters() }

// Engine is the job's engine, for its stats.
func (j *Job) Engine() *engine.Engine { return j.engine }

// Stage is the job's fuse stage.
func (j *Job) Stage() *fuse.Stage { return j.stage }

// Registry is the job's metrics registry (served at /metrics when
// admin.addr is set).
func (j *Job) Registry() *prometheus.Registry { return j.obs.registry }

// AdminAddr is the address the admin server listens on, "" when it is
// disabled.
func (j *Job) AdminAddr() string {
	if j.obs.server == nil {
		return ""
	}
	return j.obs.server.Addr().String()
}

// observability is the job's metrics registry and, when admin.addr is set,
// the admin server and the consumer-lag monitor.
type observability struct {
	registry    *prometheus.Registry
	metrics     admin.Table // the engine's and the stages' figures
	checkpoints *admin.Checkpoints
	log         *slog.Logger
	server      *admin.Server // nil when disabled
	lag         *admin.LagMonitor
	lagClient   *kgo.Client
}

func newObservability() (*observability, error) {
	reg := prometheus.NewRegistry()
	err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	)
	if err != nil {
		return nil, fmt.Errorf("job: register metrics: %w", err)
	}
	cps, err := admin.NewCheckpoints(reg)
	if err != nil {
		return nil, err
	}
	return &observability{registry: reg, checkpoints: cps}, nil
}

// attach registers the job's collectors (recorded: the recording rules'
// values, nil without the alerts stage) and, when cfg.Admin.Addr is set,
// binds the admin server.
func (o *observability) attach(cfg *Config, eng *engine.Engine, stage *fuse.Stage, recorded *admin.RecordedCollector, log *slog.Logger) error {
	o.log = log
	var lag admin.LagView
	if cfg.Admin.Addr != "" {
		cl, err := kgo.NewClient(cfg.Kafka.Opts()...)
		if err != nil {
			return fmt.Errorf("job: %w", err)
		}
		o.lagClient = cl
		o.lag, err = admin.NewLagMonitor(admin.LagConfig{Admin: kadm.NewClient(cl), Group: cfg.Group, Logger: log,
			Topics: cfg.InputTopics()})
		if err != nil {
			o.close()
			return err
		}
		lag = o.lag
	}
	o.metrics = append(admin.StageMetrics(stage), admin.EngineMetrics(eng)...)
	col, err := admin.NewCollector(admin.CollectorConfig{Engine: eng, Lag: lag, LLM: stage.Config().LLM, Metrics: o.metrics})
	if err == nil {
		err = o.registry.Register(col)
	}
	if err == nil && stage.Config().Sampling != nil {
		err = o.registry.Register(newSamplingCollector(stage.Config().Sampling))
	}
	if err == nil && recorded != nil {
		err = o.registry.Register(recorded)
	}
	if err == nil && cfg.Admin.Addr != "" {
		o.server, err = admin.New(admin.Config{Addr: cfg.Admin.Addr, Gatherer: o.registry, Logger: log,
			Ready: admin.Readiness(eng, o.checkpoints)})
	}
	if err != nil {
		o.close()
		return fmt.Errorf("job: admin: %w", err)
	}
	return nil
}

// start runs the admin server and the lag monitor, if enabled, until the
// returned stop is called. They outlive ctx: the engine's final checkpoint
// runs after ctx is done.
func (o *observability) start(ctx context.Context) (stop func()) {
	if o.server == nil {
		return func() {}
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { o.lag.Run(actx) })
	wg.Go(func() {
		if err := o.server.Run(actx); err != nil {
			o.log.Error("admin server", "err", err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
		o.close()
	}
}

func (o *observability) close() {
	if o.server != nil {
		o.server.Close()
	}
	if o.lagClient != nil {
		o.lagClient.Close()
	}
}

// onCheckpoint calls both hooks, the second if set.
func onCheckpoint(metrics, extra func(engine.CheckpointInfo)) func(engine.CheckpointInfo) {
	if extra == nil {
		return metrics
	}
	return func(ci engine.CheckpointInfo) { metrics(ci); extra(ci) }
}
