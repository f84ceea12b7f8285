// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// Apply admits obj and writes it through the batch's transaction unless
// DryRun; see the package Apply. obj is not modified. Nothing is written
// when an error is returned.
//
// Rules: obj is decoded strictly, defaulted and validated
// (*pivirtv1.ValidationError); server-set metadata and status in obj are
// ignored; a non-empty metadata.resourceVersion must be the stored one
// (store.ErrConflict); pivirt.hu/* labels need opts.Privileged
// (ErrForbidden); identical spec, labels, annotations and ownerReferences
// are "unchanged" and not written; generation starts at 1 and grows only
// when the spec changes; then the cross-object rules and the provisioning
// interlock (ErrBlocked) apply.
func (b *Batch) Apply(obj *pivirtv1.Object) (stored *pivirtv1.Object, action string, err error) {
	if obj == nil {
		return nil, "", errors.New("applying: no object")
	}
	in := *obj
	kind, spec, err := pivirtv1.PrepareObject(&in)
	if err != nil {
		return nil, "", err
	}
	return b.apply(obj, in, kind, spec, nil)
}

// Get returns kind/name as the batch sees it (nil when absent). The
// object is shared with the index: do not modify it.
func (b *Batch) Get(kind, name string) (*pivirtv1.Object, error) {
	o, _, err := b.GetTyped(kind, name)
	return o, err
}

// GetTyped is Get with the object's decoded spec (nil when absent, or
// not decoded).
func (b *Batch) GetTyped(kind, name string) (*pivirtv1.Object, pivirtv1.Spec, error) {
	c, err := b.kind(kind)
	if err != nil {
		return nil, nil, err
	}
	e, err := b.getEntry(c, name)
	if err != nil || e == nil {
		return nil, nil, err
	}
	return e.obj, e.spec, nil
}

// StatusFunc returns the status to store with an object about to be
// written (its generation is final), as UpdateStatus takes it.
type StatusFunc func(next *pivirtv1.Object) any

// ApplyTyped is Apply for an object whose spec the daemon built in Go
// (pivirtv1.PrepareTyped: no strict JSON decode; obj.Spec is ignored), and
// whose status, if status is not nil, goes into the same write: the DHCP
// server stores thousands of its own leases a second this way.
func (b *Batch) ApplyTyped(obj *pivirtv1.Object, spec pivirtv1.Spec, status StatusFunc) (stored *pivirtv1.Object, action string, err error) {
	if obj == nil {
		return nil, "", errors.New("applying: no object")
	}
	in := *obj
	kind, err := pivirtv1.PrepareTyped(&in, spec)
	if err != nil {
		return nil, "", err
	}
	return b.apply(obj, in, kind, spec, status)
}

