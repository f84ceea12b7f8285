// SPDX-License-Identifier: Apache-2.0

package test

// End to end over DHCP through the real pivirtd: real dhclient, udhcpc and
// dhcpcd guests on two segments, a static reservation, leases listed as
// DHCPLease objects, renew, release, delete, the guard learning the leased
// address, a daemon restart after which a client renews the same
// address, and a SIGKILL right after an ACK that loses nothing.
//
//   pvt-host netns: pivirtd
//     br-dha 10.61.0.1/24 (range .100-.150) ── a1 (dhclient, guarded)
//                                           ── a2 (udhcpc), a3 (dhcpcd)
//                                           ── s1 (dhclient, reserved .120)
//     br-dhb 10.62.0.1/24 (range .100-.150) ── b1 (dhclient)

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const dhcpManifests = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: dh-a}
spec:
  networkRef: net-dh-a
  bridge: br-dha
  hostIP: 10.61.0.1/24
  dhcp: {delegatedRangeStart: 10.61.0.100, delegatedRangeEnd: 10.61.0.150, defaultLeaseTime: 600, dnsServers: [10.61.0.1], domainName: a.test}
---
apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: dh-b}
spec:
  networkRef: net-dh-b
  bridge: br-dhb
  hostIP: 10.62.0.1/24
  dhcp: {delegatedRangeStart: 10.62.0.100, delegatedRangeEnd: 10.62.0.150}
---
apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: s1-reservation}
spec: {network: br-dha, macAddress: "52:54:00:61:00:99", ipAddress: 10.61.0.120, hostname: s1}
---
apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: a1-nic0}
spec: {interface: hpa1, macAddress: "52:54:00:61:00:01"}
`

type leaseObj struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Network    string     `json:"network"`
		MACAddress string     `json:"macAddress"`
		IPAddress  string     `json:"ipAddress"`
		Type       string     `json:"type"`
		ExpiresAt  *time.Time `json:"expiresAt"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

func leases(t *testing.T, d *harness.Daemon) map[string]leaseObj {
	t.Helper()
	var list struct {
		Items []leaseObj `json:"items"`
	}
	out := d.MustCtl("get", "leases", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding leases: %v\n%s", err, out)
	}
	m := map[string]leaseObj{}
	for _, l := range list.Items {
		m[l.Metadata.Name] = l
	}
	return m
}

func leaseName(mac net.HardwareAddr) string {
	return "lease-" + strings.ReplaceAll(mac.String(), ":", "-")
}

func inRange(a netip.Addr, lo, hi string) bool {
	return a.IsValid() && netip.MustParseAddr(lo).Compare(a) <= 0 && a.Compare(netip.MustParseAddr(hi)) <= 0
}

