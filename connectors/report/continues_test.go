package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestContinuesRendered: a continuation's report names the closed
// incident it carries on, in HTML and Markdown; an incident of its own
// says nothing of the kind.
func TestContinuesRendered(t *testing.T) {
	r := sampleReport(t)
	render := func() (string, string) {
		var h, m bytes.Buffer
		if err := r.HTML(&h); err != nil {
			t.Fatal(err)
		}
		r.Markdown(&m, "")
		return h.String(), m.String()
	}
	h, m := render()
	if strings.Contains(h, "Continues incident") || strings.Contains(m, "Continues incident") {
		t.Fatal("an incident of its own names one it continues")
	}
	r.Continues = "inc-00000000000000aa"
	h, m = render()
	if !strings.Contains(h, `id="continues"`) || !strings.Contains(h, "inc-00000000000000aa") {
		t.Errorf("html does not name the incident it continues")
	}
	if !strings.Contains(m, "Continues incident `inc-00000000000000aa`") {
		t.Errorf("markdown does not name the incident it continues")
	}
}
