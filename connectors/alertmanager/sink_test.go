package alertmanager

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// received is one request as the fake Alertmanager saw it.
type received struct {
	at     time.Time
	method string
	path   string
	header http.Header
	raw    []map[string]json.RawMessage
	alerts []postableAlert
}

// fakeAM is an Alertmanager's v2 alerts endpoint that records every request
// and answers with the status that status returns for the n-th (from 0).
type fakeAM struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	status func(n int) int
}

func newFakeAM(t *testing.T, status func(n int) int) *fakeAM {
	f := &fakeAM{status: status}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := received{at: time.Now(), method: r.Method, path: r.URL.Path, header: r.Header.Clone()}
	_ = json.Unmarshal(body, &rec.raw)
	_ = json.Unmarshal(body, &rec.alerts)
	f.mu.Lock()
	n := len(f.got)
	f.got = append(f.got, rec)
	f.mu.Unlock()
	code := http.StatusOK
	if f.status != nil {
		code = f.status(n)
	}
	w.WriteHeader(code)
}

func (f *fakeAM) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// posted returns every alert posted with a 2xx answer, in order.
func (f *fakeAM) posted() []postableAlert {
	var out []postableAlert
	for i, r := range f.requests() {
		if f.status == nil || f.status(i)/100 == 2 {
			out = append(out, r.alerts...)
		}
	}
	return out
}

