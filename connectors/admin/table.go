package admin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric is one row of a job's table of figures: a counter or gauge the
// Collector exports on /metrics and, when Log is set, that the job's
// counters line and the demo's progress line show. Each figure is written
// down once, in the row, and read where it lives (an atomic counter of a
// stage or of the engine).
type Metric struct {
	// Name is the Prometheus name; "" for a figure only logged. Rows of one family (same Name, one
	// row per LabelValue) share Help, Gauge and Label; the first row of
	// a family gives them.
	Name string
	Help string
	// Gauge: a value that goes up and down; otherwise a counter.
	Gauge bool
	// Label and LabelValue: the row's label in its family; "" for none.
	Label, LabelValue string
	// Scale multiplies the value on /metrics (e.g. 1e-9 for a figure kept
	// in nanoseconds and exported in seconds); 0 means 1.
	Scale float64
	// Log is the key of the figure in log and progress lines; "" keeps
	// it off them.
	Log string
	// Value reads the figure, e.g. an atomic counter's Load. Must be safe
	// for concurrent use.
	Value func() int64
}

// Table is a job's figures, in the order they are shown.
type Table []Metric

// Validate reports every malformed row at once: a row without a Value or
// without both a name and a log key, a family whose rows disagree on
// their type or label, a first row without help, a (name, label value)
// given twice, a log key given twice.
func (t Table) Validate() error {
	var errs []error
	first := map[string]Metric{}
	seen := map[string]bool{}
	logs := map[string]bool{}
	for i, m := range t {
		if m.Value == nil {
			errs = append(errs, fmt.Errorf("admin: metric %d (%s%s) has no Value", i, m.Name, m.Log))
		}
		if m.Log != "" {
			if logs[m.Log] {
				errs = append(errs, fmt.Errorf("admin: log key %s is in the table twice", m.Log))
			}
			logs[m.Log] = true
		}
		if m.Name == "" {
			if m.Log == "" {
				errs = append(errs, fmt.Errorf("admin: metric %d has neither a name nor a log key", i))
			}
			continue
		}
		if f, ok := first[m.Name]; !ok {
			first[m.Name] = m
			if m.Help == "" {
				errs = append(errs, fmt.Errorf("admin: metric %s has no help", m.Name))
			}
		} else if f.Gauge != m.Gauge || f.Label != m.Label {
			errs = append(errs, fmt.Errorf("admin: the rows of metric %s disagree on their type or label", m.Name))
		}
		if (m.Label == "") != (m.LabelValue == "") {
			errs = append(errs, fmt.Errorf("admin: metric %s has a label without a value or a value without a label", m.Name))
		}
		if id := m.Name + "{" + m.LabelValue + "}"; seen[id] {
			errs = append(errs, fmt.Errorf("admin: metric %s is in the table twice", id))
		} else {
			seen[id] = true
		}
	}
	return errors.Join(errs...)
}

// LogArgs are the logged rows' keys and current values, in table order,
// for slog: log.Info(msg, t.LogArgs()...).
func (t Table) LogArgs() []any {
	var args []any
	for _, m := range t {
		if m.Log == "" {
			continue
		}
		args = append(args, m.Log, m.Value())
	}
	return args
}

// Line is the logged rows as one line for people: "messages 920  members
// 3674  …".
func (t Table) Line() string {
	var b strings.Builder
	for _, m := range t {
		if m.Log == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("  ")
		}
		b.WriteString(strings.ReplaceAll(m.Log, "_", " "))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(m.Value(), 10))
	}
	return b.String()
}

// Names are the distinct metric names of the table, in table order.
func (t Table) Names() []string {
	var names []string
	seen := map[string]bool{}
	for _, m := range t {
		if m.Name != "" && !seen[m.Name] {
			seen[m.Name] = true
			names = append(names, m.Name)
		}
	}
	return names
}

// families builds a descriptor per metric name.
func (t Table) families() map[string]*prometheus.Desc {
	descs := map[string]*prometheus.Desc{}
	for _, m := range t {
		if _, ok := descs[m.Name]; ok || m.Name == "" {
			continue
		}
		var labels []string
		if m.Label != "" {
			labels = []string{m.Label}
		}
		descs[m.Name] = prometheus.NewDesc(m.Name, m.Help, labels, nil)
	}
	return descs
}
