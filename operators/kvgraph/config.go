package kvgraph

import (
	"errors"
	"fmt"
	"time"

	"github.com/braidlabs/braid/engine"
	"github.com/braidlabs/braid/operators/braidpb"
)

// Config configures the kvgraph processor. The zero value plus
// EnsureDefaults is valid.
type Config struct {
	// PollutionTopic receives PollutionEdge records keyed by source node
	// id. Default braid.pollution.
	PollutionTopic string
	// IncidentsTopic receives Incident records keyed by incident id.
	// Default braid.incidents.
	IncidentsTopic string
	// Partitions of both output topics. Default 1.
	Partitions int32
	// BlockTTL: a block (and a request) that saw no event for this long in
	// event time is forgotten. Default 30m.
	BlockTTL time.Duration
	// IncidentWindow: an incident that did not grow for this long in
	// event time closes (a final revision with state CLOSED); supporting
	// lines (sanitizer, Xid) attach to an incident on the same GPU at most
	// this far from it. Default 2m.
	IncidentWindow time.Duration
	// BlockBytes is the bytes of one block in one layer, for GPUs whose
	// events carry neither kv.block.bytes nor enough writes to infer it.
	// Default 0: infer from the writes.
	BlockBytes int64
	// MaxIncidentEdges caps the edges kept in one Incident record; more are
	// counted in edges_dropped. Default 1000.
	MaxIncidentEdges int
	// JSON writes records as protojson instead of protobuf.
	JSON bool
	// OnIncident, when set, is called on every emission of an incident
	// (fuse tags the FusedTrace records of its polluted requests). Called
	// on the task's goroutine; inc must not be retained or modified.
	OnIncident func(t *engine.Task, inc *braidpb.Incident)
	// Context, when set, returns the resource series in force on a GPU
	// (host, gpu id — its uuid, else host/gpuN —, index or -1, and the
	// server instance whose KV events it carried) over [start, end], for
	// the incident's evidence; nil when none.
	Context func(host, gpu string, gpuIndex int64, instance string, start, end int64) *braidpb.ResourceContext
	// Counters, when set, receives the counts (shared by the tasks of a
	// stage); else each processor has its own.
	Counters *Counters
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.PollutionTopic == "" {
		c.PollutionTopic = "braid.pollution"
	}
	if c.IncidentsTopic == "" {
		c.IncidentsTopic = "braid.incidents"
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.BlockTTL == 0 {
		c.BlockTTL = 30 * time.Minute
	}
	if c.IncidentWindow == 0 {
		c.IncidentWindow = 2 * time.Minute
	}
	if c.MaxIncidentEdges == 0 {
		c.MaxIncidentEdges = 1000
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.PollutionTopic == "" {
		errs = append(errs, errors.New("kvgraph: PollutionTopic is empty"))
	}
	if c.IncidentsTopic == "" {
		errs = append(errs, errors.New("kvgraph: IncidentsTopic is empty"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("kvgraph: Partitions %d < 1", c.Partitions))
	}
	if c.BlockTTL <= 0 {
		errs = append(errs, fmt.Errorf("kvgraph: BlockTTL %v <= 0", c.BlockTTL))
	}
	if c.IncidentWindow <= 0 {
		errs = append(errs, fmt.Errorf("kvgraph: IncidentWindow %v <= 0", c.IncidentWindow))
	}
	if c.BlockBytes < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: BlockBytes %d < 0", c.BlockBytes))
	}
	if c.MaxIncidentEdges < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: MaxIncidentEdges %d < 0", c.MaxIncidentEdges))
	}
	return errors.Join(errs...)
}
