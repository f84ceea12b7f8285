// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedSocketDrops: frames the kernel drops because the
// responder did not read them in time are counted (PACKET_STATISTICS),
// and reading the count resets it.
func TestPrivilegedSocketDrops(t *testing.T) {
	ns := testutil.NewNetNS(t)
	a, b := testutil.VethPair(t, ns)
	var conn *batchConn
	var cli *packet.Conn
	var srvIfc *net.Interface
	err := ns.Do(func() error {
		var err error
		if srvIfc, err = net.InterfaceByName(a); err != nil {
			return err
		}
		if conn, err = listen(srvIfc, 8); err != nil {
			return err
		}
		// The smallest buffer the kernel allows, so a few frames fill it.
		if err := conn.rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 0)
		}); err != nil {
			return err
		}
		if err != nil {
			return err
		}
		cliIfc, err := net.InterfaceByName(b)
		if err != nil {
			return err
		}
		cli, err = packet.Listen(cliIfc, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	defer cli.Close()
	if d, err := conn.drops(); err != nil || d != 0 {
		t.Fatalf("drops before any frame: %d, %v", d, err)
	}
	f := frameOf(t, newMsg(t, dhcpv4.MessageTypeDiscover, clientMAC(1)))
	const sent = 500
	for range sent {
		if _, err := cli.WriteTo(f, &packet.Addr{HardwareAddr: srvIfc.HardwareAddr}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := conn.drops()
	if err != nil || d == 0 || d > sent {
		t.Fatalf("drops after %d unread frames: %d, %v", sent, d, err)
	}
	if d2, _ := conn.drops(); d2 != 0 {
		t.Errorf("the count did not reset on read: %d", d2)
	}
}
