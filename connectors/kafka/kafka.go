package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is how braid reaches Kafka.
//
// With TLS or SASL configured, call [Config.Prepare] once after
// [Config.Validate] and before [Config.Opts]: it reads the certificate,
// key and password files, so that a bad file is an error at start.
type Config struct {
	// Brokers is the bootstrap list, host:port. Required.
	Brokers []string `yaml:"brokers"`
	// ClientID names braid's clients in broker logs and quotas. Default
	// "braid".
	ClientID string `yaml:"client_id"`
	// Replication of topics braid creates. Default 1.
	Replication int16 `yaml:"replication"`
	// TLS to the brokers (listeners of type SSL or SASL_SSL). Default off.
	TLS TLSConfig `yaml:"tls"`
	// SASL authentication (listeners of type SASL_PLAINTEXT or SASL_SSL).
	// Default off.
	SASL SASLConfig `yaml:"sasl"`

	// prepared caches what Prepare read from files; nil before.
	prepared *security
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.ClientID == "" {
		c.ClientID = "braid"
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
}

// Validate reports every problem at once, naming the field (tls.ca_file,
// sasl.mechanism, ...). It checks that the files that TLS and SASL name can
// be read; [Config.Prepare] parses them.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka: brokers is empty"))
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("kafka: broker %q is not host:port", b))
		}
	}
	if c.Replication < 1 {
		errs = append(errs, fmt.Errorf("kafka: replication %d must be ≥ 1", c.Replication))
	}
	errs = append(errs, c.TLS.validate()...)
	errs = append(errs, c.SASL.validate()...)
	return errors.Join(errs...)
}

// Opts returns the client options common to every braid client: the seed
// brokers, the client id and, when configured, TLS and SASL.
//
// Opts uses what [Config.Prepare] read. Without a successful Prepare (or
// after TLS or SASL fields changed since) it reads the files itself on every
// call, and if that fails it never falls back to an unencrypted or
// unauthenticated connection: the options then hold a dialer that fails
// every connection with the reason. Opts never panics.
func (c *Config) Opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}
	sec, err := c.security()
	if err != nil {
		return append(opts, kgo.Dialer(func(context.Context, string, string) (net.Conn, error) {
			return nil, err
		}))
	}
	if sec.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.tls))
	}
	if sec.sasl != nil {
		opts = append(opts, kgo.SASL(sec.sasl))
	}
	return opts
}

// Topic is a topic braid needs.
type Topic struct {
	Name       string
	Partitions int32
	// Compacted topics keep the last value per key.
	Compacted bool
	// Retention, if set, deletes records older than this (retention.ms).
	Retention time.Duration
}

// EnsureTopics creates the topics that do not exist and checks that the
// ones that do have the partition count asked for.
func EnsureTopics(ctx context.Context, adm *kadm.Client, replication int16, topics ...Topic) error {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	have, err := PartitionCounts(ctx, adm, names...)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range topics {
		if n, ok := have[t.Name]; ok {
			if n != t.Partitions {
				errs = append(errs, fmt.Errorf("kafka: topic %s has %d partitions, want %d", t.Name, n, t.Partitions))
			}
			continue
		}
		cfg := map[string]*string{}
		if t.Compacted {
			v := "compact"
			cfg["cleanup.policy"] = &v
		}
		if t.Retention > 0 {
			v := strconv.FormatInt(t.Retention.Milliseconds(), 10)
			cfg["retention.ms"] = &v
		}
		resp, err := adm.CreateTopic(ctx, t.Partitions, replication, cfg, t.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil || errors.Is(err, kerr.TopicAlreadyExists):
			// Created, here or meanwhile by another instance starting at
			// the same time: once its metadata shows, it must have the
			// partitions asked for.
			n, err := visiblePartitions(ctx, adm, t.Name)
			if err != nil {
				return err
			}
			if n != t.Partitions {
				errs = append(errs, fmt.Errorf("kafka: topic %s has %d partitions, want %d", t.Name, n, t.Partitions))
			}
		default:
			errs = append(errs, fmt.Errorf("kafka: create topic %s: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

// topicVisibleTimeout bounds the wait for a created topic's metadata.
const topicVisibleTimeout = 30 * time.Second

// visiblePartitions waits until the metadata shows topic with all its
// partitions led, and returns their count.
func visiblePartitions(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, topicVisibleTimeout)
	defer cancel()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := td[topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
				led := true
				for _, p := range d.Partitions {
					led = led && p.Leader >= 0 && p.Err == nil
				}
				if led {
					return int32(len(d.Partitions)), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kafka: topic %s created but not visible in the metadata within %v", topic, topicVisibleTimeout)
		case <-time.After(100 * time.Millisecond): // the metadata's pace, bounded by ctx
		}
	}
}

// PartitionCounts returns the partition count of each existing topic among
// names; missing topics are absent from the map.
func PartitionCounts(ctx context.Context, adm *kadm.Client, names ...string) (map[string]int32, error) {
	td, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	out := map[string]int32{}
	for _, d := range td.Sorted() {
		if d.Err != nil {
			if errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("kafka: describe topic %s: %w", d.Topic, d.Err)
		}
		out[d.Topic] = int32(len(d.Partitions))
	}
	return out, nil
}

// CoPartitioned checks that every topic in names exists with the same
// partition count and returns it. The error names every offender.
func CoPartitioned(ctx context.Context, adm *kadm.Client, names ...string) (int32, error) {
	counts, err := PartitionCounts(ctx, adm, names...)
	if err != nil {
		return 0, err
	}
	var missing []string
	for _, n := range names {
		if _, ok := counts[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("kafka: input topics do not exist: %s", strings.Join(missing, ", "))
	}
	byCount := map[int32][]string{}
	for _, n := range names {
		byCount[counts[n]] = append(byCount[counts[n]], n)
	}
	if len(byCount) > 1 {
		var parts []string
		for c, ts := range byCount {
			parts = append(parts, fmt.Sprintf("%s: %d", strings.Join(ts, ", "), c))
		}
		sort.Strings(parts)
		return 0, fmt.Errorf("kafka: co-partitioned input topics differ in partition count (%s)", strings.Join(parts, "; "))
	}
	return counts[names[0]], nil
}
