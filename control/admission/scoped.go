// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// On a store several nodes write at once (etcd: store.ScopedTx), a
// shared Index keeps its caches across other nodes' commits: each cache
// knows the revision each of its scopes reflects (store.ScopeOf: a
// lease's network, a port's node), a transaction reads the store's version of
// every scope once (Versions), reads again only the scopes it uses that
// changed since, and depends only on those it uses. A node writing the
// leases of its network then neither lists the others' leases nor runs
// again when they write theirs; before, every other node's commit made
// the next transaction list every lease of the cluster and depend on all
// of them (BENCHMARKS, "Writes of several nodes").

// scopeRev is the revision scope reflects in c: 0, never loaded; -1,
// changed by a commit that did not depend on it.
func (c *kindCache) scopeRev(scope string) int64 {
	if r, ok := c.revs[scope]; ok {
		return r
	}
	return c.rev
}

// versions reads the store's scope versions, once per transaction.
func (b *Batch) versions(kind string) (map[string]int64, error) {
	if b.vers == nil {
		v, err := b.stx.Versions()
		if err != nil {
			return nil, fmt.Errorf("reading the store's versions: %w", err)
		}
		b.vers = v
	}
	return b.vers[kind], nil
}

// load fills c with objs (of scope, or of every scope when all).
func (c *kindCache) load(objs []*pivirtv1.Object, info pivirtv1.KindInfo) {
	for _, o := range objs {
		spec := info.NewSpec()
		if json.Unmarshal(o.Spec, spec) != nil {
			spec = nil
		}
		c.put(o, spec)
	}
}

// useKind makes c (a kind without scopes, or every scope of the scoped
// kind) current and a dependency of the commit; stx mode.
func (b *Batch) useKind(c *kindCache) error {
	if b.usedAll[c.kind] {
		return nil
	}
	v, err := b.versions(c.kind)
	if err != nil {
		return err
	}
	stale := c.rev <= 0
	for scope, rev := range v {
		if rev > c.scopeRev(scope) || c.scopeRev(scope) < 0 {
			stale = true
		}
	}
	for _, rev := range c.revs {
		if rev < 0 {
			stale = true
		}
	}
	if stale {
		info, err := pivirtv1.LookupKind(c.kind)
		if err != nil {
			return err
		}
		objs, err := b.tx.List(c.kind, nil) // a dependency too
		if err != nil {
			return fmt.Errorf("listing %s: %w", info.Plural, err)
		}
		c.clear()
		c.load(objs, info)
		c.rev, c.revs = b.tx.Revision()-1, map[string]int64{}
	} else if err := b.tx.DependOn(c.kind); err != nil {
		return fmt.Errorf("depending on %s: %w", c.kind, err)
	}
	b.usedAll[c.kind] = true
	return nil
}

// useScope makes scope of the scoped kind's cache c current and a
// dependency of the commit; stx mode.
func (b *Batch) useScope(c *kindCache, scope string) error {
	if b.usedAll[c.kind] || b.usedScope[scopeRef{c.kind, scope}] {
		return nil
	}
	v, err := b.versions(c.kind)
	if err != nil {
		return err
	}
	if have := c.scopeRev(scope); have <= 0 || v[scope] > have {
		info, err := pivirtv1.LookupKind(c.kind)
		if err != nil {
			return err
		}
		objs, err := b.stx.ListIn(c.kind, scope) // a dependency too
		if err != nil {
			return fmt.Errorf("listing %s of %s: %w", info.Plural, scope, err)
		}
		for name, e := range c.byName {
			if e.scope == scope {
				c.remove(name)
			}
		}
		c.load(objs, info)
		c.revs[scope] = b.tx.Revision() - 1
	} else if err := b.stx.DependOnScope(c.kind, scope); err != nil {
		return fmt.Errorf("depending on %s of %s: %w", c.kind, scope, err)
	}
	b.usedScope[scopeRef{c.kind, scope}] = true
	return nil
}

// getEntry is c.get(name), with name's scope made current first in stx
// mode (the store says which scope holds it).
func (b *Batch) getEntry(c *kindCache, name string) (*entry, error) {
	if b.stx == nil || !store.HasScopes(c.kind) || b.usedAll[c.kind] {
		return c.get(name), nil
	}
	scope, ok, err := b.stx.ScopeOf(c.kind, name)
	if err != nil {
		return nil, fmt.Errorf("finding %s: %w", lref(c.kind, name), err)
	}
	if !ok {
		return nil, nil // not stored (this batch's own writes included)
	}
	if err := b.useScope(c, scope); err != nil {
		return nil, err
	}
	return c.get(name), nil
}

// lookupIn is c.lookup(key, skip) of the objects in scope, made current
// first in stx mode.
func (b *Batch) lookupIn(c *kindCache, scope, key, skip string) ([]*entry, error) {
	if b.stx != nil && store.HasScopes(c.kind) {
		if err := b.useScope(c, scope); err != nil {
			return nil, err
		}
	}
	return c.lookup(key, skip), nil
}

// useAllScopes is useKind of a scoped kind's cache in stx mode (a rule
// that reads every scope of it).
func (b *Batch) useAllScopes(c *kindCache) error {
	if b.stx == nil || !store.HasScopes(c.kind) {
		return nil
	}
	return b.useKind(c)
}

// committed records, after a commit at rev, that the scopes this batch
// depended on reflect rev; a scope it wrote without depending on it is
// read again before its next use.
func (b *Batch) committed(rev int64) {
	for kind := range b.usedAll {
		if c := b.kinds[kind]; c != nil {
			c.rev, c.revs = rev, map[string]int64{}
		}
	}
	for ref := range b.usedScope {
		if c := b.kinds[ref.kind]; c != nil && !b.usedAll[ref.kind] {
			c.revs[ref.scope] = rev
		}
	}
	for k, prev := range b.undo {
		c := b.kinds[k.kind]
		if c == nil || b.usedAll[k.kind] {
			continue
		}
		if e := c.get(k.name); e != nil && !b.usedScope[scopeRef{k.kind, e.scope}] {
			c.revs[e.scope] = -1
		}
		if prev != nil && !b.usedScope[scopeRef{k.kind, prev.scope}] {
			c.revs[prev.scope] = -1
		}
	}
}

// scopeRef names one scope of a kind.
type scopeRef struct{ kind, scope string }
