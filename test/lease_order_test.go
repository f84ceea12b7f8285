// SPDX-License-Identifier: Apache-2.0

package test

// The orders the real world produces, through the real pivirtd and real
// DHCP clients: a reservation applied just before its client's DORA, a
// reservation of a MAC or an address that already holds a dynamic lease,
// a client sending a dotted host name, a RELEASE under the provisioning
// interlock, and kill -9 after each. None of them may keep a lease from
// being stored, jam the leases after it, or keep pivirtd from starting.
//
//   pvt-host netns: pivirtd
//     virbr10 192.168.100.1/24 (range .10-.50, seed 003's example)
//       ── r1 52:54:00:00:00:01 (reserved .10 right before its DORA)
//       ── c1 (dynamic, then reserved at .40), c2 (dynamic, its address reserved for another MAC)
//       ── h1 (udhcpc, host name web-01.example.com), p1 (dhclient, lease under the interlock)

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const orderSegment = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata:
  name: prod-segment-node-01
spec:
  networkRef: cluster-overlay
  bridge: virbr10
  hostIP: "192.168.100.1/24"
  dhcp:
    enabled: true
    delegatedRangeStart: "192.168.100.10"
    delegatedRangeEnd: "192.168.100.50"
    defaultLeaseTime: 600
`

func reservation(name, mac, ip string) []byte {
	return []byte(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: ` + name + `}
spec: {network: virbr10, macAddress: "` + mac + `", ipAddress: "` + ip + `"}
`)
}

