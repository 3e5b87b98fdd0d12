package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/connectors/kafka"
)

// pki is a throw-away CA with a server certificate for 127.0.0.1 and
// localhost and a client certificate, written as PEM files.
type pki struct {
	dir                       string
	caFile, certFile, keyFile string // CA; client certificate and key
	server                    tls.Certificate
	pool                      *x509.CertPool
	otherCAFile, dir2         string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	p := &pki{dir: dir, pool: x509.NewCertPool()}
	caKey, caCert, caDER := issue(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "braid test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	})
	p.pool.AddCert(caCert)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	srvKey, _, srvDER := issue(t, caKey, caCert, &x509.Certificate{
		Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}

	cliKey, _, cliDER := issue(t, caKey, caCert, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "braid"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p.certFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cliDER)
	der, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.keyFile = writePEM(t, dir, "client-key.pem", "PRIVATE KEY", der)

	_, _, otherDER := issue(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "another CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	p.otherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherDER)
	p.dir2 = filepath.Join(dir, "a-directory")
	if err := os.Mkdir(p.dir2, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

var serial atomic.Int64

// issue makes a key and a certificate from tmpl, signed by parent (self-signed
// when parent is nil).
func issue(t *testing.T, parentKey *ecdsa.PrivateKey, parent, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestValidateSecurity: every problem of the tls and sasl sections is
// reported at once and names its field.
func TestValidateSecurity(t *testing.T) {
	p := newPKI(t)
	pw := writeFile(t, "pw", "secret\n")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		tls  kafka.TLSConfig
		sasl kafka.SASLConfig
		want []string // substrings, one per expected error; none: valid
	}{
		{name: "off"},
		{name: "tls with system roots", tls: kafka.TLSConfig{Enabled: true}},
		{name: "mtls", tls: kafka.TLSConfig{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "kafka"}},
		{name: "scram with password file", sasl: kafka.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: pw}},
		{name: "mechanism in lower case", sasl: kafka.SASLConfig{Mechanism: "scram-sha-256", Username: "u", Password: "p"}},
		{name: "plain", sasl: kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}},
		{
			name: "tls fields while disabled",
			tls:  kafka.TLSConfig{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "x", InsecureSkipVerify: true},
			want: []string{"tls.ca_file is set but tls.enabled is false", "tls.cert_file is set", "tls.key_file is set",
				"tls.server_name is set", "tls.insecure_skip_verify is set"},
		},
		{
			name: "cert without key, unreadable files",
			tls:  kafka.TLSConfig{Enabled: true, CAFile: missing, CertFile: p.dir2},
			want: []string{"tls.cert_file and tls.key_file go together", "tls.ca_file: open " + missing, "tls.cert_file: " + p.dir2 + " is not a regular file"},
		},
		{
			name: "sasl fields without mechanism",
			sasl: kafka.SASLConfig{Username: "u", Password: "p", PasswordFile: pw},
			want: []string{"sasl.username is set but sasl.mechanism is empty", "sasl.password is set but", "sasl.password_file is set but"},
		},
		{
			name: "unknown mechanism, no username, both passwords",
			sasl: kafka.SASLConfig{Mechanism: "GSSAPI", Password: "p", PasswordFile: pw},
			want: []string{`sasl.mechanism "GSSAPI" is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`, "sasl.username is empty", "sasl.password and sasl.password_file are both set"},
		},
		{
			name: "no password",
			sasl: kafka.SASLConfig{Mechanism: "PLAIN", Username: "u"},
			want: []string{"sasl.password and sasl.password_file are both empty; sasl.mechanism PLAIN needs one (or set BRAID_KAFKA_SASL_PASSWORD)"},
		},
		{
			name: "password file missing",
			sasl: kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: missing},
			want: []string{"sasl.password_file: open " + missing},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafka.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: tc.tls, SASL: tc.sasl}
			c.EnsureDefaults()
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				if err := c.Prepare(); err != nil {
					t.Fatalf("Prepare = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want errors %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("Validate gave %d errors, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v\nwant it to contain %q", err, w)
				}
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "kafka: tls.") && !strings.HasPrefix(l, "kafka: sasl.") {
					t.Errorf("error %q does not start with the field", l)
				}
			}
			// Prepare refuses the same configuration.
			if err := c.Prepare(); err == nil {
				t.Errorf("Prepare = nil for an invalid configuration")
			}
		})
	}
}

