package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var htmlTemplate string

var funcs = template.FuncMap{
	"ts":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
	"ms":   func(d time.Duration) string { return fmtDur(d) },
	"svg":  func(r *Report) template.HTML { return template.HTML(r.SVG()) },
	"link": func(r *Report, path string) string { return r.ViewURL + path },
	"x":    func(f float64) string { return fmt.Sprintf("×%.2f", f) },
	"join": strings.Join,
	"md":   markdownHTML,
}

var tmpl = template.Must(template.New("report").Funcs(funcs).Parse(htmlTemplate))

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// HTML writes the report as one self-contained HTML page: inline style,
// the heatmap as inline SVG, no script and no external resource.
func (r *Report) HTML(w io.Writer) error { return tmpl.Execute(w, r) }

// FileName is the report's base file name: the incident id.
func (r *Report) FileName() string { return r.ID }

// WriteFiles writes <id>.html, <id>.md and <id>-layers.svg into dir and
// returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var h, m bytes.Buffer
	if err := r.HTML(&h); err != nil {
		return nil, err
	}
	svgName := r.FileName() + "-layers.svg"
	r.Markdown(&m, svgName)
	var paths []string
	for _, f := range []struct {
		name string
		b    []byte
	}{{r.FileName() + ".html", h.Bytes()}, {r.FileName() + ".md", m.Bytes()}, {svgName, []byte(r.SVG())}} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.b, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Markdown writes the report as Markdown; svgName is the heatmap image's
