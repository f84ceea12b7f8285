// SPDX-License-Identifier: Apache-2.0

package trunk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Map names, as pinned under <bpffs>/maps.
const (
	MapVIDs     = "pv_trunk_vids"
	MapPorts    = "pv_trunk_ports"
	MapCounters = "pv_trunk_counters"
)

// MapNames lists every trunk map.
var MapNames = []string{MapVIDs, MapPorts, MapCounters}

// Program names, as in bpf/tc_trunk.c.
const (
	// ProgIn runs at tcx ingress of a trunk's uplink.
	ProgIn = "pv_tc_trunk_in"
	// ProgOut runs at tcx ingress of a VLAN veth's trunk end.
	ProgOut = "pv_tc_trunk_out"
)

// Go mirrors of the C structs and enum of bpf/include/pivirt/{consts,types}.h.
type (
	// VIDKey mirrors struct pv_trunk_vid_key.
	VIDKey = tc_trunkPvTrunkVidKey
	// VID mirrors struct pv_trunk_vid.
	VID = tc_trunkPvTrunkVid
	// Port mirrors struct pv_trunk_port.
	Port = tc_trunkPvTrunkPort
	// Counts mirrors struct pv_trunk_counts (one CPU's share).
	Counts = tc_trunkPvTrunkCounts
	// Reason mirrors enum pv_trunk_reason.
	Reason = tc_trunkPvTrunkReason
)

// Reasons (enum pv_trunk_reason); from ReasonDropMin on, drops.
const (
	ReasonToVLAN       Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_TO_VLAN
	ReasonToTrunk      Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_TO_TRUNK
	ReasonUntagged     Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_UNTAGGED
	ReasonDropMin      Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_DROP_MIN
	ReasonUnknownVID   Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_UNKNOWN_VID
	ReasonStacked      Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_STACKED
	ReasonTagged       Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_TAGGED
	ReasonUnconfigured Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_UNCONFIGURED
	ReasonError        Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_ERROR
	ReasonMax          Reason = tc_trunkPvTrunkReasonPV_TRUNK_R_MAX
)

var reasonNames = map[Reason]string{
	ReasonToVLAN:       "untagged-to-vlan",
	ReasonToTrunk:      "tagged-to-trunk",
	ReasonUntagged:     "untagged-to-host",
	ReasonUnknownVID:   "unknown-vid",
	ReasonStacked:      "stacked-tag",
	ReasonTagged:       "tagged-from-bridge",
	ReasonUnconfigured: "unconfigured",
	ReasonError:        "vlan-helper-failed",
}

// String is the reason's stable kebab-case name; unknown values print as
// reason-N.
func (r tc_trunkPvTrunkReason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", uint32(r))
}

// Drop reports whether frames with this reason are dropped.
func (r tc_trunkPvTrunkReason) Drop() bool { return r >= ReasonDropMin }

// Objects is the loaded programs and the pinned maps.
type Objects struct {
	In, Out               *ebpf.Program
	VIDs, Ports, Counters *ebpf.Map
}

// Close releases the file descriptors (pinned maps and links stay).
func (o *Objects) Close() error {
	var errs []error
	for _, p := range []*ebpf.Program{o.In, o.Out} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	for _, m := range []*ebpf.Map{o.VIDs, o.Ports, o.Counters} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// specIn readies mapDir (<bpffs>/maps, made where missing; a bpffs is
// mounted on its parent if it is not on one) and returns the programs'
// spec.
func specIn(mapDir string) (*ebpf.CollectionSpec, error) {
	if err := loader.EnsureBPFFS(filepath.Dir(mapDir)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mapDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", mapDir, err)
	}
	spec, err := loadTc_trunk()
	if err != nil {
		return nil, fmt.Errorf("loading trunk spec: %w", err)
	}
	return spec, nil
}

// Load loads the programs over the maps pinned by name under mapDir
// (<bpffs>/maps, made where missing; a bpffs is mounted on its parent if
// it is not on one).
func Load(mapDir string) (*Objects, error) {
	spec, err := specIn(mapDir)
	if err != nil {
		return nil, err
	}
	var objs tc_trunkObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: mapDir}}); err != nil {
		return nil, fmt.Errorf("loading trunk programs: %w", err)
	}
	return &Objects{In: objs.PvTcTrunkIn, Out: objs.PvTcTrunkOut,
		VIDs: objs.PvTrunkVids, Ports: objs.PvTrunkPorts, Counters: objs.PvTrunkCounters}, nil
}

