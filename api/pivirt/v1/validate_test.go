// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// del removes a key in with().
var del = &struct{}{}

// with returns a deep copy of base with each "a.b.c" path set to its value
// (or removed when the value is del).
func with(base map[string]any, kv ...any) map[string]any {
	b, _ := json.Marshal(base)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	for i := 0; i < len(kv); i += 2 {
		parts := strings.Split(kv[i].(string), ".")
		cur := m
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		if kv[i+1] == del {
			delete(cur, parts[len(parts)-1])
		} else {
			cur[parts[len(parts)-1]] = kv[i+1]
		}
	}
	return m
}

func obj(kind string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": APIVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": "x"},
		"spec":       spec,
	}
}

var (
	goodSegment = obj(KindNetworkSegment, map[string]any{
		"networkRef": "vm-net", "bridge": "br-vm", "hostIP": "192.168.100.1/24",
		"dhcp": map[string]any{"delegatedRangeStart": "192.168.100.100", "delegatedRangeEnd": "192.168.100.199"},
	})
	goodLease = obj(KindDHCPLease, map[string]any{
		"network": "br-vm", "macAddress": "52:54:00:12:34:56", "ipAddress": "192.168.100.150", "hostname": "web-01",
	})
	goodPortSec = obj(KindPortSecurity, map[string]any{
		"interface": "tap-web01-0", "macAddress": "52:54:00:12:34:56", "ipAddresses": []any{"192.168.100.10"},
		"acl": map[string]any{"ingress": []any{map[string]any{"action": "allow", "protocol": "tcp", "ports": []any{"22", "8000-8080"}, "cidrs": []any{"10.0.0.0/8"}}}},
	})
	goodExtIP = obj(KindExternalIP, map[string]any{
		"address": "203.0.113.10", "interface": "uplink0", "target": "192.168.100.10",
	})
	goodRouter = obj(KindVPCRouter, map[string]any{
		"inside": map[string]any{"bridge": "vpcbr-a", "ip": "10.10.0.1/24"},
		"uplink": map[string]any{"bridge": "br-ext", "ip": "198.51.100.2/24", "gateway": "198.51.100.1"},
	})
	goodOverlay = obj(KindOverlayNetwork, map[string]any{"vni": 4242})
	goodRouted  = obj(KindNetwork, map[string]any{"type": "routed", "uplink": "eth1", "cidr": "10.90.0.0/24"})
	goodBridged = obj(KindNetwork, map[string]any{"type": "bridge", "uplink": "eth1"})
	rule        = func(kv ...any) []any {
		return []any{with(map[string]any{"action": "allow", "protocol": "tcp"}, kv...)}
	}
	fwd = func(kv ...any) []any {
		return []any{with(map[string]any{"protocol": "tcp", "port": 443}, kv...)}
	}
)

func toObject(t *testing.T, m map[string]any) *Object {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	o, err := DecodeObject(b)
	if err != nil {
		t.Fatalf("DecodeObject: %v", err)
	}
	return o
}

func TestValidateObjectGood(t *testing.T) {
	for _, m := range []map[string]any{goodSegment, goodLease, goodPortSec, goodExtIP, goodRouter, goodRouted, goodBridged,
		with(goodBridged, "spec.uplink", del, "kind", "bridge"), // an isolated bridge, by seed 002's alias
		with(goodRouted, "spec.gateway", "10.90.0.254", "spec.mtu", 9000),
		with(goodRouted, "spec.type", "nat"),
		with(goodLease, "kind", "leases", "metadata.labels", map[string]any{"app": "web", "example.com/tier": ""}),
		with(goodExtIP, "spec.mode", "portForward", "spec.ports", fwd()),
		with(goodSegment, "spec.hostIP", "10.0.0.1/31", "spec.dhcp", map[string]any{"enabled": false}),
		with(goodLease, "spec.hostname", "web-01.local"),     // seed 000: a dotted host name
		with(goodLease, "spec.type", "dynamic"),              // seed 000: expiresAt is optional
		with(goodSegment, "spec.overlay", "cluster-overlay"), // seed 003: a name, Pending until realized
	} {
		if err := ValidateObject(toObject(t, m)); err != nil {
			t.Errorf("%v: %v", m["kind"], err)
		}
	}
}

