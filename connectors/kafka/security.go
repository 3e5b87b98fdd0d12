package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Environment variables that [Config.ApplyEnv] reads. They override the
// file, so that credentials can come from a Kubernetes Secret.
const (
	EnvSASLUsername = "BRAID_KAFKA_SASL_USERNAME"
	EnvSASLPassword = "BRAID_KAFKA_SASL_PASSWORD"
)

// SASL mechanisms braid supports.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// TLSConfig is TLS to the brokers. Every field is optional; setting any of
// them while Enabled is false is an error, so that a half-written TLS
// section never means a plaintext connection.
type TLSConfig struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file with the certificate authorities that sign the
	// brokers' certificates; it replaces the system's roots. Default: the
	// system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the PEM client certificate (chain) and its
	// private key, for brokers that require client certificates (mTLS).
	// Both or neither. Default: no client certificate.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name verified in the brokers' certificates.
	// Default: the host of each broker address as dialled.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate. Discouraged: it
	// makes TLS open to anyone in the middle. Default false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASLConfig is SASL authentication. It is on when Mechanism is set.
//
// PLAIN sends the password as it is: use it only over TLS (the test broker
// of deploy/local/kafka.sh allows it on a plaintext loopback listener).
type SASLConfig struct {
	// Mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any case).
	// Default: none, SASL off.
	Mechanism string `yaml:"mechanism"`
	// Username, required with a mechanism. BRAID_KAFKA_SASL_USERNAME
	// overrides it.
	Username string `yaml:"username"`
	// Password, or PasswordFile: a file whose content (less one trailing
	// newline) is the password, read at start. Exactly one of the two is
	// required with a mechanism. BRAID_KAFKA_SASL_PASSWORD overrides both.
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

// String does not print the password.
func (s SASLConfig) String() string {
	pw := ""
	if s.Password != "" {
		pw = "[redacted]"
	}
	return fmt.Sprintf("{mechanism:%q username:%q password:%q password_file:%q}", s.Mechanism, s.Username, pw, s.PasswordFile)
}

// GoString does not print the password either.
func (s SASLConfig) GoString() string { return "kafka.SASLConfig" + s.String() }

// ApplyEnv overrides the SASL credentials with BRAID_KAFKA_SASL_USERNAME
// and BRAID_KAFKA_SASL_PASSWORD where they are set and not empty, as read by
// get (os.Getenv). A password from the environment replaces
// sasl.password_file too. As with password_file, one trailing newline is
// dropped from both (a Secret made with kubectl --from-file keeps the file's).
// Call it after decoding the file and before Validate.
func (c *Config) ApplyEnv(get func(string) string) {
	if v := trimNewline(get(EnvSASLUsername)); v != "" {
		c.SASL.Username = v
	}
	if v := trimNewline(get(EnvSASLPassword)); v != "" {
		c.SASL.Password = v
		c.SASL.PasswordFile = ""
	}
}

// trimNewline drops one trailing "\n" or "\r\n".
func trimNewline(s string) string {
	if t, ok := strings.CutSuffix(s, "\r\n"); ok {
		return t
	}
	return strings.TrimSuffix(s, "\n")
}

// Prepare reads and parses the files that TLS and SASL name (CA,
// client certificate and key, password file) and keeps the result for
// [Config.Opts]. Call it once after Validate and before the first Opts; call
// it again after changing the TLS or SASL fields. Without TLS and SASL it
// does nothing and returns nil. It is not safe to call concurrently with
// Opts.
func (c *Config) Prepare() error {
	c.prepared = nil
	sec, err := c.load()
	if err != nil {
		return err
	}
	c.prepared = sec
	return nil
}

// security is what Opts needs: a TLS config and a SASL mechanism, each nil
// when off, and the settings they were made from.
type security struct {
	tlsCfg  TLSConfig
	saslCfg SASLConfig
	tls     *tls.Config
	sasl    sasl.Mechanism
}

// security returns the prepared result if it matches the current fields,
// else loads afresh without keeping it.
func (c *Config) security() (*security, error) {
	if p := c.prepared; p != nil && p.tlsCfg == c.TLS && p.saslCfg == c.SASL {
		return p, nil
	}
	return c.load()
}

func (c *Config) load() (*security, error) {
	sec := &security{tlsCfg: c.TLS, saslCfg: c.SASL}
	var errs []error
	if c.TLS.Enabled {
		sec.tls, errs = c.TLS.load()
	} else if errs = c.TLS.validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	mech, serrs := c.SASL.load()
	errs = append(errs, serrs...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sec.sasl = mech
	return sec, nil
}

// validate reports TLS problems without parsing the files.
func (t *TLSConfig) validate() []error {
	var errs []error
	if !t.Enabled {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"ca_file", t.CAFile != ""}, {"cert_file", t.CertFile != ""}, {"key_file", t.KeyFile != ""},
			{"server_name", t.ServerName != ""}, {"insecure_skip_verify", t.InsecureSkipVerify},
		} {
			if f.set {
				errs = append(errs, fmt.Errorf("kafka: tls.%s is set but tls.enabled is false (set enabled: true, or remove it)", f.name))
			}
		}
		return errs
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("kafka: tls.cert_file and tls.key_file go together: set both (client certificate) or neither"))
	}
	for _, f := range []struct{ name, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path != "" {
			if err := readable(f.path); err != nil {
				errs = append(errs, fmt.Errorf("kafka: tls.%s: %w", f.name, err))
			}
		}
	}
	return errs
}

