package report

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
)

// The knowledge base shipped with braid: one Markdown file per known
// failure mode, a header of "key: value" lines, a line "---", then the
// body (what it means, public reports, usual fixes, how to confirm).
//
//go:embed kb/*.md
var kbFiles embed.FS

// Entry is one known failure mode.
type Entry struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Pattern   string `json:"pattern"` // dirty_residue, mixed_write, layer_oob, propagated
	Engines   string `json:"engines"`
	Signature string `json:"signature"`
	Keywords  string `json:"keywords"`
	Body      string `json:"body"` // Markdown
	File      string `json:"file"` // path in the repository
}

// KB is the knowledge base with its full-text index (bleve, in memory).
type KB struct {
	entries map[string]*Entry
	index   bleve.Index
}

// Match is a retrieved entry: its BM25 score, rank (1 = first) and the
// features of the incident that matched it.
type Match struct {
	Entry   *Entry   `json:"entry"`
	Score   float64  `json:"score"`
	Rank    int      `json:"rank"`
	Matched []string `json:"matched"` // the incident's features whose words the entry holds
}

// LoadKB reads the knowledge base shipped with braid.
func LoadKB() (*KB, error) {
	sub, err := fs.Sub(kbFiles, "kb")
	if err != nil {
		return nil, err
	}
	return OpenKB(sub, "connectors/report/kb")
}

// OpenKB reads the *.md entries of fsys and indexes them; dir names them
// in citations.
func OpenKB(fsys fs.FS, dir string) (*KB, error) {
	names, err := fs.Glob(fsys, "*.md")
	if err != nil {
		return nil, err
	}
	idx, err := bleve.NewMemOnly(kbMapping())
	if err != nil {
		return nil, fmt.Errorf("report: knowledge base index: %w", err)
	}
	kb := &KB{entries: map[string]*Entry{}, index: idx}
	batch := idx.NewBatch()
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		e, err := parseEntry(string(b))
		if err != nil {
			return nil, fmt.Errorf("report: knowledge base %s: %w", name, err)
		}
		e.File = path.Join(dir, name)
		if kb.entries[e.ID] != nil {
			return nil, fmt.Errorf("report: knowledge base %s: id %q twice", name, e.ID)
		}
		kb.entries[e.ID] = e
		if err := batch.Index(e.ID, map[string]any{"title": e.Title, "pattern": e.Pattern, "signature": e.Signature,
			"keywords": e.Keywords, "body": e.Body}); err != nil {
			return nil, err
		}
	}
	if err := idx.Batch(batch); err != nil {
		return nil, fmt.Errorf("report: knowledge base index: %w", err)
	}
	return kb, nil
}

// kbMapping: English analysis (stemming, stop words) of the text fields;
// the pattern as one keyword.
func kbMapping() mapping.IndexMapping {
	text := bleve.NewTextFieldMapping()
	text.Analyzer = en.AnalyzerName
	kw := bleve.NewTextFieldMapping()
	kw.Analyzer = keyword.Name
	doc := bleve.NewDocumentMapping()
	for _, f := range []string{"title", "signature", "keywords", "body"} {
		doc.AddFieldMappingsAt(f, text)
	}
	doc.AddFieldMappingsAt("pattern", kw)
	m := bleve.NewIndexMapping()
	m.DefaultMapping = doc
	m.DefaultAnalyzer = en.AnalyzerName
	return m
}

func parseEntry(s string) (*Entry, error) {
	head, body, ok := strings.Cut(s, "\n---\n")
	if !ok {
		return nil, errors.New(`no "---" line after the header`)
	}
	e := &Entry{Body: strings.TrimSpace(body)}
	sc := bufio.NewScanner(strings.NewReader(head))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "id":
			e.ID = v
		case "title":
			e.Title = v
		case "pattern":
			e.Pattern = v
		case "engines":
			e.Engines = v
		case "signature":
			e.Signature = v
		case "keywords":
			e.Keywords = v
		}
	}
	if e.ID == "" || e.Title == "" || e.Signature == "" {
		return nil, errors.New("id, title and signature are required")
	}
	return e, nil
}

// Entries lists the entries by id.
func (kb *KB) Entries() []*Entry {
	out := make([]*Entry, 0, len(kb.entries))
	for _, e := range kb.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Search ranks the entries against an incident's features: each feature
// is a match query over the signature (boost 3), keywords (2), title (1.5)
// and body (0.5), weighted by the feature's weight; the incident's pattern
// adds a keyword boost. Entries matching nothing are left out; at most n.
func (kb *KB) Search(pattern string, features []Feature, n int) ([]Match, error) {
	var should []query.Query
	for _, f := range features {
		for _, fb := range []struct {
			field string
			boost float64
		}{{"signature", 3}, {"keywords", 2}, {"title", 1.5}, {"body", 0.5}} {
			q := bleve.NewMatchQuery(f.Text)
			q.SetField(fb.field)
			q.SetBoost(fb.boost * f.weight())
			should = append(should, q)
		}
	}
	if pattern != "" {
		q := bleve.NewTermQuery(pattern)
		q.SetField("pattern")
		q.SetBoost(4)
		should = append(should, q)
	}
	if len(should) == 0 {
		return nil, nil
	}
	req := bleve.NewSearchRequestOptions(bleve.NewDisjunctionQuery(should...), n, 0, false)
	res, err := kb.index.Search(req)
	if err != nil {
		return nil, fmt.Errorf("report: knowledge base search: %w", err)
	}
	var out []Match
	for i, h := range res.Hits {
		e := kb.entries[h.ID]
		if e == nil {
			continue
		}
		out = append(out, Match{Entry: e, Score: h.Score, Rank: i + 1, Matched: matched(e, features)})
	}
	return out, nil
}

// matched lists the features that share a significant word with e.
func matched(e *Entry, features []Feature) []string {
	text := strings.ToLower(e.Signature + " " + e.Keywords + " " + e.Title)
	var out []string
	for _, f := range features {
		hits := 0
		for _, w := range strings.FieldsFunc(strings.ToLower(f.Text), func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
			if len(w) > 3 && strings.Contains(text, w) {
				hits++
			}
		}
		if hits >= 2 {
			out = append(out, f.Text)
		}
	}
	return out
}
