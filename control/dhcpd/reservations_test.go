// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"sigs.k8s.io/yaml"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/control/store/bolt"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// segmentFixture is a manager on a bolt store, admission's BeforeCommit
// hooked to it, and the segment vm-net (br-vm, range .100-.199) in its
// server and ledger, no responder running.
type segmentFixture struct {
	st  *bolt.Store
	ix  *admission.Index
	m   *Manager
	dir string // the manager's JournalDir
	seg segment.Segment
	cfg server.Segment
}

// apply stores one object (YAML) and returns the revision it committed at.
func (f *segmentFixture) apply(t *testing.T, y string) int64 {
	t.Helper()
	return applyYAML(t, f.ix, f.st, y)
}

// decodeYAML decodes one object manifest.
func decodeYAML(t *testing.T, y string) *pivirtv1.Object {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	o, err := pivirtv1.DecodeObject(j)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// applyYAML stores one object (YAML) through the index and returns the
// revision it committed at.
func applyYAML(t *testing.T, ix *admission.Index, st store.Store, y string) int64 {
	t.Helper()
	o := decodeYAML(t, y)
	rev, err := ix.Update(context.Background(), st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err })
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func newSegmentFixture(t *testing.T) *segmentFixture {
	t.Helper()
	ctx := context.Background()
	st := newStore(t)
	f := &segmentFixture{st: st, ix: admission.NewIndex(), dir: t.TempDir()}
	f.m, _ = newManager(t, st, f.ix, f.dir)
	f.ix.BeforeCommit, f.ix.AfterCommit = f.m.BeforeCommit, f.m.AfterCommit
	f.apply(t, `{apiVersion: pivirt.hu/v1, kind: NetworkSegment, metadata: {name: vm-net},
		spec: {networkRef: vm-net, bridge: br-vm, hostIP: 192.168.100.1/24, dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.199}}}`)
	segObj, err := st.Get(ctx, pivirtv1.KindNetworkSegment, "vm-net")
	if err != nil {
		t.Fatal(err)
	}
	if f.seg, err = segment.Decode(segObj); err != nil {
		t.Fatal(err)
	}
	if f.cfg, err = serverSegment(f.seg); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.srv.Apply(time.Now(), server.Input{Segment: f.cfg}); err != nil {
		t.Fatal(err)
	}
	f.m.ledger.setSegments(map[uint32]segInfo{f.cfg.ID: {seg: f.seg, bridge: "br-vm", leaseTime: time.Hour}})
	return f
}

// wantBinding checks that the server, the lease database and pv_leases
// all bind mac to want (invalid: none of them binds mac).
func (f *segmentFixture) wantBinding(t *testing.T, mac net.HardwareAddr, want netip.Addr) {
	t.Helper()
	var got []netip.Addr
	for _, l := range f.m.srv.Leases(f.cfg.ID) {
		if l.MAC.String() == mac.String() {
			got = append(got, l.IP)
		}
	}
	if len(got) > 1 || (len(got) == 1) != want.IsValid() || (len(got) == 1 && got[0] != want) {
		t.Errorf("the server binds %s to %v, want %v", mac, got, want)
	}
	c, live, _ := f.m.ledger.db.Lookup(f.cfg.ID, mac)
	if live != want.IsValid() || (live && c.IP != want) {
		t.Errorf("the lease database holds %s at %s (live %v), want %v", mac, c.IP, live, want)
	}
	lm := f.m.Leases.(*leaseMap)
	lm.mu.Lock()
	pinned := lm.bound[mac.String()]
	lm.mu.Unlock()
	if pinned != want {
		t.Errorf("pv_leases pins %s to %v, want %v", mac, pinned, want)
	}
}

// ask sends one client message to the fixture's server and returns the reply.
func (f *segmentFixture) ask(t *testing.T, mac net.HardwareAddr, typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	msg, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(typ)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := f.m.srv.Handle(time.Now(), server.Request{Segment: f.cfg.ID, SrcMAC: mac, Msg: msg, Broadcast: true})
	if rep.Msg == nil {
		t.Fatalf("no reply to %s", typ)
	}
	return rep.Msg
}

// TestReservationSurvivesAnOlderSync: a reservation applied to a MAC that
// holds a dynamic lease reaches the server before `apply` returns. A Sync
// from a snapshot taken before the apply (a reconcile already under way)
// must not take it back out: the client's INIT-REBOOT for its old address
// is NAKed and its DISCOVER offered the reserved address (CI saw the
// client ACKed its old address in that window).
func TestReservationSurvivesAnOlderSync(t *testing.T) {
	ctx := context.Background()
	f := newSegmentFixture(t)
	st, m, seg, cfg := f.st, f.m, f.seg, f.cfg
	mac, _ := net.ParseMAC("52:54:00:00:00:c1")
	now := time.Now()
	old := netip.MustParseAddr("192.168.100.150")
	if _, err := m.srv.Load(now, cfg.ID, server.Tables{Leases: server.Unrecorded(server.Lease{IP: old, MAC: mac, Expires: now.Add(time.Hour)})}); err != nil {
		t.Fatal(err)
	}
	// The reconcile under way read the store before the reservation.
	_, staleRev, err := st.List(ctx, pivirtv1.KindDHCPLease, nil)
	if err != nil {
		t.Fatal(err)
	}
	rev := f.apply(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: c1-reservation},
		spec: {network: br-vm, macAddress: "52:54:00:00:00:c1", ipAddress: 192.168.100.140}}`)
	if rev <= staleRev {
		t.Fatalf("reservation committed at %d, not after the snapshot's %d", rev, staleRev)
	}
	reserved := func() int { st, _ := m.srv.Stats(cfg.ID); return st.Reserved }
	if err := m.apply(ctx, server.Input{Segment: cfg, Revision: staleRev}); err != nil || reserved() != 1 {
		t.Fatalf("a Sync from a snapshot older than the reservation: %v; the server reserves %v, want the reservation", err, reserved())
	}

	ask := func(typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		return f.ask(t, mac, typ, mods...)
	}
	if r := ask(dhcpv4.MessageTypeRequest, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(old.AsSlice()))); r.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("INIT-REBOOT for the superseded %s got %s %s, want NAK", old, r.MessageType(), r.YourIPAddr)
	}
	if r := ask(dhcpv4.MessageTypeDiscover); r.MessageType() != dhcpv4.MessageTypeOffer || !r.YourIPAddr.Equal(net.IP{192, 168, 100, 140}) {
		t.Errorf("DISCOVER got %s %s, want OFFER 192.168.100.140", r.MessageType(), r.YourIPAddr)
	}

	// The next Sync's snapshot holds the reservation: the store says.
	leases, rev, err := st.List(ctx, pivirtv1.KindDHCPLease, nil)
	if err != nil {
		t.Fatal(err)
	}
	static := segmentReservations(seg, leases, reconcile.Snapshot{Revision: rev})
	if err := m.apply(ctx, server.Input{Segment: cfg, Reservations: static, Revision: rev}); err != nil || reserved() != 1 {
		t.Errorf("after the store caught up: %v; the server reserves %v, want the stored one", err, reserved())
	}
	// The intent is spent: the stale snapshot now sets its reservations.
	if err := m.apply(ctx, server.Input{Segment: cfg, Revision: staleRev}); err != nil || reserved() != 0 {
		t.Errorf("a snapshot older than a spent intent: %v; the server reserves %v, want none", err, reserved())
	}
}
