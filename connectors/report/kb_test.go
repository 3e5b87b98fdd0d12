package report

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/braidlabs/braid/connectors/simulator"
)

// TestKBCoversTriggers: every trigger the simulator injects, and so every
// failure mode braid's detector names, has an entry with a signature,
// engines, public reports or a statement that none was found, and fixes.
func TestKBCoversTriggers(t *testing.T) {
	kb, err := LoadKB()
	if err != nil {
		t.Fatal(err)
	}
	for _, trig := range simulator.KVTriggers {
		e := kb.entries[string(trig)]
		if e == nil {
			t.Errorf("no knowledge-base entry %s", trig)
			continue
		}
		if e.Pattern != string(trig.Pattern()) {
			t.Errorf("%s: pattern %q, the trigger's is %q", e.ID, e.Pattern, trig.Pattern())
		}
		for _, sec := range []string{"## What it means", "## Public reports", "## Usual fixes"} {
			if !strings.Contains(e.Body, sec) {
				t.Errorf("%s: no %q section", e.ID, sec)
			}
		}
		if e.Engines == "" || e.File == "" {
			t.Errorf("%s: engines %q file %q", e.ID, e.Engines, e.File)
		}
	}
	if len(kb.Entries()) <= len(simulator.KVTriggers) {
		t.Errorf("%d entries: the base should hold failure modes beyond the simulator's triggers", len(kb.Entries()))
	}
}

// TestKBRanksBySignature: retrieval ranks by the words of the features,
// not by file order: the same pattern with different features puts
// different entries first, and an entry of another pattern can only win
// on its words.
func TestKBRanksBySignature(t *testing.T) {
	kb, err := LoadKB()
	if err != nil {
		t.Fatal(err)
	}
	top := func(pattern string, texts ...string) string {
		var fs []Feature
		for _, s := range texts {
			fs = append(fs, Feature{Text: s})
		}
		m, err := kb.Search(pattern, fs, 3)
		if err != nil || len(m) == 0 {
			t.Fatalf("search %v: %v %v", texts, m, err)
		}
		return m[0].Entry.ID
	}
	if got := top("mixed_write", "double free, freed twice, two live owners"); got != "double_free" {
		t.Errorf("double free → %s", got)
	}
	if got := top("mixed_write", "prefix hit with a stale hash after eviction, radix tree"); got != "radix_stale" {
		t.Errorf("stale prefix hit → %s", got)
	}
	if got := top("dirty_residue", "llama.cpp slot reuse continued another user's conversation"); got != "prompt_cache_continuation" {
		t.Errorf("slot reuse → %s", got)
	}
	if m, err := kb.Search("", nil, 3); err != nil || len(m) != 0 {
		t.Errorf("no features: %v %v", m, err)
	}
}

