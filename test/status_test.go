// SPDX-License-Identifier: Apache-2.0

package test

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/store/etcd/etcdtest"
	"pivirt.hu/pivirt/test/guest"
	"pivirt.hu/pivirt/test/harness"
	"pivirt.hu/pivirt/test/testutil"
)

// statusJSON is the part of `pivirtctl status -o json` the tests read.
type statusJSON struct {
	Version string `json:"version"`
	Node    string `json:"node"`
	Ready   bool   `json:"ready"`
	Store   struct {
		Backend   string   `json:"backend"`
		Path      string   `json:"path"`
		Revision  string   `json:"revision"` // int64: a string in proto JSON
		Error     string   `json:"error"`
		Endpoints []string `json:"endpoints"`
		Members   []struct {
			Name    string `json:"name"`
			Healthy bool   `json:"healthy"`
			Leader  bool   `json:"leader"`
			Error   string `json:"error"`
		} `json:"members"`
	} `json:"store"`
	Controllers []struct {
		Name      string `json:"name"`
		Ready     bool   `json:"ready"`
		LastError string `json:"lastError"`
	} `json:"controllers"`
	Maps []struct {
		Name    string `json:"name"`
		Entries string `json:"entries"`
	} `json:"maps"`
	Ports []struct {
		Interface string `json:"interface"`
		Hook      string `json:"hook"`
	} `json:"ports"`
	Responders []struct {
		Segment string `json:"segment"`
		Bridge  string `json:"bridge"`
		HostIP  string `json:"hostIp"`
		Bound   int    `json:"bound"`
	} `json:"responders"`
}

// TestPrivilegedStatus: `pivirtctl status` of a real pivirtd with a
// segment, a guarded port and a guest that took a lease through it
// reports what is so: the node and version, ready, the bbolt file, every
// controller ready without error, the guarded port on its hook, the
// segment's responder with the guest's lease bound, and pv_ports holding
// the port; the text form says the same.
func TestPrivilegedStatus(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nsenter", "dhclient")
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{"--node", "status-node"}})
	if r := d.CtlStdin([]byte(orderSegment), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply: %s", r)
	}
	waitFor(t, 15*time.Second, "segment Ready", func() bool { return strings.Contains(d.Ctl("get", "segments").Stdout, "Ready") })
	g := guest.Attach(t, host, "virbr10", "", net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0xd1})
	port := "apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: status-port}\nspec: {interface: " + g.HostSide + ", macAddress: \"" + g.MAC.String() + "\"}\n"
	if r := d.CtlStdin([]byte(port), "apply", "-f", "-"); r.Code != 0 {
		t.Fatalf("apply the port: %s", r)
	}
	waitFor(t, 10*time.Second, "the port guarded", func() bool { return strings.Contains(d.Ctl("get", "portsec", "status-port").Stdout, "Ready") })
	g.Dhclient(t)
	if !g.Addr(t).IsValid() {
		t.Fatal("the guarded guest got no address")
	}

	var st statusJSON
	waitFor(t, 10*time.Second, "status: ready, the lease bound", func() bool {
		st = status(t, d)
		return st.Ready && len(st.Responders) == 1 && st.Responders[0].Bound == 1
	})
	if st.Node != "status-node" || st.Version == "" {
		t.Errorf("node %q, version %q; want status-node and a version", st.Node, st.Version)
	}
	if st.Store.Backend != "bbolt" || st.Store.Path != filepath.Join(d.StateDir, "state.db") || st.Store.Error != "" || st.Store.Revision == "" {
		t.Errorf("store %+v; want bbolt at %s, a revision, no error", st.Store, filepath.Join(d.StateDir, "state.db"))
	}
	names := map[string]bool{}
	for _, c := range st.Controllers {
		names[c.Name] = true
		if !c.Ready || c.LastError != "" {
			t.Errorf("controller %s: ready %v, last error %q", c.Name, c.Ready, c.LastError)
		}
	}
	for _, want := range []string{"segments", "guard", "collisions"} {
		if !names[want] {
			t.Errorf("no controller %s in %v", want, names)
		}
	}
	if len(st.Ports) != 1 || st.Ports[0].Interface != g.HostSide || st.Ports[0].Hook == "" {
		t.Errorf("ports %+v; want %s alone, on a hook", st.Ports, g.HostSide)
	}
	if r := st.Responders[0]; r.Segment != "prod-segment-node-01" || r.Bridge != "virbr10" || r.HostIP != "192.168.100.1/24" {
		t.Errorf("responder %+v; want prod-segment-node-01 on virbr10 at 192.168.100.1/24", r)
	}
	var portsMap string
	for _, m := range st.Maps {
		if strings.HasPrefix(m.Name, "pv_ports") {
			portsMap = m.Entries
		}
	}
	if portsMap != "1" {
		t.Errorf("pv_ports holds %q entries in status; want 1 (the guarded port): %+v", portsMap, st.Maps)
	}

	text := d.MustCtl("status")
	t.Logf("pivirtctl status:\n%s", text)
	for _, want := range []string{
		"Node:         status-node\n",
		"Ready:        yes",
		"Store:        bbolt " + filepath.Join(d.StateDir, "state.db") + ", revision ",
		"Journal:      " + filepath.Join(d.StateDir, "dhcp-journal") + ", ",
		" 0 failed writes, ok\n",
		"Ports:        1 guarded\n",
		"  " + g.HostSide + " ",
		"Responders:   1 DHCP\n",
		"  prod-segment-node-01   virbr10   192.168.100.1/24   1 ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("pivirtctl status lacks %q:\n%s", want, text)
		}
	}
}

