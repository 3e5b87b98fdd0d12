package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestScaleOutAndIn runs braid as separate processes under steady input:
// one instance, then three, then one of them is killed with SIGKILL and two
// go on. Tasks move between instances (cooperative, co-partitioned), their
// state is rebuilt from the changelog, and the committed fused output must
// hold every expected (trace, revision) exactly once, the last revision
// complete.
func TestScaleOutAndIn(t *testing.T) {
	t.Parallel() // waits on paced input and restarts, mostly idle
	env := newCrashEnv(t)
	bin := buildBraid(t)
	truthc := env.produceSteady(t, 77, 100)

	start := func(name string) *child {
		return startChild(t, bin, env.configFor(t, name, filepath.Join(env.dir, "state-"+name)))
	}
	a := start("a")
	defer a.kill(t)
	a.waitLog(t, "first checkpoint committed", 60*time.Second)

	b, c := start("b"), start("c")
	defer c.kill(t)
	for _, ch := range []*child{b, c} {
		ch.waitLog(t, "task assigned", 60*time.Second)
		ch.waitLog(t, "first checkpoint committed", 60*time.Second)
	}
	if n := strings.Count(a.log.String(), "task assigned"); n != 4 {
		t.Fatalf("the first instance opened %d tasks, want all 4", n)
	}
	b.kill(t) // 3 → 2, without warning

	truth, ok := <-truthc
	if !ok {
		t.Fatal("producing the input failed")
	}
	env.verifyExactlyOnce(t, truth, 4*time.Minute, false, func() string {
		return "--- a\n" + tail(a.log.String(), 1500) + "\n--- c\n" + tail(c.log.String(), 1500)
	})
	// The survivors took the killed instance's tasks over.
	if strings.Count(a.log.String(), "task assigned")+strings.Count(c.log.String(), "task assigned") < 4+2 {
		t.Errorf("tasks did not move: a and c logs:\n%s\n%s", tail(a.log.String(), 1500), tail(c.log.String(), 1500))
	}
}

// TestZombieIsFenced freezes an instance (SIGSTOP) long enough for the group
// to give its tasks to another, then lets it run again: the zombie's
// transaction must not commit, so no (trace, revision) is ever there twice
// and nothing is lost. (Tasks moving may close a trace early and revise it:
// revisions are allowed here, duplicates are not.)
func TestZombieIsFenced(t *testing.T) {
	t.Parallel() // waits on paced input and restarts, mostly idle
	env := newCrashEnv(t)
	bin := buildBraid(t)
	truthc := env.produceSteady(t, 88, 60)

	a := startChild(t, bin, env.configFor(t, "a", filepath.Join(env.dir, "state-a")))
	defer a.kill(t)
	a.waitLog(t, "first checkpoint committed", 60*time.Second)
	a.cmd.Process.Signal(syscall.SIGSTOP)

	b := startChild(t, bin, env.configFor(t, "b", filepath.Join(env.dir, "state-b")))
	defer b.kill(t)
	// b gets every task once a's session times out (10s).
	deadline := time.Now().Add(90 * time.Second)
	for strings.Count(b.log.String(), "task assigned") < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("b did not take over the tasks; log:\n%s", tail(b.log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	b.waitLog(t, "first checkpoint committed", 60*time.Second)
	a.cmd.Process.Signal(syscall.SIGCONT) // the zombie wakes up mid-transaction

	truth, ok := <-truthc
	if !ok {
		t.Fatal("producing the input failed")
	}
	env.verifyExactlyOnce(t, truth, 4*time.Minute, false, func() string {
		return "--- a\n" + tail(a.log.String(), 1500) + "\n--- b\n" + tail(b.log.String(), 1500)
	})
}
