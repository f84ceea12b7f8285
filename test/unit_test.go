// SPDX-License-Identifier: Apache-2.0

package test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// unitFile is the systemd unit the package installs.
var unitFile = filepath.Join("..", "tools", "package", "pivirtd.service")

// unitCaps reads CapabilityBoundingSet from the unit, for setpriv
// ("+bpf,+net_admin,...").
func unitCaps(t *testing.T) string {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return strings.Join(caps, ",")
		}
	}
	t.Fatalf("%s has no CapabilityBoundingSet", unitFile)
	return ""
}

// TestPrivilegedUnitVerifies: systemd-analyze verify finds nothing wrong
// with the unit (its ExecStart pointed at the built pivirtd).
func TestPrivilegedUnitVerifies(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "systemd-analyze")
	bins := harness.Build(t)
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "pivirtd.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/sbin/pivirtd", bins.Pivirtd)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPrivilegedUnitCapabilities: pivirtd with exactly the capabilities
// the unit bounds it to (setpriv --bounding-set) does its whole job: it
// starts, stores, guards a port and answers a real DHCP client through
// the guard.
func TestPrivilegedUnitCapabilities(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "setpriv")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(),
		Wrap: []string{"setpriv", "--bounding-set", "-all," + unitCaps(t), "--"}})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	g := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xc7})
	port := "apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: cap-port}\nspec: {interface: " + g.HostSide + ", macAddress: \"" + g.MAC.String() + "\"}\n"
	if r := d.CtlStdin([]byte(port), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply the port: %s", r)
	}
	waitFor(t, 10*time.Second, "the port guarded", func() bool { return strings.Contains(d.Ctl("get", "portsec", "cap-port").Stdout, "Ready") })
	g.Dhclient(t)
	if !g.Addr(t).IsValid() {
		t.Fatal("the guarded guest got no address")
	}
	waitFor(t, 10*time.Second, "its lease pinned", func() bool { return boundPin(t, d, g.MAC) == g.Addr(t).String() })
	if strings.Contains(d.Log(), "operation not permitted") {
		t.Errorf("pivirtd met a missing capability:\n%s", d.Log())
	}
}
