// Package kvref is an independent reference model of KV-cache pollution: it
// replays a stream of per-block KV events (the convention of
// connectors/simulator/KV.md, INPUTS.md §5) and says which reads returned
// content their reader should not have seen. It is the project's written
// definition of pollution for scoring, deliberately simple and written from
// the convention alone (not from the detector, nor from the simulator's
// fault code).
//
// A request is polluted only if a read it made returned content it should
// not have seen, directly or through a block whose content came from a
// polluted computation. Writing into someone's block pollutes nobody by
// itself; the request that later reads those bytes is polluted.
//
// # Content
//
// Each GPU's KV pool is a map from absolute byte offsets (kv.write.addr,
// kv.write.bytes) to the content last put there. A write labels its range
// with: the writer (gen_ai.request.id; "" for the server process, a
// CUDA-graph capture through the reserved null block, say), the block and
// layer the write was for (kv.block.id, kv.layer.index), the writer's
// holding ("tenure") of that block at the time (none if it did not hold it),
// and whether it is tainted (below). A write carrying kv.block.hash h marks
// its tenure's content as having hash h.
//
// Block-level ops carry no address. A zero of a block (all layers, or the
// one layer it names) and a swap_in by R (R's own saved content, all layers)
// replace what the block's slot held: a read through that block sees, for
// every byte last written before the reset, the reset's content (zeros, or
// R's swapped-in content). A zero with a range zeroes that range. Reads
// address their own block's slot, so this needs no pool layout.
//
// # Holdings
//
// alloc without a hash starts an exclusive tenure of the block for the
// request; alloc with hash h is a prefix-cache hit: the request shares the
// content whose hash is h (the writes whose tenure a write marked with h);
// swap_in starts a tenure
// holding the request's swapped-in content; free and swap_out end the
// request's tenure (a free of a block it does not hold changes nothing:
// that is the allocator's bug, and its consequences show in reads); evict
// ends nobody's tenure. Each request keeps its block table: the blocks in
// the order it acquired them, removed when freed or swapped out.
//
// # Legitimate content
//
// A read by R of block b, layer L, is legitimate byte by byte when the
// bytes' content is:
//
//   - never written (fresh memory), or zeros;
//   - R's own write, made for block b and layer L, during R's current
//     exclusive tenure of b (alloc without a hash, or swap_in);
//   - a write (by anyone, R included) made for block b and layer L whose
//     tenure carries hash h, while R holds b as a hit on h (a hit holder's
//     own writes into the shared block count only if they carry the hash:
//     padding junk written into a shared block is foreign to all its
//     readers, its writer included);
//   - R's swapped-in content while R holds b from that swap_in (or content
//     swapped in and since marked with hash h, while R holds b as a hit on
//     h), except what was foreign when it was swapped out (below).
//
// Anything else is foreign: R is polluted directly, from the writer of the
// foreign bytes ("" for a write without a request).
//
// # Propagation
//
// Attention is causal: what a request computes after a polluted read at
// the block in position p of its block table attends to that content from
// position p on. Every write R makes afterwards into a block at position
// ≥ p of its table, or into a block it does not hold, is tainted (a later
// polluted read at a lower position lowers p). When R lets go of all its
// blocks by free (it finished, or a recompute preemption discarded its KV),
// what it writes next is recomputed from its tokens: p becomes the position
// its last block had when it was first polluted (where the tokens it
// generated since begin), so a recomputed prompt block, with the shared prefix's hash, is
// clean; reading its own tainted content again (a hit on its own cached
// block) lowers p again. A request whose read is otherwise legitimate but
// returns bytes another request tainted is polluted propagated, from that
// writer; taint chains.
//
// A swap_out saves the block as it is: the part of it its holder has read
// (its KV) is judged as the holder would read it, and a swap_in restores
// the verdict with the content (the i-th swap_in of a request restores its
// i-th swapped-out block). The holder reading restored foreign bytes is
// polluted directly, from their writer.
//
// A foreign read wins: within a read, foreign bytes make it direct; across
// reads, a request's Pollution is its first direct read if it has one,
// else its first propagated read.
package kvref
