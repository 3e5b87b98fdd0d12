package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Alert is the state of one alert episode.
type Alert struct {
	// Labels identify the alert to Alertmanager: their set is its
	// fingerprint, which routing, grouping, silences and inhibition match.
	// They must include a non-empty "alertname"; names match
	// [a-zA-Z_][a-zA-Z0-9_]*, values are UTF-8. Labels with an empty value
	// are left out, as in Prometheus.
	Labels map[string]string
	// Annotations carry information that does not identify the alert
	// (summary, value, exemplar trace ids); names and values as for
	// Labels. Optional.
	Annotations map[string]string
	// StartsAt is when the episode began. It must be the same whenever
	// the episode is sent (after a restart too). Zero: Alertmanager uses
	// the time it first receives the alert.
	StartsAt time.Time
	// EndsAt is when a resolved episode ended; zero or later than the time
	// of [Sink.Update] means then, and it is never before StartsAt. Ignored
	// while Firing (the Sink sets the end of the alert's validity).
	EndsAt time.Time
	// GeneratorURL links back to the alert's source in braid. Optional; a
	// URL.
	GeneratorURL string
	// Firing is true while the episode fires, false once it resolved.
	Firing bool
	// Key identifies the episode across updates (and restarts): a later
	// Update with the same Key replaces this one. Required.
	Key string
}

// Errors of [Sink.Update].
var (
	// ErrInvalidAlert: the alert breaks a rule of [Alert]'s fields.
	ErrInvalidAlert = errors.New("alertmanager: invalid alert")
	// ErrFull: the Sink holds Config.MaxAlerts firing alerts; the new one
	// is dropped.
	ErrFull = errors.New("alertmanager: full of firing alerts")
	// ErrClosed: the Sink is closed.
	ErrClosed = errors.New("alertmanager: sink closed")
)

// Counters are a Sink's delivery figures, safe to read at any time.
type Counters struct {
	// Sent counts alerts an Alertmanager accepted: one per alert, post and
	// Alertmanager.
	Sent atomic.Uint64
	// Failed counts posts that failed: no connection, a timeout, an HTTP
	// status other than 2xx. All but 4xx answers are retried.
	Failed atomic.Uint64
	// Dropped counts alerts given up on: refused or pushed out while the
	// Sink was full, in a post that an Alertmanager answered with a 4xx
	// status other than 408 and 429, or not yet delivered at Close.
	Dropped atomic.Uint64
}

// Sink posts alert state changes to Alertmanagers. Update may be called
// from any goroutine; one goroutine calls Run.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	auth    string
	dests   []*dest
	counter Counters

	running   atomic.Bool
	closing   chan struct{} // closed by Close
	done      chan struct{} // closed when Run returns
	closeOnce sync.Once

	mu struct {
		sync.Mutex
		alerts map[string]*entry
		seq    uint64 // the last seq given out
		closed bool
	}
}

// entry is the latest state of one Key (or of a retired alert, under a key
// starting with NUL).
type entry struct {
	key   string
	alert Alert  // normalised: private maps, EndsAt set if resolved
	seq   uint64 // bumped on each change
	// delivered[i] is the seq that Alertmanager i last took.
	delivered []uint64
	// offered: some version went into a post, which may have reached an
	// Alertmanager whatever its answer (every version one took was).
	offered bool
}

// dest is one Alertmanager; its fields beyond the first two belong to its
// goroutine.
type dest struct {
	i        int
	endpoint string
	wake     chan struct{} // capacity 1: a change is waiting
	failures int           // failed posts in a row
}

// New returns a Sink for cfg, after EnsureDefaults and Validate; it reads
// the files that cfg names.
func New(cfg Config) (*Sink, error) {
	cfg.URLs = slices.Clone(cfg.URLs)
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := cfg.client()
	if err != nil {
		return nil, err
	}
	auth, err := cfg.authorization()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "alertmanager"),
		client:  client,
		auth:    auth,
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	for i, ep := range cfg.endpoints() {
		s.dests = append(s.dests, &dest{i: i, endpoint: ep, wake: make(chan struct{}, 1)})
	}
	s.mu.alerts = make(map[string]*entry)
	return s, nil
}

