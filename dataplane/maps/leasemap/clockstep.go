// SPDX-License-Identifier: Apache-2.0

package leasemap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WatchClockSteps calls stepped each time the wall clock is set (an NTP
// step, `date -s`, a resume from suspend; not a slew), until ctx ends.
// pv_leases holds CLOCK_MONOTONIC expiries converted at ClockOffset, so
// every expiry written before a step is off by the step until it is
// written again: a step back makes pins lapse early, before the leases
// they pin end. The caller rewrites them (the guard's full pass) at
// once instead of at its next periodic pass.
//
// The kernel tells of a step through a timerfd on CLOCK_REALTIME armed
// with TFD_TIMER_CANCEL_ON_SET: its read fails with ECANCELED.
func WatchClockSteps(ctx context.Context, stepped func()) error {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("creating a timerfd to watch for wall-clock steps: %w", err)
	}
	f := os.NewFile(uintptr(fd), "clock-steps") // nonblocking: reads wait in the runtime's poller
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	buf := make([]byte, 8)
	for ctx.Err() == nil {
		switch err := armCancelOnSet(fd); {
		case errors.Is(err, syscall.ECANCELED):
			// Set again between the read and this re-arm: the timer
			// is armed all the same (timerfd_create(2), NOTES).
			stepped()
		case err != nil:
			return err
		}
		_, err := f.Read(buf)
		switch {
		case errors.Is(err, syscall.ECANCELED):
			stepped()
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("reading the clock-step timerfd: %w", err)
		}
		// A read without error: the far deadline passed. Armed again.
	}
	return nil
}

// armCancelOnSet arms fd to expire a century ahead (it is its
// cancellation that matters), cancelled when the wall clock is set.
func armCancelOnSet(fd int) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(time.Now().AddDate(100, 0, 0).UnixNano())}
	if err := unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME|unix.TFD_TIMER_CANCEL_ON_SET, &spec, nil); err != nil {
		return fmt.Errorf("arming the clock-step timerfd: %w", err)
	}
	return nil
}
