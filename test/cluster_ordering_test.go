// SPDX-License-Identifier: Apache-2.0

package test

// The ordering test across nodes: two pivirtd on one etcd, each in a
// namespace of its own (as on two hosts: a restarted pivirtd sweeps the
// bridges it made and no longer wants, which in one namespace would be
// the other node's), each serving one segment of the network
// 10.77.0.0/24 (n1 .10–.50 on br-cl1, n2 .51–.99 on br-cl2), and guests
// whose ports move between the two bridges. Seeded random steps: DORA,
// unicast renewal and RELEASE where the guest is; a move to the other
// node's bridge, then INIT-REBOOT (the new node ACKs the lease the store
// shows the MAC's and takes it over) or DORA there; the operator
// applying a dynamic lease for a guest or deleting its lease through
// either node's API (the other node's DHCP server learns it from the
// store: dhcpd.Manager.Observe); kill -9 of either pivirtd (what the
// store got meanwhile is taken in at start); etcd going away, stopped or
// frozen (a partition), for a few steps, from a random stream of its own.
// With etcd away the operator's writes are not tried, a pivirtd killed
// starts from the cache it saved, and a guest that moves is ACKed its
// lease by INIT-REBOOT if the lease was stored before the outage (the new
// node's cache shows it the MAC's); one ACKed during the outage the new
// node cannot know, so it may stay silent or NAK, and the guest starts
// over with a DORA.
// After every step, once the store's watch has delivered (a few seconds
// at most), what the guests were told must hold on both nodes:
//   - DHCP answers (a DORA, a renewal and an INIT-REBOOT end in an ACK,
//     the last two of the same address), and no address is ACKed to a
//     MAC while another guest holds it;
//   - every held lease is in the store, with its address and network,
//     and a lease the guest let go (released, deleted) is not;
//   - only the node the guest is on pins its lease; the other pins no
//     address for its MAC;
//   - each node's pv_leases is its lease database's projection (no
//     drift in `inspect desired pv_leases`).
// With etcd away only the guest's node is checked, to pin its lease (the
// store cannot be read, and the node a guest left may not know yet).
// Once etcd is back everything above holds again within 30 s.
// PIVIRT_CLUSTER_ORDER_SEED replays a run (the seed is logged),
// PIVIRT_CLUSTER_ORDER_STEPS sets its length (default 40).

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// clusterGuest is one guest of the cluster ordering test and what it was
// told.
type clusterGuest struct {
	g     *guest.Guest
	raw   *rawClient
	node  int            // the node whose bridge it is on
	acked netip.Addr     // its lease's address (ACKed or applied), while it holds one
	ack   *dhcpv4.DHCPv4 // the ACK, nil after an applied lease
	srv   [6]byte        // the MAC its ACK came from
	// applied: the operator applied its lease since its last DORA, which
	// must be given that address.
	applied bool
	// ackedAway: its lease was ACKed while etcd was away, so no other
	// node can know it until etcd is back.
	ackedAway bool
}

type clusterRun struct {
	t      *testing.T
	nodes  [2]clusterNode
	rng    *rand.Rand
	guests []*clusterGuest
	used   map[netip.Addr]bool // addresses anyone was given or applied in this run
	seed   uint64
	step   int

	ec      *etcdtest.Cluster
	outages *rand.Rand // when etcd goes away and comes back
	// away is how many steps etcd has been away (0: it serves); frozen:
	// its members are stopped by SIGSTOP (a partition), not gone.
	away   int
	frozen bool
	// settle is how long the invariants may take to hold after this step.
	settle time.Duration
}

var (
	clusterBridges = [2]string{"br-cl1", "br-cl2"}
	clusterNames   = [2]string{"n1", "n2"}
	clusterRanges  = [2][2]byte{{10, 50}, {51, 99}}
)