// apply is Apply after the object is prepared (in is obj prepared).
func (b *Batch) apply(obj *pivirtv1.Object, in pivirtv1.Object, kind pivirtv1.KindInfo, spec pivirtv1.Spec, status StatusFunc) (stored *pivirtv1.Object, action string, err error) {
	name := in.Metadata.Name
	what := lref(kind.Kind, name)
	c, err := b.kind(kind.Kind)
	if err != nil {
		return nil, "", fmt.Errorf("applying %s: %w", what, err)
	}
	old, err := b.getEntry(c, name)
	if err != nil {
		return nil, "", fmt.Errorf("applying %s: %w", what, err)
	}

	if rv := obj.Metadata.ResourceVersion; rv != "" {
		switch {
		case old == nil:
			return nil, "", fmt.Errorf("applying %s at resourceVersion %s: the object no longer exists: %w", what, rv, store.ErrConflict)
		case old.obj.Metadata.ResourceVersion != rv:
			return nil, "", fmt.Errorf("applying %s at resourceVersion %s (stored %s): %w", what, rv, old.obj.Metadata.ResourceVersion, store.ErrConflict)
		}
	}
	labels, err := b.admitLabels(what, in.Metadata.Labels, old)
	if err != nil {
		return nil, "", err
	}
	if s, ok := spec.(*pivirtv1.NetworkSegmentSpec); ok && b.opts.Clustered && s.DHCP.IsEnabled() && labels[pivirtv1.NodeLabel] == "" {
		var errs pivirtv1.ErrorList
		errs.Add("metadata.labels["+pivirtv1.NodeLabel+"]", "", "is required on a NetworkSegment serving DHCP when nodes share the store (--store etcd): each node serves its own delegated range")
		return nil, "", &pivirtv1.ValidationError{Kind: kind.Kind, Name: name, Errors: errs}
	}
	if l, ok := spec.(*pivirtv1.DHCPLeaseSpec); ok && l.Type == pivirtv1.LeaseDynamic && l.ExpiresAt == nil {
		if in.Spec, err = b.defaultExpiry(l, old); err != nil {
			return nil, "", fmt.Errorf("applying %s: %w", what, err)
		}
	}

	next := &pivirtv1.Object{
		APIVersion: pivirtv1.APIVersion,
		Kind:       kind.Kind,
		Metadata: pivirtv1.ObjectMeta{
			Name:            name,
			Labels:          labels,
			Annotations:     maps.Clone(in.Metadata.Annotations),
			OwnerReferences: slices.Clone(in.Metadata.OwnerReferences),
		},
		Spec: in.Spec,
	}
	changed := true
	if old == nil {
		ts := b.opts.now()
		next.Metadata.UID = b.opts.newUID()
		next.Metadata.CreationTimestamp = &ts
		next.Metadata.Generation = 1
		action = ActionCreated
	} else {
		m := old.obj.Metadata
		next.Metadata.UID = m.UID
		next.Metadata.CreationTimestamp = m.CreationTimestamp
		next.Metadata.ResourceVersion = m.ResourceVersion
		next.Metadata.Generation = m.Generation
		next.Status = old.obj.Status
		specChanged := !sameSpec(old, next.Spec)
		if specChanged {
			next.Metadata.Generation++
		}
		changed = specChanged || !sameMeta(m, next.Metadata)
		action = ActionConfigured
	}
	// The status rides in the same write; it needs the final generation.
	if status != nil {
		raw, err := encodeStatus(status(next))
		if err != nil {
			return nil, "", fmt.Errorf("applying %s: %w", what, err)
		}
		if old == nil || !jsonEqual(next.Status, raw) {
			next.Status = raw
			changed = true
		}
	}
	if !changed {
		return old.obj, ActionUnchanged, nil
	}

	if old != nil && kind.Kind == pivirtv1.KindDHCPLease {
		if err := b.checkLeaseMove(old, next, spec.(*pivirtv1.DHCPLeaseSpec)); err != nil {
			return nil, "", fmt.Errorf("applying %s: %w", what, err)
		}
	}
	errs, superseded, err := b.crossCheck(next, spec, old)
	if err != nil {
		return nil, "", fmt.Errorf("applying %s: %w", what, err)
	}
	if len(errs) > 0 {
		return nil, "", &pivirtv1.ValidationError{Kind: kind.Kind, Name: name, Errors: errs}
	}
	for _, e := range superseded {
		// A reservation relocates the MAC's dynamic lease: not while the
		// provisioning interlock holds it.
		lock, err := b.provisioningLock(e, nil)
		if err != nil {
			return nil, "", fmt.Errorf("applying %s: %w", what, err)
		}
		if lock != "" {
			return nil, "", fmt.Errorf("applying %s: it would supersede %s, which cannot be relocated while %s: %w",
				what, lref(e.obj.Kind, e.obj.Metadata.Name), lock, ErrBlocked)
		}
	}
	for _, e := range superseded {
		if err := b.del(b.kinds[e.obj.Kind], e); err != nil {
			return nil, "", fmt.Errorf("applying %s: superseding %s: %w", what, lref(e.obj.Kind, e.obj.Metadata.Name), err)
		}
	}
	if err := b.write(c, next, spec, old == nil); err != nil {
		return nil, "", fmt.Errorf("applying %s: %w", what, err)
	}
	return next, action, nil
}