// TestPrepareParses: what Validate cannot see (files that are not PEM,
// an empty password file) Prepare reports, naming the field.
func TestPrepareParses(t *testing.T) {
	p := newPKI(t)
	notPEM := writeFile(t, "not.pem", "hello")
	empty := writeFile(t, "empty", "\n")
	for _, tc := range []struct {
		name string
		cfg  kafka.Config
		want string
	}{
		{"ca not pem", kafka.Config{TLS: kafka.TLSConfig{Enabled: true, CAFile: notPEM}}, "tls.ca_file " + notPEM + " holds no PEM certificate"},
		{"key not pem", kafka.Config{TLS: kafka.TLSConfig{Enabled: true, CertFile: p.certFile, KeyFile: notPEM}}, "tls.cert_file " + p.certFile + " and tls.key_file " + notPEM},
		{"key of another cert", kafka.Config{TLS: kafka.TLSConfig{Enabled: true, CertFile: p.caFile, KeyFile: p.keyFile}}, "tls.cert_file"},
		{"empty password file", kafka.Config{SASL: kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", PasswordFile: empty}}, "sasl.password_file " + empty + " is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Brokers = []string{"127.0.0.1:9092"}
			tc.cfg.EnsureDefaults()
			if err := tc.cfg.Validate(); err != nil {
				t.Fatalf("Validate = %v, want nil (files are readable)", err)
			}
			if err := tc.cfg.Prepare(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Prepare = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	c := kafka.Config{SASL: kafka.SASLConfig{Mechanism: "PLAIN", Username: "file-user", PasswordFile: "/run/secrets/pw"}}
	c.ApplyEnv(get)
	if c.SASL.Username != "file-user" || c.SASL.PasswordFile != "/run/secrets/pw" || c.SASL.Password != "" {
		t.Fatalf("without env: %v", c.SASL)
	}
	env[kafka.EnvSASLUsername], env[kafka.EnvSASLPassword] = "env-user", "env-pw\r\n"
	c.ApplyEnv(get)
	if c.SASL.Username != "env-user" || c.SASL.Password != "env-pw" || c.SASL.PasswordFile != "" {
		t.Fatalf("with env: username %q password %q password_file %q; want env-user, env-pw and no file",
			c.SASL.Username, c.SASL.Password, c.SASL.PasswordFile)
	}
	if kafka.EnvSASLUsername != "BRAID_KAFKA_SASL_USERNAME" || kafka.EnvSASLPassword != "BRAID_KAFKA_SASL_PASSWORD" {
		t.Fatal("the documented variable names changed")
	}
}

// TestPasswordNotPrinted: printing a Config does not show the password.
func TestPasswordNotPrinted(t *testing.T) {
	c := kafka.Config{Brokers: []string{"b:1"}, SASL: kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "hunter2"}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, c); strings.Contains(s, "hunter2") {
			t.Errorf("%s prints the password: %s", verb, s)
		}
		if s := fmt.Sprintf(verb, &c); strings.Contains(s, "hunter2") {
			t.Errorf("%s of a pointer prints the password: %s", verb, s)
		}
	}
}

// TestSecurityKfake runs TLS with client certificates and each SASL
// mechanism against franz-go's in-process fake broker.
func TestSecurityKfake(t *testing.T) {
	p := newPKI(t)
	const user, pass = "braid", "kfake-secret"
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{p.server},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    p.pool,
		}),
		kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismPlain, user, pass),
		kfake.Superuser(kafka.MechanismSCRAMSHA256, user, pass),
		kfake.Superuser(kafka.MechanismSCRAMSHA512, user, pass),
		kfake.SeedTopics(1, "sec"),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	mtls := kafka.TLSConfig{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}
	// As a Secret file often is: with a trailing newline (CRLF here).
	pwFile := writeFile(t, "pw", pass+"\r\n")

	for _, mech := range []string{kafka.MechanismPlain, kafka.MechanismSCRAMSHA256, kafka.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			c := kafka.Config{Brokers: brokers, TLS: mtls, SASL: kafka.SASLConfig{Mechanism: mech, Username: user, PasswordFile: pwFile}}
			c.EnsureDefaults()
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if err := c.Prepare(); err != nil {
				t.Fatal(err)
			}
			produceConsume(t, &c, "sec")

			bad := c
			bad.SASL.PasswordFile, bad.SASL.Password = "", "wrong"
			// kfake drops the connection (the real broker's answer,
			// SASL_AUTHENTICATION_FAILED, is checked in security_test.go).
			if err := kfakePing(&bad); err == nil {
				t.Errorf("wrong password: ping succeeded")
			}
		})
	}

	sasl := kafka.SASLConfig{Mechanism: kafka.MechanismSCRAMSHA512, Username: user, Password: pass}
	for _, tc := range []struct {
		name string
		tls  kafka.TLSConfig
		want string
	}{
		{"no client certificate", kafka.TLSConfig{Enabled: true, CAFile: p.caFile}, ""},
		{"another CA", kafka.TLSConfig{Enabled: true, CAFile: p.otherCAFile, CertFile: p.certFile, KeyFile: p.keyFile}, "certificate signed by unknown authority"},
		{"wrong server name", kafka.TLSConfig{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "kafka.example"}, "kafka.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafka.Config{Brokers: brokers, TLS: tc.tls, SASL: sasl}
			c.EnsureDefaults()
			if err := c.Prepare(); err != nil {
				t.Fatal(err)
			}
			err := kfakePing(&c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ping = %v, want an error containing %q", err, tc.want)
			}
		})
	}

	t.Run("server name and insecure skip verify", func(t *testing.T) {
		for _, tc := range []kafka.TLSConfig{
			{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile, ServerName: "localhost"},
			{Enabled: true, CAFile: p.otherCAFile, CertFile: p.certFile, KeyFile: p.keyFile, InsecureSkipVerify: true},
		} {
			c := kafka.Config{Brokers: brokers, TLS: tc, SASL: sasl}
			c.EnsureDefaults()
			if err := c.Prepare(); err != nil {
				t.Fatal(err)
			}
			if err := kfakePing(&c); err != nil {
				t.Errorf("%+v: ping = %v", tc, err)
			}
		}
	})
}

