package kafka_test

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
)

// The tests below connect through the SASL listeners of the broker that
// deploy/local/kafka.sh starts: with each mechanism over SASL_PLAINTEXT, and
// over SASL_SSL with the test CA, they create a topic, produce a record and
// consume it; a wrong password must fail with an authentication error.

func TestSASLPlaintextRealBroker(t *testing.T) {
	brokers := kafkatest.SASLBrokers(t)
	t.Parallel()
	for _, mech := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			securityRoundTrip(t, kafka.Config{Brokers: brokers,
				SASL: kafka.SASLConfig{Mechanism: mech, Username: kafkatest.SASLUser, Password: kafkatest.SASLPassword}})
		})
	}
}

func TestSASLSSLRealBroker(t *testing.T) {
	brokers, caFile := kafkatest.SASLSSLBrokers(t)
	t.Parallel()
	t.Run(kafka.MechanismSCRAMSHA512, func(t *testing.T) {
		t.Parallel()
		// The password from a file, as a Kubernetes Secret mounted as a
		// volume gives it (with a trailing newline).
		pwFile := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(pwFile, []byte(kafkatest.SASLPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		securityRoundTrip(t, kafka.Config{Brokers: brokers,
			TLS:  kafka.TLSConfig{Enabled: true, CAFile: caFile},
			SASL: kafka.SASLConfig{Mechanism: kafka.MechanismSCRAMSHA512, Username: kafkatest.SASLUser, PasswordFile: pwFile}})
	})
	// Without the test CA (the system's roots) the broker's certificate
	// must be refused.
	t.Run("unknown CA", func(t *testing.T) {
		t.Parallel()
		cfg := kafka.Config{Brokers: brokers, TLS: kafka.TLSConfig{Enabled: true},
			SASL: kafka.SASLConfig{Mechanism: kafka.MechanismSCRAMSHA512, Username: kafkatest.SASLUser, Password: kafkatest.SASLPassword}}
		cfg.EnsureDefaults()
		if err := cfg.Prepare(); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		var unknown x509.UnknownAuthorityError
		if err := ping(t, &cfg); !errors.As(err, &unknown) {
			t.Fatalf("without the CA: err = %v, want x509.UnknownAuthorityError", err)
		}
	})
}

// securityRoundTrip validates and prepares cfg, makes a round trip with it,
// and checks that the same with a wrong password is refused.
func securityRoundTrip(t *testing.T, cfg kafka.Config) {
	t.Helper()
	good := cfg
	good.EnsureDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := good.Prepare(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	roundTrip(t, &good)

	bad := cfg
	bad.SASL.Password, bad.SASL.PasswordFile = "not-"+kafkatest.SASLPassword, ""
	bad.EnsureDefaults()
	if err := bad.Prepare(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := ping(t, &bad); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("with a wrong password: err = %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

// ping makes a client from cfg and waits for one metadata answer.
func ping(t *testing.T, cfg *kafka.Config) error {
	t.Helper()
	cl, err := kgo.NewClient(append(cfg.Opts(), kgo.RequestRetries(0))...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).ListBrokers(ctx)
	return err
}

// roundTrip creates a topic with cfg's client, produces one record to it,
// consumes it and deletes the topic.
func roundTrip(t *testing.T, cfg *kafka.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(cfg.Opts()...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	topic := "security-" + strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())) +
		"-" + time.Now().Format("150405.000000000")
	// CreateTopic, not EnsureTopics: a metadata request for the topic
	// before it exists would be cached (kgo's MetadataMinAge, 5s) and slow
	// the wait below.
	resp, err := adm.CreateTopic(ctx, 1, cfg.Replication, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		if _, err := adm.DeleteTopics(dctx, topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	}()
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil && td.Has(topic) && td[topic].Err == nil && len(td[topic].Partitions) == 1 &&
			td[topic].Partitions[0].Leader >= 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s not in the metadata: %v (last: %v)", topic, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	want := "over " + t.Name()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(want)}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons, err := kgo.NewClient(append(cfg.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	defer cons.Close()
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		if recs := fs.Records(); len(recs) > 0 {
			if got := string(recs[0].Value); got != want {
				t.Fatalf("consumed %q, want %q", got, want)
			}
			return
		}
	}
}
