// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"maps"
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// StatusOnly reports whether a change touched only an object's status:
// the reconcilers write statuses themselves, and a pass for each of them
// (one more pass per pass, and one per DHCP ACK) would redo work whose
// inputs did not change.
func StatusOnly(c Change) bool {
	if c.Type != store.Modified || c.Old == nil {
		return false
	}
	a, b := c.Old.Metadata, c.Object.Metadata
	return a.Generation == b.Generation && a.UID == b.UID && !metaChanged(c)
}

// metaChanged reports whether a modification changed the labels,
// annotations or owner references (an operator's edit; the provisioning
// interlock is an annotation).
func metaChanged(c Change) bool {
	if c.Type != store.Modified || c.Old == nil {
		return false
	}
	a, b := c.Old.Metadata, c.Object.Metadata
	return !maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) ||
		!slices.Equal(a.OwnerReferences, b.OwnerReferences)
}

// DynamicLease reports whether a change is to a lease the DHCP server
// allocated (type dynamic). The server programs pv_leases and writes the
// lease's status in the same step as it stores it, so the guard need not
// react; a renewal changes no segment's counts either. An operator's
// edit of its metadata (the provisioning interlock on or off) is not
// the server's, and is seen.
func DynamicLease(c Change) bool {
	if c.Object.Kind != pivirtv1.KindDHCPLease || metaChanged(c) {
		return false
	}
	spec, err := c.Spec()
	if err != nil {
		return false // let the pass see and report it
	}
	ls, ok := spec.(*pivirtv1.DHCPLeaseSpec)
	return ok && ls.Type == pivirtv1.LeaseDynamic
}

// Unless returns a Filter that reacts to every change none of skip
// matches.
func Unless(skip ...func(Change) bool) Filter {
	return func(c Change) bool {
		for _, s := range skip {
			if s(c) {
				return false
			}
		}
		return true
	}
}

// OwnersOnly returns a skip function for Unless that lets a loop watch
// every kind as a possible owner of its own kinds' objects: a change of
// a kind outside own matters only when it puts the provisioning
// interlock on what it owns or takes it off (pivirtv1.Interlock).
func OwnersOnly(own ...string) func(Change) bool {
	return func(c Change) bool {
		if slices.Contains(own, c.Object.Kind) {
			return false
		}
		locked := func(o *pivirtv1.Object) bool { return o != nil && pivirtv1.IsProvisioning(o) }
		now := c.Type != store.Deleted && locked(c.Object)
		before := locked(c.Old) || (c.Type == store.Deleted && locked(c.Object))
		return now == before
	}
}
