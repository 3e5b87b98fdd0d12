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
	// MaxIncidentEvidence caps the supporting lines kept in one incident;
	// more are counted in evidence_dropped. Default 256.
	MaxIncidentEvidence int
	// MaxPendingEvidence caps the supporting lines waiting for an incident
	// (the oldest go first, counted in Counters.EvidenceDropped); they are
	// one state value, so at a checkpoint the oldest also go until it is
	// under MaxRecordBytes. Default 4096.
	MaxPendingEvidence int
	// ErrorPolicy is what happens to a KV event that breaks the convention
	// (see Check): dead_letter (default) writes it to DLQTopic with
	// braid.reason "kvgraph: <cause>", skip drops it (counted), fail ends
	// the job with the error.
	ErrorPolicy ErrorPolicy
	// DLQTopic and DLQPartitions: the dead-letter topic. Defaults
	// braid.dlq, 1.
	DLQTopic      string
	DLQPartitions int32
	// MaxRecordBytes is the largest record value the stage writes, bytes.
	// An incident record over it lists fewer polluted requests, edges,
	// supporting lines and layers (counted in polluted_dropped,
	// edges_dropped, evidence_dropped, layers_dropped); no other record of
	// the stage can reach it (see the bounds in Check). Default 1,000,000.
	MaxRecordBytes int
	// MaxKVBufferBytes bounds the memory of the KV events a fuse task
	// holds until the watermark (or LiveHold) releases them, bytes; when
	// full, the members of the latest go to state and are read back in
	// their turn; when their places alone (~64 bytes each) fill it, the
	// latest events leave memory altogether and come back from state in
	// key order. Order is kept whatever the hold; memory, not detection,
	// is what the bound trades. Default 64 MiB.
	MaxKVBufferBytes int64
	// LiveHold: while the task is caught up with its inputs
	// (engine.Task.CaughtUp), a held KV event goes to the detector once
	// it has waited this long of processing time, even before the
	// watermark passes it: live detection does not wait on the
	// out-of-orderness bound, only on the disorder of the last LiveHold —
	// and on the events forwarded by other tasks, which the fuse task
	// waits for in any case: every task, on every instance, must have
	// read its sources to their end since (engine.Task.MarkerHorizon).
	// Behind its inputs
	// (a backlog, a replay) the watermark alone releases events. Default
	// 1s; negative: the watermark only.
	LiveHold time.Duration
	// MaxStateBytes bounds the detector's in-memory state of a task
	// (blocks, requests, open incidents), bytes, estimated; when over it the
	// least recently used blocks and requests are forgotten
	// (Counters.EvictedBlocks, EvictedRequests), and when open incidents
	// take more than half of it the least recently grown closes early
	// (Counters.EvictedIncidents). Default 256 MiB.
	MaxStateBytes int64
	// JSON writes records as protojson instead of protobuf.
	JSON bool
	// OnIncident, when set, is called on the first emission of an
	// incident (revision 0, perhaps without a victim yet) and on each
	// later one that names polluted requests not given before:
	// inc.Polluted holds only those (fuse tags the FusedTrace records of its polluted requests,
	// each once), inc.Revision is the revision written (0 for a new
	// incident). Called on the task's goroutine, inside Add or
	// OnWatermark, which return its error; inc must not be retained or
	// modified.
	OnIncident func(t *engine.Task, inc *braidpb.Incident) error
	// Context, when set, returns the resource series in force on a GPU
	// (host, gpu id — its uuid, else host/gpuN —, index or -1, and the
	// server instance whose KV events it carried) over [start, end], for
	// the incident's evidence; nil when none.
	Context func(host, gpu string, gpuIndex int64, instance string, start, end int64) *braidpb.ResourceContext
	// Counters, when set, receives the counts (shared by the tasks of a
	// stage); else each processor has its own.
	Counters *Counters
}

// minRecordBytes is the least MaxRecordBytes: an incident's head (root,
// ids, counts) and a pollution edge of the largest ids fit in it.
const minRecordBytes = 64 << 10

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
	if c.LiveHold == 0 {
		c.LiveHold = time.Second
	}
	if c.MaxIncidentEdges == 0 {
		c.MaxIncidentEdges = 1000
	}
	if c.MaxIncidentEvidence == 0 {
		c.MaxIncidentEvidence = 256
	}
	if c.MaxPendingEvidence == 0 {
		c.MaxPendingEvidence = 4096
	}
	if c.ErrorPolicy == "" {
		c.ErrorPolicy = PolicyDeadLetter
	}
	if c.DLQTopic == "" {
		c.DLQTopic = "braid.dlq"
	}
	if c.DLQPartitions == 0 {
		c.DLQPartitions = 1
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1_000_000
	}
	if c.MaxKVBufferBytes == 0 {
		c.MaxKVBufferBytes = 64 << 20
	}
	if c.MaxStateBytes == 0 {
		c.MaxStateBytes = 256 << 20
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
	if c.MaxIncidentEvidence < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: MaxIncidentEvidence %d < 0", c.MaxIncidentEvidence))
	}
	if c.MaxPendingEvidence < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: MaxPendingEvidence %d < 0", c.MaxPendingEvidence))
	}
	switch c.ErrorPolicy {
	case PolicyDeadLetter, PolicySkip, PolicyFail:
	default:
		errs = append(errs, fmt.Errorf("kvgraph: ErrorPolicy %q is none of dead_letter, skip, fail", c.ErrorPolicy))
	}
	if c.ErrorPolicy == PolicyDeadLetter && c.DLQTopic == "" {
		errs = append(errs, errors.New("kvgraph: DLQTopic is empty"))
	}
	if c.DLQPartitions < 1 {
		errs = append(errs, fmt.Errorf("kvgraph: DLQPartitions %d < 1", c.DLQPartitions))
	}
	if c.MaxRecordBytes < minRecordBytes {
		errs = append(errs, fmt.Errorf("kvgraph: MaxRecordBytes %d < %d", c.MaxRecordBytes, minRecordBytes))
	}
	if c.MaxKVBufferBytes < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: MaxKVBufferBytes %d < 0", c.MaxKVBufferBytes))
	}
	if c.MaxStateBytes < 0 {
		errs = append(errs, fmt.Errorf("kvgraph: MaxStateBytes %d < 0", c.MaxStateBytes))
	}
	return errors.Join(errs...)
}
