// SPDX-License-Identifier: Apache-2.0

// Package netnsdo runs a function inside a network namespace, safely: on
// a dedicated, locked OS thread that is left to die with its goroutine if
// it cannot return to its own namespace, so no other code ever runs in the
// wrong one.
package netnsdo

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn inside the namespace h and returns its error.
func Do(h netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("getting current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("entering netns: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked and dies with the goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("restoring netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
