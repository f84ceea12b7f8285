// SPDX-License-Identifier: Apache-2.0

package vxlan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// VTEPFilterName names the netfilter program that lets only known VTEPs
// reach the tunnel ports (bpftool shows it).
const VTEPFilterName = "pv_vtep_in"

// vtepPriorities place the filter at LOCAL_IN before the iptables and
// nftables filter chains (priority 0), so no ACCEPT there lets a datagram
// past it. Two BPF links cannot share a hook's priority (EBUSY), so a
// new pivirtd attaches at whichever of the two the previous one's link,
// still filtering until the new one is in, does not hold (as bpfilter
// alternates its links).
var vtepPriorities = [2]int32{-200, -199}

// VTEPFilter is pv_vtep_in (bpf/nf_vtep.c) at IPv4 LOCAL_IN of one
// network namespace: UDP to a tunnel port of this node from an address
// that is not a VTEP of an overlay on that port is dropped and counted,
// whatever device and local address it arrived on. The kernel's VXLAN
// socket listens at every local address and does not ask who sent a
// datagram, so without it a guest (here, or routed from another node)
// or any host on the underlay could put a frame on an overlay segment's
// bridge. Its maps are written by one writer, control/overlay (Sync).
type VTEPFilter struct {
	objs    nf_vtepObjects
	link    link.Link
	linkPin string
	ports   map[uint16]bool // what pv_tunnel_ports holds; nil: not read yet
}

// Counts is what the filter saw of datagrams to the tunnel ports.
type Counts struct{ Passed, Dropped uint64 }

// loadVTEPFilter loads the program and its maps (pinned in mapsDir by
// name if set, and reused) without attaching it.
func loadVTEPFilter(mapsDir string) (*VTEPFilter, error) {
	spec, err := loadNf_vtep()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", VTEPFilterName, err)
	}
	var opts ebpf.CollectionOptions
	if mapsDir != "" {
		opts.Maps.PinPath = mapsDir
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	f := &VTEPFilter{}
	if err := spec.LoadAndAssign(&f.objs, &opts); err != nil {
		return nil, fmt.Errorf("loading %s: %w", VTEPFilterName, err)
	}
	return f, nil
}