type leaseDoc struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Network    string `json:"network"`
		MACAddress string `json:"macAddress"`
		IPAddress  string `json:"ipAddress"`
		Hostname   string `json:"hostname"`
		Type       string `json:"type"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type, Message string
		} `json:"conditions"`
	} `json:"status"`
}

func getLease(t *testing.T, d *harness.Daemon, name string) (leaseDoc, bool) {
	t.Helper()
	r := d.Ctl("get", "lease", name, "-o", "json")
	if r.Code != 0 {
		return leaseDoc{}, false
	}
	var l leaseDoc
	if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
		t.Fatalf("decoding lease %s: %v\n%s", name, err, r.Stdout)
	}
	return l, true
}

func TestPrivilegedLeaseOrders(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "udhcpc")
	host, d := startOrderSegment(t)

	// 1. A port enslaved, then at once its reservation and its DORA.
	r1 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1})
	if r := d.CtlStdin(reservation("vm1-reservation", "52:54:00:00:00:01", "192.168.100.10"), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply reservation: %s", r)
	}
	r1.Dhclient(t)
	if a := r1.Addr(t); a != netip.MustParseAddr("192.168.100.10") {
		t.Errorf("reserved client got %v, want 192.168.100.10", a)
	}
	// Nothing jams: a later client's lease is stored.
	c1 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xc1})
	c1.Dhclient(t)
	waitFor(t, 10*time.Second, "c1's lease stored", func() bool { _, ok := getLease(t, d, leaseName(c1.MAC)); return ok })
	if _, ok := getLease(t, d, leaseName(r1.MAC)); ok {
		t.Errorf("the reserved client also got a dynamic lease object")
	}

	// 2. A reservation of a MAC that holds a dynamic lease supersedes it:
	// the object goes at once, the client is NAKed off its old address
	// and gets the reserved one.
	c1Old := c1.Addr(t)
	guest.KillPidFile(c1.Dir + "/pid")
	if r := d.CtlStdin(reservation("c1-reservation", c1.MAC.String(), "192.168.100.40"), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply c1's reservation: %s", r)
	}
	if _, ok := getLease(t, d, leaseName(c1.MAC)); ok {
		t.Errorf("c1's dynamic lease outlived its reservation's apply")
	}
	c1.Dhclient(t) // INIT-REBOOT for the old address: NAK, then DORA
	if a := c1.Addr(t); a != netip.MustParseAddr("192.168.100.40") {
		t.Errorf("after its reservation c1 has %v (was %v), want 192.168.100.40", a, c1Old)
	}

	// 3. A reservation of an address another MAC holds dynamically is
	// accepted, with a condition naming the holder.
	c2 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xc2})
	c2.Dhclient(t)
	c2Addr := c2.Addr(t)
	if r := d.CtlStdin(reservation("other-reservation", "52:54:00:00:00:99", c2Addr.String()), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply a reservation of c2's address: %s", r)
	}
	waitFor(t, 10*time.Second, "AddressHeld on other-reservation", func() bool {
		l, _ := getLease(t, d, "other-reservation")
		return len(l.Status.Conditions) > 0 && l.Status.Conditions[0].Type == "AddressHeld" &&
			strings.Contains(l.Status.Conditions[0].Message, leaseName(c2.MAC))
	})

	// 4. A dotted host name in option 12 does not keep the lease from the store.
	h1 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xa1})
	h1.Run(t, "udhcpc", "-f", "-n", "-q", "-t", "5", "-T", "2", "-i", h1.Ifc, "-s", h1.Hook(t),
		"-x", "hostname:web-01.example.com")
	waitFor(t, 10*time.Second, "h1's lease stored", func() bool { _, ok := getLease(t, d, leaseName(h1.MAC)); return ok })
	if l, _ := getLease(t, d, leaseName(h1.MAC)); l.Metadata.Labels["network"] != "virbr10" {
		t.Errorf("h1's lease labels %v, want network=virbr10", l.Metadata.Labels)
	}
	wantContains(t, "get leases -l network=virbr10", d.MustCtl("get", "leases", "-l", "network=virbr10"), leaseName(h1.MAC))

	// 5. An operator puts the interlock on a server-made lease: a RELEASE
	// does not free it, a renewal keeps the annotation and the operator's
	// label, and lifting the lock lets the release happen.
	p1 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xb1})
	p1.Dhclient(t)
	waitFor(t, 10*time.Second, "p1's lease stored", func() bool { _, ok := getLease(t, d, leaseName(p1.MAC)); return ok })
	p1Addr := p1.Addr(t)
	y := d.MustCtl("get", "lease", leaseName(p1.MAC), "-o", "yaml")
	y = strings.Replace(y, "metadata:\n", "metadata:\n  annotations:\n    pivirtd.pilab.hu/is-provisioning: \"true\"\n", 1)
	y = strings.Replace(y, "  labels:\n", "  labels:\n    team: infra\n", 1)
	if r := d.CtlStdin([]byte(y), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("annotating p1's lease: %s\n%s", r, y)
	}
	p1.DhclientRelease(t)
	time.Sleep(1500 * time.Millisecond) // the writer would have deleted it by now
	l, ok := getLease(t, d, leaseName(p1.MAC))
	if !ok || l.Spec.IPAddress != p1Addr.String() {
		t.Fatalf("the interlocked lease went on RELEASE: %+v %v", l, ok)
	}
	wantContains(t, "pv_leases under the interlock", d.MustCtl("inspect", "map", "pv_leases"), p1.MAC.String())
	p1.Dhclient(t)
	l, _ = getLease(t, d, leaseName(p1.MAC))
	if l.Metadata.Annotations["pivirtd.pilab.hu/is-provisioning"] != "true" || l.Metadata.Labels["team"] != "infra" || l.Metadata.Labels["network"] != "virbr10" {
		t.Errorf("a renewal dropped the operator's metadata: %+v", l.Metadata)
	}

	// kill -9 at this point, and pivirtd starts and serves.
	d.Kill9()
	d.Start()
	waitFor(t, 15*time.Second, "segment Ready after kill -9", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	c3 := guest.Attach(t, host, "virbr10", "", nil)
	c3.Dhclient(t)
	waitFor(t, 10*time.Second, "a new client's lease stored after the restart", func() bool { _, ok := getLease(t, d, leaseName(c3.MAC)); return ok })

	// Lifting the lock: the release held back happens.
	p1.DhclientRelease(t)
	y = d.MustCtl("get", "lease", leaseName(p1.MAC), "-o", "yaml")
	y = strings.Replace(y, "    pivirtd.pilab.hu/is-provisioning: \"true\"\n", "", 1)
	if r := d.CtlStdin([]byte(y), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("lifting the interlock: %s", r)
	}
	waitFor(t, 10*time.Second, "p1's held-back release", func() bool { _, ok := getLease(t, d, leaseName(p1.MAC)); return !ok })
}

// boundPin is the IP pv_leases pins, bound and unexpired, for mac ("" none).
func boundPin(t *testing.T, d *harness.Daemon, mac net.HardwareAddr) string {
	t.Helper()
	if ip, exp := pinOf(t, d, mac); time.Now().Before(exp) {
		return ip
	}
	return ""
}

// TestPrivilegedReservationAcrossSegmentRecreate: a reserved client is
// bound, its segment is deleted and applied again (ports enslaved after
// the new bridge exists; pivirtd killed -9 in between or not), then its
// reservation is deleted. Its binding must survive the segment's absence
// (found by the ordering test, seeds 55 and 56): pinned bound when the
// segment is back, and kept as a dynamic lease when the reservation goes,
// as for any bound reservation.
func TestPrivilegedReservationAcrossSegmentRecreate(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	for i, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "kill -9 while deleted"}[kill], func(t *testing.T) {
			host := testutil.NewNetNS(t)
			d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
			applySeg := func() {
				t.Helper()
				if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
					t.Fatalf("apply: %s", r)
				}
				waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
			}
			applySeg()
			mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0x0e, byte(i + 1)}
			ip := netip.AddrFrom4([4]byte{192, 168, 100, byte(33 + i)})
			if r := d.CtlStdin(reservation("rc-res", mac.String(), ip.String()), "apply", "-f", "-"); r.Code != 0 {
				t.Fatalf("apply reservation: %s", r)
			}
			g := guest.Attach(t, host, "virbr10", "", mac)
			waitForwarding(t, host, 1)
			c := newRawClient(t, g)
			if ack, _ := c.dora(); !ack.YourIPAddr.Equal(ip.AsSlice()) {
				t.Fatalf("reserved client got %s, want %s", ack.YourIPAddr, ip)
			}
			waitFor(t, 3*time.Second, "bound pin", func() bool { return boundPin(t, d, mac) == ip.String() })

			d.MustCtl("delete", "segment", "prod-segment-node-01")
			waitFor(t, 15*time.Second, "bridge removed", func() bool { _, err := host.Exec("ip", "link", "show", "virbr10"); return err != nil })
			if kill {
				d.Kill9()
				d.Start()
			}
			applySeg()
			g.Enslave(t, host, "virbr10")
			waitFor(t, 3*time.Second, "bound pin after the segment is back", func() bool { return boundPin(t, d, mac) == ip.String() })

			d.MustCtl("delete", "lease", "rc-res")
			waitFor(t, 3*time.Second, "the binding kept as a dynamic lease", func() bool {
				l, ok := getLease(t, d, leaseName(mac))
				return ok && l.Spec.IPAddress == ip.String() && l.Spec.Type == "dynamic" && boundPin(t, d, mac) == ip.String()
			})
		})
	}
}

// TestPrivilegedDeleteThenDORA: the operator deletes a server-made lease
// and its client does a DORA at once, then pivirtd is killed -9. The
// delete must reach the server before `delete` returns, or the DORA is
// ACKed the binding being deleted, with no write (lease reuse), and the
// deletion then takes the lease the client was just told it holds (the
// ordering test, seed 90417: neither stored nor pinned after the
// restart). Each round also checks the lease is stored and pinned before
// the kill.
func TestPrivilegedDeleteThenDORA(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d := startOrderSegment(t)
	mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0x0d, 0x01}
	g := guest.Attach(t, host, "virbr10", "", mac)
	waitForwarding(t, host, 1)
	c := newRawClient(t, g)
	for round := range 3 {
		ack, _ := c.dora()
		ip := ack.YourIPAddr.String()
		waitFor(t, 5*time.Second, "the lease stored", func() bool {
			l, ok := getLease(t, d, leaseName(mac))
			return ok && l.Spec.IPAddress == ip
		})
		d.MustCtl("delete", "lease", leaseName(mac))
		again, _ := c.dora()
		if got := again.YourIPAddr.String(); got != ip {
			t.Logf("round %d: the DORA after the delete got %s (was %s)", round, got, ip)
			ip = got
		}
		d.Kill9()
		d.Start()
		waitFor(t, 15*time.Second, "segment Ready after kill -9", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
		waitFor(t, 5*time.Second, fmt.Sprintf("round %d: the lease ACKed after the delete, stored and pinned after kill -9", round), func() bool {
			l, ok := getLease(t, d, leaseName(mac))
			return ok && l.Spec.IPAddress == ip && boundPin(t, d, mac) == ip
		})
	}
}

// startOrderSegment starts pivirtd in a namespace of its own with
// orderSegment applied and Ready.
func startOrderSegment(t *testing.T) (*testutil.NetNS, *harness.Daemon) {
	t.Helper()
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path()})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	return host, d
}

// TestPrivilegedAppliedDynamicLease: a dynamic lease the operator applies
// to a running node (seed 000's dynamic lease; an import of dnsmasq's
// leases) is its client's at once: pinned before `apply` returns, never
// offered to another client, and its client's DORA gets it, also after a
// kill -9. The address is the range's first, the one the server hands
// out first: before, the server did not know the applied lease until its
// segment restarted (another client was ACKed it) and the guard pinned it
// only at its next resync, 30 s later.
func TestPrivilegedAppliedDynamicLease(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host, d := startOrderSegment(t)
	macX := net.HardwareAddr{0x52, 0x54, 0, 0xa1, 0xb2, 0xc3}
	const ip = "192.168.100.10"
	lease := fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: %s
  labels:
    network: cluster-overlay
spec:
  network: cluster-overlay
  macAddress: "%s"
  ipAddress: "%s"
  hostname: "talos-worker-01"
  type: dynamic
  expiresAt: "%s"
`, leaseName(macX), macX, ip, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if r := d.CtlStdin([]byte(lease), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	if got := boundPin(t, d, macX); got != ip {
		t.Fatalf("right after the apply pv_leases pins %s to %q, want %s", macX, got, ip)
	}

	y := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0x0e, 0x02})
	x := guest.Attach(t, host, "virbr10", "", macX)
	waitForwarding(t, host, 2)
	if ack, _ := newRawClient(t, y).dora(); ack.YourIPAddr.String() == ip {
		t.Fatalf("another client was ACKed %s, the applied lease's address", ip)
	}
	x.Dhclient(t)
	if a := x.Addr(t); a.String() != ip {
		t.Fatalf("the applied lease's client got %v from dhclient, want %s", a, ip)
	}

	d.Kill9()
	d.Start()
	waitFor(t, 15*time.Second, "segment Ready after kill -9", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	waitFor(t, 5*time.Second, "the applied lease stored and pinned after kill -9", func() bool {
		l, ok := getLease(t, d, leaseName(macX))
		return ok && l.Spec.IPAddress == ip && boundPin(t, d, macX) == ip
	})
	if ack, _ := newRawClient(t, y).dora(); ack.YourIPAddr.String() == ip {
		t.Fatalf("after kill -9 another client was ACKed %s", ip)
	}
}