// of returns the posted alerts named alertname.
func (f *fakeAM) of(alertname string) []postableAlert {
	var out []postableAlert
	for _, a := range f.posted() {
		if a.Labels["alertname"] == alertname {
			out = append(out, a)
		}
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start returns a running Sink for cfg, closed when the test ends.
func start(t *testing.T, cfg Config) *Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	t.Cleanup(func() {
		s.Close()
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func firing(name string, startsAt time.Time) Alert {
	return Alert{
		Key:          "rule/" + name,
		Labels:       map[string]string{"alertname": name, "severity": "page", "model": "llama"},
		Annotations:  map[string]string{"summary": "p99 above 2s"},
		StartsAt:     startsAt,
		GeneratorURL: "http://braid:8080/alerts?rule=" + name,
		Firing:       true,
	}
}

func resolved(a Alert, endsAt time.Time) Alert {
	a.Firing, a.EndsAt = false, endsAt
	return a
}

func mustUpdate(t *testing.T, s *Sink, a Alert) {
	t.Helper()
	if err := s.Update(a); err != nil {
		t.Fatal(err)
	}
}

// TestRequestShape checks a post against the v2 API's OpenAPI spec: POST
// <prefix>/api/v2/alerts, a JSON array of postableAlert (labels required;
// annotations, startsAt, endsAt, generatorURL optional; times date-time,
// that is RFC 3339).
func TestRequestShape(t *testing.T) {
	am := newFakeAM(t, nil)
	start0 := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	s := start(t, Config{URLs: []string{am.srv.URL + "/prefix/"}, ResendInterval: time.Hour})
	a := firing("KVCacheHitRateLow", start0)
	a.Labels["empty"] = ""
	before := time.Now()
	mustUpdate(t, s, a)
	waitFor(t, "one post", func() bool { return len(am.requests()) == 1 })
	after := time.Now()
	r := am.requests()[0]
	if r.method != http.MethodPost || r.path != "/prefix/api/v2/alerts" {
		t.Errorf("request %s %s, want POST /prefix/api/v2/alerts", r.method, r.path)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if len(r.raw) != 1 {
		t.Fatalf("posted %d alerts, want 1", len(r.raw))
	}
	var keys []string
	for k := range r.raw[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"annotations", "endsAt", "generatorURL", "labels", "startsAt"}; !slices.Equal(keys, want) {
		t.Errorf("fields %v, want %v", keys, want)
	}
	var labels, annotations map[string]string
	var startsAt, endsAt, gen string
	for k, dst := range map[string]any{"labels": &labels, "annotations": &annotations, "startsAt": &startsAt, "endsAt": &endsAt, "generatorURL": &gen} {
		if err := json.Unmarshal(r.raw[0][k], dst); err != nil {
			t.Errorf("%s: %v (%s)", k, err, r.raw[0][k])
		}
	}
	if want := map[string]string{"alertname": "KVCacheHitRateLow", "severity": "page", "model": "llama"}; !mapsEqual(labels, want) {
		t.Errorf("labels %v, want %v (empty values left out)", labels, want)
	}
	if annotations["summary"] != "p99 above 2s" || gen != a.GeneratorURL {
		t.Errorf("annotations %v, generatorURL %q", annotations, gen)
	}
	st, err := time.Parse(time.RFC3339, startsAt)
	if err != nil || !st.Equal(start0) || !strings.HasSuffix(startsAt, "Z") {
		t.Errorf("startsAt %q (%v), want %v in UTC", startsAt, err, start0)
	}
	et, err := time.Parse(time.RFC3339, endsAt)
	if err != nil {
		t.Fatalf("endsAt %q: %v", endsAt, err)
	}
	// Firing: valid for four resend intervals from the post.
	if lo, hi := before.Add(4*time.Hour), after.Add(4*time.Hour); et.Before(lo) || et.After(hi) {
		t.Errorf("endsAt %v, want within [%v, %v]", et, lo, hi)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRetriesServerErrors(t *testing.T) {
	am := newFakeAM(t, func(n int) int {
		if n < 3 {
			return []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests}[n]
		}
		return http.StatusOK
	})
	s := start(t, Config{URLs: []string{am.srv.URL}, BackoffMin: 20 * time.Millisecond, ResendInterval: time.Hour})
	mustUpdate(t, s, firing("A", time.Now()))
	waitFor(t, "delivery after three failures", func() bool { return s.Counters().Sent.Load() == 1 })
	if f := s.Counters().Failed.Load(); f != 3 {
		t.Errorf("Failed = %d, want 3", f)
	}
	rs := am.requests()
	if len(rs) != 4 {
		t.Fatalf("%d requests, want 4", len(rs))
	}
	// Backoff: 20, 40, 80 ms, each jittered down by up to half.
	for i, want := range []time.Duration{10, 20, 40} {
		if gap := rs[i+1].at.Sub(rs[i].at); gap < want*time.Millisecond {
			t.Errorf("retry %d came %v after the failure, want at least %v", i+1, gap, want*time.Millisecond)
		}
	}
	for _, r := range rs {
		if len(r.alerts) != 1 || r.alerts[0].Labels["alertname"] != "A" {
			t.Errorf("request posted %+v, want alert A", r.alerts)
		}
	}
}

func TestRetriesConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	s := start(t, Config{URLs: []string{"http://" + addr}, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, ResendInterval: time.Hour})
	mustUpdate(t, s, firing("A", time.Now()))
	waitFor(t, "two refused posts", func() bool { return s.Counters().Failed.Load() >= 2 })
	if s.Counters().Sent.Load() != 0 {
		t.Fatal("Sent without a server")
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	am := &fakeAM{srv: httptest.NewUnstartedServer(nil)}
	am.srv.Config.Handler = am
	am.srv.Listener.Close()
	am.srv.Listener = ln
	am.srv.Start()
	t.Cleanup(am.srv.Close)
	waitFor(t, "delivery once the server listens", func() bool { return s.Counters().Sent.Load() == 1 })
	if n := len(am.of("A")); n != 1 {
		t.Errorf("A arrived %d times, want 1", n)
	}
}

func TestResendsFiringAlerts(t *testing.T) {
	am := newFakeAM(t, nil)
	const resend = 150 * time.Millisecond
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: resend})
	a := firing("A", time.Now().Add(-time.Minute))
	mustUpdate(t, s, a)
	waitFor(t, "four posts of A", func() bool { return len(am.of("A")) >= 4 })
	rs := am.requests()[:4]
	prevEnd := time.Time{}
	for i, r := range rs {
		if len(r.alerts) != 1 {
			t.Fatalf("request %d posted %d alerts, want 1", i, len(r.alerts))
		}
		p := r.alerts[0]
		if p.StartsAt != rfc3339(a.StartsAt) {
			t.Errorf("post %d startsAt %s, want %s", i, p.StartsAt, rfc3339(a.StartsAt))
		}
		end, err := time.Parse(time.RFC3339, p.EndsAt)
		if err != nil {
			t.Fatal(err)
		}
		// endsAt is set when the post is made: at most 4×resend after it
		// arrived, and later with each resend.
		if valid := end.Sub(r.at); valid > 4*resend || valid < 4*resend-time.Second {
			t.Errorf("post %d: endsAt %v after arrival, want about %v", i, valid, 4*resend)
		}
		if !end.After(prevEnd) {
			t.Errorf("post %d: endsAt %v not after the previous %v", i, end, prevEnd)
		}
		prevEnd = end
		if i >= 2 { // the first resend may come early (the timer runs from Run)
			if gap := r.at.Sub(rs[i-1].at); gap < resend-5*time.Millisecond {
				t.Errorf("resend %d came %v after the previous post, want at least %v", i, gap, resend)
			}
		}
	}
}

func TestResolvedIsSentOnceAndForgotten(t *testing.T) {
	am := newFakeAM(t, nil)
	const resend = 50 * time.Millisecond
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: resend})
	t0 := time.Now().Add(-time.Hour)
	a := firing("A", t0)
	mustUpdate(t, s, a)
	waitFor(t, "A firing", func() bool { return len(am.of("A")) == 1 })
	end := t0.Add(10 * time.Minute)
	mustUpdate(t, s, resolved(a, end))
	waitFor(t, "A resolved", func() bool { return len(am.of("A")) == 2 })
	waitFor(t, "nothing held", func() bool { return s.Pending() == 0 })
	got := am.of("A")[1]
	if got.EndsAt != rfc3339(end) || got.StartsAt != rfc3339(t0) {
		t.Errorf("resolved post startsAt %s endsAt %s, want %s and %s", got.StartsAt, got.EndsAt, rfc3339(t0), rfc3339(end))
	}
	// Barrier: B's second resend comes after two resend intervals, in which
	// A would have been re-sent if it were still held.
	mustUpdate(t, s, firing("B", time.Now()))
	waitFor(t, "B posted three times", func() bool { return len(am.of("B")) >= 3 })
	if n := len(am.of("A")); n != 2 {
		t.Errorf("A posted %d times, want 2 (firing, resolved)", n)
	}
}

func TestResolvedEndTimeIsClamped(t *testing.T) {
	am := newFakeAM(t, nil)
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: time.Hour})
	now := time.Now()
	future := firing("Future", now.Add(-time.Minute))
	mustUpdate(t, s, resolved(future, now.Add(time.Hour))) // not yet: ends now
	early := firing("Early", now.Add(-time.Minute))
	mustUpdate(t, s, resolved(early, now.Add(-2*time.Minute))) // before it began: ends as it begins
	waitFor(t, "two posts", func() bool { return len(am.posted()) == 2 })
	after := time.Now()
	e, _ := time.Parse(time.RFC3339, am.of("Future")[0].EndsAt)
	if e.Before(now) || e.After(after) {
		t.Errorf("Future ends at %v, want the time of Update (%v..%v)", e, now, after)
	}
	if got := am.of("Early")[0]; got.EndsAt != got.StartsAt {
		t.Errorf("Early ends at %s, want its start %s", got.EndsAt, got.StartsAt)
	}
}

