package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CoPartitionedBalancer is the group balancer of braid's tasks: task p is
// partition p of every input topic, so the balancer hands out partition
// numbers, giving all topics' partition p to one member. It is sticky (a
// member keeps the tasks it owns up to its fair share) and cooperative
// (KIP-429: a task that moves is first revoked by its old owner, then
// assigned in a follow-up rebalance), so tasks that do not move never stop.
// Topics with different partition counts make the balance fail with an
// error naming them.
func CoPartitionedBalancer() kgo.GroupBalancer { return coBalancer{} }

type coBalancer struct{}

func (coBalancer) ProtocolName() string { return "braid-copartitioned" }
func (coBalancer) IsCooperative() bool  { return true }

func (coBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	topics := make([]string, 0, len(current))
	for t := range current {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic = t
		owned.Partitions = current[t]
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	return meta.AppendTo(nil)
}

func (coBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (c coBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(c, members)
	return b, b.MemberTopics(), err
}

func (coBalancer) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := b.NewPlan()
	tasks, err := coPartitionCount(topics)
	if err != nil {
		b.SetError(err)
		return plan
	}
	type member struct {
		m     *kmsg.JoinGroupResponseMember
		owned []int32 // tasks owned now, ascending
		quota int
		keep  []int32
	}
	var members []*member
	owner := map[int32]int{} // task → member index that keeps it
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		seen := map[int32]bool{}
		var owned []int32
		for _, op := range meta.OwnedPartitions {
			if _, ok := topics[op.Topic]; !ok {
				continue
			}
			for _, p := range op.Partitions {
				if p < tasks && !seen[p] {
					seen[p] = true
					owned = append(owned, p)
				}
			}
		}
		sort.Slice(owned, func(i, j int) bool { return owned[i] < owned[j] })
		members = append(members, &member{m: m, owned: owned})
	})
	if len(members) == 0 {
		return plan
	}
	// Fair shares: the members owning the most get the larger ones.
	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return len(members[order[i]].owned) > len(members[order[j]].owned) })
	base, extra := int(tasks)/len(members), int(tasks)%len(members)
	for rank, i := range order {
		members[i].quota = base
		if rank < extra {
			members[i].quota++
		}
	}
	// Sticky: each member keeps what it owns, up to its share; a task
	// claimed twice (a stale owner) goes to the first claimant.
	for i, mb := range members {
		for _, p := range mb.owned {
			if len(mb.keep) == mb.quota {
				break
			}
			if _, taken := owner[p]; taken {
				continue
			}
			owner[p] = i
			mb.keep = append(mb.keep, p)
		}
	}
	next := 0
	for p := int32(0); p < tasks; p++ {
		if _, ok := owner[p]; ok {
			continue
		}
		for len(members[next].keep) >= members[next].quota {
			next = (next + 1) % len(members)
		}
		owner[p] = next
		members[next].keep = append(members[next].keep, p)
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, mb := range members {
		sort.Slice(mb.keep, func(i, j int) bool { return mb.keep[i] < mb.keep[j] })
		for _, t := range names {
			plan.AddPartitions(mb.m, t, mb.keep)
		}
	}
	plan.AdjustCooperative(b)
	return plan
}

// coPartitionCount returns the common partition count of topics, or an
// error naming them when they differ.
func coPartitionCount(topics map[string]int32) (int32, error) {
	byCount := map[int32][]string{}
	for t, n := range topics {
		byCount[n] = append(byCount[n], t)
	}
	if len(byCount) <= 1 {
		for n := range byCount {
			return n, nil
		}
		return 0, nil
	}
	var parts []string
	for n, ts := range byCount {
		sort.Strings(ts)
		parts = append(parts, fmt.Sprintf("%s: %d", strings.Join(ts, ", "), n))
	}
	sort.Strings(parts)
	return 0, fmt.Errorf("engine: co-partitioned topics differ in partition count (%s)", strings.Join(parts, "; "))
}
