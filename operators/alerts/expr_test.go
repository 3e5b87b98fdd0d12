package alerts

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fixed is a window with given statistics per figure and function.
type fixed map[string]float64

func (f fixed) stat(fig, fn string, q float64, win int64) float64 {
	if fn == "quantile" {
		fn = "q" + strings.TrimRight(strings.TrimRight(strings.TrimPrefix(formatValue(q), "0"), "0"), ".")
	}
	if win != 0 {
		fig += ", " + time.Duration(win).String()
	}
	v, ok := f[fn+"("+fig+")"]
	if !ok {
		return math.NaN()
	}
	return v
}

func TestExprEval(t *testing.T) {
	w := fixed{"q.99(ttft)": 3, "avg(cache_hit)": 0.9, "avg(slow)": 0.5, "avg(kv_usage)": 0.5,
		"deriv(gpu_fb_used_mib)": 30, "count(incident)": 2, "sum(guardrail_bypass)": 1, "sum(guardrail_checked)": 100}
	for _, c := range []struct {
		src   string
		want  float64
		value float64
	}{
		{"p99(ttft) > 2500ms", 1, 3},
		{"p99(ttft) > 3.5s", 0, 3},
		{"quantile(0.99, ttft) >= 3", 1, 3},
		{"100 * (0.5 * avg(cache_hit) + 0.3 * (1 - avg(slow)) + 0.2 * (1 - avg(kv_usage))) < 75", 1, 100 * (0.45 + 0.15 + 0.1)},
		{"deriv(gpu_fb_used_mib) * 1MiB * 1min > 1.2GB", 1, 30 * (1 << 20) * 60},
		{"deriv(gpu_fb_used_mib) * 1MiB * 1min > 2GB", 0, 30 * (1 << 20) * 60},
		{"count(incident) > 0", 1, 2},
		{"sum(guardrail_bypass) / sum(guardrail_checked) > 0.8%", 1, 0.01},
		{"p99(ttft) > 5 or count(incident) > 1", 1, 3},
		{"p99(ttft) > 5 and count(incident) > 1", 0, 3},
		{"-p99(ttft) < -2", 1, -3},
		{"avg(tpot) > 1", 0, math.NaN()}, // absent figure: NaN, never true
		{"avg(tpot) != 1", 0, math.NaN()},
		{"p99(ttft) / 0 > 1", 0, math.NaN()},
	} {
		e, err := compile(c.src, knownFigure)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got := e.root.eval(w); got != c.want {
			t.Errorf("%s = %v, want %v", c.src, got, c.want)
		}
		if got := e.value.eval(w); !(got == c.value || math.IsNaN(got) && math.IsNaN(c.value) || math.Abs(got-c.value) < 1e-9*math.Abs(c.value)) {
			t.Errorf("%s: value %v, want %v", c.src, got, c.value)
		}
	}
}

func TestExprErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"p99(ttft) >", "unexpected end"},
		{"p99(nope) > 1", `unknown figure "nope"`},
		{"ttft > 1", `unknown function "ttft"`},
		{"p99(ttft) > 2 parsecs", `unexpected "parsecs"`},
		{"p99(ttft) > 2xs", `unknown unit "xs"`},
		{"quantile(1.5, ttft) > 1", "quantile needs a number in [0, 1]"},
		{"(p99(ttft) > 1", "missing )"},
		{"1 > 0", "reads no figure"},
		{"p99(ttft) # 1", "unexpected character"},
		{"", "unexpected end"},
	} {
		_, err := compile(c.src, knownFigure)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %q", c.src, err, c.want)
		}
	}
}

