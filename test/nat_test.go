// SPDX-License-Identifier: Apache-2.0

package test

// End to end of the NAT fast path: ExternalIPs translated by the eBPF
// programs on an uplink, through a VPCRouter and in host mode, with real
// TCP and UDP sockets in namespaces.
//
// Router mode (TestPrivilegedNATRouter):
//
//	inet ns: eth0 198.51.100.1/24 ── veth ── br-ext ┐
//	host ns (test netns)                           │
//	  br-ext ── pvu… ── pvr-<name>: pvr-up 198.51.100.2/24 (NAT programs), default via .1
//	  vpcbr  ── pvi… ──            pvr-in 10.10.0.1/24, forwarding, masquerade
//	  vpcbr ── vm1 ns eth0 10.10.0.11  ExternalIP 198.51.100.10 1:1
//	        ── vm2 ns eth0 10.10.0.12  no ExternalIP: masquerade
//	        ── vm3 ns eth0 10.10.0.13  ExternalIP 198.51.100.20 tcp 443->8443, udp 53->5353
//
// Host mode (TestPrivilegedNATHost):
//
//	inet ns: eth0 203.0.113.1/24 ── veth ── uplink0 203.0.113.2/24 (NAT programs)
//	host ns: forwarding on; br0 192.168.100.1/24 ── vm ns eth0 192.168.100.10
//	  ExternalIP 203.0.113.10 1:1 and 203.0.113.20 tcp 443->8443 to the VM

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/nat"
	"pivirt.hu/pivirt/dataplane/vpcrouter"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

func TestPrivilegedNATRouter(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "iptables")
	host, inet := testutil.NewNetNS(t), testutil.NewNetNS(t)
	vms := []*testutil.NetNS{testutil.NewNetNS(t), testutil.NewNetNS(t), testutil.NewNetNS(t)}
	brExt, vpcbr := testutil.UniqueName("brx"), testutil.UniqueName("brv")
	addBridge(t, host, brExt, "")
	addBridge(t, host, vpcbr, "")
	p := testutil.UniqueName("ip")
	linkNS(t, host, p, inet, "eth0")
	enslave(t, host, p, brExt)
	ipConfig(t, inet, "eth0", "198.51.100.1/24", "")
	for i, vm := range vms {
		p := testutil.UniqueName("vp")
		linkNS(t, host, p, vm, "eth0")
		enslave(t, host, p, vpcbr)
		ipConfig(t, vm, "eth0", fmt.Sprintf("10.10.0.%d/24", 11+i), "10.10.0.1")
	}

	router := testutil.UniqueName("vpc-")
	t.Cleanup(func() { _ = host.Do(func() error { return vpcrouter.Delete(router) }) })
	e := startNAT(t, host)
	e.apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: VPCRouter
