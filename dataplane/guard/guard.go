// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// Map names, as pinned under <bpffs>/maps. A _vN suffix marks a layout
// change (the loader unpins RetiredMapNames).
const (
	MapPorts    = "pv_ports_v2"
	MapAllow4   = "pv_allow4"
	MapAllow6   = "pv_allow6"
	MapLeases   = "pv_leases"
	MapCounters = "pv_counters_v3"
	// The port ACL's (bpf/include/pivirt/acl_maps.h).
	MapACL       = "pv_acl_v2"
	MapConntrack = "pv_conntrack_v2"
	MapFrags     = "pv_acl_frags_v2"
	// The node's tunnel ports (bpf/include/pivirt/tunnel_maps.h), shared
	// with dataplane/vxlan's VTEP filter, which writes it.
	MapTunnelPorts = "pv_tunnel_ports"
)

// MapNames lists every guard map, the port ACL's included.
var MapNames = []string{MapPorts, MapAllow4, MapAllow6, MapLeases, MapCounters, MapACL, MapConntrack, MapFrags, MapTunnelPorts}

// RetiredMapNames are the guard maps of older layouts that a _vN name
// replaced: pv_ports (struct pv_port without counter_slot), pv_counters
// (a per-CPU hash keyed by ifindex) and pv_counters_v2 (24 reasons a
// slot, before the tunnel reason), pv_conntrack and pv_acl_frags (one LRU
// map for every port: a port's flood evicted the others' flows; the
// loader moves pv_conntrack's flows into their ports' maps first) and
// pv_acl (64 match entries a direction).
var RetiredMapNames = []string{"pv_ports", "pv_counters", "pv_counters_v2", RetiredConntrack, "pv_acl_frags", "pv_acl"}

// RetiredConntrack is the map of every port's flows before
// pv_conntrack_v2 gave each port its own.
const RetiredConntrack = "pv_conntrack"

// MaxPorts is PV_MAX_PORTS: the capacity of pv_ports_v2, and the highest
// counter slot (pv_counters_v3 has MaxPorts+1 entries; slot 0 is the
// bucket of ports written without a slot).
const MaxPorts = 65536

// CTPerPort is PV_CT_PER_PORT: the flows a port's map of pv_conntrack_v2
// holds unless pivirtd's --acl-flows-per-port says otherwise.
const CTPerPort = 4096

// Program names, as in the C sources (and truncated by nothing: ≤15 bytes).
const (
	ProgXDP = "pv_xdp_guard"
	ProgTCX = "pv_tcx_guard"
	ProgSim = "pv_tc_sim"
	// On a tap, at tcx ingress after the XDP guard: the virtio-net
	// header's checksum request, applied after XDP.
	ProgOffload = "pv_tcx_offload"
	// The port ACL: toward the VM at tcx egress, from it at tcx ingress.
	ProgACLToVM   = "pv_acl_to_vm"
	ProgACLFromVM = "pv_acl_from_vm"
	// The port ACL's simulation twins (count nothing, track nothing).
	ProgSimToVM   = "pv_sim_to_vm"
	ProgSimFromVM = "pv_sim_from_vm"
)

// ACLMaxRules is PV_ACL_MAX_RULES: match entries per direction of a port.
const ACLMaxRules = len(ACLSet{}.Rules)