func TestUnchangedUpdateIsNotPosted(t *testing.T) {
	am := newFakeAM(t, nil)
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: time.Hour})
	a := firing("A", time.Now())
	mustUpdate(t, s, a)
	waitFor(t, "A", func() bool { return len(am.of("A")) == 1 })
	mustUpdate(t, s, a)
	a.Annotations = map[string]string{"summary": "p99 above 3s"}
	mustUpdate(t, s, a)
	waitFor(t, "A's new annotation", func() bool { return len(am.of("A")) == 2 })
	mustUpdate(t, s, firing("B", time.Now())) // barrier
	waitFor(t, "B", func() bool { return len(am.of("B")) == 1 })
	got := am.of("A")
	if len(got) != 2 || got[1].Annotations["summary"] != "p99 above 3s" {
		t.Errorf("A posted %+v, want twice, the second with the new summary", got)
	}
}

// TestChangedLabelsWhileThePostIsInFlight: the labels change while the
// post of the first version is on its way. Alertmanager gets that version
// all the same, so the Sink must resolve it, not forget it as an alert no
// Alertmanager has taken: it would fire there until it timed out.
func TestChangedLabelsWhileThePostIsInFlight(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	am := newFakeAM(t, func(n int) int {
		if n == 0 {
			once.Do(func() { close(arrived) })
			<-release
		}
		return http.StatusOK
	})
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: time.Hour})
	a := firing("A", time.Now().Add(-time.Minute))
	mustUpdate(t, s, a)
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for the first post")
	}
	b := a
	b.Labels = map[string]string{"alertname": "A", "severity": "ticket", "model": "llama"}
	mustUpdate(t, s, b)
	close(release)
	waitFor(t, "A resolved and A again", func() bool { return len(am.of("A")) == 3 })
	got := am.of("A")
	if old := got[1]; old.Labels["severity"] != "page" || old.EndsAt == "" {
		t.Errorf("second post %+v, want the old labels resolved", old)
	}
	if now := got[2]; now.Labels["severity"] != "ticket" {
		t.Errorf("third post %+v, want the new labels", now)
	}
}

