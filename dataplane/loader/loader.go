// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
	"pivirt.hu/pivirt/dataplane/maps/allowmap"
	"pivirt.hu/pivirt/dataplane/maps/countermap"
	"pivirt.hu/pivirt/dataplane/maps/ctmap"
	"pivirt.hu/pivirt/dataplane/maps/fragmap"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Sentinel errors.
var (
	// ErrNoNativeXDP: the device has no driver-mode XDP; pivirt never
	// falls back to generic XDP (use --attach tc or auto).
	ErrNoNativeXDP = errors.New("device does not support XDP in driver mode")
	// ErrInterfaceNotFound: no such interface in this network namespace.
	ErrInterfaceNotFound = errors.New("interface not found")
)

// Maps are the typed guard maps.
type Maps struct {
	Ports    *portmap.Map
	Allow4   *allowmap.Map4
	Allow6   *allowmap.Map6
	Leases   *leasemap.Map
	Counters *countermap.Map
	// The port ACL's.
	ACL       *aclmap.Map
	Conntrack *ctmap.Map
	Frags     *fragmap.Map
	// The node's tunnel ports, which dataplane/vxlan's VTEP filter
	// writes (read here for inspect).
	TunnelPorts *ebpf.Map
}

// Loader holds the loaded guard programs and the pinned maps under one
// bpffs base. It is safe for concurrent use; attach, detach and the
// first simulation are serialized.
type Loader struct {
	mu     sync.Mutex
	base   string
	xdp    *ebpf.Collection
	tcx    *ebpf.Collection
	acl    *ebpf.Collection // the port ACL, over the guard's maps
	sim    *ebpf.Collection // loaded on first Simulate
	aclSim *ebpf.Collection // loaded on first SimulateACL
	maps   Maps
	// flowsPerPort sizes the ports' maps of pv_conntrack_v2 (0: the
	// template's).
	flowsPerPort uint32
}

// Open mounts bpffs at base if needed, opens the pinned maps under
// <base>/maps (creating those missing; an incompatible pin is an error
// wrapping ebpf.ErrMapIncompatible: change the layout only with a new
// _vN name), unpins the maps of older layouts (guard.RetiredMapNames),
// converts lease expiries an older pivirtd wrote in CLOCK_TAI and loads
// the programs. The caller removes the memlock rlimit first
// (cmd/pivirtd does).
func Open(base string) (*Loader, error) {
	if err := EnsureBPFFS(base); err != nil {
		return nil, err
	}
	for _, d := range []string{MapsDir(base), LinksDir(base)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	xs, err := guard.XDPSpec()
	if err != nil {
		return nil, err
	}
	xc, err := ebpf.NewCollectionWithOptions(xs, ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: MapsDir(base)},
	})
	if err != nil {
		return nil, fmt.Errorf("loading %s with maps pinned in %s: %w", guard.ProgXDP, MapsDir(base), err)
	}
	ts, err := guard.TCXSpec()
	if err != nil {
		xc.Close()
		return nil, err
	}
	tc, err := ebpf.NewCollectionWithOptions(ts, ebpf.CollectionOptions{MapReplacements: xc.Maps})
	if err != nil {
		xc.Close()
		return nil, fmt.Errorf("loading %s: %w", guard.ProgTCX, err)
	}
	as, err := guard.ACLSpec()
	if err != nil {
		xc.Close()
		tc.Close()
		return nil, err
	}
	ac, err := ebpf.NewCollectionWithOptions(as, ebpf.CollectionOptions{MapReplacements: xc.Maps,
		Maps: ebpf.MapOptions{PinPath: MapsDir(base)}})
	if err != nil {
		xc.Close()
		tc.Close()
		return nil, fmt.Errorf("loading the port ACL with maps pinned in %s: %w", MapsDir(base), err)
	}
	l := &Loader{base: base, xdp: xc, tcx: tc, acl: ac, maps: Maps{
		Ports:       portmap.New(xc.Maps[guard.MapPorts]),
		Allow4:      allowmap.New4(xc.Maps[guard.MapAllow4]),
		Allow6:      allowmap.New6(xc.Maps[guard.MapAllow6]),
		Leases:      leasemap.New(xc.Maps[guard.MapLeases]),
		Counters:    countermap.New(xc.Maps[guard.MapCounters], xc.Maps[guard.MapPorts]),
		ACL:         aclmap.New(ac.Maps[guard.MapACL]),
		Conntrack:   ctmap.New(ac.Maps[guard.MapConntrack], as.Maps[guard.MapConntrack].InnerMap),
		Frags:       fragmap.New(ac.Maps[guard.MapFrags], as.Maps[guard.MapFrags].InnerMap),
		TunnelPorts: xc.Maps[guard.MapTunnelPorts],
	}}
	if err := l.adoptRetiredFlows(); err != nil {
		l.Close()
		return nil, err
	}
	if err := unpinRetired(base); err != nil {
		l.Close()
		return nil, err
	}
	// A pv_leases pinned by an older pivirtd holds CLOCK_TAI expiries.
	if _, err := l.maps.Leases.ConvertTAI(); err != nil {
		l.Close()
		return nil, fmt.Errorf("converting lease expiry to CLOCK_MONOTONIC: %w", err)
	}
	return l, nil
}

