// SPDX-License-Identifier: Apache-2.0

package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/vishvananda/netlink"

	inspectv1 "pivirt.hu/pivirt/api/inspect/v1"
	"pivirt.hu/pivirt/api/inspect/v1/inspectv1connect"
	"pivirt.hu/pivirt/control/dhcpd"
	"pivirt.hu/pivirt/control/externalip"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/control/portguard"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/loader"
	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/trunk"
	"pivirt.hu/pivirt/dataplane/vxlan"
)

// Server serves inspectv1connect.InspectServiceHandler.
type Server struct {
	Loader *loader.Loader
	Guard  *portguard.Controller
	NAT    *externalip.Controller // nil: no NAT maps in `inspect desired`
	DHCP   *dhcpd.Manager         // nil: no responders in Status
	// Self is what the daemon says of itself in Status (build, node,
	// store, controllers); nil: Status reports the dataplane only.
	Self func(ctx context.Context) *inspectv1.StatusResponse
}

var _ inspectv1connect.InspectServiceHandler = (*Server)(nil)

// ListMaps lists every pinned map.
func (s *Server) ListMaps(ctx context.Context, _ *connect.Request[inspectv1.ListMapsRequest]) (*connect.Response[inspectv1.ListMapsResponse], error) {
	infos, err := s.Loader.PinnedMaps()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &inspectv1.ListMapsResponse{}
	for _, m := range infos {
		out.Maps = append(out.Maps, mapInfo(m))
	}
	return connect.NewResponse(out), nil
}

func mapInfo(m loader.MapInfo) *inspectv1.MapInfo {
	return &inspectv1.MapInfo{Name: m.Name, Type: m.Type, KeySize: m.KeySize, ValueSize: m.ValueSize,
		MaxEntries: m.MaxEntries, Entries: int64(m.Entries), PinPath: m.PinPath, Id: m.ID}
}

// DumpMap returns one map's entries decoded.
func (s *Server) DumpMap(ctx context.Context, req *connect.Request[inspectv1.DumpMapRequest]) (*connect.Response[inspectv1.DumpMapResponse], error) {
	name := req.Msg.Name
	infos, err := s.Loader.PinnedMaps()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	i := slices.IndexFunc(infos, func(m loader.MapInfo) bool { return m.Name == name })
	if i < 0 {
		var names []string
		for _, m := range infos {
			names = append(names, m.Name)
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("map %q is not pinned (pinned: %s)", name, strings.Join(names, ", ")))
	}
	out := &inspectv1.DumpMapResponse{Info: mapInfo(infos[i])}
	var lines []string
	var items []json.RawMessage
	switch {
	case strings.HasPrefix(name, "pv_nat_"), strings.HasPrefix(name, "pv_masq_"):
		lines, items, err = s.natEntries(name)
	case strings.HasPrefix(name, "pv_trunk_"):
		lines, items, err = s.trunkEntries(name)
	case name == "pv_vteps":
		lines, items, err = vtepEntries(infos[i].PinPath)
	default:
		lines, items, err = s.guardEntries(name)
	}
	if errors.Is(err, loader.ErrUnknownMap) {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("map %q has no decoder in pivirtd; use bpftool map dump pinned %s", name, infos[i].PinPath))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	for j, l := range lines {
		e := &inspectv1.MapEntry{Key: l}
		if len(lines) == len(items) {
			e.ValueJson = items[j]
		}
		out.Entries = append(out.Entries, e)
	}
	return connect.NewResponse(out), nil
}

// guardEntries renders a guard map: one line per entry as its map package
// prints it, and the decoded entries for JSON. Dump prints Decoded's
// entries in order; the map may change between the two reads, so the
// caller pairs them only when they agree in number.
func (s *Server) guardEntries(name string) ([]string, []json.RawMessage, error) {
	names := ifNames()
	var text bytes.Buffer
	if err := s.Loader.Maps().Dump(name, &text, names); err != nil {
		return nil, nil, err
	}
	decoded, err := s.Loader.Maps().Decoded(name, names)
	if err != nil {
		return nil, nil, err
	}
	var items []json.RawMessage
	if b, err := json.Marshal(decoded); err == nil {
		_ = json.Unmarshal(b, &items)
	}
	var lines []string
	if text.Len() > 0 {
		lines = strings.Split(strings.TrimRight(text.String(), "\n"), "\n")
	}
	return lines, items, nil
}

