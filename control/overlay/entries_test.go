// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

// TestEntries: the flood list goes to every other Ready member's VTEP;
// leases and ports on those members place their MACs there and give
// their single addresses neighbour entries; a lease wins a MAC over a
// port; nothing is placed on this node's own or a not-Ready member, and
// no member's gateway gets a neighbour entry.
func TestEntries(t *testing.T) {
	ip := netip.MustParseAddr
	gw := ip("10.50.0.1")
	c := &Controller{Node: "n1", VTEP: ip("10.99.0.1")}
	ms := []member{
		{name: "s1", node: "n1", bridge: "br-ov", networkRef: "net", local: true, ready: true, vtep: ip("10.99.0.1"), gateway: gw},
		{name: "s2", node: "n2", bridge: "br-ov", networkRef: "net", ready: true, vtep: ip("10.99.0.2"), gateway: gw},
		{name: "s3", node: "n3", bridge: "br-ov", networkRef: "net", ready: true, vtep: ip("10.99.0.3"), gateway: gw},
		{name: "s4", node: "n4", bridge: "br-ov", networkRef: "net", vtep: ip("10.99.0.4"), gateway: gw}, // not Ready
	}
	leases := []lease{
		{name: "a", network: "net", node: "n2", mac: "52:54:00:00:00:02", ip: ip("10.50.0.52")},
		{name: "b", network: "net", node: "n1", mac: "52:54:00:00:00:01", ip: ip("10.50.0.11")},  // local
		{name: "c", network: "other", node: "n3", mac: "52:54:00:00:00:09", ip: ip("10.60.0.9")}, // not on the overlay
		{name: "d", network: "net", node: "n4", mac: "52:54:00:00:00:04", ip: ip("10.50.0.94")},  // not Ready
		{name: "e", network: "net", node: "n3", mac: "52:54:00:00:00:0e", ip: gw},                // claims the gateway
	}
	ports := []port{
		{name: "p1", node: "n3", segment: "s3", macs: []string{"52:54:00:00:00:03", "52:54:00:00:00:33"},
			addrs: []vxlan.Neighbour{{IP: ip("10.50.0.200"), MAC: "52:54:00:00:00:03"}, {IP: ip("fd00::200"), MAC: "52:54:00:00:00:03"},
				{IP: ip("10.50.0.201"), MAC: "52:54:00:00:00:33"}}},
		{name: "p2", node: "n3", segment: "s3", macs: []string{"52:54:00:00:00:02"}}, // the lease on n2 has it
		{name: "p3", node: "n3", segment: "other-seg", macs: []string{"52:54:00:00:00:99"}},
	}
	fdb, neigh := c.entries(ms, leases, ports)
	wantFDB := []vxlan.Entry{vxlan.Flood(ip("10.99.0.2")), vxlan.Flood(ip("10.99.0.3")),
		{MAC: "52:54:00:00:00:02", Dst: ip("10.99.0.2")}, {MAC: "52:54:00:00:00:0e", Dst: ip("10.99.0.3")},
		{MAC: "52:54:00:00:00:03", Dst: ip("10.99.0.3")}, {MAC: "52:54:00:00:00:33", Dst: ip("10.99.0.3")}}
	if !slices.Equal(fdb, wantFDB) {
		t.Errorf("FDB\n%v, want\n%v", fdb, wantFDB)
	}
	wantNeigh := []vxlan.Neighbour{{IP: ip("10.50.0.52"), MAC: "52:54:00:00:00:02"},
		{IP: ip("10.50.0.200"), MAC: "52:54:00:00:00:03"}, {IP: ip("fd00::200"), MAC: "52:54:00:00:00:03"},
		{IP: ip("10.50.0.201"), MAC: "52:54:00:00:00:33"}}
	if !slices.Equal(neigh, wantNeigh) {
		t.Errorf("neighbours\n%v, want\n%v", neigh, wantNeigh)
	}
}

// TestReact: a PortSecurity's status change starts a pass only when it
// moves the port to another segment; a segment's when its phase or VTEP
// changes (not its lease counts); a lease's
// deletion always (renewals: reconcile.DynamicLease, tested there).
func TestReact(t *testing.T) {
	obj := func(kind, status string, gen int64) *pivirtv1.Object {
		o := &pivirtv1.Object{Kind: kind, Metadata: pivirtv1.ObjectMeta{Name: "x", Generation: gen, UID: "u"}}
		if kind == pivirtv1.KindDHCPLease {
			o.Spec = json.RawMessage(`{"network":"net","macAddress":"52:54:00:00:00:01","ipAddress":"10.0.0.2","type":"dynamic"}`)
		}
		o.Status = json.RawMessage(status)
		return o
	}
	ps := pivirtv1.KindPortSecurity
	for _, tc := range []struct {
		name string
		c    reconcile.Change
		want bool
	}{
		{"port counters", reconcile.Change{Type: store.Modified, Old: obj(ps, `{"segment":"s1","counters":{"pass":1}}`, 1),
			Object: obj(ps, `{"segment":"s1","counters":{"pass":2}}`, 1)}, false},
		{"port joins a segment", reconcile.Change{Type: store.Modified, Old: obj(ps, `{}`, 1), Object: obj(ps, `{"segment":"s1"}`, 1)}, true},
		{"port spec", reconcile.Change{Type: store.Modified, Old: obj(ps, `{}`, 1), Object: obj(ps, `{}`, 2)}, true},
		{"segment status", reconcile.Change{Type: store.Modified, Old: obj(pivirtv1.KindNetworkSegment, `{}`, 1),
			Object: obj(pivirtv1.KindNetworkSegment, `{"phase":"Ready"}`, 1)}, true},
		{"segment VTEP", reconcile.Change{Type: store.Modified, Old: obj(pivirtv1.KindNetworkSegment, `{"phase":"Ready"}`, 1),
			Object: obj(pivirtv1.KindNetworkSegment, `{"phase":"Ready","vtep":"10.97.0.2"}`, 1)}, true},
		{"segment lease counts", reconcile.Change{Type: store.Modified, Old: obj(pivirtv1.KindNetworkSegment, `{"phase":"Ready","vtep":"10.97.0.2","dhcp":{"leased":3}}`, 1),
			Object: obj(pivirtv1.KindNetworkSegment, `{"phase":"Ready","vtep":"10.97.0.2","dhcp":{"leased":4}}`, 1)}, false},
		{"lease ends", reconcile.Change{Type: store.Deleted, Object: obj(pivirtv1.KindDHCPLease, `{}`, 2)}, true},
	} {
		if got := React(tc.c); got != tc.want {
			t.Errorf("%s: React = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWakeAtExpiry: the pass after which a dynamic lease is the next to
// expire sets a timer that calls Wake once it has; a pass with no such
// lease cancels it.
func TestWakeAtExpiry(t *testing.T) {
	woke := make(chan time.Time, 2)
	c := &Controller{Wake: func() { woke <- time.Now() }}
	now := time.Now()
	c.wakeAt(now.Add(100*time.Millisecond), now)
	select {
	case at := <-woke:
		if at.Before(now.Add(100 * time.Millisecond)) {
			t.Errorf("woke %v after the pass, before the expiry", at.Sub(now))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake not called within 5 s of an expiry 100 ms away")
	}
	c.wakeAt(time.Now().Add(100*time.Millisecond), time.Now())
	c.wakeAt(time.Time{}, time.Now())
	select {
	case <-woke:
		t.Error("Wake called after the timer was cancelled")
	case <-time.After(300 * time.Millisecond):
	}
}