func TestPrivilegedDHCPThroughPivirtd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "udhcpc", "dhcpcd", "ping", "curl")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{"--metrics", "127.0.0.1:9464"}})
	if r := d.CtlStdin([]byte(dhcpManifests), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "both segments Ready", func() bool {
		out := d.Ctl("get", "segments").Stdout
		return strings.Count(out, "Ready") == 2
	})
	for _, br := range []string{"br-dha", "br-dhb"} {
		if err := host.Do(func() error { _, err := netlink.LinkByName(br); return err }); err != nil {
			t.Fatalf("bridge %s: %v", br, err)
		}
	}

	a1 := guest.Attach(t, host, "br-dha", "hpa1", net.HardwareAddr{0x52, 0x54, 0, 0x61, 0, 1})
	a2 := guest.Attach(t, host, "br-dha", "", nil)
	a3 := guest.Attach(t, host, "br-dha", "", nil)
	s1 := guest.Attach(t, host, "br-dha", "", net.HardwareAddr{0x52, 0x54, 0, 0x61, 0, 0x99})
	b1 := guest.Attach(t, host, "br-dhb", "", nil)

	// The guard is on a1's port before it asks: its DHCP passes the guard.
	waitFor(t, 10*time.Second, "a1's port attached", func() bool {
		return strings.Contains(d.Ctl("get", "portsec", "a1-nic0", "-o", "yaml").Stdout, "attach: tcx")
	})
	a1.Dhclient(t)
	a2.Udhcpc(t)
	a3.Dhcpcd(t)
	s1.Dhclient(t)
	b1.Dhclient(t)

	for _, c := range []struct {
		name   string
		g      *guest.Guest
		lo, hi string
	}{
		{"dhclient", a1, "10.61.0.100", "10.61.0.150"},
		{"udhcpc", a2, "10.61.0.100", "10.61.0.150"},
		{"dhcpcd", a3, "10.61.0.100", "10.61.0.150"},
		{"second segment", b1, "10.62.0.100", "10.62.0.150"},
	} {
		if a := c.g.Addr(t); !inRange(a, c.lo, c.hi) {
			t.Errorf("%s got %v, want an address in %s-%s", c.name, a, c.lo, c.hi)
		}
	}
	if a := s1.Addr(t); a != netip.MustParseAddr("10.61.0.120") {
		t.Errorf("reserved guest got %v, want 10.61.0.120", a)
	}

	// Dynamic leases are objects with expiresAt; the reservation is not
	// duplicated as one.
	ls := leases(t, d)
	for _, g := range []*guest.Guest{a1, a2, a3, b1} {
		l, ok := ls[leaseName(g.MAC)]
		switch {
		case !ok:
			t.Errorf("no DHCPLease %s (have %d leases)", leaseName(g.MAC), len(ls))
		case l.Spec.Type != "dynamic" || l.Spec.ExpiresAt == nil || l.Spec.IPAddress != g.Addr(t).String() || l.Status.Phase != "Ready":
			t.Errorf("lease %s = %+v %+v, want dynamic, Ready, with expiresAt and ip %v", l.Metadata.Name, l.Spec, l.Status, g.Addr(t))
		}
	}
	if _, ok := ls[leaseName(s1.MAC)]; ok {
		t.Errorf("the reserved client also got a dynamic lease object")
	}
	wantContains(t, "get leases table", d.MustCtl("get", "leases"), "EXPIRES", leaseName(a1.MAC))

	// The guard learned a1's leased address: its traffic passes.
	if _, err := a1.NS.Exec("ping", "-c", "1", "-W", "2", "10.61.0.1"); err != nil {
		t.Errorf("guarded guest cannot reach the host with its leased address: %v", err)
	}
	wantContains(t, "pv_leases", d.MustCtl("inspect", "map", "pv_leases"), a1.MAC.String(), a1.Addr(t).String())

	// The lease database, where these leases live: a1's binding is bound,
	// s1's the reservation's; a segment named shows its own alone.
	all := d.MustCtl("inspect", "leases")
	wantLeaseRow(t, all, "dh-a", a1.MAC, a1.Addr(t), "bound")
	wantLeaseRow(t, all, "dh-a", s1.MAC, netip.MustParseAddr("10.61.0.120"), "reserved")
	wantLeaseRow(t, all, "dh-b", b1.MAC, b1.Addr(t), "bound")
	if onlyB := d.MustCtl("inspect", "leases", "dh-b"); strings.Contains(onlyB, a1.MAC.String()) || !strings.Contains(onlyB, b1.MAC.String()) {
		t.Errorf("inspect leases dh-b shows another segment's binding, or not b1's:\n%s", onlyB)
	}

	// The responders' counters as Prometheus metrics.
	metrics, err := host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "metrics", string(metrics), `pivirt_dhcp_replies_total{segment="dh-a",type="ACK"}`,
		`pivirt_dhcp_replies_total{segment="dh-b",type="OFFER"}`, `pivirt_dhcp_lease_commits_total{segment="dh-a"}`)

	// Asked for again within the first quarter of its 600 s (the default
	// --dhcp-lease-reuse 0.25: a rebooting guest), the lease is ACKed as
	// stored: the same address for the time it has left, and nothing
	// written, so the object is untouched.
	before := ls[leaseName(a1.MAC)]
	guest.KillPidFile(a1.Dir + "/pid")
	time.Sleep(1100 * time.Millisecond) // expiresAt has second resolution
	a1.Dhclient(t)
	after := leases(t, d)[leaseName(a1.MAC)]
	if after.Spec.IPAddress != before.Spec.IPAddress || a1.Addr(t).String() != before.Spec.IPAddress {
		t.Errorf("re-request moved a1 from %s to %s (object %s)", before.Spec.IPAddress, a1.Addr(t), after.Spec.IPAddress)
	}
	if after.Metadata.ResourceVersion != before.Metadata.ResourceVersion || !after.Spec.ExpiresAt.Equal(*before.Spec.ExpiresAt) {
		t.Errorf("a reused lease was written: resourceVersion %s -> %s, expiresAt %v -> %v",
			before.Metadata.ResourceVersion, after.Metadata.ResourceVersion, before.Spec.ExpiresAt, after.Spec.ExpiresAt)
	}
	metrics, err = host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "metrics", string(metrics), `pivirt_dhcp_lease_reuses_total{segment="dh-a"} 1`)
	if left := a1.LeaseTime(t); left <= 0 || left >= 600 || time.Now().Add(time.Duration(left)*time.Second).After(after.Spec.ExpiresAt.Add(time.Second)) {
		t.Errorf("reused lease ACKed for %d s; want less than 600, ending by the stored %v", left, after.Spec.ExpiresAt)
	}

	// With reuse off, the same re-request is written and extends the lease.
	d.RestartWith("--metrics", "127.0.0.1:9464", "--dhcp-lease-reuse", "0")
	waitFor(t, 15*time.Second, "segments Ready after restart without reuse", func() bool {
		return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") == 2
	})
	guest.KillPidFile(a1.Dir + "/pid")
	time.Sleep(1100 * time.Millisecond)
	a1.Dhclient(t)
	renewed := leases(t, d)[leaseName(a1.MAC)]
	if renewed.Spec.IPAddress != before.Spec.IPAddress {
		t.Errorf("renew moved a1 from %s to %s", before.Spec.IPAddress, renewed.Spec.IPAddress)
	}
	if renewed.Spec.ExpiresAt == nil || !renewed.Spec.ExpiresAt.After(*before.Spec.ExpiresAt) {
		t.Errorf("renew did not extend the lease: %v -> %v", before.Spec.ExpiresAt, renewed.Spec.ExpiresAt)
	}
	if left := a1.LeaseTime(t); left != 600 {
		t.Errorf("renewed for %d s, want the segment's 600", left)
	}
	d.RestartWith("--metrics", "127.0.0.1:9464") // the default again
	waitFor(t, 15*time.Second, "segments Ready after restart with reuse", func() bool {
		return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") == 2
	})

	// RELEASE frees the lease.
	a1.DhclientRelease(t)
	waitFor(t, 10*time.Second, "a1's lease released", func() bool {
		return d.Ctl("get", "lease", leaseName(a1.MAC)).Code != 0
	})

	// Deleting a dynamic lease releases it (and unpins it).
	d.MustCtl("delete", "lease", leaseName(a2.MAC))
	waitFor(t, 10*time.Second, "a2's lease gone from pv_leases", func() bool {
		return !strings.Contains(d.MustCtl("inspect", "map", "pv_leases"), a2.MAC.String())
	})

	// After a restart, a client renews the same address.
	bAddr := b1.Addr(t)
	guest.KillPidFile(b1.Dir + "/pid")
	d.Restart()
	waitFor(t, 15*time.Second, "segments Ready after restart", func() bool {
		return strings.Count(d.Ctl("get", "segments").Stdout, "Ready") == 2
	})
	if _, err := b1.NS.Exec("ip", "-4", "addr", "flush", "dev", b1.Ifc); err != nil {
		t.Fatal(err)
	}
	b1.Dhclient(t)
	if got := b1.Addr(t); got != bAddr {
		t.Errorf("after a restart b1 got %v, want its previous %v", got, bAddr)
	}

	// A lease is durable before its ACK leaves: SIGKILL the daemon as soon
	// as the client is bound (the lease may be only in the journal then),
	// and after the restart it is stored, pinned and renewed as it was.
	a1.Dhclient(t)
	aAddr := a1.Addr(t)
	// Asked for again at once, it is reused (nothing written): kill -9
	// right after that ACK loses nothing either.
	guest.KillPidFile(a1.Dir + "/pid")
	time.Sleep(1100 * time.Millisecond)
	a1.Dhclient(t)
	if left := a1.LeaseTime(t); left >= 600 || a1.Addr(t) != aAddr {
		t.Errorf("re-request before kill -9: %v for %d s; want %v for the time left (reused)", a1.Addr(t), left, aAddr)
	}
	guest.KillPidFile(a1.Dir + "/pid")
	d.Kill9()
	d.Start()
	waitFor(t, 15*time.Second, "a1's lease stored after kill -9", func() bool {
		r := d.Ctl("get", "lease", leaseName(a1.MAC), "-o", "json")
		return r.Code == 0 && strings.Contains(r.Stdout, `"ipAddress": "`+aAddr.String()+`"`)
	})
	waitFor(t, 15*time.Second, "a1's lease in pv_leases after kill -9", func() bool {
		return strings.Contains(d.MustCtl("inspect", "map", "pv_leases"), a1.MAC.String())
	})
	if _, err := a1.NS.Exec("ip", "-4", "addr", "flush", "dev", a1.Ifc); err != nil {
		t.Fatal(err)
	}
	a1.Dhclient(t)
	if got := a1.Addr(t); got != aAddr {
		t.Errorf("after kill -9 a1 got %v, want its previous %v", got, aAddr)
	}
}

// wantLeaseRow checks that `pivirtctl inspect leases` output holds a row
// of segment binding mac to ip in state.
func wantLeaseRow(t *testing.T, out, segment string, mac net.HardwareAddr, ip netip.Addr, state string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[0] == segment && f[2] == mac.String() && f[3] == ip.String() && f[4] == state {
			return
		}
	}
	t.Errorf("inspect leases has no row %s %s %s %s:\n%s", segment, mac, ip, state, out)
}
