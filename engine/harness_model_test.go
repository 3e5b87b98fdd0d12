package engine

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/braidlabs/braid/state"
)

// TestHarnessCheckpointModel drives the counter through the Harness with
// seeded random schedules of batches, checkpoints, aborts and restarts,
// against a model of what each step must leave: after every step the
// task's state is the model's (an abort or a restart takes it back to the
// last checkpoint, and the input is read again from there, as the engine
// rewinds the consumer), and in the end the output of the committed
// epochs is exactly what the input gives, the same for every schedule.
//
// Each schedule runs in a synctest bubble: the Harness's clock is the
// bubble's, every checkpoint interval passes in no time, and the bubble
// fails the test if the task or its store leaves a goroutine behind.
func TestHarnessCheckpointModel(t *testing.T) {
	const keys, n = 5, 600
	rng := rand.New(rand.NewPCG(7, 7))
	input := make([]inputRecord, n)
	for i := range input {
		input[i] = inputRecord{key: fmt.Sprintf("k%02d", rng.IntN(keys)), value: rng.Int64N(100)}
	}
	want := map[string][]tally{}
	for _, r := range input {
		var cur tally
		if s := want[r.key]; len(s) > 0 {
			cur = s[len(s)-1]
		}
		cur.count++
		cur.sum += r.value
		want[r.key] = append(want[r.key], cur)
	}
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got, ops := runHarnessModel(t, rand.New(rand.NewPCG(seed, 0)), input)
				checkOutput(t, got, want)
				t.Logf("schedule: %v", ops)
			})
		})
	}
}

// runHarnessModel runs one schedule and returns the committed output by
// key and the counts of the steps taken.
func runHarnessModel(t *testing.T, rng *rand.Rand, input []inputRecord) (map[string][]tally, map[string]int) {
	t.Helper()
	store, err := state.Open(state.Options{InMemory: true, MemoryBudget: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	topo := Topology{Name: "counter", Inputs: []Input{{Topic: "in"}}, Partitions: 1,
		NewProcessor: func(*Task) (Processor, error) { return counter{out: "out"}, nil }}
	h, err := NewHarness(Config{Store: store}, topo, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	// The model: the tallies as of the last checkpoint and now, and the
	// input position of each.
	committed, current := map[string]tally{}, map[string]tally{}
	committedPos, pos := 0, 0
	// The output of the committed epochs; h.Out from epochStart on is
	// the open epoch's.
	out := map[string][]tally{}
	epochStart := 0
	ops := map[string]int{}
	back := func() {
		current = maps.Clone(committed)
		pos = committedPos
		h.Out = h.Out[:epochStart]
	}
	for committedPos < len(input) {
		time.Sleep(time.Second) // the bubble's clock: a checkpoint interval
		h.SetNow(time.Now())
		switch op := rng.IntN(10); {
		case op < 5 && pos < len(input):
			ops["batch"]++
			end := min(len(input), pos+1+rng.IntN(60))
			var recs []*kgo.Record
			for i, r := range input[pos:end] {
				recs = append(recs, &kgo.Record{Key: []byte(r.key), Value: strconv.AppendInt(nil, r.value, 10), Offset: int64(pos + i)})
				v := current[r.key]
				v.count++
				v.sum += r.value
				current[r.key] = v
			}
			if err := h.Process(0, recs...); err != nil {
				t.Fatalf("process %d–%d: %v", pos, end, err)
			}
			pos = end
		case op < 8:
			ops["checkpoint"]++
			if err := h.Checkpoint(); err != nil {
				t.Fatalf("checkpoint at %d: %v", pos, err)
			}
			for _, r := range h.Out[epochStart:] {
				v, err := parseTally(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[string(r.Key)] = append(out[string(r.Key)], v)
			}
			epochStart = len(h.Out)
			committed, committedPos = maps.Clone(current), pos
		case op < 9:
			ops["abort"]++
			if err := h.Abort(); err != nil {
				t.Fatalf("abort at %d: %v", pos, err)
			}
			back()
		default:
			ops["restart"]++
			if err := h.Restart(); err != nil {
				t.Fatalf("restart at %d: %v", pos, err)
			}
			back()
		}
		checkState(t, h, input, current, pos)
	}
	return out, ops
}

// checkState fails the test unless the task's state holds exactly the
// model's tallies, for every key of the input.
func checkState(t *testing.T, h *Harness, input []inputRecord, model map[string]tally, pos int) {
	t.Helper()
	keys := map[string]bool{}
	for _, r := range input {
		keys[r.key] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		v, ok, err := h.Task().State.Get(nil, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		m, inModel := model[k]
		if !inModel {
			if ok {
				t.Fatalf("at input position %d: state of %s is %q, want none", pos, k, v)
			}
			continue
		}
		got, perr := parseTally(v)
		if !ok || perr != nil || got != m {
			t.Fatalf("at input position %d: state of %s is %q (present %v), want %v", pos, k, v, ok, m)
		}
	}
}
