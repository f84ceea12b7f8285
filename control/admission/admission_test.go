// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

var now = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)

// opts gives deterministic uids: uid-1, uid-2, ...
func opts() Options {
	n := 0
	return Options{Now: now, NewUID: func() string { n++; return fmt.Sprintf("uid-%d", n) }}
}

// m parses a YAML manifest.
func m(t *testing.T, doc string) *pivirtv1.Object {
	t.Helper()
	o, err := pivirtv1.DecodeObject([]byte(doc))
	if err != nil {
		t.Fatalf("decoding %q: %v", doc, err)
	}
	return o
}

func segment(name, bridge, host, start, end string, extra ...string) string {
	ref := ""
	if !strings.Contains(strings.Join(extra, "\n"), "networkRef") {
		ref = "  networkRef: " + name + "-net\n" // required (seed 003)
	}
	return fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: %s}
spec:
%s  bridge: %s
  hostIP: %s
  dhcp: {delegatedRangeStart: %s, delegatedRangeEnd: %s}
%s`, name, ref, bridge, host, start, end, strings.Join(extra, "\n"))
}

func lease(name, network, mac, ip string, extra ...string) string {
	return fmt.Sprintf(`apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: %s
%s
spec: {network: %s, macAddress: "%s", ipAddress: %s}
`, name, strings.Join(extra, "\n"), network, mac, ip)
}

func extIP(name, addr, target string, ports ...string) string {
	spec := fmt.Sprintf("{address: %s, interface: uplink0, target: %s}", addr, target)
	if len(ports) > 0 {
		spec = fmt.Sprintf("{address: %s, interface: uplink0, target: %s, mode: portForward, ports: [%s]}", addr, target, strings.Join(ports, ", "))
	}
	return fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata: {name: %s}\nspec: %s\n", name, spec)
}

// network returns a Network manifest with the given spec (flow YAML).
func network(name, spec string) string {
	return fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: Network\nmetadata: {name: %s}\nspec: %s\n", name, spec)
}

var (
	routedNet = network("lab", "{type: routed, bridge: br-lab, uplink: eth1, cidr: 10.90.0.0/24}")
	onLab     = segment("lab-seg", "br-lab", "10.90.0.1/24", "10.90.0.100", "10.90.0.199", "  networkRef: lab")
	trunkNet  = network("trunk", "{type: bridge, uplink: eth3, vlans: [10, 20]}")
	onVLAN10  = segment("v10", "pvbr-trunk.10", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: trunk", "  vlan: 10")
)

var vmNet = segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.100", "192.168.100.199", "  networkRef: lab-net")

// mustApply applies each manifest in order and fails on any error.
func mustApply(t *testing.T, tx store.Tx, o Options, docs ...string) {
	t.Helper()
	for _, d := range docs {
		if _, _, err := Apply(tx, m(t, d), o); err != nil {
			t.Fatalf("applying %s: %v", strings.SplitN(d, "\n", 4)[2], err)
		}
	}
}

func TestApplyMetadataAndGeneration(t *testing.T) {
	tx, o := newFakeTx(), opts()
	doc := lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150", "  labels: {app: web}")

	got, action, err := Apply(tx, m(t, doc), o)
	if err != nil || action != ActionCreated {
		t.Fatalf("create = %q, %v", action, err)
	}
	if got.Metadata.UID != "uid-1" || got.Metadata.Generation != 1 || !got.Metadata.CreationTimestamp.Equal(now) || got.Metadata.ResourceVersion == "" {
		t.Fatalf("server metadata = %+v", got.Metadata)
	}
	if got.Kind != pivirtv1.KindDHCPLease || string(got.Spec) != `{"network":"br-vm","macAddress":"52:54:00:12:34:56","ipAddress":"192.168.100.150","type":"static"}` {
		t.Fatalf("stored %s %s", got.Kind, got.Spec)
	}
	rv1 := got.Metadata.ResourceVersion
	if err := UpdateStatus(tx, "lease", "web-01", pivirtv1.Status{Phase: pivirtv1.PhaseReady, ObservedGeneration: 1}); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name       string
		doc        string
		opts       Options
		wantAction string
		wantGen    int64
		wantWrite  bool
	}{
		{"same manifest", doc, o, ActionUnchanged, 1, false},
		{"alias kind, same content", strings.Replace(doc, "kind: DHCPLease", "kind: leases", 1), o, ActionUnchanged, 1, false},
		{"explicit default", strings.Replace(doc, "ipAddress: 192.168.100.150", "ipAddress: 192.168.100.150, type: static", 1), o, ActionUnchanged, 1, false},
		{"server fields and status ignored", strings.Replace(doc, "  labels: {app: web}", "  labels: {app: web}\n  uid: evil\n  generation: 42\n  creationTimestamp: 2020-01-01T00:00:00Z\nstatus: {phase: Failed}", 1), o, ActionUnchanged, 1, false},
		{"label change", strings.Replace(doc, "app: web", "app: web2", 1), o, ActionConfigured, 1, true},
		{"annotation change", strings.Replace(doc, "app: web}", "app: web2}\n  annotations: {note: hi}", 1), o, ActionConfigured, 1, true},
		{"spec change", strings.Replace(doc, "app: web}", "app: web2}\n  annotations: {note: hi}", 1) + "  # hostname below\n", o, ActionUnchanged, 1, false},
		{"hostname", strings.Replace(strings.Replace(doc, "app: web}", "app: web2}\n  annotations: {note: hi}", 1), "ipAddress: 192.168.100.150", "ipAddress: 192.168.100.150, hostname: web-01", 1), o, ActionConfigured, 2, true},
		{"generation label", strings.Replace(strings.Replace(doc, "app: web}", "app: web2, pivirt.hu/generation: \"7\"}\n  annotations: {note: hi}", 1), "ipAddress: 192.168.100.150", "ipAddress: 192.168.100.150, hostname: web-01", 1), Options{Privileged: true}, ActionConfigured, 2, true},
		{"generation label changes again", strings.Replace(strings.Replace(doc, "app: web}", "app: web2, pivirt.hu/generation: \"8\"}\n  annotations: {note: hi}", 1), "ipAddress: 192.168.100.150", "ipAddress: 192.168.100.150, hostname: web-01", 1), Options{Privileged: true}, ActionConfigured, 2, true},
		{"dry-run spec change", strings.Replace(doc, "192.168.100.150", "192.168.100.151", 1), Options{DryRun: true}, ActionConfigured, 3, false},
	}
	for _, s := range steps {
		writes := tx.writes
		got, action, err := Apply(tx, m(t, s.doc), s.opts)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if action != s.wantAction || got.Metadata.Generation != s.wantGen || (tx.writes != writes) != s.wantWrite {
			t.Errorf("%s: action %s gen %d wrote %v, want %s %d %v", s.name, action, got.Metadata.Generation, tx.writes != writes, s.wantAction, s.wantGen, s.wantWrite)
		}
		if got.Metadata.UID != "uid-1" || !got.Metadata.CreationTimestamp.Equal(now) {
			t.Errorf("%s: uid/creationTimestamp changed: %+v", s.name, got.Metadata)
		}
		var st pivirtv1.Status
		if err := got.DecodeStatus(&st); err != nil || st.Phase != pivirtv1.PhaseReady {
			t.Errorf("%s: status = %s, want the stored Ready status", s.name, got.Status)
		}
	}
	stored, _ := tx.Get(pivirtv1.KindDHCPLease, "web-01")
	if stored.Metadata.ResourceVersion == rv1 || stored.Metadata.Generation != 2 || stored.Metadata.Labels[pivirtv1.LabelGeneration] != "8" {
		t.Errorf("stored metadata = %+v", stored.Metadata)
	}
	if !strings.Contains(string(stored.Spec), `"192.168.100.150"`) {
		t.Errorf("dry run wrote the spec: %s", stored.Spec)
	}
}

func TestApplyDryRunCreate(t *testing.T) {
	tx := newFakeTx()
	o := opts()
	o.DryRun = true
	b := NewBatch(tx, o)
	for _, d := range []string{vmNet, lease("a", "br-vm", "52:54:00:00:00:01", "192.168.100.150")} {
		if _, action, err := b.Apply(m(t, d)); err != nil || action != ActionCreated {
			t.Fatalf("dry run = %q, %v", action, err)
		}
	}
	// Later objects of a dry-run batch see the earlier ones.
	_, _, err := b.Apply(m(t, lease("b", "br-vm", "52:54:00:00:00:02", "192.168.100.50")))
	if err == nil || !strings.Contains(err.Error(), "outside the delegated range") {
		t.Errorf("dry-run batch did not see its segment: %v", err)
	}
	if tx.writes != 0 {
		t.Errorf("dry run wrote %d times", tx.writes)
	}
}

func TestApplyResourceVersion(t *testing.T) {
	tx, o := newFakeTx(), opts()
	mustApply(t, tx, o, vmNet)
	cur, _ := tx.Get(pivirtv1.KindNetworkSegment, "vm-net")
	withRV := func(rv, end string) *pivirtv1.Object {
		x := m(t, strings.Replace(vmNet, "192.168.100.199", end, 1))
		x.Metadata.ResourceVersion = rv
		return x
	}
	if _, _, err := Apply(tx, withRV("1", "192.168.100.198"), o); !errors.Is(err, store.ErrConflict) {
		t.Errorf("stale resourceVersion: err = %v, want ErrConflict", err)
	}
	got, action, err := Apply(tx, withRV(cur.Metadata.ResourceVersion, "192.168.100.198"), o)
	if err != nil || action != ActionConfigured {
		t.Fatalf("current resourceVersion: %q, %v", action, err)
	}
	if _, _, err := Apply(tx, withRV(cur.Metadata.ResourceVersion, "192.168.100.197"), o); !errors.Is(err, store.ErrConflict) {
		t.Errorf("resourceVersion of the previous write: err = %v, want ErrConflict", err)
	}
	x := m(t, lease("gone", "br-vm", "52:54:00:00:00:09", "192.168.100.150"))
	x.Metadata.ResourceVersion = got.Metadata.ResourceVersion
	if _, _, err := Apply(tx, x, o); !errors.Is(err, store.ErrConflict) {
		t.Errorf("resourceVersion on a missing object: err = %v, want ErrConflict", err)
	}
}

func TestReservedLabels(t *testing.T) {
	const base = "apiVersion: pivirt.hu/v1\nkind: ExternalIP\nmetadata:\n  name: pub\n  labels: {%s}\nspec: {address: 203.0.113.10, interface: uplink0, target: 192.168.100.10}\n"
	tests := []struct {
		name       string
		stored     string // labels applied first, privileged ("" = nothing stored)
		labels     string
		privileged bool
		wantErr    string
		wantAction string
		wantLabels map[string]string
	}{
		{"user sets reserved", "", "pivirt.hu/zone: a", false, "applying externalip/pub: metadata.labels: pivirt.hu/zone is reserved for the cluster tier (pivirt.hu/*): forbidden", "", nil},
		{"user sets reserved subdomain", "", "node.pivirt.hu/x: a", false, "metadata.labels: node.pivirt.hu/x is reserved", "", nil},
		{"user sets generation", "", "pivirt.hu/generation: \"3\"", false, "metadata.labels: pivirt.hu/generation is reserved", "", nil},
		{"cluster sets reserved", "", "pivirt.hu/zone: a, app: x", true, "", ActionCreated, map[string]string{"pivirt.hu/zone": "a", "app": "x"}},
		{"user changes reserved", "pivirt.hu/zone: a", "pivirt.hu/zone: b", false, "metadata.labels: pivirt.hu/zone is reserved", "", nil},
		{"user repeats reserved", "pivirt.hu/zone: a, app: x", "pivirt.hu/zone: a, app: x", false, "", ActionUnchanged, map[string]string{"pivirt.hu/zone": "a", "app": "x"}},
		{"user omits reserved", "pivirt.hu/zone: a, app: x", "app: x", false, "", ActionUnchanged, map[string]string{"pivirt.hu/zone": "a", "app": "x"}},
		{"user changes own label", "pivirt.hu/zone: a, app: x", "app: z", false, "", ActionConfigured, map[string]string{"pivirt.hu/zone": "a", "app": "z"}},
		{"cluster removes reserved", "pivirt.hu/zone: a, app: x", "app: x", true, "", ActionConfigured, map[string]string{"app": "x"}},
		{"look-alike is not reserved", "", "notpivirt.hu/zone: a", false, "", ActionCreated, map[string]string{"notpivirt.hu/zone": "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			if tc.stored != "" {
				mustApply(t, tx, Options{Privileged: true}, fmt.Sprintf(base, tc.stored))
			}
			writes := tx.writes
			got, action, err := Apply(tx, m(t, fmt.Sprintf(base, tc.labels)), Options{Privileged: tc.privileged})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrForbidden containing %q", err, tc.wantErr)
				}
				if tx.writes != writes {
					t.Errorf("a refused apply wrote")
				}
				return
			}
			if err != nil || action != tc.wantAction {
				t.Fatalf("Apply = %q, %v; want %q", action, err, tc.wantAction)
			}
			if diff := cmp.Diff(tc.wantLabels, got.Metadata.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCrossObject applies setup, then obj, and expects exactly the field
// errors want (none: obj is stored).
func TestCrossObject(t *testing.T) {
	tests := []struct {
		name  string
		setup []string
		obj   string
		want  []string
	}{
		// NetworkSegment
		{"overlapping ranges on one bridge", []string{vmNet},
			segment("vm-net-2", "br-vm", "192.168.100.1/24", "192.168.100.150", "192.168.100.220"),
			[]string{"spec.dhcp: 192.168.100.150-192.168.100.220 overlaps the delegated range 192.168.100.100-192.168.100.199 of segment vm-net on bridge br-vm"}},
		{"touching ranges on one bridge", []string{vmNet},
			segment("vm-net-2", "br-vm", "192.168.100.1/24", "192.168.100.200", "192.168.100.220"), nil},
		{"same range on another bridge", []string{vmNet},
			segment("other", "br-other", "192.168.100.1/24", "192.168.100.100", "192.168.100.199"), nil},
		{"shared networkRef", []string{vmNet},
			segment("other", "br-other", "10.0.0.1/24", "10.0.0.100", "10.0.0.199", "  networkRef: lab-net"),
			[]string{"spec.networkRef: lab-net is already the networkRef of segment vm-net"}},
		{"networkRef is another bridge", []string{vmNet},
			segment("other", "br-other", "10.0.0.1/24", "10.0.0.100", "10.0.0.199", "  networkRef: br-vm"),
			[]string{"spec.networkRef: br-vm is the bridge of segment vm-net, so leases naming it would be ambiguous"}},
		{"bridge is another networkRef", []string{segment("a", "br-a", "10.0.0.1/24", "10.0.0.100", "10.0.0.199", "  networkRef: br-b")},
			segment("b", "br-b", "10.1.0.1/24", "10.1.0.100", "10.1.0.199"),
			[]string{"spec.bridge: br-b is the networkRef of segment a, so leases naming it would be ambiguous"}},
		{"shrink leaves a static lease outside", []string{vmNet, lease("web-01-reservation", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.160", "192.168.100.199", "  networkRef: lab-net"),
			[]string{"spec.dhcp: 192.168.100.160-192.168.100.199 would leave static lease web-01-reservation (192.168.100.150) outside the delegated range"}},
		{"shrink leaves a lease by networkRef outside", []string{vmNet, lease("db", "lab-net", "52:54:00:12:34:57", "192.168.100.190")},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.100", "192.168.100.180", "  networkRef: lab-net"),
			[]string{"spec.dhcp: 192.168.100.100-192.168.100.180 would leave static lease db (192.168.100.190) outside the delegated range"}},
		{"shrink keeping the lease", []string{vmNet, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.140", "192.168.100.160", "  networkRef: lab-net"), nil},
		{"shrink past a lease another segment covers", []string{vmNet,
			segment("vm-net-hi", "br-vm", "192.168.100.1/24", "192.168.100.200", "192.168.100.220"),
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.160", "192.168.100.199", "  networkRef: lab-net"),
			[]string{"spec.dhcp: 192.168.100.160-192.168.100.199 would leave static lease web (192.168.100.150) outside the delegated range"}},
		{"bridge change orphans a lease", []string{vmNet, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			segment("vm-net", "br-vm2", "192.168.100.1/24", "192.168.100.100", "192.168.100.199"),
			[]string{"spec.bridge: br-vm2 would leave static lease web (192.168.100.150) on network br-vm without a segment"}},
		{"a pending lease does not block", []string{lease("early", "br-vm", "52:54:00:12:34:56", "192.168.100.20"), vmNet},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.160", "192.168.100.199", "  networkRef: lab-net"), nil},
		{"a dynamic lease does not block", []string{vmNet, strings.Replace(lease("lease-52-54-00-12-34-56", "br-vm", "52:54:00:12:34:56", "192.168.100.150"), "}", ", type: dynamic, expiresAt: \"2026-12-03T17:00:00Z\"}", 1)},
			segment("vm-net", "br-vm", "192.168.100.1/24", "192.168.100.160", "192.168.100.199", "  networkRef: lab-net"), nil},

		// Network and the segments riding it
		{"segment rides a routed network", []string{routedNet}, onLab, nil},
		{"segment on another bridge than its network's", []string{routedNet},
			segment("lab-seg", "br-x", "10.90.0.1/24", "10.90.0.100", "10.90.0.199", "  networkRef: lab"),
			[]string{"spec.bridge: br-x is not the bridge of network lab (br-lab), which networkRef names"}},
		{"segment hostIP outside its network's cidr", []string{routedNet},
			segment("lab-seg", "br-lab", "10.91.0.1/24", "10.91.0.100", "10.91.0.199", "  networkRef: lab"),
			[]string{"spec.hostIP: 10.91.0.1/24 is outside cidr 10.90.0.0/24 of network lab, which networkRef names"}},
		{"segment hostIP wider than its network's cidr", []string{routedNet},
			segment("lab-seg", "br-lab", "10.90.0.1/16", "10.90.0.100", "10.90.0.199", "  networkRef: lab"),
			[]string{"spec.hostIP: 10.90.0.1/16 is outside cidr 10.90.0.0/24 of network lab, which networkRef names"}},
		{"segment on a network's bridge naming another network", []string{routedNet},
			segment("lab-seg", "br-lab", "10.90.0.1/24", "10.90.0.100", "10.90.0.199", "  networkRef: cluster-net"),
			[]string{"spec.networkRef: cluster-net must be lab: bridge br-lab belongs to network lab"}},
		{"segment of a bridge network keeps its own address", []string{network("lan", "{type: bridge, bridge: br-lan, uplink: eth0}")},
			segment("lan-seg", "br-lan", "192.0.2.10/24", "192.0.2.100", "192.0.2.199", "  networkRef: lan"), nil},
		{"network over a segment's bridge", []string{vmNet}, network("lab", "{type: bridge, bridge: br-vm}"),
			[]string{"spec.bridge: br-vm is already the bridge of networksegment vm-net (networkRef lab-net); a segment rides a network by naming it in networkRef"}},
		{"network change leaves its segment outside", []string{routedNet, onLab},
			network("lab", "{type: routed, bridge: br-lab, uplink: eth1, cidr: 10.80.0.0/24}"),
			[]string{"spec.hostIP: 10.90.0.1/24 would no longer carry networksegment lab-seg, which rides it: is outside cidr 10.80.0.0/24 of network lab, which networkRef names"}},
		{"network bridge taken", []string{routedNet}, network("lab2", "{type: bridge, bridge: br-lab}"),
			[]string{"spec.bridge: br-lab is already the bridge of network lab"}},
		{"network uplink taken", []string{routedNet}, network("lab2", "{type: bridge, uplink: eth1}"),
			[]string{"spec.uplink: eth1 is already the uplink or bridge of network lab"}},
		{"network cidrs overlap", []string{routedNet}, network("lab2", "{type: routed, uplink: eth2, cidr: 10.90.0.0/16}"),
			[]string{"spec.cidr: 10.90.0.0/16 overlaps cidr 10.90.0.0/24 of network lab"}},

		{"segment rides a vlan of a trunk", []string{trunkNet}, onVLAN10, nil},
		{"segments of two vlans of a trunk", []string{trunkNet, onVLAN10},
			segment("v20", "pvbr-trunk.20", "10.20.0.1/24", "10.20.0.100", "10.20.0.199", "  networkRef: trunk", "  vlan: 20"), nil},
		{"two segments of one vlan of a trunk", []string{trunkNet, onVLAN10},
			segment("v10b", "pvbr-trunk.10", "10.10.0.1/24", "10.10.0.200", "10.10.0.250", "  networkRef: trunk", "  vlan: 10"),
			[]string{"spec.networkRef: trunk is already the networkRef of segment v10"}},
		{"network on a vlan bridge of a trunk", []string{trunkNet}, network("lab2", "{type: bridge, bridge: pvbr-trunk.10}"),
			[]string{"spec.bridge: pvbr-trunk.10 is already the bridge of a vlan of network trunk"}},
		{"trunk over a segment's bridge", []string{segment("v10", "pvbr-trunk.10", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: other")}, trunkNet,
			[]string{"spec.vlans: [10 20] would take bridge pvbr-trunk.10 of networksegment v10 (networkRef other); a segment rides a network by naming it in networkRef"}},
		{"lease on a vlan's bridge", []string{trunkNet, onVLAN10}, lease("web", "pvbr-trunk.10", "52:54:00:12:34:56", "10.10.0.150"), nil},
		{"lease naming a trunk's networkRef", []string{trunkNet, onVLAN10}, lease("web", "trunk", "52:54:00:12:34:56", "10.10.0.150"),
			[]string{"spec.network: trunk is the networkRef of every VLAN of a trunk: name the bridge of the VLAN's segment (pvbr-trunk.10 of segment v10, vlan 10)"}},
		{"segment of a trunk without vlan", []string{trunkNet},
			segment("v10", "pvbr-trunk.10", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: trunk"),
			[]string{"spec.vlan: required: network trunk, which networkRef names, is a trunk of vlans [10 20]"}},
		{"segment of a vlan the trunk lacks", []string{trunkNet},
			segment("v30", "pvbr-trunk.30", "10.30.0.1/24", "10.30.0.100", "10.30.0.199", "  networkRef: trunk", "  vlan: 30"),
			[]string{"spec.vlan: 30 is not one of the vlans [10 20] of network trunk, which networkRef names"}},
		{"segment of a vlan on another vlan's bridge", []string{trunkNet},
			segment("v10", "pvbr-trunk.20", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: trunk", "  vlan: 10"),
			[]string{"spec.bridge: pvbr-trunk.20 is not the bridge of vlan 10 of network trunk (pvbr-trunk.10), which networkRef names"}},
		{"segment with a vlan on a network without vlans", []string{routedNet},
			segment("lab-seg", "br-lab", "10.90.0.1/24", "10.90.0.100", "10.90.0.199", "  networkRef: lab", "  vlan: 10"),
			[]string{"spec.vlan: 10 is for a segment of a trunk: network lab, which networkRef names, has no vlans"}},
		{"segment with a vlan and no network", nil,
			segment("v10", "br-x", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: cluster-net", "  vlan: 10"),
			[]string{"spec.vlan: 10 is for a segment of a trunk: networkRef cluster-net names no Network with vlans on this node"}},
		{"segment on a vlan's bridge naming another network", []string{trunkNet},
			segment("v10", "pvbr-trunk.10", "10.10.0.1/24", "10.10.0.100", "10.10.0.199", "  networkRef: cluster-net"),
			[]string{"spec.networkRef: cluster-net must be trunk: bridge pvbr-trunk.10 belongs to network trunk"}},
		{"trunk change drops the vlan a segment rides", []string{trunkNet, onVLAN10},
			network("trunk", "{type: bridge, uplink: eth3, vlans: [20]}"),
			[]string{"spec.vlan: 10 would no longer carry networksegment v10, which rides it: is not one of the vlans [20] of network trunk, which networkRef names"}},

		// DHCPLease
		{"lease inside the range", []string{vmNet}, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150"), nil},
		{"lease outside the range", []string{vmNet}, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.50"),
			[]string{"spec.ipAddress: 192.168.100.50 is outside the delegated range 192.168.100.100-192.168.100.199 of segment vm-net"}},
		{"lease by networkRef outside the range", []string{vmNet}, lease("web", "lab-net", "52:54:00:12:34:56", "192.168.100.1"),
			[]string{"spec.ipAddress: 192.168.100.1 is outside the delegated range 192.168.100.100-192.168.100.199 of segment vm-net"}},
		{"lease outside two ranges", []string{vmNet, segment("vm-net-hi", "br-vm", "192.168.100.1/24", "192.168.100.200", "192.168.100.220")},
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.250"),
			[]string{"spec.ipAddress: 192.168.100.250 is outside the delegated range 192.168.100.100-192.168.100.199 of segment vm-net and the delegated range 192.168.100.200-192.168.100.220 of segment vm-net-hi"}},
		{"lease on a segment without a range", []string{"apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata: {name: plain}\nspec: {networkRef: plain-net, bridge: br-plain, hostIP: 10.0.0.1/24, dhcp: {enabled: false}}\n"},
			lease("web", "br-plain", "52:54:00:12:34:56", "10.0.0.5"),
			[]string{"spec.ipAddress: 10.0.0.5 is outside segment plain, which has no delegated range"}},
		{"lease without a segment is stored", nil, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.50"), nil},
		{"MAC reserved twice", []string{vmNet, lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			lease("web-02", "br-vm", "52:54:00:12:34:56", "192.168.100.151"),
			[]string{"spec.macAddress: 52:54:00:12:34:56 is already reserved in network br-vm by lease web-01"}},
		{"MAC reserved twice, other spelling", []string{vmNet, lease("web-01", "br-vm", "52:54:00:ab:cd:ef", "192.168.100.150")},
			lease("web-02", "br-vm", "52-54-00-AB-CD-EF", "192.168.100.151"),
			[]string{"spec.macAddress: 52-54-00-AB-CD-EF is already reserved in network br-vm by lease web-01"}},
		{"IP reserved twice", []string{vmNet, lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			lease("web-02", "br-vm", "52:54:00:12:34:57", "192.168.100.150"),
			[]string{"spec.ipAddress: 192.168.100.150 is already reserved in network br-vm by lease web-01"}},
		{"IP reserved twice through networkRef", []string{vmNet, lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			lease("web-02", "lab-net", "52:54:00:12:34:57", "192.168.100.150"),
			[]string{"spec.ipAddress: 192.168.100.150 is already reserved in network lab-net by lease web-01"}},
		{"both reserved twice", []string{vmNet, lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			lease("web-02", "lab-net", "52:54:00:12:34:56", "192.168.100.150"),
			[]string{"spec.macAddress: 52:54:00:12:34:56 is already reserved in network lab-net by lease web-01", "spec.ipAddress: 192.168.100.150 is already reserved in network lab-net by lease web-01"}},
		{"same MAC and IP in another network", []string{vmNet, segment("other", "br-other", "192.168.100.1/24", "192.168.100.100", "192.168.100.199"), lease("web-01", "br-vm", "52:54:00:12:34:56", "192.168.100.150")},
			lease("web-02", "br-other", "52:54:00:12:34:56", "192.168.100.150"), nil},
		{"pending leases conflict too", []string{lease("web-01", "br-x", "52:54:00:12:34:56", "10.9.9.9")},
			lease("web-02", "br-x", "52:54:00:12:34:58", "10.9.9.9"),
			[]string{"spec.ipAddress: 10.9.9.9 is already reserved in network br-x by lease web-01"}},

		// ExternalIP
		{"one-to-one twice", []string{extIP("a", "203.0.113.10", "192.168.100.10")}, extIP("b", "203.0.113.10", "192.168.100.11"),
			[]string{"spec.address: 203.0.113.10 is already mapped one-to-one by externalip a"}},
		{"forward beside one-to-one", []string{extIP("a", "203.0.113.10", "192.168.100.10")}, extIP("b", "203.0.113.10", "192.168.100.11", "{protocol: tcp, port: 443}"),
			[]string{"spec.address: 203.0.113.10 is already mapped one-to-one by externalip a"}},
		{"one-to-one beside a forward", []string{extIP("a", "203.0.113.10", "192.168.100.10", "{protocol: tcp, port: 443}")}, extIP("b", "203.0.113.10", "192.168.100.11"),
			[]string{"spec.address: 203.0.113.10 already has port forwards (externalip a); a oneToOne mapping needs the address alone"}},
		{"same port forwarded twice", []string{extIP("a", "203.0.113.10", "192.168.100.10", "{protocol: tcp, port: 443}", "{protocol: tcp, port: 80}")},
			extIP("b", "203.0.113.10", "192.168.100.11", "{protocol: udp, port: 443}", "{protocol: tcp, port: 80, targetPort: 8080}"),
			[]string{"spec.ports[1]: tcp/80 on 203.0.113.10 is already forwarded by externalip a"}},
		{"other ports on one address", []string{extIP("a", "203.0.113.10", "192.168.100.10", "{protocol: tcp, port: 443}")},
			extIP("b", "203.0.113.10", "192.168.100.11", "{protocol: udp, port: 443}", "{protocol: tcp, port: 22}"), nil},
		{"other address", []string{extIP("a", "203.0.113.10", "192.168.100.10")}, extIP("b", "203.0.113.11", "192.168.100.10"), nil},

		// PortSecurity and VPCRouter
		{"interface secured twice", []string{"apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: a}\nspec: {interface: tap0, macAddress: \"52:54:00:00:00:01\"}\n"},
			"apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: b}\nspec: {interface: tap0, macAddress: \"52:54:00:00:00:02\"}\n",
			[]string{"spec.interface: tap0 is already secured by portsecurity a"}},
		{"vm NIC secured twice", []string{"apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: a}\nspec: {vmRef: {name: web-01, nic: 1}, macAddress: \"52:54:00:00:00:01\"}\n"},
			"apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: b}\nspec: {vmRef: {name: web-01, nic: 1}, macAddress: \"52:54:00:00:00:02\"}\n",
			[]string{"spec.vmRef: web-01 nic 1 is already secured by portsecurity a"}},
		{"VPC bridge in two routers", []string{"apiVersion: pivirt.hu/v1\nkind: VPCRouter\nmetadata: {name: a}\nspec: {inside: {bridge: vpcbr-a, ip: 10.10.0.1/24}, uplink: {bridge: br-ext, ip: 198.51.100.2/24}}\n"},
			"apiVersion: pivirt.hu/v1\nkind: VPCRouter\nmetadata: {name: b}\nspec: {inside: {bridge: vpcbr-a, ip: 10.20.0.1/24}, uplink: {bridge: br-ext, ip: 198.51.100.3/24}}\n",
			[]string{"spec.inside.bridge: vpcbr-a is already the inside bridge of vpcrouter a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			mustApply(t, tx, opts(), tc.setup...)
			writes := tx.writes
			_, _, err := Apply(tx, m(t, tc.obj), opts())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				return
			}
			var ve *pivirtv1.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Apply = %v, want a *ValidationError", err)
			}
			var got []string
			for _, fe := range ve.Errors {
				got = append(got, fe.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if tx.writes != writes {
				t.Errorf("a refused apply wrote")
			}
		})
	}
}

func TestUpdateStatus(t *testing.T) {
	tx := newFakeTx()
	mustApply(t, tx, opts(), vmNet)
	before, _ := tx.Get(pivirtv1.KindNetworkSegment, "vm-net")
	if err := UpdateStatus(tx, "segment", "vm-net", json.RawMessage(`{"phase":"Ready","observedGeneration":1}`)); err != nil {
		t.Fatal(err)
	}
	after, _ := tx.Get(pivirtv1.KindNetworkSegment, "vm-net")
	if string(after.Status) != `{"phase":"Ready","observedGeneration":1}` || after.Metadata.Generation != 1 ||
		after.Metadata.ResourceVersion == before.Metadata.ResourceVersion || string(after.Spec) != string(before.Spec) {
		t.Errorf("after UpdateStatus: %+v %s", after.Metadata, after.Status)
	}
	writes := tx.writes
	if err := UpdateStatus(tx, "NetworkSegment", "vm-net", pivirtv1.Status{Phase: "Ready", ObservedGeneration: 1}); err != nil || tx.writes != writes {
		t.Errorf("same status: err %v, wrote %v", err, tx.writes != writes)
	}
	if err := UpdateStatus(tx, "segment", "nope", nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing object: %v", err)
	}
	if err := UpdateStatus(tx, "segment", "vm-net", json.RawMessage(`{bad`)); err == nil {
		t.Errorf("bad JSON status accepted")
	}
}

// TestClusteredSegmentPlacement: with nodes sharing the store, a segment
// that serves DHCP must be placed on one node (pivirt.hu/node); one that
// does not serve DHCP, or any segment on a single node, need not be.
func TestClusteredSegmentPlacement(t *testing.T) {
	placed := "  labels: {pivirt.hu/node: n1}\n"
	seg := func(labels, dhcp string) string {
		return "apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata:\n  name: s1\n" + labels +
			"spec: {networkRef: net, bridge: br1, hostIP: 10.1.0.1/24, dhcp: {enabled: " + dhcp + ", delegatedRangeStart: 10.1.0.10, delegatedRangeEnd: 10.1.0.20}}\n"
	}
	tests := []struct {
		name      string
		doc       string
		clustered bool
		wantErr   string
	}{
		{"clustered, DHCP, unplaced", seg("", "true"), true, "metadata.labels[pivirt.hu/node]: is required on a NetworkSegment serving DHCP"},
		{"clustered, DHCP, placed", seg(placed, "true"), true, ""},
		{"clustered, no DHCP, unplaced", seg("", "false"), true, ""},
		{"single node, DHCP, unplaced", seg("", "true"), false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			_, _, err := Apply(tx, m(t, tc.doc), Options{Privileged: true, Clustered: tc.clustered})
			var ve *pivirtv1.ValidationError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Apply: %v", err)
			case tc.wantErr != "" && (!errors.As(err, &ve) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want a ValidationError containing %q", err, tc.wantErr)
			case tc.wantErr != "" && len(tx.objs[pivirtv1.KindNetworkSegment]) != 0:
				t.Error("a refused segment was stored")
			}
		})
	}
}

// TestDelegatedRanges: in clustered mode one network has a segment on
// each node (seed 003): they share hostIP's subnet and gateway and their
// delegated ranges are disjoint; two on one node (or on a single node)
// stay refused. Errors name the field, the value, the other segment and
// its node.
func TestDelegatedRanges(t *testing.T) {
	seg := func(name, node, host, start, end string) string {
		labels := ""
		if node != "" {
			labels = "  labels: {pivirt.hu/node: " + node + "}\n"
		}
		return "apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata:\n  name: " + name + "\n" + labels +
			"spec: {networkRef: cluster-overlay, bridge: virbr10, hostIP: " + host + ", dhcp: {enabled: " +
			strconv.FormatBool(node != "") + ", delegatedRangeStart: " + start + ", delegatedRangeEnd: " + end + "}}\n"
	}
	first := seg("prod-segment-node-01", "node-01", "192.168.100.1/24", "192.168.100.10", "192.168.100.50")
	tests := []struct {
		name      string
		doc       string
		clustered bool
		wantErr   []string // substrings; none: accepted
	}{
		{"second node, disjoint", seg("prod-segment-node-02", "node-02", "192.168.100.1/24", "192.168.100.51", "192.168.100.99"), true, nil},
		{"second node, overlapping", seg("prod-segment-node-02", "node-02", "192.168.100.1/24", "192.168.100.50", "192.168.100.99"), true,
			[]string{`spec.dhcp: 192.168.100.50-192.168.100.99 overlaps the delegated range 192.168.100.10-192.168.100.50 of segment prod-segment-node-01 on node node-01`}},
		{"second node, other gateway", seg("prod-segment-node-02", "node-02", "192.168.100.2/24", "192.168.100.51", "192.168.100.99"), true,
			[]string{`spec.hostIP: 192.168.100.2/24 differs from the gateway 192.168.100.1 of segment prod-segment-node-01 on node node-01`}},
		{"second node, other subnet", seg("prod-segment-node-02", "node-02", "192.168.100.1/25", "192.168.100.51", "192.168.100.99"), true,
			[]string{`spec.hostIP: 192.168.100.1/25 has the subnet 192.168.100.0/25, not 192.168.100.0/24 as segment prod-segment-node-01 on node node-01`}},
		{"second node, overlapping and other gateway", seg("prod-segment-node-02", "node-02", "192.168.100.2/24", "192.168.100.20", "192.168.100.30"), true,
			[]string{"spec.hostIP:", "spec.dhcp:"}},
		{"same node", seg("prod-segment-b", "node-01", "192.168.100.1/24", "192.168.100.51", "192.168.100.99"), true,
			[]string{`spec.networkRef: cluster-overlay is already the networkRef of segment prod-segment-node-01 on node node-01: a network has one segment per node`}},
		{"unplaced, so on every node", seg("prod-segment-all", "", "192.168.100.1/24", "192.168.100.51", "192.168.100.99"), true,
			[]string{`is already the networkRef of segment prod-segment-node-01 on node node-01`}},
		{"single node mode", seg("prod-segment-node-02", "node-02", "192.168.100.1/24", "192.168.100.51", "192.168.100.99"), false,
			[]string{`spec.networkRef: cluster-overlay is already the networkRef of segment prod-segment-node-01`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			opts := Options{Privileged: true, Clustered: tc.clustered}
			if _, _, err := Apply(tx, m(t, first), opts); err != nil {
				t.Fatal(err)
			}
			_, _, err := Apply(tx, m(t, tc.doc), opts)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if len(tx.objs[pivirtv1.KindNetworkSegment]) != 2 {
					t.Errorf("stored %d segments, want 2", len(tx.objs[pivirtv1.KindNetworkSegment]))
				}
				return
			}
			var ve *pivirtv1.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v\nwant it to contain %q", err, want)
				}
			}
			if len(tx.objs[pivirtv1.KindNetworkSegment]) != 1 {
				t.Error("a refused segment was stored")
			}
		})
	}
}

// TestPortSecurityInterfacePerNode: interface names repeat across hosts, so
// the one-PortSecurity-per-interface rule holds per node (an unplaced
// object is on every node).
func TestPortSecurityInterfacePerNode(t *testing.T) {
	ps := func(name, node, mac string) string {
		labels := ""
		if node != "" {
			labels = ", labels: {pivirt.hu/node: " + node + "}"
		}
		return "apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: " + name + labels + "}\nspec: {interface: vnet0, macAddress: \"" + mac + "\"}\n"
	}
	tests := []struct {
		name        string
		stored, obj string
		want        string
	}{
		{"twice on one node", ps("a", "n1", "52:54:00:00:00:01"), ps("b", "n1", "52:54:00:00:00:02"), "spec.interface: vnet0 is already secured by portsecurity a on node n1"},
		{"placed beside an unplaced one", ps("a", "", "52:54:00:00:00:01"), ps("b", "n2", "52:54:00:00:00:02"), "spec.interface: vnet0 is already secured by portsecurity a"},
		{"unplaced beside a placed one", ps("a", "n2", "52:54:00:00:00:01"), ps("b", "", "52:54:00:00:00:02"), "spec.interface: vnet0 is already secured by portsecurity a on node n2"},
		{"one name on two nodes", ps("a", "n1", "52:54:00:00:00:01"), ps("b", "n2", "52:54:00:00:00:02"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Privileged: true, Clustered: true}
			tx := newFakeTx()
			mustApply(t, tx, o, tc.stored)
			_, _, err := Apply(tx, m(t, tc.obj), o)
			got := ""
			if err != nil {
				var ve *pivirtv1.ValidationError
				if !errors.As(err, &ve) || len(ve.Errors) != 1 {
					t.Fatalf("Apply = %v, want one field error", err)
				}
				got = ve.Errors[0].Error()
			}
			if got != tc.want {
				t.Errorf("Apply error = %q, want %q", got, tc.want)
			}
		})
	}
}
