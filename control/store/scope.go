// SPDX-License-Identifier: Apache-2.0

package store

import (
	"encoding/json"
	"slices"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// A store shared by a cluster (etcd) keeps the objects of two kinds by
// scope, so that a node lists and watches only the part it needs and
// transactions depend only on the part they read (Scoped, ScopedTx):
//   - a DHCPLease by its spec.network, the network it is a lease of;
//   - a PortSecurity by its node (label pivirt.hu/node), Unplaced when it
//     has none: a port is one host's.
//
// The objects of every other kind share one scope, "".

// Unplaced is the scope of a PortSecurity placed on no node (every node
// secures the interface it names, where it has one).
const Unplaced = "_"

// HasScopes reports whether kind's objects are kept by scope.
func HasScopes(kind string) bool {
	return kind == pivirtv1.KindDHCPLease || kind == pivirtv1.KindPortSecurity
}

// ScopeOf is the scope of o, whose decoded spec (nil: decode it from
// o.Spec) spec is; "" for a kind without scopes.
func ScopeOf(o *pivirtv1.Object, spec pivirtv1.Spec) string {
	switch o.Kind {
	case pivirtv1.KindDHCPLease:
		if l, ok := spec.(*pivirtv1.DHCPLeaseSpec); ok {
			return l.Network
		}
		var s struct {
			Network string `json:"network"`
		}
		_ = json.Unmarshal(o.Spec, &s) // a spec that does not decode has no network
		return s.Network
	case pivirtv1.KindPortSecurity:
		return NodeScope(o.Metadata.Labels[pivirtv1.NodeLabel])
	}
	return ""
}

// NodeScope is the PortSecurity scope of node ("": Unplaced).
func NodeScope(node string) string {
	if node == "" {
		return Unplaced
	}
	return node
}

// Scope is what a node of a cluster lists and watches (Scoped): every
// object of a kind without scopes, the leases of Networks and the
// PortSecurity of Nodes (scopes: NodeScope of each).
type Scope struct {
	Networks []string
	Nodes    []string
}

// Equal reports whether s and o name the same scopes (each sorted).
func (s Scope) Equal(o Scope) bool {
	return slices.Equal(s.Networks, o.Networks) && slices.Equal(s.Nodes, o.Nodes)
}
