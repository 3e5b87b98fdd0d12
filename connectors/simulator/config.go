package simulator

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Encodings of the Collector's Kafka exporter.
const (
	EncodingProto = "otlp_proto"
	EncodingJSON  = "otlp_json"
)

// Keying is how the simulated exporter keys its records.
type Keying uint8

const (
	// KeyByTraceID mirrors partition_traces_by_id and
	// partition_logs_by_trace_id: one span message and one log message per
	// trace id per batch, key = the trace id as 32 lower-case hex characters;
	// a batch's logs without a trace id in one null-key message; metrics in
	// one null-key message per batch.
	KeyByTraceID Keying = iota
	// Unkeyed mirrors the exporter's defaults: one message per signal per
	// batch holding the whole batch (several resources and traces mixed),
	// null key.
	Unkeyed
)

func (k Keying) String() string {
	switch k {
	case KeyByTraceID:
		return "key_by_trace_id"
	case Unkeyed:
		return "unkeyed"
	}
	return fmt.Sprintf("Keying(%d)", uint8(k))
}

// Topics names the three topics the exporter writes to.
type Topics struct {
	Spans, Logs, Metrics string
}

// Defaults.
var (
	// DefaultStart is the event time of the first batch when Config.Start is
	// zero: fixed, so that runs are reproducible.
	DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// DefaultTopics are the exporter's default topic names.
	DefaultTopics = Topics{Spans: "otlp_spans", Logs: "otlp_logs", Metrics: "otlp_metrics"}
)

const (
	DefaultRequestsPerBatch = 8
	DefaultBatchInterval    = 200 * time.Millisecond // the Collector batch processor's timeout
	DefaultSplitRatio       = 0.1
	DefaultLogsPerRequest   = 2
	DefaultTracelessLogs    = 1
	DefaultResourcePoints   = 2

	// MaxRequestsPerBatch bounds RequestsPerBatch (the batch processor's
	// send_batch_max_size is in the same range).
	MaxRequestsPerBatch = 100_000

	DefaultHosts          = 4
	DefaultScrapeInterval = time.Second
	DefaultAbortRatio     = 0.03
	// MaxHosts bounds Hosts.
	MaxHosts = 512
	// maxPerItem bounds LogsPerRequest, TracelessLogs and ResourcePoints.
	maxPerItem = 100_000
)

