// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/vpcrouter"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// natEnv runs the NAT controller in-process against its own bbolt store,
// on a thread inside host (the hypervisor or gateway node's namespace),
// until pivirtd's controllers() runs it; objects go in through the same
// admission Index the daemon uses.
type natEnv struct {
	t     *testing.T
	host  *testutil.NetNS
	d     *harness.Daemon
	bpffs string
}

// startNAT starts the real pivirtd in host (its NAT controller realizes
// routers and programs the uplinks) on a private bpffs, with extra flags.
func startNAT(t *testing.T, host *testutil.NetNS, args ...string) *natEnv {
	t.Helper()
	testutil.RequireTool(t, "nsenter")
	bpffs := testutil.TempBPFFS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), BPFFS: bpffs, Args: args})
	return &natEnv{t: t, host: host, d: d, bpffs: bpffs}
}

// stop stops pivirtd (SIGTERM); start starts it again on the same state,
// as a restart would.
func (e *natEnv) stop()  { e.d.Stop() }
func (e *natEnv) start() { e.d.Start() }

// apply applies a multi-document YAML manifest with pivirtctl.
func (e *natEnv) apply(manifest string) {
	e.t.Helper()
	if r := e.d.CtlStdin([]byte(manifest), "apply", "-f", "-"); r.Code != 0 {
		e.t.Fatalf("apply: %s", r)
	}
}

func (e *natEnv) delete(kind, name string) {
	e.t.Helper()
	e.d.MustCtl("delete", kind, name)
}

// waitStatus waits until the object's status phase is phase and returns
// the status as JSON.
func (e *natEnv) waitStatus(kind, name, phase string) string {
	e.t.Helper()
	var last string
	ok := natWaitFor(10*time.Second, func() bool {
		var o struct {
			Status json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal([]byte(e.d.Ctl("get", kind, name, "-o", "json").Stdout), &o); err != nil {
			return false
		}
		var st struct {
			Phase string `json:"phase"`
		}
		_ = json.Unmarshal(o.Status, &st)
		last = string(o.Status)
		return st.Phase == phase
	})
	if !ok {
		e.t.Fatalf("%s/%s never reached phase %s; status %s\n%s", kind, name, phase, last, e.d.Log())
	}
	return last
}

// mappings returns the live NAT mappings as natmap prints them.
func (e *natEnv) mappings() []string {
	e.t.Helper()
	o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer o.Close()
	ms, err := natmap.New(o).Mappings()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.String())
	}
	return out
}

// flows returns the masqueraded flows in the live pv_masq_ct.
func (e *natEnv) flows() []nat.Flow {
	e.t.Helper()
	o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer o.Close()
	fs, err := o.Flows()
	if err != nil {
		e.t.Fatal(err)
	}
	return fs
}

// hairpinFlows returns the hairpin flows in the live pv_nat_hairpin.
func (e *natEnv) hairpinFlows() []nat.Flow {
	e.t.Helper()
	o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer o.Close()
	fs, err := o.HairpinFlows()
	if err != nil {
		e.t.Fatal(err)
	}
	return fs
}

// reasons returns the NAT event and drop counters of an uplink scope.
func (e *natEnv) reasons(scope uint32) map[nat.Reason]uint64 {
	e.t.Helper()
	o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer o.Close()
	rs, err := natmap.New(o).Reasons(scope)
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

// forwarded returns how many translated packets of scope the program
// forwarded itself (bpf_redirect or, without a neighbour, bpf_redirect_neigh).
func (e *natEnv) forwarded(scope uint32) uint64 {
	rs := e.reasons(scope)
	return rs[nat.ReasonRedirect] + rs[nat.ReasonRedirectNeigh]
}

// natWaitFor polls cond every 20 ms until it holds or timeout passes.
func natWaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// link creates a veth pair with one end (name a) in ns a and the other
// (name b) in ns b, both up.
func linkNS(t *testing.T, a *testutil.NetNS, aName string, b *testutil.NetNS, bName string) {
	t.Helper()
	if err := a.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(int(b.Handle()))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth %s/%s: %w", aName, bName, err)
		}
		l, err := netlink.LinkByName(aName)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(func() error {
		l, err := netlink.LinkByName(bName)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		t.Fatal(err)
	}
}

// addBridge creates an up bridge in ns, optionally with an address.
func addBridge(t *testing.T, ns *testutil.NetNS, name, addr string) {
	t.Helper()
	if err := ns.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if addr != "" {
			a, err := netlink.ParseAddr(addr)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(l, a); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		t.Fatal(err)
	}
}

// enslave puts dev (in ns) on bridge br.
func enslave(t *testing.T, ns *testutil.NetNS, dev, br string) {
	t.Helper()
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		b, err := netlink.LinkByName(br)
		if err != nil {
			return err
		}
		return netlink.LinkSetMaster(l, b)
	}); err != nil {
		t.Fatal(err)
	}
}