func TestPrivilegedClusterOrderings(t *testing.T) {
	seed := envInt("PIVIRT_CLUSTER_ORDER_SEED", uint64(time.Now().UnixNano()))
	steps := int(envInt("PIVIRT_CLUSTER_ORDER_STEPS", 40))
	t.Logf("cluster ordering test: seed %d, %d steps (rerun with PIVIRT_CLUSTER_ORDER_SEED=%d)", seed, steps, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: rerun with PIVIRT_CLUSTER_ORDER_SEED=%d PIVIRT_CLUSTER_ORDER_STEPS=%d", seed, seed, steps)
		}
	})
	r := newClusterRun(t, seed, 4)
	start := time.Now()
	for r.step = 1; r.step <= steps; r.step++ {
		if r.outage() {
			// The nodes store what they journaled before the operator
			// writes again: a lease deleted before a node's newer ACK of
			// it lands is that ACK's again (dhcpd's Observe keeps a
			// binding newer than the object that went).
			r.checkInvariants()
		}
		r.randomStep()
		r.checkInvariants()
	}
	if r.away > 0 {
		r.etcdBack()
		r.checkInvariants()
	}
	t.Logf("%d steps in %v, seed %d", steps, time.Since(start).Round(time.Second), seed)
}

// newClusterRun starts the nodes and guests guests, alternately on n1
// and n2.
func newClusterRun(t *testing.T, seed uint64, guests int) *clusterRun {
	nodes, ec := startNodesApart(t)
	r := &clusterRun{t: t, nodes: nodes, ec: ec, rng: rand.New(rand.NewPCG(seed, seed>>1|1)), outages: rand.New(rand.NewPCG(seed, seed>>2|3)),
		seed: seed, used: map[netip.Addr]bool{}}
	for i := range guests {
		node := i % 2
		g := guest.Attach(t, r.nodes[node].ns, clusterBridges[node], "", net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x0c, byte(i + 1)})
		r.guests = append(r.guests, &clusterGuest{g: g, raw: newRawClient(t, g), node: node})
	}
	for i, n := range r.nodes {
		waitForwarding(t, n.ns, (guests+1-i)/2)
	}
	return r
}

// TestPrivilegedClusterReleasedAfterMovingAway: a guest whose lease n1
// stored moves to n2 while etcd is away, n2 takes the lease over from its
// cache (INIT-REBOOT), and the guest releases it there. Once etcd is
// back, n2's journal holds both the take-over and the release, and the
// lease must end: not stored, pinned by neither node.
func TestPrivilegedClusterReleasedAfterMovingAway(t *testing.T) {
	r := newClusterRun(t, 1, 1)
	c := r.guests[0]
	steps := []func(){
		func() { r.dora(c) },
		func() { r.etcdAway(false) },
		func() { r.movePort(c); r.initReboot(c) },
		func() { r.release(c) },
		func() { r.etcdBack() },
	}
	for i, step := range steps {
		r.step = i + 1
		step()
		r.checkInvariants()
	}
}

// TestPrivilegedClusterReleasedAfterComingBack: while etcd is away, a
// guest of n1 moves to n2, which ACKs it a lease of its own range, and
// back to n1, which ACKs it later, and it releases its lease there. When
// etcd is back, n1's journal reaches the store first (n2 is paused: the
// order the cluster test's seed 9392993006502353914 met by chance): its
// release finds nothing of n2's to delete. n2's older ACK lands after
// it: the lease must still end, stored by neither node, pinned by
// neither (it stayed stored and pinned on n2).
func TestPrivilegedClusterReleasedAfterComingBack(t *testing.T) {
	r := newClusterRun(t, 1, 1)
	c := r.guests[0]
	n1 := r.nodes[0].d
	steps := []func(){
		func() { r.dora(c) },
		func() { r.etcdAway(false) },
		func() { r.movePort(c); r.dora(c) },
		func() { r.movePort(c); r.dora(c) },
		func() { r.release(c) },
	}
	for i, step := range steps {
		r.step = i + 1
		step()
		r.checkInvariants()
	}
	r.step = len(steps) + 1
	resume := r.pause(1)
	r.etcdBack()
	name := leaseName(c.g.MAC)
	waitFor(t, 15*time.Second, "n1's release in the store before n2's journal", func() bool {
		_, stored := getLease(t, n1, name)
		return !stored
	})
	resume()
	r.checkInvariants()
}

