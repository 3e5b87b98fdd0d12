package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/alertmanager/amtest"
	"github.com/braidlabs/braid/connectors/kafka/kafkatest"
	"github.com/braidlabs/braid/connectors/simulator"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/braidpb"
)

// alertsRun is one job run of the alerts test: a realistic fleet's
// telemetry in two phases, a real Alertmanager notifying a webhook of the
// test, and a real Prometheus scraping the job.
type alertsRun struct {
	tj        *testJob
	actions   *actionSink
	hook      *amtest.Webhook
	am, prom  string
	sim       *simulator.Simulator
	phases    [2][][]simulator.Message // per phase, the simulator's batches
	alerts    *reader
	incidents *reader
	fused     *reader
	start     time.Time // event time of the first batch
	end       time.Time // event time of the last batch
}

// The fleet's telemetry ends about now, so that Alertmanager and
// Prometheus see recent times; the faults end at faultsEnd.
const (
	alertsSpan = 11 * time.Minute
	faultsEnd  = 8 * time.Minute
)

func newAlertsRun(t *testing.T, faults bool) *alertsRun {
	t.Helper()
	r := &alertsRun{hook: amtest.NewWebhook(t), actions: newActionSink(t)}
	r.am = amtest.Start(t, r.hook.URL()+"/hook")
	// The default TTFT rule, with the design's action: route traffic away.
	var ttft alerts.Rule
	for _, d := range alerts.DefaultRules() {
		if d.Name == "BraidTTFTHigh" {
			ttft = d
		}
	}
	ttft.Action = &alerts.Action{Name: "route_away", URL: r.actions.srv.URL + "/route", OnResolved: true}
	brokers := kafkatest.Brokers(t)
	outs := append(kafkatest.NewTopics(t, brokers, 4, "braid.alerts"), kafkatest.NewTopics(t, brokers, 1, "braid.incidents", "braid.pollution")...)
	r.tj = startJobWith(t, simulator.EncodingProto, 4, func(c *Config) {
		c.Outputs.Alerts, c.Outputs.Incidents, c.Outputs.Pollution = outs[0], outs[1], outs[2]
		c.Alerts.Alertmanager.URLs = []string{r.am}
		c.Alerts.ViewURL = "http://braid.example:9464"
		c.Alerts.Rules = []alerts.Rule{ttft}
		c.Admin.Addr = "127.0.0.1:0"
		// The default idleness: a partition the busy job has not fetched
		// from for a few seconds (a backlog of KV events on another) is
		// not declared idle, which would send what it holds late.
		c.EventTime.Idleness = 30 * time.Second
	})
	r.prom = amtest.StartPrometheus(t, r.tj.job.AdminAddr())
	start := time.Now().Add(-alertsSpan).Truncate(time.Second)
	// One request a second on one host's two servers: enough for every
	// rule's windows, light enough for a 2-core machine (a request writes
	// ~200 KV events).
	cfg := simulator.Config{Seed: 17, Realistic: true, KVEvents: true, Hosts: 1, RequestsPerBatch: 1, BatchInterval: time.Second,
		Start: start, Topics: r.tj.simTopics()}
	if faults {
		cfg.Regressions = []simulator.Regression{{Instance: 0, From: time.Minute, To: faultsEnd, Factor: 30}}
		cfg.Leaks = []simulator.Leak{{GPU: 1, From: time.Minute, To: faultsEnd, MiBPerMinute: 3000}}
		// One pollution fault late in the first phase: its alert fires
		// then, and resolves (a window without incidents) in the second.
		cfg.KV.Faults = []simulator.KVFault{{Trigger: simulator.DoubleFree, At: start.Add(faultsEnd - 50*time.Second), GPU: 1}}
	}
	sim, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.sim, r.start = sim, start
	batches := int(alertsSpan / cfg.BatchInterval)
	for i := range batches {
		at := start.Add(time.Duration(i) * cfg.BatchInterval)
		phase := 0
		if at.Sub(start) >= faultsEnd {
			phase = 1
		}
		r.phases[phase] = append(r.phases[phase], sim.Next())
		r.end = at
	}
	r.phases[1] = append(r.phases[1], sim.Flush())
	r.alerts = r.tj.reader(outs[0])
	r.incidents = r.tj.reader(outs[1])
	r.fused = r.tj.reader(r.tj.cfg.Outputs.Fused)
	return r
}

