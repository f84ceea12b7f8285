// SPDX-License-Identifier: Apache-2.0

package test

// A model-based test of the orders the real world produces: seeded random
// sequences of DHCP exchanges (DORA, unicast renewals, releases, dotted
// host names, real dhclient and udhcpc), reservations applied and deleted
// around them, server-made leases deleted by the operator, and kill -9 of
// pivirtd at any point (between an ACK and its store write too), through
// the real pivirtd. After every step the
// invariants are checked against what the clients were told:
//   - pivirtd answers its API, and DHCP answers (every exchange gets a reply);
//   - every ACKed lease is in the store, with its address, after restarts too;
//   - no address is held by two MACs (dynamic leases), and no lease is
//     stored for a client that holds none (released, declined,
//     superseded, deleted by the operator);
//   - a reserved MAC is given its reserved address, and its reservation
//     stays as the operator applied it, also when it was applied over
//     the server's lease under its name (an edit into a reservation);
//   - the guard's pins (pv_leases) equal the leases, and equal the lease
//     database's bindings plus the reservations (no drift in
//     `inspect desired pv_leases`);
//   - a unicast renewal to the server learned from the OFFER is answered.
// Ports are also replugged (a VM restart: new veth, same name and MAC) and
// the segment deleted and applied again, its ports enslaved after its new
// bridge exists.
// The operator also applies dynamic leases for clients (imports, address
// edits: ordering_import_test.go), which become their leases at once.
// PIVIRT_ORDER_SEED reproduces a run (the seed is logged);
// PIVIRT_ORDER_STEPS sets its length (default 120; `make soak` runs long);
// PIVIRT_ORDER_SYNC_DELAYS the journal's slowness (see syncDelays).

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