// file name beside it ("" leaves the image out).
func (r *Report) Markdown(w io.Writer, svgName string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Incident %s: %s on %s (%s)\n\n", r.ID, r.Pattern, r.GPU, r.Host)
	p("Revision %d, %s; %s – %s (UTC).", r.Revision, strings.ToLower(r.State), r.First.Format("2006-01-02 15:04:05.000"), r.Last.Format("15:04:05.000"))
	if r.ViewURL != "" {
		p(" View: %s/incident/%s", r.ViewURL, r.ID)
	}
	p("\n\n## Root cause\n\n")
	if r.Continues != "" {
		p("Continues incident `%s`, closed: requests it polluted shared their content by prefix hash after it closed, and carried its pollution on.\n\n", r.Continues)
	}
	p("| | |\n|---|---|\n")
	p("| request | `%s` |\n| trace | `%s` |\n| block | %d |\n| layer | %d |\n| GPU | `%s` (%s) |\n| time | %s |\n| record | `%s` |\n",
		r.Root.Request, r.Root.TraceID, r.Root.Block, r.Root.Layer, r.GPU, r.Host, r.Root.Time.Format("2006-01-02 15:04:05.000000"), r.Root.Origin)
	p("\n%s\n\nRule: %s\n", r.Root.Detail, r.Rule)
	p("\n## Known causes\n\nRetrieved from braid's knowledge base (full-text, BM25) with the incident's features:\n\n")
	for _, f := range r.Features {
		p("- %s _(%s)_\n", f.Text, f.Basis)
	}
	p("\n")
	for _, m := range r.Known {
		p("%d. **%s** — %s (score %.2f; `%s`)\n", m.Rank, m.Entry.Title, m.Entry.Pattern, m.Score, m.Entry.File)
		if m.Rank == 1 {
			p("\n   Engines: %s\n\n   Signature: %s\n\n", m.Entry.Engines, m.Entry.Signature)
			for _, line := range strings.Split(m.Entry.Body, "\n") {
				if line == "" {
					p("\n")
				} else {
					p("   %s\n", line)
				}
			}
			p("\n")
		}
	}
	p("\n## Blast radius\n\n%d requests polluted: %d directly, %d through the prefix cache.", len(r.Victims), r.Direct, r.Prefix)
	if len(r.Tenants) > 0 {
		p(" Tenants: %s.", strings.Join(r.Tenants, ", "))
	}
	if len(r.Models) > 0 {
		p(" Models: %s.", strings.Join(r.Models, ", "))
	}
	if r.Dropped != "" {
		p(" Note: %s.", r.Dropped)
	}
	p("\n\n| request | trace | via | from | time | tenant | model | TTFT | TPOT |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.Victims {
		p("| `%s` | `%s` | %s | `%s` | %s | %s | %s | %s | %s |\n", v.RequestID, v.TraceID, v.Via, v.From, v.Time.Format("15:04:05.000"), v.Tenant, v.Model, fmtDur(v.TTFT), fmtDur(v.TPOT))
	}
	if len(r.Impact) > 0 {
		p("\n## Latency impact\n\nVictims against the other requests of the same model and instance around the incident.\n\n| model | instance | metric | victims | victims p50 | baseline | baseline p50 | baseline p90 | ratio |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, im := range r.Impact {
			p("| %s | %s | %s | %d | %s | %d | %s | %s | %.2f |\n", im.Model, im.Instance, im.Metric, im.Victims, fmtDur(im.VictimP50), im.Baseline, fmtDur(im.BaselineP50), fmtDur(im.BaselineP90), im.Ratio())
		}
	}
	p("\n## Layers\n\n")
	if svgName != "" {
		p("![per-layer heatmap](%s)\n\n", svgName)
	}
	p("| layer | foreign/OOB writes | corrupted reads |\n|---|---|---|\n")
	for _, l := range r.Layers {
		p("| %d | %d | %d |\n", l.Layer, l.Hits, l.CorruptedReads)
	}
	p("\n## Evidence timeline\n\nEach item's input record as topic/partition/offset; %d records cited, %d re-read, %d items confirmed by re-reading.\n\n| time | kind | what | record | re-read |\n|---|---|---|---|---|\n", r.Cited, r.Rereads, r.Verified)
	for _, it := range r.Timeline {
		p("| %s | %s | %s | `%s` | %s |\n", it.Time.Format("15:04:05.000"), it.Kind, strings.ReplaceAll(it.Text, "|", "\\|"), it.Origin, it.Reread)
	}
	if len(r.Resources) > 0 {
		p("\n## Resource context\n\n| metric | resource | min | max | at end | change |\n|---|---|---|---|---|---|\n")
		for _, s := range r.Resources {
			d := "–"
			if s.Delta != nil {
				d = fmt.Sprintf("%g", *s.Delta)
			}
			p("| %s | %s | %g | %g | %g | %s |\n", s.Metric, s.Resource, s.Min, s.Max, s.AtEnd, d)
		}
	}
	p("\n## Alerts\n\n")
	if len(r.Alerts) == 0 {
		p("No alert names this incident.\n")
	}
	for _, a := range r.Alerts {
		p("- %s %s (%s)", a.Rule, a.State, a.Severity)
		if a.URL != "" {
			p(" — %s", a.URL)
		}
		p("\n")
	}
	p("\n## Reproduce\n\n```sh\n%s\n```\n\nReplays the incident's window, a minute either side, into Parquet (the KV history before it rebuilds the blocks' state).\n", r.Replay)
	if s := r.Summary; s != nil {
		p("\n## Generated summary\n\n")
		if s.Error != "" {
			p("No summary: %s.\n", s.Error)
		} else {
			p("> **Generated by %s; check it against the report above.**\n>\n", s.Model)
			for _, line := range strings.Split(s.Text, "\n") {
				p("> %s\n", line)
			}
		}
		p("\n<details><summary>Prompt</summary>\n\n```\n%s\n```\n\n</details>\n", s.Prompt)
	}
}