// OpenMaps opens the maps pinned under mapDir without loading the
// programs (for inspect); a missing map is created and pinned.
func OpenMaps(mapDir string) (*Objects, error) {
	spec, err := specIn(mapDir)
	if err != nil {
		return nil, err
	}
	o := &Objects{}
	for name, dst := range map[string]**ebpf.Map{MapVIDs: &o.VIDs, MapPorts: &o.Ports, MapCounters: &o.Counters} {
		m, err := ebpf.NewMapWithOptions(spec.Maps[name], ebpf.MapOptions{PinPath: mapDir})
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		*dst = m
	}
	return o, nil
}

// VLAN is one VLAN of a trunk as the maps hold it.
type VLAN struct {
	Uplink uint32 // ifindex of the trunk's uplink
	ID     uint16 // the VID
	Veth   uint32 // ifindex of the VLAN veth's trunk end
}

// Sync makes pv_trunk_vids and pv_trunk_ports hold exactly want, and
// drops the counters of devices no VLAN of want uses any more.
func (o *Objects) Sync(want []VLAN) error {
	vids := map[VIDKey]VID{}
	ports := map[uint32]Port{}
	used := map[uint32]bool{}
	for _, v := range want {
		vids[VIDKey{Ifindex: v.Uplink, Vid: uint32(v.ID)}] = VID{Ifindex: v.Veth}
		ports[v.Veth] = Port{Uplink: v.Uplink, Vid: uint32(v.ID)}
		used[v.Uplink], used[v.Veth] = true, true
	}
	var errs []error
	errs = append(errs, syncMap(o.VIDs, vids), syncMap(o.Ports, ports))
	var stale []uint32
	var k uint32
	var per []Counts
	it := o.Counters.Iterate()
	for it.Next(&k, &per) {
		if !used[k] {
			stale = append(stale, k)
		}
	}
	errs = append(errs, it.Err())
	for _, k := range stale {
		if err := o.Counters.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("deleting %s[%d]: %w", MapCounters, k, err))
		}
	}
	return errors.Join(errs...)
}

func syncMap[K comparable, V comparable](m *ebpf.Map, want map[K]V) error {
	var errs []error
	var k K
	var v V
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		errs = append(errs, fmt.Errorf("listing a trunk map: %w", err))
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("deleting a trunk map entry: %w", err))
		}
	}
	for k, v := range want {
		if err := m.Put(k, v); err != nil {
			errs = append(errs, fmt.Errorf("writing a trunk map entry: %w", err))
		}
	}
	return errors.Join(errs...)
}

// CountersOf sums the per-CPU counters of ifindex by reason name (reasons
// never seen are absent).
func (o *Objects) CountersOf(ifindex uint32) (map[string]uint64, error) {
	var per []Counts
	if err := o.Counters.Lookup(ifindex, &per); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return map[string]uint64{}, nil
		}
		return nil, fmt.Errorf("reading %s[%d]: %w", MapCounters, ifindex, err)
	}
	return sum(per), nil
}

func sum(per []Counts) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range per {
		for r, n := range c.Pkts {
			if n != 0 {
				out[Reason(r).String()] += n
			}
		}
	}
	return out
}

// LinkDir is where the links of device ifname are pinned, beside the
// guard's and the NAT's: <bpffs>/links/<ifname>.
func LinkDir(bpffs, ifname string) string { return filepath.Join(bpffs, "links", ifname) }

