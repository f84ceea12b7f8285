// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Kind names, as written in manifests.
const (
	KindNetworkSegment = "NetworkSegment"
	KindDHCPLease      = "DHCPLease"
	KindPortSecurity   = "PortSecurity"
	KindExternalIP     = "ExternalIP"
	KindVPCRouter      = "VPCRouter"
	KindOverlayNetwork = "OverlayNetwork"
	KindNetwork        = "Network"
)

// KindInfo describes one kind: its canonical name, the lower-case aliases the
// CLI accepts, and a constructor of its typed spec.
type KindInfo struct {
	Kind    string
	Plural  string
	Aliases []string
	NewSpec func() Spec
}

// Kinds lists every kind in the order the CLI and compile walk them
// (networks and overlays before the segments that name them, segments
// before the leases that name them).
var Kinds = []KindInfo{
	{KindNetwork, "networks", []string{"network", "networks", "net", "nets", "bridge"}, func() Spec { return &NetworkSpec{} }},
	{KindOverlayNetwork, "overlaynetworks", []string{"overlaynetwork", "overlaynetworks", "overlay", "overlays"}, func() Spec { return &OverlayNetworkSpec{} }},
	{KindNetworkSegment, "networksegments", []string{"networksegment", "networksegments", "segment", "segments"}, func() Spec { return &NetworkSegmentSpec{} }},
	{KindDHCPLease, "dhcpleases", []string{"dhcplease", "dhcpleases", "lease", "leases"}, func() Spec { return &DHCPLeaseSpec{} }},
	{KindPortSecurity, "portsecurities", []string{"portsecurity", "portsecurities", "portsec"}, func() Spec { return &PortSecuritySpec{} }},
	{KindExternalIP, "externalips", []string{"externalip", "externalips", "ippool", "ippools", "extip"}, func() Spec { return &ExternalIPSpec{} }},
	{KindVPCRouter, "vpcrouters", []string{"vpcrouter", "vpcrouters", "router", "routers"}, func() Spec { return &VPCRouterSpec{} }},
}

// KindNames returns the canonical names of the kinds pivirtd serves, in
// Kinds' order.
func KindNames() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Kind
	}
	return names
}

// KindList names the kinds pivirtd serves, comma-separated, in Kinds'
// order: the one list help texts print.
func KindList() string { return strings.Join(KindNames(), ", ") }

// OtherKind is a kind of seed 002's tables that this dataplane node does
// not serve: the host tier's VM, storage and network kinds, and the
// cluster tier's. Naming one gets a clear answer instead of "unknown".
type OtherKind struct {
	Kind    string
	Aliases []string
	Tier    string // who serves it
}

// OtherKinds lists them. Seed 002 gives ExternalIP the aliases "ippool"
// and "ippools", which are also the cluster tier's IPPool kind spelled in
// lower case: on this node they stay ExternalIP's, and IPPool has none.
var OtherKinds = []OtherKind{
	{"VirtualMachine", []string{"vm", "vms", "virtualmachine", "virtualmachines"}, "host tier's VM runtime"},
	{"StoragePool", []string{"pool", "pools", "storagepool", "storagepools"}, "host tier's storage"},
	{"VirtualDisk", []string{"disk", "disks", "virtualdisk", "virtualdisks"}, "host tier's storage"},
	{"Snapshot", []string{"snap", "snaps", "snapshot", "snapshots"}, "host tier's VM runtime"},
	{"IPPool", nil, "cluster IPAM"},
	{"IPAllocation", []string{"ipallocation", "ipallocations"}, "cluster IPAM"},
	{"IPReservation", []string{"ipreservation", "ipreservations"}, "cluster IPAM"},
	{"Datastore", []string{"datastore", "datastores"}, "cluster storage"},
	{"PortGroup", []string{"portgroup", "portgroups"}, "cluster networking"},
	{"Task", []string{"task", "tasks"}, "cluster and node tasks"},
	{"Organization", []string{"organization", "organizations"}, "cluster tenancy"},
	{"Project", []string{"project", "projects"}, "cluster tenancy"},
	{"Quota", []string{"quota", "quotas"}, "cluster tenancy"},
	{"RoleBinding", []string{"rolebinding", "rolebindings"}, "cluster tenancy"},
	{"VPC", []string{"vpc", "vpcs"}, "cluster networking"},
	{"Subnet", []string{"subnet", "subnets"}, "cluster networking"},
	{"FloatingIP", []string{"floatingip", "floatingips"}, "cluster networking"},
	{"SecurityGroup", []string{"securitygroup", "securitygroups"}, "cluster networking"},
}

// ErrNotServed wraps the lookup of a kind this node knows but does not serve.
var ErrNotServed = errors.New("not served by this pivirtd")

// ErrUnknownKind wraps the lookup of a name no kind has.
var ErrUnknownKind = errors.New("unknown kind")

// LookupKind resolves a kind name or alias, case-insensitively. A kind of
// seed 002 this node does not serve gets ErrNotServed, naming it and what
// is served; any other name ErrUnknownKind with the closest served name.
func LookupKind(name string) (KindInfo, error) {
	n := strings.ToLower(name)
	for _, k := range Kinds {
		if strings.ToLower(k.Kind) == n {
			return k, nil
		}
		for _, a := range k.Aliases {
			if a == n {
				return k, nil
			}
		}
	}
	var served []string
	for _, k := range Kinds {
		served = append(served, k.Kind)
	}
	for _, o := range OtherKinds {
		if strings.ToLower(o.Kind) == n || slices.Contains(o.Aliases, n) {
			what := o.Kind
			if n != strings.ToLower(o.Kind) {
				what = fmt.Sprintf("%s (%s)", o.Kind, n)
			}
			return KindInfo{}, fmt.Errorf("%s is %w: it serves %s (%s belongs to the %s)", what, ErrNotServed, strings.Join(served, ", "), o.Kind, o.Tier)
		}
	}
	var known []string
	for _, k := range Kinds {
		known = append(known, k.Aliases...)
	}
	sort.Strings(known)
	// Suggest only names within 3 edits, fewer for short names ("pods"
	// is not a misspelt "nets").
	best, bestD := "", min(4, len(n)/3+2)
	for _, k := range known {
		if d := editDistance(n, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return KindInfo{}, fmt.Errorf("%w %q: did you mean %q? (pivirtctl api-resources lists the kinds)", ErrUnknownKind, name, best)
	}
	return KindInfo{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownKind, name, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance of a and b (short names only).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
