// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"fmt"
	"sort"
	"strconv"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// entry is one stored object with its decoded spec (nil when the stored
// spec no longer decodes; such objects are skipped by cross-object rules).
type entry struct {
	obj   *pivirtv1.Object
	spec  pivirtv1.Spec
	keys  []string
	scope string // store.ScopedTx's: a lease's network, else ""
}

// kindCache holds every object of one kind as the transaction sees it,
// and secondary indexes from index keys to object names.
type kindCache struct {
	kind   string
	byName map[string]*entry
	index  map[string]map[string]struct{}
	// rev and revs: the revision the cache reflects, per scope where
	// revs has one (stx mode only, see scoped.go).
	rev  int64
	revs map[string]int64
}

func newKindCache(kind string, size int) *kindCache {
	return &kindCache{kind: kind, byName: make(map[string]*entry, size), index: map[string]map[string]struct{}{}, revs: map[string]int64{}}
}

// clear empties c.
func (c *kindCache) clear() {
	clear(c.byName)
	clear(c.index)
}

// Index key prefixes.
const (
	keyOwner  = "owner\x00"  // lower(owner kind)/owner name
	keyBridge = "bridge\x00" // NetworkSegment bridge
	keyRef    = "ref\x00"    // NetworkSegment networkRef
	keyNet    = "net\x00"    // DHCPLease network
	keyMAC    = "mac\x00"    // DHCPLease network \x00 MAC
	keyIP     = "ip\x00"     // DHCPLease network \x00 IP
	keyAddr   = "addr\x00"   // ExternalIP address
	keyIf     = "if\x00"     // PortSecurity interface
	keyVM     = "vm\x00"     // PortSecurity vmRef name/nic
	keyInside = "inside\x00" // VPCRouter inside bridge
)

// kind returns the cache of a canonical kind, listing it on first use.
// A cache an Index kept from an earlier transaction becomes, on first use,
// a dependency of this transaction's commit (Tx.DependOn), as a listed
// kind is.
func (b *Batch) kind(kind string) (*kindCache, error) {
	if b.stx != nil {
		return b.scopedKind(kind)
	}
	if c, ok := b.kinds[kind]; ok {
		if !b.used[kind] {
			if err := b.tx.DependOn(kind); err != nil {
				return nil, fmt.Errorf("depending on %s: %w", kind, err)
			}
			b.used[kind] = true
		}
		return c, nil
	}
	info, err := pivirtv1.LookupKind(kind)
	if err != nil {
		return nil, err
	}
	b.used[info.Kind] = true
	objs, err := b.tx.List(info.Kind, nil)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", info.Plural, err)
	}
	c := newKindCache(info.Kind, len(objs))
	c.load(objs, info)
	b.kinds[info.Kind] = c
	return c, nil
}