// TestCompileReportsEveryProblem: a configuration with several mistakes
// says all of them at once.
func TestCompileReportsEveryProblem(t *testing.T) {
	off := false
	c := Config{DefaultRules: &off, Rules: []Rule{
		{Name: "A", Expr: "p99(ttft) > ", Every: 15 * time.Second, Window: time.Minute},
		{Name: "B", Expr: "avg(slow) > 0.5", GroupBy: []string{"colour"}, Severity: "dire"},
		{Name: "C", Expr: "avg(slow) > 0.5", Window: 50 * time.Second, Every: 15 * time.Second, For: -time.Second},
		{Name: "D", Expr: "avg(slow) > 0.5", Labels: map[string]string{"severity": "x"}, Action: &Action{URL: "ftp://x"}},
		{Expr: "avg(slow) > 0.5"},
	}}
	_, err := c.Compile()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"rule A: expr", `rule B: group_by "colour"`, `rule B: severity "dire"`, "rule C: window 50s is not a multiple of every 15s",
		"rule C: for -1s is negative", `rule D: label "severity" is set by braid`, `rule D: action url "ftp://x"`,
		"rule D: action name is required", "alerts.rules[4]: name is required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestDefaultRulesCompile: the built-in rules are valid and read the
// figures the design names.
func TestDefaultRulesCompile(t *testing.T) {
	var c Config
	rules, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range rules {
		names[r.Name] = true
	}
	for _, n := range []string{"BraidTTFTHigh", "BraidKVMemoryGrowth", "BraidKVCacheHealthLow", "BraidKVFragmentation", "BraidGuardrailBypass", "BraidKVCachePollution", "BraidPIILeak",
		"BraidRecordSuccessRatio", "BraidRecordComplianceDriftJailbreak", "BraidRecordResponseSensitivityP99"} {
		if !names[n] {
			t.Errorf("default rule %s missing", n)
		}
	}
	// A user rule of the same name replaces the default one.
	c = Config{Rules: []Rule{{Name: "BraidTTFTHigh", Expr: "p99(ttft) > 1s"}}}
	rules, err = c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Name == "BraidTTFTHigh" && r.Expr != "p99(ttft) > 1s" {
			t.Errorf("default not replaced: %s", r.Expr)
		}
	}
}

func TestTraceFigureOrder(t *testing.T) {
	if len(traceFigures) != NumTraceFigures {
		t.Fatalf("%d trace figures, %d indexes", len(traceFigures), NumTraceFigures)
	}
	for i, want := range map[int]string{FigTTFT: "ttft", FigE2E: "e2e", FigError: "error", FigCacheHit: "cache_hit",
		FigKVUsage: "kv_usage", FigGuardrailBypass: "guardrail_bypass", FigPolluted: "polluted"} {
		if traceFigures[i] != want {
			t.Errorf("figure %d is %s, want %s", i, traceFigures[i], want)
		}
	}
}

func TestGroupKeyRoundTrip(t *testing.T) {
	l := Labels{Model: `llama "3"`, Instance: "vllm-0,a=b", GPU: "GPU-1"}
	k, ok := groupKey(nil, []string{"gpu", "instance", "model"}, &l)
	if !ok {
		t.Fatal("not in group")
	}
	names, got, err := parseGroupKey(string(k))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "gpu,instance,model" || got != l {
		t.Errorf("round trip: %v %+v from %s", names, got, k)
	}
	if _, ok := groupKey(nil, []string{"host"}, &l); ok {
		t.Error("a group with an empty label")
	}
	for _, bad := range []string{"", "x", `colour="red"`, `model="a"gpu="b"`, `model="a,gpu="b"`, `model="b",gpu="a"`} {
		if _, _, err := parseGroupKey(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestAppendQuoteAsStrconv: the fast path writes what strconv.AppendQuote
// writes, for every byte in every position and for multi-byte text.
func TestAppendQuoteAsStrconv(t *testing.T) {
	vals := []string{"", "llama-8b", "node-a/0", "a b", "ü", "日本", "\xff", "tab\there", `q"uote`, `back\slash`, "\x7f", "~", " "}
	for c := range 256 {
		vals = append(vals, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for _, v := range vals {
		if got, want := string(appendQuote([]byte("k="), v)), string(strconv.AppendQuote([]byte("k="), v)); got != want {
			t.Errorf("appendQuote(%q) = %s, want %s", v, got, want)
		}
	}
}
