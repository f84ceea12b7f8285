// SPDX-License-Identifier: Apache-2.0

package responder

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ServerPort is the DHCP server's UDP port.
const ServerPort = 67

// HeldPort is a UDP socket that holds a port on one interface and reads
// nothing (HoldPort).
type HeldPort struct {
	fd int
	// Shared lists the other sockets that hold the port where this one
	// does, when the bind succeeded all the same (they and this socket
	// both set SO_REUSEADDR): the kernel may hand them the requests
	// unicast to the host on the interface.
	Shared []Holder
}

// Close lets the port go.
func (h *HeldPort) Close() error { return unix.Close(h.fd) }

// Holder is another socket on the port: its address and, when a process
// on this host has it open, that process.
type Holder struct {
	Addr    string // as ss prints it: 0.0.0.0%virbr0:67
	PID     int    // 0: no process found
	Command string
}

func (h Holder) String() string {
	if h.PID == 0 {
		return h.Addr + " (no process found)"
	}
	return fmt.Sprintf("%s (%s, pid %d)", h.Addr, h.Command, h.PID)
}

// HoldPort binds UDP port on every address of ifi, in the calling
// thread's network namespace, with a socket that reads nothing. A
// responder reads requests through AF_PACKET, so without it a request
// unicast to the host (a RENEWING client, a relay) also reaches the
// kernel's UDP stack, which finds no socket and answers ICMP port
// unreachable, as Kea and dnsmasq never do: they hold the port. The
// socket's filter accepts nothing, so the kernel queues no second copy of
// any request.
//
// Only port 67: the host is never a DHCP client, replies to relays go to
// their port 67, and every reply leaves through the packet socket, which
// hands it to the bridge's ports and never to the host's own stack.
//
// One socket per bridge (SO_BINDTOIFINDEX), not one on 0.0.0.0:67 for the
// daemon: the port is held exactly where a responder reads, so on every
// other interface the kernel's ICMP stays true (nothing serves there),
// and pivirtd leaves port 67 to another DHCP server on another bridge.
// SO_REUSEADDR for the same reason: dnsmasq as libvirt runs it binds
// 0.0.0.0:67 first and only then confines itself to its bridge, so
// without it a libvirt network started after pivirtd fails ("failed to
// bind DHCP server socket"). The price: a server setting SO_REUSEADDR on
// this bridge too binds without an error; those present at HoldPort are
// listed in Shared.
//
// What the filter drops the kernel counts as UDP receive errors (Udp
// InErrors in /proc/net/snmp, and the drops of this socket in ss -uam):
// every request to port 67 on the bridge, the broadcast ones too, as
// 0.0.0.0 takes them all. Binding the bridge's addresses instead would
// leave broadcasts alone but lose an address added after New.
//
// A port held on ifi by a socket without SO_REUSEADDR is an error naming
// the holders (errors.Is unix.EADDRINUSE).
func HoldPort(ifi *net.Interface, port int) (*HeldPort, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("holding UDP port %d on %s: %w", port, ifi.Name, err)
	}
	fail := func(what string, err error) (*HeldPort, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("holding UDP port %d on %s: %s: %w", port, ifi.Name, what, err)
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
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX, ifi.Index); err != nil {
		return fail("binding it to the interface", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setting SO_REUSEADDR", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return fail("held by "+describe(PortHolders(ifi, port, 0)), err)
		}
		return fail("binding", err)
	}
	h := &HeldPort{fd: fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		h.Shared, _ = PortHolders(ifi, port, st.Ino)
	}
	return h, nil
}

func describe(hs []Holder, err error) string {
	if err != nil {
		return "a socket that cannot be named (" + err.Error() + ")"
	}
	if len(hs) == 0 {
		return "a socket that cannot be named"
	}
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return strings.Join(s, ", ")
}

// PortHolders lists the IPv4 UDP sockets of the calling thread's network
// namespace, but the one with inode self, that hold port where a request
// to the host arriving on ifi may reach them: bound to no interface or to
// ifi, on 0.0.0.0 or an address of ifi.
func PortHolders(ifi *net.Interface, port int, self uint64) ([]Holder, error) {
	socks, err := netlink.SocketDiagUDP(unix.AF_INET)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("listing UDP sockets: %w", err)
	}
	mine := map[netip.Addr]bool{netip.IPv4Unspecified(): true}
	if addrs, err := ifi.Addrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				mine[p.Addr().Unmap()] = true
			}
		}
	}
	var out []Holder
	inodes := map[uint64]int{} // inode -> index in out
	for _, s := range socks {
		src, _ := netip.AddrFromSlice(s.ID.Source)
		src = src.Unmap()
		if int(s.ID.SourcePort) != port || uint64(s.INode) == self || !mine[src] ||
			(s.ID.Interface != 0 && int(s.ID.Interface) != ifi.Index) {
			continue
		}
		addr := src.String()
		if s.ID.Interface != 0 {
			addr += "%" + ifi.Name
		}
		inodes[uint64(s.INode)] = len(out)
		out = append(out, Holder{Addr: addr + ":" + strconv.Itoa(port)})
	}
	owners(inodes, out)
	return out, nil
}

// owners fills in the process of each socket inode from /proc/*/fd, as ss
// -p does; a process this one may not look into stays unnamed.
func owners(inodes map[uint64]int, out []Holder) {
	left := len(inodes)
	if left == 0 {
		return
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range pids {
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
			i, ok := inodes[ino]
			if err != nil || !ok || out[i].PID != 0 {
				continue
			}
			out[i].PID, _ = strconv.Atoi(filepath.Base(dir))
			comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
			out[i].Command = strings.TrimSpace(string(comm))
			if left--; left == 0 {
				return
			}
		}
	}
}
