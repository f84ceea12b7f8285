// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"fmt"
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
// (segments before the leases that name them).
var Kinds = []KindInfo{
	{KindNetworkSegment, "networksegments", []string{"networksegment", "networksegments", "segment", "segments"}, func() Spec { return &NetworkSegmentSpec{} }},
	{KindDHCPLease, "dhcpleases", []string{"dhcplease", "dhcpleases", "lease", "leases"}, func() Spec { return &DHCPLeaseSpec{} }},
	{KindPortSecurity, "portsecurities", []string{"portsecurity", "portsecurities", "portsec"}, func() Spec { return &PortSecuritySpec{} }},
	{KindExternalIP, "externalips", []string{"externalip", "externalips", "ippool", "ippools", "extip"}, func() Spec { return &ExternalIPSpec{} }},
	{KindVPCRouter, "vpcrouters", []string{"vpcrouter", "vpcrouters", "router", "routers"}, func() Spec { return &VPCRouterSpec{} }},
}

// LookupKind resolves a kind name or alias, case-insensitively.
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
	var known []string
	for _, k := range Kinds {
		known = append(known, k.Aliases...)
	}
	sort.Strings(known)
	return KindInfo{}, fmt.Errorf("unknown kind %q (known: %s)", name, strings.Join(known, ", "))
}