// status runs `pivirtctl status -o json` and decodes it.
func status(t *testing.T, d *harness.Daemon) statusJSON {
	t.Helper()
	var st statusJSON
	if err := json.Unmarshal([]byte(d.MustCtl("status", "-o", "json")), &st); err != nil {
		t.Fatalf("status -o json: %v", err)
	}
	return st
}

// TestPrivilegedStatusEtcd: on a 3-member etcd cluster, `pivirtctl
// status` lists the endpoints pivirtd was given and every member healthy,
// one of them the leader; with a member killed it names that member
// unhealthy, with the reason, and the other two healthy.
func TestPrivilegedStatusEtcd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "etcd", "nsenter")
	etcdNS := testutil.NewNetNS(t)
	ec := etcdtest.StartCluster(t, etcdtest.ClusterOptions{Command: etcdNS.Command})
	host := testutil.NewNetNS(t)
	d := harness.StartDaemon(t, harness.Build(t), harness.Options{NetNS: host.Path(), Args: []string{
		"--store", "etcd", "--etcd-endpoints", strings.Join(ec.Endpoints, ","), "--node", "etcd-node"}})

	var st statusJSON
	waitFor(t, 20*time.Second, "status: ready", func() bool { st = status(t, d); return st.Ready })
	if st.Store.Backend != "etcd" || strings.Join(st.Store.Endpoints, ",") != strings.Join(ec.Endpoints, ",") || st.Store.Error != "" {
		t.Errorf("store %+v; want etcd at %v, no error", st.Store, ec.Endpoints)
	}
	leaders, victim := 0, ""
	for _, m := range st.Store.Members {
		if !m.Healthy || m.Error != "" {
			t.Errorf("member %s: healthy %v, error %q", m.Name, m.Healthy, m.Error)
		}
		if m.Leader {
			leaders++
		} else {
			victim = m.Name
		}
	}
	if len(st.Store.Members) != 3 || leaders != 1 {
		t.Fatalf("members %+v; want 3, one leader", st.Store.Members)
	}

	// A follower gone: the cluster keeps its quorum and the status says
	// which member is down.
	for _, m := range ec.Members {
		if m.Name == victim {
			m.Kill9()
		}
	}
	waitFor(t, 15*time.Second, "status: "+victim+" unhealthy", func() bool {
		st = status(t, d)
		for _, m := range st.Store.Members {
			if m.Name == victim {
				return !m.Healthy
			}
		}
		return false
	})
	for _, m := range st.Store.Members {
		if m.Name == victim {
			if m.Error == "" {
				t.Errorf("member %s is unhealthy without a reason", m.Name)
			}
		} else if !m.Healthy {
			t.Errorf("member %s unhealthy (%s) with only %s killed", m.Name, m.Error, victim)
		}
	}
	text := d.MustCtl("status")
	t.Logf("pivirtctl status:\n%s", text)
	if !strings.Contains(text, "Store:        etcd "+strings.Join(ec.Endpoints, ",")) || strings.Count(text, "unhealthy: ") != 1 {
		t.Errorf("pivirtctl status does not show etcd with one member unhealthy:\n%s", text)
	}
}