// TestOptsFailsClosed: Opts reads the files itself when Prepare was not
// called, keeps using what Prepare read, reloads when the fields change, and
// when the files cannot be read it gives a client that never connects
// rather than one without TLS.
func TestOptsFailsClosed(t *testing.T) {
	p := newPKI(t)
	var accepted atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()

	missing := filepath.Join(t.TempDir(), "ca.pem")
	c := kafka.Config{Brokers: []string{ln.Addr().String()}, TLS: kafka.TLSConfig{Enabled: true, CAFile: missing}}
	c.EnsureDefaults()
	err = pingWithin(&c, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Fatalf("ping with an unreadable CA file = %v, want the tls.ca_file error", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the client connected %d times despite the unreadable CA file", n)
	}

	// Prepared, the file may go: Opts uses what Prepare read.
	ca, err := os.ReadFile(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(missing, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	if err := pingWithin(&c, 3*time.Second); err == nil || strings.Contains(err.Error(), "tls.ca_file") {
		t.Fatalf("ping after Prepare = %v, want a TLS failure against a plain TCP listener, not a file error", err)
	}
	if accepted.Load() == 0 {
		t.Fatal("after Prepare the client never dialled")
	}
	// A changed field is not what was prepared: Opts loads again, and fails.
	c.TLS.ServerName = "kafka"
	if err := pingWithin(&c, 3*time.Second); err == nil || !strings.Contains(err.Error(), "tls.ca_file") {
		t.Fatalf("ping after a change = %v, want the tls.ca_file error", err)
	}
}

func kfakePing(c *kafka.Config) error { return pingWithin(c, 10*time.Second) }

func pingWithin(c *kafka.Config, d time.Duration) error {
	cl, err := kgo.NewClient(append(c.Opts(), kgo.RequestRetries(0))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err = kadm.NewClient(cl).ListBrokers(ctx)
	return err
}

func produceConsume(t *testing.T, c *kafka.Config, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Records of earlier subtests may be there: look for this one.
	cl, err := kgo.NewClient(append(c.Opts(), kgo.DefaultProduceTopic(topic),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := "over " + t.Name()
	if err := cl.ProduceSync(ctx, kgo.StringRecord(want)).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		for _, r := range fs.Records() {
			if string(r.Value) == want {
				return
			}
		}
	}
}