// vtepEntries renders pv_vteps (pinned by the overlay controller's VTEP
// filter).
func vtepEntries(path string) ([]string, []json.RawMessage, error) {
	es, err := vxlan.ReadVTEPs(path)
	if err != nil {
		return nil, nil, err
	}
	return rendered(es)
}

// rendered is each entry as a line and as JSON, for DumpMap.
func rendered[E fmt.Stringer](es []E) ([]string, []json.RawMessage, error) {
	lines := make([]string, 0, len(es))
	items := make([]json.RawMessage, 0, len(es))
	for _, e := range es {
		lines = append(lines, e.String())
		b, err := json.Marshal(e)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, b)
	}
	return lines, items, nil
}

// natEntries renders a NAT map (pinned by the NAT controller).
func (s *Server) natEntries(name string) ([]string, []json.RawMessage, error) {
	objs, err := nat.OpenMaps(loader.MapsDir(s.Loader.Base()))
	if err != nil {
		return nil, nil, err
	}
	defer objs.Close()
	es, err := natmap.New(objs).Decoded(name)
	if errors.Is(err, natmap.ErrUnknownMap) {
		return nil, nil, fmt.Errorf("decoding %s: %w", name, loader.ErrUnknownMap)
	}
	if err != nil {
		return nil, nil, err
	}
	return rendered(es)
}

// trunkEntries renders a VLAN trunk map (pinned by the Network
// controller).
func (s *Server) trunkEntries(name string) ([]string, []json.RawMessage, error) {
	objs, err := trunk.OpenMaps(loader.MapsDir(s.Loader.Base()))
	if err != nil {
		return nil, nil, err
	}
	defer objs.Close()
	es, err := objs.Decoded(name, ifNames())
	if errors.Is(err, trunk.ErrUnknownMap) {
		return nil, nil, fmt.Errorf("decoding %s: %w", name, loader.ErrUnknownMap)
	}
	if err != nil {
		return nil, nil, err
	}
	return rendered(es)
}

