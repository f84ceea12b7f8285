// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	resourcev1 "pivirt.hu/pivirt/api/resource/v1"
)

const (
	webLabelled = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01
  labels: {app: web}
spec: {network: br0, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.10}
`
	dbLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: db-01}
spec: {network: br0, macAddress: "52:54:00:12:34:57", ipAddress: 192.168.100.11}
`
	ownedLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01
  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: NetworkSegment, name: lan}]
spec: {network: br0, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.10}
`
	blockingLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01
  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: NetworkSegment, name: lan, blockOwnerDeletion: true}]
spec: {network: br0, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.10}
`
	describedLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata:
  name: web-01
  labels: {app: web, tier: fe}
  annotations: {pivirtd.pilab.hu/is-provisioning: "true"}
  ownerReferences: [{apiVersion: pivirt.hu/v1, kind: NetworkSegment, name: lan, uid: uid-lan, blockOwnerDeletion: true}]
spec: {network: br0, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.10, hostname: web-01}
status:
  phase: Ready
  observedGeneration: 1
  servedBy: xdp
  conditions:
  - {type: Programmed, status: "True", reason: MapsSynced, lastTransitionTime: "2026-12-02T16:58:00Z"}
`
	badLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: bad}
spec: {network: br0, macAddress: "52:54:00:12:34:58", ipAddress: 300.1.1.1}
`
	oddLease = `apiVersion: pivirt.hu/v1
kind: DHCPLease
metadata: {name: odd}
spec: {network: br0, macAddress: "52:54:00:12:34:59", ipAddress: 192.168.100.12, colour: blue}
`
)

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    []string          // objects stored before the command
		files    map[string]string // written to $DIR
		stdin    string
		args     []string // $DIR is replaced by the temp dir
		wantOut  string   // exact, after $DIR replacement
		wantErr  string   // exact
		wantCode int
		check    func(*fakeServer) error
	}{
		// apply
		{name: "apply creates", files: map[string]string{"m.yaml": segmentDoc + "---\n" + leaseDoc},
			args:    []string{"apply", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment/lan created\ndhcplease/web-01 created\n",
			check:   stored("DHCPLease/web-01", "NetworkSegment/lan")},
		{name: "apply unchanged and configured", setup: []string{segmentDoc, leaseDoc},
			files:   map[string]string{"m.yaml": segmentDoc + "---\n" + strings.Replace(leaseDoc, "192.168.100.10", "192.168.100.20", 1)},
			args:    []string{"apply", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment/lan unchanged\ndhcplease/web-01 configured\n"},
		{name: "apply dry run stores nothing", files: map[string]string{"m.yaml": segmentDoc},
			args:    []string{"apply", "--dry-run", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment/lan created (dry run)\n",
			check:   stored()},
		{name: "apply dry run, kubectl spelling", files: map[string]string{"m.yaml": segmentDoc},
			args:    []string{"apply", "--dry-run=server", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment/lan created (dry run)\n",
			check:   stored()},
		{name: "apply dry run none", files: map[string]string{"m.yaml": segmentDoc},
			args:    []string{"apply", "--dry-run=none", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment/lan created\n",
			check:   stored("NetworkSegment/lan")},
		{name: "apply client dry run refused", files: map[string]string{"m.yaml": segmentDoc},
			args:     []string{"apply", "--dry-run=client", "-f", "$DIR/m.yaml"},
			wantCode: 1,
			wantErr:  "error: invalid argument \"client\" for \"--dry-run\" flag: pivirtd validates on the server only: use --dry-run or --dry-run=server\nSee 'pivirtctl apply --help' for usage.\n",
			check:    stored()},
		{name: "apply tries every object and fails", files: map[string]string{"m.yaml": badLease + "---\n" + leaseDoc + "---\n" + oddLease},
			args:    []string{"apply", "-f", "$DIR/m.yaml"},
			wantOut: "dhcplease/web-01 created\n",
			wantErr: `Error from server (Invalid): dhcplease "bad": spec.ipAddress: 300.1.1.1 is not an IPv4 address` + "\n" +
				`Error from server (Invalid): dhcplease "odd": decoding spec of DHCPLease "odd": json: unknown field "colour"` + "\n",
			wantCode: 1, check: stored("DHCPLease/web-01")},
		{name: "apply from stdin", stdin: leaseDoc, args: []string{"apply", "-f", "-"},
			wantOut: "dhcplease/web-01 created\n"},
		{name: "apply a directory", files: map[string]string{"d/2.yaml": leaseDoc, "d/1.json": `{"apiVersion":"pivirt.hu/v1","kind":"NetworkSegment","metadata":{"name":"lan"},"spec":{"bridge":"br0","hostIP":"192.168.100.1/24"}}`},
			args:    []string{"apply", "-f", "$DIR/d"},
			wantOut: "networksegment/lan created\ndhcplease/web-01 created\n"},
		{name: "apply -o name", stdin: leaseDoc, args: []string{"apply", "-o", "name", "-f", "-"},
			wantOut: "dhcplease/web-01\n"},
		{name: "apply -o yaml prints the stored object", stdin: segmentDoc, args: []string{"apply", "-o", "yaml", "-f", "-"},
			wantOut: `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata:
  creationTimestamp: "2026-12-02T16:55:00Z"
  generation: 1
  name: lan
  resourceVersion: "1"
  uid: uid-lan
spec:
  bridge: br0
  dhcp:
    dnsServers: null
  hostIP: 192.168.100.1/24
  networkRef: net-lan
`},
		{name: "apply parse error names file and document", files: map[string]string{"m.yaml": leaseDoc + "---\nkind: DHCPLease\nmetadata: {name: [\n"},
			args:     []string{"apply", "-f", "$DIR/m.yaml"},
			wantErr:  "error: parsing $DIR/m.yaml: document 2 (line 10): yaml: line 2: did not find expected node content\n",
			wantCode: 1, check: stored()},
		{name: "apply missing file", args: []string{"apply", "-f", "$DIR/nope.yaml"},
			wantErr: "error: the path \"$DIR/nope.yaml\" does not exist\n", wantCode: 1},
		{name: "apply bad output", stdin: leaseDoc, args: []string{"apply", "-o", "wide", "-f", "-"},
			wantErr: "error: unknown output format \"wide\": want name, yaml or json\nSee 'pivirtctl apply --help' for usage.\n", wantCode: 1},

		// get
		{name: "get table", setup: []string{leaseDoc, dbLease}, args: []string{"get", "leases"},
			wantOut: `NAME     NETWORK   MAC                 IP               TYPE     EXPIRES   NODE     CONFLICT   PHASE    AGE
db-01    br0       52:54:00:12:34:57   192.168.100.11   static   <none>    <none>   <none>     <none>   5m
web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     <none>   5m
`},
		{name: "get alias is case-insensitive", setup: []string{leaseDoc}, args: []string{"get", "DHCPLeases", "-o", "name"},
			wantOut: "dhcplease/web-01\n"},
		{name: "get by selector", setup: []string{webLabelled, dbLease}, args: []string{"get", "lease", "-l", "app=web", "--no-headers"},
			wantOut: "web-01   br0   52:54:00:12:34:56   192.168.100.10   static   <none>   <none>   <none>   <none>   5m\n"},
		{name: "get missing", args: []string{"get", "lease", "x"},
			wantErr: "Error from server (NotFound): dhcplease \"x\" not found\n", wantCode: 1},
		{name: "get some missing", setup: []string{leaseDoc}, args: []string{"get", "lease", "web-01", "x", "-o", "name"},
			wantOut: "dhcplease/web-01\n", wantErr: "Error from server (NotFound): dhcplease \"x\" not found\n", wantCode: 1},
		{name: "get empty list", args: []string{"get", "segments"}, wantErr: "No resources found.\n"},
		{name: "get one as json", setup: []string{leaseDoc}, args: []string{"get", "lease", "web-01", "-o", "json"},
			wantOut: `{
    "apiVersion": "pivirt.hu/v1",
    "kind": "DHCPLease",
    "metadata": {
        "name": "web-01",
        "uid": "uid-web-01",
        "generation": 1,
        "resourceVersion": "1",
        "creationTimestamp": "2026-12-02T16:55:00Z"
    },
    "spec": {
        "network": "br0",
        "macAddress": "52:54:00:12:34:56",
        "ipAddress": "192.168.100.10",
        "type": "static"
    }
}
`},
		{name: "get list as yaml", setup: []string{leaseDoc}, args: []string{"get", "lease", "-o", "yaml"},
			wantOut: `apiVersion: pivirt.hu/v1
items:
- apiVersion: pivirt.hu/v1
  kind: DHCPLease
  metadata:
    creationTimestamp: "2026-12-02T16:55:00Z"
    generation: 1
    name: web-01
    resourceVersion: "1"
    uid: uid-web-01
  spec:
    ipAddress: 192.168.100.10
    macAddress: "52:54:00:12:34:56"
    network: br0
    type: static
kind: List
`},
		{name: "get all", setup: []string{leaseDoc, segmentDoc}, args: []string{"get", "all", "-o", "name"},
			wantOut: "dhcplease/web-01\nnetworksegment/lan\n"},
		{name: "get a kind of another tier", args: []string{"get", "vm"}, wantCode: 1,
			wantErr: "error: VirtualMachine (vm) is not served by this pivirtd: it serves Network, OverlayNetwork, NetworkSegment, DHCPLease, PortSecurity, ExternalIP, VPCRouter (VirtualMachine belongs to the host tier's VM runtime)\n"},
		{name: "get a misspelt kind", args: []string{"get", "leses"}, wantCode: 1,
			wantErr: "error: unknown kind \"leses\": did you mean \"leases\"? (pivirtctl api-resources lists the kinds)\n"},
		{name: "get unknown kind", args: []string{"get", "pods"}, wantCode: 1,
			wantErr: `error: unknown kind "pods" (known: bridge, dhcplease, dhcpleases, externalip, externalips, extip, ippool, ippools, lease, leases, net, nets, network, networks, networksegment, networksegments, overlay, overlaynetwork, overlaynetworks, overlays, portsec, portsecurities, portsecurity, router, routers, segment, segments, vpcrouter, vpcrouters)` + "\n"},
		{name: "get names and selector", args: []string{"get", "lease", "a", "-l", "x=y"}, wantCode: 1,
			wantErr: "error: names cannot be given together with a selector (-l, --field-selector)\nSee 'pivirtctl get --help' for usage.\n"},
		{name: "get bad output", args: []string{"get", "lease", "-o", "table"}, wantCode: 1,
			wantErr: "error: unknown output format \"table\": want yaml, json, wide or name\nSee 'pivirtctl get --help' for usage.\n"},

		// describe
		{name: "describe", setup: []string{describedLease}, args: []string{"describe", "lease", "web-01"},
			wantOut: `Name:                 web-01
Kind:                 DHCPLease
API Version:          pivirt.hu/v1
Labels:               app=web
                      tier=fe
Annotations:          pivirtd.pilab.hu/is-provisioning=true
Owner References:     networksegment/lan (uid uid-lan), blocks owner deletion
UID:                  uid-web-01
Generation:           1
Resource Version:     1
Creation Timestamp:   Wed, 02 Dec 2026 16:55:00 +0000 (5m ago)
Spec:
  hostname: web-01
  ipAddress: 192.168.100.10
  macAddress: "52:54:00:12:34:56"
  network: br0
  type: static
Status:
  Phase:                 Ready
  Observed Generation:   1
  servedBy: xdp
Conditions:
  Type         Status   Reason       Message   Age
  ----         ------   ------       -------   ---
  Programmed   True     MapsSynced   <none>    2m
Events:
  Type      Reason     Age                From      Message
  ----      ------     ---                ----      -------
  Normal    Reserved   4m                 pivirtd   reserved 192.168.100.10
  Warning   Probe      60s (x3 over 3m)   pivirtd   ARP probe answered
`},
		{name: "describe without status or events", setup: []string{segmentDoc}, args: []string{"describe", "segment", "lan"},
			wantOut: `Name:                 lan
Kind:                 NetworkSegment
API Version:          pivirt.hu/v1
Labels:               <none>
Annotations:          <none>
Owner References:     <none>
UID:                  uid-lan
Generation:           1
Resource Version:     1
Creation Timestamp:   Wed, 02 Dec 2026 16:55:00 +0000 (5m ago)
Spec:
  bridge: br0
  dhcp:
    dnsServers: null
  hostIP: 192.168.100.1/24
  networkRef: net-lan
Status:
  Phase:                 <none>
  Observed Generation:   <none>
Conditions:              <none>
Events:                  <none>
`},
		{name: "describe segment of a network on several nodes", setup: []string{segmentDoc, siblingSegment("lan-n2", "n2", "10", "49", "leasesInUse: 3, rangeSize: 40"),
			siblingSegment("lan-n3", "n3", "50", "99", ""), siblingSegment("other", "n2", "10", "20", "")},
			args: []string{"describe", "segment", "lan"},
			wantOut: `Name:                 lan
Kind:                 NetworkSegment
API Version:          pivirt.hu/v1
Labels:               <none>
Annotations:          <none>
Owner References:     <none>
UID:                  uid-lan
Generation:           1
Resource Version:     1
Creation Timestamp:   Wed, 02 Dec 2026 16:55:00 +0000 (5m ago)
Spec:
  bridge: br0
  dhcp:
    dnsServers: null
  hostIP: 192.168.100.1/24
  networkRef: net-lan
Status:
  Phase:                 <none>
  Observed Generation:   <none>
Conditions:              <none>
Network net-lan, other segments:
  Name     Node   Range                           Leases (in use/size)
  ----     ----   -----                           --------------------
  lan-n2   n2     192.168.100.10-192.168.100.49   3/40
  lan-n3   n3     192.168.100.50-192.168.100.99   <none>
Events:   <none>
`},
		{name: "describe missing", args: []string{"describe", "segment", "lan"},
			wantErr: "Error from server (NotFound): networksegment \"lan\" not found\n", wantCode: 1},

		// delete
		{name: "delete cascades", setup: []string{segmentDoc, ownedLease, dbLease}, args: []string{"delete", "segment", "lan"},
			wantOut: "networksegment \"lan\" deleted\ndhcplease \"web-01\" deleted\n", check: stored("DHCPLease/db-01")},
		{name: "delete dry run", setup: []string{segmentDoc, ownedLease}, args: []string{"delete", "segment", "lan", "--dry-run"},
			wantOut: "networksegment \"lan\" deleted (dry run)\ndhcplease \"web-01\" deleted (dry run)\n",
			check:   stored("DHCPLease/web-01", "NetworkSegment/lan")},
		{name: "delete blocked by dependent", setup: []string{segmentDoc, blockingLease}, args: []string{"delete", "segment", "lan"},
			wantErr:  "Error from server (Forbidden): NetworkSegment \"lan\" is blocked by its dependent DHCPLease/web-01\n",
			wantCode: 1, check: stored("DHCPLease/web-01", "NetworkSegment/lan")},
		{name: "delete missing goes on", setup: []string{leaseDoc}, args: []string{"delete", "lease", "x", "web-01"},
			wantOut: "dhcplease \"web-01\" deleted\n", wantErr: "Error from server (NotFound): dhcplease \"x\" not found\n", wantCode: 1,
			check: stored()},
		{name: "delete ignore not found", args: []string{"delete", "lease", "x", "--ignore-not-found"}},
		{name: "delete -f skips cascaded", setup: []string{segmentDoc, ownedLease},
			files:   map[string]string{"m.yaml": segmentDoc + "---\n" + ownedLease},
			args:    []string{"delete", "-f", "$DIR/m.yaml"},
			wantOut: "networksegment \"lan\" deleted\ndhcplease \"web-01\" deleted\n", check: stored()},
		{name: "delete by selector", setup: []string{webLabelled, dbLease}, args: []string{"delete", "leases", "-l", "app=web"},
			wantOut: "dhcplease \"web-01\" deleted\n", check: stored("DHCPLease/db-01")},
		{name: "delete all of a kind", setup: []string{leaseDoc, dbLease, segmentDoc}, args: []string{"delete", "leases", "--all"},
			wantOut: "dhcplease \"db-01\" deleted\ndhcplease \"web-01\" deleted\n", check: stored("NetworkSegment/lan")},
		{name: "delete empty file", stdin: "# nothing\n", args: []string{"delete", "-f", "-"}, wantCode: 1,
			wantErr: "error: no objects passed to delete\n"},
		{name: "apply empty file", stdin: "---\n", args: []string{"apply", "-f", "-"}, wantCode: 1,
			wantErr: "error: no objects passed to apply\n"},
		{name: "delete without names", args: []string{"delete", "lease"}, wantCode: 1,
			wantErr: "error: give the names of the DHCPLease objects to delete, -l SELECTOR or --all\nSee 'pivirtctl delete --help' for usage.\n"},

		// diff
		{name: "diff same despite server defaults", setup: []string{segmentDoc, leaseDoc},
			files: map[string]string{"m.yaml": segmentDoc + "---\n" + leaseDoc}, args: []string{"diff", "-f", "$DIR/m.yaml"}},
		{name: "diff changed", setup: []string{leaseDoc},
			files:    map[string]string{"m.yaml": strings.Replace(webLabelled, "192.168.100.10", "192.168.100.20", 1)},
			args:     []string{"diff", "-f", "$DIR/m.yaml"},
			wantCode: 1,
			wantOut: `diff -u -N live/dhcplease/web-01 merged/dhcplease/web-01
--- live/dhcplease/web-01
+++ merged/dhcplease/web-01
@@ -1,9 +1,11 @@
 apiVersion: pivirt.hu/v1
 kind: DHCPLease
 metadata:
+  labels:
+    app: web
   name: web-01
 spec:
-  ipAddress: 192.168.100.10
+  ipAddress: 192.168.100.20
   macAddress: "52:54:00:12:34:56"
   network: br0
   type: static
`},
		{name: "diff new object", files: map[string]string{"m.yaml": dbLease}, args: []string{"diff", "-f", "$DIR/m.yaml"},
			wantCode: 1,
			wantOut: `diff -u -N live/dhcplease/db-01 merged/dhcplease/db-01
--- live/dhcplease/db-01
+++ merged/dhcplease/db-01
@@ -0,0 +1,9 @@
+apiVersion: pivirt.hu/v1
+kind: DHCPLease
+metadata:
+  name: db-01
+spec:
+  ipAddress: 192.168.100.11
+  macAddress: "52:54:00:12:34:57"
+  network: br0
+  type: static
`},
		{name: "diff refused object", setup: []string{leaseDoc}, files: map[string]string{"m.yaml": leaseDoc + "---\n" + badLease},
			args: []string{"diff", "-f", "$DIR/m.yaml"}, wantCode: 2,
			wantErr: `Error from server (Invalid): dhcplease "bad": spec.ipAddress: 300.1.1.1 is not an IPv4 address` + "\n"},
		{name: "diff unreadable file", args: []string{"diff", "-f", "$DIR/nope.yaml"}, wantCode: 2,
			wantErr: "error: the path \"$DIR/nope.yaml\" does not exist\n"},

		// misc
		{name: "api-resources", args: []string{"api-resources"},
			wantOut: `NAME              SHORTNAMES                        APIVERSION     KIND
networks          network,net,nets,bridge           pivirt.hu/v1   Network
overlaynetworks   overlaynetwork,overlay,overlays   pivirt.hu/v1   OverlayNetwork
networksegments   networksegment,segment,segments   pivirt.hu/v1   NetworkSegment
dhcpleases        dhcplease,lease,leases            pivirt.hu/v1   DHCPLease
portsecurities    portsecurity,portsec              pivirt.hu/v1   PortSecurity
externalips       externalip,ippool,ippools,extip   pivirt.hu/v1   ExternalIP
vpcrouters        vpcrouter,router,routers          pivirt.hu/v1   VPCRouter
`},
		{name: "api-resources --all marks the kinds of other tiers", args: []string{"api-resources", "--all"},
			wantOut: `NAME              SHORTNAMES                              APIVERSION     KIND             SERVED
networks          network,net,nets,bridge                 pivirt.hu/v1   Network          true
overlaynetworks   overlaynetwork,overlay,overlays         pivirt.hu/v1   OverlayNetwork   true
networksegments   networksegment,segment,segments         pivirt.hu/v1   NetworkSegment   true
dhcpleases        dhcplease,lease,leases                  pivirt.hu/v1   DHCPLease        true
portsecurities    portsecurity,portsec                    pivirt.hu/v1   PortSecurity     true
externalips       externalip,ippool,ippools,extip         pivirt.hu/v1   ExternalIP       true
vpcrouters        vpcrouter,router,routers                pivirt.hu/v1   VPCRouter        true
virtualmachines   vm,vms,virtualmachine,virtualmachines   pivirt.hu/v1   VirtualMachine   false
storagepools      pool,pools,storagepool,storagepools     pivirt.hu/v1   StoragePool      false
virtualdisks      disk,disks,virtualdisk,virtualdisks     pivirt.hu/v1   VirtualDisk      false
snapshots         snap,snaps,snapshot,snapshots           pivirt.hu/v1   Snapshot         false
<none>            <none>                                  pivirt.hu/v1   IPPool           false
ipallocations     ipallocation,ipallocations              pivirt.hu/v1   IPAllocation     false
ipreservations    ipreservation,ipreservations            pivirt.hu/v1   IPReservation    false
datastores        datastore,datastores                    pivirt.hu/v1   Datastore        false
portgroups        portgroup,portgroups                    pivirt.hu/v1   PortGroup        false
tasks             task,tasks                              pivirt.hu/v1   Task             false
organizations     organization,organizations              pivirt.hu/v1   Organization     false
projects          project,projects                        pivirt.hu/v1   Project          false
quotas            quota,quotas                            pivirt.hu/v1   Quota            false
rolebindings      rolebinding,rolebindings                pivirt.hu/v1   RoleBinding      false
vpcs              vpc,vpcs                                pivirt.hu/v1   VPC              false
subnets           subnet,subnets                          pivirt.hu/v1   Subnet           false
floatingips       floatingip,floatingips                  pivirt.hu/v1   FloatingIP       false
securitygroups    securitygroup,securitygroups            pivirt.hu/v1   SecurityGroup    false
`},
		{name: "version", args: []string{"version"}, wantOut: "Client Version: dev"},
		{name: "unknown command", args: []string{"frob"}, wantCode: 1,
			wantErr: "error: unknown command \"frob\" for \"pivirtctl\"\nSee 'pivirtctl --help' for usage.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer()
			for _, d := range tc.setup {
				f.put(t, d)
			}
			f.events["DHCPLease/web-01"] = []*resourcev1.Event{
				{Type: "Normal", Reason: "Reserved", Message: "reserved 192.168.100.10", Count: 1,
					FirstTimestampUnix: testNow.Add(-4 * time.Minute).Unix(), LastTimestampUnix: testNow.Add(-4 * time.Minute).Unix()},
				{Type: "Warning", Reason: "Probe", Message: "ARP probe answered", Count: 3,
					FirstTimestampUnix: testNow.Add(-3 * time.Minute).Unix(), LastTimestampUnix: testNow.Add(-time.Minute).Unix()},
			}
			sock := startFake(t, f)
			dir := t.TempDir()
			for name, data := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "$DIR", dir)
			}
			out, errOut, code := run(t, sock, tc.stdin, args...)
			wantOut := strings.ReplaceAll(tc.wantOut, "$DIR", dir)
			wantErr := strings.ReplaceAll(tc.wantErr, "$DIR", dir)
			if tc.name == "version" {
				if !strings.HasPrefix(out, wantOut) {
					t.Errorf("stdout = %q, want prefix %q", out, wantOut)
				}
			} else if out != wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, wantOut)
			}
			if errOut != wantErr {
				t.Errorf("stderr:\n%s\nwant:\n%s", errOut, wantErr)
			}
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d", code, tc.wantCode)
			}
			if tc.check != nil {
				if err := tc.check(f); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// stored checks that exactly these "Kind/name" objects are in the store.
func stored(want ...string) func(*fakeServer) error {
	return func(f *fakeServer) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		var got []string
		for k := range f.objs {
			got = append(got, k)
		}
		if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
			return fmt.Errorf("stored %v, want %v", sorted(got), sorted(want))
		}
		return nil
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// siblingSegment is a segment of net-lan (or of other-net, when name is
// "other") placed on node, with a delegated range 192.168.100.start-end
// and, when status is not empty, these status fields.
func siblingSegment(name, node, start, end, status string) string {
	ref := "net-lan"
	if name == "other" {
		ref = "other-net"
	}
	doc := "apiVersion: pivirt.hu/v1\nkind: NetworkSegment\nmetadata:\n  name: " + name + "\n  labels: {pivirt.hu/node: " + node + "}\n" +
		"spec: {networkRef: " + ref + ", bridge: br-" + name + ", hostIP: 192.168.100.1/24, dhcp: {delegatedRangeStart: 192.168.100." + start + ", delegatedRangeEnd: 192.168.100." + end + "}}\n"
	if status != "" {
		doc += "status: {" + status + "}\n"
	}
	return doc
}

// TestHelpNamesServedKinds: the kinds pivirtctl --help lists are the
// kinds pivirtd serves (api's table): no fewer, no more, in its order.
func TestHelpNamesServedKinds(t *testing.T) {
	out, errOut, code := run(t, "", "", "--help")
	if code != 0 {
		t.Fatalf("--help: %d %s", code, errOut)
	}
	m := regexp.MustCompile(`pivirt\.hu/v1 objects \(([^)]*)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("--help has no list of kinds (\"pivirt.hu/v1 objects (...)\"):\n%s", out)
	}
	var served []string
	for _, k := range pivirtv1.Kinds {
		served = append(served, k.Kind)
	}
	if listed := strings.Split(m[1], ", "); !slices.Equal(listed, served) {
		t.Errorf("--help lists the kinds %q; pivirtd serves %q", listed, served)
	}
}