// SVG draws the per-layer heatmap: the GPU's mean decode time per layer ×
// time around the incident, and beside it the incident's foreign or
// out-of-bounds writes and corrupted reads per layer.
func (r *Report) SVG() string {
	layers := map[int64]int{}
	var order []int64
	add := func(l int64) {
		if _, ok := layers[l]; !ok {
			layers[l] = len(order)
			order = append(order, l)
		}
	}
	for _, l := range r.Heatmap.Layers {
		add(l)
	}
	for _, l := range r.Layers {
		add(int64(l.Layer))
	}
	if len(order) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" width="320" height="40"><text x="8" y="24" font-family="sans-serif" font-size="13">no layer data</text></svg>`
	}
	slices.Sort(order)
	for i, l := range order {
		layers[l] = i
	}
	const cell, left, top = 14, 64, 28
	nt := len(r.Heatmap.Times)
	cw := 6
	if nt > 0 && nt < 60 {
		cw = max(6, 360/nt)
	}
	hmW := nt * cw
	gap := 24
	colW := 56
	width := left + hmW + gap + 2*colW + 16
	height := top + len(order)*cell + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`)
	if nt > 0 {
		fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">decode ms per layer × time (GPU)</text>`, left)
	}
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">incident</text>`, left+hmW+gap)
	fmt.Fprintf(&b, `<text x="%d" y="%d">writes</text><text x="%d" y="%d">reads</text>`, left+hmW+gap, top-4, left+hmW+gap+colW, top-4)
	for _, l := range order {
		y := top + layers[l]*cell
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">layer %d</text>`, left-6, y+cell-3, l)
	}
	maxV := 0.0
	for _, c := range r.Heatmap.DecodeMs {
		maxV = math.Max(maxV, c[2])
	}
	for _, c := range r.Heatmap.DecodeMs {
		ti, yi := int(c[0]), int(c[1])
		if yi < 0 || yi >= len(r.Heatmap.Layers) || ti < 0 || ti >= nt || maxV <= 0 {
			continue
		}
		li := r.Heatmap.Layers[yi]
		row := layers[li]
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>layer %d: %.2f ms</title></rect>`,
			left+ti*cw, top+row*cell, cw, cell-1, ramp(c[2]/maxV, false), li, c[2])
	}
	var maxH, maxR uint32
	for _, l := range r.Layers {
		maxH, maxR = max(maxH, l.Hits), max(maxR, l.CorruptedReads)
	}
	for _, l := range r.Layers {
		y := top + layers[int64(l.Layer)]*cell
		for i, v := range []uint32{l.Hits, l.CorruptedReads} {
			m := maxH
			if i == 1 {
				m = maxR
			}
			f := 0.0
			if m > 0 {
				f = float64(v) / float64(m)
			}
			x := left + hmW + gap + i*colW
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/><text x="%d" y="%d" text-anchor="middle">%d</text>`,
				x, y, colW-4, cell-1, ramp(f, true), x+(colW-4)/2, y+cell-3, v)
		}
	}
	if nt > 0 {
		first := time.UnixMilli(r.Heatmap.Times[0]).UTC().Format("15:04:05")
		last := time.UnixMilli(r.Heatmap.Times[nt-1]).UTC().Format("15:04:05")
		y := top + len(order)*cell + 14
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s UTC</text>`, left, y, first, left+hmW, y, last)
		if r.First.UnixMilli() >= r.Heatmap.Times[0] {
			x := left + int(float64(r.First.UnixMilli()-r.Heatmap.Times[0])/float64(max(1, r.Heatmap.BucketMs))*float64(cw))
			if x <= left+hmW {
				fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c00" stroke-width="2"/><text x="%d" y="%d" fill="#c00">incident</text>`,
					x, top-2, x, top+len(order)*cell, x+3, y+12)
			}
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// ramp maps 0..1 to a colour: blue-to-yellow for the heatmap, white-to-red
// for the incident's counts.
func ramp(f float64, red bool) string {
	f = math.Max(0, math.Min(1, f))
	if red {
		if f == 0 {
			return "#f4f4f4"
		}
		g := int(230 - 190*f)
		return fmt.Sprintf("rgb(230,%d,%d)", g, g)
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", int(40+215*f), int(60+170*f), int(160-120*f))
}

// markdownHTML renders a knowledge-base body (headings, bullets,
// paragraphs, `code`) as HTML, escaping everything else.
func markdownHTML(s string) template.HTML {
	var b strings.Builder
	inList := false
	para := []string{}
	flush := func() {
		if len(para) > 0 {
			b.WriteString("<p>" + inline(strings.Join(para, " ")) + "</p>")
			para = para[:0]
		}
	}
	closeList := func() {
		if inList {
			b.WriteString("</ul>")
			inList = false
		}
	}
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
			flush()
			closeList()
		case strings.HasPrefix(t, "## "):
			flush()
			closeList()
			b.WriteString("<h4>" + inline(t[3:]) + "</h4>")
		case strings.HasPrefix(t, "- "):
			flush()
			if !inList {
				b.WriteString("<ul>")
				inList = true
			}
			b.WriteString("<li>" + inline(t[2:]))
		case inList:
			b.WriteString(" " + inline(t))
		default:
			para = append(para, t)
		}
	}
	flush()
	closeList()
	return template.HTML(b.String())
}

func inline(s string) string {
	parts := strings.Split(s, "`")
	var b strings.Builder
	for i, p := range parts {
		e := template.HTMLEscapeString(p)
		if i%2 == 1 {
			b.WriteString("<code>" + e + "</code>")
		} else {
			b.WriteString(e)
		}
	}
	return b.String()
}