// Counters returns the Sink's figures.
func (s *Sink) Counters() *Counters { return &s.counter }

// Pending returns how many alerts the Sink holds: firing ones, and
// resolved ones that some Alertmanager has not taken yet.
func (s *Sink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.alerts)
}

// Update records a's state; Run posts it. An Update equal to the state
// held changes nothing. When a's labels differ from those held for its Key,
// or a fires again after a resolved state that was not yet delivered, the
// state held is kept and delivered as resolved first. It returns an error
// wrapping ErrInvalidAlert, ErrFull or ErrClosed, and never blocks on
// delivery.
func (s *Sink) Update(a Alert) error {
	if err := check(a); err != nil {
		return err
	}
	now := time.Now()
	n := normalise(a, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	if e := s.mu.alerts[a.Key]; e != nil {
		if same(e.alert, n) {
			return nil
		}
		if maps.Equal(e.alert.Labels, n.Labels) && (e.alert.Firing || !n.Firing) {
			s.mu.seq++
			e.alert, e.seq = n, s.mu.seq
			s.wakeAll()
			return nil
		}
		s.retireLocked(e, now)
	}
	if err := s.makeRoomLocked(n); err != nil {
		return err
	}
	s.mu.seq++
	s.mu.alerts[a.Key] = &entry{key: a.Key, alert: n, seq: s.mu.seq, delivered: make([]uint64, len(s.dests))}
	s.wakeAll()
	return nil
}

// retireLocked moves e off its Key, as a resolved alert, if some
// Alertmanager took it or a post of it is or was on its way (it may have
// arrived whatever the answer), and drops it otherwise.
//
// REQUIRES: s.mu held.
func (s *Sink) retireLocked(e *entry, now time.Time) {
	delete(s.mu.alerts, e.key)
	if !e.offered {
		return
	}
	if e.alert.Firing {
		e.alert.Firing = false
		e.alert.EndsAt = endOf(e.alert.StartsAt, time.Time{}, now)
	}
	s.mu.seq++
	e.seq = s.mu.seq
	e.key = "\x00" + strconv.FormatUint(e.seq, 10)
	s.mu.alerts[e.key] = e
}

// makeRoomLocked makes room for one more alert: it drops the oldest
// resolved alert when the Sink is full, or refuses n when all it holds
// fire.
//
// REQUIRES: s.mu held.
func (s *Sink) makeRoomLocked(n Alert) error {
	if len(s.mu.alerts) < s.cfg.MaxAlerts {
		return nil
	}
	var oldest *entry
	for _, e := range s.mu.alerts {
		if !e.alert.Firing && (oldest == nil || e.seq < oldest.seq) {
			oldest = e
		}
	}
	s.counter.Dropped.Add(1)
	if oldest == nil {
		return fmt.Errorf("alertmanager: alert %q: %d alerts fire: %w", n.Key, len(s.mu.alerts), ErrFull)
	}
	delete(s.mu.alerts, oldest.key)
	return nil
}

// wakeAll tells every destination that a change waits.
func (s *Sink) wakeAll() {
	for _, d := range s.dests {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// Run posts changes to every Alertmanager until ctx is done or Close is
// called; on Close it first tries once to post what an Alertmanager lacks.
// A post in flight when Close is called and that final one have
// Config.Timeout in all. Run returns nil then, and an error if Run was
// called before or the Sink is closed.
func (s *Sink) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("alertmanager: Run called twice")
	}
	defer close(s.done)
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // Close's deadline
		select {
		case <-s.closing:
			t := time.NewTimer(s.cfg.Timeout)
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, d := range s.dests {
		wg.Go(func() { s.runDest(ctx, d) })
	}
	wg.Wait()
	return nil
}

// Close stops Run after its final post (see Run) and waits for it; an
// Update after Close returns ErrClosed. Alerts that some Alertmanager
// lacks by then are counted as dropped. Later calls do nothing. It returns
// nil.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		close(s.closing)
		if s.running.Load() {
			<-s.done
		}
		s.mu.Lock()
		for _, e := range s.mu.alerts {
			if pending(e) {
				s.counter.Dropped.Add(1)
			}
		}
		s.mu.Unlock()
	})
	return nil
}

