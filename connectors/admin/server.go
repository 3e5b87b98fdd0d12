package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultAddr is the admin address of a job configured from a file:
// loopback only.
const DefaultAddr = "127.0.0.1:9464"

// Config configures a Server.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free port (see
	// Server.Addr). Required.
	Addr string
	// Gatherer is served at /metrics: the job's registry, not the global
	// one. Required.
	Gatherer prometheus.Gatherer
	// Ready is the readiness check of /readyz: nil when ready, else the
	// reason, which is written in the 503 response. Default: always ready.
	// See Readiness. It must be safe for concurrent use.
	Ready func() error
	// Logger, default slog.Default().
	Logger *slog.Logger
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests get
	// this long, then their connections are closed. Default 5s.
	ShutdownTimeout time.Duration
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Ready == nil {
		c.Ready = func() error { return nil }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if err := CheckAddr(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("admin: Config.Addr: %w", err))
	}
	if c.Gatherer == nil {
		errs = append(errs, errors.New("admin: Config.Gatherer is required"))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("admin: Config.ShutdownTimeout %v is negative", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// CheckAddr reports whether addr is a host:port to listen on: an optional
// host (empty for every interface) and a numeric port, 0 for any free port.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("address %s: port %q is not a number in 0–65535", addr, port)
	}
	return nil
}

// Server is the admin HTTP server:
//
//	/metrics  Prometheus text format (OpenMetrics on request) of the Gatherer
//	/healthz  200 while the process serves (liveness)
//	/readyz   200 when Config.Ready returns nil, else 503 with the reason
//	/debug/pprof/  the Go runtime's profiles (net/http/pprof), as Prometheus
//	          serves them: heap, goroutine, CPU profile, execution trace
//
// New binds the address; Run serves until its context is done or Close is
// called. Close is idempotent and safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	srv *http.Server

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}
}

// New validates cfg and listens on cfg.Addr, so that a port in use is
// reported before the job starts.
func New(cfg Config) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "admin"), ln: ln, closed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:          promLogger{s.log},
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           30 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Addr is the address the server listens on: with port 0 in Config.Addr,
// the port picked.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.cfg.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Run serves until ctx is done or Close is called, then shuts down within
// Config.ShutdownTimeout. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	s.log.Info("admin server listening", "addr", s.Addr().String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.srv.Serve(s.ln) }()
	select {
	case <-ctx.Done():
	case <-s.closed:
	case err := <-serveErr:
		cerr := s.Close()
		if errors.Is(err, http.ErrServerClosed) { // Close came first
			return cerr
		}
		return fmt.Errorf("admin: serve: %w", err)
	}
	cerr := s.Close()
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin: serve: %w", err)
	}
	return cerr
}

// Close stops the server: it stops accepting, lets in-flight requests finish
// within Config.ShutdownTimeout and then closes their connections. Later
// calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if err != nil {
			s.srv.Close()
			s.closeErr = fmt.Errorf("admin: shutdown: %w", err)
		}
		// Shutdown closes the listener only if Serve runs; closing it
		// again is harmless.
		s.ln.Close()
	})
	return s.closeErr
}

// promLogger adapts slog to promhttp.Logger.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }
