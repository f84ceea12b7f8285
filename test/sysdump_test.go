// SPDX-License-Identifier: Apache-2.0

package test

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// TestPrivilegedSysdump is `pivirtctl sysdump` (issue 32 item 6) against a
// pivirtd with a segment and a guarded port: the tarball holds the objects,
// their descriptions, the maps, programs and lease database as inspect shows them, the
// metrics and the host's links, each with what it should show.
func TestPrivilegedSysdump(t *testing.T) {
	testutil.RequireBPF(t)
	testutil.RequireTool(t, "nsenter")
	host := testutil.NewNetNS(t)
	metrics := "127.0.0.1:9477"
	bins := harness.Build(t)
	d := harness.StartDaemon(t, bins, harness.Options{NetNS: host.Path(), Args: []string{"--metrics", metrics}})
	d.CtlStdin([]byte(csumManifests), "apply", "-f", "-")
	waitFor(t, 10*time.Second, "bridge br-csum", func() bool { _, err := host.Exec("ip", "link", "show", "br-csum"); return err == nil })

	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	// pivirtctl runs in the node's namespace, as an operator on the node would.
	if b, err := exec.Command("nsenter", "--net="+host.Path(), "--", bins.Pivirtctl, "--socket", d.Socket,
		"sysdump", "-o", out, "--metrics-url", "http://"+metrics+"/metrics", "--since", "5m").CombinedOutput(); err != nil {
		t.Fatalf("sysdump: %v\n%s", err, b)
	}
	files := readTarGz(t, out)
	for name, want := range map[string]string{
		"objects/networksegments.yaml": "name: csum-net",
		"objects/portsecurities.yaml":  "name: csum-atk",
		"describe/portsecurities.txt":  "csum-atk",
		"inspect/maps.json":            "pv_ports_v2",
		"inspect/map-pv_acl_v2.txt":    "",
		"inspect/progs.txt":            "",
		"inspect/leases.yaml":          "pending: 0",
		"version.txt":                  "",
		"metrics.txt":                  "pivirt_build_info",
		"host/ip-link.txt":             "br-csum",
		"host/uname.txt":               "Linux",
		"index.txt":                    "objects/dhcpleases.yaml",
	} {
		got, ok := files[name]
		if !ok {
			t.Errorf("%s missing from the dump (has %d files; errors: %s)", name, len(files), files["errors.txt"])
			continue
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s does not show %q:\n%s", name, want, got)
		}
	}
	for name, body := range files {
		if strings.Contains(body, "BEGIN") && strings.Contains(body, "PRIVATE KEY") {
			t.Errorf("%s holds a private key", name)
		}
	}
	t.Logf("%d files; not taken: %s", len(files), files["errors.txt"])
}

// readTarGz returns the files of a .tar.gz by their path under its top
// directory.
func readTarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, rel, _ := strings.Cut(h.Name, "/")
		out[rel] = string(b)
	}
}
