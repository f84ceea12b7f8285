// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedHoldPort: a host namespace with two bridges, brA and
// brB, and a client on brA that sends a datagram to brA's address, port
// 67. Where nothing holds the port on brA the kernel answers ICMP port
// unreachable (the client's connected socket reads ECONNREFUSED). Held
// on brA, nothing answers and the holder queues nothing; held on brB
// only, brA still answers ICMP. dnsmasq as libvirt runs it (confined to
// one bridge) starts beside a holder on the other bridge, and one on the
// same bridge is named in Shared; a holder without SO_REUSEADDR is an
// EADDRINUSE error naming it.
func TestPrivilegedHoldPort(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "dnsmasq")
	host := testutil.NewNetNS(t)
	if err := host.Do(func() error {
		for i, name := range []string{"brA", "brB"} {
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
			if err := netlink.LinkAdd(br); err != nil {
				return err
			}
			a, _ := netlink.ParseAddr(fmt.Sprintf("10.77.%d.1/24", i+1))
			if err := netlink.AddrAdd(br, a); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(br); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g := guest.Attach(t, host, "brA", "", nil)
	if out, err := g.NS.Exec("ip", "addr", "add", "10.77.1.2/24", "dev", g.Ifc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	const port = ServerPort
	// send writes a datagram to brA's address and reports what came back
	// within a short wait: nil (nothing) or the ICMP error's.
	send := func() error {
		var got error
		if err := g.NS.Do(func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 1, 1), Port: port})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Write([]byte("DHCPREQUEST")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, err = c.Read(make([]byte, 64))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				got = err
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	hold := func(bridge string) (*HeldPort, error) {
		var h *HeldPort
		err := host.Do(func() error {
			ifi, err := net.InterfaceByName(bridge)
			if err != nil {
				return err
			}
			h, err = HoldPort(ifi, port)
			return err
		})
		return h, err
	}
	// dnsmasq serves bridge as libvirt has it do: bound to it alone.
	dnsmasq := func(t *testing.T, bridge, subnet string) {
		dir := t.TempDir()
		cmd := host.Command("dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--user=root",
			"--pid-file="+dir+"/pid", "--dhcp-leasefile="+dir+"/leases", "--interface="+bridge, "--bind-dynamic",
			"--dhcp-range="+subnet+".10,"+subnet+".50", "--log-facility=-")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for i := 0; ; i++ {
			var hs []Holder
			err := host.Do(func() error {
				ifi, err := net.InterfaceByName(bridge)
				if err == nil {
					hs, err = PortHolders(ifi, port, 0)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) > 0 && hs[0].PID == cmd.Process.Pid {
				return
			}
			if i == 50 || cmd.ProcessState != nil {
				t.Fatalf("dnsmasq on %s holds no port %d after 5s: holders %v\n%s", bridge, port, hs, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name string
		// before runs first (another program); hold is where HoldPort
		// holds the port ("": nowhere); after runs once it does.
		before, after func(t *testing.T)
		hold          string
		wantErr       string // in HoldPort's error, which is EADDRINUSE
		wantShared    string // in the holders it shares the port with
		wantICMP      bool   // the client on brA gets ICMP port unreachable
	}{
		{name: "nothing holds the port: the kernel answers ICMP (the control)", wantICMP: true},
		{name: "held on the client's bridge: nothing answers", hold: "brA"},
		{name: "held on another bridge: the kernel still answers ICMP on this one", hold: "brB", wantICMP: true},
		{name: "dnsmasq starts on another bridge after", hold: "brA",
			after: func(t *testing.T) { dnsmasq(t, "brB", "10.77.2") }},
		{name: "dnsmasq serves the same bridge already: it is named", hold: "brA", wantShared: "0.0.0.0%brA:67 (dnsmasq, pid ",
			before: func(t *testing.T) { dnsmasq(t, "brA", "10.77.1") }},
		{name: "a socket without SO_REUSEADDR on 0.0.0.0:67: an error naming it", hold: "brA",
			wantErr: fmt.Sprintf("holding UDP port 67 on brA: held by 0.0.0.0:67 (%s, pid %d)", commOf(t), os.Getpid()),
			before: func(t *testing.T) {
				var fd int
				if err := host.Do(func() error {
					var err error
					if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
						return err
					}
					return unix.Bind(fd, &unix.SockaddrInet4{Port: port})
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(fd) })
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t)
			}
			if tc.hold != "" {
				h, err := hold(tc.hold)
				if tc.wantErr != "" {
					if !errors.Is(err, unix.EADDRINUSE) || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("HoldPort: %v, want EADDRINUSE with %q", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				if got := describe(h.Shared, nil); (tc.wantShared == "") != (len(h.Shared) == 0) || !strings.Contains(got, tc.wantShared) {
					t.Errorf("shared with %d holders: %s, want %q", len(h.Shared), got, tc.wantShared)
				}
				defer func() {
					if n, err := unix.IoctlGetInt(h.fd, unix.SIOCINQ); err != nil || n != 0 {
						t.Errorf("the holder queued %d bytes (%v), want none", n, err)
					}
				}()
			}
			if tc.after != nil {
				tc.after(t)
			}
			err := send()
			switch {
			case tc.wantICMP && !errors.Is(err, unix.ECONNREFUSED):
				t.Errorf("the client got %v, want the ICMP port unreachable (ECONNREFUSED)", err)
			case !tc.wantICMP && err != nil:
				t.Errorf("the client got %v, want no answer", err)
			}
		})
	}
}

// commOf is this process's command name, as /proc shows it.
func commOf(t *testing.T) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(os.Getpid()) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
