// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedHoldPort: a datagram to a port nothing holds draws ICMP
// port unreachable (a connected UDP socket reads ECONNREFUSED); held by
// HoldPort it draws nothing, and the holder queues nothing. A second
// holder is refused, naming the port.
func TestPrivilegedHoldPort(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	const port = ServerPort
	// send writes a datagram to port on loopback and reports what came
	// back within a short wait: nil (nothing) or the ICMP error's.
	send := func() error {
		var got error
		err := ns.Do(func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Write([]byte("DHCPREQUEST")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err = c.Read(make([]byte, 64))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				got = err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := send(); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("nothing holds port %d: got %v, want the ICMP port unreachable (ECONNREFUSED) this test relies on", port, err)
	}
	var held heldPort
	if err := ns.Do(func() error {
		c, err := HoldPort(port)
		if err == nil {
			held = c.(heldPort)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := send(); err != nil {
		t.Errorf("port %d held: the sender got %v, want no answer", port, err)
	}
	if n, err := unix.IoctlGetInt(int(held), unix.SIOCINQ); err != nil || n != 0 {
		t.Errorf("the holder queued %d bytes (%v), want none", n, err)
	}
	err := ns.Do(func() error {
		c, err := HoldPort(port)
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("a second holder: %v, want EADDRINUSE", err)
	}
}
