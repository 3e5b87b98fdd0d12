package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/alertmanager"
	"github.com/braidlabs/braid/operators/alerts"
	"github.com/braidlabs/braid/operators/braidpb"
)

// alertForwarder posts what braid.alerts says to Alertmanager. It reads
// the topic read_committed, so only alert changes of committed
// checkpoints are sent, however often the job restarts: each change is
// written once, and a restart re-reads the topic from its start and
// posts only each alert's latest state (a firing alert is posted again
// with the same startsAt, which Alertmanager takes as the same alert; a
// resolved one as resolved), so an episode notifies once firing and once
// resolved.
type alertForwarder struct {
	topic   string
	opts    []kgo.Opt
	sink    *alertmanager.Sink // nil: no Alertmanager
	actions map[string]*alerts.Action
	http    *http.Client
	log     *slog.Logger
}

func newAlertForwarder(cfg *Config, log *slog.Logger) (*alertForwarder, error) {
	am := cfg.Alerts.Alertmanager
	if cfg.Alerts.Disabled {
		return nil, nil
	}
	f := &alertForwarder{topic: cfg.Outputs.Alerts, opts: cfg.Kafka.Opts(), log: log, actions: map[string]*alerts.Action{},
		http: &http.Client{Timeout: am.Timeout}}
	for _, r := range cfg.Alerts.Effective() {
		if r.Action != nil {
			f.actions[r.Name] = r.Action
		}
	}
	if len(am.URLs) == 0 && len(f.actions) == 0 {
		return nil, nil
	}
	if len(am.URLs) > 0 {
		sink, err := alertmanager.New(alertmanager.Config{URLs: am.URLs, Timeout: am.Timeout, ResendInterval: am.ResendInterval, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("job: alertmanager: %w", err)
		}
		f.sink = sink
	}
	return f, nil
}

// ActionBody is what braid posts to a rule's action URL when its alert
// fires (and, with on_resolved, resolves): what to do and why. braid does
// not act itself.
type ActionBody struct {
	Action      string            `json:"action"`
	Rule        string            `json:"rule"`
	State       string            `json:"state"` // firing, resolved
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Value       *float64          `json:"value,omitempty"`
	Threshold   *float64          `json:"threshold,omitempty"`
	StartsAt    time.Time         `json:"starts_at"`
	EndsAt      *time.Time        `json:"ends_at,omitempty"`
	TraceIDs    []string          `json:"trace_ids,omitempty"`
	IncidentIDs []string          `json:"incident_ids,omitempty"`
	URL         string            `json:"url,omitempty"`
	Episode     uint64            `json:"episode"`
}

// actionBody returns the action post for a, ok false when a's rule has no
// action for this change.
func actionBody(act *alerts.Action, a *braidpb.Alert) (ActionBody, bool) {
	b := ActionBody{Action: act.Name, Rule: a.Rule, Labels: a.Labels, Annotations: a.Annotations, Value: a.Value, Threshold: a.Threshold,
		StartsAt: time.Unix(0, int64(a.StartsAtUnixNano)).UTC(), TraceIDs: a.TraceIds, IncidentIDs: a.IncidentIds, URL: a.Url, Episode: a.Episode}
	switch {
	case a.State == braidpb.AlertState_ALERT_STATE_FIRING:
		b.State = "firing"
	case a.State == braidpb.AlertState_ALERT_STATE_RESOLVED && act.OnResolved:
		b.State = "resolved"
		end := time.Unix(0, int64(a.EndsAtUnixNano)).UTC()
		b.EndsAt = &end
	default:
		return b, false
	}
	return b, true
}

// postAction posts an action, retried thrice with backoff; it is at least
// once: a restart between the post and the next checkpoint of the topic's
// reader may post it again.
func (f *alertForwarder) postAction(ctx context.Context, url string, body ActionBody) {
	v, err := json.Marshal(body)
	if err != nil {
		f.log.Warn("alert action: marshal", "rule", body.Rule, "err", err)
		return
	}
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(v))
		if err != nil {
			f.log.Warn("alert action", "rule", body.Rule, "url", url, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.http.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if attempt == 3 || ctx.Err() != nil {
			f.log.Warn("alert action not delivered", "rule", body.Rule, "action", body.Action, "url", url, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 4
	}
}

// toAlertmanager maps an alert state change onto what Alertmanager gets;
// ok is false for changes it does not get (pending, inactive).
func toAlertmanager(key string, a *braidpb.Alert) (alertmanager.Alert, bool) {
	var out alertmanager.Alert
	switch a.State {
	case braidpb.AlertState_ALERT_STATE_FIRING:
		out.Firing = true
	case braidpb.AlertState_ALERT_STATE_RESOLVED:
		out.EndsAt = time.Unix(0, int64(a.EndsAtUnixNano))
	default:
		return out, false
	}
	out.Key = key
	out.Labels = a.Labels
	out.Annotations = a.Annotations
	out.StartsAt = time.Unix(0, int64(a.StartsAtUnixNano))
	out.GeneratorURL = a.Url
	return out, true
}

// run forwards until ctx is done.
func (f *alertForwarder) run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(f.opts,
		kgo.ConsumeTopics(f.topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return fmt.Errorf("job: alert forwarder: %w", err)
	}
	defer cl.Close()
	if f.sink != nil {
		defer f.sink.Close()
	}
	// Catch up first — until a poll brings nothing for a second — so that
	// only the latest state of each alert is posted.
	caughtUp := false
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if !caughtUp {
			pctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		fetches := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		n := 0
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				f.log.Warn("alert forwarder: fetch", "topic", t, "partition", p, "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			var a braidpb.Alert
			if err := proto.Unmarshal(r.Value, &a); err != nil {
				f.log.Warn("alert forwarder: unreadable alert", "key", string(r.Key), "err", err)
				return
			}
			if am, ok := toAlertmanager(string(r.Key), &a); ok && f.sink != nil {
				if err := f.sink.Update(am); err != nil {
					f.log.Warn("alert forwarder: alert not queued", "key", string(r.Key), "err", err)
				}
			}
			// Actions are for what happens now: not for the changes
			// re-read at a start.
			if act := f.actions[a.Rule]; act != nil && caughtUp {
				if body, ok := actionBody(act, &a); ok {
					f.postAction(ctx, act.URL, body)
				}
			}
		})
		if !caughtUp && n == 0 {
			caughtUp = true
			if f.sink != nil {
				go func() {
					if err := f.sink.Run(ctx); err != nil {
						f.log.Error("alertmanager sink", "err", err)
					}
				}()
			}
		}
	}
}