// TestKBRejectsBadEntries: an entry without a header, without an id, or
// with an id used twice is an error, not a silent gap.
func TestKBRejectsBadEntries(t *testing.T) {
	ok := "id: a\ntitle: A\nsignature: s\n---\nbody\n"
	for name, files := range map[string]fstest.MapFS{
		"no separator": {"a.md": {Data: []byte("id: a\ntitle: A\nsignature: s\n")}},
		"no id":        {"a.md": {Data: []byte("title: A\nsignature: s\n---\nbody\n")}},
		"twice":        {"a.md": {Data: []byte(ok)}, "b.md": {Data: []byte(ok)}},
	} {
		if _, err := OpenKB(files, "kb"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if kb, err := OpenKB(fstest.MapFS{"a.md": {Data: []byte(ok)}}, "kb"); err != nil || len(kb.Entries()) != 1 || kb.Entries()[0].File != "kb/a.md" {
		t.Errorf("a good entry: %v %v", kb, err)
	}
}

// TestKBRanksDemoFeatures: the feature sets observe derived for each
// trigger in a demo run (cmd/braid TestReportFromDemo's log), with their
// weights, rank that trigger's entry first.
func TestKBRanksDemoFeatures(t *testing.T) {
	kb, err := LoadKB()
	if err != nil {
		t.Fatal(err)
	}
	silent := Feature{Text: "no sanitizer line and no Xid: silent", Weight: 0.5}
	san := Feature{Text: "compute-sanitizer: invalid __global__ write, address out of bounds"}
	xid := Feature{Text: "NVRM Xid 13 on the GPU"}
	residue := []Feature{{Text: "dirty residue: a request read content it did not write"},
		{Text: "read of a freed block another request wrote: content of the previous owner, not zeroed since it was freed", Weight: 0.5}}
	mixed := Feature{Text: "mixed write: one request wrote into a block another request owns"}
	oob := []Feature{{Text: "layer out of bounds: a write outside its layer's range"}, {Text: "a write for one layer landed in the next layer"}}
	outside := Feature{Text: "a write landed outside the pool, past the end of the last layer", Weight: 1.5}
	beyond := Feature{Text: "the write starts beyond its layer, wholly inside another layer", Weight: 0.5}
	cases := map[simulator.KVTrigger][]Feature{
		simulator.RecycledNotZeroed: append(slices.Clone(residue), Feature{Text: "residue read in every layer of the block (all 8 layers)", Weight: 3}, silent),
		simulator.CancelRetry:       append(slices.Clone(residue), Feature{Text: "residue read in part of the layers only (4 of 8): some layers never written, skipped as if computed", Weight: 3}, silent),
		simulator.OffloadAfterPreempt: {mixed, {Text: "foreign write: a request that is not the owner wrote into a block another request owns"},
			{Text: "foreign writes in every layer of one whole block", Weight: 1.5}, silent},
		simulator.DoubleFree: {mixed, {Text: "double free: a block freed twice, handed out to two live owners", Weight: 2}, silent},
		simulator.RadixStale: {mixed, {Text: "block allocated while another request owns it"},
			{Text: "prefix hit: allocation with a prefix hash the block no longer holds (stale prefix entry, hash mismatch)", Weight: 2}, silent},
		simulator.PaddingSlotMinus1: append(slices.Clone(oob), outside,
			Feature{Text: "the write straddles the end of its layer: it starts in the layer's last slot and runs into the next layer", Weight: 1.5},
			Feature{Text: "out-of-bounds writes in every layer"},
			Feature{Text: "the out-of-bounds writes polluted 36 other requests, owners of the blocks they landed in", Weight: 2.5}, san, xid),
		simulator.WrongStride: append(slices.Clone(oob), beyond,
			Feature{Text: "writes into many other requests' blocks of the same layer, owned by other requests (8 blocks, 3 named owners)", Weight: 3},
			Feature{Text: "the out-of-bounds writes polluted 25 other requests, owners of the blocks they landed in", Weight: 2.5}, xid),
		// A harmless wrong stride (no victim): only where the write went
		// tells it from a base mix-up.
		"wrong_stride_harmless": append(slices.Clone(oob), beyond,
			Feature{Text: "the write landed at twice its block's offset: a wrong stride", Weight: 3.5}, xid),
		// A wrong stride that polluted only the writer's own later reads.
		"wrong_stride_self": append(slices.Clone(oob), beyond,
			Feature{Text: "the write landed at twice its block's offset: a wrong stride", Weight: 3.5},
			Feature{Text: "the writer is its own victim: it read the layer it never wrote, its own blocks", Weight: 3}, xid),
		// A base mix-up seen from its record: its own slot one layer on.
		"kv_base_swap_record": append(slices.Clone(oob), beyond,
			Feature{Text: "the write went to its own block's slot one layer on: the next layer's base address", Weight: 3.5},
			Feature{Text: "the writer is its own victim: it read the layer it never wrote, its own blocks", Weight: 3}, silent),
		// A wrong stride whose writes all landed in the next layer: no
		// block named, only the victims tell it from a base mix-up.
		"wrong_stride_next_layer": append(slices.Clone(oob), beyond,
			Feature{Text: "the out-of-bounds writes polluted 21 other requests, owners of the blocks they landed in", Weight: 2.5}, silent),
		simulator.KVBaseSwap: append(slices.Clone(oob), outside, beyond,
			Feature{Text: "the writer is its own victim: it read the layer it never wrote, its own blocks", Weight: 3}, san, xid),
	}
	for trig, fs := range cases {
		want := string(trig)
		for _, suffix := range []string{"_next_layer", "_harmless", "_self", "_record"} {
			want = strings.TrimSuffix(want, suffix)
		}
		m, err := kb.Search(string(simulator.KVTrigger(want).Pattern()), fs, 3)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s: %v %v", trig, m, err)
		}
		if m[0].Entry.ID != want {
			t.Errorf("%s: ranked %s first (%.2f), then %s (%.2f)", trig, m[0].Entry.ID, m[0].Score, m[1].Entry.ID, m[1].Score)
		}
	}
}