// TestPrivilegedClusterMovedBeforeTheStoreKnows: a guest ACKed on n2
// while etcd is away moves to n1 once etcd is back but before n2's
// journal reached it (n2 paused: its writer waits out its retry backoff,
// cluster seed 2190999138463073143 at step 115). n1 has heard nothing of
// the address, which lies in n2's range: its INIT-REBOOT must get no
// reply (not a NAK, which would cost the guest its address), and once
// n2's write reaches the store the guest's next INIT-REBOOT is ACKed the
// same address on n1, which takes the lease over.
func TestPrivilegedClusterMovedBeforeTheStoreKnows(t *testing.T) {
	r := newClusterRun(t, 1, 2)
	c := r.guests[1] // on n2
	r.step = 1
	r.etcdAway(false)
	r.dora(c)
	r.checkInvariants()
	r.step = 2
	resume := r.pause(1)
	r.etcdBack()
	r.movePort(c)
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.ack.YourIPAddr)))
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if rep, _ := c.raw.exchangeWithin(m, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast, 2*time.Second); rep != nil {
		t.Fatalf("INIT-REBOOT of %s for %s (n2's range) on n1 before the store knows the lease: %s %s, want no reply",
			c.g.MAC, c.acked, rep.MessageType(), rep.YourIPAddr)
	}
	const notHeard = `pivirt_dhcp_ignored_total{reason="not-heard",segment="cl-n1"} 1`
	if mo, _ := r.nodes[0].ns.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics"); !strings.Contains(string(mo), notHeard+"\n") {
		t.Errorf("n1's metrics lack %s", notHeard)
	}
	resume()
	r.step = 3
	var rep *dhcpv4.DHCPv4
	waitFor(t, 20*time.Second, "n1 answering the INIT-REBOOT once n2's write is stored", func() bool {
		rep, _ = c.raw.exchangeWithin(m, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast, time.Second)
		return rep != nil
	})
	if ip, _ := netip.AddrFromSlice(rep.YourIPAddr.To4()); rep.MessageType() != dhcpv4.MessageTypeAck || ip != c.acked {
		t.Fatalf("INIT-REBOOT of %s for %s on n1 once the store knows: %s %s, want ACK of the same address", c.g.MAC, c.acked, rep.MessageType(), ip)
	}
	c.ack = rep
	r.checkInvariants()
}

// TestPrivilegedClusterDhclientMovedBeforeTheStoreKnows is the same
// race with a real client: dhclient bound on n2 while etcd was away,
// stopped (no RELEASE), its port moved to n1 once etcd is back while n2's
// journal is held back, and started again from its lease file
// (INIT-REBOOT). n1 says nothing until n2's write is stored (n2 resumes
// 2 s later); dhclient asks again and must end with the address it had.
func TestPrivilegedClusterDhclientMovedBeforeTheStoreKnows(t *testing.T) {
	testutil.RequireTool(t, "dhclient")
	r := newClusterRun(t, 1, 2)
	c := r.guests[1] // on n2
	r.step = 1
	r.etcdAway(false)
	c.g.Dhclient(t)
	addr := c.g.Addr(t)
	if a := addr.As4(); a[3] < clusterRanges[1][0] || a[3] > clusterRanges[1][1] {
		t.Fatalf("dhclient on n2 got %v, want an address of n2's range", addr)
	}
	guest.KillPidFile(filepath.Join(c.g.Dir, "pid"))
	r.step = 2
	resume := r.pause(1)
	r.etcdBack()
	r.movePort(c)
	time.AfterFunc(2*time.Second, resume)
	started := time.Now()
	out := c.g.Dhclient(t)
	if got := c.g.Addr(t); got != addr {
		t.Fatalf("after the move dhclient has %v, want %v kept\n%s", got, addr, out)
	}
	t.Logf("dhclient kept %v on n1 %v after it started:\n%s", addr, time.Since(started).Round(100*time.Millisecond), out)
}

// TestPrivilegedClusterRestartInPartition: pivirtd killed -9 and started
// again while etcd is frozen (a partition: connections stay open, nothing
// answers) serves DHCP from its saved cache and its journal within
// seconds, not after the store's list bound (20 s), and its guest keeps
// its lease, ACKed just before the crash (so not in the saved copy):
// pinned all along, it is offered and ACKed it again.
func TestPrivilegedClusterRestartInPartition(t *testing.T) {
	r := newClusterRun(t, 1, 1)
	c := r.guests[0]
	r.step = 1
	r.dora(c)
	r.checkInvariants()
	r.step = 2
	r.etcdAway(true)
	d := r.nodes[0].d
	d.Kill9()
	d.StartReadyOn("inspect", "map", "pv_leases")
	started := time.Now()
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for {
		if pins, _, problem := livePins(d); problem != "" || pins[c.g.MAC.String()] != c.acked.String() {
			t.Fatalf("%v after the restart, before DHCP answered, %s's lease %s is not pinned: %q %s",
				time.Since(started).Round(100*time.Millisecond), c.g.MAC, c.acked, pins[c.g.MAC.String()], problem)
		}
		d, _ := dhcpv4.NewDiscovery(c.raw.mac[:])
		if offer, _ := c.raw.exchangeWithin(d, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast, time.Second); offer != nil {
			if ip, _ := netip.AddrFromSlice(offer.YourIPAddr.To4()); ip != c.acked {
				t.Fatalf("offered %s after the restart, its lease is %s", ip, c.acked)
			}
			break
		}
		if time.Since(started) > 10*time.Second {
			t.Fatalf("no OFFER for %v after pivirtd's restart inside the partition", time.Since(started).Round(time.Second))
		}
	}
	t.Logf("DHCP answered %v after pivirtd's API did", time.Since(started).Round(100*time.Millisecond))
	r.step = 3
	r.dora(c)
	r.checkInvariants()
	r.step = 4
	r.etcdBack()
	r.checkInvariants()
}

