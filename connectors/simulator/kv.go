package simulator

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// KV-block simulation (KV.md): a deterministic generator of the per-block
// KV-cache events of INPUTS.md §5 for a fleet of GPUs, with injected
// pollution faults and the ground truth of what they polluted. It is pure:
// no clock, no I/O; the same KVConfig, GPUs and requests give the same
// events and truth, byte for byte.

// KVPattern is a pollution pattern.
type KVPattern string

// KV pollution patterns.
const (
	DirtyResidue KVPattern = "dirty_residue" // a new owner reads content it did not write
	MixedWrite   KVPattern = "mixed_write"   // one request writes into another live request's block
	LayerOOB     KVPattern = "layer_oob"     // a write outside its layer's byte range
)

// KVTrigger is the realistic cause through which a fault is injected. Each
// trigger belongs to one pattern (KVTrigger.Pattern).
type KVTrigger string

// KV fault triggers.
const (
	RecycledNotZeroed   KVTrigger = "recycled_not_zeroed"   // dirty residue
	CancelRetry         KVTrigger = "cancel_retry"          // dirty residue
	OffloadAfterPreempt KVTrigger = "offload_after_preempt" // mixed write
	DoubleFree          KVTrigger = "double_free"           // mixed write
	RadixStale          KVTrigger = "radix_stale"           // mixed write
	PaddingSlotMinus1   KVTrigger = "padding_slot_minus_1"  // layer OOB
	WrongStride         KVTrigger = "wrong_stride"          // layer OOB
	KVBaseSwap          KVTrigger = "kv_base_swap"          // layer OOB
	// NullBlockJunk: at a restart (KVConfig.Restarts, with NullBlock) the
	// CUDA-graph capture's writes into the reserved null block are not
	// zeroed: padded decode reads return them (dirty residue, no request
	// at its source). Not in KVTriggers: it needs a restart.
	NullBlockJunk KVTrigger = "null_block_junk"
)

// KVTriggers lists every trigger, in a fixed order.
var KVTriggers = []KVTrigger{RecycledNotZeroed, CancelRetry, OffloadAfterPreempt, DoubleFree, RadixStale, PaddingSlotMinus1, WrongStride, KVBaseSwap}

// Pattern returns the pollution pattern the trigger produces, "" for an
// unknown trigger.
func (t KVTrigger) Pattern() KVPattern {
	switch t {
	case RecycledNotZeroed, CancelRetry, NullBlockJunk:
		return DirtyResidue
	case OffloadAfterPreempt, DoubleFree, RadixStale:
		return MixedWrite
	case PaddingSlotMinus1, WrongStride, KVBaseSwap:
		return LayerOOB
	}
	return ""
}

// KV ops (attribute kv.op).
const (
	OpAlloc   = "alloc"
	OpWrite   = "write"
	OpRead    = "read"
	OpFree    = "free"
	OpZero    = "zero"
	OpEvict   = "evict"
	OpSwapOut = "swap_out"
	OpSwapIn  = "swap_in"
)

// KV defaults.
const (
	DefaultKVLayers       = 8
	DefaultKVBlockBytes   = 4096
	DefaultKVBlocksPerGPU = 256
	DefaultKVBlockTokens  = 16
	DefaultKVPrefixShare  = 0.5
	DefaultKVPressure     = 0.2
	DefaultKVPrefixGroups = 4
)

// KVConfig configures a KV simulation. Zero fields take their defaults
// (EnsureDefaults); Validate reports every problem at once.
type KVConfig struct {
	// Seed of the generator; equal seeds and inputs give equal output.
	Seed int64
	// Layers is the number of decoder layers simulated (default 8).
	Layers int
	// BlockBytes is the size in bytes of one block in one layer (default
	// 4096); it must be a multiple of BlockTokens.
	BlockBytes int64
	// BlocksPerGPU is the block pool size of each GPU (default 256).
	BlocksPerGPU int
	// BlockTokens is the number of tokens a block holds (default 16).
	BlockTokens int
	// PrefixShare is the fraction of requests, with KVRequest.Prefix
	// unset (-1 means none, so use KVAutoPrefix), that share a system
	// prompt with others (default 0.5; a negative value means 0).
	PrefixShare float64
	// PrefixGroups is the number of distinct shared system prompts
	// (default 4).
	PrefixGroups int
	// Pressure is the probability that a request is interrupted once during
	// decode, by a recompute preemption or a swap (default 0.2; a negative
	// value means 0). Pool exhaustion also preempts, whatever its value.
	Pressure float64
	// Faults are the faults to inject.
	Faults []KVFault
	// Restarts restart the server of a GPU: its requests die where they
	// are (no further events, no free), its pool starts empty under a new
	// service.instance.id (KVEvent.Instance), and with NullBlock a
	// CUDA-graph capture writes the null block, every layer, without a
	// request, which the server then zeroes.
	Restarts []KVRestart
	// NullBlock reserves block 0 as vLLM's null block: never allocated;
	// a decode step of a padded batch (one in PaddedShare) reads it in
	// the step's sampled layer.
	NullBlock bool
}