// Go mirrors of the C structs of bpf/include/pivirt/types.h.
type (
	// PortKey mirrors struct pv_port_key.
	PortKey = typesPvPortKey
	// Port mirrors struct pv_port.
	Port = typesPvPort
	// Allow4Key mirrors struct pv_allow4_key.
	Allow4Key = typesPvAllow4Key
	// Allow6Key mirrors struct pv_allow6_key.
	Allow6Key = typesPvAllow6Key
	// Allow mirrors struct pv_allow.
	Allow = typesPvAllow
	// LeaseKey mirrors struct pv_lease_key.
	LeaseKey = typesPvLeaseKey
	// Lease mirrors struct pv_lease.
	Lease = typesPvLease
	// Counts mirrors struct pv_counts, the value of pv_counters_v3 (whose
	// key is a uint32 slot).
	Counts = typesPvCounts
	// Reason mirrors enum pv_reason.
	Reason = typesPvReason
	// PortFlags mirrors enum pv_port_flags.
	PortFlags = typesPvPortFlags
	// LeaseFlags mirrors enum pv_lease_flags.
	LeaseFlags = typesPvLeaseFlags
	// AllowFlags mirrors enum pv_allow_flags.
	AllowFlags = typesPvAllowFlags
	// ACLKey mirrors struct pv_acl_key.
	ACLKey = typesPvAclKey
	// ACLRule mirrors struct pv_acl_rule.
	ACLRule = typesPvAclRule
	// ACLSet mirrors struct pv_acl_set, the value of pv_acl.
	ACLSet = typesPvAclSet
	// CTKey mirrors struct pv_ct_key.
	CTKey = typesPvCtKey
	// CT mirrors struct pv_ct.
	CT = typesPvCt
	// FragKey mirrors struct pv_frag_key.
	FragKey = typesPvFragKey
	// Frag mirrors struct pv_frag.
	Frag = typesPvFrag
	// ACLDir mirrors enum pv_acl_dir.
	ACLDir = typesPvAclDir
	// ACLAction mirrors enum pv_acl_action.
	ACLAction = typesPvAclAction
	// ACLFlags mirrors enum pv_acl_flags.
	ACLFlags = typesPvAclFlags
)

// ACL directions, actions and flags (enum pv_acl_dir, pv_acl_action,
// pv_acl_flags). Ingress is toward the VM, as in the spec.
const (
	ACLIngress  ACLDir    = typesPvAclDirPV_ACL_INGRESS
	ACLEgress   ACLDir    = typesPvAclDirPV_ACL_EGRESS
	ACLDeny     ACLAction = typesPvAclActionPV_ACL_DENY
	ACLAllow    ACLAction = typesPvAclActionPV_ACL_ALLOW
	ACLStateful ACLFlags  = typesPvAclFlagsPV_ACL_STATEFUL
)

// Idle timeouts of tracked flows (enum pv_ct_timeout).
const (
	CTTimeoutTCP      = time.Duration(typesPvCtTimeoutPV_CT_TCP_TIMEOUT) * time.Second
	CTTimeoutTCPFin   = time.Duration(typesPvCtTimeoutPV_CT_TCP_FIN_TIMEOUT) * time.Second
	CTTimeoutTCPClose = time.Duration(typesPvCtTimeoutPV_CT_TCP_CLOSE_TIMEOUT) * time.Second
	CTTimeoutUDP      = time.Duration(typesPvCtTimeoutPV_CT_UDP_TIMEOUT) * time.Second
	CTTimeoutICMP     = time.Duration(typesPvCtTimeoutPV_CT_ICMP_TIMEOUT) * time.Second
	CTTimeoutOther    = time.Duration(typesPvCtTimeoutPV_CT_OTHER_TIMEOUT) * time.Second
)

// CTTCP is struct pv_ct.tcp: how a tracked TCP flow has ended (enum pv_ct_tcp).
type CTTCP uint8

// The bits of CTTCP.
const (
	CTFinFromVM CTTCP = CTTCP(typesPvCtTcpPV_CT_FIN_FROM_VM)
	CTFinToVM   CTTCP = CTTCP(typesPvCtTcpPV_CT_FIN_TO_VM)
	CTReset     CTTCP = CTTCP(typesPvCtTcpPV_CT_RST)
)

// String is "open", "reset", "closed" (FIN both ways), "fin-from-vm" or
// "fin-to-vm".
func (t CTTCP) String() string {
	switch {
	case t&CTReset != 0:
		return "reset"
	case t&(CTFinFromVM|CTFinToVM) == CTFinFromVM|CTFinToVM:
		return "closed"
	case t&CTFinFromVM != 0:
		return "fin-from-vm"
	case t&CTFinToVM != 0:
		return "fin-to-vm"
	}
	return "open"
}

// String is "ingress" or "egress".
func (d typesPvAclDir) String() string {
	switch d {
	case ACLIngress:
		return "ingress"
	case ACLEgress:
		return "egress"
	}
	return fmt.Sprintf("dir-%d", uint32(d))
}

// String is "allow" or "deny".
func (a typesPvAclAction) String() string {
	switch a {
	case ACLAllow:
		return "allow"
	case ACLDeny:
		return "deny"
	}
	return fmt.Sprintf("action-%d", uint32(a))
}

