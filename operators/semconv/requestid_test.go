package semconv

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"gopkg.in/yaml.v3"
)

func TestFromLog(t *testing.T) {
	ids := DefaultRequestIDs()
	cases := []struct {
		name  string
		body  string
		attrs []*commonpb.KeyValue
		want  string
	}{
		// vLLM.
		{"vllm added", "INFO 11-30 02:41:07 [async_llm.py:270] Added request cmpl-8f2d6c1e4b9a4e0f8d3c2b1a09f8e7d6-0.", nil, "cmpl-8f2d6c1e4b9a4e0f8d3c2b1a09f8e7d6-0"},
		{"vllm chat", "INFO 11-30 02:41:09 [loggers.py:123] Finished request chatcmpl-5c3b2a1908f74e6d9c8b7a6f5e4d3c2b", nil, "chatcmpl-5c3b2a1908f74e6d9c8b7a6f5e4d3c2b"},
		{"vllm received", "INFO:     Received request chatcmpl-abc123: prompt: 'Hello', params: SamplingParams(n=1, temperature=0.7)", nil, "chatcmpl-abc123"},
		{"vllm aborted", "Aborted request cmpl-77aa.", nil, "cmpl-77aa"},
		{"vllm attribute wins", "Added request cmpl-body", []*commonpb.KeyValue{str("gen_ai.request.id", "cmpl-attr")}, "cmpl-attr"},
		// SGLang.
		{"sglang receive", "[2026-11-30 02:41:07 TP0] Receive: obj=GenerateReqInput(rid='3f2a9c0b7e1d4c5a8b6f0e2d1c3b4a59', text='Hi', sampling_params={'max_new_tokens': 64})", nil, "3f2a9c0b7e1d4c5a8b6f0e2d1c3b4a59"},
		{"sglang finish dq", `Finish: obj=GenerateReqInput(rid="9e8d7c6b"), out={'meta_info': {'id': '9e8d7c6b'}}`, nil, "9e8d7c6b"},
		{"sglang bare", "[2026-11-30 02:41:07 TP0] Abort request rid=4d5e6f70", nil, "4d5e6f70"},
		{"sglang grid is no rid", "allocated grid=12 blocks", nil, ""},
		{"sglang attribute", "", []*commonpb.KeyValue{str("rid", "3f2a")}, "3f2a"},
		// llama.cpp.
		{"llama launch", "slot launch_slot_: id  0 | task 42 | processing task", nil, "task-42"},
		{"llama release", "slot      release: id  1 | task 1337 | stop processing: n_past = 24, truncated = 0", nil, "task-1337"},
		{"llama json", `{"tid":"1408","timestamp":1732934467,"level":"INFO","function":"launch_slot_with_task","line":1010,"msg":"slot is processing task","id_slot":0,"id_task":7}`, nil, "task-7"},
		{"llama no task", "update_slots: all slots are idle", nil, ""},
		{"llama attribute int", "", []*commonpb.KeyValue{i64("task_id", 42)}, "task-42"},
		{"llama attribute already normal", "", []*commonpb.KeyValue{str("id_task", "task-9")}, "task-9"},
		// Triton.
		{"triton verbose", `I1130 02:41:07.123456 1 infer_request.cc:131] "[request id: 17] Setting state from INITIALIZED to PENDING"`, nil, "17"},
		{"triton unknown id", `I1130 02:41:07.123456 1 infer_request.cc:131] "[request id: <id_unknown>] Setting state from INITIALIZED to PENDING"`, nil, ""},
		{"triton kv", "model tensorrt_llm: request_id=req-0042 completed", nil, "req-0042"},
		{"triton attribute int", "", []*commonpb.KeyValue{i64("request_id", 17)}, "17"},
		{"triton attribute", "", []*commonpb.KeyValue{str("triton.request_id", "abc")}, "abc"},
		// Priority among attributes: gen_ai.request.id before rid.
		{"attribute priority", "", []*commonpb.KeyValue{str("rid", "sg"), str("gen_ai.request.id", "cmpl-1")}, "cmpl-1"},
		// Empty and bool attribute values do not count.
		{"empty attribute", "Added request cmpl-b", []*commonpb.KeyValue{str("gen_ai.request.id", "")}, "cmpl-b"},
		{"no id", "GPU KV cache size: 423,568 tokens", nil, ""},
		{"nothing", "", nil, ""},
	}
	for _, c := range cases {
		msg := logRecord(t, 1, c.body, c.attrs...)
		got, ok := ids.FromLog(msg)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: FromLog = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
}

func TestFromLogNonStringBody(t *testing.T) {
	l := marshalLogWithBody(t, &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 42}})
	if id, ok := DefaultRequestIDs().FromLog(l); ok {
		t.Errorf("int body: %q", id)
	}
}