func TestChangedLabelsResolveTheOldAlert(t *testing.T) {
	am := newFakeAM(t, nil)
	s := start(t, Config{URLs: []string{am.srv.URL}, ResendInterval: time.Hour})
	a := firing("A", time.Now().Add(-time.Minute))
	mustUpdate(t, s, a)
	waitFor(t, "A", func() bool { return len(am.of("A")) == 1 })
	b := a
	b.Labels = map[string]string{"alertname": "A", "severity": "ticket", "model": "llama"}
	mustUpdate(t, s, b)
	waitFor(t, "A resolved and A again", func() bool { return len(am.of("A")) == 3 })
	got := am.of("A")
	old, now := got[1], got[2]
	if old.Labels["severity"] != "page" || now.Labels["severity"] != "ticket" {
		t.Fatalf("posted %+v then %+v, want the old labels resolved first", old, now)
	}
	if e, _ := time.Parse(time.RFC3339, old.EndsAt); e.After(time.Now()) {
		t.Errorf("old labels end at %v, want resolved (not after now)", e)
	}
	if e, _ := time.Parse(time.RFC3339, now.EndsAt); e.Before(time.Now().Add(time.Hour)) {
		t.Errorf("new labels end at %v, want firing", e)
	}
	waitFor(t, "only the new alert held", func() bool { return s.Pending() == 1 })
}