// TestValidateObjectBad has one bad input per rule, each with the exact
// error it must produce (and no other).
func TestValidateObjectBad(t *testing.T) {
	long := strings.Repeat("a", 254)
	tests := []struct {
		name string
		obj  map[string]any
		want string
	}{
		// envelope and metadata
		{"apiVersion wrong", with(goodSegment, "apiVersion", "pivirt.hu/v2"), "apiVersion: pivirt.hu/v2 is not supported (want pivirt.hu/v1)"},
		{"apiVersion missing", with(goodSegment, "apiVersion", del), "apiVersion: required (want pivirt.hu/v1)"},
		{"kind unknown", with(goodSegment, "kind", "Switch"), "kind: Switch is not a known kind (one of Network, OverlayNetwork, NetworkSegment, DHCPLease, PortSecurity, ExternalIP, VPCRouter)"},
		{"kind missing", with(goodSegment, "kind", del), "kind: required (one of Network, OverlayNetwork, NetworkSegment, DHCPLease, PortSecurity, ExternalIP, VPCRouter)"},
		{"name missing", with(goodSegment, "metadata.name", del), "metadata.name: required"},
		{"name upper", with(goodSegment, "metadata.name", "Web_01"), "metadata.name: Web_01 is not a DNS-1123 subdomain (at most 253 lowercase alphanumerics, '-' or '.', starting and ending alphanumeric)"},
		{"name too long", with(goodSegment, "metadata.name", long), "metadata.name: " + long + " is not a DNS-1123 subdomain (at most 253 lowercase alphanumerics, '-' or '.', starting and ending alphanumeric)"},
		{"name trailing dash", with(goodSegment, "metadata.name", "vm-net-"), "metadata.name: vm-net- is not a DNS-1123 subdomain (at most 253 lowercase alphanumerics, '-' or '.', starting and ending alphanumeric)"},
		{"label key space", with(goodSegment, "metadata.labels", map[string]any{"bad key": "v"}), `metadata.labels: "bad key" is not a valid key: the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric`},
		{"label key prefix", with(goodSegment, "metadata.labels", map[string]any{"Example.com/app": "v"}), "metadata.labels: Example.com/app is not a valid key: the prefix must be a DNS-1123 subdomain"},
		{"label key two slashes", with(goodSegment, "metadata.labels", map[string]any{"a.b/c/d": "v"}), "metadata.labels: a.b/c/d is not a valid key: at most one '/'"},
		{"label value", with(goodSegment, "metadata.labels", map[string]any{"app": "-web"}), "metadata.labels[app]: -web is not a valid label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"},
		{"label value long", with(goodSegment, "metadata.labels", map[string]any{"app": strings.Repeat("w", 64)}), "metadata.labels[app]: " + strings.Repeat("w", 64) + " is not a valid label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"},
		{"annotation key", with(goodSegment, "metadata.annotations", map[string]any{"_x": "anything at all"}), "metadata.annotations: _x is not a valid key: the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"},
		{"annotations too big", with(goodSegment, "metadata.annotations", map[string]any{"big": strings.Repeat("x", 256*1024)}), "metadata.annotations: are 262147 bytes, more than the 262144 allowed"},
		{"owner without name", with(goodLease, "metadata.ownerReferences", []any{map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "NetworkSegment"}}), "metadata.ownerReferences[0].name: required"},
		{"owner bad kind", with(goodLease, "metadata.ownerReferences", []any{map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "net-seg", "name": "a"}}), "metadata.ownerReferences[0].kind: net-seg is not a kind name"},
		{"owner is itself", with(goodLease, "metadata.ownerReferences", []any{map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "lease", "name": "x"}}), "metadata.ownerReferences[0]: lease/x is the object itself"},
		{"spec missing", with(goodSegment, "spec", del), "spec: required"},
		{"unknown field", with(goodSegment, "spec.foo", 1), "spec.foo: unknown field"},
		{"unknown nested field", with(goodSegment, "spec.dhcp.rangeStart", "192.168.100.10"), "spec.dhcp.rangeStart: unknown field"},
		{"unknown field in list", with(goodPortSec, "spec.acl.ingress", rule("port", 22)), "spec.acl.ingress[0].port: unknown field"},
		{"field case", with(goodLease, "spec.macaddress", "52:54:00:12:34:57"), "spec.macaddress: unknown field (did you mean macAddress?)"},
		{"wrong type", with(goodSegment, "spec.dhcp.mtu", "1500"), `spec.dhcp.mtu: "1500" must be an integer`},
		{"wrong type bool", with(goodSegment, "spec.dhcp.enabled", "yes"), `spec.dhcp.enabled: "yes" must be true or false`},
		{"wrong type list", with(goodSegment, "spec.dhcp.dnsServers", "1.1.1.1"), `spec.dhcp.dnsServers: "1.1.1.1" must be a list`},
		{"bad time", with(goodLease, "spec.type", "dynamic", "spec.expiresAt", "tomorrow"), "spec.expiresAt: tomorrow is not an RFC 3339 time (want e.g. 2026-12-02T17:00:00Z)"},

		// NetworkSegment
		{"bridge missing", with(goodSegment, "spec.bridge", del), "spec.bridge: required"},
		{"bridge too long", with(goodSegment, "spec.bridge", "br-0123456789abc"), "spec.bridge: br-0123456789abc is longer than 15 characters (IFNAMSIZ)"},
		{"bridge slash", with(goodSegment, "spec.bridge", "br/vm"), "spec.bridge: br/vm is not a valid interface name (no '/', ':' or whitespace)"},
		{"bridge space", with(goodSegment, "spec.bridge", "br vm"), `spec.bridge: "br vm" is not a valid interface name (no '/', ':' or whitespace)`},
		{"bridge dot", with(goodSegment, "spec.bridge", ".."), "spec.bridge: .. is not a valid interface name"},
		{"networkRef", with(goodSegment, "spec.networkRef", "Net_A"), "spec.networkRef: Net_A is not a DNS-1123 subdomain (the name of a Network)"},
		{"networkRef missing (seed 003)", with(goodSegment, "spec.networkRef", del), "spec.networkRef: required"},
		{"overlay as an object", with(goodSegment, "spec.overlay", map[string]any{"type": "vxlan", "vni": 10}), `spec.overlay: {"type":"vxlan","vni":10} must be a string`},
		{"overlay name", with(goodSegment, "spec.overlay", "Bad_Overlay"), "spec.overlay: Bad_Overlay is not a DNS-1123 subdomain (the name of an OverlayNetwork)"},
		{"hostIP missing", with(goodSegment, "spec.hostIP", del), "spec.hostIP: required"},
		{"hostIP no prefix", with(goodSegment, "spec.hostIP", "192.168.100.1"), "spec.hostIP: 192.168.100.1 is not an IPv4 address with prefix length (want e.g. 192.168.100.1/24)"},
		{"hostIP v6", with(goodSegment, "spec.hostIP", "fd00::1/64"), "spec.hostIP: fd00::1/64 is not an IPv4 address with prefix length (want e.g. 192.168.100.1/24)"},
		{"hostIP network", with(goodSegment, "spec.hostIP", "192.168.100.0/24"), "spec.hostIP: 192.168.100.0/24 is the network address of 192.168.100.0/24, not a host address"},
		{"hostIP broadcast", with(goodSegment, "spec.hostIP", "192.168.100.255/24"), "spec.hostIP: 192.168.100.255/24 is the broadcast address of 192.168.100.0/24, not a host address"},
		{"hostIP loopback", with(goodSegment, "spec.hostIP", "127.0.0.1/8"), "spec.hostIP: 127.0.0.1/8 is a loopback address"},
		{"range start bad", with(goodSegment, "spec.dhcp.delegatedRangeStart", "192.168.100"), "spec.dhcp.delegatedRangeStart: 192.168.100 is not an IPv4 address"},
		{"range end missing", with(goodSegment, "spec.dhcp.delegatedRangeEnd", del), "spec.dhcp.delegatedRangeEnd: required while dhcp.enabled is true (the end of this node's delegated range)"},
		{"range start missing", with(goodSegment, "spec.dhcp.delegatedRangeStart", del), "spec.dhcp.delegatedRangeStart: required while dhcp.enabled is true (the start of this node's delegated range)"},
		{"range end missing with DHCP off", with(goodSegment, "spec.dhcp.delegatedRangeEnd", del, "spec.dhcp.enabled", false), "spec.dhcp.delegatedRangeEnd: required when delegatedRangeStart is set"},
		{"range reversed", with(goodSegment, "spec.dhcp.delegatedRangeStart", "192.168.100.200"), "spec.dhcp.delegatedRangeStart: 192.168.100.200 is after delegatedRangeEnd 192.168.100.199"},
		{"range end outside", with(goodSegment, "spec.dhcp.delegatedRangeEnd", "192.168.101.5"), "spec.dhcp.delegatedRangeEnd: 192.168.101.5 is outside hostIP subnet 192.168.100.0/24"},
		{"range start outside", with(goodSegment, "spec.dhcp.delegatedRangeStart", "192.168.99.5"), "spec.dhcp.delegatedRangeStart: 192.168.99.5 is outside hostIP subnet 192.168.100.0/24"},
		{"range holds host", with(goodSegment, "spec.hostIP", "192.168.100.150/24"), "spec.dhcp: 192.168.100.100-192.168.100.199 contains the host IP 192.168.100.150"},
		{"range holds network", with(goodSegment, "spec.hostIP", "192.168.100.254/24", "spec.dhcp.delegatedRangeStart", "192.168.100.0"), "spec.dhcp: 192.168.100.0-192.168.100.199 contains the network address 192.168.100.0"},
		{"range holds broadcast", with(goodSegment, "spec.dhcp.delegatedRangeEnd", "192.168.100.255"), "spec.dhcp: 192.168.100.100-192.168.100.255 contains the broadcast address 192.168.100.255"},
		{"lease time negative", with(goodSegment, "spec.dhcp.defaultLeaseTime", -1), "spec.dhcp.defaultLeaseTime: -1 must be a positive number of seconds (a lease of 0 s would expire as it is granted)"},
		{"lease time zero (seed 003: not a silent default)", with(goodSegment, "spec.dhcp.defaultLeaseTime", 0), "spec.dhcp.defaultLeaseTime: 0 must be a positive number of seconds (a lease of 0 s would expire as it is granted)"},
		{"decline negative", with(goodSegment, "spec.dhcp.declineProbation", -5), "spec.dhcp.declineProbation: -5 must not be negative (seconds)"},
		{"dns bad", with(goodSegment, "spec.dhcp.dnsServers", []any{"1.1.1.1", "dns.example"}), "spec.dhcp.dnsServers[1]: dns.example is not an IPv4 address"},
		{"dns multicast", with(goodSegment, "spec.dhcp.dnsServers", []any{"224.0.0.1"}), "spec.dhcp.dnsServers[0]: 224.0.0.1 is a multicast address"},
		{"domain", with(goodSegment, "spec.dhcp.domainName", "lab_example"), "spec.dhcp.domainName: lab_example is not a valid domain name"},
		{"domain search", with(goodSegment, "spec.dhcp.domainSearch", []any{"a..b"}), "spec.dhcp.domainSearch[0]: a..b is not a valid domain name"},
		{"mtu low", with(goodSegment, "spec.dhcp.mtu", 67), "spec.dhcp.mtu: 67 is outside 68-65535"},
		{"mtu high", with(goodSegment, "spec.dhcp.mtu", 65536), "spec.dhcp.mtu: 65536 is outside 68-65535"},
		{"route host bits", with(goodSegment, "spec.dhcp.routes", []any{map[string]any{"destination": "10.0.0.1/8", "gateway": "192.168.100.1"}}), "spec.dhcp.routes[0].destination: 10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)"},
		{"route no gateway", with(goodSegment, "spec.dhcp.routes", []any{map[string]any{"destination": "10.0.0.0/8"}}), "spec.dhcp.routes[0].gateway: required"},
		{"route gateway outside", with(goodSegment, "spec.dhcp.routes", []any{map[string]any{"destination": "10.0.0.0/8", "gateway": "192.168.1.1"}}), "spec.dhcp.routes[0].gateway: 192.168.1.1 is outside hostIP subnet 192.168.100.0/24"},

		// DHCPLease
		{"network missing", with(goodLease, "spec.network", del), "spec.network: required"},
		{"network bad", with(goodLease, "spec.network", "br vm"), `spec.network: "br vm" is neither a bridge name nor a networkRef (DNS-1123 subdomain)`},
		{"mac missing", with(goodLease, "spec.macAddress", del), "spec.macAddress: required"},
		{"mac garbage", with(goodLease, "spec.macAddress", "52:54:00:12:34"), "spec.macAddress: 52:54:00:12:34 is not a MAC address (want e.g. 52:54:00:12:34:56)"},
		{"mac eui64", with(goodLease, "spec.macAddress", "52:54:00:12:34:56:78:9a"), "spec.macAddress: 52:54:00:12:34:56:78:9a is not a 48-bit MAC address"},
		{"mac zero", with(goodLease, "spec.macAddress", "00:00:00:00:00:00"), "spec.macAddress: 00:00:00:00:00:00 is the all-zero MAC address"},
		{"mac multicast", with(goodLease, "spec.macAddress", "01:00:5e:00:00:01"), "spec.macAddress: 01:00:5e:00:00:01 is a multicast MAC address, not unicast"},
		{"mac broadcast", with(goodLease, "spec.macAddress", "ff:ff:ff:ff:ff:ff"), "spec.macAddress: ff:ff:ff:ff:ff:ff is a multicast MAC address, not unicast"},
		{"ip missing", with(goodLease, "spec.ipAddress", del), "spec.ipAddress: required"},
		{"ip bad", with(goodLease, "spec.ipAddress", "192.168.100.256"), "spec.ipAddress: 192.168.100.256 is not an IPv4 address"},
		{"ip leading zero", with(goodLease, "spec.ipAddress", "192.168.100.050"), "spec.ipAddress: 192.168.100.050 is not an IPv4 address"},
		{"ip v6", with(goodLease, "spec.ipAddress", "fd00::5"), "spec.ipAddress: fd00::5 is not an IPv4 address"},
		{"ip zero", with(goodLease, "spec.ipAddress", "0.0.0.0"), "spec.ipAddress: 0.0.0.0 is the unspecified address"},
		{"ip broadcast", with(goodLease, "spec.ipAddress", "255.255.255.255"), "spec.ipAddress: 255.255.255.255 is a reserved (class E or broadcast) address"},
		{"hostname", with(goodLease, "spec.hostname", "web_01"), "spec.hostname: web_01 is not an RFC 1123 host name (dot-separated labels of letters, digits or '-', each at most 63 and starting and ending with a letter or digit; at most 253 in all)"},
		{"hostname with an empty label", with(goodLease, "spec.hostname", "web-01..lab"), "spec.hostname: web-01..lab is not an RFC 1123 host name (dot-separated labels of letters, digits or '-', each at most 63 and starting and ending with a letter or digit; at most 253 in all)"},
		{"type", with(goodLease, "spec.type", "reserved"), "spec.type: reserved is not one of static, dynamic"},
		{"static with expiry", with(goodLease, "spec.expiresAt", "2026-12-03T10:00:00Z"), "spec.expiresAt: 2026-12-03T10:00:00Z is set, but a static lease never expires (only dynamic leases have expiresAt)"},
		{"lease time", with(goodLease, "spec.leaseTime", -3600), "spec.leaseTime: -3600 must not be negative (seconds)"},
		{"client id", with(goodLease, "spec.clientID", "zz:01"), "spec.clientID: zz:01 is not hex (want e.g. 01:52:54:00:12:34:56)"},
		{"client id short", with(goodLease, "spec.clientID", "01"), "spec.clientID: 01 must be 2 to 255 bytes (DHCP option 61)"},

		// PortSecurity
		{"no port", with(goodPortSec, "spec.interface", del), "spec.interface: required (or spec.vmRef)"},
		{"both ports", with(goodPortSec, "spec.vmRef", map[string]any{"name": "web-01", "nic": 0}), "spec.vmRef: must not be set together with spec.interface"},
		{"interface long", with(goodPortSec, "spec.interface", "tap-web01-nic0-x"), "spec.interface: tap-web01-nic0-x is longer than 15 characters (IFNAMSIZ)"},
		{"vmRef name", with(goodPortSec, "spec.interface", del, "spec.vmRef", map[string]any{"name": "Web 01"}), `spec.vmRef.name: "Web 01" is not a DNS-1123 subdomain`},
		{"vmRef nic", with(goodPortSec, "spec.interface", del, "spec.vmRef", map[string]any{"name": "web-01", "nic": -1}), "spec.vmRef.nic: -1 must not be negative"},
		{"ps mac", with(goodPortSec, "spec.macAddress", "03:00:00:00:00:01"), "spec.macAddress: 03:00:00:00:00:01 is a multicast MAC address, not unicast"},
		{"ps mac missing", with(goodPortSec, "spec.macAddress", del), "spec.macAddress: required"},
		{"ps ip", with(goodPortSec, "spec.ipAddresses", []any{"192.168.100.10/24"}), "spec.ipAddresses[0]: 192.168.100.10/24 is not an IPv4 address"},
		{"ps ip twice", with(goodPortSec, "spec.ipAddresses", []any{"192.168.100.10", "192.168.100.10"}), "spec.ipAddresses[1]: 192.168.100.10 is listed twice"},
		{"ps ipv6", with(goodPortSec, "spec.ipv6Addresses", []any{"192.168.1.1"}), "spec.ipv6Addresses[0]: 192.168.1.1 is not an IPv6 address"},
		{"pair cidr", with(goodPortSec, "spec.allowedAddressPairs", []any{map[string]any{"ipAddress": "192.168.100.200/33"}}), "spec.allowedAddressPairs[0].ipAddress: 192.168.100.200/33 is not an IPv4 CIDR (want e.g. 10.0.0.0/8)"},
		{"pair host bits", with(goodPortSec, "spec.allowedAddressPairs", []any{map[string]any{"ipAddress": "192.168.100.200/24"}}), "spec.allowedAddressPairs[0].ipAddress: 192.168.100.200/24 has host bits set (did you mean 192.168.100.0/24?)"},
		{"pair mac", with(goodPortSec, "spec.allowedAddressPairs", []any{map[string]any{"ipAddress": "192.168.100.200", "macAddress": "nope"}}), "spec.allowedAddressPairs[0].macAddress: nope is not a MAC address (want e.g. 52:54:00:12:34:56)"},
		{"acl action", with(goodPortSec, "spec.acl.ingress", rule("action", "accept")), "spec.acl.ingress[0].action: accept is not one of allow, deny"},
		{"acl action missing", with(goodPortSec, "spec.acl.egress", rule("action", del)), "spec.acl.egress[0].action: required (one of allow, deny)"},
		{"acl protocol", with(goodPortSec, "spec.acl.ingress", rule("protocol", "sctp")), "spec.acl.ingress[0].protocol: sctp is not one of tcp, udp, icmp, any"},
		{"acl port zero", with(goodPortSec, "spec.acl.ingress", rule("ports", []any{"0"})), "spec.acl.ingress[0].ports[0]: 0 is out of range 1-65535"},
		{"acl port high", with(goodPortSec, "spec.acl.ingress", rule("ports", []any{"8000-65536"})), "spec.acl.ingress[0].ports[0]: 8000-65536 is out of range 1-65535"},
		{"acl port reversed", with(goodPortSec, "spec.acl.ingress", rule("ports", []any{"8080-8000"})), "spec.acl.ingress[0].ports[0]: 8080-8000 starts after it ends"},
		{"acl port syntax", with(goodPortSec, "spec.acl.ingress", rule("ports", []any{"ssh"})), "spec.acl.ingress[0].ports[0]: ssh is not a port or port range (want e.g. 22 or 8000-8080)"},
		{"acl ports icmp", with(goodPortSec, "spec.acl.ingress", rule("protocol", "icmp", "ports", []any{"22"})), "spec.acl.ingress[0].ports: apply only to protocol tcp or udp, not icmp"},
		{"acl ports any", with(goodPortSec, "spec.acl.egress", rule("protocol", del, "ports", []any{"53"})), "spec.acl.egress[0].ports: apply only to protocol tcp or udp, not any"},
		{"acl too many match entries", with(goodPortSec, "spec.acl.ingress", rule("cidrs", manyCIDRs(33), "ports", manyPorts(32))),
			"spec.acl.ingress: 1056 match entries exceeds 1024: a rule takes one per CIDR and port range (use wider CIDRs or port ranges)"},
		{"acl cidr", with(goodPortSec, "spec.acl.ingress", rule("cidrs", []any{"10.0.0.0"})), "spec.acl.ingress[0].cidrs[0]: 10.0.0.0 is not an IPv4 CIDR (want e.g. 10.0.0.0/8)"},
		{"acl default", with(goodPortSec, "spec.acl.defaultIngress", "drop"), "spec.acl.defaultIngress: drop is not one of allow, deny"},
		{"acl default egress", with(goodPortSec, "spec.acl.defaultEgress", "reject"), "spec.acl.defaultEgress: reject is not one of allow, deny"},

		// ExternalIP
		{"address missing", with(goodExtIP, "spec.address", del), "spec.address: required"},
		{"address bad", with(goodExtIP, "spec.address", "203.0.113.300"), "spec.address: 203.0.113.300 is not an IPv4 address"},
		{"target bad", with(goodExtIP, "spec.target", "web-01"), "spec.target: web-01 is not an IPv4 address"},
		{"target self", with(goodExtIP, "spec.target", "203.0.113.10"), "spec.target: 203.0.113.10 is the external address itself"},
		{"neither interface nor router", with(goodExtIP, "spec.interface", del), "spec.interface: required (or spec.router)"},
		{"interface and router", with(goodExtIP, "spec.router", "vpc-a"), "spec.router: must not be set together with spec.interface"},
		{"router name", with(goodExtIP, "spec.interface", del, "spec.router", "VPC_A"), "spec.router: VPC_A is not a VPCRouter name (DNS-1123 subdomain)"},
		{"mode", with(goodExtIP, "spec.mode", "nat"), "spec.mode: nat is not one of oneToOne, portForward"},
		{"oneToOne with ports", with(goodExtIP, "spec.ports", fwd()), "spec.ports: must be empty in mode oneToOne (only a portForward lists ports)"},
		{"portForward without ports", with(goodExtIP, "spec.mode", "portForward"), "spec.ports: required: a portForward needs at least one port"},
		{"port zero", with(goodExtIP, "spec.mode", "portForward", "spec.ports", fwd("port", 0, "targetPort", 80)), "spec.ports[0].port: 0 is out of range 1-65535"},
		{"port high", with(goodExtIP, "spec.mode", "portForward", "spec.ports", fwd("port", 65536, "targetPort", 80)), "spec.ports[0].port: 65536 is out of range 1-65535"},
		{"target port high", with(goodExtIP, "spec.mode", "portForward", "spec.ports", fwd("targetPort", 70000)), "spec.ports[0].targetPort: 70000 is out of range 1-65535"},
		{"forward protocol", with(goodExtIP, "spec.mode", "portForward", "spec.ports", fwd("protocol", "icmp")), "spec.ports[0].protocol: icmp is not one of tcp, udp"},
		{"forward twice", with(goodExtIP, "spec.mode", "portForward", "spec.ports", append(fwd(), fwd("targetPort", 8443)...)), "spec.ports[1]: tcp/443 is listed twice"},

		// VPCRouter
		{"inside bridge", with(goodRouter, "spec.inside.bridge", "vpc:br"), "spec.inside.bridge: vpc:br is not a valid interface name (no '/', ':' or whitespace)"},
		{"uplink bridge missing", with(goodRouter, "spec.uplink.bridge", del), "spec.uplink.bridge: required"},
		{"same bridge", with(goodRouter, "spec.uplink.bridge", "vpcbr-a"), "spec.uplink.bridge: vpcbr-a is also the inside bridge"},
		{"inside ip no host", with(goodRouter, "spec.inside.ip", "10.10.0.0/24"), "spec.inside.ip: 10.10.0.0/24 is the network address of 10.10.0.0/24, not a host address"},
		{"uplink ip bare", with(goodRouter, "spec.uplink.ip", "198.51.100.2"), "spec.uplink.ip: 198.51.100.2 is not an IPv4 address with prefix length (want e.g. 192.168.100.1/24)"},
		{"inside gateway", with(goodRouter, "spec.inside.gateway", "10.10.0.254"), "spec.inside.gateway: 10.10.0.254 is not allowed: only the uplink has a gateway"},
		{"gateway outside", with(goodRouter, "spec.uplink.gateway", "198.51.101.1"), "spec.uplink.gateway: 198.51.101.1 is outside uplink subnet 198.51.100.0/24"},
		{"gateway self", with(goodRouter, "spec.uplink.gateway", "198.51.100.2"), "spec.uplink.gateway: 198.51.100.2 is the uplink's own address"},
		// OverlayNetwork
		{"overlay type", with(goodOverlay, "spec.type", "gre"), "spec.type: gre is not one of vxlan, geneve"},
		{"overlay vni missing", with(goodOverlay, "spec.vni", del), "spec.vni: 0 is out of range 1-16777215 (required: the 24-bit network identifier)"},
		{"overlay vni too big", with(goodOverlay, "spec.vni", 16777216), "spec.vni: 16777216 is out of range 1-16777215 (required: the 24-bit network identifier)"},
		{"overlay mtu", with(goodOverlay, "spec.mtu", 67), "spec.mtu: 67 is outside 68-65535"},
		{"overlay port", with(goodOverlay, "spec.port", 70000), "spec.port: 70000 is out of range 1-65535"},
		// Network
		{"network type missing", with(goodRouted, "spec.type", del), "spec.type: required"},
		{"network type unknown", with(goodRouted, "spec.type", "macvlan"), "spec.type: macvlan must be one of bridge, routed, nat"},
		{"network bridge name", with(goodRouted, "spec.bridge", "a-very-long-bridge-name"), "spec.bridge: a-very-long-bridge-name is longer than 15 characters (IFNAMSIZ)"},
		{"network uplink is bridge", with(goodRouted, "spec.bridge", "eth1"), "spec.uplink: eth1 is also the bridge"},
		{"network routed uplink missing", with(goodRouted, "spec.uplink", del), "spec.uplink: required for a routed network: the way out of its cidr"},
		{"network routed cidr missing", with(goodRouted, "spec.cidr", del), "spec.cidr: required"},
		{"network cidr host bits", with(goodRouted, "spec.cidr", "10.90.0.1/24"), "spec.cidr: 10.90.0.1/24 has host bits set (did you mean 10.90.0.0/24?)"},
		{"network cidr too small", with(goodRouted, "spec.cidr", "10.90.0.0/31"), "spec.cidr: 10.90.0.0/31 leaves no room for a gateway and a guest (at most /30)"},
		{"network gateway outside", with(goodRouted, "spec.gateway", "10.91.0.1"), "spec.gateway: 10.91.0.1 is outside cidr 10.90.0.0/24"},
		{"network gateway broadcast", with(goodRouted, "spec.gateway", "10.90.0.255"), "spec.gateway: 10.90.0.255 is the network or broadcast address of 10.90.0.0/24"},
		{"network bridge with cidr", with(goodBridged, "spec.cidr", "10.90.0.0/24"), "spec.cidr: 10.90.0.0/24 is for routed and nat networks: a bridge network carries its uplink's own LAN"},
		{"network vlans routed", with(goodRouted, "spec.vlans", []any{10, 20}), "spec.vlans: 10 are for type bridge only: a routed network routes one cidr"},
		{"network vlans no uplink", with(goodBridged, "spec.uplink", del, "spec.vlans", []any{10}), "spec.uplink: required for a trunk (spec.vlans): the device that carries its VLANs tagged"},
		{"network vlan zero", with(goodBridged, "spec.vlans", []any{10, 0}), "spec.vlans[1]: 0 is out of range 1-4094"},
		{"network vlan 4095", with(goodBridged, "spec.vlans", []any{4095}), "spec.vlans[0]: 4095 is out of range 1-4094"},
		{"network vlan twice", with(goodBridged, "spec.vlans", []any{10, 20, 10}), "spec.vlans[2]: 10 is listed twice"},
		{"segment vlan", with(goodSegment, "spec.vlan", 4095), "spec.vlan: 4095 is out of range 1-4094"},
		{"portsecurity vlan", with(goodPortSec, "spec.vlan", -1), "spec.vlan: -1 is out of range 1-4094"},
		{"network mtu", with(goodBridged, "spec.mtu", 67), "spec.mtu: 67 is outside 68-65535 (0 leaves the kernel's)"},
		{"subnets overlap", with(goodRouter, "spec.uplink", map[string]any{"bridge": "br-ext", "ip": "10.10.0.2/16", "gateway": "10.10.255.254"}), "spec.uplink.ip: 10.10.0.2/16 overlaps inside subnet 10.10.0.0/24"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := toObject(t, tc.obj)
			before, _ := json.Marshal(o)
			err := ValidateObject(o)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateObject = %v, want a *ValidationError", err)
			}
			var got []string
			for _, fe := range ve.Errors {
				got = append(got, fe.Error())
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if after, _ := json.Marshal(o); string(after) != string(before) {
				t.Errorf("ValidateObject changed its argument")
			}
		})
	}
}

