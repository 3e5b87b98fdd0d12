package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/view"
	"github.com/braidlabs/braid/operators/braidpb"
)

const graphUsage = `braid graph renders one KV-cache pollution incident.

  braid graph --in FILE [--incident ID] [--format F] [--out FILE]
  braid graph --brokers HOST:PORT --incident ID [--topic T] [--format F]

--in reads an Incident as protobuf, as protojson, or as lines of protojson
(the last revision of --incident, or of the only incident, wins). Without
--in the incident is read from braid.incidents (partition of its key, from
the beginning, latest revision). Formats: dot, mermaid, json, svg, png
(svg and png run Graphviz's dot).
`

// cmdGraph runs "braid graph".
func cmdGraph(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("graph", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), graphUsage); fs.PrintDefaults() }
	in := fs.String("in", "", "file holding the incident (protobuf, protojson or JSON lines)")
	brokers := fs.String("brokers", "127.0.0.1:19092", "comma-separated brokers, when --in is not given")
	topic := fs.String("topic", "braid.incidents", "topic of Incident records")
	id := fs.String("incident", "", "incident id (required with --brokers; picks one incident of --in)")
	format := fs.String("format", "dot", "dot, mermaid, json, svg or png")
	out := fs.String("out", "", "write here instead of stdout")
	timeout := fs.Duration("timeout", 30*time.Second, "give up reading the topic after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *format {
	case "dot", "mermaid", "json", "svg", "png":
	default:
		return fmt.Errorf("graph: --format %q: want dot, mermaid, json, svg or png", *format)
	}
	var inc *braidpb.Incident
	var err error
	if *in != "" {
		b, rerr := os.ReadFile(*in)
		if rerr != nil {
			return fmt.Errorf("graph: %w", rerr)
		}
		inc, err = parseIncidents(b, *id)
	} else {
		if *id == "" {
			return errors.New("graph: give --in FILE or --incident ID (read from --brokers)")
		}
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		inc, err = fetchIncident(cctx, strings.Split(*brokers, ","), *topic, *id)
	}
	if err != nil {
		return err
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("graph: %w", err)
		}
		defer f.Close()
		w = f
	}
	return renderIncident(w, inc, *format)
}

// renderIncident writes inc in format.
func renderIncident(w io.Writer, inc *braidpb.Incident, format string) error {
	switch format {
	case "dot":
		_, err := io.WriteString(w, incidentDOT(inc))
		return err
	case "mermaid":
		_, err := io.WriteString(w, incidentMermaid(inc))
		return err
	case "json":
		b, err := json.MarshalIndent(view.IncidentGraph(inc), "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case "svg", "png":
		dot, err := exec.LookPath("dot")
		if err != nil {
			return fmt.Errorf("graph: --format %s needs Graphviz's dot in PATH (Debian: apt-get install graphviz); or use --format dot and render it elsewhere", format)
		}
		cmd := exec.Command(dot, "-T"+format)
		cmd.Stdin = strings.NewReader(incidentDOT(inc))
		cmd.Stdout = w
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("graph: dot: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	return fmt.Errorf("graph: unknown format %q", format)
}

// parseIncidents reads an incident from protobuf, protojson or lines of
// protojson; with id, that incident's latest revision; else the only one.
func parseIncidents(b []byte, id string) (*incident, error) {
	var all []*braidpb.Incident
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		one := &braidpb.Incident{}
		if err := protojson.Unmarshal(trimmed, one); err == nil {
			all = append(all, one)
		} else {
			sc := bufio.NewScanner(bytes.NewReader(trimmed))
			sc.Buffer(nil, 64<<20)
			for n := 1; sc.Scan(); n++ {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				inc := &braidpb.Incident{}
				if err := protojson.Unmarshal(line, inc); err != nil {
					return nil, fmt.Errorf("graph: line %d is not an Incident: %v", n, err)
				}
				all = append(all, inc)
			}
		}
	} else {
		one := &braidpb.Incident{}
		if err := proto.Unmarshal(b, one); err != nil || one.Id == "" {
			return nil, errors.New("graph: input is neither an Incident (protobuf) nor protojson")
		}
		all = append(all, one)
	}
	var best *braidpb.Incident
	for _, inc := range all {
		if id != "" && inc.Id != id {
			continue
		}
		if id == "" && best != nil && best.Id != inc.Id {
			return nil, errors.New("graph: the input holds several incidents; pick one with --incident")
		}
		if best == nil || inc.Revision >= best.Revision {
			best = inc
		}
	}
	if best == nil {
		return nil, fmt.Errorf("graph: no incident %q in the input", id)
	}
	return best, nil
}

type incident = braidpb.Incident

// fetchIncident reads the latest revision of incident id from topic: the
// partition its key hashes to, from the beginning to the end offsets seen
// at the start.
func fetchIncident(ctx context.Context, brokers []string, topic, id string) (*braidpb.Incident, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("graph: end offsets of %s: %w", topic, err)
	}
	n := int32(0)
	ends.Each(func(o kadm.ListedOffset) { n = max(n, o.Partition+1) })
	if n == 0 {
		return nil, fmt.Errorf("graph: topic %s not found", topic)
	}
	p := otlp.HashPartition([]byte(id), n)
	end, ok := ends.Lookup(topic, p)
	if !ok || end.Err != nil {
		return nil, fmt.Errorf("graph: end offset of %s/%d unknown", topic, p)
	}
	if end.Offset == 0 {
		return nil, fmt.Errorf("graph: incident %s not found (%s/%d is empty)", id, topic, p)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}})
	var best *braidpb.Incident
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("graph: reading %s/%d: %w", topic, p, err)
		}
		done := false
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("graph: reading %s/%d: %w", topic, p, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end.Offset {
				done = true
			}
			if string(r.Key) != id {
				return
			}
			inc := &braidpb.Incident{}
			if err := proto.Unmarshal(r.Value, inc); err != nil {
				if protojson.Unmarshal(r.Value, inc) != nil {
					return
				}
			}
			if best == nil || inc.Revision >= best.Revision {
				best = inc
			}
		})
		if done {
			break
		}
	}
	if best == nil {
		return nil, fmt.Errorf("graph: incident %s not found in %s/%d", id, topic, p)
	}
	return best, nil
}

