// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Masquerade states (enum pv_masq_state).
const (
	MasqSYN  MasqState = tc_natPvMasqStatePV_MASQ_SYN
	MasqEst  MasqState = tc_natPvMasqStatePV_MASQ_EST
	MasqFIN  MasqState = tc_natPvMasqStatePV_MASQ_FIN
	MasqUDP  MasqState = tc_natPvMasqStatePV_MASQ_UDP
	MasqICMP MasqState = tc_natPvMasqStatePV_MASQ_ICMP
)

// Flow directions (enum pv_masq_dir).
const (
	MasqOut = uint8(tc_natPvMasqDirPV_MASQ_OUT)
	MasqIn  = uint8(tc_natPvMasqDirPV_MASQ_IN)
)

// Default port range of masquerade: below Linux's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999), so a flow never takes the
// 5-tuple of a connection of the host itself.
const (
	MasqPortMin = 1024
	MasqPortMax = 32767
)

// Timeout is how long a flow in state s lives past its last packet
// (enum pv_masq_timeout, shared with the program's comments).
func (s tc_natPvMasqState) Timeout() time.Duration {
	var t tc_natPvMasqTimeout
	switch s {
	case MasqSYN:
		t = tc_natPvMasqTimeoutPV_MASQ_T_SYN
	case MasqEst:
		t = tc_natPvMasqTimeoutPV_MASQ_T_EST
	case MasqFIN:
		t = tc_natPvMasqTimeoutPV_MASQ_T_FIN
	case MasqUDP:
		t = tc_natPvMasqTimeoutPV_MASQ_T_UDP
	default:
		t = tc_natPvMasqTimeoutPV_MASQ_T_ICMP
	}
	return time.Duration(t) * time.Second
}

func (s tc_natPvMasqState) String() string {
	switch s {
	case MasqSYN:
		return "SYN_SENT"
	case MasqEst:
		return "ESTABLISHED"
	case MasqFIN:
		return "CLOSING"
	case MasqUDP, MasqICMP:
		return ""
	}
	return fmt.Sprintf("state-%d", uint32(s))
}

// MasqNetKeyOf is the pv_masq_nets key of a NAT Network's CIDR on scope.
func MasqNetKeyOf(scope uint32, cidr netip.Prefix) MasqNetKey {
	return MasqNetKey{Prefixlen: uint32(32 + cidr.Bits()), Scope: scope, Addr: BE32(cidr.Masked().Addr())}
}

// PutMasqNet makes traffic from cidr leaving through scope's uplink take
// the address addr and ports min..max.
func (o *Objects) PutMasqNet(scope uint32, cidr netip.Prefix, addr netip.Addr, min, max uint16) error {
	k, v := MasqNetKeyOf(scope, cidr), MasqNet{Addr: BE32(addr), PortMin: min, PortMax: max}
	if err := o.MasqNets.Put(&k, &v); err != nil {
		return fmt.Errorf("masquerading %s through %s: %w", cidr, addr, err)
	}
	return nil
}

// MasqNetEntries lists the NAT Networks the maps masquerade.
func (o *Objects) MasqNetEntries() (map[MasqNetKey]MasqNet, error) {
	out := map[MasqNetKey]MasqNet{}
	var k MasqNetKey
	var v MasqNet
	it := o.MasqNets.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", MapMasqNets, err)
	}
	return out, nil
}

// DeleteMasqNet stops masquerading cidr on scope (its flows expire).
func (o *Objects) DeleteMasqNet(k MasqNetKey) error {
	if err := o.MasqNets.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("deleting %s from %s: %w", k.String(), MapMasqNets, err)
	}
	return nil
}

func (k MasqNetKey) String() string {
	return fmt.Sprintf("scope=0x%08x %s/%d", k.Scope, Addr4(k.Addr), k.Prefixlen-32)
}

func (v MasqNet) String() string {
	return fmt.Sprintf("%s ports %d-%d", Addr4(v.Addr), v.PortMin, v.PortMax)
}

// Flow is one masqueraded flow, as conntrack -L shows one.
type Flow struct {
	Scope                uint32
	Proto                uint8
	State                MasqState
	Guest, Remote        netip.AddrPort // the private side and the remote end
	Public               netip.AddrPort // what the guest's packets leave from
	Seen                 time.Duration  // since the last packet, either way
	Expires              time.Duration  // until its timeout (<= 0: due to be deleted)
	HasReply, HasForward bool           // the IN and the OUT entries exist
	// Hairpin: a hairpin flow (pv_nat_hairpin, no scope) from a guest to
	// a forwarded port (Remote), which went to Target from Public (the
	// bridge's gateway address and a port).
	Hairpin bool
	Target  netip.AddrPort
}

// monoNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_coarse_ns.
func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Flows lists the masqueraded flows, an OUT entry and its IN partner as
// one flow.
func (o *Objects) Flows() ([]Flow, error) { return ListFlows(o.MasqCT) }