// restart stops the job (its last checkpoint commits) and starts it again
// with the same configuration, as a rolling restart does.
func (tj *testJob) restart(t *testing.T) {
	t.Helper()
	tj.stop()
	ctx, cancel := context.WithCancel(context.Background())
	j, err := Prepare(ctx, tj.cfg, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	tj.job, tj.cancel, tj.done = j, cancel, make(chan error, 1)
	go func() { tj.done <- j.Run(ctx) }()
}

// actionSink receives the actions braid posts.
type actionSink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []ActionBody
	path []string
}

func newActionSink(t *testing.T) *actionSink {
	a := &actionSink{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b ActionBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || r.Method != http.MethodPost {
			t.Errorf("action post %s %s: %v", r.Method, r.URL.Path, err)
		}
		a.mu.Lock()
		a.got, a.path = append(a.got, b), append(a.path, r.URL.Path)
		a.mu.Unlock()
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *actionSink) posts() ([]ActionBody, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got), slices.Clone(a.path)
}

// produce writes phase i at ten times real time (a batch of one second of
// event time every 100 ms), as a Collector catching up would, so that the
// job reads every partition as it comes rather than a burst in whatever
// order its fetches return it.
func (r *alertsRun) produce(i int) {
	next := time.Now()
	for _, b := range r.phases[i] {
		for time.Now().Before(next) {
			time.Sleep(time.Until(next)) // the producer's pace, not synchronisation
		}
		r.tj.produce(b)
		next = next.Add(100 * time.Millisecond)
	}
}

// alertsOf decodes alert records.
func alertsOf(t *testing.T, recs []*kgo.Record) []*braidpb.Alert {
	t.Helper()
	var out []*braidpb.Alert
	for _, rec := range recs {
		var a braidpb.Alert
		if err := proto.Unmarshal(rec.Value, &a); err != nil {
			t.Fatalf("alert record %d/%d: %v", rec.Partition, rec.Offset, err)
		}
		out = append(out, &a)
	}
	return out
}

// waitNotified polls the webhook until cond holds.
func waitNotified(t *testing.T, r *alertsRun, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			r.alerts.poll()
			var states []string
			for _, a := range alertsOf(t, r.alerts.recs) {
				states = append(states, fmt.Sprintf("%s %v %s", a.Rule, a.Group, a.State))
			}
			var wms []string
			for _, ts := range r.tj.job.Engine().Tasks() {
				wms = append(wms, time.Duration(ts.Watermark-r.start.UnixNano()).String())
			}
			late := r.tj.reader(r.tj.cfg.Outputs.Late)
			late.poll()
			reasons := map[string]int{}
			for _, rec := range late.recs {
				reasons[hdrValue(rec, "braid.reason")+" "+hdrValue(rec, "braid.topic")]++
			}
			t.Logf("late reasons: %v", reasons)
			ac := r.tj.job.Stage().Config().Alerts.Counters()
			t.Fatalf("%s: not within %v; braid.alerts holds %v; notified firing %v resolved %v; watermarks after the start %v; alerts stage: observations %d partials %d evaluations %d late %d revised %d groups %d%s",
				what, d, states, names(r.hook.Notified("", "firing")), names(r.hook.Notified("", "resolved")), wms,
				ac.Observations.Load(), ac.Partials.Load(), ac.Evaluations.Load(), ac.Late.Load(), ac.Revised.Load(), ac.Groups.Load(), r.alerts.describe())
		}
		r.alerts.poll() // keeps reading braid.alerts; paces polling the webhook, bounded by the deadline
	}
}

func names(as []amtest.Alert) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Labels["alertname"]+"{"+a.Labels["instance"]+a.Labels["gpu"]+"}")
	}
	return out
}