// ipConfig gives dev in ns an address and, if gw is set, a default route.
func ipConfig(t *testing.T, ns *testutil.NetNS, dev, addr, gw string) {
	t.Helper()
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
		if gw == "" {
			return nil
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(gw)})
	}); err != nil {
		t.Fatal(err)
	}
}

// echoServer answers each TCP connection and UDP datagram with the peer
// address it saw ("from=IP:port"), and counts UDP datagrams.
type echoServer struct {
	udpSeen atomic.Int64
}

// serve starts TCP and UDP echo on addr (IP:port) inside ns until the
// test ends.
func serve(t *testing.T, ns *testutil.NetNS, addr string) *echoServer {
	t.Helper()
	s := &echoServer{}
	var (
		l  net.Listener
		pc net.PacketConn
	)
	if err := ns.Do(func() error {
		var err error
		if l, err = net.Listen("tcp4", addr); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); pc.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				fmt.Fprintf(c, "from=%s\n", c.RemoteAddr())
			}
			c.Close()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_ = n
			s.udpSeen.Add(1)
			pc.WriteTo([]byte("from="+from.String()), from)
		}
	}()
	return s
}

// exchange is one request/answer over TCP or UDP from inside ns to addr:
// it returns the address the server saw and the address the answer came
// from. UDP retries a few times (the first datagram may wait on ARP).
func exchange(t *testing.T, ns *testutil.NetNS, network, addr string) (seen, from netip.AddrPort, err error) {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() error {
		var err error
		c, err = net.DialTimeout(network, addr, 3*time.Second)
		return err
	}); err != nil {
		return seen, from, err
	}
	defer c.Close()
	buf := make([]byte, 256)
	n := 0
	for try := 0; try < 5; try++ {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err = c.Write([]byte("hello\n")); err != nil {
			return seen, from, err
		}
		if n, err = c.Read(buf); err == nil {
			break
		}
		if network == "tcp4" {
			return seen, from, err
		}
	}
	if err != nil {
		return seen, from, err
	}
	line := strings.TrimSpace(string(buf[:n]))
	s, ok := strings.CutPrefix(line, "from=")
	if !ok {
		return seen, from, fmt.Errorf("unexpected answer %q", line)
	}
	if seen, err = netip.ParseAddrPort(s); err != nil {
		return seen, from, err
	}
	// A connected socket only accepts answers from the address it dialed.
	from = netip.MustParseAddrPort(c.RemoteAddr().String())
	return seen, from, nil
}

// mustSee runs exchange and checks the server saw the client as wantSeen
// (an address; any port unless wantPort != 0).
func mustSee(t *testing.T, ns *testutil.NetNS, network, addr, wantSeen string) netip.AddrPort {
	t.Helper()
	seen, _, err := exchange(t, ns, network, addr)
	if err != nil {
		t.Fatalf("%s to %s from %s: %v", network, addr, ns.Name, err)
	}
	if seen.Addr().String() != wantSeen {
		t.Errorf("%s to %s: server saw the client as %s, want %s", network, addr, seen, wantSeen)
	}
	return seen
}

// conntrackCount is the number of conntrack entries involving ip in the
// namespace of router.
func conntrackCount(t *testing.T, router string, ip string) int {
	t.Helper()
	n := 0
	err := vpcrouter.Do(router, func() error {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, f := range flows {
			if f.Forward.SrcIP.String() == ip || f.Forward.DstIP.String() == ip ||
				f.Reverse.SrcIP.String() == ip || f.Reverse.DstIP.String() == ip {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing conntrack of router %s: %v", router, err)
	}
	return n
}

// udpRefused sends one datagram from inside ns to addr, where nothing
// listens, and returns the error the connected socket reads: the kernel
// only reports ECONNREFUSED when the ICMP port unreachable quotes the
// datagram as the socket sent it (inner headers translated back).
func udpRefused(t *testing.T, ns *testutil.NetNS, addr string) error {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() error {
		var err error
		c, err = net.Dial("udp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var err error
	for try := 0; try < 3; try++ {
		if _, err = c.Write([]byte("anyone?")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err = c.Read(make([]byte, 64)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
	return err
}