// adoptRetiredFlows moves the flows of a pv_conntrack an older pivirtd
// pinned (one map for all ports) into their ports' maps, so established
// connections of stateful ports survive the upgrade. A flow carries the
// version of the ACL that admitted it; the older pv_acl's versions were
// taken over its 64-entry layout, so a flow whose version is its port's
// current one there gets the version the same ACL has now (the spec
// compiles to the same entries), and stays valid. Its programs, still
// attached until Attach swaps them, track new flows there until then;
// those are lost.
func (l *Loader) adoptRetiredFlows() error {
	pin := MapPath(l.base, guard.RetiredConntrack)
	old, err := ebpf.LoadPinnedMap(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening the retired %s: %w", pin, err)
	}
	defer old.Close()
	versions, err := l.retiredACLVersions()
	if err != nil {
		return err
	}
	ct := l.maps.Conntrack
	ready := map[uint32]bool{}
	var werr error
	for k, v := range typed.New[ctmap.Key, ctmap.Value](old).All(&werr) {
		if !ready[k.Ifindex] {
			if err := ct.Ensure(k.Ifindex, l.flowsPerPort); err != nil {
				return err
			}
			ready[k.Ifindex] = true
		}
		if vv, ok := versions[k.Ifindex]; ok && v.Version == vv.old {
			v.Version = vv.now
		}
		if err := ct.Put(k, v); err != nil {
			return fmt.Errorf("moving a flow of ifindex %d into %s: %w", k.Ifindex, guard.MapConntrack, err)
		}
	}
	if werr != nil {
		return fmt.Errorf("walking the retired %s: %w", pin, werr)
	}
	return nil
}

// retiredACLSet is struct pv_acl_set of the retired pv_acl: 64 entries.
type retiredACLSet struct {
	Version       uint32
	Nrules        uint16
	DefaultAction uint8
	Flags         uint8
	Rules         [64]guard.ACLRule
}