const orderSeg = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: ord}
spec: {networkRef: ord-net, bridge: br-ord, hostIP: 10.80.0.1/24, dhcp: {delegatedRangeStart: 10.80.0.10, delegatedRangeEnd: 10.80.0.40, defaultLeaseTime: 600, declineProbation: 2}}
`

// orderClient is one guest and what it was told.
type orderClient struct {
	g      *guest.Guest
	raw    *rawClient
	acked  netip.Addr // address ACKed and not released ("" none)
	ack    *dhcpv4.DHCPv4
	srvMAC [6]byte
	reserv netip.Addr // its reservation, if one is applied
	// resName names its reservation: res-<mac>, or lease-<mac> when the
	// operator edited the server's lease into it.
	resName string

	lock      lockKind   // the provisioning interlock on its lease (ordering_lock_test.go)
	heldBack  bool       // it released or declined under the lock: the server kept it
	maybeHeld netip.Addr // released under a lock since lifted: the store may still hold it
	imported  bool       // the operator applied a dynamic lease moving it (ordering_import_test.go)
}

type orderRun struct {
	t       *testing.T
	host    *testutil.NetNS
	d       *harness.Daemon
	segGone bool // the segment is deleted; the next step applies it again
	rng     *rand.Rand
	lockRng *rand.Rand // the lock steps' own stream; nil: none
	// importRng is the operator's dynamic leases' own stream (nil: none),
	// used the addresses anyone was given or reserved in this run.
	importRng *rand.Rand
	// editRng is the operator's own stream (nil: none) for naming a
	// reservation as the lease it replaces: an edit of the server's
	// lease (type static), which nothing of the server's may undo.
	editRng *rand.Rand
	used    map[netip.Addr]bool
	clients []*orderClient
	seed    uint64
	step    int
}

func envInt(name string, def uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func TestPrivilegedOrderings(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "udhcpc")
	seed := envInt("PIVIRT_ORDER_SEED", uint64(time.Now().UnixNano()))
	steps := int(envInt("PIVIRT_ORDER_STEPS", 120))
	delays, err := syncDelays(os.Getenv("PIVIRT_ORDER_SYNC_DELAYS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, delay := range delays {
		// The invariants must not depend on the disk: each run again with
		// every journal flush slowed down, which widens the race between
		// an ACK's journal write and whatever a Sync does beside it.
		t.Run("fdatasync+"+delay.String(), func(t *testing.T) { runOrderings(t, seed, steps, delay, true) })
	}
}

// TestPrivilegedOrderingRegressions replays the seeds that found lease
// path bugs, each up to just past the step that failed, with the journal
// slowed down as on the machines where they failed.
func TestPrivilegedOrderingRegressions(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "udhcpc")
	for _, tc := range []struct {
		seed  uint64
		steps int
	}{
		{20261205, 150},            // a sync deleted a pin an ACK had just made (found with an earlier stream of steps)
		{1796384371243064418, 120}, // a reservation did not lift its address's DECLINE probation (idem, step 99)
		{90417, 133},               // delete a lease, DORA, kill -9: the ACK reused the binding being deleted
		{11, 28},                   // delete the reservation, delete the lease, DORA, kill -9
		{202, 38},                  // the same, another order
		{3003, 58},                 // the same, another order
		{40004, 85},                // a stored lease whose pin went
		{627874531, 56},            // reserve, delete the segment, apply it again: the pin unbound
		{20261204, 98},             // ACKed, neither stored nor pinned
		{1796492356900123160, 748}, // delete a reservation: its binding unpinned and unstored until the next Sync
		{1796499881600462388, 628}, // delete a reservation, lock the lease: the next Sync re-pinned it at its plain expiry
	} {
		t.Run(strconv.FormatUint(tc.seed, 10), func(t *testing.T) {
			runOrderings(t, tc.seed, tc.steps, 3*time.Millisecond, false)
		})
	}
}

// syncDelays parses PIVIRT_ORDER_SYNC_DELAYS, a comma-separated list of
// durations slept after each journal fdatasync (pivirtd
// --journal-sync-delay); by default the disk as it is, then 3 ms more,
// five times the p50 of a slow cloud disk.
func syncDelays(v string) ([]time.Duration, error) {
	if v == "" {
		return []time.Duration{0, 3 * time.Millisecond}, nil
	}
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("PIVIRT_ORDER_SYNC_DELAYS %q: want durations of zero or more, comma-separated", v)
		}
		out = append(out, d)
	}
	return out, nil
}

// runOrderings runs steps random steps from seed; with locks, the lock
// steps too (ordering_lock_test.go).
func runOrderings(t *testing.T, seed uint64, steps int, syncDelay time.Duration, locks bool) {
	t.Logf("ordering test: seed %d, %d steps, fdatasync +%v (rerun with PIVIRT_ORDER_SEED=%d PIVIRT_ORDER_SYNC_DELAYS=%v)", seed, steps, syncDelay, seed, syncDelay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: rerun with PIVIRT_ORDER_SEED=%d PIVIRT_ORDER_STEPS=%d PIVIRT_ORDER_SYNC_DELAYS=%v", seed, seed, steps, syncDelay)
		}
	})
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(),
		Args: []string{"--journal-sync-delay", syncDelay.String()}})
	if r := d.CtlStdin([]byte(orderSeg), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	run := &orderRun{t: t, host: host, d: d, rng: rand.New(rand.NewPCG(seed, seed>>1|1)), seed: seed}
	if locks {
		run.lockRng = rand.New(rand.NewPCG(seed^0x10c4, seed>>2|1))
		run.importRng = rand.New(rand.NewPCG(seed^0x1a90, seed>>3|1))
		run.editRng = rand.New(rand.NewPCG(seed^0xed17, seed>>4|1))
	}
	macs := []net.HardwareAddr{
		{0x52, 0x54, 0, 0x80, 0, 1}, {0x52, 0x54, 0, 0x80, 0, 2}, {0x52, 0x54, 0, 0x80, 0, 3},
		{0x00, 0x00, 0x00, 0x80, 0, 4}, // lower than any bridge MAC
	}
	for _, m := range macs {
		g := guest.Attach(t, host, "br-ord", "", m)
		run.clients = append(run.clients, &orderClient{g: g, raw: newRawClient(t, g)})
	}
	run.waitForwarding()
	start := time.Now()
	for run.step = 1; run.step <= steps; run.step++ {
		run.randomStep()
		run.lockStep()
		run.importStep()
		run.checkInvariants()
	}
	t.Logf("%d steps in %v (%.0f steps/min), seed %d", steps, time.Since(start).Round(time.Second),
		float64(steps)/time.Since(start).Minutes(), seed)
}

func (r *orderRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d (seed %d): %s", r.step, r.seed, fmt.Sprintf(format, args...))
}

func (r *orderRun) randomStep() {
	if r.segGone {
		if r.rng.IntN(3) == 0 {
			r.kill9()
		}
		r.segmentBack()
		return
	}
	c := r.clients[r.rng.IntN(len(r.clients))]
	switch n := r.rng.IntN(100); {
	case n < 24:
		r.dora(c, "")
	case n < 30:
		r.dora(c, "web-01.example.com") // a dotted host name, as Windows sends
	case n < 34:
		// kill -9 right after the ACK: the lease may be only in the journal.
		r.dora(c, "")
		r.kill9()
	case n < 48:
		r.renew(c)
	case n < 52:
		r.rebind(c)
	case n < 60:
		r.release(c)
	case n < 62:
		r.decline(c)
	case n < 64:
		r.deleteLease(c)
	case n < 71:
		r.reserve(c)
	case n < 77:
		r.unreserve(c)
	case n < 83:
		r.portSecurity(c)
	case n < 89:
		r.kill9()
	case n < 93:
		r.replug(c)
	case n < 95:
		r.segmentGone()
	default:
		r.realClient(c)
	}
}

// rebind broadcasts a REBINDING REQUEST (ciaddr set, no server id): the
// server is authoritative and answers, ACK or NAK as for a renewal.
func (r *orderRun) rebind(c *orderClient) {
	if c.ack == nil {
		r.dora(c, "")
		return
	}
	r.t.Logf("step %d: rebind %s %s", r.step, c.g.MAC, c.acked)
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(c.ack.YourIPAddr))
	rep, _ := c.raw.exchange(m, c.acked, netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	switch {
	case rep.MessageType() == dhcpv4.MessageTypeAck && rep.YourIPAddr.Equal(c.ack.YourIPAddr):
	case rep.MessageType() == dhcpv4.MessageTypeNak && c.reserv.IsValid() && c.reserv != c.acked:
		c.acked, c.ack = netip.Addr{}, nil
	default:
		r.fatalf("rebinding of %s at %s: %s %s", c.g.MAC, c.acked, rep.MessageType(), rep.YourIPAddr)
	}
}

// decline declines the client's address (as after a failed ARP probe):
// the lease ends and the address is quarantined.
func (r *orderRun) decline(c *orderClient) {
	if c.ack == nil || c.reserv.IsValid() {
		return
	}
	r.t.Logf("step %d: decline %s %s", r.step, c.g.MAC, c.acked)
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.ack.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(c.ack.ServerIdentifier())))
	c.raw.send(m, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	c.forget()
}

// forget is the client letting its lease go (release, decline): under
// the provisioning interlock the server holds it back, still bound.
func (c *orderClient) forget() {
	if c.lock != lockNone {
		c.ack, c.heldBack = nil, true
		return
	}
	c.acked, c.ack = netip.Addr{}, nil
}

// portSecurity pins the client's port (learnFromDHCP) or unpins it: its
// DHCP must go on working through the guard either way.
func (r *orderRun) portSecurity(c *orderClient) {
	name := portName(c)
	owner := c.lock == lockOwner // it holds the lease: it keeps its lock
	if r.rng.IntN(2) == 0 {
		r.t.Logf("step %d: PortSecurity on %s", r.step, c.g.HostSide)
		if res := r.d.CtlStdin(portDoc(c, owner), "apply", "-f", "-"); res.Code != 0 {
			r.fatalf("PortSecurity on %s: %s", c.g.HostSide, res)
		}
		return
	}
	r.t.Logf("step %d: no PortSecurity on %s", r.step, c.g.HostSide)
	res := r.d.Ctl("delete", "portsec", name) // absent is fine
	if owner && (res.Code == 0 || !strings.Contains(res.Stderr, "is-provisioning")) {
		r.fatalf("deleting %s, which holds %s's lease: %s", name, c.g.MAC, res)
	}
}

// dora runs DISCOVER/REQUEST; the answer must be the reservation when the
// MAC has one.
func (r *orderRun) dora(c *orderClient, hostname string) {
	r.t.Logf("step %d: DORA %s %s", r.step, c.g.MAC, hostname)
	d, _ := dhcpv4.NewDiscovery(c.raw.mac[:])
	if hostname != "" {
		d.UpdateOption(dhcpv4.OptHostName(hostname))
	}
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	offer, srv := c.raw.exchange(d, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	if offer.MessageType() != dhcpv4.MessageTypeOffer {
		r.fatalf("DISCOVER of %s: %s", c.g.MAC, offer.MessageType())
	}
	req, _ := dhcpv4.NewRequestFromOffer(offer)
	if hostname != "" {
		req.UpdateOption(dhcpv4.OptHostName(hostname))
	}
	ack, _ := c.raw.exchange(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		r.fatalf("REQUEST of %s for %s: %s", c.g.MAC, offer.YourIPAddr, ack.MessageType())
	}
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if c.reserv.IsValid() && ip != c.reserv {
		r.fatalf("%s is reserved %s but was ACKed %s", c.g.MAC, c.reserv, ip)
	}
	r.checkImported(c, c.acked, ip)
	r.use(ip)
	c.acked, c.ack, c.srvMAC = ip, ack, [6]byte(srv)
	c.heldBack, c.maybeHeld = false, netip.Addr{}
}

// renew unicasts a RENEWING REQUEST to the server learned from the OFFER:
// it must be answered; ACK while the lease stands, NAK once a
// reservation moved the MAC elsewhere.
func (r *orderRun) renew(c *orderClient) {
	if c.ack == nil {
		r.dora(c, "")
		return
	}
	r.t.Logf("step %d: renew %s %s", r.step, c.g.MAC, c.acked)
	rep, _ := c.raw.renew(c.ack, c.srvMAC)
	switch {
	case rep.MessageType() == dhcpv4.MessageTypeAck:
		ip, _ := netip.AddrFromSlice(rep.YourIPAddr.To4())
		if ip != c.acked {
			r.fatalf("renewal of %s moved it from %s to %s", c.g.MAC, c.acked, ip)
		}
	case rep.MessageType() == dhcpv4.MessageTypeNak && c.reserv.IsValid() && c.reserv != c.acked:
		c.acked, c.ack = netip.Addr{}, nil // reserved elsewhere: it starts over
	default:
		r.fatalf("renewal of %s at %s: %s", c.g.MAC, c.acked, rep.MessageType())
	}
}

func (r *orderRun) release(c *orderClient) {
	if c.ack == nil {
		return
	}
	r.t.Logf("step %d: release %s %s", r.step, c.g.MAC, c.acked)
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(c.ack.YourIPAddr), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(c.ack.ServerIdentifier())))
	c.raw.send(m, c.acked, netip.MustParseAddr("10.80.0.1"), c.srvMAC)
	c.forget()
}

// deleteLease is the operator deleting c's server-made lease: the server
// lets the address go and its pin goes; the client, not told, starts
// over (its renewal may also get the address back, when still free).
func (r *orderRun) deleteLease(c *orderClient) {
	if c.ack == nil || c.reserv.IsValid() {
		return
	}
	r.t.Logf("step %d: delete lease %s (%s)", r.step, leaseName(c.g.MAC), c.acked)
	if c.lock != lockNone {
		if res := r.d.Ctl("delete", "lease", leaseName(c.g.MAC)); res.Code == 0 || !strings.Contains(res.Stderr, "is-provisioning") {
			r.fatalf("deleting %s under the interlock (%s): %s", leaseName(c.g.MAC), c.lock, res)
		}
		return
	}
	if res := r.d.Ctl("delete", "lease", leaseName(c.g.MAC)); res.Code != 0 {
		r.fatalf("deleting %s: %s", leaseName(c.g.MAC), res)
	}
	c.acked, c.ack = netip.Addr{}, nil
}

// reserve applies a reservation for c's MAC at an address no other client
// was given or reserved, sometimes the one it holds.
func (r *orderRun) reserve(c *orderClient) {
	if c.lock != lockNone {
		return // relocating a held lease is refused (controlplane_test)
	}
	taken := map[netip.Addr]bool{}
	for _, o := range r.clients {
		if o != c {
			taken[o.acked], taken[o.reserv], taken[o.maybeHeld] = true, true, true
		}
	}
	var ip netip.Addr
	if c.acked.IsValid() && r.rng.IntN(2) == 0 {
		ip = c.acked
	} else {
		for i := 0; i < 50 && (!ip.IsValid() || taken[ip]); i++ {
			ip = netip.AddrFrom4([4]byte{10, 80, 0, byte(10 + r.rng.IntN(31))})
		}
	}
	if taken[ip] {
		return
	}
	if c.resName == "" {
		c.resName = "res-" + strings.ReplaceAll(c.g.MAC.String(), ":", "")
		if r.editRng != nil && r.editRng.IntN(2) == 0 {
			c.resName = leaseName(c.g.MAC) // over the server's lease, if it has one
		}
	}
	r.t.Logf("step %d: reserve %s -> %s (%s)", r.step, c.g.MAC, ip, c.resName)
	doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: br-ord, macAddress: %q, ipAddress: %s, type: static}\n",
		c.resName, c.g.MAC.String(), ip)
	if res := r.d.CtlStdin([]byte(doc), "apply", "-f", "-"); res.Code != 0 {
		r.fatalf("reserving %s for %s: %s", ip, c.g.MAC, res)
	}
	c.reserv = ip
	r.use(ip)
	if c.acked != ip {
		c.acked, c.ack = netip.Addr{}, nil // superseded: NAKed at its renewal
	}
}

func (r *orderRun) unreserve(c *orderClient) {
	if !c.reserv.IsValid() {
		return
	}
	r.t.Logf("step %d: delete the reservation of %s (%s)", r.step, c.g.MAC, c.resName)
	if res := r.d.Ctl("delete", "lease", c.resName); res.Code != 0 {
		r.fatalf("deleting %s: %s", c.resName, res)
	}
	c.reserv, c.resName = netip.Addr{}, ""
	// Its binding outlives the reservation, as a dynamic lease.
}

// replug deletes the client's port and makes it anew (a VM restart):
// the guard follows the new ifindex, the lease and its pin stay.
func (r *orderRun) replug(c *orderClient) {
	r.t.Logf("step %d: replug %s (%s)", r.step, c.g.HostSide, c.g.MAC)
	c.raw.conn.Close()
	c.g.Replug(r.t, r.host, "br-ord")
	c.raw = newRawClient(r.t, c.g)
	r.waitForwarding()
}

// segmentGone deletes the segment: its bridge goes, the ports stay
// unenslaved, and the leases stay in the store (nothing owns them).
func (r *orderRun) segmentGone() {
	r.t.Logf("step %d: delete the segment", r.step)
	for _, c := range r.clients {
		if c.lock != lockNone && c.acked.IsValid() {
			if res := r.d.Ctl("delete", "segment", "ord"); res.Code == 0 || !strings.Contains(res.Stderr, "is-provisioning") {
				r.fatalf("deleting the segment while %s's lease is held (%s): %s", c.g.MAC, c.lock, res)
			}
			return
		}
	}
	if res := r.d.Ctl("delete", "segment", "ord"); res.Code != 0 {
		r.fatalf("deleting the segment: %s", res)
	}
	waitFor(r.t, 15*time.Second, "bridge removed", func() bool {
		_, err := r.host.Exec("ip", "link", "show", "br-ord")
		return err != nil
	})
	r.segGone = true
}

// segmentBack applies the segment again and enslaves the ports to its new
// bridge after it exists, as libvirt does when VMs start: every client's
// lease holds and its renewal is answered.
func (r *orderRun) segmentBack() {
	r.t.Logf("step %d: apply the segment again, then enslave the ports", r.step)
	if res := r.d.CtlStdin([]byte(orderSeg), "apply", "-f", "-"); res.Code != 0 {
		r.fatalf("applying the segment: %s", res)
	}
	waitFor(r.t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(r.d.Ctl("get", "segments").Stdout, "Ready") })
	for _, c := range r.clients {
		c.g.Enslave(r.t, r.host, "br-ord")
	}
	r.segGone = false
	r.waitForwarding()
}

// waitForwarding waits until every client's port forwards on the bridge.
func (r *orderRun) waitForwarding() {
	waitForwarding(r.t, r.host, len(r.clients))
}

func (r *orderRun) kill9() {
	r.t.Logf("step %d: kill -9 pivirtd", r.step)
	r.d.Kill9()
	r.d.Start()
	waitFor(r.t, 15*time.Second, "segment Ready after kill -9", func() bool {
		res := r.d.Ctl("get", "segments")
		return res.Code == 0 && (r.segGone || strings.Contains(res.Stdout, "Ready"))
	})
}

// realClient runs udhcpc or dhclient once on the guest; the raw client's
// view is then replaced by what the real client got.
func (r *orderRun) realClient(c *orderClient) {
	r.t.Logf("step %d: real client on %s", r.step, c.g.MAC)
	_, _ = c.g.NS.Exec("ip", "-4", "addr", "flush", "dev", c.g.Ifc)
	c.g.Run(r.t, "udhcpc", "-f", "-n", "-q", "-t", "4", "-T", "1", "-i", c.g.Ifc, "-s", c.g.Hook(r.t))
	ip := c.g.Addr(r.t)
	if !ip.IsValid() {
		r.fatalf("udhcpc on %s got no address", c.g.MAC)
	}
	if c.reserv.IsValid() && ip != c.reserv {
		r.fatalf("udhcpc on reserved %s got %s, want %s", c.g.MAC, ip, c.reserv)
	}
	_, _ = c.g.NS.Exec("ip", "-4", "addr", "flush", "dev", c.g.Ifc)
	// Its lease is the MAC's now; the raw client renews it from scratch.
	r.dora(c, "")
}

func (r *orderRun) checkInvariants() {
	r.t.Helper()
	if res := r.d.Ctl("get", "segments"); res.Code != 0 {
		r.fatalf("pivirtd does not answer: %s", res)
	}
	deadline := time.Now().Add(3 * time.Second)
	var problems []string
	for {
		problems = r.violations()
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(problems) > 0 {
		r.fatalf("invariants: %s", strings.Join(problems, "; "))
	}
}

// violations compares the store and pv_leases with what clients were told.
func (r *orderRun) violations() []string {
	byName, bad := storedLeases(r.d)
	if byName == nil {
		return bad
	}
	pinned, pinnedUntil, err := livePins(r.d)
	if err != "" {
		return []string{err}
	}
	if !r.segGone {
		bad = append(bad, pinDrift(r.d)...)
	}
	for _, c := range r.clients {
		mac := c.g.MAC.String()
		if c.reserv.IsValid() {
			// The operator's reservation stays as applied, whatever the
			// server still had on its way for the lease it replaced.
			if l, ok := byName[c.resName]; !ok || l.Spec.Type != "static" || l.Spec.IPAddress != c.reserv.String() {
				bad = append(bad, fmt.Sprintf("reservation %s of %s at %s: the store has %+v", c.resName, mac, c.reserv, l.Spec))
			}
		}
		if c.acked.IsValid() {
			if l, ok := byName[leaseName(c.g.MAC)]; !c.reserv.IsValid() && (!ok || l.Spec.IPAddress != c.acked.String()) {
				bad = append(bad, fmt.Sprintf("ACKed %s for %s, store has %+v", c.acked, mac, l.Spec))
			}
			// Pins are per segment (pv_leases is keyed by its id): with
			// the segment gone there is nothing to pin to until it
			// returns, and then they must be back.
			if !r.segGone && pinned[mac] != c.acked.String() {
				bad = append(bad, fmt.Sprintf("ACKed %s for %s, pinned %q", c.acked, mac, pinned[mac]))
			}
			// Held, the pin must not lapse: it reaches years ahead.
			if c.lock != lockNone && !r.segGone && pinnedUntil[mac].Before(time.Now().Add(365*24*time.Hour)) {
				bad = append(bad, fmt.Sprintf("%s's lease %s is held (%s), pinned only until %v", mac, c.acked, c.lock, pinnedUntil[mac]))
			}
		}
		// Nothing holds an address the client no longer has: a lease
		// released, declined, superseded or deleted by the operator is
		// not written back (a journaled change stored late, say).
		if l, ok := byName[leaseName(c.g.MAC)]; ok && c.resName != leaseName(c.g.MAC) && (!c.acked.IsValid() || c.reserv.IsValid()) && l.Spec.IPAddress != c.maybeHeld.String() {
			bad = append(bad, fmt.Sprintf("%s holds no lease (reservation %v), the store has %s at %s", mac, c.reserv, l.Metadata.Name, l.Spec.IPAddress))
		}
	}
	return bad
}

// storedLeases lists the leases through d, by name, and the addresses
// two MACs' dynamic leases hold; nil if the list failed (bad says why).
func storedLeases(d *harness.Daemon) (byName map[string]leaseDoc, bad []string) {
	var list struct {
		Items []leaseDoc `json:"items"`
	}
	out := d.Ctl("get", "leases", "-o", "json")
	if out.Code != 0 || json.Unmarshal([]byte(out.Stdout), &list) != nil {
		return nil, []string{"get leases: " + out.String()}
	}
	byName = map[string]leaseDoc{}
	holder := map[string]string{}
	for _, l := range list.Items {
		byName[l.Metadata.Name] = l
		if l.Spec.Type == "dynamic" {
			if h, ok := holder[l.Spec.IPAddress]; ok && h != l.Spec.MACAddress {
				bad = append(bad, fmt.Sprintf("%s held by %s and %s", l.Spec.IPAddress, h, l.Spec.MACAddress))
			}
			holder[l.Spec.IPAddress] = l.Spec.MACAddress
		}
	}
	return byName, bad
}

// livePins reads d's pv_leases: by MAC, the address each pin lets
// through and until when. A pin lets the client's traffic through only
// while bound and not expired: an unbound or lapsed entry is no pin.
func livePins(d *harness.Daemon) (pinned map[string]string, until map[string]time.Time, problem string) {
	var pins []leasemap.Entry
	out := d.Ctl("inspect", "map", "pv_leases", "-o", "json")
	if out.Code != 0 || json.Unmarshal([]byte(out.Stdout), &pins) != nil {
		return nil, nil, "inspect pv_leases: " + out.String()
	}
	pinned, until = map[string]string{}, map[string]time.Time{}
	for _, p := range pins {
		if strings.Contains(p.Flags, "bound") && p.ExpiresAt != nil && time.Now().Before(*p.ExpiresAt) {
			pinned[p.MAC], until[p.MAC] = p.IP, *p.ExpiresAt
		}
	}
	return pinned, until, ""
}

// pinDrift is the drift of d's pv_leases from what its lease database
// says it must hold (`inspect desired pv_leases`): a pin the database
// does not hold, a binding not pinned, or pinned otherwise.
func pinDrift(d *harness.Daemon) []string {
	var resp struct {
		Maps []struct {
			Name    string `json:"name"`
			Missing []struct {
				Key string `json:"key"`
			} `json:"missing"`
			Stale []struct {
				Key string `json:"key"`
			} `json:"stale"`
			Differ []struct {
				Key string `json:"key"`
			} `json:"differ"`
		} `json:"maps"`
	}
	out := d.Ctl("inspect", "desired", "pv_leases", "-o", "json")
	if out.Code != 0 || json.Unmarshal([]byte(out.Stdout), &resp) != nil || len(resp.Maps) != 1 {
		return []string{"inspect desired pv_leases: " + out.String()}
	}
	var bad []string
	m := resp.Maps[0]
	for _, e := range m.Missing {
		bad = append(bad, "the lease database binds what pv_leases lacks: "+e.Key)
	}
	for _, e := range m.Stale {
		bad = append(bad, "pv_leases pins what the lease database does not bind: "+e.Key)
	}
	for _, e := range m.Differ {
		bad = append(bad, "pv_leases pins otherwise than the lease database binds: "+e.Key)
	}
	return bad
}
