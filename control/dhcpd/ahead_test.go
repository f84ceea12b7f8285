// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
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

func res(mac, ip string) server.Reservation {
	hw, _ := net.ParseMAC(mac)
	return server.Reservation{MAC: hw, IP: netip.MustParseAddr(ip)}
}

func TestAheadMerge(t *testing.T) {
	type added struct {
		r    server.Reservation
		rev  int64
		gone bool // a deletion (remove)
	}
	cases := []struct {
		name      string
		ahead     []added
		static    []server.Reservation // the snapshot's
		rev       int64                // the snapshot's
		want      []server.Reservation
		wantAhead int // still ahead after the merge
	}{
		{"none ahead", nil, []server.Reservation{res("52:54:00:00:00:01", "192.168.100.110")}, 7,
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.110")}, 0},
		{"an older snapshot keeps it", []added{{r: res("52:54:00:00:00:02", "192.168.100.105"), rev: 8}},
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.110")}, 7,
			[]server.Reservation{res("52:54:00:00:00:02", "192.168.100.105"), res("52:54:00:00:00:01", "192.168.100.110")}, 1},
		{"it replaces the snapshot's of its MAC", []added{{r: res("52:54:00:00:00:01", "192.168.100.140"), rev: 8}},
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.110")}, 7,
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.140")}, 1},
		{"it replaces the snapshot's of its address", []added{{r: res("52:54:00:00:00:03", "192.168.100.110"), rev: 8}},
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.110")}, 7,
			[]server.Reservation{res("52:54:00:00:00:03", "192.168.100.110")}, 1},
		{"a snapshot that holds it forgets it", []added{{r: res("52:54:00:00:00:02", "192.168.100.105"), rev: 8}},
			[]server.Reservation{res("52:54:00:00:00:02", "192.168.100.105")}, 8,
			[]server.Reservation{res("52:54:00:00:00:02", "192.168.100.105")}, 0},
		{"a later snapshot without it (its commit failed) forgets it", []added{{r: res("52:54:00:00:00:02", "192.168.100.105"), rev: 8}},
			nil, 9, nil, 0},
		{"only the ones past the snapshot stay", []added{{r: res("52:54:00:00:00:02", "192.168.100.105"), rev: 8}, {r: res("52:54:00:00:00:04", "192.168.100.104"), rev: 10}},
			[]server.Reservation{res("52:54:00:00:00:02", "192.168.100.105")}, 9,
			[]server.Reservation{res("52:54:00:00:00:04", "192.168.100.104"), res("52:54:00:00:00:02", "192.168.100.105")}, 1},
		{"a deletion ahead takes the older snapshot's out", []added{{r: res("52:54:00:00:00:01", "0.0.0.0"), rev: 8, gone: true}},
			[]server.Reservation{res("52:54:00:00:00:01", "192.168.100.110"), res("52:54:00:00:00:02", "192.168.100.105")}, 7,
			[]server.Reservation{res("52:54:00:00:00:02", "192.168.100.105")}, 1},
		{"a snapshot past the deletion forgets it", []added{{r: res("52:54:00:00:00:01", "0.0.0.0"), rev: 8, gone: true}},
			nil, 8, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a ahead
			for _, x := range tc.ahead {
				if x.gone {
					a.remove(7, x.r.MAC, x.rev)
				} else {
					a.add(7, x.r, x.rev)
				}
			}
			got := a.merge(7, tc.static, tc.rev)
			if !slices.EqualFunc(got, tc.want, sameReservation) {
				t.Errorf("merge = %v, want %v", got, tc.want)
			}
			if n := len(a.res[7]); n != tc.wantAhead {
				t.Errorf("%d still ahead, want %d", n, tc.wantAhead)
			}
		})
	}
}

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
	st, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
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
	if _, err := f.m.srv.SetSegment(f.cfg); err != nil {
		t.Fatal(err)
	}
	f.m.ledger.setSegments(map[uint32]segInfo{f.cfg.ID: {seg: f.seg, bridge: "br-vm", leaseTime: time.Hour}})
	return f
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
	if err := m.srv.LoadLeases(now, cfg.ID, []server.Lease{{IP: old, MAC: mac, Expires: now.Add(time.Hour)}}); err != nil {
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
	if _, set := m.loadReservations(seg.Name, cfg.ID, nil, nil, staleRev, m.resDirty.Swap(false)); !set {
		t.Fatal("the older Sync did not set the reservations, as a Sync after BeforeCommit must")
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
	static, _, _ := m.segmentLeases(seg, leases, reconcile.Snapshot{Revision: rev}, nil)
	got, _ := m.loadReservations(seg.Name, cfg.ID, nil, static, rev, false)
	if len(got) != 1 || got[0].IP != netip.MustParseAddr("192.168.100.140") || len(m.ahead.res) != 0 {
		t.Errorf("after the store caught up: reservations %v, %d segments ahead; want the stored one, none ahead", got, len(m.ahead.res))
	}
}

// TestAheadCommitted: a reservation noted at the revision its transaction
// expected follows the commit to where it landed (another node's commit
// can come first on etcd), so a snapshot between the two keeps it; one
// whose commit failed is forgotten at once.
func TestAheadCommitted(t *testing.T) {
	r := res("52:54:00:00:00:02", "192.168.100.105")
	for _, tc := range []struct {
		name      string
		committed int64
		err       error
		kept      bool // by a snapshot at revision 9
	}{
		{"landed where expected", 8, nil, false},
		{"landed after another writer's", 12, nil, true},
		{"failed", 0, errors.New("etcd: no leader"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a ahead
			a.add(7, r, 8)
			a.committed(8, tc.committed, tc.err)
			got := a.merge(7, nil, 9)
			if kept := len(got) == 1; kept != tc.kept {
				t.Errorf("a snapshot at 9 has %v, want it kept: %v", got, tc.kept)
			}
		})
	}
}