// retiredACLVersions reads the retired pv_acl, if pinned: for each port
// with both directions, the version its flows carry and the version the
// same ACL has in pv_acl_v2.
func (l *Loader) retiredACLVersions() (map[uint32]struct{ old, now uint32 }, error) {
	pin := MapPath(l.base, "pv_acl")
	m, err := ebpf.LoadPinnedMap(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the retired %s: %w", pin, err)
	}
	defer m.Close()
	sets := map[aclmap.Key]aclmap.Value{}
	var werr error
	for k, v := range typed.New[aclmap.Key, retiredACLSet](m).All(&werr) {
		var nv aclmap.Value
		nv.Version, nv.Nrules, nv.DefaultAction, nv.Flags = v.Version, v.Nrules, v.DefaultAction, v.Flags
		copy(nv.Rules[:], v.Rules[:])
		sets[k] = nv
	}
	if werr != nil {
		return nil, fmt.Errorf("walking the retired %s: %w", pin, werr)
	}
	out := map[uint32]struct{ old, now uint32 }{}
	for k, in := range sets {
		if k.Dir != uint32(guard.ACLIngress) {
			continue
		}
		eg, ok := sets[aclmap.NewKey(k.Ifindex, guard.ACLEgress)]
		if !ok {
			continue
		}
		out[k.Ifindex] = struct{ old, now uint32 }{in.Version, aclmap.Version(in, eg)}
	}
	return out, nil
}

// SetFlowsPerPort sets the size of the flow map a port gets when its ACL
// is attached (0: PV_CT_PER_PORT); a port attached before keeps its map
// until its ACL is attached again, which resizes it, keeping its flows.
func (l *Loader) SetFlowsPerPort(n uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flowsPerPort = n
}