// Config describes the simulated deployment and exporter. The zero value is
// usable: every zero field takes its default. For the counts and SplitRatio,
// where zero is the default, a negative value means none.
type Config struct {
	// Seed drives every random choice; the same Seed and Config give the
	// same messages, byte for byte.
	Seed int64
	// Start is the event time of the first batch (batch n has Start +
	// n*BatchInterval); a batch's records lie in the interval before its
	// event time. Default DefaultStart.
	Start time.Time
	// Encoding is EncodingProto ("otlp_proto", the default) or EncodingJSON
	// ("otlp_json").
	Encoding string
	// Keying of records; default KeyByTraceID.
	Keying Keying
	// RequestsPerBatch is the number of requests (traces) that finish in
	// each batch; default 8.
	RequestsPerBatch int
	// BatchInterval is the event time between batches; default 200ms.
	BatchInterval time.Duration
	// SplitRatio is the fraction of traces whose spans are cut across two
	// batches; default 0.1, negative for none, at most 1.
	SplitRatio float64
	// LogsPerRequest is the number of log records carrying the request's
	// trace id; default 2, negative for none.
	LogsPerRequest int
	// TracelessLogs is the number of engine log records without a trace id
	// per batch; default 1, negative for none.
	TracelessLogs int
	// NoExemplars turns off the histogram points whose exemplar points at a
	// request's trace (one per request, on by default).
	NoExemplars bool
	// ResourcePoints is the number of gauge points without exemplars per
	// batch (vllm:kv_cache_usage_perc, sglang:token_usage,
	// DCGM_FI_DEV_FB_USED...); default 2, negative for none.
	ResourcePoints int
	// Topics default to DefaultTopics, field by field.
	Topics Topics
	// Disorder bounds out-of-orderness: each request's finish time (the
	// event time of its spans, logs and exemplar point), each trace-less
	// log and each resource point moves back from its random time in the
	// batch's interval by a random amount up to Disorder. Default 0.
	// Realistic: each span group and log record is written up to Disorder
	// after its event time instead (scrapes are never late).
	Disorder time.Duration

	// Realistic turns on the fleet of FORMAT.md: Hosts hosts of two GPUs,
	// one vLLM or SGLang server per GPU serving one of three models;
	// requests that arrive, queue, run and finish (or are aborted) on a
	// modelled server; engine logs without trace ids at arrival and finish;
	// Prometheus scrapes of every server and DCGM exporter each
	// ScrapeInterval; and per-request resource truth. Default false: the
	// original four-server content, unchanged byte for byte. Realistic
	// ignores TracelessLogs and ResourcePoints (the engine logs and scrapes
	// replace them).
	Realistic bool
	// Rate, in realistic mode, is the number of requests arriving per second
	// of event time (fractions carry over between batches, so any rate
	// above 0 works with any BatchInterval); default 0: RequestsPerBatch
	// arrive in each batch. Ignored otherwise.
	Rate float64
	// Hosts is the number of hosts in realistic mode (two GPUs, two servers
	// each); default 4.
	Hosts int
	// ScrapeInterval is the Prometheus scrape interval of event time in
	// realistic mode, for every server and DCGM exporter; default 1s.
	ScrapeInterval time.Duration
	// AbortRatio is the fraction of requests aborted before they finish in
	// realistic mode: they get engine logs but never a span (orphans);
	// default 0.03, negative for none, at most 1.
	AbortRatio float64
	// KVEvents, in realistic mode, describes every request to a KV block
	// simulator (NewKV) and writes its per-block events as log records on
	// the logs topic (FORMAT.md, KV.md). Default false.
	KVEvents bool
	// KVHosts, with KVEvents, limits the KV-block events to the servers of
	// the first KVHosts hosts (0: every host): vLLM publishes KV events
	// only where --kv-events-config turns them on, so a fleet may have them
	// on a few servers only. The other servers' requests have no KV events;
	// KV.Faults and KV.Restarts index the servers that have them.
	KVHosts int
	// KV configures the KV block simulator (zero fields take NewKV's
	// defaults, except Seed 0: Config.Seed; BlockTokens and BlockBytes both
	// 0: DefaultFleetKVBlockTokens and 256 bytes per token; BlocksPerGPU 0:
	// DefaultFleetKVBlocksPerGPU). KV.Faults are the faults to
	// inject, GPU = index of the server in the fleet (host·2 + gpu.index).
	KV KVConfig

	// Regressions, in realistic mode, slow the prefill of one server each
	// for a window of event time, so that the time to first token of the
	// requests arriving in it is Factor times what it would be (Regression;
	// Truth.Regressions). Default none.
	Regressions []Regression
	// Leaks, in realistic mode, make the framebuffer use of one GPU each
	// grow linearly for a window of event time, then drop back (Leak;
	// Truth.Leaks). Default none.
	Leaks []Leak

	// Verdicts, in realistic mode, add quality and safety verdicts to the
	// served requests: input guard spans, output evaluation span events
	// and log records (VerdictConfig, FORMAT.md; TraceTruth.Verdicts). Nil
	// (the default): none, and the output is byte for byte what it is
	// without this field. The verdicts draw from a random source of their
	// own, so the rest of the output is the same with or without them.
	Verdicts *VerdictConfig
}

// EnsureDefaults fills in the zero fields with their defaults and turns the
// negative "none" values into 0.
func (c *Config) EnsureDefaults() {
	if c.Start.IsZero() {
		c.Start = DefaultStart
	}
	if c.Encoding == "" {
		c.Encoding = EncodingProto
	}
	if c.RequestsPerBatch == 0 {
		c.RequestsPerBatch = DefaultRequestsPerBatch
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = DefaultBatchInterval
	}
	switch {
	case c.SplitRatio == 0:
		c.SplitRatio = DefaultSplitRatio
	case c.SplitRatio < 0:
		c.SplitRatio = 0
	}
	defCount(&c.LogsPerRequest, DefaultLogsPerRequest)
	defCount(&c.TracelessLogs, DefaultTracelessLogs)
	defCount(&c.ResourcePoints, DefaultResourcePoints)
	if c.Realistic {
		if c.Hosts == 0 {
			c.Hosts = DefaultHosts
		}
		if c.ScrapeInterval == 0 {
			c.ScrapeInterval = DefaultScrapeInterval
		}
		switch {
		case c.AbortRatio == 0:
			c.AbortRatio = DefaultAbortRatio
		case c.AbortRatio < 0:
			c.AbortRatio = 0
		}
	}
	if c.Verdicts != nil {
		v := *c.Verdicts
		v.Jumps = slices.Clone(v.Jumps)
		v.ensureDefaults()
		c.Verdicts = &v
	}
	if c.Topics.Spans == "" {
		c.Topics.Spans = DefaultTopics.Spans
	}
	if c.Topics.Logs == "" {
		c.Topics.Logs = DefaultTopics.Logs
	}
	if c.Topics.Metrics == "" {
		c.Topics.Metrics = DefaultTopics.Metrics
	}
}