// load validates and builds the TLS config.
func (t *TLSConfig) load() (*tls.Config, []error) {
	if errs := t.validate(); len(errs) > 0 {
		return nil, errs
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // documented as discouraged
	}
	var errs []error
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafka: tls.ca_file: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("kafka: tls.ca_file %s holds no PEM certificate", t.CAFile))
			}
			cfg.RootCAs = pool
		}
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafka: tls.cert_file %s and tls.key_file %s: %w", t.CertFile, t.KeyFile, err))
		} else {
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// mechanism returns the canonical mechanism name, or "" if unknown.
func (s *SASLConfig) mechanism() string {
	switch m := strings.ToUpper(strings.TrimSpace(s.Mechanism)); m {
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		return m
	}
	return ""
}

// validate reports SASL problems; it reads the password file only to see
// that it can be read.
func (s *SASLConfig) validate() []error {
	var errs []error
	if s.Mechanism == "" {
		for _, f := range []struct{ name, v string }{{"username", s.Username}, {"password", s.Password}, {"password_file", s.PasswordFile}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("kafka: sasl.%s is set but sasl.mechanism is empty (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", f.name))
			}
		}
		return errs
	}
	if s.mechanism() == "" {
		errs = append(errs, fmt.Errorf("kafka: sasl.mechanism %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism))
	}
	if s.Username == "" {
		errs = append(errs, fmt.Errorf("kafka: sasl.username is empty; sasl.mechanism %s needs it (or set %s)", s.Mechanism, EnvSASLUsername))
	}
	switch {
	case s.Password != "" && s.PasswordFile != "":
		errs = append(errs, errors.New("kafka: sasl.password and sasl.password_file are both set; set one"))
	case s.Password == "" && s.PasswordFile == "":
		errs = append(errs, fmt.Errorf("kafka: sasl.password and sasl.password_file are both empty; sasl.mechanism %s needs one (or set %s)", s.Mechanism, EnvSASLPassword))
	case s.PasswordFile != "":
		if err := readable(s.PasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("kafka: sasl.password_file: %w", err))
		}
	}
	return errs
}

// load validates, reads the password file and returns the mechanism, nil
// when SASL is off.
func (s *SASLConfig) load() (sasl.Mechanism, []error) {
	if errs := s.validate(); len(errs) > 0 {
		return nil, errs
	}
	if s.Mechanism == "" {
		return nil, nil
	}
	pass := s.Password
	if s.PasswordFile != "" {
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, []error{fmt.Errorf("kafka: sasl.password_file: %w", err)}
		}
		pass = trimNewline(string(b))
		if pass == "" {
			return nil, []error{fmt.Errorf("kafka: sasl.password_file %s is empty", s.PasswordFile)}
		}
	}
	switch s.mechanism() {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
	default: // MechanismSCRAMSHA512; validate rejected the rest
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
}

// readable checks that path is a regular file that can be opened and read.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	var b [1]byte
	if _, err := f.Read(b[:]); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