// startNodesApart starts a one-member etcd and pivirtd n1 and n2, each in
// its own namespace (etcd's client sockets are in a directory every
// namespace reaches), with their segments applied and Ready.
func startNodesApart(t *testing.T) ([2]clusterNode, *etcdtest.Cluster) {
	t.Helper()
	testutil.RequireRoot(t)
	ec := etcdtest.StartCluster(t, etcdtest.ClusterOptions{Members: 1, Command: testutil.NewNetNS(t).Command})
	tokens, tokenFile := clusterTokens(t, "cluster-token-orderings-0123")
	bins := harness.Build(t)
	var nodes [2]clusterNode
	for i := range nodes {
		ns := testutil.NewNetNS(t)
		d := harness.StartDaemon(t, bins, harness.Options{NetNS: ns.Path(), Args: []string{
			"--store", "etcd", "--etcd-endpoints", strings.Join(ec.Endpoints, ","), "--node", clusterNames[i],
			"--listen", "127.0.0.1:7701", "--token-file", tokens, "--metrics", "127.0.0.1:9464"}})
		nodes[i] = clusterNode{d: d, ns: ns, bins: bins, server: "http://127.0.0.1:7701", token: tokenFile}
	}
	segs := clusterSeg("cl-n1", "n1", "br-cl1", "10", "50") + "---\n" + clusterSeg("cl-n2", "n2", "br-cl2", "51", "99")
	if _, errOut, err := nodes[0].ctl(t, segs, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply segments: %v: %s", err, errOut)
	}
	waitFor(t, 30*time.Second, "both segments Ready", func() bool {
		out, _, _ := nodes[1].ctl(t, "", "get", "segments")
		return strings.Count(out, "Ready") == 2
	})
	return nodes, ec
}

// pause stops node i's pivirtd (SIGSTOP: its journal's writer and its
// watch wait) and returns what resumes it; the test's end resumes it too.
func (r *clusterRun) pause(i int) (resume func()) {
	pid := r.nodes[i].d.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		r.t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				r.t.Error(err)
			}
		})
	}
	r.t.Cleanup(resume)
	return resume
}

func (r *clusterRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d (seed %d): %s", r.step, r.seed, fmt.Sprintf(format, args...))
}

// maxAway bounds an outage, in steps.
const maxAway = 8

// outage sends etcd away (stopped or frozen) before one step in 25, and
// brings it back within maxAway steps; it reports whether etcd came back.
func (r *clusterRun) outage() (back bool) {
	n := r.outages.IntN(100)
	switch {
	case r.away == 0 && n < 4:
		r.etcdAway(r.outages.IntN(2) == 0)
	case r.away > 0 && (n < 20 || r.away >= maxAway):
		r.etcdBack()
		return true
	case r.away > 0:
		r.away++
	}
	return false
}

// etcdAway stops etcd, or freezes it.
func (r *clusterRun) etcdAway(frozen bool) {
	r.t.Logf("step %d: etcd goes away (frozen: %v)", r.step, frozen)
	var err error
	if frozen {
		err = r.ec.FreezeAll()
	} else {
		r.ec.StopAll()
	}
	if err != nil {
		r.fatalf("etcd away: %v", err)
	}
	r.away, r.frozen = 1, frozen
}