metadata: {name: %[1]s}
spec:
  inside: {bridge: %[2]s, ip: "10.10.0.1/24"}
  uplink: {bridge: %[3]s, ip: "198.51.100.2/24", gateway: "198.51.100.1"}
  masquerade: true
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: vm1-public}
spec: {address: "198.51.100.10", router: %[1]s, target: "10.10.0.11"}
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: vm3-forward}
spec:
  address: "198.51.100.20"
  router: %[1]s
  target: "10.10.0.13"
  mode: portForward
  ports:
    - {protocol: tcp, port: 443, targetPort: 8443}
    - {protocol: udp, port: 53, targetPort: 5353}`, router, vpcbr, brExt))
	e.waitStatus(pivirtv1.KindVPCRouter, router, pivirtv1.PhaseReady)
	e.waitStatus(pivirtv1.KindExternalIP, "vm1-public", pivirtv1.PhaseReady)
	e.waitStatus(pivirtv1.KindExternalIP, "vm3-forward", pivirtv1.PhaseReady)

	s1 := serve(t, vms[0], "0.0.0.0:80")
	serve(t, vms[2], "0.0.0.0:8443")
	serve(t, vms[2], "0.0.0.0:5353")
	serve(t, inet, "198.51.100.1:7000")

	t.Run("1:1 inbound tcp and udp reach the VM, which sees the client", func(t *testing.T) {
		mustSee(t, inet, "tcp4", "198.51.100.10:80", "198.51.100.1")
		mustSee(t, inet, "udp4", "198.51.100.10:80", "198.51.100.1")
	})
	t.Run("the program forwards what it translated", func(t *testing.T) {
		if n := e.forwarded(nat.ScopeRouter(router)); n == 0 {
			t.Errorf("no translated packet forwarded by the program: %v", e.reasons(nat.ScopeRouter(router)))
		}
	})
	t.Run("port forward inbound tcp and udp with port translation", func(t *testing.T) {
		mustSee(t, inet, "tcp4", "198.51.100.20:443", "198.51.100.1")
		mustSee(t, inet, "udp4", "198.51.100.20:53", "198.51.100.1")
		// An unlisted port is not forwarded: nothing answers.
		if _, _, err := exchange(t, inet, "tcp4", "198.51.100.20:8443"); err == nil {
			t.Errorf("tcp to the forward's unlisted port 8443 was answered")
		}
	})
	t.Run("1:1 VM egress leaves from the public address", func(t *testing.T) {
		mustSee(t, vms[0], "tcp4", "198.51.100.1:7000", "198.51.100.10")
		mustSee(t, vms[0], "udp4", "198.51.100.1:7000", "198.51.100.10")
	})
	t.Run("ICMP errors reach the sockets they are about, both ways", func(t *testing.T) {
		// vm1 refuses port 81: its port unreachable leaves the router
		// quoting the public address.
		if err := udpRefused(t, inet, "198.51.100.10:81"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp to a closed port of the public address: %v, want ECONNREFUSED", err)
		}
		// The internet refuses vm1: the error to the public address
		// reaches vm1's socket, quoting its private address.
		if err := udpRefused(t, vms[0], "198.51.100.1:7001"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp from the VM to a closed internet port: %v, want ECONNREFUSED", err)
		}
		if n := e.reasons(nat.ScopeRouter(router))[nat.ReasonICMPError]; n < 2 {
			t.Errorf("%d ICMP errors translated, want at least 2", n)
		}
	})
	t.Run("a VM without ExternalIP leaves through masquerade", func(t *testing.T) {
		mustSee(t, vms[1], "tcp4", "198.51.100.1:7000", "198.51.100.2")
		mustSee(t, vms[1], "udp4", "198.51.100.1:7000", "198.51.100.2")
		// The forward's target too, for ports it does not forward.
		mustSee(t, vms[2], "tcp4", "198.51.100.1:7000", "198.51.100.2")
	})
	t.Run("no flow in conntrack: masquerade's are in pv_masq_ct", func(t *testing.T) {
		if n := conntrackCount(t, router, "10.10.0.11"); n != 0 {
			t.Errorf("%d conntrack entries for the 1:1 target, want 0", n)
		}
		if n := conntrackCount(t, router, "10.10.0.12"); n != 0 {
			t.Errorf("%d conntrack entries for the masqueraded VM, want 0 (eBPF masquerade)", n)
		}
		flows := e.flows()
		if !slices.ContainsFunc(flows, func(f nat.Flow) bool {
			return f.Guest.Addr().String() == "10.10.0.12" && f.Public.Addr().String() == "198.51.100.2" && f.Scope == nat.ScopeRouter(router)
		}) {
			t.Errorf("no masqueraded flow of 10.10.0.12 behind 198.51.100.2 in %v", flows)
		}
	})
	t.Run("maps decode with counters", func(t *testing.T) {
		ms := e.mappings()
		for _, want := range []string{"ALL 198.51.100.10 -> 10.10.0.11", "TCP 198.51.100.20:443 -> 10.10.0.13:8443", "UDP 198.51.100.20:53 -> 10.10.0.13:5353"} {
			if !slices.ContainsFunc(ms, func(m string) bool {
				return len(m) > len(want) && m[:len(want)] == want && m[len(want):] != " in=0pkt/0B out=0pkt/0B"
			}) {
				t.Errorf("no mapping %q with traffic in %q", want, ms)
			}
		}
		// pivirtctl decodes the same maps through the daemon.
		out := e.d.MustCtl("inspect", "map", "pv_nat_dnat")
		for _, want := range []string{"TCP 198.51.100.20:443 -> 10.10.0.13:8443", "ALL 198.51.100.10 -> 10.10.0.11"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect map pv_nat_dnat lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("the fast path survives the controller, a restart converges", func(t *testing.T) {
		rules, err := vpcrouter.Rules(router)
		if err != nil {
			t.Fatal(err)
		}
		e.stop()
		mustSee(t, inet, "tcp4", "198.51.100.10:80", "198.51.100.1")
		mustSee(t, vms[0], "udp4", "198.51.100.1:7000", "198.51.100.10")
		e.start()
		// A change after the restart shows the new controller's pass is done.
		e.apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: vm3-forward}
spec:
  address: "198.51.100.20"
  router: %s
  target: "10.10.0.13"
  mode: portForward
  ports:
    - {protocol: tcp, port: 443, targetPort: 8443}
    - {protocol: udp, port: 53, targetPort: 5353}
    - {protocol: tcp, port: 22, targetPort: 2222}`, router))
		if !natWaitFor(5*time.Second, func() bool {
			return slices.ContainsFunc(e.mappings(), func(m string) bool { return strings.HasPrefix(m, "TCP 198.51.100.20:22 -> 10.10.0.13:2222 ") })
		}) {
			t.Fatalf("the restarted controller did not program the new port: %q", e.mappings())
		}
		mustSee(t, inet, "udp4", "198.51.100.20:53", "198.51.100.1")
		// 2 bypass rules per mapping (1:1, three ports), each once; no
		// masquerade rule (it is the NAT program's).
		var again []string
		if !natWaitFor(5*time.Second, func() bool {
			again, err = vpcrouter.Rules(router)
			return err == nil && len(again) == 2+6
		}) {
			t.Fatalf("router rules after the restart %q (%v)", again, err)
		}
		if len(rules) != 2+4 || len(slices.Compact(slices.Sorted(slices.Values(again)))) != len(again) {
			t.Errorf("router rules before restart %q, after %q", rules, again)
		}
		for _, r := range rules {
			if !slices.Contains(again, r) {
				t.Errorf("rule %q lost in the restart", r)
			}
		}
	})
	t.Run("deleting the ExternalIP stops translation at once", func(t *testing.T) {
		e.delete(pivirtv1.KindExternalIP, "vm1-public")
		if !natWaitFor(5*time.Second, func() bool {
			return !slices.ContainsFunc(e.mappings(), func(m string) bool { return len(m) > 17 && m[:17] == "ALL 198.51.100.10" })
		}) {
			t.Fatalf("mapping still in the maps: %q", e.mappings())
		}
		before := s1.udpSeen.Load()
		if _, _, err := exchange(t, inet, "udp4", "198.51.100.10:80"); err == nil {
			t.Errorf("udp to the deleted public address was answered")
		}
		if n := s1.udpSeen.Load(); n != before {
			t.Errorf("the VM received %d datagrams for the deleted address", n-before)
		}
		// The VM's egress now goes through masquerade.
		mustSee(t, vms[0], "tcp4", "198.51.100.1:7000", "198.51.100.2")
	})
	t.Run("deleting the router removes its namespace", func(t *testing.T) {
		e.delete(pivirtv1.KindExternalIP, "vm3-forward")
		e.delete(pivirtv1.KindVPCRouter, router)
		if !natWaitFor(10*time.Second, func() bool {
			_, err := os.Stat(vpcrouter.NSPath(router))
			return os.IsNotExist(err)
		}) {
			t.Errorf("namespace %s still there", vpcrouter.NSName(router))
		}
	})
}

