package kafkatest

import (
	"os"
	"strings"
	"testing"
)

// Environment variables that `deploy/local/kafka.sh env` prints for the
// broker's authenticated listeners (BRAID_KAFKA_SECURITY=sasl_ssl, the
// default, has both; sasl_plaintext only the first).
const (
	// EnvSASLBrokers: the SASL_PLAINTEXT listener (PORT+2).
	EnvSASLBrokers = "BRAID_KAFKA_SASL_BROKERS"
	// EnvSASLSSLBrokers: the SASL_SSL listener (PORT+3).
	EnvSASLSSLBrokers = "BRAID_KAFKA_SASL_SSL_BROKERS"
	// EnvCAFile: the PEM of the test CA that signed the SASL_SSL listener's
	// certificate.
	EnvCAFile = "BRAID_KAFKA_CA_FILE"
)

// The one user of the test broker's SASL listeners, for PLAIN,
// SCRAM-SHA-256 and SCRAM-SHA-512 alike (deploy/local/kafka.sh).
const (
	SASLUser     = "braid"
	SASLPassword = "braid-secret"
)

// SASLBrokers returns the SASL_PLAINTEXT listener's addresses from
// BRAID_KAFKA_SASL_BROKERS; without it the test is skipped, or fails when
// CI is set, as with [Brokers].
func SASLBrokers(t testing.TB) []string {
	t.Helper()
	return list(t, EnvSASLBrokers)
}

// SASLSSLBrokers returns the SASL_SSL listener's addresses from
// BRAID_KAFKA_SASL_SSL_BROKERS and the CA file from BRAID_KAFKA_CA_FILE;
// without them the test is skipped, or fails when CI is set.
func SASLSSLBrokers(t testing.TB) (brokers []string, caFile string) {
	t.Helper()
	brokers = list(t, EnvSASLSSLBrokers)
	caFile = strings.TrimSpace(os.Getenv(EnvCAFile))
	if caFile == "" {
		missing(t, EnvCAFile)
	}
	return brokers, caFile
}

func list(t testing.TB, env string) []string {
	t.Helper()
	var out []string
	for _, b := range strings.Split(os.Getenv(env), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		missing(t, env)
	}
	return out
}

func missing(t testing.TB, env string) {
	t.Helper()
	reason := env + " is not set: this test needs the SASL listeners of the broker that deploy/local/kafka.sh starts " +
		"(make test does this; eval \"$(deploy/local/kafka.sh env)\" sets it; BRAID_KAFKA_SECURITY=none, or sasl_plaintext for SASL_SSL, turns them off)"
	if os.Getenv("CI") != "" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}