// ListFlows lists the flows of a pv_masq_ct map.
func ListFlows(ct *ebpf.Map) ([]Flow, error) {
	now := monoNow()
	type half struct {
		k MasqKey
		v MasqVal
	}
	var outs, ins []half
	var k MasqKey
	var v MasqVal
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if k.Dir == MasqOut {
			outs = append(outs, half{k, v})
		} else {
			ins = append(ins, half{k, v})
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", MapMasqCT, err)
	}
	byIn := map[MasqKey]MasqVal{}
	for _, h := range ins {
		byIn[h.k] = h.v
	}
	flows := make([]Flow, 0, len(outs))
	for _, h := range outs {
		f := Flow{Scope: h.k.Scope, Proto: h.k.Proto, State: MasqState(h.v.State), HasForward: true,
			Guest:  addrPort(h.k.Saddr, h.k.Sport),
			Remote: addrPort(h.k.Daddr, h.k.Dport),
			Public: addrPort(h.v.Addr, h.v.Port)}
		seen := h.v.SeenNs
		ik := replyKey(h.k, h.v)
		if iv, ok := byIn[ik]; ok {
			f.HasReply = true
			seen = max(seen, iv.SeenNs)
			delete(byIn, ik)
		}
		f.age(now, seen)
		flows = append(flows, f)
	}
	for ik, iv := range byIn { // an IN entry whose OUT is gone
		f := Flow{Scope: ik.Scope, Proto: ik.Proto, State: MasqState(iv.State), HasReply: true,
			Guest:  addrPort(iv.Addr, iv.Port),
			Remote: addrPort(ik.Saddr, ik.Sport),
			Public: addrPort(ik.Daddr, ik.Dport)}
		f.age(now, iv.SeenNs)
		flows = append(flows, f)
	}
	return flows, nil
}

// age sets f's Seen and Expires from seenNs, the last time (CLOCK_MONOTONIC)
// one of its entries saw a packet.
func (f *Flow) age(now time.Duration, seenNs uint64) {
	f.Seen = now - time.Duration(seenNs)
	f.Expires = f.State.Timeout() - f.Seen
}

// replyKey is the IN key of the flow whose OUT entry is (k, v).
func replyKey(k MasqKey, v MasqVal) MasqKey {
	return MasqKey{Scope: k.Scope, Saddr: k.Daddr, Daddr: v.Addr, Sport: k.Dport, Dport: v.Port, Proto: k.Proto, Dir: MasqIn}
}

// ExpireFlows deletes the masqueraded and hairpin flows past their
// timeout (both entries, and a half whose partner is gone once it is past
// its own), and returns how many flows went. The program never reuses an
// expired entry: this is what frees their ports and table room.
func (o *Objects) ExpireFlows() (int, error) {
	flows, err := o.Flows()
	if err != nil {
		return 0, err
	}
	n, err := expire(o.MasqCT, flows, masqKeys)
	if err != nil {
		return n, fmt.Errorf("expiring masqueraded flows: %w", err)
	}
	if o.HairpinCT == nil {
		return n, nil
	}
	if flows, err = o.HairpinFlows(); err != nil {
		return n, err
	}
	h, err := expire(o.HairpinCT, flows, hairpinKeys)
	if err != nil {
		return n + h, fmt.Errorf("expiring hairpin flows: %w", err)
	}
	return n + h, nil
}

// expire deletes from ct the entries (keys gives them) of the flows past
// their timeout.
func expire(ct *ebpf.Map, flows []Flow, keys func(Flow) []any) (int, error) {
	n := 0
	var errs []error
	for _, f := range flows {
		if f.Expires > 0 {
			continue
		}
		for _, k := range keys(f) {
			if err := ct.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
		}
		n++
	}
	return n, errors.Join(errs...)
}

// masqKeys are the pv_masq_ct keys of a masqueraded flow's entries.
func masqKeys(f Flow) []any {
	var ks []any
	if f.HasForward {
		ks = append(ks, &MasqKey{Scope: f.Scope, Saddr: BE32(f.Guest.Addr()), Daddr: BE32(f.Remote.Addr()), Sport: BE16(f.Guest.Port()),
			Dport: BE16(f.Remote.Port()), Proto: f.Proto, Dir: MasqOut})
	}
	if f.HasReply {
		ks = append(ks, &MasqKey{Scope: f.Scope, Saddr: BE32(f.Remote.Addr()), Daddr: BE32(f.Public.Addr()), Sport: BE16(f.Remote.Port()),
			Dport: BE16(f.Public.Port()), Proto: f.Proto, Dir: MasqIn})
	}
	return ks
}

// String is the flow as one conntrack -L line: protocol, timeout left,
// state, the original direction and the reply's.
func (f Flow) String() string {
	st := f.State.String()
	if st != "" {
		st += " "
	}
	exp := max(f.Expires, 0).Truncate(time.Second)
	replier := f.Remote
	if f.Hairpin {
		replier = f.Target
	}
	return fmt.Sprintf("%s %d %ssrc=%s dst=%s sport=%d dport=%d src=%s dst=%s sport=%d dport=%d",
		ProtoName(f.Proto), int(exp.Seconds()), st,
		f.Guest.Addr(), f.Remote.Addr(), f.Guest.Port(), f.Remote.Port(),
		replier.Addr(), f.Public.Addr(), replier.Port(), f.Public.Port())
}