// String lists the set flags, or "none".
func (f typesPvAclFlags) String() string { return flagString(uint32(f), []string{"stateful"}) }

// Port flags (enum pv_port_flags).
const (
	PortDHCPGuard PortFlags = typesPvPortFlagsPV_PORT_DHCP_GUARD
	PortARPGuard  PortFlags = typesPvPortFlagsPV_PORT_ARP_GUARD
	PortRAGuard   PortFlags = typesPvPortFlagsPV_PORT_RA_GUARD
	PortLearnDHCP PortFlags = typesPvPortFlagsPV_PORT_LEARN_DHCP
	PortAny4      PortFlags = typesPvPortFlagsPV_PORT_ANY4
	PortAny6      PortFlags = typesPvPortFlagsPV_PORT_ANY6
	PortTunnels   PortFlags = typesPvPortFlagsPV_PORT_TUNNELS
)

// PortAddrs4 is how many IPv4 addresses struct pv_port holds inline
// (PV_PORT_ADDR4); further ones go to pv_allow4.
const PortAddrs4 = len(Port{}.Addr4)

// PortPrefixLens is how many distinct prefix lengths a port may use in
// pv_allow4 and in pv_allow6 (PV_PORT_PLENS).
const PortPrefixLens = len(Port{}.Plen4)

// Lease flags (enum pv_lease_flags).
const (
	LeaseStatic LeaseFlags = typesPvLeaseFlagsPV_LEASE_STATIC
	LeaseBound  LeaseFlags = typesPvLeaseFlagsPV_LEASE_BOUND
)

// Allow flags (enum pv_allow_flags).
const (
	AllowAddress AllowFlags = typesPvAllowFlagsPV_ALLOW_ADDRESS
	AllowPair    AllowFlags = typesPvAllowFlagsPV_ALLOW_PAIR
)

// Reasons (enum pv_reason). Those below ReasonDropMin pass.
const (
	ReasonPass         Reason = typesPvReasonPV_R_PASS
	ReasonPassLease    Reason = typesPvReasonPV_R_PASS_LEASE
	ReasonPassDHCP     Reason = typesPvReasonPV_R_PASS_DHCP
	ReasonPassUnspec6  Reason = typesPvReasonPV_R_PASS_UNSPEC6
	ReasonNotGuarded   Reason = typesPvReasonPV_R_NOT_GUARDED
	ReasonPassToVM     Reason = typesPvReasonPV_R_PASS_TO_VM
	ReasonDropMin      Reason = typesPvReasonPV_R_DROP_MIN
	ReasonMalformed    Reason = typesPvReasonPV_R_MALFORMED
	ReasonVLAN         Reason = typesPvReasonPV_R_VLAN
	ReasonEthertype    Reason = typesPvReasonPV_R_ETHERTYPE
	ReasonSrcMAC       Reason = typesPvReasonPV_R_SRC_MAC
	ReasonIP4Src       Reason = typesPvReasonPV_R_IP4SRC
	ReasonLeaseExpired Reason = typesPvReasonPV_R_LEASE_EXPIRED
	ReasonDHCPServer   Reason = typesPvReasonPV_R_DHCP_SERVER
	ReasonARPSHA       Reason = typesPvReasonPV_R_ARP_SHA
	ReasonARPSPA       Reason = typesPvReasonPV_R_ARP_SPA
	ReasonARPOp        Reason = typesPvReasonPV_R_ARP_OP
	ReasonIP6Src       Reason = typesPvReasonPV_R_IP6SRC
	ReasonRA           Reason = typesPvReasonPV_R_RA
	ReasonACLEgress    Reason = typesPvReasonPV_R_ACL_EGRESS
	ReasonACLIngress   Reason = typesPvReasonPV_R_ACL_INGRESS
	ReasonNDSpoof      Reason = typesPvReasonPV_R_ND_SPOOF
	ReasonDHCPSpoof    Reason = typesPvReasonPV_R_DHCP_SPOOF
	ReasonTunnel       Reason = typesPvReasonPV_R_TUNNEL
	ReasonFragHeader   Reason = typesPvReasonPV_R_FRAG_HEADER
	ReasonMcastRouter  Reason = typesPvReasonPV_R_MCAST_ROUTER
	ReasonCsumOffload  Reason = typesPvReasonPV_R_CSUM_OFFLOAD
	ReasonMax          Reason = typesPvReasonPV_R_MAX
)

