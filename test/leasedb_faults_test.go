// SPDX-License-Identifier: Apache-2.0

package test

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedJournalDiskFull: the lease journal's file system fills
// up (a 256 KiB tmpfs over the journal directory, then a file that takes
// what is left), every ACK writing (--dhcp-lease-reuse 0):
//
//	host netns: virbr10 (192.168.100.1/24) ── veth ── guest a, guest b
//	STATE/dhcp-journal: tmpfs, size=256k, full
//
// Renewals are ACKed while the journal's last page has room; once a
// write fails (cut short by ENOSPC: the journal cuts it off) no ACK
// leaves, so a lease is never ACKed beyond what is durable. After kill -9
// and a start on the full disk, the client's lease is pinned to the last
// expiry it was ACKed, not an older one. With space back, renewals and a
// new client's DORA are ACKed again, and after another kill -9 both
// leases are pinned and stored, no journal record skipped as unreadable.
func TestPrivilegedJournalDiskFull(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d, segmentReady := startFaultSegment(t, "--dhcp-lease-reuse", "0", "--dhcp-rate-per-mac", "0", "--dhcp-rate-per-port", "0",
		"--metrics", "127.0.0.1:9464")

	journal := filepath.Join(d.StateDir, "dhcp-journal")
	a, b, ca, cb := onSmallDisk(t, host, d, segmentReady, journal, 256<<10, 0x5c)
	ack, srvMAC := ca.dora()
	ipA := ack.YourIPAddr.String()
	leaseTime := ack.IPAddressLeaseTime(0)
	lastACKed := time.Now().Add(leaseTime) // expiry of the last lease ACKed after its write
	time.Sleep(2 * time.Second)            // so a renewal's expiry is distinguishable from the DORA's

	// Renewals are written and ACKed while the journal's last page has
	// room; the first that cannot be written gets no ACK; from then on
	// each is ACKed at once for the time the last written one has left.
	filler := fillFileSystem(t, journal)
	written, refused, unwritten := 0, 0, 0
	for i := 0; i < 200 && unwritten < 5; i++ {
		r := renewWithin(ca, ack, srvMAC, time.Second)
		switch {
		case r == nil && unwritten > 0:
			t.Fatalf("renewal %d got no ACK after the durable lease was ACKed on the full disk", i)
		case r == nil:
			refused++
		case r.MessageType() != dhcpv4.MessageTypeAck:
			t.Fatalf("renewal %d on the full disk: %s", i, r.MessageType())
		case refused == 0:
			if got := r.IPAddressLeaseTime(0); got != leaseTime {
				t.Fatalf("renewal %d, written, ACKed for %s, want %s", i, got, leaseTime)
			}
			written++
			lastACKed = time.Now().Add(leaseTime)
		default:
			got, left := r.IPAddressLeaseTime(0), time.Until(lastACKed)
			if got > left+2*time.Second || got < left-2*time.Second {
				t.Fatalf("renewal %d on the full disk ACKed for %s; the last written lease has %s left", i, got, left)
			}
			unwritten++
			time.Sleep(time.Second) // so each ACK's time left is shorter
		}
	}
	if refused == 0 || unwritten < 5 {
		t.Fatalf("200 renewals on a full file system: %d written, %d not ACKed, %d ACKed the time left", written, refused, unwritten)
	}
	t.Logf("full file system: %d renewals written and ACKed (the journal's last page had room), %d not ACKed, then %d ACKed the time left",
		written, refused, unwritten)
	if n := strings.Count(d.Log(), "no space left on device"); n < refused+unwritten {
		t.Fatalf("%d renewals not written, %d ENOSPC in the log; log:\n%s", refused+unwritten, n, d.Log())
	}
	if v := metricOf(t, host, "pivirt_dhcp_unwritable_acks_total"); v != strconv.Itoa(unwritten) {
		t.Fatalf("pivirt_dhcp_unwritable_acks_total %s, want %d", v, unwritten)
	}
	if v, _ := strconv.Atoi(metricOf(t, host, "pivirt_dhcp_journal_write_errors_total")); v < refused+unwritten {
		t.Fatalf("pivirt_dhcp_journal_write_errors_total %d, want at least the %d commits that failed", v, refused+unwritten)
	}
	if v := metricOf(t, host, "pivirt_dhcp_store_errors_total"); v != "0" {
		t.Fatalf("pivirt_dhcp_store_errors_total %s: the store's disk is not full, the journal's is", v)
	}

	d.Kill9()
	d.Start()
	segmentReady("segment Ready after kill -9 on the full disk")
	waitFor(t, 10*time.Second, "a's lease pinned to its last ACKed expiry after kill -9 on the full disk", func() bool {
		ip, exp := pinOf(t, d, a.MAC)
		return ip == ipA && !exp.Before(lastACKed.Add(-time.Second))
	})

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var renewed *dhcpv4.DHCPv4
	for i := 0; i < 5 && renewed == nil; i++ {
		renewed = renewWithin(ca, ack, srvMAC, 2*time.Second)
	}
	if renewed == nil || renewed.MessageType() != dhcpv4.MessageTypeAck || renewed.YourIPAddr.String() != ipA {
		t.Fatalf("a's renewal with space back: %v", renewed)
	}
	ackB, _ := cb.dora()
	ipB := ackB.YourIPAddr.String()

	keptAcrossKill9(t, d, segmentReady, clientLease{a.MAC, ipA}, clientLease{b.MAC, ipB})
}