func TestPrepareObjectDefaults(t *testing.T) {
	tests := []struct {
		name string
		obj  map[string]any
		want string // the defaulted spec as JSON
	}{
		{"segment", goodSegment, `{"bridge":"br-vm","networkRef":"vm-net","hostIP":"192.168.100.1/24","dhcp":{"enabled":true,"delegatedRangeStart":"192.168.100.100","delegatedRangeEnd":"192.168.100.199","defaultLeaseTime":86400,"dnsServers":[],"declineProbation":86400}}`},
		{"segment dhcp off", with(goodSegment, "spec.dhcp.enabled", false, "spec.dhcp.defaultLeaseTime", 600), `{"bridge":"br-vm","networkRef":"vm-net","hostIP":"192.168.100.1/24","dhcp":{"enabled":false,"delegatedRangeStart":"192.168.100.100","delegatedRangeEnd":"192.168.100.199","defaultLeaseTime":600,"dnsServers":[],"declineProbation":86400}}`},
		{"lease", goodLease, `{"network":"br-vm","macAddress":"52:54:00:12:34:56","ipAddress":"192.168.100.150","hostname":"web-01","type":"static"}`},
		{"portsecurity ingress rules", goodPortSec, `{"interface":"tap-web01-0","macAddress":"52:54:00:12:34:56","ipAddresses":["192.168.100.10"],"learnFromDHCP":true,"dhcpGuard":true,"arpGuard":true,"raGuard":true,"acl":{"stateful":true,"ingress":[{"action":"allow","protocol":"tcp","ports":["22","8000-8080"],"cidrs":["10.0.0.0/8"]}],"defaultIngress":"deny","defaultEgress":"allow"}}`},
		{"portsecurity egress only", with(goodPortSec, "spec.acl", map[string]any{"egress": []any{map[string]any{"action": "deny", "cidrs": []any{"10.0.0.0/8"}}}}, "spec.dhcpGuard", false), `{"interface":"tap-web01-0","macAddress":"52:54:00:12:34:56","ipAddresses":["192.168.100.10"],"learnFromDHCP":true,"dhcpGuard":false,"arpGuard":true,"raGuard":true,"acl":{"stateful":true,"egress":[{"action":"deny","protocol":"any","cidrs":["10.0.0.0/8"]}],"defaultIngress":"allow","defaultEgress":"allow"}}`},
		{"portsecurity no acl", with(goodPortSec, "spec.acl", del), `{"interface":"tap-web01-0","macAddress":"52:54:00:12:34:56","ipAddresses":["192.168.100.10"],"learnFromDHCP":true,"dhcpGuard":true,"arpGuard":true,"raGuard":true}`},
		{"externalip", goodExtIP, `{"address":"203.0.113.10","interface":"uplink0","target":"192.168.100.10","mode":"oneToOne"}`},
		{"externalip forward", with(goodExtIP, "spec.mode", "portForward", "spec.ports", append(fwd(), fwd("protocol", "udp", "port", 53, "targetPort", 5353)...)), `{"address":"203.0.113.10","interface":"uplink0","target":"192.168.100.10","mode":"portForward","ports":[{"protocol":"tcp","port":443,"targetPort":443},{"protocol":"udp","port":53,"targetPort":5353}]}`},
		{"overlay", goodOverlay, `{"type":"vxlan","vni":4242,"mtu":1450,"port":4789}`},
		{"overlay geneve", with(goodOverlay, "spec.type", "geneve", "spec.mtu", 1400, "spec.port", 6081), `{"type":"geneve","vni":4242,"mtu":1400,"port":6081}`},
		{"network routed", goodRouted, `{"type":"routed","bridge":"pvbr-x","uplink":"eth1","cidr":"10.90.0.0/24","gateway":"10.90.0.1"}`},
		{"network bridge long name", with(goodBridged, "metadata.name", "office-lan-uplink"), `{"type":"bridge","bridge":"pvbr-01a4e80ccf","uplink":"eth1"}`},
		{"vpcrouter", goodRouter, `{"inside":{"bridge":"vpcbr-a","ip":"10.10.0.1/24"},"uplink":{"bridge":"br-ext","ip":"198.51.100.2/24","gateway":"198.51.100.1"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := toObject(t, tc.obj)
			if _, _, err := PrepareObject(o); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(o.Spec)); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrepareObjectCanonicalKind(t *testing.T) {
	for _, alias := range []string{"DHCPLease", "dhcplease", "Leases", "LEASE"} {
		o := toObject(t, with(goodLease, "kind", alias))
		k, spec, err := PrepareObject(o)
		if err != nil {
			t.Fatalf("%s: %v", alias, err)
		}
		if o.Kind != KindDHCPLease || k.Kind != KindDHCPLease {
			t.Errorf("%s: kind = %q/%q, want %s", alias, o.Kind, k.Kind, KindDHCPLease)
		}
		if s, ok := spec.(*DHCPLeaseSpec); !ok || s.Type != LeaseStatic {
			t.Errorf("%s: spec = %#v, want a defaulted *DHCPLeaseSpec", alias, spec)
		}
	}
}

func TestDecodeObject(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown metadata field", "apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata:\n  name: a\n  lables: {app: web}\nspec: {}\n",
			`DHCPLease "a" is invalid: metadata.lables: unknown field`},
		{"unknown top field", "apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: a}\nspecs: {}\n",
			`DHCPLease "a" is invalid: specs: unknown field`},
		{"not an object", "- a\n- b\n", `manifest: ["a","b"] must be an object`},
		{"bad yaml", "a: [b\n", "parsing manifest: "},
		{"labels not strings", "apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata:\n  name: a\n  labels: {num: 1}\n",
			`DHCPLease "a" is invalid: metadata.labels[num]: 1 must be a string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeObject([]byte(tc.doc))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("DecodeObject = %v, want prefix %q", err, tc.want)
			}
		})
	}
	// An unquoted MAC in YAML stays a string.
	o, err := DecodeObject([]byte("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: a}\nspec: {network: br-vm, macAddress: 52:54:00:12:34:56, ipAddress: 192.168.100.150}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateObject(o); err != nil {
		t.Errorf("unquoted MAC: %v", err)
	}
}

