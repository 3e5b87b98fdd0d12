package main

import (
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
	"github.com/braidlabs/braid/operators/kvgraph"
	"github.com/braidlabs/braid/state"
)

// detector is the detector in-process: one engine task of the standalone
// kvgraph stage reading otlp_logs, its state in dir, and the incident
// records it has written.
type detector struct {
	*engine.Harness
	cfg       kvgraph.Config
	store     *state.Store
	dir       string
	incidents []*braidpb.Incident
}

func openDetector(dir string) (*detector, error) {
	cfg := kvgraph.Config{Counters: &kvgraph.Counters{}}
	cfg.EnsureDefaults()
	os.RemoveAll(dir)
	store, err := state.Open(state.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	h, err := engine.NewHarness(engine.Config{Store: store, OutOfOrderness: time.Second, Idleness: time.Hour},
		kvgraph.Standalone(cfg, []string{"otlp_logs"}, 1, ""), 0, time.Unix(1000, 0))
	if err != nil {
		store.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return &detector{Harness: h, cfg: cfg, store: store, dir: dir}, nil
}

// collect takes the incident records written since the last call.
func (d *detector) collect() error {
	for _, r := range d.Out {
		if r.Topic != d.cfg.IncidentsTopic {
			continue
		}
		inc := &braidpb.Incident{}
		if err := proto.Unmarshal(r.Value, inc); err != nil {
			return err
		}
		d.incidents = append(d.incidents, inc)
	}
	clear(d.Out)
	d.Out = d.Out[:0]
	return nil
}

func (d *detector) close() {
	d.Close()
	d.store.Close()
	os.RemoveAll(d.dir)
}

// latestRevisions maps each incident id to its latest revision in all.
func latestRevisions(all []*braidpb.Incident) map[string]*braidpb.Incident {
	latest := map[string]*braidpb.Incident{}
	for _, inc := range all {
		if old := latest[inc.Id]; old == nil || inc.Revision > old.Revision {
			latest[inc.Id] = inc
		}
	}
	return latest
}