// simulateNAT runs a frame through the NAT program of an uplink (host
// mode: the interface's scope), or through the hairpin program of a
// bridge that runs one, over a private copy of the live maps.
func (s *Server) simulateNAT(ctx context.Context, m *inspectv1.SimulateRequest) (*connect.Response[inspectv1.SimulateResponse], error) {
	start := time.Now()
	l, err := netlink.LinkByName(m.Port)
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("uplink %s: %w", m.Port, err))
	}
	mapDir := loader.MapsDir(s.Loader.Base())
	var hp externalip.Hairpin
	hairpin := false
	if s.NAT != nil {
		if hp, hairpin, err = s.NAT.HairpinOf(ctx, m.Port); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	var r nat.SimResult
	if hairpin {
		if m.NatInbound {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is a bridge: its hairpin program sees frames going up to the host only (no --inbound)", m.Port))
		}
		r, err = nat.SimulateHairpin(mapDir, hp.Scope, hp.Gateway, l.Attrs().HardwareAddr, l.Attrs().Index, m.Frame)
	} else {
		r, err = nat.Simulate(mapDir, nat.ScopeInterface(m.Port), l.Attrs().HardwareAddr, m.Frame, m.NatInbound)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &inspectv1.SimulateResponse{Verdict: r.Verdict, Program: r.Program + " (over a private copy of the live NAT maps)",
		DurationNs: time.Since(start).Nanoseconds(), Original: nat.Describe(m.Frame)}
	if r.Changed {
		out.Translated = nat.Describe(r.Out)
	}
	for _, reason := range r.Reasons {
		out.Reasons = append(out.Reasons, reason.String())
	}
	out.Reason = "none"
	if len(out.Reasons) > 0 {
		out.Reason = strings.Join(out.Reasons, ",")
	}
	return connect.NewResponse(out), nil
}

// ListPrograms lists the programs attached through pinned links.
func (s *Server) ListPrograms(ctx context.Context, _ *connect.Request[inspectv1.ListProgramsRequest]) (*connect.Response[inspectv1.ListProgramsResponse], error) {
	as, err := s.Loader.Attached()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &inspectv1.ListProgramsResponse{}
	for _, a := range as {
		out.Programs = append(out.Programs, &inspectv1.ProgramInfo{Interface: a.Interface, Ifindex: int32(a.Ifindex),
			Hook: string(a.Hook), Mode: a.Mode, ProgramId: uint32(a.ProgramID), Tag: a.Tag, Name: a.Program,
			LinkId: uint32(a.LinkID), PinPath: a.PinPath})
	}
	return connect.NewResponse(out), nil
}

// Desired compiles the store and reports drift from the live maps.
func (s *Server) Desired(ctx context.Context, req *connect.Request[inspectv1.DesiredRequest]) (*connect.Response[inspectv1.DesiredResponse], error) {
	d, drift, rev, err := s.Guard.Desired(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	desired := map[string][]*inspectv1.MapEntry{
		guard.MapPorts:  entries(d.Ports),
		guard.MapAllow4: entries(d.Allow4),
		guard.MapAllow6: entries(d.Allow6),
		guard.MapLeases: entries(d.Leases),
		guard.MapACL:    entries(d.ACL),
	}
	if s.NAT != nil {
		nd, ndrift, nrev, err := s.NAT.Desired(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		desired[nat.MapDNAT], desired[nat.MapSNAT] = entries(nd.DNAT), entries(nd.SNAT)
		drift, rev = append(drift, ndrift...), max(rev, nrev)
	}
	out := &inspectv1.DesiredResponse{Revision: rev}
	for _, r := range drift {
		if req.Msg.Map != "" && r.Map != req.Msg.Map {
			continue
		}
		out.Maps = append(out.Maps, desiredMap(r, desired[r.Map]))
	}
	if req.Msg.Map != "" && len(out.Maps) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("map %q is not compiled from the store (compiled: %s)", req.Msg.Map,
			strings.Join(slices.Sorted(maps.Keys(desired)), ", ")))
	}
	return connect.NewResponse(out), nil
}

func desiredMap(r mapsync.DriftReport, want []*inspectv1.MapEntry) *inspectv1.DesiredMap {
	line := func(ss []string) []*inspectv1.MapEntry {
		var out []*inspectv1.MapEntry
		for _, s := range ss {
			out = append(out, &inspectv1.MapEntry{Key: s})
		}
		return out
	}
	return &inspectv1.DesiredMap{Name: r.Map, Entries: want, Missing: line(r.Add), Stale: line(r.Delete), Differ: line(r.Update)}
}

// entries renders a desired map sorted by key.
func entries[K comparable, V any](m map[K]V) []*inspectv1.MapEntry {
	var out []*inspectv1.MapEntry
	for _, k := range slices.SortedFunc(maps.Keys(m), func(a, b K) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
		out = append(out, &inspectv1.MapEntry{Key: fmt.Sprint(k), Value: fmt.Sprint(m[k])})
	}
	return out
}

// Simulate runs a frame through the guard of a port.
func (s *Server) Simulate(ctx context.Context, req *connect.Request[inspectv1.SimulateRequest]) (*connect.Response[inspectv1.SimulateResponse], error) {
	if req.Msg.Nat {
		return s.simulateNAT(ctx, req.Msg)
	}
	start := time.Now()
	var (
		r   loader.SimResult
		err error
	)
	if req.Msg.ToVm {
		r, err = s.Loader.SimulateToVM(req.Msg.Port, req.Msg.Frame)
	} else {
		r, err = s.Loader.SimulatePort(req.Msg.Port, req.Msg.Frame, false)
	}
	if err != nil {
		code := connect.CodeInternal
		switch {
		case errors.Is(err, loader.ErrInterfaceNotFound):
			code = connect.CodeNotFound
		case errors.Is(err, loader.ErrFrameTooShort):
			code = connect.CodeInvalidArgument
		}
		return nil, connect.NewError(code, err)
	}
	out := &inspectv1.SimulateResponse{Verdict: strings.ToUpper(r.Verdict.String()), Reason: r.Reason.String(),
		Program: "pv_tc_sim (the guard's simulation twin)", DurationNs: time.Since(start).Nanoseconds()}
	switch {
	case r.ByACL && req.Msg.ToVm:
		out.Program = guard.ProgSimToVM + " (the port ACL's simulation twin, ingress rules)"
	case r.ByACL:
		out.Program = guard.ProgSimFromVM + " (the port ACL's simulation twin, egress rules)"
	case r.Attached != nil:
		out.Program = fmt.Sprintf("%s as attached (%s)", r.Attached.Program, r.Attached.Mode)
		out.ProgramId = uint32(r.Attached.ProgramID)
	}
	return connect.NewResponse(out), nil
}

// ifNames resolves ifindexes of this namespace for dumps.
func ifNames() typed.IfName {
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	names := map[uint32]string{}
	for _, l := range links {
		names[uint32(l.Attrs().Index)] = l.Attrs().Name
	}
	return func(i uint32) string { return names[i] }
}
