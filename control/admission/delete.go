// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"fmt"
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Delete removes kind/name and, along ownerReferences, its dependents; see
// the package Delete. As in Kubernetes garbage collection, a dependent is
// deleted once none of its owners remains; one that keeps another owner
// only loses its references to the deleted ones. The delete fails with
// ErrBlocked, and nothing is written, when a dependent of any deleted
// object has blockOwnerDeletion set, or when a deleted DHCPLease is held by
// the provisioning interlock.
func (b *Batch) Delete(kind, name, resourceVersion string) ([]string, error) {
	info, err := pivirtv1.LookupKind(kind)
	if err != nil {
		return nil, fmt.Errorf("deleting %s/%s: %w", kind, name, err)
	}
	what := lref(info.Kind, name)
	caches, err := b.allKinds()
	if err != nil {
		return nil, fmt.Errorf("deleting %s: %w", what, err)
	}
	root, err := b.getEntry(b.kinds[info.Kind], name)
	if err != nil {
		return nil, fmt.Errorf("deleting %s: %w", what, err)
	}
	if root == nil {
		return nil, fmt.Errorf("deleting %s: %w", what, store.ErrNotFound)
	}
	if resourceVersion != "" && resourceVersion != root.obj.Metadata.ResourceVersion {
		return nil, fmt.Errorf("deleting %s at resourceVersion %s (stored %s): %w", what, resourceVersion, root.obj.Metadata.ResourceVersion, store.ErrConflict)
	}

	// Grow the doomed set to a fixed point: a dependent goes when every
	// owner it names is gone or going. Bounded: each pass dooms one more
	// object or stops.
	doomed := []*entry{root}
	isDoomed := map[*entry]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, owner := range slices.Clone(doomed) {
			for _, d := range b.dependents(caches, owner) {
				if isDoomed[d] {
					continue
				}
				gone, err := b.ownersGone(d, isDoomed)
				if err != nil {
					return nil, fmt.Errorf("deleting %s: %w", what, err)
				}
				if gone {
					doomed = append(doomed, d)
					isDoomed[d] = true
					grew = true
				}
			}
		}
	}

	// Refuse before writing anything.
	var orphans []*entry
	isOrphan := map[*entry]bool{}
	for _, owner := range doomed {
		for _, d := range b.dependents(caches, owner) {
			for _, r := range d.obj.Metadata.OwnerReferences {
				if r.BlockOwnerDeletion && refersTo(r, owner) {
					return nil, fmt.Errorf("deleting %s: %s has blockOwnerDeletion on its owner %s; delete it first: %w",
						what, lref(d.obj.Kind, d.obj.Metadata.Name), lref(owner.obj.Kind, owner.obj.Metadata.Name), ErrBlocked)
				}
			}
			if !isDoomed[d] && !isOrphan[d] {
				orphans = append(orphans, d)
				isOrphan[d] = true
			}
		}
	}
	for _, e := range doomed {
		if e.obj.Kind != pivirtv1.KindDHCPLease {
			continue
		}
		lock, err := b.provisioningLock(e, nil)
		if err != nil {
			return nil, fmt.Errorf("deleting %s: %w", what, err)
		}
		if lock != "" {
			return nil, fmt.Errorf("deleting %s: %s cannot be deleted while %s: %w", what, lref(e.obj.Kind, e.obj.Metadata.Name), lock, ErrBlocked)
		}
	}

	for _, e := range doomed {
		var err error
		switch e.obj.Kind {
		case pivirtv1.KindNetworkSegment:
			err = b.checkSegmentDelete(e)
		case pivirtv1.KindNetwork:
			err = b.checkNetworkDelete(e, isDoomed)
		}
		if err != nil {
			return nil, fmt.Errorf("deleting %s: %w", what, err)
		}
	}

	deleted := make([]string, 0, len(doomed))
	for _, e := range doomed {
		if err := b.del(b.kinds[e.obj.Kind], e); err != nil {
			return nil, err
		}
		deleted = append(deleted, ref(e.obj.Kind, e.obj.Metadata.Name))
	}
	for _, d := range orphans {
		next := *d.obj
		next.Metadata.OwnerReferences = slices.DeleteFunc(slices.Clone(d.obj.Metadata.OwnerReferences), func(r pivirtv1.OwnerReference) bool {
			for _, o := range doomed {
				if refersTo(r, o) {
					return true
				}
			}
			return false
		})
		if err := b.write(b.kinds[d.obj.Kind], &next, d.spec, false); err != nil {
			return nil, fmt.Errorf("deleting %s: %w", what, err)
		}
	}
	return deleted, nil
}

// dependents returns the objects with an ownerReference to owner.
func (b *Batch) dependents(caches []*kindCache, owner *entry) []*entry {
	key := ownerKey(owner.obj.Kind, owner.obj.Metadata.Name)
	var out []*entry
	for _, c := range caches {
		for _, d := range c.lookup(key, "") {
			for _, r := range d.obj.Metadata.OwnerReferences {
				if refersTo(r, owner) {
					out = append(out, d)
					break
				}
			}
		}
	}
	return out
}

// refersTo reports whether r names o: kind (any alias) and name, and uid
// when both carry one (a same-named successor is not the owner).
func refersTo(r pivirtv1.OwnerReference, o *entry) bool { return pivirtv1.RefersTo(r, o.obj) }

// ownersGone reports whether every owner d names is doomed or absent.
func (b *Batch) ownersGone(d *entry, isDoomed map[*entry]bool) (bool, error) {
	for _, r := range d.obj.Metadata.OwnerReferences {
		o, err := b.owner(r)
		if err != nil {
			return false, err
		}
		if o != nil && !isDoomed[o] {
			return false, nil
		}
	}
	return true, nil
}

// owner returns the object r points at, or nil when there is none. Owners
// of kinds this server does not store (a VirtualMachine of the cluster
// tier) are looked up with tx.Get and any error counts as absent, since a
// store may refuse kinds it does not know.
func (b *Batch) owner(r pivirtv1.OwnerReference) (*entry, error) {
	if info, err := pivirtv1.LookupKind(r.Kind); err == nil {
		c, err := b.kind(info.Kind)
		if err != nil {
			return nil, err
		}
		e, err := b.getEntry(c, r.Name)
		if err != nil {
			return nil, err
		}
		if e == nil || !refersTo(r, e) {
			return nil, nil
		}
		return e, nil
	}
	o, err := b.tx.Get(r.Kind, r.Name)
	if err != nil || o == nil {
		return nil, nil
	}
	e := &entry{obj: o}
	if !refersTo(r, e) {
		return nil, nil
	}
	return e, nil
}