// graphNode is a node of the rendered graph.
func dotQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

var edgeColor = map[string]string{"dirty_residue": "darkorange", "mixed_write": "red", "layer_oob": "purple", "propagated": "steelblue"}

// incidentDOT renders inc for Graphviz.
func incidentDOT(inc *braidpb.Incident) string {
	v := view.IncidentGraph(inc)
	var b strings.Builder
	b.WriteString("digraph incident {\n  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n")
	title := fmt.Sprintf("%s rev %d (%s)\n%s on %s / %s\nroot: %s", v.ID, v.Revision, strings.ToLower(v.State), v.Pattern, v.Host, v.GPU, inc.GetRoot().GetDetail())
	fmt.Fprintf(&b, "  labelloc=t;\n  label=%s;\n", dotQuote(title))
	for _, n := range v.Nodes {
		attrs := []string{"label=" + dotQuote(n.Label)}
		switch n.Kind {
		case "request":
			attrs = append(attrs, "shape=ellipse")
			if n.Polluted {
				attrs = append(attrs, "style=filled", "fillcolor=\"#f8c4c4\"")
				if n.TraceID != "" {
					attrs[0] = "label=" + dotQuote(n.Label+"\ntrace "+n.TraceID[:8]+"…")
				}
			}
		case "block":
			attrs = append(attrs, "shape=box")
		case "layer":
			attrs = append(attrs, "shape=hexagon", "style=filled", "fillcolor=\"#e4d4f4\"")
		}
		if n.Root {
			attrs = append(attrs, "penwidth=3", "peripheries=2")
		}
		fmt.Fprintf(&b, "  %s [%s];\n", dotQuote(n.ID), strings.Join(attrs, ", "))
	}
	for _, e := range v.Edges {
		label := e.Kind
		if e.Layer >= 0 {
			label += fmt.Sprintf(" L%d", e.Layer)
		}
		fmt.Fprintf(&b, "  %s -> %s [label=%s, color=%s];\n", dotQuote(e.Source), dotQuote(e.Target), dotQuote(label), edgeColor[e.Kind])
	}
	if len(v.Layers) > 0 {
		var t strings.Builder
		t.WriteString("<<table border=\"0\" cellborder=\"1\" cellspacing=\"0\"><tr><td><b>layer</b></td><td><b>hits</b></td><td><b>corrupted reads</b></td></tr>")
		for _, l := range v.Layers {
			fmt.Fprintf(&t, "<tr><td>%d</td><td>%d</td><td>%d</td></tr>", l.Layer, l.Hits, l.CorruptedReads)
		}
		t.WriteString("</table>>")
		fmt.Fprintf(&b, "  \"layers\" [shape=plaintext, label=%s];\n", t.String())
	}
	b.WriteString("}\n")
	return b.String()
}

// incidentMermaid renders inc as a Mermaid flowchart.
func incidentMermaid(inc *braidpb.Incident) string {
	v := view.IncidentGraph(inc)
	var b strings.Builder
	fmt.Fprintf(&b, "---\ntitle: %s rev %d %s — %s on %s\n---\nflowchart LR\n", v.ID, v.Revision, strings.ToLower(v.State), v.Pattern, v.GPU)
	ids := map[string]string{}
	esc := func(s string) string { return strings.NewReplacer(`"`, "#quot;", "\n", "<br/>").Replace(s) }
	for i, n := range v.Nodes {
		id := fmt.Sprintf("n%d", i)
		ids[n.ID] = id
		label := esc(n.Label)
		if n.Polluted && n.TraceID != "" {
			label += "<br/>trace " + n.TraceID[:8] + "…"
		}
		switch n.Kind {
		case "request":
			fmt.Fprintf(&b, "  %s([\"%s\"])\n", id, label)
		case "layer":
			fmt.Fprintf(&b, "  %s{{\"%s\"}}\n", id, label)
		default:
			fmt.Fprintf(&b, "  %s[\"%s\"]\n", id, label)
		}
	}
	for _, e := range v.Edges {
		label := e.Kind
		if e.Layer >= 0 {
			label += fmt.Sprintf(" L%d", e.Layer)
		}
		fmt.Fprintf(&b, "  %s -->|%s| %s\n", ids[e.Source], label, ids[e.Target])
	}
	b.WriteString("  classDef polluted fill:#f8c4c4,stroke:#a00\n  classDef root stroke-width:4px,stroke:#000\n  classDef layer fill:#e4d4f4\n")
	for _, n := range v.Nodes {
		if n.Polluted {
			fmt.Fprintf(&b, "  class %s polluted\n", ids[n.ID])
		}
		if n.Kind == "layer" {
			fmt.Fprintf(&b, "  class %s layer\n", ids[n.ID])
		}
		if n.Root {
			fmt.Fprintf(&b, "  class %s root\n", ids[n.ID])
		}
	}
	return b.String()
}