func defCount(v *int, def int) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		*v = 0
	}
}

// Validate reports what is wrong with c. Zero fields are valid (they take
// their defaults), so Validate may be called before or after EnsureDefaults.
func (c Config) Validate() error {
	var errs []error
	switch c.Encoding {
	case "", EncodingProto, EncodingJSON:
	default:
		errs = append(errs, fmt.Errorf("encoding %q: want %q or %q", c.Encoding, EncodingProto, EncodingJSON))
	}
	if c.Keying > Unkeyed {
		errs = append(errs, fmt.Errorf("keying %d: want KeyByTraceID or Unkeyed", c.Keying))
	}
	if c.RequestsPerBatch < 0 || c.RequestsPerBatch > MaxRequestsPerBatch {
		errs = append(errs, fmt.Errorf("requests per batch %d: want 1..%d", c.RequestsPerBatch, MaxRequestsPerBatch))
	}
	if c.BatchInterval < 0 {
		errs = append(errs, fmt.Errorf("batch interval %v is negative", c.BatchInterval))
	}
	if c.SplitRatio > 1 || c.SplitRatio != c.SplitRatio {
		errs = append(errs, fmt.Errorf("split ratio %v: want at most 1", c.SplitRatio))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"logs per request", c.LogsPerRequest}, {"traceless logs", c.TracelessLogs}, {"resource points", c.ResourcePoints}} {
		if f.v > maxPerItem {
			errs = append(errs, fmt.Errorf("%s %d: want at most %d", f.name, f.v, maxPerItem))
		}
	}
	if c.Disorder < 0 {
		errs = append(errs, fmt.Errorf("disorder %v is negative", c.Disorder))
	}
	if c.Rate < 0 || c.Rate != c.Rate || c.Rate > 1e7 {
		errs = append(errs, fmt.Errorf("rate %v: want 0..1e7 requests/s", c.Rate))
	}
	if c.Hosts < 0 || c.Hosts > MaxHosts {
		errs = append(errs, fmt.Errorf("hosts %d: want 1..%d", c.Hosts, MaxHosts))
	}
	if c.ScrapeInterval < 0 || c.ScrapeInterval > 0 && c.ScrapeInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("scrape interval %v: want at least 1ms", c.ScrapeInterval))
	}
	if c.AbortRatio > 1 || c.AbortRatio != c.AbortRatio {
		errs = append(errs, fmt.Errorf("abort ratio %v: want at most 1", c.AbortRatio))
	}
	if c.KVEvents && !c.Realistic || len(c.KV.Faults) > 0 && !c.KVEvents {
		errs = append(errs, errors.New("KV events need realistic mode, faults need KV events"))
	}
	if hosts := cmp.Or(c.Hosts, DefaultHosts); c.KVHosts < 0 || c.KVHosts > hosts || c.KVHosts > 0 && !c.KVEvents {
		errs = append(errs, fmt.Errorf("KV hosts %d: want 0 (every host) or 1..%d (hosts), with KV events", c.KVHosts, hosts))
	}
	if c.KVEvents && c.Realistic {
		hosts := c.Hosts
		if hosts == 0 {
			hosts = DefaultHosts
		}
		if c.KVHosts > 0 {
			hosts = min(hosts, c.KVHosts)
		}
		if kc := c.kvConfig(); hosts > 0 && hosts <= MaxHosts {
			if err := kc.Validate(2 * hosts); err != nil {
				errs = append(errs, err)
			}
		}
	}
	servers := 0
	if c.Realistic && c.Hosts >= 0 && c.Hosts <= MaxHosts {
		servers = 2 * c.Hosts
		if c.Hosts == 0 {
			servers = 2 * DefaultHosts
		}
	}
	errs = append(errs, c.validateOps(servers)...)
	if c.Verdicts != nil {
		errs = append(errs, c.Verdicts.validate(c.Realistic)...)
	}
	if !c.Realistic && (c.Rate != 0 || c.Hosts != 0 || c.ScrapeInterval != 0 || c.AbortRatio != 0) {
		errs = append(errs, errors.New("rate, hosts, scrape interval and abort ratio need realistic mode"))
	}
	t := c.Topics
	if t.Spans != "" && (t.Spans == t.Logs || t.Spans == t.Metrics) || t.Logs != "" && t.Logs == t.Metrics {
		errs = append(errs, fmt.Errorf("topics %+v: want three distinct topics", t))
	}
	if !c.Start.IsZero() && (c.Start.UnixNano() <= 0 || c.Start.Year() > 2200) {
		errs = append(errs, fmt.Errorf("start %v: want a time between 1970 and 2200", c.Start))
	}
	return errors.Join(errs...)
}
