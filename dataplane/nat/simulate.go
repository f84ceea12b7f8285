// SPDX-License-Identifier: Apache-2.0

package nat

import (
	"encoding/binary"
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
	o, err := privateCopy(mapDir, scope, mac, WithoutRedirect())
	if err != nil {
		return SimResult{}, err
	}
	defer o.Close()
	prog, name := o.Out, ProgOut
	if inbound {
		prog, name = o.In, ProgIn
	}
	return simRun(o, scope, prog, name, &ebpf.RunOptions{Data: frame})
}

// SimulateHairpin runs frame through the hairpin program of a bridge
// (ifindex, MAC mac; its scope and gateway as the NAT controller
// configures it) as a frame going up to the host (its destination MAC
// becomes the bridge's), over a private copy of the NAT maps pinned in
// mapDir. The fib lookup is the live one, of the caller's namespace; a
// translated frame is reported REDIRECT, never sent.
func SimulateHairpin(mapDir string, scope uint32, gateway netip.Addr, mac net.HardwareAddr, ifindex int, frame []byte) (SimResult, error) {
	if len(frame) < 14 || len(mac) != 6 {
		return SimResult{}, fmt.Errorf("frame of %d bytes, bridge MAC %s: want an Ethernet frame and a MAC", len(frame), mac)
	}
	frame = append([]byte(nil), frame...)
	copy(frame[0:6], mac)
	var opts []Option
	if gateway.IsValid() {
		opts = append(opts, WithGateway(gateway))
	}
	o, err := privateCopy(mapDir, scope, mac, opts...)
	if err != nil {
		return SimResult{}, err
	}
	defer o.Close()
	// Only the ifindex: it makes the frame arrive at the bridge (its
	// packet type, the fib lookup's input device).
	ctx := make([]byte, 44)
	binary.NativeEndian.PutUint32(ctx[40:], uint32(ifindex))
	return simRun(o, scope, o.Hairpin, ProgHairpin, &ebpf.RunOptions{Data: frame, Context: ctx})
}

// privateCopy loads an instance over private maps holding a copy of
// the live ones pinned in mapDir.
func privateCopy(mapDir string, scope uint32, mac net.HardwareAddr, opts ...Option) (*Objects, error) {
	live, err := OpenMaps(mapDir)
	if err != nil {
		return nil, err
	}
	defer live.Close()
	spec, err := Spec()
	if err != nil {
		return nil, err
	}
	// Room for every live entry, whatever the pinned maps' sizes.
	for name, m := range map[string]*ebpf.Map{MapDNAT: live.DNAT, MapSNAT: live.SNAT, MapMasqNets: live.MasqNets, MapMasqCT: live.MasqCT,
		MapHairpin: live.HairpinCT} {
		spec.Maps[name].MaxEntries = m.MaxEntries()
	}
	o, err := LoadSpec(spec, scope, mac, "", opts...)
	if err != nil {
		return nil, err
	}
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
				o.Close()
				return nil, fmt.Errorf("copying %v: %w", c.from, err)
			}
		}
		if err := it.Err(); err != nil {
			o.Close()
			return nil, fmt.Errorf("reading %v: %w", c.from, err)
		}
	}
	return o, nil
}

// simRun runs prog (named name) of o with ro and reads the verdict and
// the counters of scope it bumped.
func simRun(o *Objects, scope uint32, prog *ebpf.Program, name string, ro *ebpf.RunOptions) (SimResult, error) {
	r := SimResult{Program: name}
	frame := ro.Data
	ro.DataOut = make([]byte, len(frame)+256)
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