func TestAddrHelpers(t *testing.T) {
	seg := &NetworkSegmentSpec{HostIP: "192.168.100.1/24", DHCP: DHCPSpec{DelegatedRangeStart: "192.168.100.100", DelegatedRangeEnd: "192.168.100.199"}}
	r, ok := seg.DelegatedRange()
	if !ok || r.String() != "192.168.100.100-192.168.100.199" {
		t.Fatalf("DelegatedRange = %v, %v", r, ok)
	}
	p, _ := seg.HostPrefix()
	if got := Broadcast(p).String(); got != "192.168.100.255" {
		t.Errorf("Broadcast = %s", got)
	}
	other := AddrRange{r.End, r.End.Next()}
	if !r.Overlaps(other) || r.Overlaps(AddrRange{other.End, other.End}) {
		t.Errorf("Overlaps wrong at the edges")
	}
	if got := CanonicalMAC("52-54-00-AB-CD-EF"); got != "52:54:00:ab:cd:ef" {
		t.Errorf("CanonicalMAC = %q", got)
	}
	if !IsReservedLabel("pivirt.hu/zone") || !IsReservedLabel("node.pivirt.hu/x") || IsReservedLabel("notpivirt.hu/x") || IsReservedLabel("app") {
		t.Errorf("IsReservedLabel wrong")
	}
}

func TestDecodeObjectJSON(t *testing.T) {
	o, err := DecodeObject([]byte(` {"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"a"},"spec":{"network":"br-vm","macAddress":"52:54:00:12:34:56","ipAddress":"192.168.100.150"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateObject(o); err != nil {
		t.Fatal(err)
	}
	_, err = DecodeObject([]byte(`{"apiVersion":"pivirt.hu/v1","kind":"DHCPLease","metadata":{"name":"a","uid":7}}`))
	if err == nil || !strings.Contains(err.Error(), "metadata.uid: 7 must be a string") {
		t.Errorf("DecodeObject = %v", err)
	}
}

// manyCIDRs is n distinct /16s, manyPorts n distinct ports: a rule of
// both takes their product of match entries.
func manyCIDRs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	return out
}

func manyPorts(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprint(1 + i)
	}
	return out
}
