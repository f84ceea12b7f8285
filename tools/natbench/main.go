// SPDX-License-Identifier: Apache-2.0

// Command natbench puts pivirt's NAT fast path on a device for the
// netfilter comparison of tools/bench/peers/nat.sh: it
// compiles host-mode ExternalIPs with control/externalip, syncs them into maps
// pinned under -bpffs, and attaches the programs with pinned links, as
// pivirtd does, then exits (the pins keep everything in place).
//
//	natbench attach -netns pvb-gw -dev pvb-up -bpffs /tmp/pvb/nat-bpffs/natbench -address 198.51.100.10 -target 10.10.0.11 [-extra 9999] [-redirect=false]
//	natbench detach -netns pvb-gw -dev pvb-up -bpffs /tmp/pvb/nat-bpffs/natbench
//	natbench masq -netns pvb-gw -dev pvb-up -bpffs /tmp/pvb/nat-bpffs/natbench -cidr 10.10.0.0/24   (a NAT Network's masquerade behind pvb-up's address)
//	natbench counters -bpffs /tmp/pvb/nat-bpffs/natbench   (pv_nat_counters, as pivirtctl inspect map shows it)
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/externalip"
	"pivirt.hu/pivirt/dataplane/hostnet"
	"pivirt.hu/pivirt/dataplane/maps/natmap"
	"pivirt.hu/pivirt/dataplane/nat"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: natbench attach|detach|counters [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	nsName := fs.String("netns", "", "network namespace of the device (empty: current)")
	dev := fs.String("dev", "", "uplink device")
	bpffs := fs.String("bpffs", "/sys/fs/bpf/pvb-natbench", "pin base inside a mounted bpffs (maps/ and links/ under it)")
	addr := fs.String("address", "198.51.100.10", "public address")
	target := fs.String("target", "10.10.0.11", "private target")
	extra := fs.Int("extra", 0, "additional 1:1 ExternalIPs (100.64.0.0/16 -> 10.64.0.0/16) to grow the maps")
	redirect := fs.Bool("redirect", true, "forward translated packets from the program (false: leave them to the kernel's forwarding)")
	cidr := fs.String("cidr", "10.10.0.0/24", "masq: the NAT Network's CIDR")
	_ = fs.Parse(os.Args[2:])
	if *dev == "" && os.Args[1] != "counters" {
		fmt.Fprintln(os.Stderr, "-dev is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "attach":
		err = attach(*nsName, *dev, *bpffs, *addr, *target, *extra, *redirect)
	case "masq":
		err = masq(*nsName, *dev, *bpffs, *cidr)
	case "detach":
		err = detach(*dev, *bpffs)
	case "counters":
		err = counters(*bpffs)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "natbench:", err)
		os.Exit(1)
	}
}

func eip(name, addr, target, dev string) externalip.ExternalIP {
	spec := pivirtv1.ExternalIPSpec{Address: addr, Target: target, Interface: dev}
	spec.Default()
	return externalip.ExternalIP{Name: name, Spec: spec, Address: netip.MustParseAddr(addr), Target: netip.MustParseAddr(target)}
}

func attach(nsName, dev, bpffs, addr, target string, extra int, redirect bool) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("removing memlock rlimit: %w", err)
	}
	eips := []externalip.ExternalIP{eip("bench", addr, target, dev)}
	for i := range extra {
		eips = append(eips, eip(fmt.Sprintf("extra-%d", i),
			fmt.Sprintf("100.64.%d.%d", i>>8, i&0xff), fmt.Sprintf("10.64.%d.%d", i>>8, i&0xff), dev))
	}
	res := externalip.Compile(eips, nil, nil)
	if len(res.Errors) > 0 || len(res.Uplinks) != 1 {
		return fmt.Errorf("compiling: errors %v, uplinks %v", res.Errors, res.Uplinks)
	}
	o, err := nat.OpenMaps(filepath.Join(bpffs, "maps"))
	if err != nil {
		return err
	}
	defer o.Close()
	if _, err := natmap.New(o).Sync(res.Maps); err != nil {
		return err
	}
	return inNS(nsName, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("finding %s: %w", dev, err)
		}
		var opts []nat.Option
		if !redirect {
			opts = append(opts, nat.WithoutRedirect())
		}
		p, err := nat.Load(res.Uplinks[0].Scope, l.Attrs().HardwareAddr, filepath.Join(bpffs, "maps"), opts...)
		if err != nil {
			return err
		}
		defer p.Close()
		return nat.Attach(p, l.Attrs().Index, nat.LinkDir(bpffs, "", dev))
	})
}

// masq puts a NAT Network's masquerade on dev as pivirtd's NAT controller
// does (control/externalip syncMasq): the CIDR behind dev's address in
// pv_masq_nets, the programs of dev's scope attached.
func masq(nsName, dev, bpffs, cidr string) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("removing memlock rlimit: %w", err)
	}
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("-cidr: %w", err)
	}
	o, err := nat.OpenMaps(filepath.Join(bpffs, "maps"))
	if err != nil {
		return err
	}
	defer o.Close()
	scope := nat.ScopeInterface(dev)
	return inNS(nsName, func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("finding %s: %w", dev, err)
		}
		pub, err := hostnet.PublicAddr(l)
		if err != nil {
			return err
		}
		if err := o.PutMasqNet(scope, prefix, pub, nat.MasqPortMin, nat.MasqPortMax); err != nil {
			return err
		}
		p, err := nat.Load(scope, l.Attrs().HardwareAddr, filepath.Join(bpffs, "maps"))
		if err != nil {
			return err
		}
		defer p.Close()
		return nat.Attach(p, l.Attrs().Index, nat.LinkDir(bpffs, "", dev))
	})
}

func counters(bpffs string) error {
	o, err := nat.OpenMaps(filepath.Join(bpffs, "maps"))
	if err != nil {
		return err
	}
	defer o.Close()
	return natmap.New(o).DumpMap(nat.MapCounters, os.Stdout)
}

func detach(dev, bpffs string) error {
	err := nat.Detach(nat.LinkDir(bpffs, "", dev))
	return errors.Join(err, os.RemoveAll(bpffs))
}

// inNS runs fn with the thread in the named namespace ("" = current).
func inNS(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	runtime.LockOSThread() // the thread is discarded at exit
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return fmt.Errorf("entering netns %s: %w", name, err)
	}
	return fn()
}
