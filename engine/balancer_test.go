package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var coTopics = map[string]int32{"otlp_spans": 12, "otlp_logs": 12, "otlp_metrics": 12, "braid.fuse-repartition": 12}

// balance runs one balance round for members owning owned[i] (tasks, on
// every topic) and returns each member's assigned tasks, checking that
// every member got partition p of all topics or of none.
func balance(t *testing.T, owned [][]int32) [][]int32 {
	t.Helper()
	bal := CoPartitionedBalancer()
	var members []kmsg.JoinGroupResponseMember
	interests := []string{"braid.fuse-repartition", "otlp_logs", "otlp_metrics", "otlp_spans"}
	for i, tasks := range owned {
		cur := map[string][]int32{}
		if len(tasks) > 0 {
			for _, topic := range interests {
				cur[topic] = tasks
			}
		}
		members = append(members, kmsg.JoinGroupResponseMember{
			MemberID:         fmt.Sprintf("m%d", i),
			ProtocolMetadata: bal.JoinGroupMetadata(interests, cur, 1),
		})
	}
	mb, _, err := bal.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	sync := mb.(kgo.GroupMemberBalancerOrError)
	plan, err := sync.BalanceOrError(coTopics)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]int32, len(owned))
	for _, a := range plan.IntoSyncAssignment() {
		var i int
		fmt.Sscanf(a.MemberID, "m%d", &i)
		parsed, err := bal.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprint(parsed["otlp_spans"])
		for topic := range coTopics {
			if fmt.Sprint(parsed[topic]) != ref {
				t.Fatalf("member %d: %s gets %v but otlp_spans %s: not co-partitioned", i, topic, parsed[topic], ref)
			}
		}
		out[i] = parsed["otlp_spans"]
	}
	return out
}

func TestCoPartitionedBalancer(t *testing.T) {
	// One member takes everything.
	one := balance(t, [][]int32{nil})
	if len(one[0]) != 12 {
		t.Fatalf("single member got %v", one[0])
	}
	// Scale 1 → 3: the first round revokes what moves (cooperative), the
	// member keeps its fair share; the second round hands out the rest.
	all := one[0]
	r1 := balance(t, [][]int32{all, nil, nil})
	if len(r1[0]) != 4 || len(r1[1]) != 0 || len(r1[2]) != 0 {
		t.Fatalf("first cooperative round = %v, want the owner to keep 4 and nothing moved yet", r1)
	}
	r2 := balance(t, [][]int32{r1[0], nil, nil})
	seen := map[int32]int{}
	for i, tasks := range r2 {
		if len(tasks) != 4 {
			t.Fatalf("member %d got %v, want 4 tasks", i, tasks)
		}
		for _, p := range tasks {
			seen[p]++
		}
	}
	if len(seen) != 12 {
		t.Fatalf("tasks assigned: %v", seen)
	}
	if fmt.Sprint(r2[0]) != fmt.Sprint(r1[0]) {
		t.Fatalf("owner lost tasks it kept: %v then %v", r1[0], r2[0])
	}
	// Scale 3 → 2: the survivors keep theirs and share the departed's.
	r3 := balance(t, [][]int32{r2[0], r2[2]})
	if len(r3[0])+len(r3[1]) != 12 || len(r3[0]) != 6 || len(r3[1]) != 6 {
		t.Fatalf("3 → 2 gave %v", r3)
	}
	for _, p := range r2[0] {
		if !contains32(r3[0], p) {
			t.Fatalf("member 0 lost task %d it owned", p)
		}
	}
}

func contains32(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCoPartitionedBalancerRefusesUnequalCounts(t *testing.T) {
	bal := CoPartitionedBalancer()
	members := []kmsg.JoinGroupResponseMember{{MemberID: "m0", ProtocolMetadata: bal.JoinGroupMetadata([]string{"a", "b"}, nil, 1)}}
	mb, _, err := bal.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"a": 4, "b": 6})
	if err == nil || !strings.Contains(err.Error(), "a: 4") || !strings.Contains(err.Error(), "b: 6") {
		t.Fatalf("error = %v, want one naming a: 4 and b: 6", err)
	}
}
