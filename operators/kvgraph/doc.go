// Package kvgraph detects KV-cache pollution in LLM inference servers from
// per-block KV events (the convention of INPUTS.md §5) and builds the
// pollution graph and its incidents.
//
// # Input
//
// One OTLP log record per KV op, attributes kv.op (alloc, write, read,
// free, zero, evict, swap_out, swap_in), kv.block.id, kv.block.hash (16 hex
// digits, on the alloc of a prefix-cache hit and on a write of full-block
// content), kv.block.ref_cnt, kv.layer.index, kv.layer.count,
// kv.write.addr + kv.write.bytes (the byte range touched, an offset in the
// GPU's KV pool; also on reads), kv.layer.base + kv.layer.size and
// gen_ai.request.id; resource host.name, gpu.uuid / gpu.index,
// service.instance.id; trace and span id when known. The pool is
// layer-major: layer L owns [L·size, (L+1)·size) and block b of layer L
// starts at L·size + b·blockBytes (kv.block.bytes if sent, else Config.
// BlockBytes, else inferred from clean writes). Log bodies of
// compute-sanitizer reports ("========= Invalid __global__ write …") and
// kernel "NVRM: Xid (PCI:…): N, …" lines are supporting evidence. ParseEvent
// reads all of these from wire bytes without allocating.
//
// # Bad input
//
// Nothing in the input makes the processor panic. A KV event that breaks
// the convention (Event.Check: an unknown kv.op; kv.block.id missing, not
// an integer or outside [0, MaxBlock); gen_ai.request.id missing on an
// op only a request does (alloc, read, free, swap_out, swap_in); a layer index or count outside [0, MaxLayer); an address,
// size or length negative or beyond MaxPoolBytes / MaxRangeBytes; half of
// a range; an identity — request id, host.name, gpu.uuid,
// service.instance.id — longer than MaxIDBytes or not valid UTF-8) goes by
// Config.ErrorPolicy: by default to the dead-letter topic, the record as
// it came (a LogsData of it and its resource) with braid.reason
// "kvgraph: <cause>" and the input record's braid.topic, braid.partition
// and braid.offset; the job goes on. Identities are rejected rather than
// repaired, so that two distinct invalid ids are never merged into one.
// Free text (the body of a supporting line) is repaired: invalid bytes
// become U+FFFD, cut at a character boundary. Every string given to a
// protobuf marshal is valid UTF-8; a marshal that fails all the same is
// counted (Counters.Unwritable) and its record not written.
//
// # Keys and routing
//
// State is keyed by (GPU, block): each GPU's pool is followed on its own.
// The job routes KV-event logs by host.name, so a task handles every GPU of
// the hosts routed to it, and everything a GPU's prefix cache can propagate
// stays inside one task. The processor does not route: it runs inside the
// fuse stage's task (fuse owns the input and calls Add, OnWatermark,
// PrepareCheckpoint and Restore), or alone in the Standalone topology
// (replay, tests, benchmarks), whose input must be partitioned by host.
//
// # What a clean block's life looks like
//
// A request reads only: ranges it wrote since it got the block; the
// content it shares with a prefix-cache hit whose kv.block.hash equals the
// hash the block's content was written with; zeroed (or never written)
// bytes; content swapped in for it. A non-shared block has one live writer
// (its owner), and writes stay inside the writer's layer range and the
// owner's block slot. An owner's write replaces the block's content hash
// (with the write's kv.block.hash, or none); a stray write (by a request
// that does not own the block, or into a block with another live owner)
// without one leaves it: the server's prefix index still hands the block
// out for that hash, and whoever takes it so reads the stray bytes.
//
// A swap-in is a write of the whole block, every layer, by its owner: it
// replaces the content and its hash (the op's kv.block.hash, if any); a
// zero of a layer or range, or a later write, replaces it in turn. A write
// without gen_ai.request.id is the server process writing (a CUDA-graph
// capture or warm-up pass through the reserved null block 0): its bytes
// belong to no request, and a request that reads them before they are
// zeroed reads residue whose source is the process (node
// "proc:<gpu>/<service.instance.id>", root request id empty). When the
// service.instance.id of a GPU's events changes, the server restarted: the
// old process's requests died holding their blocks, so every block of the
// GPU starts a new life with no owner, hash or content (Counters.Restarts).
//
// # Detectors
//
// Dirty block residue: a read by request R of bytes of block b whose last
// writer W ≠ R, where W's content was neither zeroed since nor shared with
// R by matching hash nor swapped in for R, and W is no longer an owner of
// b (it freed or swapped out the block). Edge W → b → R, kind
// DIRTY_RESIDUE, timed at the read; when several writers' leftovers are
// read, the latest writer is the source. A prefix-hit alloc whose hash does
// not match the block's content hash is not sharing. When R itself wrote
// other layers of b and reads layers it never wrote, it took them as
// computed: the root is the request that freed a block, within 30 s,
// having written exactly those layers and no others, as many bytes of each
// (a prefill cancelled part way, the request a retry relies on: partial.go)
// — else, when R wrote b's content hash, the request that wrote that same
// hash into another block — not whoever left the bytes.
//
// Cross-request mixed writes: (1) an alloc (or swap-in) of a block that
// already has a live owner, without a matching content hash: the block now
// has two live owners (edge R → b, kind MIXED_WRITE; the source is the
// request that freed the block twice — a free of a block it no longer
// held, after freeing it — when one did); (2) a write by W into block b
// while W is not its owner (a stale write after free, preemption or a
// radix tree pointing at freed pages) or while b has another live owner
// that does not share it by the write's hash: the write is the fault's
// first evidence (an edge W → b without a victim; the incident opens
// then), and its bytes are marked; (3) a write inside its layer but
// outside its own block slot (when the slot size is known exactly) lands
// in the other block, marked likewise. A victim is a request whose read
// returns marked bytes it should not have seen — another owner, a later
// owner of a block nobody cleaned, the writer itself reading a range its
// write was not meant for — polluted then (W → b → O; a read of bytes
// written by a co-owner or a non-owner is MIXED_WRITE, not residue). An
// owner that frees the block, or rewrites the range, before reading it is
// no victim: holding a block is not reading what was written into it.
//
// Layer out-of-bounds: a write whose range leaves [kv.layer.base,
// kv.layer.base+kv.layer.size), or whose layer index is ≥ kv.layer.count.
// The part outside lands in layer L' = addr / layer size (beyond the pool
// when L' ≥ the layer count) and block slot (addr − L'·size) / blockBytes:
// edge W → layer L' (kind LAYER_OOB); a reader of those bytes — an owner
// of that slot, W included when it is W's own block in another layer — is
// polluted when it reads them (W → b' → O).
//
// Propagation: attention is causal, so a request polluted at the block in
// position i of its block table (the blocks it holds, in the order it got
// them) carries the pollution into the blocks it writes from position i
// on, not the earlier ones. Those bytes are tainted; a request that reads
// them through legitimate prefix sharing (matching hash), or as content
// swapped in, is polluted too: edge P → b → Q, kind PROPAGATED.
//
// Supporting lines (sanitizer, Xid) never open an incident: they attach to
// the open incidents of the same host and GPU whose time span, widened by
// IncidentWindow, contains them, or wait up to IncidentWindow for one.
// The GPU is the line's resource gpu.uuid or gpu.index; for a host-level
// kernel line, the GPU whose PCI bus id it names (learnt from Xid lines
// that came with a uuid), else the host's only GPU; a line on a host of
// several GPUs that braid cannot place attaches nowhere. Only Xids of
// memory faults (13, 31, 43) attach, and memcheck lines only to
// layer-out-of-bounds incidents (memcheck sees accesses outside every
// allocation, not content mixed up inside the pool); other Xids (63, 48,
// 79, …) and racecheck reports are counted in Counters.Unrelated.
//
// # Graph and incidents
//
// Nodes are "req:<gpu>/<request id>", "blk:<gpu>/<block>" and
// "layer:<gpu>/<layer>"; edges request → block → request and request →
// layer go to braid.pollution (key = source node id) as PollutionEdge, with
// kind, time, GPU, block, layer, byte range, trace ids and the input
// origins (topic/partition/offset) of the ops behind them. Edges that share
// a link on the same GPU belong to one incident (when an edge joins two,
// the one whose root is earlier absorbs the other, which closes). The
// links are the request whose write or bytes an edge is about (and the
// fault's source where it is another), and a block whose fault it is
// (handed out to two live owners, or read as residue); not a victim (two
// faults that meet in a request are two incidents, unless the victim
// reads residue its own faulty write left unwritten), not a block another
// fault's write landed in (reading those bytes is that writer's fault),
// not a layer. Content shared by
// prefix hash (PROPAGATED) belongs to the incident that polluted its
// writer, whatever else that request is part of; when that incident has
// closed, a continuation opens: an incident with `continues` set to the
// closed one's id and with its root, which is remembered for BlockTTL of
// event time after the close. An
// incident's root is its earliest fault (by the fault's event time); its id
// is "inc-" + FNV-64a of the GPU and the root's kind, source, block, layer
// and time, so the same input gives the same ids. It lists the polluted
// requests (direct or propagated, with trace ids), the edges (capped), the
// per-layer hits and corrupted reads (heatmap data) and the supporting
// lines. An Incident record goes to braid.incidents (key = incident id)
// after each batch that changed it, with revision+1; when event time passes
// its last edge + IncidentWindow it is emitted a last time with state
// CLOSED and forgotten, so a later fault on the same nodes opens a new one.
// Config.OnIncident hands each emission's polluted trace ids to fuse;
// Config.Context fills Incident.resources with the resources stage's series
// of the incident's GPU and server (KV-cache usage, preemptions, queue, GPU
// memory, Xid) over the incident's span of event time.
//
// # State
//
// In memory, written under key prefix 'k' of the task's keyspace at each
// checkpoint (only what changed) and reloaded by Restore: per block its
// owners, hash, content spans per layer (byte range, writer, time, how it
// got there); per request its trace id and pollution; per GPU its pool
// geometry; open incidents; supporting lines waiting for an incident; the
// roots of incidents closed within BlockTTL (one value, at most 1,024). A
// block or request that saw no op for BlockTTL of event time is forgotten
// (at most 512 per OnWatermark call; Backlog reports more). An open
// incident is a head (its record without its lists) and its lists —
// nodes, edge keys, polluted requests, edges, evidence — in segments of 64
// items, each written once it changes: no state value grows with an
// incident.
//
// # Sizes
//
// Every record the stage writes is under Config.MaxRecordBytes: an
// incident record lists the first polluted requests, edges, supporting
// lines and layers that fit (and at most a quarter of it for the resource
// series) and counts the others in polluted_dropped, edges_dropped,
// evidence_dropped and layers_dropped (Counters.Truncated counts such
// records); the incident itself keeps them all, and every edge is on the
// pollution topic. With the bounds of Check a pollution edge is a few KiB.
//
// # Memory
//
// The processor estimates the memory of its blocks, requests, GPUs and
// open incidents (Counters.StateBytes) and keeps it under
// Config.MaxStateBytes: past it, open incidents beyond half of the budget
// close early (least recently grown first; a last revision, CLOSED, whose
// root detail says "closed early: state memory budget";
// Counters.EvictedIncidents), then the least recently used blocks and
// requests (by event time) are forgotten before BlockTTL
// (Counters.EvictedBlocks, EvictedRequests) down to 7/8 of the budget.
// What is lost is detection, and care is taken that forgetting does not
// make incidents of its own: a block met again after owned blocks of its
// GPU were forgotten is untracked until its next alloc without a content
// hash (its writers and prefix hits are taken for owners, its reads are
// not checked); a forgotten request's pollution no longer propagates. Supporting lines waiting for an incident are capped by
// Config.MaxPendingEvidence, those of one incident by MaxIncidentEvidence.
// The fuse stage holds KV events until the watermark passes them within
// Config.MaxKVBufferBytes (see there).
package kvgraph