// scopedKind is kind in stx mode: a kind without scopes is made current
// and a dependency; a scoped kind's cache only when a scope of it is
// used (useScope, useKind).
func (b *Batch) scopedKind(kind string) (*kindCache, error) {
	info, err := pivirtv1.LookupKind(kind)
	if err != nil {
		return nil, err
	}
	c, ok := b.kinds[info.Kind]
	if !ok {
		c = newKindCache(info.Kind, 0)
		b.kinds[info.Kind] = c
	}
	if !store.HasScopes(info.Kind) {
		if err := b.useKind(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// allKinds loads every kind, every scope of the scoped kinds included,
// for rules that follow ownerReferences (an owner's dependents may be
// leases of any network, ports of any node).
func (b *Batch) allKinds() ([]*kindCache, error) {
	out := make([]*kindCache, 0, len(pivirtv1.Kinds))
	for _, k := range pivirtv1.Kinds {
		c, err := b.kind(k.Kind)
		if err != nil {
			return nil, err
		}
		if b.stx != nil && store.HasScopes(k.Kind) {
			if err := b.useKind(c); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func (c *kindCache) get(name string) *entry { return c.byName[name] }

// put records o (replacing an entry of the same name) and indexes it.
func (c *kindCache) put(o *pivirtv1.Object, spec pivirtv1.Spec) {
	c.remove(o.Metadata.Name)
	e := &entry{obj: o, spec: spec, keys: indexKeys(o, spec), scope: store.ScopeOf(o, spec)}
	c.byName[o.Metadata.Name] = e
	for _, k := range e.keys {
		set := c.index[k]
		if set == nil {
			set = map[string]struct{}{}
			c.index[k] = set
		}
		set[o.Metadata.Name] = struct{}{}
	}
}

func (c *kindCache) remove(name string) {
	e := c.byName[name]
	if e == nil {
		return
	}
	for _, k := range e.keys {
		delete(c.index[k], name)
		if len(c.index[k]) == 0 {
			delete(c.index, k)
		}
	}
	delete(c.byName, name)
}

// lookup returns the entries under an index key, by name, except skip.
func (c *kindCache) lookup(key, skip string) []*entry {
	set := c.index[key]
	if len(set) == 0 {
		return nil
	}
	names := make([]string, 0, len(set))
	for n := range set {
		if n != skip {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]*entry, len(names))
	for i, n := range names {
		out[i] = c.byName[n]
	}
	return out
}

// ownerKey names an owner for the index: lower-case canonical kind (or the
// kind as written, for kinds of other tiers) and name.
func ownerKey(kind, name string) string { return keyOwner + pivirtv1.OwnerKey(kind, name) }

func indexKeys(o *pivirtv1.Object, spec pivirtv1.Spec) []string {
	var keys []string
	for _, r := range o.Metadata.OwnerReferences {
		keys = append(keys, ownerKey(r.Kind, r.Name))
	}
	switch s := spec.(type) {
	case *pivirtv1.NetworkSegmentSpec:
		keys = append(keys, keyBridge+s.Bridge)
		if s.NetworkRef != "" {
			keys = append(keys, keyRef+s.NetworkRef)
		}
	case *pivirtv1.DHCPLeaseSpec:
		keys = append(keys, keyNet+s.Network)
		if mac := pivirtv1.CanonicalMAC(s.MACAddress); mac != "" {
			keys = append(keys, keyMAC+s.Network+"\x00"+mac)
		}
		if ip := pivirtv1.CanonicalIPv4(s.IPAddress); ip != "" {
			keys = append(keys, keyIP+s.Network+"\x00"+ip)
		}
	case *pivirtv1.ExternalIPSpec:
		if a := pivirtv1.CanonicalIPv4(s.Address); a != "" {
			keys = append(keys, keyAddr+a)
		}
	case *pivirtv1.PortSecuritySpec:
		if s.Interface != "" {
			keys = append(keys, keyIf+s.Interface)
		}
		if s.VMRef != nil {
			keys = append(keys, keyVM+s.VMRef.Name+"/"+strconv.Itoa(s.VMRef.NIC))
		}
	case *pivirtv1.VPCRouterSpec:
		keys = append(keys, keyInside+s.Inside.Bridge)
	}
	return keys
}

// write stores o through the transaction (unless dry-run) and the cache.
// create selects tx.Create over tx.Put.
func (b *Batch) write(c *kindCache, o *pivirtv1.Object, spec pivirtv1.Spec, create bool) error {
	if !b.opts.DryRun {
		var err error
		if create {
			err = b.tx.Create(o)
		} else {
			err = b.tx.Put(o)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", lref(o.Kind, o.Metadata.Name), err)
		}
	}
	b.record(c, o.Metadata.Name)
	c.put(o, spec)
	return nil
}

// del removes kind/name through the transaction (unless dry-run) and the
// cache.
func (b *Batch) del(c *kindCache, e *entry) error {
	if !b.opts.DryRun {
		if err := b.tx.Delete(c.kind, e.obj.Metadata.Name, e.obj.Metadata.ResourceVersion); err != nil {
			return fmt.Errorf("deleting %s: %w", lref(c.kind, e.obj.Metadata.Name), err)
		}
	}
	b.record(c, e.obj.Metadata.Name)
	c.remove(e.obj.Metadata.Name)
	return nil
}

// undoKey names one object in the undo log.
type undoKey struct{ kind, name string }

// record remembers, once per batch, the entry a write replaces, so a batch
// whose transaction fails can be taken back out of a shared Index.
func (b *Batch) record(c *kindCache, name string) {
	if b.undo == nil {
		return
	}
	k := undoKey{c.kind, name}
	if _, ok := b.undo[k]; !ok {
		b.undo[k] = c.byName[name]
	}
}

// rollback restores every entry the batch wrote.
func (b *Batch) rollback() {
	for k, prev := range b.undo {
		c := b.kinds[k.kind]
		if prev == nil {
			c.remove(k.name)
		} else {
			c.put(prev.obj, prev.spec)
		}
	}
	clear(b.undo)
}
