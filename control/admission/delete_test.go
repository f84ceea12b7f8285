// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/store"
)

// owned returns metadata lines giving an ownerReference (and annotations).
func owned(kind, name, uid string, block bool, annotations ...string) string {
	s := fmt.Sprintf("  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: %s, name: %s, uid: %q, blockOwnerDeletion: %v}]", kind, name, uid, block)
	if len(annotations) > 0 {
		s += "\n  annotations: {" + strings.Join(annotations, ", ") + "}"
	}
	return s
}

const provisioningTrue = `pivirtd.pilab.hu/is-provisioning: "true"`

func portSec(name, iface string, meta ...string) string {
	return fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata:\n  name: %s\n%s\nspec: {interface: %s, macAddress: \"52:54:00:00:00:01\"}\n", name, strings.Join(meta, "\n"), iface)
}

func names(tx *fakeTx) []string {
	all, _ := tx.List("", nil)
	var out []string
	for _, o := range all {
		out = append(out, o.Kind+"/"+o.Metadata.Name)
	}
	return out
}

// TestDelete: opts() hands out uid-1, uid-2, ... in apply order, so the
// setup's ownerReferences can name uids.
func TestDelete(t *testing.T) {
	vm := &pivirtv1.Object{APIVersion: "pivirt.hu/v1", Kind: "VirtualMachine", Metadata: pivirtv1.ObjectMeta{Name: "web-01", UID: "vm-uid"}}
	vmProvisioning := &pivirtv1.Object{APIVersion: "pivirt.hu/v1", Kind: "VirtualMachine", Metadata: pivirtv1.ObjectMeta{Name: "web-01", UID: "vm-uid",
		Annotations: map[string]string{pivirtv1.AnnotationProvisioning: "true"}}}
	tests := []struct {
		name        string
		foreign     *pivirtv1.Object // stored as is, before setup
		setup       []string
		kind, obj   string
		rv          string
		dryRun      bool
		wantErr     error
		wantMsg     string
		wantDeleted []string
		wantLeft    []string
	}{
		{name: "missing", kind: "lease", obj: "nope", wantErr: store.ErrNotFound, wantMsg: "deleting dhcplease/nope: not found"},
		{name: "unknown kind", kind: "frob", obj: "x", wantMsg: `deleting frob/x: unknown kind "frob" (known: bridge, dhcplease, dhcpleases, externalip, externalips, extip, ippool, ippools, lease, leases, net, nets, network, networks, networksegment, networksegments, overlay, overlaynetwork, overlaynetworks, overlays, portsec, portsecurities, portsecurity, router, routers, segment, segments, vpcrouter, vpcrouters)`},
		{name: "kind of another tier", kind: "vm", obj: "x", wantMsg: `deleting vm/x: VirtualMachine (vm) is not served by this pivirtd: it serves Network, OverlayNetwork, NetworkSegment, DHCPLease, PortSecurity, ExternalIP, VPCRouter (VirtualMachine belongs to the host tier's VM runtime)`},
		{name: "stale resourceVersion", setup: []string{vmNet}, kind: "segment", obj: "vm-net", rv: "1", wantErr: store.ErrConflict,
			wantLeft: []string{"NetworkSegment/vm-net"}},
		{name: "plain", setup: []string{vmNet, lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")}, kind: "segments", obj: "vm-net",
			wantDeleted: []string{"NetworkSegment/vm-net"}, wantLeft: []string{"DHCPLease/web"}},
		{name: "cascade, recursive", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", false)),
			portSec("web-nic0", "tap0", owned("DHCPLease", "web", "uid-2", false)),
			lease("db", "br-vm", "52:54:00:12:34:57", "192.168.100.151", owned("networksegment", "vm-net", "", false)),
			lease("other", "br-vm", "52:54:00:12:34:58", "192.168.100.152")},
			kind: "NetworkSegment", obj: "vm-net",
			wantDeleted: []string{"NetworkSegment/vm-net", "DHCPLease/db", "DHCPLease/web", "PortSecurity/web-nic0"},
			wantLeft:    []string{"DHCPLease/other"}},
		{name: "dry run", dryRun: true, setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", false))},
			kind: "segment", obj: "vm-net",
			wantDeleted: []string{"NetworkSegment/vm-net", "DHCPLease/web"},
			wantLeft:    []string{"DHCPLease/web", "NetworkSegment/vm-net"}},
		{name: "uid of another incarnation", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-of-an-older-vm-net", false))},
			kind: "segment", obj: "vm-net",
			wantDeleted: []string{"NetworkSegment/vm-net"}, wantLeft: []string{"DHCPLease/web"}},
		{name: "dependent with another owner survives", foreign: vm, setup: []string{vmNet,
			"apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata:\n  name: web\n  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: NetworkSegment, name: vm-net}, {apiVersion: pivirt.hu/v1, kind: VirtualMachine, name: web-01}]\nspec: {network: br-vm, macAddress: \"52:54:00:12:34:56\", ipAddress: 192.168.100.150}\n"},
			kind: "segment", obj: "vm-net",
			wantDeleted: []string{"NetworkSegment/vm-net"}, wantLeft: []string{"DHCPLease/web", "VirtualMachine/web-01"}},
		{name: "blockOwnerDeletion", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", true))},
			kind: "segment", obj: "vm-net", wantErr: ErrBlocked,
			wantMsg:  "deleting networksegment/vm-net: dhcplease/web has blockOwnerDeletion on its owner networksegment/vm-net; delete it first: blocked",
			wantLeft: []string{"DHCPLease/web", "NetworkSegment/vm-net"}},
		{name: "blockOwnerDeletion further down", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", false)),
			portSec("web-nic0", "tap0", owned("DHCPLease", "web", "uid-2", true))},
			kind: "segment", obj: "vm-net", wantErr: ErrBlocked,
			wantMsg:  "deleting networksegment/vm-net: portsecurity/web-nic0 has blockOwnerDeletion on its owner dhcplease/web; delete it first: blocked",
			wantLeft: []string{"DHCPLease/web", "NetworkSegment/vm-net", "PortSecurity/web-nic0"}},
		{name: "blocking dependent deleted first", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", true))},
			kind: "lease", obj: "web",
			wantDeleted: []string{"DHCPLease/web"}, wantLeft: []string{"NetworkSegment/vm-net"}},

		// provisioning interlock
		{name: "provisioning lease", setup: []string{lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", "  annotations: {"+provisioningTrue+"}")},
			kind: "lease", obj: "web", wantErr: ErrBlocked,
			wantMsg:  `deleting dhcplease/web: dhcplease/web cannot be deleted while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`,
			wantLeft: []string{"DHCPLease/web"}},
		{name: "lease of a provisioning VM", foreign: vmProvisioning,
			setup: []string{lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("VirtualMachine", "web-01", "vm-uid", false))},
			kind:  "lease", obj: "web", wantErr: ErrBlocked,
			wantMsg:  `deleting dhcplease/web: dhcplease/web cannot be deleted while annotation pivirtd.pilab.hu/is-provisioning is "true" on its owner virtualmachine/web-01: blocked`,
			wantLeft: []string{"DHCPLease/web", "VirtualMachine/web-01"}},
		{name: "lease of a VM that is not provisioning", foreign: vm,
			setup: []string{lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("VirtualMachine", "web-01", "vm-uid", false))},
			kind:  "lease", obj: "web", wantDeleted: []string{"DHCPLease/web"}, wantLeft: []string{"VirtualMachine/web-01"}},
		{name: "annotation false", setup: []string{lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", `  annotations: {pivirtd.pilab.hu/is-provisioning: "false"}`)},
			kind: "lease", obj: "web", wantDeleted: []string{"DHCPLease/web"}},
		{name: "cascade into a provisioning lease", setup: []string{vmNet,
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("NetworkSegment", "vm-net", "uid-1", false, provisioningTrue))},
			kind: "segment", obj: "vm-net", wantErr: ErrBlocked,
			wantMsg:  `deleting networksegment/vm-net: dhcplease/web cannot be deleted while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`,
			wantLeft: []string{"DHCPLease/web", "NetworkSegment/vm-net"}},
		{name: "a network its segment rides", setup: []string{routedNet, onLab},
			kind: "net", obj: "lab", wantErr: ErrBlocked,
			wantMsg:  "deleting network/lab: network/lab carries networksegment/lab-seg, which names it in networkRef; delete the segment first: blocked",
			wantLeft: []string{"Network/lab", "NetworkSegment/lab-seg"}},
		{name: "a network nothing rides", setup: []string{routedNet}, kind: "bridge", obj: "lab",
			wantDeleted: []string{"Network/lab"}},
		{name: "deleting a provisioning owner", setup: []string{
			portSec("web-nic0", "tap0", "  annotations: {"+provisioningTrue+"}"),
			lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("PortSecurity", "web-nic0", "uid-1", false))},
			kind: "portsec", obj: "web-nic0", wantErr: ErrBlocked,
			wantMsg:  `deleting portsecurity/web-nic0: dhcplease/web cannot be deleted while annotation pivirtd.pilab.hu/is-provisioning is "true" on its owner portsecurity/web-nic0: blocked`,
			wantLeft: []string{"DHCPLease/web", "PortSecurity/web-nic0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			if tc.foreign != nil {
				tx.seed(tc.foreign)
			}
			o := opts()
			mustApply(t, tx, o, tc.setup...)
			writes := tx.writes
			o.DryRun = tc.dryRun
			deleted, err := Delete(tx, tc.kind, tc.obj, tc.rv, o)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Delete = %v, want %v", err, tc.wantErr)
			case tc.wantMsg != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantMsg)):
				t.Fatalf("Delete = %v, want %q", err, tc.wantMsg)
			case tc.wantErr == nil && tc.wantMsg == "" && err != nil:
				t.Fatalf("Delete: %v", err)
			}
			if err != nil && tx.writes != writes {
				t.Errorf("a refused delete wrote")
			}
			if diff := cmp.Diff(tc.wantDeleted, deleted); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLeft, names(tx)); diff != "" {
				t.Errorf("left in store (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeleteDropsDanglingOwnerReference(t *testing.T) {
	tx := newFakeTx()
	tx.seed(&pivirtv1.Object{APIVersion: "pivirt.hu/v1", Kind: "VirtualMachine", Metadata: pivirtv1.ObjectMeta{Name: "web-01"}})
	mustApply(t, tx, opts(), vmNet,
		"apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata:\n  name: web\n  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: NetworkSegment, name: vm-net}, {apiVersion: pivirt.hu/v1, kind: VirtualMachine, name: web-01}]\nspec: {network: br-vm, macAddress: \"52:54:00:12:34:56\", ipAddress: 192.168.100.150}\n")
	before, _ := tx.Get(pivirtv1.KindDHCPLease, "web")
	if _, err := Delete(tx, "segment", "vm-net", "", opts()); err != nil {
		t.Fatal(err)
	}
	after, _ := tx.Get(pivirtv1.KindDHCPLease, "web")
	want := []pivirtv1.OwnerReference{{APIVersion: "pivirt.hu/v1", Kind: "VirtualMachine", Name: "web-01"}}
	if diff := cmp.Diff(want, after.Metadata.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	if after.Metadata.Generation != before.Metadata.Generation {
		t.Errorf("generation %d -> %d", before.Metadata.Generation, after.Metadata.Generation)
	}
}

// TestInterlockApply: a frozen lease may change anything but its IP and
// network.
func TestInterlockApply(t *testing.T) {
	vm := &pivirtv1.Object{APIVersion: "pivirt.hu/v1", Kind: "VirtualMachine", Metadata: pivirtv1.ObjectMeta{Name: "web-01",
		Annotations: map[string]string{pivirtv1.AnnotationProvisioning: "true"}}}
	frozen := lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", "  annotations: {"+provisioningTrue+"}")
	byVM := lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150", owned("VirtualMachine", "web-01", "", false))
	free := lease("web", "br-vm", "52:54:00:12:34:56", "192.168.100.150")
	tests := []struct {
		name, stored, next string
		wantMsg            string
	}{
		{"move IP", frozen, strings.Replace(frozen, "192.168.100.150", "192.168.100.151", 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-vm 192.168.100.151 (52:54:00:12:34:56) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`},
		{"move network", frozen, strings.Replace(frozen, "network: br-vm", "network: br-other", 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-other 192.168.100.150 (52:54:00:12:34:56) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`},
		{"drop the annotation and move at once", frozen, strings.Replace(free, "192.168.100.150", "192.168.100.151", 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-vm 192.168.100.151 (52:54:00:12:34:56) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`},
		{"move a lease of a provisioning VM", byVM, strings.Replace(byVM, "192.168.100.150", "192.168.100.151", 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-vm 192.168.100.151 (52:54:00:12:34:56) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on its owner virtualmachine/web-01: blocked`},
		{"hand the lease to a provisioning VM while moving it", free, strings.Replace(byVM, "192.168.100.150", "192.168.100.151", 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-vm 192.168.100.151 (52:54:00:12:34:56) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on its owner virtualmachine/web-01: blocked`},
		{"move to another MAC", frozen, strings.Replace(frozen, `macAddress: "52:54:00:12:34:56"`, `macAddress: "52:54:00:12:34:57"`, 1),
			`applying dhcplease/web: moving the lease from br-vm 192.168.100.150 (52:54:00:12:34:56) to br-vm 192.168.100.150 (52:54:00:12:34:57) is refused while annotation pivirtd.pilab.hu/is-provisioning is "true" on it: blocked`},
		{"change hostname", frozen, strings.Replace(frozen, "ipAddress: 192.168.100.150", "ipAddress: 192.168.100.150, hostname: web-01", 1), ""},
		{"same IP, other spelling is no move", frozen, strings.Replace(frozen, `macAddress: "52:54:00:12:34:56"`, `macAddress: "52:54:00:12:34:56", leaseTime: 60`, 1), ""},
		{"clear the annotation", frozen, free, ""},
		{"move a free lease", free, strings.Replace(free, "192.168.100.150", "192.168.100.151", 1), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tx := newFakeTx()
			tx.seed(vm)
			mustApply(t, tx, opts(), tc.stored)
			writes := tx.writes
			_, _, err := Apply(tx, m(t, tc.next), opts())
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBlocked) || err.Error() != tc.wantMsg {
				t.Fatalf("Apply = %v\nwant %s", err, tc.wantMsg)
			}
			if tx.writes != writes {
				t.Errorf("a refused apply wrote")
			}
		})
	}
}