func TestFullDropsOldestResolved(t *testing.T) {
	s, err := New(Config{URLs: []string{"http://127.0.0.1:1"}, MaxAlerts: 3, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	mustUpdate(t, s, resolved(firing("R1", now), now))
	mustUpdate(t, s, resolved(firing("R2", now), now))
	mustUpdate(t, s, firing("F1", now))
	mustUpdate(t, s, firing("F2", now)) // R1 goes
	mustUpdate(t, s, firing("F3", now)) // R2 goes
	if d := s.Counters().Dropped.Load(); d != 2 {
		t.Errorf("Dropped = %d, want 2", d)
	}
	if err := s.Update(firing("F4", now)); !errors.Is(err, ErrFull) {
		t.Errorf("Update on a sink full of firing alerts: %v, want ErrFull", err)
	}
	if err := s.Update(firing("F1", now.Add(time.Second))); err != nil {
		t.Errorf("Update of a held key while full: %v", err)
	}
	s.mu.Lock()
	var keys []string
	for k := range s.mu.alerts {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	slices.Sort(keys)
	if want := []string{"rule/F1", "rule/F2", "rule/F3"}; !slices.Equal(keys, want) {
		t.Errorf("held %v, want %v", keys, want)
	}
	if d := s.Counters().Dropped.Load(); d != 3 {
		t.Errorf("Dropped = %d, want 3", d)
	}
}

func TestEachAlertmanagerGetsEveryAlert(t *testing.T) {
	up := newFakeAM(t, nil)
	var mu sync.Mutex
	down := true
	flaky := newFakeAM(t, func(int) int {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	s := start(t, Config{URLs: []string{flaky.srv.URL, up.srv.URL}, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, ResendInterval: time.Hour})
	a := firing("A", time.Now())
	mustUpdate(t, s, a)
	mustUpdate(t, s, resolved(a, time.Now()))
	waitFor(t, "A resolved at the healthy Alertmanager", func() bool {
		got := up.of("A")
		return len(got) > 0 && got[len(got)-1].EndsAt != "" && !isFiring(got[len(got)-1])
	})
	waitFor(t, "failures at the other", func() bool { return s.Counters().Failed.Load() >= 3 })
	if s.Pending() != 1 {
		t.Errorf("Pending = %d, want 1: the resolved alert waits for the failing Alertmanager", s.Pending())
	}
	mu.Lock()
	down = false
	mu.Unlock()
	waitFor(t, "A resolved at the recovered Alertmanager", func() bool {
		got := flaky.of("A")
		return len(got) > 0 && !isFiring(got[len(got)-1])
	})
	waitFor(t, "nothing held", func() bool { return s.Pending() == 0 })
}

func isFiring(p postableAlert) bool {
	e, err := time.Parse(time.RFC3339, p.EndsAt)
	return err == nil && e.After(time.Now())
}

func TestClientErrorsAreDroppedNotRetried(t *testing.T) {
	am := newFakeAM(t, func(n int) int {
		if n == 0 {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	s := start(t, Config{URLs: []string{am.srv.URL}, BackoffMin: time.Millisecond, ResendInterval: time.Hour})
	mustUpdate(t, s, firing("A", time.Now()))
	waitFor(t, "A refused", func() bool { return s.Counters().Dropped.Load() == 1 })
	mustUpdate(t, s, firing("B", time.Now()))
	waitFor(t, "B", func() bool { return s.Counters().Sent.Load() == 1 })
	if n := len(am.requests()); n != 2 {
		t.Errorf("%d requests, want 2 (A refused and not retried, then B)", n)
	}
	if c := s.Counters(); c.Failed.Load() != 1 || c.Sent.Load() != 1 {
		t.Errorf("Failed %d Sent %d, want 1 and 1", c.Failed.Load(), c.Sent.Load())
	}
}

func TestBatchesAreBounded(t *testing.T) {
	am := newFakeAM(t, nil)
	s, err := New(Config{URLs: []string{am.srv.URL}, MaxBatch: 4, ResendInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		mustUpdate(t, s, firing(fmt.Sprintf("A%d", i), time.Now()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	defer s.Close()
	waitFor(t, "ten alerts", func() bool { return len(am.posted()) == 10 })
	var sizes []int
	var names []string
	for _, r := range am.requests() {
		sizes = append(sizes, len(r.alerts))
		for _, a := range r.alerts {
			names = append(names, a.Labels["alertname"])
		}
	}
	if !slices.Equal(sizes, []int{4, 4, 2}) {
		t.Errorf("request sizes %v, want [4 4 2]", sizes)
	}
	for i, n := range names {
		if n != fmt.Sprintf("A%d", i) {
			t.Errorf("alerts posted in order %v, want the order of Update", names)
			break
		}
	}
}

func TestAuthorization(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(" s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"none", Config{}, ""},
		{"basic", Config{BasicAuth: BasicAuth{Username: "braid", Password: "pw"}}, "Basic YnJhaWQ6cHc="},
		{"bearer", Config{BearerToken: "tok"}, "Bearer tok"},
		{"bearer file", Config{BearerTokenFile: tokenFile}, "Bearer s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			am := newFakeAM(t, nil)
			tc.cfg.URLs = []string{am.srv.URL}
			s := start(t, tc.cfg)
			mustUpdate(t, s, firing("A", time.Now()))
			waitFor(t, "A", func() bool { return len(am.of("A")) == 1 })
			if got := am.requests()[0].header.Get("Authorization"); got != tc.want {
				t.Errorf("Authorization %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTLSWithCAFile(t *testing.T) {
	am := &fakeAM{}
	am.srv = httptest.NewUnstartedServer(am)
	am.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	am.srv.StartTLS()
	t.Cleanup(am.srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: am.srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}

	untrusting := start(t, Config{URLs: []string{am.srv.URL}, BackoffMin: 10 * time.Millisecond, ResendInterval: time.Hour})
	mustUpdate(t, untrusting, firing("Untrusted", time.Now()))
	waitFor(t, "failed TLS handshakes", func() bool { return untrusting.Counters().Failed.Load() >= 2 })

	s := start(t, Config{URLs: []string{am.srv.URL}, TLS: TLSConfig{CAFile: ca}, ResendInterval: time.Hour})
	mustUpdate(t, s, firing("A", time.Now()))
	waitFor(t, "A over TLS", func() bool { return len(am.of("A")) == 1 })
	if len(am.of("Untrusted")) != 0 {
		t.Error("a client without the CA got through")
	}
}

func TestInvalidAlerts(t *testing.T) {
	s, err := New(Config{URLs: []string{"http://127.0.0.1:1"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	base := func() Alert { return firing("A", time.Now()) }
	for name, mutate := range map[string]func(*Alert){
		"no key":             func(a *Alert) { a.Key = "" },
		"reserved key":       func(a *Alert) { a.Key = "\x00x" },
		"no alertname":       func(a *Alert) { delete(a.Labels, "alertname") },
		"empty alertname":    func(a *Alert) { a.Labels["alertname"] = "" },
		"bad label name":     func(a *Alert) { a.Labels["gpu-id"] = "0" },
		"digit first":        func(a *Alert) { a.Labels["0gpu"] = "0" },
		"label not utf8":     func(a *Alert) { a.Labels["model"] = "\xff" },
		"bad annotation":     func(a *Alert) { a.Annotations["a b"] = "x" },
		"annotation no utf8": func(a *Alert) { a.Annotations["summary"] = "\xc3" },
		"bad generator URL":  func(a *Alert) { a.GeneratorURL = "http://[::1" },
	} {
		a := base()
		mutate(&a)
		if err := s.Update(a); !errors.Is(err, ErrInvalidAlert) {
			t.Errorf("%s: Update = %v, want ErrInvalidAlert", name, err)
		}
	}
	if s.Pending() != 0 {
		t.Errorf("Pending = %d after invalid alerts", s.Pending())
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{
		URLs:           []string{"ftp://x", "http://", "http://am:9093?x=1", "::"},
		Timeout:        -1,
		ResendInterval: -1,
		MaxAlerts:      -1,
		BackoffMin:     time.Minute,
		BackoffMax:     time.Second,
		BasicAuth:      BasicAuth{Password: "x", PasswordFile: "/nonexistent"},
		BearerToken:    "t",
		TLS:            TLSConfig{CAFile: "/nonexistent/ca.pem"},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{"urls[0]", "urls[1]", "urls[2]", "urls[3]", "timeout", "resend_interval", "max_alerts",
		"backoff_min", "password without username", "password and password_file", "basic_auth.password_file", "tls.ca_file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "urls is empty") {
		t.Errorf("New without URLs: %v", err)
	}
	ok := Config{URLs: []string{"https://am.example:9093/prefix"}}
	ok.EnsureDefaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
	if ok.Timeout != 10*time.Second || ok.ResendInterval != time.Minute || ok.BackoffMin != 100*time.Millisecond || ok.BackoffMax != 30*time.Second {
		t.Errorf("defaults %+v", ok)
	}
}

func TestCloseFlushesAndStops(t *testing.T) {
	// B's first post fails, and its retry would wait an hour: Close posts it.
	am := newFakeAM(t, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s, err := New(Config{URLs: []string{am.srv.URL}, ResendInterval: time.Hour, BackoffMin: time.Hour, BackoffMax: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Run(context.Background()) }()
	mustUpdate(t, s, firing("A", time.Now()))
	waitFor(t, "A", func() bool { return len(am.of("A")) == 1 })
	mustUpdate(t, s, resolved(firing("B", time.Now()), time.Now()))
	waitFor(t, "B's failed post", func() bool { return s.Counters().Failed.Load() == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Errorf("Run after Close: %v", err)
	}
	if len(am.of("B")) != 1 || s.Pending() != 1 || s.Counters().Dropped.Load() != 0 {
		t.Errorf("after Close: B posted %d times, %d held, %d dropped; want 1, 1 (A), 0",
			len(am.of("B")), s.Pending(), s.Counters().Dropped.Load())
	}
	if err := s.Update(firing("C", time.Now())); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A Sink closed before Run never posts, and counts what it held.
	s2, _ := New(Config{URLs: []string{am.srv.URL}, Logger: quietLogger()})
	mustUpdate(t, s2, firing("D", time.Now()))
	s2.Close()
	if err := s2.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	if d := s2.Counters().Dropped.Load(); d != 1 {
		t.Errorf("Dropped = %d, want 1", d)
	}
}

func TestCloseIsBoundedByTimeout(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	const timeout = 300 * time.Millisecond
	s, err := New(Config{URLs: []string{srv.URL}, Timeout: timeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(context.Background())
	mustUpdate(t, s, firing("A", time.Now()))
	<-arrived
	mustUpdate(t, s, firing("B", time.Now())) // waits behind A
	t0 := time.Now()
	s.Close()
	// The post of A in flight and the final one of both share one Timeout
	// (with some slack for a loaded machine).
	if took := time.Since(t0); took > timeout+2*time.Second {
		t.Errorf("Close took %v, want about %v", took, timeout)
	}
	if d := s.Counters().Dropped.Load(); d != 2 {
		t.Errorf("Dropped = %d, want 2 (A and B never delivered)", d)
	}
}

func TestRunStopsOnCancelDuringAHangingPost(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s, err := New(Config{URLs: []string{srv.URL}, Timeout: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	mustUpdate(t, s, firing("A", time.Now()))
	<-arrived
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := s.Run(ctx); err == nil {
		t.Error("a second Run returned nil")
	}
}
