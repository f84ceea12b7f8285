// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Map names, as pinned under <bpffs>/maps.
const (
	MapDNAT     = "pv_nat_dnat"
	MapSNAT     = "pv_nat_snat"
	MapStats    = "pv_nat_stats"
	MapCounters = "pv_nat_counters"
	MapMasqNets = "pv_masq_nets"
	MapMasqCT   = "pv_masq_ct"
	MapHairpin  = "pv_nat_hairpin"
)

// MapNames lists every NAT map.
var MapNames = []string{MapDNAT, MapSNAT, MapStats, MapCounters, MapMasqNets, MapMasqCT, MapHairpin}

// Program names, as in bpf/tc_nat.c.
const (
	ProgIn  = "pv_tc_nat_in"
	ProgOut = "pv_tc_nat_out"
	// ProgHairpin runs at tcx ingress of a NAT Network's bridge.
	ProgHairpin = "pv_tc_nat_hp"
)

// Go mirrors of the C structs and enums of bpf/include/pivirt/{consts,types}.h.
type (
	// Key mirrors struct pv_nat_key.
	Key = tc_natPvNatKey
	// Val mirrors struct pv_nat_val.
	Val = tc_natPvNatVal
	// Traffic mirrors struct pv_nat_traffic (one CPU's share).
	Traffic = tc_natPvNatTraffic
	// CountsKey mirrors struct pv_nat_counts_key.
	CountsKey = tc_natPvNatCountsKey
	// Counts mirrors struct pv_nat_counts (one CPU's share).
	Counts = tc_natPvNatCounts
	// Flags mirrors enum pv_nat_flags.
	Flags = tc_natPvNatFlags
	// Reason mirrors enum pv_nat_reason.
	Reason = tc_natPvNatReason
	// MasqNetKey mirrors struct pv_masq_net_key.
	MasqNetKey = tc_natPvMasqNetKey
	// MasqNet mirrors struct pv_masq_net.
	MasqNet = tc_natPvMasqNet
	// MasqKey mirrors struct pv_masq_key.
	MasqKey = tc_natPvMasqKey
	// MasqVal mirrors struct pv_masq_val.
	MasqVal = tc_natPvMasqVal
	// MasqState mirrors enum pv_masq_state.
	MasqState = tc_natPvMasqState
	// HairpinKey mirrors struct pv_hairpin_key.
	HairpinKey = tc_natPvHairpinKey
	// HairpinVal mirrors struct pv_hairpin_val.
	HairpinVal = tc_natPvHairpinVal
)

// Mapping flags (enum pv_nat_flags).
const (
	FlagOneToOne Flags = tc_natPvNatFlagsPV_NAT_ONE_TO_ONE
	FlagPorts    Flags = tc_natPvNatFlagsPV_NAT_PORTS
	FlagARP      Flags = tc_natPvNatFlagsPV_NAT_ARP
)

// Reasons (enum pv_nat_reason); from ReasonDropMin on, drops.
const (
	ReasonARPReply  Reason = tc_natPvNatReasonPV_NAT_R_ARP_REPLY
	ReasonICMPError Reason = tc_natPvNatReasonPV_NAT_R_ICMP_ERROR
	ReasonFragment  Reason = tc_natPvNatReasonPV_NAT_R_FRAGMENT
	// ReasonRedirect: forwarded by the program (bpf_redirect).
	ReasonRedirect Reason = tc_natPvNatReasonPV_NAT_R_REDIRECT
	// ReasonRedirectNeigh: forwarded by the program while the next hop
	// was unresolved (bpf_redirect_neigh).
	ReasonRedirectNeigh Reason = tc_natPvNatReasonPV_NAT_R_REDIRECT_NEIGH
	// ReasonStack: translated, then forwarded (or delivered, or refused)
	// by the kernel's stack.
	ReasonStack Reason = tc_natPvNatReasonPV_NAT_R_STACK
	// ReasonMasqNew: a NAT Network's new flow took a port.
	ReasonMasqNew Reason = tc_natPvNatReasonPV_NAT_R_MASQ_NEW
	// ReasonHairpinNew: a guest reached a forwarded port of its uplink;
	// a hairpin flow took a gateway port.
	ReasonHairpinNew Reason = tc_natPvNatReasonPV_NAT_R_HAIRPIN_NEW
	ReasonDropMin    Reason = tc_natPvNatReasonPV_NAT_R_DROP_MIN
	ReasonMalformed  Reason = tc_natPvNatReasonPV_NAT_R_MALFORMED
	ReasonFragPorts  Reason = tc_natPvNatReasonPV_NAT_R_FRAG_PORTS
	ReasonICMPInner  Reason = tc_natPvNatReasonPV_NAT_R_ICMP_INNER
	// ReasonMasqFull: a new flow refused, the flow table full.
	ReasonMasqFull Reason = tc_natPvNatReasonPV_NAT_R_MASQ_FULL
	// ReasonMasqPorts: a new flow refused, no free port to its destination.
	ReasonMasqPorts Reason = tc_natPvNatReasonPV_NAT_R_MASQ_PORTS
	// ReasonMasqFrag: a fragment of a masqueraded flow, dropped.
	ReasonMasqFrag Reason = tc_natPvNatReasonPV_NAT_R_MASQ_FRAG
	// ReasonMasqProto: leaving a NAT Network in a protocol masquerade does
	// not carry.
	ReasonMasqProto Reason = tc_natPvNatReasonPV_NAT_R_MASQ_PROTO
	// ReasonHairpinUnrouted: a hairpin packet the program could not
	// forward (no route, TTL expiring, IP options, too big), dropped.
	ReasonHairpinUnrouted Reason = tc_natPvNatReasonPV_NAT_R_HAIRPIN_UNROUTED
	ReasonMax             Reason = tc_natPvNatReasonPV_NAT_R_MAX
)

