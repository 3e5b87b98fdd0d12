package alertmanager

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config configures a [Sink]. Call [Config.EnsureDefaults] and
// [Config.Validate] before [New] (New does both).
type Config struct {
	// URLs are the Alertmanagers' base URLs, such as
	// http://alertmanager:9093 (with the route prefix as path, if it has
	// one); alerts are posted to <URL>/api/v2/alerts of each. Required.
	URLs []string `yaml:"urls"`
	// Timeout bounds one request, connection included. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// ResendInterval is how often every firing alert is posted again; each
	// post sets its endsAt to now + 4 × ResendInterval. Default 1m, as in
	// Prometheus.
	ResendInterval time.Duration `yaml:"resend_interval"`
	// MaxAlerts bounds the alerts the Sink holds (firing ones, and
	// resolved ones until every Alertmanager took them). Default 10000.
	MaxAlerts int `yaml:"max_alerts"`
	// MaxBatch is the most alerts in one request. Default 256.
	MaxBatch int `yaml:"max_batch"`
	// BackoffMin and BackoffMax bound the wait before retrying a failed
	// post; it doubles from BackoffMin after each failure of a row, up to
	// BackoffMax, and is jittered down by up to half. Defaults 100ms and
	// 30s.
	BackoffMin time.Duration `yaml:"backoff_min"`
	BackoffMax time.Duration `yaml:"backoff_max"`
	// BasicAuth, when its Username is set, authenticates every request
	// with HTTP basic authentication. Default off.
	BasicAuth BasicAuth `yaml:"basic_auth"`
	// BearerToken, when set, is sent as "Authorization: Bearer <token>".
	// Default off; exclusive with BasicAuth and BearerTokenFile.
	BearerToken string `yaml:"bearer_token"`
	// BearerTokenFile names a file holding the bearer token (surrounding
	// white space trimmed), read once by New. Default off.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// TLS for https URLs. Default: the system's roots.
	TLS TLSConfig `yaml:"tls"`
	// Logger receives delivery problems (once when a destination starts
	// failing, once when it recovers). Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// BasicAuth is HTTP basic authentication.
type BasicAuth struct {
	// Username; empty means no basic authentication.
	Username string `yaml:"username"`
	// Password; exclusive with PasswordFile.
	Password string `yaml:"password"`
	// PasswordFile names a file holding the password (a trailing newline
	// trimmed), read once by New.
	PasswordFile string `yaml:"password_file"`
}

// TLSConfig configures the TLS of https URLs.
type TLSConfig struct {
	// CAFile names a PEM file of the certificate authorities that sign the
	// Alertmanagers' certificates; when set, only these are trusted.
	// Default: the system's roots.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name the certificate is checked against.
	// Default: the URL's host.
	ServerName string `yaml:"server_name"`
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ResendInterval == 0 {
		c.ResendInterval = time.Minute
	}
	if c.MaxAlerts == 0 {
		c.MaxAlerts = 10000
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every problem at once, naming the field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("alertmanager: "+format, args...))
	}
	if len(c.URLs) == 0 {
		bad("urls is empty")
	}
	for i, raw := range c.URLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			bad("urls[%d]: %v", i, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("urls[%d] %q: scheme must be http or https", i, raw)
		case u.Host == "":
			bad("urls[%d] %q: no host", i, raw)
		case u.RawQuery != "" || u.Fragment != "":
			bad("urls[%d] %q: a base URL has no query or fragment", i, raw)
		}
	}
	if c.Timeout < 0 {
		bad("timeout %v is negative", c.Timeout)
	}
	if c.ResendInterval < 0 {
		bad("resend_interval %v is negative", c.ResendInterval)
	}
	if c.MaxAlerts < 0 {
		bad("max_alerts %d is negative", c.MaxAlerts)
	}
	if c.MaxBatch < 0 {
		bad("max_batch %d is negative", c.MaxBatch)
	}
	if c.BackoffMin < 0 || c.BackoffMax < 0 {
		bad("backoff_min %v and backoff_max %v must not be negative", c.BackoffMin, c.BackoffMax)
	} else if c.BackoffMax != 0 && c.BackoffMin > c.BackoffMax {
		bad("backoff_min %v is above backoff_max %v", c.BackoffMin, c.BackoffMax)
	}
	ba := c.BasicAuth
	if ba.Username == "" && (ba.Password != "" || ba.PasswordFile != "") {
		bad("basic_auth: password without username")
	}
	if ba.Password != "" && ba.PasswordFile != "" {
		bad("basic_auth: password and password_file are exclusive")
	}
	if c.BearerToken != "" && c.BearerTokenFile != "" {
		bad("bearer_token and bearer_token_file are exclusive")
	}
	if ba.Username != "" && (c.BearerToken != "" || c.BearerTokenFile != "") {
		bad("basic_auth and bearer_token are exclusive")
	}
	for _, f := range []struct{ field, name string }{
		{"basic_auth.password_file", ba.PasswordFile},
		{"bearer_token_file", c.BearerTokenFile},
		{"tls.ca_file", c.TLS.CAFile},
	} {
		if f.name == "" {
			continue
		}
		if _, err := os.Stat(f.name); err != nil {
			bad("%s: %v", f.field, err)
		}
	}
	return errors.Join(errs...)
}

// endpoints returns <URL>/api/v2/alerts for every URL.
func (c *Config) endpoints() []string {
	out := make([]string, len(c.URLs))
	for i, raw := range c.URLs {
		u, _ := url.Parse(raw) // checked by Validate
		u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v2/alerts"
		u.RawPath = ""
		out[i] = u.String()
	}
	return out
}

// authorization returns the Authorization header value, reading the
// password or token file; "" without authentication.
func (c *Config) authorization() (string, error) {
	if c.BasicAuth.Username != "" {
		pw := c.BasicAuth.Password
		if f := c.BasicAuth.PasswordFile; f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", fmt.Errorf("alertmanager: read basic_auth.password_file: %w", err)
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		r := http.Request{Header: http.Header{}}
		r.SetBasicAuth(c.BasicAuth.Username, pw)
		return r.Header.Get("Authorization"), nil
	}
	tok := c.BearerToken
	if f := c.BearerTokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("alertmanager: read bearer_token_file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("alertmanager: bearer_token_file %s is empty", f)
		}
	}
	if tok == "" {
		return "", nil
	}
	return "Bearer " + tok, nil
}

// client returns the HTTP client for the Alertmanagers.
func (c *Config) client() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLS.ServerName}
	if f := c.TLS.CAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("alertmanager: read tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("alertmanager: tls.ca_file %s holds no PEM certificate", f)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{
		Transport: tr,
		Timeout:   c.Timeout,
		// A redirect would re-send the body to a place the config does
		// not name; report it instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