// TestPrivilegedStateDiskFull: the whole state directory (the store's
// state.db and the lease journal) on a file system that fills up, as
// /var/lib does. While it is full: a client renewing is ACKed the time
// its lease has left, a new client gets no lease, an apply fails naming
// the disk and stores nothing; pivirtd killed -9 starts again on the
// full disk with the lease pinned. With space back, everything is
// served and stored, and nothing is lost across another kill -9.
func TestPrivilegedStateDiskFull(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d, segmentReady := startFaultSegment(t, "--dhcp-lease-reuse", "0", "--dhcp-rate-per-mac", "0", "--dhcp-rate-per-port", "0")
	a, b, ca, cb := onSmallDisk(t, host, d, segmentReady, d.StateDir, 4<<20, 0x5e)
	ack, srvMAC := ca.dora()
	ipA := ack.YourIPAddr.String()
	ackedUntil := time.Now().Add(ack.IPAddressLeaseTime(0))
	waitFor(t, 10*time.Second, "a's lease stored", func() bool { _, ok := getLease(t, d, leaseName(a.MAC)); return ok })

	filler := fillFileSystem(t, d.StateDir)
	// renewLeft renews a's lease until it has been ACKed the time its
	// lease has left n times (a written renewal's ACK, while the
	// journal's last page has room, moves the lease on; the first write
	// that fails withholds its ACK).
	renewLeft := func(what string, n int) {
		t.Helper()
		left := 0
		for i := 0; i < 200 && left < n; i++ {
			r := renewWithin(ca, ack, srvMAC, time.Second)
			switch {
			case r == nil:
				continue
			case r.MessageType() != dhcpv4.MessageTypeAck || r.YourIPAddr.String() != ipA:
				t.Fatalf("%s: a's renewal got %s %s, want an ACK of %s", what, r.MessageType(), r.YourIPAddr, ipA)
			case r.IPAddressLeaseTime(0) == ack.IPAddressLeaseTime(0):
				ackedUntil = time.Now().Add(r.IPAddressLeaseTime(0))
			case r.IPAddressLeaseTime(0) > time.Until(ackedUntil)+2*time.Second:
				t.Fatalf("%s: a's renewal ACKed for %s, its lease has %s left", what, r.IPAddressLeaseTime(0), time.Until(ackedUntil))
			default:
				left++
			}
		}
		if left < n {
			t.Fatalf("%s: a's renewals ACKed the time left %d times in 200, want %d", what, left, n)
		}
	}
	renewLeft("full state disk", 3)
	if !strings.Contains(d.Log(), "no space left on device") {
		t.Fatalf("renewals ACKed the time left on the full disk and no ENOSPC in the log:\n%s", d.Log())
	}
	journalStatus := func() string {
		t.Helper()
		r := d.Ctl("status")
		for _, l := range strings.Split(r.Stdout, "\n") {
			if strings.HasPrefix(l, "Journal:") {
				return l
			}
		}
		t.Fatalf("no Journal line in pivirtctl status: %s", r)
		return ""
	}
	if l := journalStatus(); !strings.Contains(l, "cannot be written since") || !strings.Contains(l, "no space left on device") {
		t.Fatalf("pivirtctl status on the full disk: %q, want the journal failing", l)
	}

	port := []byte(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: full-disk-res}
spec: {network: virbr10, macAddress: "52:54:00:d1:5e:03", ipAddress: "192.168.100.40"}
`)
	if r := d.CtlStdin(port, "apply", "-f", "-"); r.Code == 0 || !strings.Contains(r.Stderr, "no space left on device") {
		t.Fatalf("apply on the full disk: %s; want an error naming the full disk", r)
	}
	if r := d.Ctl("get", "dhcpleases", "full-disk-res"); r.Code == 0 {
		t.Fatalf("the reservation applied on the full disk is stored: %s", r)
	}
	offer, _ := cb.exchange(discoverOf(cb), netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), broadcastMAC)
	req, _ := dhcpv4.NewRequestFromOffer(offer)
	if r, _ := cb.exchangeWithin(req, netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), broadcastMAC, 2*time.Second); r != nil &&
		r.MessageType() == dhcpv4.MessageTypeAck {
		t.Fatalf("b ACKed %s on the full disk: its lease cannot be written", r.YourIPAddr)
	}

	d.Kill9()
	d.Start()
	segmentReady("segment Ready after kill -9 on the full state disk")
	waitFor(t, 10*time.Second, "a's lease pinned after kill -9 on the full disk", func() bool {
		ip, exp := pinOf(t, d, a.MAC)
		return ip == ipA && !exp.Before(ackedUntil.Add(-time.Second))
	})
	renewLeft("restarted on the full state disk", 2)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var renewed *dhcpv4.DHCPv4
	for i := 0; i < 5 && (renewed == nil || renewed.IPAddressLeaseTime(0) != ack.IPAddressLeaseTime(0)); i++ {
		renewed = renewWithin(ca, ack, srvMAC, 2*time.Second)
	}
	if renewed == nil || renewed.IPAddressLeaseTime(0) != ack.IPAddressLeaseTime(0) {
		t.Fatalf("a's renewal with space back: %v, want a whole lease", renewed)
	}
	ackB, _ := cb.dora()
	ipB := ackB.YourIPAddr.String()
	if r := d.CtlStdin(port, "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply with space back: %s", r)
	}
	if l := journalStatus(); !strings.HasSuffix(l, ", ok") {
		t.Fatalf("pivirtctl status with space back: %q, want the journal ok", l)
	}

	keptAcrossKill9(t, d, segmentReady, clientLease{a.MAC, ipA}, clientLease{b.MAC, ipB})
	if r := d.Ctl("get", "dhcpleases", "full-disk-res"); r.Code != 0 {
		t.Fatalf("the reservation applied with space back is gone after kill -9: %s", r)
	}
}

// onSmallDisk restarts pivirtd with dir on a tmpfs of size bytes, then
// attaches two guests (52:54:00:d1:id:01 and :02) and their raw clients.
func onSmallDisk(t *testing.T, host *testutil.NetNS, d *harness.Daemon, segmentReady func(string), dir string, size int, id byte) (a, b *guest.Guest, ca, cb *rawClient) {
	t.Helper()
	d.Stop()
	mountSmallJournal(t, dir, size)
	d.Start()
	segmentReady("segment Ready on the small file system")
	a = guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xd1, id, 0x01})
	b = guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xd1, id, 0x02})
	waitForwarding(t, host, 2)
	return a, b, newRawClient(t, a), newRawClient(t, b)
}

// clientLease is a client's MAC and the address it was ACKed.
type clientLease struct {
	mac net.HardwareAddr
	ip  string
}

// keptAcrossKill9 kills pivirtd -9 and starts it again: each lease is
// pinned and stored, and the lease database skipped nothing of the
// journal the full disk had cut.
func keptAcrossKill9(t *testing.T, d *harness.Daemon, segmentReady func(string), leases ...clientLease) {
	t.Helper()
	d.Kill9()
	d.Start()
	segmentReady("segment Ready after kill -9 with space back")
	for _, want := range leases {
		waitFor(t, 10*time.Second, want.mac.String()+" pinned and stored", func() bool {
			l, ok := getLease(t, d, leaseName(want.mac))
			return boundPin(t, d, want.mac) == want.ip && ok && l.Spec.IPAddress == want.ip
		})
	}
	if strings.Contains(d.Log(), "lease database: skipped what it could not read") {
		t.Fatalf("the journal lost a record to the full disk; log:\n%s", d.Log())
	}
}

// broadcastMAC is Ethernet's broadcast address.
var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// discoverOf is a DHCPDISCOVER of c.
func discoverOf(c *rawClient) *dhcpv4.DHCPv4 {
	d, _ := dhcpv4.NewDiscovery(c.mac[:])
	return d
}

// mountSmallJournal mounts a tmpfs of size bytes over dir, with what dir
// held copied in; unmounted (lazily) at cleanup.
func mountSmallJournal(t *testing.T, dir string, size int) {
	t.Helper()
	saved := dir + ".saved"
	if err := os.Rename(dir, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs over %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if out, err := exec.Command("cp", "-a", saved+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the journal in: %v: %s", err, out)
	}
}

// fillFileSystem writes a file in dir until the file system is full and
// returns its path.
func fillFileSystem(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i := 0; i < 1<<14; i++ { // 64 MiB at most
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
	t.Fatalf("%s never filled up", dir)
	return ""
}

// renewWithin sends a RENEWING REQUEST for ack's lease and returns the
// reply, or nil when none comes within wait.
func renewWithin(c *rawClient, ack *dhcpv4.DHCPv4, srvMAC [6]byte, wait time.Duration) *dhcpv4.DHCPv4 {
	c.t.Helper()
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	srv, _ := netip.AddrFromSlice(ack.ServerIdentifier().To4())
	m, _ := dhcpv4.New(dhcpv4.WithHwAddr(c.mac[:]), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithClientIP(ack.YourIPAddr))
	r, _ := c.exchangeWithin(m, ip, srv, srvMAC, wait)
	return r
}

// pinOf is the IP and expiry pv_leases pins for mac, bound ("" none).
func pinOf(t *testing.T, d *harness.Daemon, mac net.HardwareAddr) (string, time.Time) {
	t.Helper()
	var pins []struct {
		MAC, IP, Flags string
		ExpiresAt      *time.Time
	}
	if err := json.Unmarshal([]byte(d.MustCtl("inspect", "map", "pv_leases", "-o", "json")), &pins); err != nil {
		t.Fatal(err)
	}
	for _, p := range pins {
		if p.MAC == mac.String() && strings.Contains(p.Flags, "bound") && p.ExpiresAt != nil {
			return p.IP, *p.ExpiresAt
		}
	}
	return "", time.Time{}
}

// TestPrivilegedLeaseSnapshotDamaged: the lease database's snapshot is
// damaged while pivirtd is down (a flipped byte): pivirtd starts all the
// same, says so in its log and metrics, sets the file aside, and serves:
// a client's lease stays pinned and stored, and a new client gets one.
func TestPrivilegedLeaseSnapshotDamaged(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host, d, segmentReady := startFaultSegment(t, "--metrics", "127.0.0.1:9464")
	skipped := func() string { return metricOf(t, host, "pivirt_dhcp_lease_db_skipped") }
	if v := skipped(); v != "0" {
		t.Fatalf("pivirt_dhcp_lease_db_skipped %s before any damage, want 0", v)
	}
	a := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xd1, 0x5d, 0x01})
	b := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0xd1, 0x5d, 0x02})
	waitForwarding(t, host, 2)
	ackA, _ := newRawClient(t, a).dora()
	ipA := ackA.YourIPAddr.String()
	waitFor(t, 10*time.Second, "a's lease stored", func() bool { _, ok := getLease(t, d, leaseName(a.MAC)); return ok })

	d.Stop()
	snap := filepath.Join(d.StateDir, "dhcp-journal", "leases.snapshot")
	raw, err := os.ReadFile(snap)
	if err != nil {
		t.Fatalf("the lease database has no snapshot to damage: %v", err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(snap, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d.Start()
	segmentReady("segment Ready with a damaged snapshot")
	if !strings.Contains(d.Log(), "lease snapshot damaged") {
		t.Fatalf("the damaged snapshot is not in the log:\n%s", d.Log())
	}
	if v := skipped(); v != "1" {
		t.Fatalf("pivirt_dhcp_lease_db_skipped %s after the damaged snapshot, want 1", v)
	}
	if aside, _ := filepath.Glob(snap + ".damaged-*"); len(aside) != 1 {
		t.Fatalf("set aside: %v, want one file", aside)
	}
	waitFor(t, 10*time.Second, "a's lease pinned and stored", func() bool {
		l, ok := getLease(t, d, leaseName(a.MAC))
		return boundPin(t, d, a.MAC) == ipA && ok && l.Spec.IPAddress == ipA
	})
	if ackB, _ := newRawClient(t, b).dora(); ackB.YourIPAddr.String() == ipA {
		t.Fatalf("b was ACKed a's address %s", ipA)
	}
}

// metricOf is the value of the series named name (of its first, with
// labels or not) that pivirtd serves on 127.0.0.1:9464 in host.
func metricOf(t *testing.T, host *testutil.NetNS, name string) string {
	t.Helper()
	out, err := host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatalf("scraping the metrics: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if series, v, ok := strings.Cut(line, " "); ok && (series == name || strings.HasPrefix(series, name+"{")) {
			return v
		}
	}
	t.Fatalf("no %s in:\n%s", name, out)
	return ""
}

// startFaultSegment starts pivirtd (with args) in a new netns with the
// ordering tests' segment, and returns a wait for the segment Ready
// (after a restart too).
func startFaultSegment(t *testing.T, args ...string) (*testutil.NetNS, *harness.Daemon, func(what string)) {
	t.Helper()
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: args})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	ready := func(what string) {
		t.Helper()
		waitFor(t, 20*time.Second, what, func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	}
	ready("segment Ready")
	return host, d, ready
}
