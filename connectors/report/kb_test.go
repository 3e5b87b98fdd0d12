package report

import (
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
