// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// IsProvisioning reports whether o carries the provisioning interlock
// annotation (AnnotationProvisioning "true") itself.
func IsProvisioning(o *Object) bool {
	return o != nil && o.Metadata.Annotations[AnnotationProvisioning] == "true"
}

// HeldPinLifetime is how far past its own expiry the guard's pin of a
// lease the interlock holds reaches: the pin must not lapse while the
// lock is on; once it is off, the lease's own expiry applies again.
const HeldPinLifetime = 10 * 365 * 24 * time.Hour

// PinExpiry is when the guard's pin of a lease that expires at expires
// lapses: then, or HeldPinLifetime later while the interlock holds it.
// The one rule for every writer of the pin (compile, the DHCP ledger).
func PinExpiry(expires time.Time, held bool) time.Time {
	if held {
		return expires.Add(HeldPinLifetime)
	}
	return expires
}

// Owners finds the object an ownerReference names (nil: none known).
type Owners func(OwnerReference) *Object

// OwnerKey is how an owner is indexed: its canonical kind (an alias when
// the kind is not one of ours) and name.
func OwnerKey(kind, name string) string {
	if k, err := LookupKind(kind); err == nil {
		kind = k.Kind
	}
	return strings.ToLower(kind) + "/" + name
}

// RefersTo reports whether r names o: kind (any alias) and name, and the
// UID when both carry one.
func RefersTo(r OwnerReference, o *Object) bool {
	return o != nil && OwnerKey(r.Kind, r.Name) == OwnerKey(o.Kind, o.Metadata.Name) &&
		(r.UID == "" || o.Metadata.UID == "" || r.UID == o.Metadata.UID)
}

// OwnersAmong returns the Owners that looks among objs.
func OwnersAmong(objs map[string][]*Object) Owners {
	byKey := map[string]*Object{}
	for _, list := range objs {
		for _, o := range list {
			byKey[OwnerKey(o.Kind, o.Metadata.Name)] = o
		}
	}
	return func(r OwnerReference) *Object {
		if o := byKey[OwnerKey(r.Kind, r.Name)]; RefersTo(r, o) {
			return o
		}
		return nil
	}
}

// Interlock explains why the provisioning interlock holds a lease (""
// when it does not): the annotation is on the lease, or on an owner it
// names (its own references and extra ones, e.g. those an update brings).
// It is the one meaning of "held": admission refuses to delete or move
// such a lease, the DHCP server neither releases nor expires it, the
// guard pins it for HeldPinLifetime past its expiry, and the collision
// report says so. owners may be nil (the lease alone decides).
func Interlock(lease *Object, owners Owners, extra ...OwnerReference) string {
	if IsProvisioning(lease) {
		return fmt.Sprintf("annotation %s is \"true\" on it", AnnotationProvisioning)
	}
	if owners == nil || lease == nil {
		return ""
	}
	for _, refs := range [][]OwnerReference{lease.Metadata.OwnerReferences, extra} {
		for _, r := range refs {
			if o := owners(r); IsProvisioning(o) {
				return fmt.Sprintf("annotation %s is \"true\" on its owner %s/%s", AnnotationProvisioning, strings.ToLower(o.Kind), o.Metadata.Name)
			}
		}
	}
	return ""
}

// Held reports whether the provisioning interlock holds lease (Interlock).
func Held(lease *Object, owners Owners) bool { return Interlock(lease, owners) != "" }

// ServedOutsideRange reports whether a dynamic lease whose address lies
// outside its segment's range is still served and pinned there: the
// address is in the segment's subnet and either a client brought it
// from another node's range (the lease is placed on this node: migrated)
// or the interlock holds it through a shrink of the range. Any other
// lease outside the range is Pending: neither served nor pinned.
func ServedOutsideRange(l Lease, placedHere, held bool, subnet netip.Prefix) bool {
	return l.Dynamic() && subnet.Contains(l.IP) && (placedHere || held)
}
