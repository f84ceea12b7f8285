// SPDX-License-Identifier: Apache-2.0

package leasemap

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

// TestWatchClockSteps: a step of the wall clock reaches the watcher,
// each time, and nothing else does. The steps are 1 ns forward, then 1 ns
// back (adjtimex ADJ_SETOFFSET): the kernel reports a step only when the
// wall clock's offset changes, and the clock ends where it was.
func TestWatchClockSteps(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	steps := make(chan struct{}, 8)
	done := make(chan error, 1)
	var stepInside atomic.Bool
	go func() {
		done <- WatchClockSteps(ctx, func() {
			if stepInside.CompareAndSwap(true, false) {
				step(t, unix.Timeval{Sec: -1, Usec: 999_999_999})
			}
			steps <- struct{}{}
		})
	}()

	select {
	case <-steps:
		t.Fatal("a step reported with the clock left alone")
	case err := <-done:
		t.Fatalf("the watcher returned: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// +1 ns, then -1 ns (ADJ_NANO: Usec holds nanoseconds, normalized
	// to [0, 1 s)). Re-armed after each.
	for i, off := range []unix.Timeval{{Sec: 0, Usec: 1}, {Sec: -1, Usec: 999_999_999}} {
		step(t, off)
		select {
		case <-steps:
		case err := <-done:
			t.Fatalf("the watcher returned: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("step %d: not reported within 5 s", i+1)
		}
	}
	// A step while the watcher handles the last one (its callback steps
	// the clock before it re-arms, as CI's back-to-back steps once did
	// beside a running pivirtd): the re-arm fails with ECANCELED, and
	// arms. The watcher reports it and goes on; it returned the error,
	// and pivirtd stopped.
	stepInside.Store(true)
	step(t, unix.Timeval{Sec: 0, Usec: 1})
	for i := range 2 { // the step, then the one made inside its report
		select {
		case <-steps:
		case err := <-done:
			t.Fatalf("the watcher returned after a step while it handled one: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("report %d of a step while the watcher handled one: none within 5 s", i+1)
		}
	}
	step(t, unix.Timeval{Sec: 0, Usec: 1}) // still watching
	select {
	case <-steps:
	case err := <-done:
		t.Fatalf("the watcher returned: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a step after the step while the watcher handled one: not reported within 5 s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watcher ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not end with its context")
	}
}

// step steps the wall clock by off (ADJ_NANO: Usec holds nanoseconds,
// normalized to [0, 1 s)).
func step(t *testing.T, off unix.Timeval) {
	tx := unix.Timex{Modes: unix.ADJ_SETOFFSET | unix.ADJ_NANO, Time: off}
	if _, err := unix.ClockAdjtime(unix.CLOCK_REALTIME, &tx); err != nil {
		testutil.SkipOrFail(t, "stepping the wall clock by 1 ns: %v", err)
	}
}