var reasonNames = map[Reason]string{
	ReasonARPReply:        "arp-reply",
	ReasonICMPError:       "icmp-error-translated",
	ReasonFragment:        "fragment-translated",
	ReasonRedirect:        "redirected",
	ReasonRedirectNeigh:   "redirected-neigh",
	ReasonStack:           "left-to-stack",
	ReasonMalformed:       "malformed",
	ReasonFragPorts:       "fragment-of-forwarded-port",
	ReasonICMPInner:       "icmp-error-untranslatable",
	ReasonMasqNew:         "masq-new-flow",
	ReasonMasqFull:        "masq-table-full",
	ReasonMasqPorts:       "masq-no-free-port",
	ReasonMasqFrag:        "masq-fragment",
	ReasonMasqProto:       "masq-protocol-not-carried",
	ReasonHairpinNew:      "hairpin-new-flow",
	ReasonHairpinUnrouted: "hairpin-unrouted",
}

// String is the reason's stable kebab-case name; unknown values print as
// reason-N.
func (r tc_natPvNatReason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", uint32(r))
}

// Drop reports whether packets with this reason are dropped.
func (r tc_natPvNatReason) Drop() bool { return r >= ReasonDropMin }

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

// String lists the set flags, or "none".
func (f tc_natPvNatFlags) String() string {
	names := []string{"oneToOne", "ports", "arp"}
	var s []string
	v := uint32(f)
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

// ScopeInterface is the scope id of host-mode ExternalIPs on ifname.
func ScopeInterface(ifname string) uint32 { return scope("if:" + ifname) }

// ScopeRouter is the scope id of the ExternalIPs of a VPCRouter.
func ScopeRouter(name string) uint32 { return scope("router:" + name) }

// scope is FNV-1a, never 0 (0 is the unconfigured program's scope).
func scope(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	if v := h.Sum32(); v != 0 {
		return v
	}
	return 1
}

// BE32 is the in-memory form of a __be32 field holding addr.
func BE32(addr netip.Addr) uint32 { return typed.BE32(addr) }

// Addr4 is the inverse of BE32.
func Addr4(be uint32) netip.Addr { return typed.Addr4(be) }

// BE16 is the in-memory form of a __be16 field holding port.
func BE16(port uint16) uint16 { return typed.BE16(port) }

// Port16 is the inverse of BE16.
func Port16(be uint16) uint16 { return typed.Port16(be) }

// Spec returns the CollectionSpec of bpf/tc_nat.c.
func Spec() (*ebpf.CollectionSpec, error) { return loadTc_nat() }

// Objects is one loaded instance of the NAT programs, for one uplink.
type Objects struct {
	In, Out                     *ebpf.Program
	DNAT, SNAT, Stats, Counters *ebpf.Map
	// MasqNets and MasqCT are the masquerade's: NAT Networks and flows.
	MasqNets, MasqCT *ebpf.Map
	// Hairpin is the program of a NAT Network's bridge, HairpinCT its
	// flows.
	Hairpin   *ebpf.Program
	HairpinCT *ebpf.Map
}

// Close releases the instance's file descriptors (pinned maps and links
// stay).
func (o *Objects) Close() error {
	var err error
	for _, c := range []*ebpf.Program{o.In, o.Out, o.Hairpin} {
		if c == nil {
			continue
		}
		if e := c.Close(); e != nil && err == nil {
			err = e
		}
	}
	o.closeMaps()
	return err
}

// Option changes how Load builds an instance.
type Option func(*config)

type config struct {
	noRedirect bool
	gateway    netip.Addr
}

// WithoutRedirect makes the ingress program hand every translated packet
// to the kernel's IP forwarding (netfilter FORWARD/POSTROUTING, rp_filter
// and the rest of ip_forward apply to it) instead of forwarding it itself
// with bpf_fib_lookup and bpf_redirect (pv_nat_redirect = 0).
func WithoutRedirect() Option { return func(c *config) { c.noRedirect = true } }

// WithGateway makes the hairpin program (ProgHairpin) begin the hairpin
// flows of the NAT Networks of the scope from gw, the gateway address of
// the bridge it is attached to. Without it the program only translates
// the replies of flows begun on another bridge.
func WithGateway(gw netip.Addr) Option { return func(c *config) { c.gateway = gw } }

// Load loads an instance whose programs translate the mappings of scope
// and answer ARP with mac. mapDir is where the maps are pinned by name
// (<bpffs>/maps; reused when compatible); "" loads private, unpinned maps,
// as tests do.
func Load(scope uint32, mac net.HardwareAddr, mapDir string, options ...Option) (*Objects, error) {
	spec, err := Spec()
	if err != nil {
		return nil, fmt.Errorf("loading NAT spec: %w", err)
	}
	return LoadSpec(spec, scope, mac, mapDir, options...)
}

// LoadSpec is Load with a spec the caller may have edited (tests resize
// maps).
func LoadSpec(spec *ebpf.CollectionSpec, scope uint32, mac net.HardwareAddr, mapDir string, options ...Option) (*Objects, error) {
	var cfg config
	for _, o := range options {
		o(&cfg)
	}
	var m [6]byte
	if len(mac) == 6 {
		copy(m[:], mac)
	}
	if err := spec.Variables["pv_nat_scope"].Set(scope); err != nil {
		return nil, fmt.Errorf("setting pv_nat_scope: %w", err)
	}
	if err := spec.Variables["pv_nat_mac"].Set(m); err != nil {
		return nil, fmt.Errorf("setting pv_nat_mac: %w", err)
	}
	redirect := uint8(1)
	if cfg.noRedirect {
		redirect = 0
	}
	if err := spec.Variables["pv_nat_redirect"].Set(redirect); err != nil {
		return nil, fmt.Errorf("setting pv_nat_redirect: %w", err)
	}
	var gw uint32
	if cfg.gateway.Is4() {
		gw = BE32(cfg.gateway)
	}
	if err := spec.Variables["pv_nat_gateway"].Set(gw); err != nil {
		return nil, fmt.Errorf("setting pv_nat_gateway: %w", err)
	}
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: mapDir}}
	if mapDir == "" {
		for _, ms := range spec.Maps {
			ms.Pinning = ebpf.PinNone
		}
	}
	var objs tc_natObjects
	if err := spec.LoadAndAssign(&objs, opts); err != nil {
		return nil, fmt.Errorf("loading NAT programs: %w", err)
	}
	return &Objects{
		In: objs.PvTcNatIn, Out: objs.PvTcNatOut,
		DNAT: objs.PvNatDnat, SNAT: objs.PvNatSnat, Stats: objs.PvNatStats, Counters: objs.PvNatCounters,
		MasqNets: objs.PvMasqNets, MasqCT: objs.PvMasqCt,
		Hairpin: objs.PvTcNatHp, HairpinCT: objs.PvNatHairpin,
	}, nil
}