// etcdBack ends the outage.
func (r *clusterRun) etcdBack() {
	r.t.Logf("step %d: etcd back after %d steps", r.step, r.away)
	if r.frozen {
		if err := r.ec.ThawAll(); err != nil {
			r.fatalf("etcd back: %v", err)
		}
	} else {
		r.ec.StartAll(r.t)
	}
	r.away, r.settle = 0, 30*time.Second
	for _, c := range r.guests {
		c.ackedAway = false
	}
}

func (r *clusterRun) randomStep() {
	c := r.guests[r.rng.IntN(len(r.guests))]
	via := r.rng.IntN(2) // the node whose API the operator uses
	switch n := r.rng.IntN(100); {
	case n < 30:
		r.dora(c)
	case n < 40:
		r.renew(c)
	case n < 48:
		r.release(c)
	case n < 65:
		r.move(c)
	case n < 79:
		r.applyLease(c, via)
	case n < 88:
		r.deleteLease(c, via)
	default:
		r.kill9(r.rng.IntN(2))
	}
}

// dora runs DISCOVER/REQUEST on the guest's bridge: it must be ACKed an
// address no other guest holds (the applied one, after an apply).
func (r *clusterRun) dora(c *clusterGuest) {
	r.t.Logf("step %d: DORA %s on %s", r.step, c.g.MAC, clusterNames[c.node])
	d, _ := dhcpv4.NewDiscovery(c.raw.mac[:])
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	offer, _ := c.raw.exchange(d, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	if offer.MessageType() != dhcpv4.MessageTypeOffer {
		r.fatalf("DISCOVER of %s on %s: %s", c.g.MAC, clusterNames[c.node], offer.MessageType())
	}
	req, _ := dhcpv4.NewRequestFromOffer(offer)
	ack, srv := c.raw.exchange(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), bcast)
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		r.fatalf("REQUEST of %s for %s on %s: %s", c.g.MAC, offer.YourIPAddr, clusterNames[c.node], ack.MessageType())
	}
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if c.applied && ip != c.acked {
		r.fatalf("%s holds the applied lease %s but its DORA on %s was ACKed %s", c.g.MAC, c.acked, clusterNames[c.node], ip)
	}
	for _, o := range r.guests {
		if o != c && o.acked == ip {
			r.fatalf("%s was ACKed %s on %s, which %s holds", c.g.MAC, ip, clusterNames[c.node], o.g.MAC)
		}
	}
	r.used[ip] = true
	c.acked, c.ack, c.srv, c.applied, c.ackedAway = ip, ack, [6]byte(srv), false, r.away > 0
}

// renew unicasts a RENEWING REQUEST to the server that ACKed the guest:
// its lease stands, so it is ACKed the same address.
func (r *clusterRun) renew(c *clusterGuest) {
	if c.ack == nil {
		r.dora(c)
		return
	}
	r.t.Logf("step %d: renew %s %s on %s", r.step, c.g.MAC, c.acked, clusterNames[c.node])
	rep, _ := c.raw.renew(c.ack, c.srv)
	if ip, _ := netip.AddrFromSlice(rep.YourIPAddr.To4()); rep.MessageType() != dhcpv4.MessageTypeAck || ip != c.acked {
		r.fatalf("renewal of %s at %s on %s: %s %s", c.g.MAC, c.acked, clusterNames[c.node], rep.MessageType(), ip)
	}
	c.ack = rep
}

// initReboot is a moved guest's first REQUEST on its new node, from its
// recorded lease (no server id, option 50): the store shows the lease
// its MAC's, so the new node ACKs the same address and takes the lease
// over. As a client does, it sends the REQUEST again when no reply
// comes (three times, a second apart): a node that has not heard of the
// address yet (the other node's write on its way through the store) says
// nothing rather than NAK it.
func (r *clusterRun) initReboot(c *clusterGuest) {
	r.t.Logf("step %d: INIT-REBOOT %s %s on %s", r.step, c.g.MAC, c.acked, clusterNames[c.node])
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.ack.YourIPAddr)))
	var rep *dhcpv4.DHCPv4
	var srv net.HardwareAddr
	for try := 0; try < 3 && rep == nil; try++ {
		rep, srv = c.raw.exchangeWithin(m, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, time.Second)
	}
	if c.ackedAway && (rep == nil || rep.MessageType() == dhcpv4.MessageTypeNak) {
		// ACKed on the other node while etcd is away: not known here.
		r.t.Logf("step %d: INIT-REBOOT of %s not ACKed on %s with its lease unknown there (%v); DORA", r.step, c.g.MAC, clusterNames[c.node], rep != nil)
		r.dora(c)
		return
	}
	if rep == nil {
		r.fatalf("INIT-REBOOT of %s at %s on %s: no reply", c.g.MAC, c.acked, clusterNames[c.node])
	}
	if ip, _ := netip.AddrFromSlice(rep.YourIPAddr.To4()); rep.MessageType() != dhcpv4.MessageTypeAck || ip != c.acked {
		r.fatalf("INIT-REBOOT of %s at %s on %s: %s %s", c.g.MAC, c.acked, clusterNames[c.node], rep.MessageType(), ip)
	}
	c.ack, c.srv = rep, [6]byte(srv)
}

