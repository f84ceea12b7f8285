// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestFailedCommitPutsLeasesBack: BeforeCommit serves the operator's
// lease writes before the transaction commits; when the commit then
// fails (etcd gone between admission and commit), the store keeps what
// it had, and so must the server, the lease database and pv_leases: an
// import is taken back, a deleted lease bound again, an edit undone. A
// change made since (the client renewed) stands, and a commit that
// succeeds undoes nothing.
func TestFailedCommitPutsLeasesBack(t *testing.T) {
	const macA, nameA = "52:54:00:a1:b2:c3", "lease-52-54-00-a1-b2-c3"
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ip := netip.MustParseAddr
	hwA, _ := net.ParseMAC(macA)
	spec := func(ipA string) *pivirtv1.DHCPLeaseSpec {
		e := exp
		return &pivirtv1.DHCPLeaseSpec{Network: "br-vm", MACAddress: macA, IPAddress: ipA, Type: pivirtv1.LeaseDynamic, ExpiresAt: &e}
	}
	obj := &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease, Metadata: pivirtv1.ObjectMeta{Name: nameA}}
	for _, tc := range []struct {
		name    string
		stored  string // A's binding before the write ("": none)
		written admission.Written
		renew   bool // the client renews between BeforeCommit and the failure
		ok      bool // the commit succeeds
		want    netip.Addr
	}{
		{name: "an import", written: admission.Written{Object: obj, Spec: spec("192.168.100.145")}},
		{name: "an address edit", stored: "192.168.100.120",
			written: admission.Written{Object: obj, Spec: spec("192.168.100.130"), Old: spec("192.168.100.120")}, want: ip("192.168.100.120")},
		{name: "a deletion", stored: "192.168.100.120",
			written: admission.Written{Object: obj, Spec: spec("192.168.100.120"), Old: spec("192.168.100.120"), Deleted: true}, want: ip("192.168.100.120")},
		{name: "an import its client renewed since", renew: true,
			written: admission.Written{Object: obj, Spec: spec("192.168.100.145")}, want: ip("192.168.100.145")},
		{name: "an import that commits", ok: true,
			written: admission.Written{Object: obj, Spec: spec("192.168.100.145")}, want: ip("192.168.100.145")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSegmentFixture(t)
			if err := f.m.ledger.recoverDB(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.m.ledger.db.Close() })
			if tc.stored != "" {
				bindAndStore(t, f, macA, tc.stored, exp)
			}
			const rev = 1000
			tc.written.Revision = rev
			f.m.BeforeCommit([]admission.Written{tc.written})
			if tc.renew {
				renewed := change(server.Renewed, macA, "192.168.100.145", exp.Add(time.Hour))
				renewed.Segment, renewed.At = f.cfg.ID, time.Now()
				if _, err := f.m.srv.Import(time.Now(), f.cfg.ID, renewed.Lease, false); err != nil {
					t.Fatal(err)
				}
				if err := f.m.ledger.Persist(t.Context(), []server.LeaseChange{renewed}); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if !tc.ok {
				err = errors.New("etcd unreachable")
			}
			f.m.AfterCommit(rev, rev, err)

			f.wantBinding(t, hwA, tc.want)
		})
	}
}