// pending reports whether some Alertmanager lacks e's latest version.
func pending(e *entry) bool {
	for _, seq := range e.delivered {
		if seq < e.seq {
			return true
		}
	}
	return false
}

// runDest delivers to d until ctx is done or the Sink closes.
func (s *Sink) runDest(ctx context.Context, d *dest) {
	resend := time.NewTimer(s.cfg.ResendInterval)
	defer resend.Stop()
	resendDue := false
	var retry <-chan time.Time
	for {
		if retry == nil {
			batch := s.collect(d.i, resendDue)
			if len(batch) == 0 && resendDue {
				resendDue = false
				resend.Reset(s.cfg.ResendInterval)
			}
			if len(batch) > 0 {
				err := s.deliver(ctx, d, batch)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					retry = time.After(s.backoff(d, err))
				} else {
					s.recovered(d)
					if resendDue {
						resendDue = false
						resend.Reset(s.cfg.ResendInterval)
					}
				}
				continue // pick up what changed meanwhile
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			s.flush(ctx, d)
			return
		case <-d.wake:
		case <-resend.C:
			resendDue = true
		case <-retry:
			retry = nil
		}
	}
}

// flush tries once to post to d what it lacks.
func (s *Sink) flush(ctx context.Context, d *dest) {
	batch := s.collect(d.i, false)
	if len(batch) == 0 {
		return
	}
	if err := s.deliver(ctx, d, batch); err != nil {
		s.log.Warn("final post to Alertmanager", "url", d.endpoint, "err", err)
	}
}

// backoff counts a failed post and returns how long to wait before the
// next: BackoffMin doubled per failure in a row, up to BackoffMax, less a
// random part of up to half.
func (s *Sink) backoff(d *dest, err error) time.Duration {
	d.failures++
	if d.failures == 1 {
		s.log.Warn("posting to Alertmanager fails; retrying", "url", d.endpoint, "err", err)
	}
	wait := s.cfg.BackoffMin
	for i := 1; i < d.failures && wait < s.cfg.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, s.cfg.BackoffMax)
	if half := int64(wait / 2); half > 0 {
		wait -= time.Duration(rand.Int64N(half + 1))
	}
	return wait
}

func (s *Sink) recovered(d *dest) {
	if d.failures > 0 {
		s.log.Info("posting to Alertmanager works again", "url", d.endpoint, "failed_posts", d.failures)
		d.failures = 0
	}
}

// item is one alert of a batch: the entry and the version sent.
type item struct {
	e     *entry
	seq   uint64
	alert Alert
}

// collect returns the alerts to post to Alertmanager i, oldest change
// first: those it lacks the latest version of, and with all every firing
// one.
func (s *Sink) collect(i int, all bool) []item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []item
	for _, e := range s.mu.alerts {
		if e.delivered[i] < e.seq || (all && e.alert.Firing) {
			e.offered = true
			out = append(out, item{e: e, seq: e.seq, alert: e.alert})
		}
	}
	slices.SortFunc(out, func(a, b item) int { return cmpUint(a.seq, b.seq) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ack records that Alertmanager i took items, and forgets resolved alerts
// that every Alertmanager took.
func (s *Sink) ack(i int, items []item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		e := it.e
		e.delivered[i] = max(e.delivered[i], it.seq)
		if !e.alert.Firing && !pending(e) && s.mu.alerts[e.key] == e {
			delete(s.mu.alerts, e.key)
		}
	}
}

// errRetry marks a failed post worth retrying.
var errRetry = errors.New("retry")

// deliver posts batch to d in requests of at most MaxBatch alerts. It
// returns the first error worth retrying; the requests before it stay
// delivered.
func (s *Sink) deliver(ctx context.Context, d *dest, batch []item) error {
	for chunk := range slices.Chunk(batch, s.cfg.MaxBatch) {
		body, err := encode(chunk, time.Now(), s.cfg.ResendInterval)
		if err == nil {
			err = s.post(ctx, d.endpoint, body)
		}
		switch {
		case err == nil:
			s.counter.Sent.Add(uint64(len(chunk)))
			s.ack(d.i, chunk)
		case errors.Is(err, errRetry):
			s.counter.Failed.Add(1)
			return err
		default:
			// Alertmanager refused the request itself (or it could not
			// be encoded); the same request would fail again.
			s.counter.Failed.Add(1)
			s.counter.Dropped.Add(uint64(len(chunk)))
			s.log.Error("Alertmanager refused alerts; dropped", "url", d.endpoint, "alerts", len(chunk), "err", err)
			s.ack(d.i, chunk)
		}
	}
	return nil
}

// post sends one request. Its error wraps errRetry unless Alertmanager
// answered with a 4xx status other than 408 and 429.
func (s *Sink) post(ctx context.Context, endpoint string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alertmanager: post to %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "braid")
	if s.auth != "" {
		req.Header.Set("Authorization", s.auth)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err // the URL is in the message already
		}
		return fmt.Errorf("alertmanager: post to %s: %w (%w)", endpoint, err, errRetry)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // keep the connection reusable
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("alertmanager: post to %s: %s: %q", endpoint, resp.Status, bytes.TrimSpace(msg))
	if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
		return err
	}
	return fmt.Errorf("%w (%w)", err, errRetry)
}