// release sends a RELEASE of the guest's ACKed lease to its server.
func (r *clusterRun) release(c *clusterGuest) {
	if c.ack == nil {
		return
	}
	r.t.Logf("step %d: release %s %s on %s", r.step, c.g.MAC, c.acked, clusterNames[c.node])
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.raw.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(c.ack.YourIPAddr), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(c.ack.ServerIdentifier())))
	c.raw.send(m, c.acked, netip.MustParseAddr("10.77.0.1"), c.srv)
	c.acked, c.ack, c.applied = netip.Addr{}, nil, false
}

// move enslaves the guest's port to the other node's bridge (a VM
// migrated, no RELEASE); there it asks for its lease again (INIT-REBOOT)
// or starts over (DORA).
func (r *clusterRun) move(c *clusterGuest) {
	r.movePort(c)
	if c.ack != nil && r.rng.IntN(2) == 0 {
		r.initReboot(c)
		return
	}
	r.dora(c)
}

// movePort enslaves the guest's port to the other node's bridge.
func (r *clusterRun) movePort(c *clusterGuest) {
	to := 1 - c.node
	r.t.Logf("step %d: move %s (%v) from %s to %s", r.step, c.g.MAC, c.acked, clusterNames[c.node], clusterNames[to])
	from := r.nodes[c.node].ns.Name
	for _, args := range [][]string{
		{"-n", from, "link", "set", c.g.HostSide, "netns", r.nodes[to].ns.Name},
		{"-n", r.nodes[to].ns.Name, "link", "set", c.g.HostSide, "master", clusterBridges[to], "up"},
	} {
		if out, err := ipCmd(args...); err != nil {
			r.fatalf("moving %s: ip %s: %v: %s", c.g.HostSide, strings.Join(args, " "), err, out)
		}
	}
	c.node = to
	c.applied = false // an applied lease was for the other node's network
	waitPortForwarding(r.t, r.nodes[to].ns, c.g.HostSide)
}

// applyLease is the operator applying, through node via, a dynamic lease
// for the guest at an address of its node's range no one was given in
// this run: from then on it is the guest's lease.
func (r *clusterRun) applyLease(c *clusterGuest, via int) {
	if r.away > 0 {
		return // writes fail with etcd away (TestPrivilegedClusterThreeNodes checks how)
	}
	var ip netip.Addr
	for last := clusterRanges[c.node][1]; last >= clusterRanges[c.node][0]; last-- { // from the top: DORA hands out from the bottom
		if a := netip.AddrFrom4([4]byte{10, 77, 0, last}); !r.used[a] {
			ip = a
			break
		}
	}
	if !ip.IsValid() {
		return
	}
	r.t.Logf("step %d: apply dynamic lease %s -> %s (on %s) through %s (held %v)", r.step, c.g.MAC, ip, clusterNames[c.node], clusterNames[via], c.acked)
	doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: %s, macAddress: %q, ipAddress: %s, type: dynamic, expiresAt: %q}\n",
		leaseName(c.g.MAC), clusterBridges[c.node], c.g.MAC.String(), ip, time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339))
	if _, errOut, err := r.nodes[via].ctl(r.t, doc, "apply", "-f", "-"); err != nil {
		r.fatalf("applying a dynamic lease %s for %s through %s: %v: %s", ip, c.g.MAC, clusterNames[via], err, errOut)
	}
	r.used[ip] = true
	c.acked, c.ack, c.applied = ip, nil, true
}