var reasonNames = map[Reason]string{
	ReasonPass:         "pass",
	ReasonPassLease:    "pass-lease",
	ReasonPassDHCP:     "pass-dhcp-client",
	ReasonPassUnspec6:  "pass-ipv6-unspecified",
	ReasonNotGuarded:   "not-guarded",
	ReasonPassToVM:     "pass-to-vm",
	ReasonMalformed:    "malformed",
	ReasonVLAN:         "vlan",
	ReasonEthertype:    "ethertype",
	ReasonSrcMAC:       "src-mac",
	ReasonIP4Src:       "ipv4-src",
	ReasonLeaseExpired: "lease-expired",
	ReasonDHCPServer:   "dhcp-server",
	ReasonARPSHA:       "arp-sha",
	ReasonARPSPA:       "arp-spa",
	ReasonARPOp:        "arp-op",
	ReasonIP6Src:       "ipv6-src",
	ReasonRA:           "router-advertisement",
	ReasonACLEgress:    "acl-egress",
	ReasonACLIngress:   "acl-ingress",
	ReasonNDSpoof:      "nd-spoof",
	ReasonDHCPSpoof:    "dhcp-spoof",
	ReasonTunnel:       "tunnel",
	ReasonFragHeader:   "fragment-header",
	ReasonMcastRouter:  "multicast-router",
	ReasonCsumOffload:  "checksum-offload",
}

// String is the reason's stable kebab-case name, as in counters and
// `pivirtctl simulate`; unknown values print as reason-N.
func (r typesPvReason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", uint32(r))
}

// Drop reports whether frames with this reason are dropped.
func (r typesPvReason) Drop() bool { return r >= ReasonDropMin }

// Reasons lists every named reason in value order.
func Reasons() []Reason {
	var rs []Reason
	for r := Reason(0); r < ReasonMax; r++ {
		if _, ok := reasonNames[r]; ok {
			rs = append(rs, r)
		}
	}
	return rs
}

// ParseReason is the inverse of Reason.String.
func ParseReason(s string) (Reason, error) {
	for r, n := range reasonNames {
		if n == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown reason %q", s)
}

// String lists the set flags by their spec names, or "none".
func (f typesPvPortFlags) String() string {
	return flagString(uint32(f), []string{"dhcpGuard", "arpGuard", "raGuard", "learnFromDHCP", "any4", "any6", "allowTunnels"})
}

// String lists the set flags, or "none".
func (f typesPvLeaseFlags) String() string {
	return flagString(uint32(f), []string{"static", "bound"})
}

// String lists the set flags, or "none".
func (f typesPvAllowFlags) String() string {
	return flagString(uint32(f), []string{"address", "pair"})
}

func flagString(v uint32, names []string) string {
	var s []string
	for i, n := range names {
		if v&(1<<i) != 0 {
			s = append(s, n)
			v &^= 1 << i
		}
	}
	if v != 0 {
		s = append(s, fmt.Sprintf("0x%x", v))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// XDPSpec returns the CollectionSpec of the XDP guard (pv_xdp_guard).
func XDPSpec() (*ebpf.CollectionSpec, error) { return loadXdp_guard() }

// TCXSpec returns the CollectionSpec of the tcx ingress guard (pv_tcx_guard).
func TCXSpec() (*ebpf.CollectionSpec, error) { return loadTcx_guard() }

// SimSpec returns the CollectionSpec of the simulation twin (pv_tc_sim).
func SimSpec() (*ebpf.CollectionSpec, error) { return loadTc_sim() }

// ACLSpec returns the CollectionSpec of the port ACL (pv_acl_to_vm,
// pv_acl_from_vm).
func ACLSpec() (*ebpf.CollectionSpec, error) { return loadTcx_acl() }

// ACLSimSpec returns the CollectionSpec of the port ACL's simulation twins
// (pv_sim_to_vm, pv_sim_from_vm).
func ACLSimSpec() (*ebpf.CollectionSpec, error) { return loadTc_acl_sim() }

// TypesSpec returns the CollectionSpec of bpf/types.c: every map, never
// loaded, used to check layouts.
func TypesSpec() (*ebpf.CollectionSpec, error) { return loadTypes() }
