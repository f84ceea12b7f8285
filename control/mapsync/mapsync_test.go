// SPDX-License-Identifier: Apache-2.0

package mapsync_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/test/testutil"
)

func TestPrivilegedSyncGuard(t *testing.T) {
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]*ebpf.Map{}
	for _, name := range guard.MapNames {
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		m, err := ebpf.NewMap(ms)
		testutil.SkipIfNotSupported(t, err)
		t.Cleanup(func() { m.Close() })
		raw[name] = m
	}
	ports, leases := portmap.New(raw[guard.MapPorts]), leasemap.New(raw[guard.MapLeases])
	counters := countermap.New(raw[guard.MapCounters], raw[guard.MapPorts])
	ct := ctmap.New(raw[guard.MapConntrack], spec.Maps[guard.MapConntrack].InnerMap)
	for _, port := range []uint32{7, 8} {
		if err := ct.Ensure(port, 0); err != nil {
			t.Fatal(err)
		}
	}
	ms := mapsync.GuardMaps{Ports: ports, Allow4: allowmap.New4(raw[guard.MapAllow4]),
		Allow6: allowmap.New6(raw[guard.MapAllow6]), Leases: leases, Counters: counters,
		ACL: aclmap.New(raw[guard.MapACL]), Conntrack: ct}

	host := compile.Host{Links: map[string]compile.Link{"tap0": {Index: 7, Master: "br0"}, "tap1": {Index: 8, Master: "br0"}}}
	seg := obj(t, pivirtv1.KindNetworkSegment, "seg", pivirtv1.NetworkSegmentSpec{Bridge: "br0", HostIP: "192.168.100.1/24"})
	lease := obj(t, pivirtv1.KindDHCPLease, "l", pivirtv1.DHCPLeaseSpec{Network: "br0", MACAddress: "52:54:00:00:00:01", IPAddress: "192.168.100.20"})
	p0 := obj(t, pivirtv1.KindPortSecurity, "p0", pivirtv1.PortSecuritySpec{Interface: "tap0", MACAddress: "52:54:00:00:00:01",
		IPAddresses: []string{"192.168.100.10"}, IPv6Addresses: []string{"2001:db8::1"},
		AllowedAddressPairs: []pivirtv1.AddressPair{{IPAddress: "10.0.0.0/24"}}})
	p1 := obj(t, pivirtv1.KindPortSecurity, "p1", pivirtv1.PortSecuritySpec{Interface: "tap1", MACAddress: "52:54:00:00:00:02",
		IPAddresses: []string{"192.168.100.11"},
		ACL:         &pivirtv1.ACLSpec{Ingress: []pivirtv1.ACLRule{{Action: "allow", Protocol: "tcp", Ports: []string{"22"}}}}})

	check := func(d compile.Desired) {
		t.Helper()
		for name, eq := range map[string]func() (bool, error){
			guard.MapPorts: func() (bool, error) {
				l, err := typed.Read(ms.Ports)
				return cmp.Equal(withoutSlots(t, l), d.Ports), err
			},
			guard.MapAllow4: func() (bool, error) { l, err := typed.Read(ms.Allow4); return cmp.Equal(l, d.Allow4), err },
			guard.MapAllow6: func() (bool, error) { l, err := typed.Read(ms.Allow6); return cmp.Equal(l, d.Allow6), err },
			guard.MapACL:    func() (bool, error) { l, err := typed.Read(ms.ACL); return cmp.Equal(l, d.ACL), err },
		} {
			ok, err := eq()
			if err != nil || !ok {
				t.Errorf("%s does not match desired (err %v)", name, err)
			}
		}
	}

	// Stale counts in the slots the ports will get: zeroed first.
	for _, slot := range []uint32{1, 2} {
		var c guard.Counts
		c.Pkts[guard.ReasonSrcMAC] = 99
		if err := raw[guard.MapCounters].Put(slot, c); err != nil {
			t.Fatal(err)
		}
	}
	d1 := compile.Compile([]*pivirtv1.Object{seg, lease, p0, p1}, host)
	res, err := mapsync.SyncGuard(ms, d1)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[guard.MapPorts]; r.Added != 2 {
		t.Errorf("ports: %s, want 2 added", r)
	}
	check(d1)
	for _, ifindex := range []uint32{7, 8} {
		if tot, err := counters.Lookup(countermap.NewKey(ifindex)); err != nil || tot != (countermap.Totals{}) {
			t.Errorf("counters of new port %d: %s, %v; want a zeroed slot", ifindex, tot, err)
		}
	}
	slot0, err := ports.Lookup(portmap.NewKey(7))
	if err != nil || slot0.CounterSlot == 0 {
		t.Fatalf("port 7: %s, %v; want a counter slot", slot0, err)
	}

	// The DHCP server acknowledges the reservation: bound in place.
	lk := leasemap.NewKey(compile.SegmentID("seg"), [6]uint8{0x52, 0x54, 0, 0, 0, 1})
	bound := leasemap.NewValue(netip.MustParseAddr("192.168.100.20"), guard.LeaseStatic, time.Now().Add(time.Hour), time.Hour, 0)
	if err := leases.Put(lk, bound); err != nil {
		t.Fatal(err)
	}

	if r := res[guard.MapACL]; r.Added != 2 {
		t.Errorf("acl: %s, want both directions of p1 added", r)
	}
	// Flows the ACL of p1 (ifindex 8) tracked, and a stray one of 7.
	flow := func(ifindex uint32, port uint16) ctmap.Key {
		return ctmap.NewKey(ifindex, 6, netip.MustParseAddrPort("192.168.100.11:22"), netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port))
	}
	for _, k := range []ctmap.Key{flow(8, 40000), flow(8, 40001), flow(7, 40002)} {
		if err := ct.Put(k, ctmap.Value{SeenMonoNs: 1, Version: 1}); err != nil {
			t.Fatal(err)
		}
	}

	// p1 goes away, p0 changes its address and its pair and gets an ACL.
	p0.Spec = []byte(`{"interface":"tap0","macAddress":"52:54:00:00:00:01","ipAddresses":["192.168.100.12"],"allowedAddressPairs":[{"ipAddress":"10.1.0.0/24"}],` +
		`"acl":{"egress":[{"action":"deny","protocol":"udp","ports":["53"]}]}}`)
	d2 := compile.Compile([]*pivirtv1.Object{seg, lease, p0}, host)
	drift, err := mapsync.GuardDrift(ms, d2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range drift {
		if r.Map == guard.MapPorts && (len(r.Update) != 1 || len(r.Delete) != 1 || len(r.Add) != 0) {
			t.Errorf("ports drift %+v, want 1 update 1 delete", r)
		}
		if r.Map == guard.MapLeases && (len(r.Add)+len(r.Update)+len(r.Delete) != 0) {
			t.Errorf("leases drift %+v, want none", r)
		}
	}
	res, err = mapsync.SyncGuard(ms, d2)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[guard.MapPorts]; r.Deleted != 1 || r.Updated != 1 {
		t.Errorf("ports: %s, want 1 deleted, 1 updated", r)
	}
	if r := res[guard.MapAllow4]; r.Added != 1 || r.Deleted != 1 {
		t.Errorf("allow4: %s, want 1 added 1 deleted", r)
	}
	if r := res[guard.MapAllow6]; r.Deleted != 1 {
		t.Errorf("allow6: %s, want 1 deleted", r)
	}
	if r := res[guard.MapACL]; r.Added != 2 || r.Deleted != 2 {
		t.Errorf("acl: %s, want p0's 2 added and p1's 2 deleted", r)
	}
	if r := res[guard.MapConntrack]; r.Deleted != 2 {
		t.Errorf("conntrack: %s, want the 2 flows of p1 forgotten", r)
	}
	if live, err := typed.Read[ctmap.Key, ctmap.Value](ct); err != nil || len(live) != 1 {
		t.Errorf("conntrack after p1 went: %v, %v; want only the flow of port 7", live, err)
	} else if _, ok := live[flow(7, 40002)]; !ok {
		t.Errorf("the flow of port 7, which still has an ACL, was forgotten: %v", live)
	}
	if r := res[guard.MapLeases]; r.Changed() {
		t.Errorf("leases: %s, want the binding kept", r)
	}
	if got, err := leases.Lookup(lk); err != nil || got != bound {
		t.Errorf("lease after sync: %s, %v; want %s", got, err, bound)
	}
	check(d2)
	if v, err := ports.Lookup(portmap.NewKey(7)); err != nil || v.CounterSlot != slot0.CounterSlot {
		t.Errorf("updated port 7: %s, %v; want its slot %d kept", v, err, slot0.CounterSlot)
	}

	drift, err = mapsync.GuardDrift(ms, d2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range drift {
		if len(r.Add)+len(r.Update)+len(r.Delete) != 0 {
			t.Errorf("drift after sync: %+v", r)
		}
	}

	// A second sync of the same state writes nothing.
	res, err = mapsync.SyncGuard(ms, d2)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range res {
		if r.Changed() {
			t.Errorf("%s changed on an idempotent sync: %s", name, r)
		}
	}
}

// withoutSlots returns live ports with their counter slots cleared (as
// compile leaves them), after checking every port has its own slot.
func withoutSlots(t *testing.T, live map[portmap.Key]portmap.Value) map[portmap.Key]portmap.Value {
	t.Helper()
	out := map[portmap.Key]portmap.Value{}
	seen := map[uint32]bool{}
	for k, v := range live {
		if v.CounterSlot == 0 || seen[v.CounterSlot] {
			t.Errorf("%v: counter slot %d is not its own", k, v.CounterSlot)
		}
		seen[v.CounterSlot] = true
		v.CounterSlot = 0
		out[k] = v
	}
	return out
}