// deleteLease is the operator deleting the guest's lease through node
// via: the guest, not told, holds nothing from then on.
func (r *clusterRun) deleteLease(c *clusterGuest, via int) {
	if !c.acked.IsValid() || r.away > 0 {
		return
	}
	r.t.Logf("step %d: delete lease %s (%s) through %s", r.step, leaseName(c.g.MAC), c.acked, clusterNames[via])
	if _, errOut, err := r.nodes[via].ctl(r.t, "", "delete", "lease", leaseName(c.g.MAC)); err != nil {
		r.fatalf("deleting %s through %s: %v: %s", leaseName(c.g.MAC), clusterNames[via], err, errOut)
	}
	c.acked, c.ack, c.applied = netip.Addr{}, nil, false
}

func (r *clusterRun) kill9(i int) {
	r.t.Logf("step %d: kill -9 pivirtd %s", r.step, clusterNames[i])
	d := r.nodes[i].d
	d.Kill9()
	if r.away == 0 {
		d.Start()
		waitFor(r.t, 20*time.Second, "both segments Ready after kill -9", func() bool {
			res := d.Ctl("get", "segments")
			return res.Code == 0 && strings.Count(res.Stdout, "Ready") == 2
		})
		return
	}
	// etcd is away: pivirtd serves from the cache it saved (its first
	// list gives up after the cache's start timeout).
	mark := len(d.Log())
	d.StartReadyOn("inspect", "map", "pv_leases")
	waitFor(r.t, 40*time.Second, "DHCP served again from the saved cache after kill -9", func() bool {
		return strings.Contains(d.Log()[mark:], "DHCP responder started")
	})
}

// checkInvariants waits up to 8 s (the store's watch reaching the other
// node), or settle, for the store and both nodes' pins to agree with the
// guests; with etcd away, for the guests' nodes to pin their leases.
func (r *clusterRun) checkInvariants() {
	r.t.Helper()
	deadline := time.Now().Add(max(8*time.Second, r.settle))
	r.settle = 0
	for {
		problems := r.violations()
		if r.away > 0 {
			problems = r.violationsAway()
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.fatalf("invariants: %s", strings.Join(problems, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// violationsAway: with etcd away, each guest's node must pin its lease.
func (r *clusterRun) violationsAway() []string {
	var bad []string
	for i, n := range r.nodes {
		pins, _, problem := livePins(n.d)
		if problem != "" {
			return []string{clusterNames[i] + ": " + problem}
		}
		for _, c := range r.guests {
			if c.node == i && c.acked.IsValid() && pins[c.g.MAC.String()] != c.acked.String() {
				bad = append(bad, fmt.Sprintf("%s holds %s on %s with etcd away, pinned there %q", c.g.MAC, c.acked, clusterNames[i], pins[c.g.MAC.String()]))
			}
		}
	}
	return bad
}

func (r *clusterRun) violations() []string {
	byName, bad := storedLeases(r.nodes[0].d)
	if byName == nil {
		return bad
	}
	var pins [2]map[string]string
	for i, n := range r.nodes {
		p, _, problem := livePins(n.d)
		if problem != "" {
			return []string{clusterNames[i] + ": " + problem}
		}
		pins[i] = p
		for _, d := range pinDrift(n.d) {
			bad = append(bad, clusterNames[i]+": "+d)
		}
	}
	for _, c := range r.guests {
		mac, here := c.g.MAC.String(), c.node
		l, stored := byName[leaseName(c.g.MAC)]
		if !c.acked.IsValid() {
			if stored {
				bad = append(bad, fmt.Sprintf("%s holds no lease, the store has %s at %s", mac, l.Metadata.Name, l.Spec.IPAddress))
			}
			for i := range pins {
				if ip, ok := pins[i][mac]; ok {
					bad = append(bad, fmt.Sprintf("%s holds no lease, %s pins it %s", mac, clusterNames[i], ip))
				}
			}
			continue
		}
		if !stored || l.Spec.IPAddress != c.acked.String() || l.Spec.Network != clusterBridges[here] {
			bad = append(bad, fmt.Sprintf("%s holds %s on %s, the store has %+v", mac, c.acked, clusterBridges[here], l.Spec))
		}
		if pins[here][mac] != c.acked.String() {
			bad = append(bad, fmt.Sprintf("%s holds %s on %s, pinned there %q", mac, c.acked, clusterNames[here], pins[here][mac]))
		}
		if ip, ok := pins[1-here][mac]; ok {
			bad = append(bad, fmt.Sprintf("%s is on %s, %s still pins it %s", mac, clusterNames[here], clusterNames[1-here], ip))
		}
	}
	return bad
}
