// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"pivirt.hu/pivirt/control/store"
)

// item builds a printable object from YAML, five minutes old.
func item(t *testing.T, doc string) Item {
	t.Helper()
	ms, err := ParseManifests("test", []byte(doc))
	if err != nil || len(ms) != 1 {
		t.Fatalf("parsing: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(ms[0].JSON, &m); err != nil {
		t.Fatal(err)
	}
	meta := m["metadata"].(map[string]any)
	meta["creationTimestamp"] = testNow.Add(-5 * time.Minute).Format(time.RFC3339)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	it, err := decodeItem(raw)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

const (
	segYAML = `apiVersion: pivirt.hu/v1
kind: NetworkSegment
metadata: {name: lan, labels: {site: lab}}
spec:
  bridge: br0
  hostIP: 192.168.100.1/24
  networkRef: net-lan
  dhcp: {delegatedRangeStart: 192.168.100.100, delegatedRangeEnd: 192.168.100.200, defaultLeaseTime: 86400, dnsServers: [1.1.1.1, 9.9.9.9]}
status: {phase: Ready, observedGeneration: 1}
`
	segNoDHCPYAML = `kind: NetworkSegment
metadata: {name: dark}
spec: {networkRef: net-dark, bridge: br9, hostIP: 10.9.0.1/24, dhcp: {enabled: false, dnsServers: []}}
`
	leaseYAML = `kind: DHCPLease
metadata: {name: web-01}
spec: {network: br0, macAddress: "52:54:00:12:34:56", ipAddress: 192.168.100.10, hostname: web-01, type: static}
status: {phase: Pending}
`
	dynLeaseYAML = `kind: DHCPLease
metadata: {name: lease-52-54-00-00-00-01}
spec: {network: br0, macAddress: "52:54:00:00:00:01", ipAddress: 192.168.100.101, type: dynamic, expiresAt: "2026-12-03T16:00:00Z"}
status: {phase: Ready}
`
	expiredLeaseYAML = `kind: DHCPLease
metadata: {name: lease-52-54-00-00-00-02}
spec: {network: br0, macAddress: "52:54:00:00:00:02", ipAddress: 192.168.100.102, type: dynamic, expiresAt: "2026-12-02T16:00:00Z"}
`
	portSecYAML = `kind: PortSecurity
metadata: {name: web-01-nic0}
spec:
  interface: tap-web01-0
  macAddress: "52:54:00:12:34:56"
  ipAddresses: [192.168.100.10, 192.168.100.11]
  arpGuard: false
  acl: {ingress: [{action: allow, protocol: tcp, ports: ["22"]}]}
status: {phase: Ready, attach: xdp/driver}
`
	portSecVMYAML = `kind: PortSecurity
metadata: {name: db-nic1}
spec: {vmRef: {name: db, nic: 1}, macAddress: "52:54:00:aa:bb:cc"}
`
	extIPYAML = `kind: ExternalIP
metadata: {name: web-01-public}
spec: {address: 203.0.113.10, interface: uplink0, target: 192.168.100.10}
status: {phase: Ready}
`
	extIPFwdYAML = `kind: ExternalIP
metadata: {name: web-https}
spec: {address: 203.0.113.11, router: vpc-a, target: 10.10.0.5, mode: portForward, ports: [{protocol: tcp, port: 443, targetPort: 8443}, {protocol: udp, port: 53}]}
`
	routerYAML = `kind: VPCRouter
metadata: {name: vpc-a}
spec:
  inside: {bridge: vpcbr-a, ip: 10.10.0.1/24}
  uplink: {bridge: br-ext, ip: 198.51.100.2/24, gateway: 198.51.100.1}
  masquerade: true
status: {phase: Failed}
`
)

func TestPrintList(t *testing.T) {
	for _, tc := range []struct {
		name string
		docs []string
		opts PrintOptions
		want string
	}{
		{"segments", []string{segYAML, segNoDHCPYAML}, PrintOptions{}, `
NAME   BRIDGE   HOSTIP             RANGE                             DHCP    PHASE    AGE
lan    br0      192.168.100.1/24   192.168.100.100-192.168.100.200   true    Ready    5m
dark   br9      10.9.0.1/24        <none>                            false   <none>   5m
`},
		{"segments wide", []string{segYAML, segNoDHCPYAML}, PrintOptions{Output: OutputWide}, `
NAME   BRIDGE   HOSTIP             RANGE                             DHCP    PHASE    AGE   LEASE-TIME   DNS
lan    br0      192.168.100.1/24   192.168.100.100-192.168.100.200   true    Ready    5m    86400s       1.1.1.1,9.9.9.9
dark   br9      10.9.0.1/24        <none>                            false   <none>   5m    <none>       <none>
`},
		{"segments no headers, labels", []string{segYAML, segNoDHCPYAML}, PrintOptions{NoHeaders: true, ShowLabels: true}, `
lan    br0   192.168.100.1/24   192.168.100.100-192.168.100.200   true    Ready    5m    site=lab
dark   br9   10.9.0.1/24        <none>                            false   <none>   5m    <none>
`},
		{"leases", []string{leaseYAML, dynLeaseYAML, expiredLeaseYAML}, PrintOptions{}, `
NAME                      NETWORK   MAC                 IP                TYPE      EXPIRES   NODE     CONFLICT   PHASE     AGE
web-01                    br0       52:54:00:12:34:56   192.168.100.10    static    <none>    <none>   <none>     Pending   5m
lease-52-54-00-00-00-01   br0       52:54:00:00:00:01   192.168.100.101   dynamic   in 23h    <none>   <none>     Ready     5m
lease-52-54-00-00-00-02   br0       52:54:00:00:00:02   192.168.100.102   dynamic   expired   <none>   <none>     <none>    5m
`},
		{"leases wide", []string{leaseYAML, dynLeaseYAML}, PrintOptions{Output: OutputWide}, `
NAME                      NETWORK   MAC                 IP                TYPE      EXPIRES   NODE     CONFLICT   PHASE     AGE   HOSTNAME
web-01                    br0       52:54:00:12:34:56   192.168.100.10    static    <none>    <none>   <none>     Pending   5m    web-01
lease-52-54-00-00-00-01   br0       52:54:00:00:00:01   192.168.100.101   dynamic   in 23h    <none>   <none>     Ready     5m    <none>
`},
		{"port security", []string{portSecYAML, portSecVMYAML}, PrintOptions{}, `
NAME          INTERFACE     MAC                 IPS                             PHASE    AGE
web-01-nic0   tap-web01-0   52:54:00:12:34:56   192.168.100.10,192.168.100.11   Ready    5m
db-nic1       vm:db/nic1    52:54:00:aa:bb:cc   <none>                          <none>   5m
`},
		{"port security wide", []string{portSecYAML, portSecVMYAML}, PrintOptions{Output: OutputWide}, `
NAME          INTERFACE     MAC                 IPS                             PHASE    AGE   GUARDS               ATTACH
web-01-nic0   tap-web01-0   52:54:00:12:34:56   192.168.100.10,192.168.100.11   Ready    5m    dhcp,ra,tunnel,acl   xdp/driver
db-nic1       vm:db/nic1    52:54:00:aa:bb:cc   <none>                          <none>   5m    dhcp,arp,ra,tunnel   <none>
`},
		{"external ips", []string{extIPYAML, extIPFwdYAML}, PrintOptions{}, `
NAME            ADDRESS        TARGET                               MODE          VIA            PHASE    AGE
web-01-public   203.0.113.10   192.168.100.10                       oneToOne      uplink0        Ready    5m
web-https       203.0.113.11   10.10.0.5:443->8443/tcp,53->53/udp   portForward   router/vpc-a   <none>   5m
`},
		{"routers", []string{routerYAML}, PrintOptions{}, `
NAME    INSIDE                 UPLINK                   MASQ   PHASE    AGE
vpc-a   vpcbr-a:10.10.0.1/24   br-ext:198.51.100.2/24   true   Failed   5m
`},
		{"several kinds", []string{leaseYAML, segYAML}, PrintOptions{WithKind: true}, `
NAME                 BRIDGE   HOSTIP             RANGE                             DHCP   PHASE   AGE
networksegment/lan   br0      192.168.100.1/24   192.168.100.100-192.168.100.200   true   Ready   5m

NAME               NETWORK   MAC                 IP               TYPE     EXPIRES   NODE     CONFLICT   PHASE     AGE
dhcplease/web-01   br0       52:54:00:12:34:56   192.168.100.10   static   <none>    <none>   <none>     Pending   5m
`},
		{"names", []string{segYAML, leaseYAML, routerYAML}, PrintOptions{Output: OutputName}, `
networksegment/lan
dhcplease/web-01
vpcrouter/vpc-a
`},
		{"yaml list", []string{routerYAML}, PrintOptions{Output: OutputYAML}, `
apiVersion: pivirt.hu/v1
items:
- kind: VPCRouter
  metadata:
    creationTimestamp: "2026-12-02T16:55:00Z"
    name: vpc-a
  spec:
    inside:
      bridge: vpcbr-a
      ip: 10.10.0.1/24
    masquerade: true
    uplink:
      bridge: br-ext
      gateway: 198.51.100.1
      ip: 198.51.100.2/24
  status:
    phase: Failed
kind: List
`},
		{"json list", []string{extIPYAML}, PrintOptions{Output: OutputJSON}, `
{
    "apiVersion": "pivirt.hu/v1",
    "kind": "List",
    "items": [
        {
            "kind": "ExternalIP",
            "metadata": {
                "creationTimestamp": "2026-12-02T16:55:00Z",
                "name": "web-01-public"
            },
            "spec": {
                "address": "203.0.113.10",
                "interface": "uplink0",
                "target": "192.168.100.10"
            },
            "status": {
                "phase": "Ready"
            }
        }
    ]
}
`},
		{"empty yaml list", nil, PrintOptions{Output: OutputYAML}, `
apiVersion: pivirt.hu/v1
items: []
kind: List
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := []Item{}
			for _, d := range tc.docs {
				items = append(items, item(t, d))
			}
			tc.opts.Now = testNow
			var buf bytes.Buffer
			if err := PrintList(&buf, items, tc.opts); err != nil {
				t.Fatal(err)
			}
			want := strings.TrimPrefix(tc.want, "\n")
			if buf.String() != want {
				t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
			}
		})
	}
}

func TestPrintObject(t *testing.T) {
	it := item(t, segNoDHCPYAML)
	for _, tc := range []struct {
		output, want string
	}{
		{OutputYAML, `kind: NetworkSegment
metadata:
  creationTimestamp: "2026-12-02T16:55:00Z"
  name: dark
spec:
  bridge: br9
  dhcp:
    dnsServers: []
    enabled: false
  hostIP: 10.9.0.1/24
  networkRef: net-dark
`},
		{OutputJSON, `{
    "kind": "NetworkSegment",
    "metadata": {
        "creationTimestamp": "2026-12-02T16:55:00Z",
        "name": "dark"
    },
    "spec": {
        "bridge": "br9",
        "dhcp": {
            "dnsServers": [],
            "enabled": false
        },
        "hostIP": "10.9.0.1/24",
        "networkRef": "net-dark"
    }
}
`},
		{OutputName, "networksegment/dark\n"},
		{OutputTable, `NAME   BRIDGE   HOSTIP        RANGE    DHCP    PHASE    AGE
dark   br9      10.9.0.1/24   <none>   false   <none>   5m
`},
	} {
		t.Run("o="+tc.output, func(t *testing.T) {
			var buf bytes.Buffer
			if err := PrintObject(&buf, it, PrintOptions{Output: tc.output, Now: testNow}); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", buf.String(), tc.want)
			}
		})
	}
}

// TestDecodeName: a names_only document (store.NameOnly) gives the item
// -o name prints, a name with characters JSON escapes included; one
// without a kind or name is an error.
func TestDecodeName(t *testing.T) {
	for _, tc := range []struct {
		raw, want, err string
	}{
		{string(store.NameOnly("DHCPLease", "lease-52-54-00-00-00-01", 42)), "dhcplease/lease-52-54-00-00-00-01 42", ""},
		{string(store.NameOnly("NetworkSegment", `odd"name`, 7)), `networksegment/odd"name 7`, ""},
		{`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{}}`, "", "no kind or name"},
		{`not json`, "", "no kind or name"},
	} {
		it, err := decodeName([]byte(tc.raw))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("decodeName(%s) = %v, want an error saying %q", tc.raw, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("decodeName(%s): %v", tc.raw, err)
		}
		if got := kindLower(it.Obj.Kind) + "/" + it.Obj.Metadata.Name + " " + it.Obj.Metadata.ResourceVersion; got != tc.want {
			t.Errorf("decodeName(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
