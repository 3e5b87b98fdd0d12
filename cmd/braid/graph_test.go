package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/braidlabs/braid/connectors/otlp"
	"github.com/braidlabs/braid/connectors/view"
	"github.com/braidlabs/braid/operators/braidpb"
)

func graphFixture() *braidpb.Incident {
	k := braidpb.PollutionKind_POLLUTION_KIND_DIRTY_RESIDUE
	return &braidpb.Incident{
		Id: "inc-0011223344556677", Revision: 3, State: braidpb.IncidentState_INCIDENT_STATE_CLOSED, Host: "node-a", Gpu: "node-a/gpu0",
		Pattern: k,
		Root:    &braidpb.RootCause{Node: "req:node-a/gpu0/cmpl-1", Kind: k, RequestId: "cmpl-1", Block: 7, Layer: 2, TimeUnixNano: 1e18, Detail: `block 7 handed over "dirty"`},
		Polluted: []*braidpb.PollutedRequest{
			{RequestId: "cmpl-2", TraceId: bytes.Repeat([]byte{0xab}, 16), Via: braidpb.PollutionVia_POLLUTION_VIA_DIRECT},
			{RequestId: "cmpl-3", Via: braidpb.PollutionVia_POLLUTION_VIA_PROPAGATED},
		},
		Edges: []*braidpb.PollutionEdge{
			{Source: "req:node-a/gpu0/cmpl-1", Target: "blk:node-a/gpu0/7", Kind: k, Block: 7, Layer: 2, TimeUnixNano: 1e18 + 5},
			{Source: "blk:node-a/gpu0/7", Target: "req:node-a/gpu0/cmpl-2", Kind: k, Block: 7, Layer: 2, TimeUnixNano: 1e18 + 5},
			{Source: "req:node-a/gpu0/cmpl-2", Target: "blk:node-a/gpu0/9", Kind: braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED, Block: 9, Layer: -1},
			{Source: "blk:node-a/gpu0/9", Target: "req:node-a/gpu0/cmpl-3", Kind: braidpb.PollutionKind_POLLUTION_KIND_PROPAGATED, Block: 9, Layer: -1},
			{Source: "req:node-a/gpu0/cmpl-4", Target: "layer:node-a/gpu0/3", Kind: braidpb.PollutionKind_POLLUTION_KIND_LAYER_OOB, Block: -1, Layer: 3},
		},
		Layers:   []*braidpb.LayerCount{{Layer: 3, Hits: 1}, {Layer: 2, CorruptedReads: 4}},
		Evidence: []*braidpb.Evidence{{Kind: "xid", Text: "NVRM: Xid (PCI:0000:3b:00): 13"}},
	}
}

func TestGraphDOT(t *testing.T) {
	dot := incidentDOT(graphFixture())
	for _, want := range []string{
		"digraph incident {",
		`"req:node-a/gpu0/cmpl-1" [label="cmpl-1", shape=ellipse, penwidth=3, peripheries=2];`,
		`"req:node-a/gpu0/cmpl-2" [label="cmpl-2\ntrace abababab…", shape=ellipse, style=filled`,
		`"blk:node-a/gpu0/7" [label="block 7", shape=box];`,
		`"layer:node-a/gpu0/3" [label="layer 3", shape=hexagon`,
		`"req:node-a/gpu0/cmpl-1" -> "blk:node-a/gpu0/7" [label="dirty_residue L2", color=darkorange];`,
		`"blk:node-a/gpu0/9" -> "req:node-a/gpu0/cmpl-3" [label="propagated", color=steelblue];`,
		`root: block 7 handed over \"dirty\"`,
		"<tr><td>2</td><td>0</td><td>4</td></tr><tr><td>3</td><td>1</td><td>0</td></tr>",
	} {
		if !strings.Contains(dot, want) {
			t.Errorf("DOT lacks %s\n%s", want, dot)
		}
	}
	if strings.Count(dot, " -> ") != 5 {
		t.Errorf("DOT has %d edges", strings.Count(dot, " -> "))
	}
}

func TestGraphMermaid(t *testing.T) {
	m := incidentMermaid(graphFixture())
	for _, want := range []string{
		"flowchart LR",
		`n0(["cmpl-1"])`,
		`n1["block 7"]`,
		`n2(["cmpl-2<br/>trace abababab…"])`,
		"n0 -->|dirty_residue L2| n1",
		"n1 -->|dirty_residue L2| n2",
		`{{"layer 3"}}`,
		"class n0 root",
		"class n2 polluted",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("Mermaid lacks %s\n%s", want, m)
		}
	}
}

func TestGraphJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := renderIncident(&buf, graphFixture(), "json"); err != nil {
		t.Fatal(err)
	}
	var v view.Graph
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.ID != "inc-0011223344556677" || v.State != "CLOSED" || v.Pattern != "dirty_residue" || len(v.Nodes) != 7 || len(v.Edges) != 5 {
		t.Fatalf("%+v", v)
	}
	if !v.Nodes[0].Root || v.Nodes[0].Label != "cmpl-1" || v.Nodes[2].Via != "direct" || v.Nodes[2].TraceID != strings.Repeat("ab", 16) {
		t.Fatalf("nodes %+v", v.Nodes)
	}
	if v.Layers[0].Layer != 2 || v.Root["request_id"] != "cmpl-1" {
		t.Fatalf("layers %v root %v", v.Layers, v.Root)
	}
}

func TestGraphCommandReadsFiles(t *testing.T) {
	dir := t.TempDir()
	inc := graphFixture()
	bin, _ := proto.Marshal(inc)
	older := proto.Clone(inc).(*braidpb.Incident)
	older.Revision = 1
	other := proto.Clone(inc).(*braidpb.Incident)
	other.Id = "inc-ffff"
	var lines []byte
	for _, m := range []*braidpb.Incident{older, inc, other} {
		b, _ := protojson.Marshal(m)
		lines = append(append(lines, b...), '\n')
	}
	os.WriteFile(filepath.Join(dir, "inc.bin"), bin, 0o644)
	os.WriteFile(filepath.Join(dir, "incs.jsonl"), lines, 0o644)

	var out bytes.Buffer
	if err := cmdGraph(context.Background(), []string{"--in", filepath.Join(dir, "inc.bin"), "--format", "mermaid"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "flowchart LR") {
		t.Fatal(out.String())
	}
	out.Reset()
	if err := cmdGraph(context.Background(), []string{"--in", filepath.Join(dir, "incs.jsonl"), "--incident", inc.Id, "--format", "json"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"revision": 3`) {
		t.Fatalf("not the latest revision: %s", out.String())
	}
	err := cmdGraph(context.Background(), []string{"--in", filepath.Join(dir, "incs.jsonl")}, &out)
	if err == nil || !strings.Contains(err.Error(), "--incident") {
		t.Fatalf("several incidents without --incident: %v", err)
	}
	if err := cmdGraph(context.Background(), []string{"--in", filepath.Join(dir, "inc.bin"), "--format", "gif"}, &out); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestGraphSVGWithoutGraphviz(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := renderIncident(&bytes.Buffer{}, graphFixture(), "svg")
	if err == nil || !strings.Contains(err.Error(), "needs Graphviz's dot") {
		t.Fatalf("err %v", err)
	}
}

// TestGraphCommandReadsTopic: with --brokers, braid graph reads the
// incidents topic and renders the latest revision of the incident asked
// for (kfake stands in for Kafka here; the job's integration tests cover
// the real broker's incidents topic).
func TestGraphCommandReadsTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "braid.incidents"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	// As the kvgraph stage writes them: partition = hash of the id.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("braid.incidents"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	inc := graphFixture()
	older := proto.Clone(inc).(*braidpb.Incident)
	older.Revision = 1
	other := proto.Clone(inc).(*braidpb.Incident)
	other.Id, other.Revision = "inc-ffff", 9
	for _, m := range []*braidpb.Incident{older, inc, other} {
		v, _ := proto.Marshal(m)
		r := &kgo.Record{Key: []byte(m.Id), Value: v, Partition: otlp.HashPartition([]byte(m.Id), 3)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := cmdGraph(context.Background(), []string{"--brokers", addr, "--incident", inc.Id, "--format", "json", "--timeout", "30s"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"revision": 3`) || !strings.Contains(out.String(), inc.Id) {
		t.Fatalf("not the latest revision of %s: %s", inc.Id, out.String())
	}
	if err := cmdGraph(context.Background(), []string{"--brokers", addr, "--incident", "inc-none", "--timeout", "3s"}, &out); err == nil {
		t.Fatal("an incident that is not in the topic was rendered")
	}
}
