// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"pivirt.hu/pivirt/dataplane/frame"
)

// SimResult is what the NAT program made of one frame.
type SimResult struct {
	Verdict string // PASS, DROP or REDIRECT
	Program string
	// Out is the frame as it came out; Changed says whether it differs.
	Out     []byte
	Changed bool
	Reasons []Reason // the counters the frame bumped
}

// tc verdicts as BPF_PROG_TEST_RUN returns them.
const (
	tcxNext     = 0xffffffff
	tcxDrop     = 2
	tcxRedirect = 7
)

// Simulate runs frame through the NAT program of scope (an uplink with
// MAC mac) in one direction, over a private copy of the NAT maps pinned
// in mapDir: the live translations and flows are what it sees, and
// nothing it does (a new masqueraded flow, a counter) touches them.
func Simulate(mapDir string, scope uint32, mac net.HardwareAddr, frame []byte, inbound bool) (SimResult, error) {
	if len(frame) < 14 {
		return SimResult{}, fmt.Errorf("frame of %d bytes: shorter than an Ethernet header", len(frame))
	}
	live, err := OpenMaps(mapDir)
	if err != nil {
		return SimResult{}, err
	}
	defer live.Close()
	spec, err := Spec()
	if err != nil {
		return SimResult{}, err
	}
	// Room for every live entry, whatever the pinned maps' sizes.
	for name, m := range map[string]*ebpf.Map{MapDNAT: live.DNAT, MapSNAT: live.SNAT, MapMasqNets: live.MasqNets, MapMasqCT: live.MasqCT,
		MapHairpin: live.HairpinCT} {
		spec.Maps[name].MaxEntries = m.MaxEntries()
	}
	o, err := LoadSpec(spec, scope, mac, "", WithoutRedirect())
	if err != nil {
		return SimResult{}, err
	}
	defer o.Close()
	copies := []struct {
		from, to *ebpf.Map
		k, v     any
	}{
		{live.DNAT, o.DNAT, new(Key), new(Val)},
		{live.SNAT, o.SNAT, new(Key), new(Val)},
		{live.MasqNets, o.MasqNets, new(MasqNetKey), new(MasqNet)},
		{live.MasqCT, o.MasqCT, new(MasqKey), new(MasqVal)},
		{live.HairpinCT, o.HairpinCT, new(HairpinKey), new(HairpinVal)},
	}
	for _, c := range copies {
		it := c.from.Iterate()
		for it.Next(c.k, c.v) {
			if err := c.to.Put(c.k, c.v); err != nil {
				return SimResult{}, fmt.Errorf("copying %v: %w", c.from, err)
			}
		}
		if err := it.Err(); err != nil {
			return SimResult{}, fmt.Errorf("reading %v: %w", c.from, err)
		}
	}
	prog, r := o.Out, SimResult{Program: ProgOut}
	if inbound {
		prog, r.Program = o.In, ProgIn
	}
	out := make([]byte, len(frame)+256)
	ro := &ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := prog.Run(ro)
	if err != nil {
		return SimResult{}, fmt.Errorf("running %s: %w", r.Program, err)
	}
	r.Out = ro.DataOut
	r.Changed = string(r.Out) != string(frame)
	switch ret {
	case tcxNext:
		r.Verdict = "PASS"
	case tcxDrop:
		r.Verdict = "DROP"
	case tcxRedirect:
		r.Verdict = "REDIRECT"
	default:
		r.Verdict = fmt.Sprintf("verdict-%d", ret)
	}
	var per []Counts
	k := CountsKey{Scope: scope}
	if err := o.Counters.Lookup(&k, &per); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return r, fmt.Errorf("reading counters: %w", err)
	}
	for _, reason := range Reasons() {
		for _, c := range per {
			if c.Pkts[reason] != 0 {
				r.Reasons = append(r.Reasons, reason)
				break
			}
		}
	}
	return r, nil
}

// Describe is a frame's IPv4 and L4 addresses, "src:port -> dst:port"
// (ICMP echo: its id after the address), for simulate's output.
func Describe(f []byte) string {
	fl, err := frame.ParseIPv4(f)
	if err != nil {
		return "not IPv4"
	}
	switch {
	case fl.L4 && fl.Proto == frame.ProtoTCP:
		return fmt.Sprintf("TCP %s -> %s", netip.AddrPortFrom(fl.Src, fl.SPort), netip.AddrPortFrom(fl.Dst, fl.DPort))
	case fl.L4 && fl.Proto == frame.ProtoUDP:
		return fmt.Sprintf("UDP %s -> %s", netip.AddrPortFrom(fl.Src, fl.SPort), netip.AddrPortFrom(fl.Dst, fl.DPort))
	case fl.L4 && fl.Proto == frame.ProtoICMP:
		return fmt.Sprintf("ICMP %s -> %s type %d id %d", fl.Src, fl.Dst, fl.Type, fl.ID)
	}
	return fmt.Sprintf("%s %s -> %s", ProtoName(fl.Proto), fl.Src, fl.Dst)
}