// one returns the single notification of alertname with status whose
// label key is value, failing when there is not exactly one.
func one(t *testing.T, hook *amtest.Webhook, alertname, status, key, value string) amtest.Alert {
	t.Helper()
	var got []amtest.Alert
	for _, a := range hook.Notified(alertname, status) {
		if a.Labels[key] == value {
			got = append(got, a)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%s %s{%s=%q}: %d notifications, want 1 (all %s: %v)", alertname, status, key, value, len(got), status, names(hook.Notified("", status)))
	}
	return got[0]
}

// barrier posts an alert of its own to Alertmanager and waits for its
// notification: every notification braid's alerts caused before is in.
func barrier(t *testing.T, r *alertsRun, name string) {
	t.Helper()
	body := fmt.Sprintf(`[{"labels":{"alertname":%q},"startsAt":%q}]`, name, time.Now().UTC().Format(time.RFC3339Nano))
	resp, err := http.Post(r.am+"/api/v2/alerts", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post barrier alert: %s", resp.Status)
	}
	waitNotified(t, r, "barrier "+name, time.Minute, func() bool { return len(r.hook.Notified(name, "firing")) > 0 })
}

// TestIntegrationAlerts runs the job on the real broker over a realistic
// fleet with a TTFT regression on one server, a GPU memory leak on
// another GPU and a KV-cache pollution fault on a third, with a real
// Alertmanager and a real Prometheus: each fault's alert reaches
// Alertmanager exactly once firing, with the labels of its place and the
// trace or incident ids behind it, and once resolved after the fault
// ended — across a restart of the job between the two; braid.alerts holds
// their lifecycle; Prometheus shows braid's
// latency histograms with trace-id exemplars of fused traces.
func TestIntegrationAlerts(t *testing.T) {
	t.Parallel() // mostly waiting on the paced producer, as the clean run
	r := newAlertsRun(t, true)
	truth := r.sim.Truth()
	reg, leak := truth.Regressions[0], truth.Leaks[0]
	t.Logf("regression on %s (%s), leak on %s, %d + %d batches", reg.Instance, reg.Model, leak.UUID, len(r.phases[0]), len(r.phases[1]))

	r.produce(0)
	waitNotified(t, r, "firing alerts of the three faults", 4*time.Minute, func() bool {
		return len(r.hook.Notified("BraidTTFTHigh", "firing")) > 0 && len(r.hook.Notified("BraidKVMemoryGrowth", "firing")) > 0 &&
			len(r.hook.Notified("BraidKVCachePollution", "firing")) > 0
	})
	// Prometheus scraped braid's derived metrics, with exemplars naming
	// fused traces. An exemplar names a trace as it is emitted; the test's
	// reader of braid.fused may not have reached it yet, so both are read
	// again until one matches or the deadline passes.
	fusedIDs := map[string]bool{}
	var exemplars []string
	matched := 0
	for deadline := time.Now().Add(time.Minute); ; {
		r.fused.poll()
		for k := range latest(t, r.fused.recs) {
			fusedIDs[k] = true
		}
		exemplars = promExemplars(t, r.prom, "braid_llm_ttft_seconds_bucket")
		matched = 0
		for _, id := range exemplars {
			if fusedIDs[id] {
				matched++
			}
		}
		if matched > 0 || time.Now().After(deadline) {
			break
		}
	}
	if matched == 0 {
		t.Errorf("Prometheus holds %d TTFT exemplars, none of the %d fused traces' ids (first exemplar %q)", len(exemplars), len(fusedIDs), exemplars[0])
	}
	t.Logf("%d TTFT exemplars in Prometheus, %d of fused traces", len(exemplars), matched)
	// promtool accepts the job's /metrics.
	promtoolCheck(t, "http://"+r.tj.job.AdminAddr()+"/metrics")

	// A rolling restart while the alerts fire: the new instance re-reads
	// braid.alerts and posts the firing alerts again (same startsAt), which
	// Alertmanager takes as the same alerts, and resolves them once.
	r.tj.restart(t)
	r.produce(1)
	waitNotified(t, r, "resolved alerts of the three faults", 4*time.Minute, func() bool {
		return len(r.hook.Notified("BraidTTFTHigh", "resolved")) > 0 && len(r.hook.Notified("BraidKVMemoryGrowth", "resolved")) > 0 &&
			len(r.hook.Notified("BraidKVCachePollution", "resolved")) > 0
	})
	barrier(t, r, "TestBarrier")

	// Exactly one firing and one resolved notification per fault, at its
	// place, with its evidence.
	ttft := one(t, r.hook, "BraidTTFTHigh", "firing", "instance", reg.Instance)
	one(t, r.hook, "BraidTTFTHigh", "resolved", "instance", reg.Instance)
	if ttft.Labels["model"] != reg.Model || ttft.Labels["severity"] != "critical" {
		t.Errorf("TTFT alert labels %v, want model %s, severity critical", ttft.Labels, reg.Model)
	}
	ids := strings.Split(ttft.Annotations["trace_ids"], ",")
	if len(ids) == 0 || ids[0] == "" {
		t.Fatalf("TTFT alert without trace ids: %v", ttft.Annotations)
	}
	for _, id := range ids {
		if !slices.Contains(reg.TraceIDs, id) {
			t.Errorf("TTFT alert names trace %s, not one the regression slowed", id)
		}
	}
	growth := one(t, r.hook, "BraidKVMemoryGrowth", "firing", "gpu", leak.UUID)
	one(t, r.hook, "BraidKVMemoryGrowth", "resolved", "gpu", leak.UUID)
	if growth.Labels["severity"] != "warning" {
		t.Errorf("growth alert labels %v", growth.Labels)
	}
	r.incidents.until(t, time.Minute, func(recs []*kgo.Record) bool { return len(recs) > 0 })
	var inc braidpb.Incident
	if err := proto.Unmarshal(r.incidents.recs[0].Value, &inc); err != nil {
		t.Fatal(err)
	}
	pol := one(t, r.hook, "BraidKVCachePollution", "firing", "gpu", inc.Gpu)
	one(t, r.hook, "BraidKVCachePollution", "resolved", "gpu", inc.Gpu)
	if !strings.Contains(pol.Annotations["incident_ids"], inc.Id) {
		t.Errorf("pollution alert names incidents %q, want %s", pol.Annotations["incident_ids"], inc.Id)
	}
	// Nothing fires elsewhere: every firing notification is at a fault's
	// place (a slowed server, or its host's other server, is also a less
	// healthy one).
	for _, a := range r.hook.Notified("", "firing") {
		at := strings.HasPrefix(a.Labels["instance"], reg.Host+":") || a.Labels["gpu"] == leak.UUID || a.Labels["gpu"] == inc.Gpu || a.Labels["alertname"] == "TestBarrier"
		if !at {
			t.Errorf("alert away from the faults: %v", a.Labels)
		}
	}

	// The action: posted once firing and once resolved, naming the
	// regressed instance and its slow traces.
	posts, paths := r.actions.posts()
	var states []string
	for i, p := range posts {
		states = append(states, p.State)
		if paths[i] != "/route" || p.Action != "route_away" || p.Rule != "BraidTTFTHigh" || p.Labels["instance"] != reg.Instance || len(p.TraceIDs) == 0 {
			t.Errorf("action post %s %+v", paths[i], p)
		}
	}
	if !slices.Equal(states, []string{"firing", "resolved"}) {
		t.Errorf("actions posted %v, want firing then resolved", states)
	}

	// braid.alerts: each episode's records in lifecycle order.
	r.alerts.poll()
	byKey := map[string][]braidpb.AlertState{}
	for i, a := range alertsOf(t, r.alerts.recs) {
		k := string(r.alerts.recs[i].Key)
		byKey[k] = append(byKey[k], a.State)
		if a.State == braidpb.AlertState_ALERT_STATE_FIRING && (a.Url == "" || !strings.HasPrefix(a.Url, "http://braid.example:9464/alerts/")) {
			t.Errorf("alert %s without its view URL: %q", k, a.Url)
		}
	}
	for _, k := range []string{"BraidTTFTHigh/instance=" + strconv.Quote(reg.Instance) + ",model=" + strconv.Quote(reg.Model),
		"BraidKVMemoryGrowth/gpu=" + strconv.Quote(leak.UUID)} {
		// Pending may come and go before the alert fires (a condition
		// that holds for less than for) and after it resolved (noise on
		// a healthy series, never for as long as for); one firing, then
		// one resolved, and no second firing.
		st := byKey[k]
		f, res := slices.Index(st, braidpb.AlertState_ALERT_STATE_FIRING), slices.Index(st, braidpb.AlertState_ALERT_STATE_RESOLVED)
		if f < 1 || res < f || slices.Contains(st[f+1:], braidpb.AlertState_ALERT_STATE_FIRING) ||
			slices.Contains(st[res+1:], braidpb.AlertState_ALERT_STATE_RESOLVED) || st[f-1] != braidpb.AlertState_ALERT_STATE_PENDING {
			t.Errorf("braid.alerts %s: %v, want pending, one firing, then one resolved", k, st)
		}
	}
	for k, st := range byKey {
		t.Logf("braid.alerts %s: %v", k, st)
	}

	t.Logf("notified %d firing, %d resolved", len(r.hook.Notified("", "firing")), len(r.hook.Notified("", "resolved")))
}

// promtoolCheck runs `promtool check metrics` on what url serves.
func promtoolCheck(t *testing.T, url string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		amtest.Unavailable(t, "promtool not found (Debian: apt-get install -y prometheus)")
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"braid_llm_ttft_seconds_bucket", "braid_alerts_firing", "braid_kv_utilisation_ratio", "braid_kv_health_score", "braid_pollution_incidents_total{pattern="} {
		if !bytes.Contains(body, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// promExemplars polls Prometheus until query has series and exemplars and
// returns the exemplars' trace ids.
func promExemplars(t *testing.T, base, query string) []string {
	t.Helper()
	get := func(path string, q url.Values, v any) error { return amtest.PromAPI(base, path, q, v) }
	deadline := time.Now().Add(90 * time.Second)
	for {
		var qr struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		err := get("/api/v1/query", url.Values{"query": {query}}, &qr)
		if err == nil && len(qr.Data.Result) > 0 {
			var er struct {
				Data []struct {
					Exemplars []struct {
						Labels map[string]string `json:"labels"`
					} `json:"exemplars"`
				} `json:"data"`
			}
			now := time.Now()
			err = get("/api/v1/query_exemplars", url.Values{"query": {query},
				"start": {strconv.FormatInt(now.Add(-2*time.Hour).Unix(), 10)}, "end": {strconv.FormatInt(now.Add(time.Hour).Unix(), 10)}}, &er)
			var ids []string
			for _, s := range er.Data {
				for _, e := range s.Exemplars {
					ids = append(ids, e.Labels["trace_id"])
				}
			}
			if err == nil && len(ids) > 0 {
				return ids
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus shows no %s series with exemplars after 90s (last error: %v)", query, err)
		}
		time.Sleep(500 * time.Millisecond) // polling Prometheus's API, bounded by the deadline
	}
}

// TestIntegrationAlertsClean: the same fleet without faults raises no
// alert: braid.alerts holds no firing change once the job has read
// everything, and Alertmanager notifies nothing.
func TestIntegrationAlertsClean(t *testing.T) {
	t.Parallel()
	r := newAlertsRun(t, false)
	r.produce(0)
	r.produce(1)
	// Until every task's watermark is at the end of the input, then two
	// checkpoints more (the partials of the last windows, then their
	// evaluation, committed).
	horizon := r.end.Add(-r.tj.cfg.EventTime.OutOfOrderness - time.Second).UnixNano()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		done := true
		for _, ts := range r.tj.job.Engine().Tasks() {
			done = done && ts.Watermark >= horizon
		}
		if done && len(r.tj.job.Engine().Tasks()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watermarks %v did not reach the end of the input%s", r.tj.job.Engine().Tasks(), r.alerts.describe())
		}
		r.alerts.poll() // paces the poll, bounded by the deadline
	}
	cps := r.tj.job.Engine().Stats().Checkpoints.Load()
	for r.tj.job.Engine().Stats().Checkpoints.Load() < cps+3 {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoints")
		}
		r.alerts.poll()
	}
	barrier(t, r, "TestBarrier")
	ac := r.tj.job.Stage().Config().Alerts.Counters()
	if ac.Evaluations.Load() == 0 {
		t.Fatal("the alerts stage evaluated nothing")
	}
	for _, a := range alertsOf(t, r.alerts.recs) {
		if a.State == braidpb.AlertState_ALERT_STATE_FIRING {
			t.Errorf("clean run: %s %v fired (value %v)", a.Rule, a.Group, a.GetValue())
		}
	}
	if n := len(r.hook.Notified("", "firing")); n != 1 {
		t.Errorf("clean run: %d firing notifications, want only the barrier's: %v", n, names(r.hook.Notified("", "firing")))
	}
	t.Logf("clean run: %d evaluations, %d alert records", ac.Evaluations.Load(), len(r.alerts.recs))
}
