// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// HairpinFlows lists the hairpin flows, an OUT entry and its IN partner
// as one flow.
func (o *Objects) HairpinFlows() ([]Flow, error) { return ListHairpinFlows(o.HairpinCT) }

// ListHairpinFlows lists the flows of a pv_nat_hairpin map: Guest to
// Remote (the forwarded address and port) as the guest sent them, Target
// to Public (the gateway's address and port) as the reply came.
func ListHairpinFlows(ct *ebpf.Map) ([]Flow, error) {
	now := monoNow()
	byKey := map[HairpinKey]HairpinVal{}
	var k HairpinKey
	var v HairpinVal
	it := ct.Iterate()
	for it.Next(&k, &v) {
		byKey[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", MapHairpin, err)
	}
	var flows []Flow
	for k, v := range byKey {
		if v.Dir != MasqOut {
			continue
		}
		f := hairpinOut(k, v)
		seen := v.SeenNs
		rk := hairpinReplyKey(k, v)
		if rv, ok := byKey[rk]; ok && rv.Dir == MasqIn {
			f.HasReply = true
			seen = max(seen, rv.SeenNs)
			delete(byKey, rk)
		}
		f.age(now, seen)
		flows = append(flows, f)
	}
	for k, v := range byKey { // an IN entry whose OUT is gone
		if v.Dir != MasqIn {
			continue
		}
		f := Flow{Proto: k.Proto, State: MasqState(v.State), HasReply: true, Hairpin: true,
			Guest:  addrPort(v.Daddr, v.Dport),
			Remote: addrPort(v.Saddr, v.Sport),
			Public: addrPort(k.Daddr, k.Dport),
			Target: addrPort(k.Saddr, k.Sport)}
		f.age(now, v.SeenNs)
		flows = append(flows, f)
	}
	return flows, nil
}

// hairpinOut is the flow of an OUT entry (the guest's packets).
func hairpinOut(k HairpinKey, v HairpinVal) Flow {
	return Flow{Proto: k.Proto, State: MasqState(v.State), HasForward: true, Hairpin: true,
		Guest:  addrPort(k.Saddr, k.Sport),
		Remote: addrPort(k.Daddr, k.Dport),
		Public: addrPort(v.Saddr, v.Sport),
		Target: addrPort(v.Daddr, v.Dport)}
}

// hairpinReplyKey is the IN key of the flow whose OUT entry is (k, v):
// the translated packet turned around.
func hairpinReplyKey(k HairpinKey, v HairpinVal) HairpinKey {
	return HairpinKey{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport, Proto: k.Proto}
}

// hairpinKeys are the pv_nat_hairpin keys of a hairpin flow's entries.
func hairpinKeys(f Flow) []any {
	var ks []any
	if f.HasForward {
		ks = append(ks, &HairpinKey{Saddr: BE32(f.Guest.Addr()), Daddr: BE32(f.Remote.Addr()),
			Sport: BE16(f.Guest.Port()), Dport: BE16(f.Remote.Port()), Proto: f.Proto})
	}
	if f.HasReply {
		ks = append(ks, &HairpinKey{Saddr: BE32(f.Target.Addr()), Daddr: BE32(f.Public.Addr()),
			Sport: BE16(f.Target.Port()), Dport: BE16(f.Public.Port()), Proto: f.Proto})
	}
	return ks
}

func addrPort(addr uint32, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(Addr4(addr), Port16(port))
}
