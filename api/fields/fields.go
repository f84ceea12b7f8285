// SPDX-License-Identifier: Apache-2.0

package fields

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// Requirement is one comma-separated term of a selector.
type Requirement struct {
	Field string
	Value string // canonical (Canonical)
	Not   bool   // !=
}

// Selector is every term of a field selector; all must match. The empty
// selector matches everything.
type Selector []Requirement

// common are the fields of every kind.
var common = []string{"metadata.name", "status.phase"}

// byKind are each kind's own fields, beyond common.
var byKind = map[string][]string{
	pivirtv1.KindDHCPLease:      {"spec.network", "spec.macAddress", "spec.ipAddress", "spec.type", "spec.hostname"},
	pivirtv1.KindNetworkSegment: {"spec.bridge", "spec.networkRef"},
	pivirtv1.KindPortSecurity:   {"spec.interface", "spec.macAddress"},
	pivirtv1.KindExternalIP:     {"spec.address", "spec.target", "spec.interface", "spec.router", "spec.mode"},
	pivirtv1.KindNetwork:        {"spec.type", "spec.bridge", "spec.uplink"},
	pivirtv1.KindOverlayNetwork: {"spec.type"},
}

// Indexed are the fields a store answers from an index rather than a scan
// (store.ListOptions): a lease's network and MAC, the selections of one
// network's and one client's leases among 100,000.
var Indexed = map[string][]string{
	pivirtv1.KindDHCPLease: {"spec.network", "spec.macAddress"},
}

// Supported returns the fields a selector on kind may name.
func Supported(kind string) []string {
	return append(slices.Clone(common), byKind[kind]...)
}

// Parse parses a field selector for objects of kind (a canonical kind
// name; "" for every kind, which allows the common fields only). An
// unknown field is an error naming it and the fields kind offers.
func Parse(kind, s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	allowed := common
	if kind != "" {
		allowed = Supported(kind)
	}
	var sel Selector
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		var r Requirement
		var field, value string
		var ok bool
		if field, value, ok = strings.Cut(term, "!="); ok {
			r.Not = true
		} else if field, value, ok = strings.Cut(term, "=="); !ok {
			field, value, ok = strings.Cut(term, "=")
		}
		field, value = strings.TrimSpace(field), strings.TrimSpace(value)
		if !ok || field == "" {
			return nil, fmt.Errorf("field selector %q: term %q: want field=value, field==value or field!=value", s, term)
		}
		if !slices.Contains(allowed, field) {
			what := "every kind"
			if kind != "" {
				what = kind
			}
			return nil, fmt.Errorf("field selector %q: %q is not a field of %s (supported: %s)", s, field, what, strings.Join(allowed, ", "))
		}
		r.Field, r.Value = field, Canonical(kind, field, value)
		sel = append(sel, r)
	}
	return sel, nil
}

// String is the selector in the syntax Parse reads.
func (s Selector) String() string {
	terms := make([]string, len(s))
	for i, r := range s {
		op := "="
		if r.Not {
			op = "!="
		}
		terms[i] = r.Field + op + r.Value
	}
	return strings.Join(terms, ",")
}

// Equal returns the value s requires field to equal, if it does.
func (s Selector) Equal(field string) (string, bool) {
	for _, r := range s {
		if r.Field == field && !r.Not {
			return r.Value, true
		}
	}
	return "", false
}

// Matches reports whether o satisfies every term.
func (s Selector) Matches(o *pivirtv1.Object) bool {
	for _, r := range s {
		if (Value(o, r.Field) == r.Value) == r.Not {
			return false
		}
	}
	return true
}

// Value is the canonical value of field in o ("" when it is not set).
func Value(o *pivirtv1.Object, field string) string {
	var v string
	switch {
	case field == "metadata.name":
		v = o.Metadata.Name
	case strings.HasPrefix(field, "spec."):
		v = gjson.GetBytes(o.Spec, strings.TrimPrefix(field, "spec.")).String()
	case strings.HasPrefix(field, "status."):
		v = gjson.GetBytes(o.Status, strings.TrimPrefix(field, "status.")).String()
	}
	return Canonical(o.Kind, field, v)
}

// FromJSON is Value of a stored object's JSON, without decoding the rest.
func FromJSON(kind string, data []byte, field string) string {
	return Canonical(kind, field, gjson.GetBytes(data, field).String())
}

// Canonical is the form of a field's value that selectors and indexes
// compare: a MAC address as net.HardwareAddr prints it, a lease's empty
// type as static.
func Canonical(kind, field, v string) string {
	switch {
	case field == "spec.macAddress":
		if mac, err := net.ParseMAC(v); err == nil {
			return mac.String()
		}
	case kind == pivirtv1.KindDHCPLease && field == "spec.type" && v == "":
		return pivirtv1.LeaseStatic
	}
	return v
}