// OpenMaps opens the NAT maps pinned under mapDir, creating and pinning
// any that are missing (a bpffs is mounted on mapDir's parent if it is
// not on one), without loading programs: for the control plane's sync and
// for inspect.
func OpenMaps(mapDir string) (*Objects, error) {
	if err := loader.EnsureBPFFS(filepath.Dir(mapDir)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mapDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", mapDir, err)
	}
	spec, err := Spec()
	if err != nil {
		return nil, fmt.Errorf("loading NAT spec: %w", err)
	}
	o := &Objects{}
	for name, dst := range map[string]**ebpf.Map{MapDNAT: &o.DNAT, MapSNAT: &o.SNAT, MapStats: &o.Stats, MapCounters: &o.Counters,
		MapMasqNets: &o.MasqNets, MapMasqCT: &o.MasqCT, MapHairpin: &o.HairpinCT} {
		m, err := ebpf.NewMapWithOptions(spec.Maps[name], ebpf.MapOptions{PinPath: mapDir})
		if err != nil {
			o.closeMaps()
			return nil, fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		*dst = m
	}
	return o, nil
}

func (o *Objects) closeMaps() {
	for _, m := range []*ebpf.Map{o.DNAT, o.SNAT, o.Stats, o.Counters, o.MasqNets, o.MasqCT, o.HairpinCT} {
		if m != nil {
			m.Close()
		}
	}
}