// PaddedShare is the share of decode steps that read the null block
// (KVConfig.NullBlock): CUDA-graph batches padded to their captured size.
const PaddedShare = 0.25

// KVRestart restarts the server of GPU (an index into the simulator's
// GPUs) at At.
type KVRestart struct {
	GPU int
	At  time.Time
}

// KVAutoPrefix in KVRequest.Prefix lets the simulator draw the request's
// shared-prefix group from KVConfig.PrefixShare and PrefixGroups.
const KVAutoPrefix = -2

// KVFault is one fault to inject: the first occasion at or after At on the
// GPU (index into the simulator's GPUs; -1 for any) where the trigger's
// preconditions hold realises it. Faults that never find their occasion
// appear in the truth summary as unrealised.
type KVFault struct {
	Trigger KVTrigger
	At      time.Time
	GPU     int
}

// KVGPU is one GPU of the simulated fleet, with its resource attributes.
type KVGPU struct {
	Host     string // host.name
	UUID     string // gpu.uuid
	Index    int    // gpu.index
	Instance string // service.instance.id
	Service  string // service.name
}

// KVRequest is one inference request to simulate.
type KVRequest struct {
	RequestID string // gen_ai.request.id
	TraceID   string // 32 hex, "" when unknown
	SpanID    string // 16 hex, "" when unknown
	GPU       int    // index into the simulator's GPUs
	Arrival   time.Time
	Finish    time.Time // after Arrival; decode runs until then
	// PromptTokens and OutputTokens; a prompt includes its shared prefix.
	PromptTokens, OutputTokens int
	// Prefix is the shared-prefix group (0 ≤ Prefix < PrefixGroups), -1 for
	// none, KVAutoPrefix to draw it.
	Prefix int
}

// KVEvent is one OTLP log record of the convention (KV.md). Op == "" marks a
// log line that is not a KV op (compute-sanitizer, NVRM Xid) carried in
// Body, with no request and LayerCount 0. Block, Layer and RefCnt are -1
// when absent, as are Addr, Bytes, LayerBase and LayerSize; Hash,
// RequestID, TraceID and SpanID are "" when absent (evict has no request).
type KVEvent struct {
	Time       time.Time
	GPU        int // index into the simulator's GPUs
	Op         string
	Block      int
	Hash       string
	RefCnt     int
	Layer      int
	LayerCount int
	Addr       int64
	Bytes      int64
	LayerBase  int64
	LayerSize  int64
	RequestID  string
	TraceID    string
	SpanID     string
	Body       string
	// Instance is the server's service.instance.id after a restart (""
	// before the first: the KVGPU's).
	Instance string
}

// Sentinel errors.
var (
	// ErrKVLate: a request arrives before the time already simulated.
	ErrKVLate = errors.New("simulator: kv request arrives before the simulated time")
)

// EnsureDefaults fills the zero fields with their defaults.
func (c *KVConfig) EnsureDefaults() {
	if c.Layers == 0 {
		c.Layers = DefaultKVLayers
	}
	if c.BlockBytes == 0 {
		c.BlockBytes = DefaultKVBlockBytes
	}
	if c.BlocksPerGPU == 0 {
		c.BlocksPerGPU = DefaultKVBlocksPerGPU
	}
	if c.BlockTokens == 0 {
		c.BlockTokens = DefaultKVBlockTokens
	}
	if c.PrefixShare == 0 {
		c.PrefixShare = DefaultKVPrefixShare
	} else if c.PrefixShare < 0 {
		c.PrefixShare = 0
	}
	if c.PrefixGroups == 0 {
		c.PrefixGroups = DefaultKVPrefixGroups
	}
	if c.Pressure == 0 {
		c.Pressure = DefaultKVPressure
	} else if c.Pressure < 0 {
		c.Pressure = 0
	}
}

