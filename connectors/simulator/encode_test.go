package simulator

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type fixtureMeta struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	KeyHex    *string `json:"key_hex"`
	KeyText   *string `json:"key_text"`
}

type fixture struct {
	name     string
	meta     fixtureMeta
	signal   string
	encoding string
	value    []byte
}

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join("..", "otlp", "testdata", "collector", "*", "*.meta.json"))
	if err != nil || len(metas) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var out []fixture
	for _, mp := range metas {
		var f fixture
		f.name = strings.TrimSuffix(mp, ".meta.json")
		raw, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &f.meta); err != nil {
			t.Fatal(err)
		}
		if f.value, err = os.ReadFile(f.name + ".value"); err != nil {
			t.Fatal(err)
		}
		f.signal = strings.TrimPrefix(f.meta.Topic, "otlp_")
		f.encoding = EncodingProto
		if strings.Contains(f.name, "json") {
			f.encoding = EncodingJSON
		}
		out = append(out, f)
	}
	return out
}

// TestEncodersMatchCollector decodes every real Collector record and
// re-encodes it with the simulator's writers: the bytes must be identical.
func TestEncodersMatchCollector(t *testing.T) {
	for _, f := range loadFixtures(t) {
		m, err := decode(f.signal, f.encoding, f.value)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		var got []byte
		if f.encoding == EncodingJSON {
			got = marshalJSON(m)
		} else {
			got = marshalProto(m)
		}
		if !bytes.Equal(got, f.value) {
			i := 0
			for i < len(got) && i < len(f.value) && got[i] == f.value[i] {
				i++
			}
			lo := max(0, i-60)
			t.Errorf("%s: re-encoded record differs at byte %d of %d/%d\n got: %q\nwant: %q", f.name, i, len(got), len(f.value),
				got[lo:min(len(got), i+60)], f.value[lo:min(len(f.value), i+60)])
		}
	}
}

// node is a JSON value with object keys in document order.
type node struct {
	kind  string // object, array, string, number, bool, null
	keys  []string
	vals  []*node // object values, parallel to keys; array elements
	str   string
	isNum bool
}

func parseJSON(t *testing.T, js []byte) *node {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var parse func() *node
	parse = func() *node {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		switch x := tok.(type) {
		case json.Delim:
			n := &node{kind: "object"}
			if x == '[' {
				n.kind = "array"
			}
			for dec.More() {
				if n.kind == "object" {
					k, err := dec.Token()
					if err != nil {
						t.Fatal(err)
					}
					n.keys = append(n.keys, k.(string))
				}
				n.vals = append(n.vals, parse())
			}
			if _, err := dec.Token(); err != nil {
				t.Fatal(err)
			}
			return n
		case string:
			return &node{kind: "string", str: x}
		case json.Number:
			return &node{kind: "number", str: x.String()}
		case bool:
			return &node{kind: "bool"}
		}
		return &node{kind: "null"}
	}
	return parse()
}

var (
	hex32  = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hex16  = regexp.MustCompile(`^[0-9a-f]{16}$`)
	digits = regexp.MustCompile(`^-?[0-9]+$`)
)

// kindOf names how the value of key is written: the representation, not the
// content.
func kindOf(key string, n *node) string {
	switch n.kind {
	case "array":
		if len(n.vals) > 0 {
			return "array of " + kindOf(key, n.vals[0])
		}
	case "string":
		switch key {
		case "traceId":
			if hex32.MatchString(n.str) {
				return "hex32"
			}
			return "bad id " + n.str
		case "spanId", "parentSpanId":
			if hex16.MatchString(n.str) {
				return "hex16"
			}
			return "bad id " + n.str
		}
		if digits.MatchString(n.str) && (strings.HasSuffix(key, "UnixNano") || slices.Contains([]string{"asInt", "count", "intValue", "bucketCounts", "zeroCount"}, key)) {
			return "decimal string"
		}
	}
	return n.kind
}

// shape collects, per object path (array indices dropped), the kind of each
// key's value and the ordered pairs of keys met in one object.
type shape struct {
	kinds  map[string]map[string]string
	before map[string]map[[2]string]bool
}

func (sh *shape) add(path string, n *node) {
	switch n.kind {
	case "array":
		for _, v := range n.vals {
			sh.add(path, v)
		}
	case "object":
		if sh.kinds[path] == nil {
			sh.kinds[path] = map[string]string{}
			sh.before[path] = map[[2]string]bool{}
		}
		for i, k := range n.keys {
			sh.kinds[path][k] = kindOf(k, n.vals[i])
			for _, later := range n.keys[i+1:] {
				sh.before[path][[2]string{k, later}] = true
			}
			sh.add(path+"."+k, n.vals[i])
		}
	}
}

func newShape() *shape {
	return &shape{kinds: map[string]map[string]string{}, before: map[string]map[[2]string]bool{}}
}

// TestJSONShapeMatchesCollector compares the simulator's otlp_json messages
// with real Collector records: wherever both have the same key of the same
// object, the value is written the same way (hex ids, decimal-string 64-bit
// integers, numeric enums, objects), and keys come in the same order.
func TestJSONShapeMatchesCollector(t *testing.T) {
	ref := map[string]*shape{}
	for _, f := range loadFixtures(t) {
		if f.encoding != EncodingJSON {
			continue
		}
		if ref[f.signal] == nil {
			ref[f.signal] = newShape()
		}
		ref[f.signal].add("", parseJSON(t, f.value))
	}
	s, err := New(Config{Seed: 4, Encoding: EncodingJSON, Keying: Unkeyed})
	if err != nil {
		t.Fatal(err)
	}
	compared := map[string]int{}
	for i := 0; i < 5; i++ {
		for _, m := range s.Next() {
			signal := strings.TrimPrefix(m.Topic, "otlp_")
			var buf bytes.Buffer
			if err := json.Compact(&buf, m.Value); err != nil || !bytes.Equal(buf.Bytes(), m.Value) {
				t.Fatalf("%s: not compact JSON (%v)", m.Topic, err)
			}
			got := newShape()
			got.add("", parseJSON(t, m.Value))
			r := ref[signal]
			for path, kinds := range got.kinds {
				for k, kind := range kinds {
					want, ok := r.kinds[path][k]
					if !ok {
						continue
					}
					compared[signal]++
					if kind != want {
						t.Errorf("%s %s.%s: written as %s, Collector writes %s", signal, path, k, kind, want)
					}
				}
				for pair := range got.before[path] {
					if r.before[path][[2]string{pair[1], pair[0]}] {
						t.Errorf("%s %s: %s before %s, Collector writes them the other way", signal, path, pair[0], pair[1])
					}
				}
			}
		}
	}
	for _, sig := range []string{"spans", "logs", "metrics"} {
		if compared[sig] < 20 {
			t.Errorf("%s: only %d keys compared", sig, compared[sig])
		}
	}
	// What the shape comparison cannot see.
	for _, m := range s.Next() {
		for _, bad := range []string{`"kind":"`, `"severityNumber":"`, `"aggregationTemporality":"`, `"traceId":""`, `"spanId":""`, `=="`, `": `, `, "`} {
			if bytes.Contains(m.Value, []byte(bad)) {
				t.Errorf("%s: contains %s", m.Topic, bad)
			}
		}
		for _, want := range []string{`"status":{`, `"scope":{`} {
			if m.Topic == "otlp_spans" && !bytes.Contains(m.Value, []byte(want)) {
				t.Errorf("%s: lacks %s", m.Topic, want)
			}
		}
	}
}
