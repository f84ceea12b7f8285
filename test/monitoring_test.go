// SPDX-License-Identifier: Apache-2.0

package test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

var seriesName = regexp.MustCompile(`\bpivirt_[a-z0-9_]+`)

// familyOf is the metric family a series name in PromQL belongs to (a
// histogram's _bucket, _sum and _count are its family's).
func familyOf(name string, exported map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok && exported[f] {
			return f
		}
	}
	return name
}

// TestPrivilegedMonitoringNamesExported: the alert rules shipped in
// tools/monitoring pass promtool, the Grafana dashboard is JSON with a
// query in every panel, and every pivirt_* series they or README's
// metrics table name is one a running pivirtd exports (a segment with a
// DHCP client behind a guarded port, a VTEP): a renamed metric cannot
// leave an alert that never fires.
func TestPrivilegedMonitoringNamesExported(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient", "curl", "promtool")
	dir := filepath.Join("..", "tools", "monitoring")
	rules := filepath.Join(dir, "alerts.yaml")
	if out, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rules, err, out)
	}
	named := map[string][]string{} // series -> where it is named
	note := func(where string, text string) {
		for _, n := range seriesName.FindAllString(text, -1) {
			if !slices.Contains(named[n], where) {
				named[n] = append(named[n], where)
			}
		}
	}
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	note("alerts.yaml", string(b))
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err = os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			note("dashboard.json", q.Expr)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "\n## Metrics\n")
	table, _, _ = strings.Cut(table, "\n## ")
	// Rows that say "on etcd" are not exported by this single node, nor
	// are other nodes' addresses.
	for _, row := range strings.Split(table, "\n") {
		if strings.Contains(row, "on etcd") || strings.Contains(row, "pivirt_dhcp_elsewhere_addresses") {
			continue
		}
		note("README", row)
	}

	host := testutil.NewNetNS(t)
	if out, err := host.Exec("ip", "addr", "add", "10.98.0.1/32", "dev", "lo"); err != nil {
		t.Fatalf("VTEP address: %v: %s", err, out)
	}
	if out, err := host.Exec("ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(),
		Args: []string{"--metrics", "127.0.0.1:9464", "--vtep-address", "10.98.0.1"}})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	g := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xe5})
	port := `apiVersion: pivirt.hu/v1
kind: PortSecurity
metadata: {name: mon-port}
spec: {interface: ` + g.HostSide + `, macAddress: "` + g.MAC.String() + `"}
`
	if r := d.CtlStdin([]byte(port), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply the port: %s", r)
	}
	waitFor(t, 10*time.Second, "the port guarded", func() bool { return strings.Contains(d.Ctl("get", "portsec", "mon-port").Stdout, "Ready") })
	g.Dhclient(t)

	exported := map[string]bool{}
	all := func() bool {
		out, err := host.Exec("curl", "-sf", "http://127.0.0.1:9464/metrics")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
				exported[strings.Fields(f)[0]] = true
			}
		}
		for n := range named {
			if !exported[familyOf(n, exported)] {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !all() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	for n, where := range named {
		if !exported[familyOf(n, exported)] {
			t.Errorf("%s (named in %s) is not exported", n, strings.Join(where, ", "))
		}
	}
	for n := range exported {
		if strings.HasPrefix(n, "pivirt_") && !strings.Contains(table, "`"+n) {
			t.Errorf("%s is exported and missing from README's metrics table", n)
		}
	}
}
