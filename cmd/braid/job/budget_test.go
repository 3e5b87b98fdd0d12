package job

import (
	"strings"
	"testing"
)

func TestSplitBudgetSharesAddUpAndNoneIsEmpty(t *testing.T) {
	for _, total := range []int64{MinMemoryBudget, 512 << 20, 1 << 30, 7<<30 + 12345} {
		b := SplitBudget(total)
		var sum, percent int64
		for _, s := range budgetShares {
			v := *s.field(&b)
			if v <= 0 {
				t.Errorf("total %d: share %q is %d", total, s.name, v)
			}
			sum += v
			percent += s.percent
		}
		if percent != 100 {
			t.Fatalf("shares add up to %d %%", percent)
		}
		if sum > total || total-sum > 100 {
			t.Errorf("total %d: shares add up to %d", total, sum)
		}
	}
}

func TestBudgetTableNamesEveryShare(t *testing.T) {
	var sb strings.Builder
	if err := SplitBudget(1 << 30).WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, s := range budgetShares {
		if !strings.Contains(sb.String(), s.name) {
			t.Errorf("table lacks %q:\n%s", s.name, sb.String())
		}
	}
	if !strings.Contains(sb.String(), "1073741824") {
		t.Errorf("table lacks the total:\n%s", sb.String())
	}
}

func TestValidateNamesEveryLimitProblem(t *testing.T) {
	c := &Config{}
	c.Kafka.Brokers = []string{"127.0.0.1:9092"}
	c.EnsureDefaults()
	c.State.MemoryBudget = 1 << 20
	c.Limits.MaxMessageBytes = 10
	c.EventTime.Future = "drop"
	c.Errors = map[string]string{"fuse": "ignore", "nosuch": "skip"}
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"state.memory_budget", "limits.max_message_bytes", "event_time.future", "errors.fuse", "errors.nosuch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if got := c.ErrorPolicy("resolve"); got != "dead_letter" {
		t.Errorf("default policy %q", got)
	}
}
