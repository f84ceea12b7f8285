// SPDX-License-Identifier: Apache-2.0

package aclmap_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/aclmap"
)

func TestValueRoundTrip(t *testing.T) {
	es := []aclmap.Entry{
		{Action: guard.ACLAllow, Proto: aclmap.ProtoTCP, Peer: netip.MustParsePrefix("10.0.0.0/8"), PortMin: 22, PortMax: 22},
		{Action: guard.ACLDeny, Proto: aclmap.ProtoUDP, Peer: netip.MustParsePrefix("192.0.2.7/32"), PortMin: 8000, PortMax: 8080},
		{Action: guard.ACLAllow, Proto: aclmap.ProtoICMP, Peer: netip.MustParsePrefix("0.0.0.0/0"), PortMax: 0xffff},
		{Action: guard.ACLAllow, Proto: aclmap.ProtoAny, PortMax: 0xffff}, // any peer, both families
	}
	v, err := aclmap.NewValue(es, guard.ACLDeny, guard.ACLStateful, 0xabc)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Entries(); !slices.Equal(got, es) {
		t.Errorf("entries\n got %v\nwant %v", got, es)
	}
	want := "version=0x00000abc flags=stateful default=deny rules=[allow tcp 10.0.0.0/8 port 22; " +
		"deny udp 192.0.2.7/32 ports 8000-8080; allow icmp 0.0.0.0/0; allow any any]"
	if got := v.String(); got != want {
		t.Errorf("String\n got %s\nwant %s", got, want)
	}
	if got := aclmap.NewKey(7, guard.ACLEgress).String(); got != "ifindex=7 dir=egress" {
		t.Errorf("key %s", got)
	}
}

func TestNewValueErrors(t *testing.T) {
	many := make([]aclmap.Entry, guard.ACLMaxRules+1)
	if _, err := aclmap.NewValue(many, guard.ACLDeny, 0, 1); !errors.Is(err, aclmap.ErrTooManyEntries) {
		t.Errorf("%d entries: %v, want ErrTooManyEntries", len(many), err)
	}
	if _, err := aclmap.NewValue(many[:guard.ACLMaxRules], guard.ACLDeny, 0, 1); err != nil {
		t.Errorf("%d entries: %v", guard.ACLMaxRules, err)
	}
	v6 := []aclmap.Entry{{Peer: netip.MustParsePrefix("2001:db8::/32")}}
	if _, err := aclmap.NewValue(v6, guard.ACLDeny, 0, 1); err == nil {
		t.Error("an IPv6 peer prefix was accepted")
	}
}

func TestVersion(t *testing.T) {
	a, _ := aclmap.NewValue(nil, guard.ACLDeny, guard.ACLStateful, 0)
	b, _ := aclmap.NewValue(nil, guard.ACLAllow, guard.ACLStateful, 0)
	if aclmap.Version(a, b) == aclmap.Version(b, a) {
		t.Error("swapping the directions kept the version")
	}
	a.Version = 5 // the field itself is not hashed
	if aclmap.Version(a, b) != aclmap.Version(func() aclmap.Value { a.Version = 0; return a }(), b) {
		t.Error("the version depends on the version field")
	}
}
