// SPDX-License-Identifier: Apache-2.0

// Package reconcile runs level-triggered reconcilers: each one is handed a
// consistent snapshot of the store (every object of the kinds it reads, at
// one revision) whenever something changed, and makes the host match it.
// Compile being pure, a whole-snapshot reconcile is simple and restartable:
// after a crash the first snapshot converges everything.
//
// A reconciler whose whole-snapshot pass is too slow to run per change
// (the guard, at 10,000 leases) also gets a queue per key, as a Kubernetes
// controller's informer feeds its workqueue: Loop.Changes is handed a
// Delta, just the objects changed since the last pass, at once and with
// no settle. The whole-snapshot pass stays for start, triggers, errors
// and the periodic resync, which makes it the safety net.
//
// What must see each write as it lands, in order (the DHCP server, of
// the leases other nodes write), observes the cache instead
// (Cache.Observe): every watched change, and a re-list's differences as
// the changes they stand for.
package reconcile