// TestPrivilegedAppliedWhileNotServed: a dynamic lease the operator
// applies while the segment's DHCP does not run (turned off here; in the
// ordering soak, seed 16828627533599509482 step 914, pivirtd restarting)
// for a MAC whose lease ended before is its client's once DHCP runs
// again: served to it, pinned, offered to no one else. Before, the lease
// database's end of the MAC's binding outweighed the store's newer lease:
// the server ignored it and pv_leases dropped the pin compile had given.
func TestPrivilegedAppliedWhileNotServed(t *testing.T) {
	testutil.RequireRoot(t)
	host, d := startOrderSegment(t)
	x := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xa1, 0xb2, 0xd4})
	y := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xa1, 0xb2, 0xd5})
	waitForwarding(t, host, 2)
	xc := newRawClient(t, x)
	ack, srv := xc.dora()
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(x.MAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(ack.YourIPAddr), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ack.ServerIdentifier())))
	first, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	xc.send(m, first, netip.MustParseAddr("192.168.100.1"), srv)
	waitFor(t, 5*time.Second, "the released lease gone from the store", func() bool { _, ok := getLease(t, d, leaseName(x.MAC)); return !ok })

	setDHCP := func(on bool) {
		t.Helper()
		doc := strings.Replace(orderSegment, "enabled: true", fmt.Sprintf("enabled: %v", on), 1)
		if r := d.CtlStdin([]byte(doc), "apply", "-f", "-"); r.Code != 0 {
			t.Fatalf("apply the segment with DHCP %v: %s", on, r)
		}
		want := map[bool]string{true: "running", false: "disabled"}[on]
		waitFor(t, 10*time.Second, "the segment's DHCP "+want, func() bool {
			return strings.Contains(d.Ctl("get", "segment", "prod-segment-node-01", "-o", "json").Stdout, `"dhcp": "`+want+`"`)
		})
	}
	setDHCP(false)
	const ip = "192.168.100.10" // the range's first: what the server hands out first
	lease := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: virbr10, macAddress: %q, ipAddress: %q, type: dynamic, expiresAt: %q}\n",
		leaseName(x.MAC), x.MAC, ip, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if r := d.CtlStdin([]byte(lease), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	setDHCP(true)
	waitFor(t, 5*time.Second, "the applied lease pinned", func() bool { return boundPin(t, d, x.MAC) == ip })
	if ack, _ := newRawClient(t, y).dora(); ack.YourIPAddr.String() == ip {
		t.Fatalf("another client was ACKed %s, the applied lease's address", ip)
	}
	if ack, _ := xc.dora(); ack.YourIPAddr.String() != ip {
		t.Fatalf("the applied lease's client was ACKed %s, want %s", ack.YourIPAddr, ip)
	}
	time.Sleep(2 * time.Second) // past the guard's next pass
	if got := boundPin(t, d, x.MAC); got != ip {
		t.Fatalf("pv_leases pins %s to %q, want %s", x.MAC, got, ip)
	}
}
