// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ServerPort is the DHCP server's UDP port.
const ServerPort = 67

// HoldPort binds UDP port on every address of the calling thread's network
// namespace with a socket that reads nothing. The responders read requests
// through AF_PACKET, so without it a request unicast to the host (a
// RENEWING client, a relay) also reaches the kernel's UDP stack, which
// finds no socket and answers ICMP port unreachable, as Kea and dnsmasq
// never do: they hold the port. The socket's filter accepts nothing, so
// the kernel queues no second copy of any request. Only port 67: the
// host is never a DHCP client, and replies to relays go to their port 67.
//
// A port another program holds is an error naming it (errors.Is
// unix.EADDRINUSE): another DHCP server on the host answers the same
// clients.
func HoldPort(port int) (io.Closer, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("holding UDP port %d: %w", port, err)
	}
	fail := func(what string, err error) (io.Closer, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("holding UDP port %d: %s: %w", port, what, err)
	}
	// The filter goes on before the bind, so not one datagram is queued.
	raw, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return fail("assembling its filter", err)
	}
	filter := []unix.SockFilter{{Code: raw[0].Op, Jt: raw[0].Jt, Jf: raw[0].Jf, K: raw[0].K}}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("attaching its filter", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0); err != nil {
		return fail("shrinking its buffer", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return fail("another program holds it (another DHCP server on this host?)", err)
		}
		return fail("binding", err)
	}
	return heldPort(fd), nil
}

// heldPort is the socket of HoldPort; Close lets the port go.
type heldPort int

func (h heldPort) Close() error { return unix.Close(int(h)) }
