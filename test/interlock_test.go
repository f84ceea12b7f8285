// SPDX-License-Identifier: Apache-2.0

package test

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// pinExpiry is when pv_leases' bound pin of mac expires (zero: none).
func pinExpiry(t *testing.T, d *harness.Daemon, mac net.HardwareAddr) time.Time {
	t.Helper()
	var pins []struct {
		MAC, Flags string
		ExpiresAt  *time.Time
	}
	if err := json.Unmarshal([]byte(d.MustCtl("inspect", "map", "pv_leases", "-o", "json")), &pins); err != nil {
		t.Fatal(err)
	}
	for _, p := range pins {
		if p.MAC == mac.String() && strings.Contains(p.Flags, "bound") && p.ExpiresAt != nil {
			return *p.ExpiresAt
		}
	}
	return time.Time{}
}

// TestPrivilegedInterlockThroughOwner: the provisioning interlock put on
// the owner of a server-made lease (here a PortSecurity that names it in
// no other way) holds the lease as the annotation on the lease itself
// does (pivirtv1.Interlock, one rule): the pin reaches years past the
// lease's expiry and stays so through the guard's full passes, which
// once rewrote it with the lease's own expiry (the guard's compile
// read only the lease's annotation); a RELEASE does not free it; taking
// the lock off the owner lets the held-back release happen.
func TestPrivilegedInterlockThroughOwner(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host, d := startOrderSegment(t)

	p1 := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xd1})
	p1.Dhclient(t)
	name := leaseName(p1.MAC)
	waitFor(t, 10*time.Second, "p1's lease stored", func() bool { _, ok := getLease(t, d, name); return ok })
	owner := func(locked bool) []byte {
		ann := ""
		if locked {
			ann = "\n  annotations: {pivirtd.pilab.hu/is-provisioning: \"true\"}"
		}
		return []byte(`apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata:
  name: vm-p1` + ann + `
spec: {interface: tap-vm-p1, macAddress: "` + p1.MAC.String() + `"}
`)
	}
	if r := d.CtlStdin(owner(true), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply the locked owner: %s", r)
	}
	y := d.MustCtl("get", "lease", name, "-o", "yaml")
	y = strings.Replace(y, "metadata:\n", "metadata:\n  ownerReferences:\n  - {apiVersion: pivirt.hu/v1, kind: PortSecurity, name: vm-p1}\n", 1)
	if r := d.CtlStdin([]byte(y), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("naming the owner on p1's lease: %s\n%s", r, y)
	}
	heldPin := func() bool { return pinExpiry(t, d, p1.MAC).After(time.Now().Add(365 * 24 * time.Hour)) }
	waitFor(t, 10*time.Second, "p1's pin held years ahead through its owner's lock", heldPin)

	// A link appearing makes the guard run a full pass over every lease:
	// the held pin must come out of it unchanged.
	if out, err := host.Exec("ip", "link", "add", "pvt-poke0", "type", "veth", "peer", "name", "pvt-poke1"); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !heldPin() {
			t.Fatalf("after the guard's full pass p1's pin expires %v: the owner's lock was dropped", pinExpiry(t, d, p1.MAC))
		}
	}

	p1.DhclientRelease(t)
	time.Sleep(1500 * time.Millisecond) // the writer would have deleted it by now
	if _, ok := getLease(t, d, name); !ok {
		t.Fatal("a RELEASE freed a lease whose owner holds the interlock")
	}
	if !heldPin() {
		t.Fatalf("after a RELEASE under the lock p1's pin expires %v", pinExpiry(t, d, p1.MAC))
	}

	// The lock off the owner: the held-back release happens.
	if r := d.CtlStdin(owner(false), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("lifting the owner's lock: %s", r)
	}
	waitFor(t, 10*time.Second, "p1's held-back release", func() bool { _, ok := getLease(t, d, name); return !ok })
}

// TestPrivilegedSecondInstanceRefused: a second pivirtd on a running
// one's state directory and socket refuses to start, naming the first
// one's PID, and leaves its socket alone (it once removed it as stale).
func TestPrivilegedSecondInstanceRefused(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter")
	host := testutil.NewNetNS(t)
	bins := harness.Build(t)
	d := harness.StartDaemon(t, bins, harness.Options{NetNS: host.Path()})
	cmd := exec.Command("nsenter", "--net="+host.Path(), "--", bins.Pivirtd, "--state-dir", d.StateDir, "--socket", d.Socket, "--bpffs", d.BPFFS)
	done := make(chan error, 1)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), fmt.Sprintf("in use by another pivirtd (PID %d", d.PID())) {
			t.Errorf("second pivirtd: %v: %s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("a second pivirtd on the same state kept running:\n%s", out.String())
	}
	if r := d.Ctl("get", "segments"); r.Code != 0 {
		t.Errorf("the first pivirtd's API after the second one's attempt: %s", r)
	}
}