// Validate reports every problem of a defaulted config at once.
func (c *KVConfig) Validate(gpus int) error {
	var errs []error
	if c.Layers < 2 || c.Layers > 1024 {
		errs = append(errs, fmt.Errorf("Layers %d: want 2..1024", c.Layers))
	}
	if c.BlockTokens < 1 || c.BlockTokens > 1024 {
		errs = append(errs, fmt.Errorf("BlockTokens %d: want 1..1024", c.BlockTokens))
	}
	if c.BlockBytes < 1 || (c.BlockTokens > 0 && c.BlockBytes%int64(c.BlockTokens) != 0) {
		errs = append(errs, fmt.Errorf("BlockBytes %d: want a positive multiple of BlockTokens", c.BlockBytes))
	}
	if c.BlocksPerGPU < 16 || c.BlocksPerGPU > 1<<20 {
		errs = append(errs, fmt.Errorf("BlocksPerGPU %d: want 16..%d", c.BlocksPerGPU, 1<<20))
	}
	if c.PrefixShare > 1 {
		errs = append(errs, fmt.Errorf("PrefixShare %v: want at most 1", c.PrefixShare))
	}
	if c.PrefixGroups < 1 {
		errs = append(errs, fmt.Errorf("PrefixGroups %d: want at least 1", c.PrefixGroups))
	}
	if c.Pressure > 1 {
		errs = append(errs, fmt.Errorf("Pressure %v: want at most 1", c.Pressure))
	}
	if gpus < 1 {
		errs = append(errs, errors.New("no GPUs"))
	}
	for i, f := range c.Faults {
		if f.Trigger.Pattern() == "" {
			errs = append(errs, fmt.Errorf("Faults[%d].Trigger %q: unknown", i, f.Trigger))
		}
		if f.GPU < -1 || f.GPU >= gpus {
			errs = append(errs, fmt.Errorf("Faults[%d].GPU %d: want -1..%d", i, f.GPU, gpus-1))
		}
		if f.Trigger == NullBlockJunk && (!c.NullBlock || len(c.Restarts) == 0) {
			errs = append(errs, fmt.Errorf("Faults[%d].Trigger %q: needs NullBlock and Restarts", i, f.Trigger))
		}
	}
	for i, r := range c.Restarts {
		if r.GPU < 0 || r.GPU >= gpus {
			errs = append(errs, fmt.Errorf("Restarts[%d].GPU %d: want 0..%d", i, r.GPU, gpus-1))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("simulator: kv config: %s", strings.Join(msgs, "; "))
}

// NewKV returns a KV simulator for the GPUs.
func NewKV(cfg KVConfig, gpus []KVGPU) (*KV, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(len(gpus)); err != nil {
		return nil, err
	}
	cfg.Faults = append([]KVFault(nil), cfg.Faults...)
	k := &KV{
		cfg:       cfg,
		gpus:      append([]KVGPU(nil), gpus...),
		rng:       rand.New(rand.NewSource(cfg.Seed)),
		layerSize: int64(cfg.BlocksPerGPU) * cfg.BlockBytes,
		tokBytes:  cfg.BlockBytes / int64(cfg.BlockTokens),
	}
	for i := range gpus {
		k.pools = append(k.pools, newKVSPool(i, cfg.BlocksPerGPU, cfg.NullBlock))
	}
	cfg.Restarts = append([]KVRestart(nil), cfg.Restarts...)
	for _, r := range cfg.Restarts {
		k.schedule(&kvsAction{t: r.At, kind: actRestart, gpu: r.GPU})
	}
	for i, f := range cfg.Faults {
		kf := &kvsFault{id: i, spec: f, block: -1, layer: -1, gpu: -1}
		k.pending = append(k.pending, kf)
		k.byID = append(k.byID, kf)
	}
	return k, nil
}
