package alertmanager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/braidlabs/braid/connectors/alertmanager/amtest"
)

// gettableAlert is the part of the v2 API's gettableAlert that the test
// reads.
type gettableAlert struct {
	Labels      map[string]string `json:"labels"`
	StartsAt    time.Time         `json:"startsAt"`
	Fingerprint string            `json:"fingerprint"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

func getAlerts(t *testing.T, base, alertname string) []gettableAlert {
	t.Helper()
	q := url.Values{"filter": {fmt.Sprintf("alertname=%q", alertname)}}
	resp, err := http.Get(base + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v2/alerts: %s", resp.Status)
	}
	var out []gettableAlert
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAlertmanagerNotifiesOncePerEpisode runs a real Alertmanager: an alert
// posted by one Sink and then, as after a restart of braid, by a second
// one, and then resolved, is notified exactly once firing and once
// resolved.
func TestAlertmanagerNotifiesOncePerEpisode(t *testing.T) {
	hook := amtest.NewWebhook(t)
	amURL := amtest.Start(t, hook.URL()+"/hook")

	newSink := func() *Sink {
		return start(t, Config{URLs: []string{amURL}, BackoffMin: 20 * time.Millisecond, BackoffMax: time.Second})
	}
	startsAt := time.Now().Add(-30 * time.Second).Truncate(time.Millisecond)
	a := Alert{
		Key:          "ttft_p99/model=llama,instance=gpu-0",
		Labels:       map[string]string{"alertname": "BraidTTFTHigh", "model": "llama", "instance": "gpu-0", "severity": "page"},
		Annotations:  map[string]string{"summary": "TTFT p99 2.4s above 2s", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"},
		StartsAt:     startsAt,
		GeneratorURL: "http://braid:8080/alerts/ttft_p99",
		Firing:       true,
	}

	first := newSink()
	mustUpdate(t, first, a)
	waitFor(t, "the firing notification", func() bool { return len(hook.Notified("BraidTTFTHigh", "firing")) == 1 })
	got := hook.Notified("BraidTTFTHigh", "firing")[0]
	if !got.StartsAt.Equal(startsAt) || got.Labels["model"] != "llama" || got.Labels["instance"] != "gpu-0" {
		t.Errorf("notified %+v, want startsAt %v and the alert's labels", got, startsAt)
	}
	held := getAlerts(t, amURL, "BraidTTFTHigh")
	if len(held) != 1 || !mapsEqual(held[0].Labels, a.Labels) || held[0].Status.State != "active" || !held[0].StartsAt.Equal(startsAt) {
		t.Fatalf("GET /api/v2/alerts: %+v, want one active alert with labels %v from %v", held, a.Labels, startsAt)
	}
	fingerprint := held[0].Fingerprint
	first.Close()

	// A new braid process re-sends the same firing episode.
	second := newSink()
	mustUpdate(t, second, a)
	waitFor(t, "the second Sink's post", func() bool { return second.Counters().Sent.Load() == 1 })
	held = getAlerts(t, amURL, "BraidTTFTHigh")
	if len(held) != 1 || held[0].Fingerprint != fingerprint || !held[0].StartsAt.Equal(startsAt) {
		t.Errorf("after the re-post GET /api/v2/alerts: %+v, want the same one alert (fingerprint %s)", held, fingerprint)
	}
	// Barrier: a new alert's notification comes group_wait (1s) after its
	// post (it starts now: an alert that started group_wait ago or earlier
	// is notified at once), so after the flush of the first alert's group
	// that would notify it again (group_interval, 1s, after the re-post at
	// the latest).
	b := a
	b.Key, b.Labels, b.StartsAt = "barrier/1", map[string]string{"alertname": "BraidBarrierOne"}, time.Now()
	mustUpdate(t, second, b)
	waitFor(t, "the first barrier's notification", func() bool { return len(hook.Notified("BraidBarrierOne", "firing")) == 1 })
	if n := len(hook.Notified("BraidTTFTHigh", "firing")); n != 1 {
		t.Fatalf("%d firing notifications after the re-post, want 1", n)
	}

	end := time.Now().Truncate(time.Millisecond)
	mustUpdate(t, second, resolved(a, end))
	waitFor(t, "the resolved notification", func() bool { return len(hook.Notified("BraidTTFTHigh", "resolved")) == 1 })
	if r := hook.Notified("BraidTTFTHigh", "resolved")[0]; !r.EndsAt.Equal(end) || !r.StartsAt.Equal(startsAt) {
		t.Errorf("resolved notification %+v, want startsAt %v endsAt %v", r, startsAt, end)
	}
	c := a
	c.Key, c.Labels, c.StartsAt = "barrier/2", map[string]string{"alertname": "BraidBarrierTwo"}, time.Now()
	mustUpdate(t, second, c)
	waitFor(t, "the second barrier's notification", func() bool { return len(hook.Notified("BraidBarrierTwo", "firing")) == 1 })

	all := append(hook.Notified("", "firing"), hook.Notified("", "resolved")...)
	for _, n := range all {
		t.Logf("notified %s %s at +%v", n.Labels["alertname"], n.Status, n.Arrived.Sub(all[0].Arrived).Round(time.Millisecond))
	}
	if f, r := len(hook.Notified("BraidTTFTHigh", "firing")), len(hook.Notified("BraidTTFTHigh", "resolved")); f != 1 || r != 1 {
		t.Errorf("notified %d firing and %d resolved, want exactly 1 and 1", f, r)
	}
	waitFor(t, "the resolved alert forgotten", func() bool { return second.Pending() == 2 }) // the barriers fire
	// The v2 API lists no alert that ended.
	if held = getAlerts(t, amURL, "BraidTTFTHigh"); len(held) != 0 {
		t.Errorf("GET /api/v2/alerts after the resolve: %+v, want none", held)
	}
}