// unpinRetired removes the pins of guard maps whose layout a _vN name
// replaced. A guard of the older layout still attached keeps its maps
// through its own references and goes on enforcing from them until the
// next Attach swaps in the new program, which the controller does only
// after it has filled the new maps.
func unpinRetired(base string) error {
	var errs []error
	for _, name := range guard.RetiredMapNames {
		if err := os.Remove(MapPath(base, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the pin of retired map %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close releases the Go handles. Pinned maps and links stay, and so does
// enforcement.
func (l *Loader) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.xdp.Close()
	l.tcx.Close()
	l.acl.Close()
	if l.sim != nil {
		l.sim.Close()
	}
	if l.aclSim != nil {
		l.aclSim.Close()
	}
	return nil
}

// Base is the bpffs base directory.
func (l *Loader) Base() string { return l.base }

// Maps returns the typed pinned maps.
func (l *Loader) Maps() Maps { return l.maps }

// Map returns a pinned map by name, or nil.
func (l *Loader) Map(name string) *ebpf.Map {
	if m := l.xdp.Maps[name]; m != nil {
		return m
	}
	return l.acl.Maps[name]
}

// Program returns the loaded guard program of a hook.
func (l *Loader) Program(h Hook) *ebpf.Program {
	if h == HookXDP {
		return l.xdp.Programs[guard.ProgXDP]
	}
	return l.tcx.Programs[guard.ProgTCX]
}

func progName(h Hook) string {
	if h == HookXDP {
		return guard.ProgXDP
	}
	return guard.ProgTCX
}

// Attach attaches the guard to ifname (in the caller's network namespace)
// on the hook mode selects, or swaps the program of an existing pinned
// link in place. If the port was attached on the other hook, that link is
// removed once the new one is in place.
func (l *Loader) Attach(ifname string, mode Mode) (Attachment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nl, err := linkByName(ifname)
	if err != nil {
		return Attachment{}, fmt.Errorf("attaching the guard: %w", err)
	}
	hook := mode.resolve(nl.Type())
	ifindex := nl.Attrs().Index
	prog := l.Program(hook)
	pin := LinkPath(l.base, ifname, progName(hook))

	lk, err := UpsertLink(pin, prog, hook, link.Head(), ifindex, ifname)
	if err != nil {
		return Attachment{}, err
	}
	defer lk.Close()

	// The XDP guard sees a tap's frame before the kernel applies the
	// guest's checksum request; a tcx program checks that request (the
	// tcx guard does it itself).
	offloadPin := LinkPath(l.base, ifname, guard.ProgOffload)
	if hook == HookXDP {
		olk, err := UpsertLink(offloadPin, l.tcx.Programs[guard.ProgOffload], HookTCX, link.Head(), ifindex, ifname)
		if err != nil {
			return Attachment{}, err
		}
		olk.Close()
	} else if err := Unpin(offloadPin); err != nil {
		return Attachment{}, fmt.Errorf("removing the checksum-request link of %s: %w", ifname, err)
	}

	other := HookTCX
	if hook == HookTCX {
		other = HookXDP
	}
	if err := Unpin(LinkPath(l.base, ifname, progName(other))); err != nil {
		return Attachment{}, fmt.Errorf("removing %s link of %s: %w", other, ifname, err)
	}
	return describe(ifname, pin, lk)
}

// linkByName looks up a device of the caller's netns; a missing one is
// an error wrapping ErrInterfaceNotFound.
func linkByName(ifname string) (netlink.Link, error) {
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("%s: %w", ifname, ErrInterfaceNotFound)
		}
		return nil, fmt.Errorf("looking up %s: %w", ifname, err)
	}
	return nl, nil
}

// ACLAttachments are the two links of a port's ACL.
type ACLAttachments struct {
	ToVM, FromVM Attachment
}

// AttachACL attaches the port ACL to ifname, or swaps the programs of its
// pinned links: toward the VM at tcx egress, from it at tcx ingress after
// everything else there (the guard's tcx link, on a veth, is at the head).
func (l *Loader) AttachACL(ifname string) (ACLAttachments, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nl, err := linkByName(ifname)
	if err != nil {
		return ACLAttachments{}, fmt.Errorf("attaching the ACL: %w", err)
	}
	ifindex := nl.Attrs().Index
	// The port's own flow and fragment maps exist before its programs.
	if err := l.maps.Conntrack.Ensure(uint32(ifindex), l.flowsPerPort); err != nil {
		return ACLAttachments{}, fmt.Errorf("attaching the ACL to %s: %w", ifname, err)
	}
	if err := l.maps.Frags.Ensure(uint32(ifindex), 0); err != nil {
		return ACLAttachments{}, fmt.Errorf("attaching the ACL to %s: %w", ifname, err)
	}
	var out ACLAttachments
	for _, h := range []struct {
		prog string
		hook Hook
		into *Attachment
	}{
		{guard.ProgACLToVM, HookTCXEgress, &out.ToVM},
		{guard.ProgACLFromVM, HookTCX, &out.FromVM},
	} {
		prog := l.acl.Programs[h.prog]
		pin := LinkPath(l.base, ifname, h.prog)
		lk, err := UpsertLink(pin, prog, h.hook, link.Tail(), ifindex, ifname)
		if err != nil {
			return ACLAttachments{}, err
		}
		a, err := describe(ifname, pin, lk)
		lk.Close()
		if err != nil {
			return ACLAttachments{}, err
		}
		*h.into = a
	}
	return out, nil
}

// DetachACL removes the port ACL from ifname (the guard stays).
func (l *Loader) DetachACL(ifname string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, p := range []string{guard.ProgACLToVM, guard.ProgACLFromVM} {
		if err := Unpin(LinkPath(l.base, ifname, p)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detaching the ACL from %s: %w", ifname, err)
	}
	return nil
}

// Detach removes the guard from ifname by unpinning its links (the last
// reference, so the kernel detaches). Only an explicit request does this;
// a daemon exit never does.
func (l *Loader) Detach(ifname string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, p := range []string{guard.ProgXDP, guard.ProgTCX, guard.ProgOffload, guard.ProgACLFromVM, guard.ProgACLToVM} {
		if err := Unpin(LinkPath(l.base, ifname, p)); err != nil {
			errs = append(errs, err)
		}
	}
	// Other programs (the NAT) may keep links in the same directory.
	if err := os.Remove(IfaceLinksDir(l.base, ifname)); err != nil &&
		!errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detaching from %s: %w", ifname, err)
	}
	return nil
}

// unpin removes a pinned link if present.
