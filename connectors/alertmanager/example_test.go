package alertmanager_test

import (
	"context"
	"log"
	"time"

	"github.com/braidlabs/braid/connectors/alertmanager"
)

// A Sink runs beside the job; the alert operator calls Update on every
// state change of an episode.
func Example() {
	sink, err := alertmanager.New(alertmanager.Config{URLs: []string{"http://127.0.0.1:39193"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sink.Run(ctx)
	defer sink.Close() // posts what is left, within Config.Timeout

	started := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) // event time, the same after a restart
	ttft := alertmanager.Alert{
		Key:         "ttft_p99/model=llama",
		Labels:      map[string]string{"alertname": "BraidTTFTHigh", "model": "llama", "severity": "page"},
		Annotations: map[string]string{"summary": "TTFT p99 2.4s above 2s"},
		StartsAt:    started,
		Firing:      true,
	}
	if err := sink.Update(ttft); err != nil {
		log.Print(err)
	}
	// Later: the episode resolved.
	ttft.Firing, ttft.EndsAt = false, started.Add(7*time.Minute)
	if err := sink.Update(ttft); err != nil {
		log.Print(err)
	}
}
