// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"cmp"
	"fmt"
	"net/netip"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// provisioningLock explains why a lease is frozen by the provisioning
// interlock ("" when it is not), by the one rule of pivirtv1.Interlock:
// the stored lease, or an owner it names (now or in the incoming extra
// references), carries the annotation.
func (b *Batch) provisioningLock(lease *entry, extra []pivirtv1.OwnerReference) (string, error) {
	var lookupErr error
	owners := func(r pivirtv1.OwnerReference) *pivirtv1.Object {
		o, err := b.owner(r)
		if err != nil {
			lookupErr = cmp.Or(lookupErr, err)
		}
		if o == nil {
			return nil
		}
		return o.obj
	}
	lock := pivirtv1.Interlock(lease.obj, owners, extra...)
	if lookupErr != nil {
		return "", lookupErr
	}
	return lock, nil
}

// checkLeaseMove refuses to change the IP or network of a frozen lease.
// The stored lease decides, so one apply cannot both drop the annotation
// and move the lease.
func (b *Batch) checkLeaseMove(old *entry, next *pivirtv1.Object, s *pivirtv1.DHCPLeaseSpec) error {
	prev := leaseSpec(old)
	if prev == nil {
		return nil
	}
	if prev.Network == s.Network && pivirtv1.CanonicalIPv4(prev.IPAddress) == pivirtv1.CanonicalIPv4(s.IPAddress) &&
		pivirtv1.CanonicalMAC(prev.MACAddress) == pivirtv1.CanonicalMAC(s.MACAddress) {
		return nil
	}
	lock, err := b.provisioningLock(old, next.Metadata.OwnerReferences)
	if err != nil || lock == "" {
		return err
	}
	return fmt.Errorf("moving the lease from %s %s (%s) to %s %s (%s) is refused while %s: %w",
		prev.Network, prev.IPAddress, prev.MACAddress, s.Network, s.IPAddress, s.MACAddress, lock, ErrBlocked)
}

// checkSegmentDelete refuses to delete a segment that serves a lease the
// provisioning interlock holds: the lease would lose its network.
func (b *Batch) checkSegmentDelete(seg *entry) error {
	s := segSpec(seg)
	if s == nil {
		return nil
	}
	leases, err := b.kind(pivirtv1.KindDHCPLease)
	if err != nil {
		return err
	}
	r, hasRange := s.DelegatedRange()
	for _, n := range []string{s.Bridge, s.NetworkRef} {
		if n == "" {
			continue
		}
		es, err := b.lookupIn(leases, n, keyNet+n, "")
		if err != nil {
			return err
		}
		for _, e := range es {
			l := leaseSpec(e)
			if l == nil {
				continue
			}
			if ip, err := netip.ParseAddr(l.IPAddress); err != nil || !hasRange || !r.Contains(ip) {
				continue
			}
			lock, err := b.provisioningLock(e, nil)
			if err != nil {
				return err
			}
			if lock != "" {
				return fmt.Errorf("%s serves %s (%s), which cannot lose its network while %s: %w",
					lref(seg.obj.Kind, seg.obj.Metadata.Name), lref(e.obj.Kind, e.obj.Metadata.Name), l.IPAddress, lock, ErrBlocked)
			}
		}
	}
	return nil
}