// AttachUplink puts ProgIn at tcx ingress of the uplink ifindex (of the
// calling thread's namespace), through a link pinned in LinkDir
// (update-or-create, as every attach of pivirtd).
func (o *Objects) AttachUplink(bpffs, ifname string, ifindex int) error {
	return attach(o.In, ProgIn, bpffs, ifname, ifindex)
}

// AttachVeth puts ProgOut at tcx ingress of a VLAN veth's trunk end.
func (o *Objects) AttachVeth(bpffs, ifname string, ifindex int) error {
	return attach(o.Out, ProgOut, bpffs, ifname, ifindex)
}

func attach(prog *ebpf.Program, name, bpffs, ifname string, ifindex int) error {
	dir := LinkDir(bpffs, ifname)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	l, err := loader.UpsertLink(filepath.Join(dir, name), prog, loader.HookTCX, link.Head(), ifindex, ifname)
	if err != nil {
		return fmt.Errorf("attaching %s to %s: %w", name, ifname, err)
	}
	return l.Close()
}

// DetachExcept unpins the trunk links of every device not in keep (by
// ifname), which detaches them, and removes link directories left empty.
func DetachExcept(bpffs string, keep []string) error {
	dirs, err := os.ReadDir(filepath.Join(bpffs, "links"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	var errs []error
	for _, d := range dirs {
		if !d.IsDir() || slices.Contains(keep, d.Name()) {
			continue
		}
		dir := filepath.Join(bpffs, "links", d.Name())
		found := false
		for _, p := range []string{ProgIn, ProgOut} {
			if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
				found = true
				errs = append(errs, loader.Unpin(filepath.Join(dir, p)))
			}
		}
		if found {
			if rest, err := os.ReadDir(dir); err == nil && len(rest) == 0 {
				errs = append(errs, os.Remove(dir))
			}
		}
	}
	return errors.Join(errs...)
}

// Entry is one decoded entry of a trunk map, for `inspect map`.
type Entry struct {
	Key     string            `json:"key"`
	Value   string            `json:"value,omitempty"`
	Reasons map[string]uint64 `json:"reasons,omitempty"`
}

// String is the entry's line in `pivirtctl inspect map NAME`.
func (e Entry) String() string {
	var b strings.Builder
	b.WriteString(e.Key)
	if e.Value != "" {
		b.WriteString(" -> " + e.Value)
	}
	names := make([]string, 0, len(e.Reasons))
	for n := range e.Reasons {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, e.Reasons[n])
	}
	return b.String()
}

// ErrUnknownMap is returned by Decoded for a name that is no trunk map.
var ErrUnknownMap = errors.New("not a trunk map")

// Decoded returns the entries of trunk map name sorted by key, devices
// named through names: pv_trunk_vids "uplink vlan N -> veth",
// pv_trunk_ports "veth -> uplink vlan N", pv_trunk_counters each device's
// non-zero reasons.
func (o *Objects) Decoded(name string, names typed.IfName) ([]Entry, error) {
	var out []Entry
	var err error
	switch name {
	case MapVIDs:
		var k VIDKey
		var v VID
		it := o.VIDs.Iterate()
		for it.Next(&k, &v) {
			out = append(out, Entry{Key: fmt.Sprintf("%s vlan %d", names.Format(k.Ifindex), k.Vid), Value: names.Format(v.Ifindex)})
		}
		err = it.Err()
	case MapPorts:
		var k uint32
		var v Port
		it := o.Ports.Iterate()
		for it.Next(&k, &v) {
			out = append(out, Entry{Key: names.Format(k), Value: fmt.Sprintf("%s vlan %d", names.Format(v.Uplink), v.Vid)})
		}
		err = it.Err()
	case MapCounters:
		var k uint32
		var per []Counts
		it := o.Counters.Iterate()
		for it.Next(&k, &per) {
			out = append(out, Entry{Key: names.Format(k), Reasons: sum(per)})
		}
		err = it.Err()
	default:
		return nil, fmt.Errorf("%s: %w", name, ErrUnknownMap)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