// LoadVTEPFilter loads the filter and attaches it at LOCAL_IN of the
// calling thread's network namespace. With mapsDir (on a bpffs) its maps
// are pinned there by name and reused; with linkPin its link is pinned
// there: the filter stays when pivirtd exits, and the next one attaches
// its own before it lets the old go, so the tunnel ports are never
// unguarded.
func LoadVTEPFilter(mapsDir, linkPin string) (*VTEPFilter, error) {
	f, err := loadVTEPFilter(mapsDir)
	if err != nil {
		return nil, err
	}
	// The hook is the namespace of the calling thread's (netnsdo.Do
	// in tests; pivirtd's own).
	for _, prio := range vtepPriorities {
		f.link, err = link.AttachNetfilter(link.NetfilterOptions{Program: f.objs.PvVtepIn, ProtocolFamily: link.NetfilterProtoIPv4,
			Hook: link.NetfilterInetLocalIn, Priority: prio})
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	if err != nil {
		f.objs.Close()
		return nil, fmt.Errorf("attaching %s at IPv4 LOCAL_IN: %w", VTEPFilterName, err)
	}
	if linkPin != "" {
		f.linkPin = linkPin
		if err := os.MkdirAll(filepath.Dir(linkPin), 0o700); err != nil {
			f.Close()
			return nil, fmt.Errorf("making %s: %w", filepath.Dir(linkPin), err)
		}
		if err := f.pinLink(); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// RemoveVTEPFilter undoes what a previous run with a VTEP left in place
// for a node that has none now: the pinned link at linkPin is detached,
// pv_tunnel_ports (shared with the guard, which would go on dropping a
// guest's UDP to those ports) is emptied and the filter's own maps in
// mapsDir are unpinned. A node that never had the filter is left as it is.
func RemoveVTEPFilter(mapsDir, linkPin string) error {
	_, linkErr := os.Stat(linkPin)
	_, mapErr := os.Stat(filepath.Join(mapsDir, "pv_vteps"))
	if errors.Is(linkErr, os.ErrNotExist) && errors.Is(mapErr, os.ErrNotExist) {
		return nil
	}
	f, err := loadVTEPFilter(mapsDir)
	if err != nil {
		return err
	}
	defer f.objs.Close()
	if err := f.Sync(nil); err != nil {
		return fmt.Errorf("emptying %s's maps: %w", VTEPFilterName, err)
	}
	if old, err := link.LoadPinnedLink(linkPin, nil); err == nil {
		err = old.Unpin()
		old.Close()
		if err != nil {
			return fmt.Errorf("unpinning %s: %w", linkPin, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("opening %s: %w", linkPin, err)
	}
	return errors.Join(f.objs.PvVteps.Unpin(), f.objs.PvVtepStats.Unpin())
}

// VTEPEntry is one entry of pv_vteps, decoded (pivirtctl inspect map).
type VTEPEntry struct {
	VTEP string `json:"vtep"`
	Port uint16 `json:"port"`
}

func (e VTEPEntry) String() string { return fmt.Sprintf("vtep=%s port=%d", e.VTEP, e.Port) }

// ReadVTEPs decodes the pv_vteps pinned at path, sorted by port and address.
func ReadVTEPs(path string) ([]VTEPEntry, error) {
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer m.Close()
	f := &VTEPFilter{objs: nf_vtepObjects{nf_vtepMaps: nf_vtepMaps{PvVteps: m}}}
	byPort, err := f.VTEPs()
	if err != nil {
		return nil, err
	}
	var out []VTEPEntry
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		for _, a := range byPort[port] {
			out = append(out, VTEPEntry{VTEP: a.String(), Port: port})
		}
	}
	return out, nil
}

// pinLink replaces a previous run's pinned link with this one's (which
// already filters, so there is no gap).
func (f *VTEPFilter) pinLink() error {
	if old, err := link.LoadPinnedLink(f.linkPin, nil); err == nil {
		if err := old.Unpin(); err != nil {
			old.Close()
			return fmt.Errorf("unpinning the previous %s: %w", f.linkPin, err)
		}
		old.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("opening the previous %s: %w", f.linkPin, err)
	}
	if err := f.link.Pin(f.linkPin); err != nil {
		return fmt.Errorf("pinning %s: %w", f.linkPin, err)
	}
	return nil
}

// Close releases the filter; a pinned link stays attached.
func (f *VTEPFilter) Close() error {
	var err error
	if f.link != nil {
		err = f.link.Close()
	}
	return errors.Join(err, f.objs.Close())
}

// Sync makes the filter guard exactly the ports of want, each letting
// in only its VTEPs (IPv4); the guard drops a pinned port's UDP to them
// too (pv_tunnel_ports is shared by name). VTEPs are added before their
// port and a port is removed before its VTEPs, so a port is never
// guarded by a partial list.
func (f *VTEPFilter) Sync(want map[uint16][]netip.Addr) error {
	keys := map[nf_vtepPvVtepKey]bool{}
	for port, vteps := range want {
		if port == 0 {
			return fmt.Errorf("tunnel port 0: not a port")
		}
		for _, a := range vteps {
			if !a.Is4() {
				return fmt.Errorf("VTEP %s of port %d: not an IPv4 address", a, port)
			}
			keys[nf_vtepPvVtepKey{Addr: addr32(a), Port: be16(port)}] = true
		}
	}
	if f.ports == nil {
		if err := f.readPorts(); err != nil {
			return err
		}
	}
	for k := range keys {
		if err := f.objs.PvVteps.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("adding VTEP %s of port %d: %w", addrOf(k.Addr), port16(k.Port), err)
		}
	}
	for port := range want {
		if f.ports[port] {
			continue
		}
		if err := f.objs.PvTunnelPorts.Update(uint32(port), uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("guarding tunnel port %d: %w", port, err)
		}
		f.ports[port] = true
	}
	for port := range f.ports {
		if _, ok := want[port]; ok {
			continue
		}
		if err := f.objs.PvTunnelPorts.Update(uint32(port), uint8(0), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("unguarding tunnel port %d: %w", port, err)
		}
		delete(f.ports, port)
	}
	var (
		k    nf_vtepPvVtepKey
		v    uint8
		gone []nf_vtepPvVtepKey
	)
	it := f.objs.PvVteps.Iterate()
	for it.Next(&k, &v) {
		if !keys[k] {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("listing VTEPs: %w", err)
	}
	for _, k := range gone {
		if err := f.objs.PvVteps.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing VTEP %s of port %d: %w", addrOf(k.Addr), port16(k.Port), err)
		}
	}
	return nil
}

// readPorts learns which ports pv_tunnel_ports holds (a previous run's,
// when pinned): one walk of its 64k slots, once.
func (f *VTEPFilter) readPorts() error {
	f.ports = map[uint16]bool{}
	var (
		port uint32
		v    uint8
	)
	it := f.objs.PvTunnelPorts.Iterate()
	for it.Next(&port, &v) {
		if v != 0 {
			f.ports[uint16(port)] = true
		}
	}
	if err := it.Err(); err != nil {
		f.ports = nil
		return fmt.Errorf("reading the tunnel ports: %w", err)
	}
	return nil
}

// VTEPs lists the filter's VTEPs by port, sorted.
func (f *VTEPFilter) VTEPs() (map[uint16][]netip.Addr, error) {
	out := map[uint16][]netip.Addr{}
	var (
		k nf_vtepPvVtepKey
		v uint8
	)
	it := f.objs.PvVteps.Iterate()
	for it.Next(&k, &v) {
		out[port16(k.Port)] = append(out[port16(k.Port)], addrOf(k.Addr))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing VTEPs: %w", err)
	}
	for _, as := range out {
		slices.SortFunc(as, netip.Addr.Compare)
	}
	return out, nil
}

// Counts returns what the filter passed and dropped, summed over CPUs.
func (f *VTEPFilter) Counts() (Counts, error) {
	var (
		c  Counts
		vs []nf_vtepPvVtepCounts
	)
	if err := f.objs.PvVtepStats.Lookup(uint32(0), &vs); err != nil {
		return c, fmt.Errorf("reading the counts of %s: %w", VTEPFilterName, err)
	}
	for _, v := range vs {
		c.Passed += v.Passed
		c.Dropped += v.Dropped
	}
	return c, nil
}

// be16 is a port as the map holds it: in network order, read as a
// little-endian u16 (the maps' keys are raw bytes).
func be16(port uint16) uint16 { return port>>8 | port<<8 }

// port16 undoes be16.
func port16(v uint16) uint16 { return be16(v) }

// addr32 is an IPv4 address as the map holds it: its bytes in network
// order, read as a little-endian u32.
func addr32(a netip.Addr) uint32 { b := a.As4(); return binary.LittleEndian.Uint32(b[:]) }

// addrOf undoes addr32.
func addrOf(v uint32) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
