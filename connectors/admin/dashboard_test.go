package admin

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

const dashboardFile = "../../deploy/grafana/braid-llm.json"

// exportedNames are the sample names braid's /metrics has with every view
// populated: a histogram's _bucket, _sum and _count, a summary's quantiles,
// _sum and _count, every other family's name.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	f := newLLMFixture(t)
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	return names
}

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlNumber   = regexp.MustCompile(`\b\d[\d.]*(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*\b`)
	promqlVar      = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	labelValues    = regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$`)
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left after removing strings, label matchers, range and
// grouping clauses, Grafana variables and numbers that are not function names or
// keywords. A Grafana label_values(selector, label) query gives the names of
// its selector.
func metricNames(expr string) []string {
	expr = strings.TrimSpace(expr)
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	expr = promqlString.ReplaceAllString(expr, " ")
	expr = promqlMatchers.ReplaceAllString(expr, " ")
	expr = promqlRange.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	expr = promqlVar.ReplaceAllString(expr, " ")
	expr = promqlNumber.ReplaceAllString(expr, " ")
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" { // a function call
			continue
		}
		if id := m[0]; !promqlKeywords[strings.ToLower(id)] {
			names = append(names, id)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (le, model) (rate(a_bucket{model=~"$model",x="y{z}"}[$__rate_interval])))`: "a_bucket",
		`sum(rate(b_sum[5m])) / sum without (le) (rate(b_count[5m])) > 0 and on (x) c`:                              "b_sum b_count c",
		`label_values(d_count{model=~"$model"}, instance)`:                                                          "d_count",
		`max(e) offset 5m > bool 1e3`: "e",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

type dashPanel struct {
	ID         *int                `json:"id"`
	Type       string              `json:"type"`
	Title      string              `json:"title"`
	Datasource *dashDatasource     `json:"datasource"`
	GridPos    *struct{ W, H int } `json:"gridPos"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Exemplar   bool            `json:"exemplar"`
		Datasource *dashDatasource `json:"datasource"`
	} `json:"targets"`
	Links []struct {
		URL string `json:"url"`
	} `json:"links"`
	Panels []dashPanel `json:"panels"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboard struct {
	Title       string `json:"title"`
	UID         string `json:"uid"`
	Annotations struct {
		List []struct {
			Name       string          `json:"name"`
			Expr       string          `json:"expr"`
			Datasource *dashDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *dashDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

// TestGrafanaDashboard validates deploy/grafana/braid-llm.json: it parses;
// every PromQL expression (panels, annotations, variables) selects only
// metrics braid's /metrics exports; every datasource is a datasource
// variable of the dashboard of the right type; panel ids are unique; every
// panel links to braid's view; latency panels ask for exemplars.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both required", d.Title, d.UID)
	}
	exported := exportedNames(t)

	dsVars := map[string]string{} // variable name → datasource type
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			var typ string
			if err := json.Unmarshal(v.Query, &typ); err != nil {
				t.Errorf("datasource variable %s: query %s is not a plugin type", v.Name, v.Query)
			}
			dsVars[v.Name] = typ
		}
	}
	for _, want := range []string{"braid_url", "model", "instance"} {
		if !vars[want] {
			t.Errorf("variable %s not defined", want)
		}
	}
	checkDS := func(where string, ds *dashDatasource) {
		t.Helper()
		if ds == nil {
			t.Errorf("%s: no datasource", where)
			return
		}
		m := regexp.MustCompile(`^\$\{(\w+)\}$`).FindStringSubmatch(ds.UID)
		if m == nil {
			t.Errorf("%s: datasource uid %q is not a datasource variable", where, ds.UID)
			return
		}
		typ, ok := dsVars[m[1]]
		if !ok {
			t.Errorf("%s: datasource variable %s not defined", where, m[1])
		} else if typ != ds.Type {
			t.Errorf("%s: datasource %s is a %s variable, used as %s", where, m[1], typ, ds.Type)
		}
	}
	referenced := map[string]bool{}
	checkExpr := func(where, expr string) {
		t.Helper()
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		for _, n := range names {
			referenced[n] = true
			if !exported[n] {
				t.Errorf("%s: %q selects %s, which braid does not export", where, expr, n)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		checkDS("variable "+v.Name, v.Datasource)
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query: %v", v.Name, err)
		}
		checkExpr("variable "+v.Name, q.Query)
		checkExpr("variable "+v.Name+" definition", v.Definition)
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			checkDS("annotation "+a.Name, a.Datasource)
			checkExpr("annotation "+a.Name, a.Expr)
		}
	}

	ids := map[int]string{}
	types := map[string]int{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			where := "panel " + p.Title
			if p.ID == nil {
				t.Errorf("%s: no id", where)
			} else if prev, dup := ids[*p.ID]; dup {
				t.Errorf("%s: id %d already used by %s", where, *p.ID, prev)
			} else {
				ids[*p.ID] = p.Title
			}
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
				t.Errorf("%s: no gridPos", where)
			}
			types[p.Type]++
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			checkDS(where, p.Datasource)
			if !slices.ContainsFunc(p.Links, func(l struct {
				URL string `json:"url"`
			}) bool {
				return strings.HasPrefix(l.URL, "${braid_url}/")
			}) {
				t.Errorf("%s: no link to braid's view (${braid_url}/...)", where)
			}
			for _, tg := range p.Targets {
				checkDS(where+" target", tg.Datasource)
				checkExpr(where, tg.Expr)
				if strings.Contains(tg.Expr, "_seconds_bucket") && strings.Contains(tg.Expr, "braid_llm_") {
					if !tg.Exemplar {
						t.Errorf("%s: latency target %q without exemplars", where, tg.Expr)
					}
				}
			}
			if p.Type == "timeseries" && len(p.Targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
		}
	}
	walk(d.Panels)
	if types["alertlist"] == 0 {
		t.Errorf("no alert list panel")
	}
	for _, want := range []string{
		"braid_llm_ttft_seconds_bucket", "braid_llm_tpot_seconds_bucket", "braid_llm_e2e_seconds_bucket",
		"llm_batch_efficiency_ratio", "braid_kv_health_score", "braid_kv_utilisation_ratio", "braid_kv_fragmentation_ratio",
		"braid_pollution_incidents_total", "braid_consumer_lag_records", "braid_engine_records_in_total",
		"braid_llm_guardrail_bypass_ratio", "braid_llm_compliance_drift", "braid_llm_tpot_by_prompt_seconds_bucket",
	} {
		if !referenced[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// dashboardExprs returns every "expr" of the dashboard (panel targets and
// annotations) with its Grafana variables replaced for a plain query: all
// models and instances, a one-minute rate interval.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("$__rate_interval", "1m", "$model", ".*", "$instance", ".*")
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "expr" {
					out = append(out, r.Replace(s))
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	slices.Sort(out)
	return slices.Compact(out)
}