// TestPrivilegedNATHost runs host mode with the program's forwarding on
// (the default) and off (--nat-redirect=false: the kernel forwards).
func TestPrivilegedNATHost(t *testing.T) {
	testutil.RequireBPF(t)
	for _, redirect := range []bool{true, false} {
		t.Run(fmt.Sprintf("nat-redirect=%t", redirect), func(t *testing.T) { testNATHost(t, redirect) })
	}
}

func testNATHost(t *testing.T, redirect bool) {
	host, inet, vm := testutil.NewNetNS(t), testutil.NewNetNS(t), testutil.NewNetNS(t)
	uplink := testutil.UniqueName("up")
	linkNS(t, host, uplink, inet, "eth0")
	ipConfig(t, host, uplink, "203.0.113.2/24", "")
	ipConfig(t, inet, "eth0", "203.0.113.1/24", "")
	br := testutil.UniqueName("br")
	addBridge(t, host, br, "192.168.100.1/24")
	p := testutil.UniqueName("vp")
	linkNS(t, host, p, vm, "eth0")
	enslave(t, host, p, br)
	ipConfig(t, vm, "eth0", "192.168.100.10/24", "192.168.100.1")
	if _, err := host.Exec("sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		t.Fatal(err)
	}

	e := startNAT(t, host, fmt.Sprintf("--nat-redirect=%t", redirect))
	e.apply(fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: vm-public}
spec: {address: "203.0.113.10", interface: %[1]s, target: "192.168.100.10"}
---
apiVersion: pivirt.hu/v1
kind: ExternalIP
metadata: {name: vm-https}
spec:
  address: "203.0.113.20"
  interface: %[1]s
  target: "192.168.100.10"
  mode: portForward
  ports: [{protocol: tcp, port: 443, targetPort: 8443}]`, uplink))
	e.waitStatus(pivirtv1.KindExternalIP, "vm-public", pivirtv1.PhaseReady)
	e.waitStatus(pivirtv1.KindExternalIP, "vm-https", pivirtv1.PhaseReady)

	s := serve(t, vm, "0.0.0.0:80")
	serve(t, vm, "0.0.0.0:8443")
	serve(t, inet, "203.0.113.1:7000")

	mustSee(t, inet, "tcp4", "203.0.113.10:80", "203.0.113.1")
	mustSee(t, inet, "udp4", "203.0.113.10:80", "203.0.113.1")
	mustSee(t, inet, "tcp4", "203.0.113.20:443", "203.0.113.1")
	mustSee(t, vm, "tcp4", "203.0.113.1:7000", "203.0.113.10")
	mustSee(t, vm, "udp4", "203.0.113.1:7000", "203.0.113.10")
	// The forward's reply leaves from its public address and port: the
	// connected client above accepted it; a reply from port 8443 would
	// have reset the connection.
	scope := nat.ScopeInterface(uplink)
	if n := e.forwarded(scope); redirect && n == 0 {
		t.Errorf("no translated packet forwarded by the program: %v", e.reasons(scope))
	} else if !redirect && n != 0 {
		t.Errorf("%d packets forwarded by the program with --nat-redirect=false", n)
	}

	// inspect desired covers the NAT maps: in sync, and an entry taken
	// out of the live map behind pivirtd's back shows as missing.
	if r := e.d.Ctl("inspect", "desired", nat.MapDNAT); r.Code != 0 || !strings.Contains(r.Stdout, nat.MapDNAT+": 3 desired entries, in sync") {
		t.Errorf("inspect desired %s: %s", nat.MapDNAT, r)
	}
	o, err := nat.OpenMaps(filepath.Join(e.bpffs, "maps"))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	gone := nat.Key{Scope: scope, Addr: nat.BE32(netip.MustParseAddr("203.0.113.10"))}
	var kept nat.Val
	if err := o.DNAT.Lookup(&gone, &kept); err != nil {
		t.Fatalf("looking up %s in %s: %v", gone, nat.MapDNAT, err)
	}
	// A reconcile pass (a status write wakes one) may repair the map
	// before inspect looks: then take the entry out again, a few times.
	var r harness.Result
	for i := 0; i < 10; i++ {
		if err := o.DNAT.Delete(&gone); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("taking %s out of %s: %v", gone, nat.MapDNAT, err)
		}
		if r = e.d.Ctl("inspect", "desired", nat.MapDNAT); strings.Contains(r.Stdout, "drift: 1 missing") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(r.Stdout, "drift: 1 missing, 0 stale, 0 differ") || !strings.Contains(r.Stdout, "+ "+gone.String()) {
		t.Errorf("inspect desired after a live entry went missing: %s", r)
	}
	if err := o.DNAT.Put(&gone, &kept); err != nil {
		t.Fatal(err)
	}

	e.delete(pivirtv1.KindExternalIP, "vm-public")
	if !natWaitFor(5*time.Second, func() bool {
		return !slices.ContainsFunc(e.mappings(), func(m string) bool { return len(m) > 16 && m[:16] == "ALL 203.0.113.10" })
	}) {
		t.Fatalf("mapping still in the maps: %q", e.mappings())
	}
	before := s.udpSeen.Load()
	if _, _, err := exchange(t, inet, "udp4", "203.0.113.10:80"); err == nil {
		t.Errorf("udp to the deleted public address was answered")
	}
	if n := s.udpSeen.Load(); n != before {
		t.Errorf("the VM received %d datagrams for the deleted address", n-before)
	}
	// The forward still works.
	mustSee(t, inet, "tcp4", "203.0.113.20:443", "203.0.113.1")
}