func TestFromSpan(t *testing.T) {
	ids := DefaultRequestIDs()
	cases := []struct {
		name  string
		span  string
		attrs []*commonpb.KeyValue
		want  string
	}{
		{"vllm", "llm_request", []*commonpb.KeyValue{str("gen_ai.request.id", "chatcmpl-5c3b"), str("gen_ai.response.model", "m")}, "chatcmpl-5c3b"},
		{"sglang attribute", "Scheduler Req 3f2a", []*commonpb.KeyValue{str("rid", "3f2a9c")}, "3f2a9c"},
		{"sglang name", "Scheduler Req 3f2a9c0b", []*commonpb.KeyValue{i64("tp_rank", 0)}, "3f2a9c0b"},
		{"triton", "compute", []*commonpb.KeyValue{i64("triton.request_id", 5)}, "5"},
		{"llama", "completion", []*commonpb.KeyValue{i64("task_id", 42)}, "task-42"},
		{"none", "llm.decode.layer.3", []*commonpb.KeyValue{i64("layer_id", 3)}, ""},
	}
	for _, c := range cases {
		got, ok := ids.FromSpan(span(t, c.span, 1, 2, c.attrs))
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: FromSpan = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
}

func TestFromNoAlloc(t *testing.T) {
	ids := DefaultRequestIDs()
	l := logRecord(t, 1, "INFO 11-30 02:41:07 [metrics.py:455] Avg prompt throughput: 812.3 tokens/s, Running: 12 reqs, GPU KV cache usage: 41.2%", str("code.function", "log"))
	s := span(t, "llm.decode.layer.3", 1, 2, []*commonpb.KeyValue{i64("layer_id", 3), i64("seq_len", 128)})
	s2 := span(t, "DetokReq 3f2a", 1, 2, []*commonpb.KeyValue{i64("pid", 3)})
	n := testing.AllocsPerRun(100, func() {
		ids.FromLog(l)
		ids.FromSpan(s)
		ids.FromSpan(s2)
	})
	if n != 0 {
		t.Errorf("allocs = %v, want 0", n)
	}
}

func TestRequestIDRulesValidate(t *testing.T) {
	if err := DefaultRequestIDRules().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := RequestIDRules{
		AttributeKeys: []string{"ok", "", "ok=x"},
		BodyPatterns:  []string{`(a`, `no group`, `(a)(b)`, `good (\d+)`, `id=(\w*)`, `x(y)?`, `a|(b)`},
		IDFormats:     []string{`[z-a]`},
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"attribute_keys[1]", "attribute_keys[2]", "body_patterns[0]", "body_patterns[1]", "body_patterns[2]",
		"body_patterns[4]", "body_patterns[5]", "body_patterns[6]", "id_formats[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "body_patterns[3]") {
		t.Errorf("error names a good pattern: %v", err)
	}
	if _, err := bad.Compile(); err == nil {
		t.Error("Compile accepted bad rules")
	}
}

func TestRequestIDRulesYAML(t *testing.T) {
	var r RequestIDRules
	src := "attribute_keys: [x.req, \"job=job-\"]\nbody_patterns: ['req#(?P<req>\\d+)']\nid_formats: ['req-\\d+']\n"
	if err := yaml.Unmarshal([]byte(src), &r); err != nil {
		t.Fatal(err)
	}
	ids, err := r.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := ids.FromLog(logRecord(t, 1, "done req#12")); id != "req-12" {
		t.Errorf("body id = %q", id)
	}
	if id, _ := ids.FromLog(logRecord(t, 1, "", i64("job", 3))); id != "job-3" {
		t.Errorf("attr id = %q", id)
	}
	if !ids.KnownFormat("req-12") || ids.KnownFormat("job-3") || ids.KnownFormat("") {
		t.Error("KnownFormat")
	}
}

func TestKnownFormat(t *testing.T) {
	ids := DefaultRequestIDs()
	for _, id := range []string{"cmpl-8f2d-0", "chatcmpl-5c3b", "task-42", "3f2a9c0b7e1d4c5a8b6f0e2d1c3b4a59",
		"123e4567-e89b-12d3-a456-426614174000", "17"} {
		if !ids.KnownFormat(id) {
			t.Errorf("KnownFormat(%q) = false", id)
		}
	}
	for _, id := range []string{"", "req?", "task-x", "hello world", "cmpl-", "3f2a"} {
		if ids.KnownFormat(id) {
			t.Errorf("KnownFormat(%q) = true", id)
		}
	}
	none, err := RequestIDRules{}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if !none.KnownFormat("anything") || none.KnownFormat("") {
		t.Error("no formats: every non-empty id is known")
	}
}

func TestRequiredLiteral(t *testing.T) {
	type want struct {
		lit    string
		before int
	}
	for p, w := range map[string]want{
		`\b((?:chat)?cmpl-[A-Za-z0-9_-]+)`: {"cmpl-", 16},
		`\brid=['"]?([A-Za-z0-9_.:-]+)`:    {"rid=", 0},
		`(?i)rid=(\w+)`:                    {"", -1},
		`(a|b)`:                            {"", -1},
		`\[request id: ([^\]]+)\]`:         {"[request id: ", 0},
		`(\w+) done`:                       {" done", -1},
		`x{2,3}(ab)`:                       {"ab", 12},
	} {
		lit, before := requiredLiteral(p)
		if lit != w.lit || (lit != "" && before != w.before) {
			t.Errorf("requiredLiteral(%q) = %q, %d; want %q, %d", p, lit, before, w.lit, w.before)
		}
	}
}

// TestFromTextLiteralWindow checks that searching from the first literal
// finds what a whole-text search finds, at the cut and around assertions.
func TestFromTextLiteralWindow(t *testing.T) {
	rules := RequestIDRules{BodyPatterns: []string{
		`(?:^|\s)id=(\d+)`,
		`\bx?x?key:(\w+)`,
		`(?m)^tag (\w+)`,
	}}
	ids, err := rules.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		"id=1":                  "1",
		"aid=2 id=3":            "3",
		"zzzzzzzzid=4 id=5":     "5",
		"key:a":                 "a",
		"xkey:b":                "b",
		"yxxkey:c xkey:d":       "d",
		"ykey:e key:f":          "f",
		"blah\ntag t1":          "t1",
		"blah tag t2\ntag t3":   "t3",
		"nothing":               "",
		"mykey:z":               "",
		"grid id=":              "",
		"abcdefghijklmno key:g": "g",
	} {
		got, _ := ids.FromText([]byte(text))
		if got != want {
			t.Errorf("FromText(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestFormatBounds checks that an id format's bounds never reject an id
// its regexp matches.
func TestFormatBounds(t *testing.T) {
	formats := append(DefaultRequestIDRules().IDFormats,
		`(?i)k+`, `é{2}x`, `a*`, `\d{1,3}|x`, `(?:)`, `[^a]b`, `.{2,4}`, `(?i)straße`, `\bq?`, `(?:ab)+|c?d`, `x{0}y`,
		`a?ab`, `[ab]{2,3}b`, `x*`, `(?:ab)?abc`, `[0-9]{2}-?[0-9]+`, `(?:ab)?a?[a-c]*b`, `[ab]*[ab]`)
	alphabet := []string{"ab", "abc", "chat", "cmpl-", "a", "b", "c", "d", "k", "K", "\u212a", "é", "É", "x", "y", "q", "0", "7", "-", "s", "ß", "ẞ", "S", " "}
	known := []string{"cmpl-8f2d-0", "chatcmpl-5c3b", "task-42", "3f2a9c0b7e1d4c5a8b6f0e2d1c3b4a59",
		"123e4567-e89b-12d3-a456-426614174000", "17", "", "KK\u212ak", "ééx", "STRASSE", "ẞtraße", "ababab", "y"}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range formats {
		re := regexp.MustCompile(`^(?:` + f + `)$`)
		idf := compileFormat(re, f)
		if i := slices.Index(DefaultRequestIDRules().IDFormats, f); i >= 0 && idf.pieces == nil {
			t.Errorf("default format %q: matched by the regexp, not by pieces", f)
		}
		for i := range 20000 {
			var id []byte
			for range rng.IntN(8) {
				id = append(id, alphabet[rng.IntN(len(alphabet))]...)
			}
			if i < len(known) {
				id = []byte(known[i])
			}
			if want := re.Match(id); idf.match(id) != want || idf.matchString(string(id)) != want {
				t.Fatalf("format %q, id %q: match = %v, regexp %v", f, id, !want, want)
			}
		}
	}
}

// TestBodyPieces checks that the body patterns matched by pieces agree
// with their regexps.
func TestBodyPieces(t *testing.T) {
	patterns := append(DefaultRequestIDRules().BodyPatterns,
		`\b(x-[a-c]+)`, `\b-([a-c]+)`, `ab([0-9])cd`, `\b(ab)?`, `q[=:]\s*['"]?([a-c]+)z`, `é(a)`, `\ba?b(c)`)
	fragments := []string{"chatcmpl-", "cmpl-", "rid=", "rid='", `"id_task":`, " ", "  ", "task ", "request_id", "=", ":", "'",
		"a", "b", "c", "z", "7", "-", "_", "x-", "q", "ab", "cd", "é", "\xff", "[request id: ", "]", "Req"}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range patterns {
		ids, err := RequestIDRules{BodyPatterns: []string{p}}.Compile()
		if err != nil {
			continue // not a valid body pattern (e.g. its capture may be empty)
		}
		r := &ids.bodies[0]
		for range 20000 {
			var text []byte
			for range rng.IntN(8) {
				text = append(text, fragments[rng.IntN(len(fragments))]...)
			}
			want := r.re.Match(text)
			if got := ids.bodyMatches(text); got != want {
				t.Fatalf("pattern %q (pieces %v), text %q: bodyMatches = %v, regexp %v", p, r.pieces != nil, text, got, want)
			}
		}
	}
	for _, p := range DefaultRequestIDRules().BodyPatterns[:3] {
		if ps, _ := bodyPieces(p); ps == nil {
			t.Errorf("default pattern %q: matched by the regexp, not by pieces", p)
		}
	}
}