// admitLabels refuses pivirt.hu/* labels that an unprivileged caller adds
// or changes, and carries over those it leaves out, so an operator
// re-applying their own manifest neither needs nor drops the cluster
// tier's labels. A privileged caller's labels replace the stored ones.
func (b *Batch) admitLabels(what string, in map[string]string, old *entry) (map[string]string, error) {
	out := maps.Clone(in)
	if b.opts.Privileged {
		return out, nil
	}
	var stored map[string]string
	if old != nil {
		stored = old.obj.Metadata.Labels
	}
	keys := slices.Sorted(maps.Keys(in))
	for _, k := range keys {
		if !pivirtv1.IsReservedLabel(k) {
			continue
		}
		if sv, ok := stored[k]; !ok || sv != in[k] {
			return nil, fmt.Errorf("applying %s: metadata.labels: %s is reserved for the cluster tier (pivirt.hu/*): %w", what, k, ErrForbidden)
		}
	}
	for k, v := range stored {
		if _, ok := in[k]; !ok && pivirtv1.IsReservedLabel(k) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out, nil
}

// sameSpec compares the defaulted incoming spec with the stored one in the
// same canonical encoding.
func sameSpec(old *entry, spec json.RawMessage) bool {
	if bytes.Equal(old.obj.Spec, spec) {
		return true // the common case of an unchanged re-apply, without encoding
	}
	if old.spec != nil {
		if b, err := json.Marshal(old.spec); err == nil {
			return bytes.Equal(b, spec)
		}
	}
	return bytes.Equal(old.obj.Spec, spec)
}

// sameMeta compares the user-set metadata; nil and empty are the same.
func sameMeta(a, b pivirtv1.ObjectMeta) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		slices.Equal(a.OwnerReferences, b.OwnerReferences)
}

// UpdateStatus replaces the status of kind/name; see the package
// UpdateStatus. status may be json.RawMessage, []byte of JSON, or any
// value encoding/json marshals; nil clears it.
func (b *Batch) UpdateStatus(kind, name string, status any) error {
	info, err := pivirtv1.LookupKind(kind)
	if err != nil {
		return fmt.Errorf("updating status of %s/%s: %w", kind, name, err)
	}
	what := lref(info.Kind, name)
	c, err := b.kind(info.Kind)
	if err != nil {
		return fmt.Errorf("updating status of %s: %w", what, err)
	}
	e, err := b.getEntry(c, name)
	if err != nil {
		return fmt.Errorf("updating status of %s: %w", what, err)
	}
	if e == nil {
		return fmt.Errorf("updating status of %s: %w", what, store.ErrNotFound)
	}
	raw, err := encodeStatus(status)
	if err != nil {
		return fmt.Errorf("updating status of %s: %w", what, err)
	}
	if jsonEqual(e.obj.Status, raw) {
		return nil
	}
	next := *e.obj
	next.Status = raw
	return b.write(c, &next, e.spec, false)
}

// encodeStatus turns a status as UpdateStatus takes it into stored JSON;
// nil and JSON null clear it.
func encodeStatus(status any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch s := status.(type) {
	case nil:
	case json.RawMessage:
		raw = s
	case []byte:
		raw = s
	default:
		var err error
		if raw, err = json.Marshal(s); err != nil {
			return nil, fmt.Errorf("encoding status: %w", err)
		}
		return nullAsNone(raw), nil // valid by construction
	}
	if len(raw) > 0 && !json.Valid(raw) {
		return nil, errors.New("status is not valid JSON")
	}
	return nullAsNone(raw), nil
}

func nullAsNone(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" {
		return nil
	}
	return raw
}

// jsonEqual compares two JSON documents ignoring formatting.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true // both ours, as a rule: no compaction needed
	}
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// defaultExpiry gives a dynamic lease applied without expiresAt one (seed
// 000): the stored lease's, when it is re-applied, else defaultLeaseTime
// of its segment (86400 s without one) from now. It returns the spec
// encoded again.
func (b *Batch) defaultExpiry(l *pivirtv1.DHCPLeaseSpec, old *entry) (json.RawMessage, error) {
	var prev *pivirtv1.DHCPLeaseSpec
	if old != nil {
		prev = leaseSpec(old)
	}
	if prev != nil && prev.ExpiresAt != nil {
		l.ExpiresAt = prev.ExpiresAt
	} else {
		secs := int64(pivirtv1.DefaultLeaseTime)
		segs, err := b.segmentsFor(l.Network, "", nil)
		if err != nil {
			return nil, err
		}
		if len(segs) > 0 {
			secs = segs[0].spec.DHCP.LeaseTime()
		}
		exp := b.opts.now().Add(time.Duration(secs) * time.Second).Truncate(time.Second)
		l.ExpiresAt = &exp
	}
	return json.Marshal(l)
}