// postableAlert is the v2 API's postableAlert.
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     string            `json:"startsAt,omitempty"`
	EndsAt       string            `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// encode returns the JSON body for items posted at now: firing alerts end
// at now + 4 × resend.
func encode(items []item, now time.Time, resend time.Duration) ([]byte, error) {
	out := make([]postableAlert, len(items))
	for i, it := range items {
		a := it.alert
		end := a.EndsAt
		if a.Firing {
			end = now.Add(4 * resend)
		}
		out[i] = postableAlert{
			Labels:       a.Labels,
			Annotations:  a.Annotations,
			EndsAt:       rfc3339(end),
			GeneratorURL: a.GeneratorURL,
		}
		if !a.StartsAt.IsZero() {
			out[i].StartsAt = rfc3339(a.StartsAt)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("alertmanager: encode alerts: %w", err)
	}
	return b, nil
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// check reports why a breaks a rule of Alert's fields.
func check(a Alert) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("alertmanager: alert %q: %s: %w", a.Key, fmt.Sprintf(format, args...), ErrInvalidAlert)
	}
	if a.Key == "" || a.Key[0] == 0 {
		return bad("key is empty or starts with NUL")
	}
	if a.Labels["alertname"] == "" {
		return bad("no alertname label")
	}
	for _, kind := range []string{"label", "annotation"} {
		m := a.Labels
		if kind == "annotation" {
			m = a.Annotations
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			if !validName(k) {
				return bad("%s name %q is not [a-zA-Z_][a-zA-Z0-9_]*", kind, k)
			}
			if !utf8.ValidString(v) {
				return bad("%s %s: value is not UTF-8", kind, k)
			}
		}
	}
	if a.GeneratorURL != "" {
		if _, err := url.Parse(a.GeneratorURL); err != nil {
			return bad("generator URL: %v", err)
		}
	}
	return nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// normalise returns a with maps of its own, empty label values left out
// and, if resolved, its end time fixed.
func normalise(a Alert, now time.Time) Alert {
	labels := make(map[string]string, len(a.Labels))
	for k, v := range a.Labels {
		if v != "" {
			labels[k] = v
		}
	}
	a.Labels = labels
	if len(a.Annotations) > 0 {
		a.Annotations = maps.Clone(a.Annotations)
	} else {
		a.Annotations = nil
	}
	if a.Firing {
		a.EndsAt = time.Time{}
	} else {
		a.EndsAt = endOf(a.StartsAt, a.EndsAt, now)
	}
	return a
}

// endOf returns the end time of a resolved alert: end, if set and not
// after now, else now; never before start.
func endOf(start, end, now time.Time) time.Time {
	if end.IsZero() || end.After(now) {
		end = now
	}
	if end.Before(start) {
		end = start
	}
	return end
}

// same reports whether a and b are the same state.
func same(a, b Alert) bool {
	return a.Firing == b.Firing && a.StartsAt.Equal(b.StartsAt) && a.EndsAt.Equal(b.EndsAt) &&
		a.GeneratorURL == b.GeneratorURL && maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}
