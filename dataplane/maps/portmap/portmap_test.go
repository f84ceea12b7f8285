// SPDX-License-Identifier: Apache-2.0

package portmap_test

import (
	"encoding/json"
	"net/netip"
	"testing"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/portmap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

func TestFormat(t *testing.T) {
	names := typed.IfName(func(i uint32) string {
		if i == 7 {
			return "tap0"
		}
		return ""
	})
	mac := [6]uint8{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	tests := []struct {
		name      string
		k         portmap.Key
		v         portmap.Value
		wantKey   string
		wantValue string
		wantJSON  string
	}{
		{
			name: "named interface with server",
			k:    portmap.NewKey(7),
			v: withLens(portmap.NewValue(mac, 0xabcdef01, netip.MustParseAddr("192.168.100.1"), guard.PortDHCPGuard|guard.PortRAGuard,
				netip.MustParseAddr("192.168.100.10"), netip.MustParseAddr("192.168.100.11")), []int{24, 32}, []int{64}),
			wantKey:   "ifindex=tap0(7)",
			wantValue: "mac=52:54:00:12:34:56 seg=0xabcdef01 dhcp-server=192.168.100.1 addrs=192.168.100.10,192.168.100.11 plen4=32,24 plen6=64 flags=dhcpGuard|raGuard",
			wantJSON:  `{"interface":"tap0","ifindex":7,"mac":"52:54:00:12:34:56","segID":2882400001,"dhcpServer":"192.168.100.1","addrs":["192.168.100.10","192.168.100.11"],"prefixLens4":[32,24],"prefixLens6":[64],"flags":"dhcpGuard|raGuard"}`,
		},
		{
			name:      "unnamed, no segment, no flags",
			k:         portmap.NewKey(9),
			v:         portmap.NewValue(mac, 0, netip.Addr{}, 0),
			wantKey:   "ifindex=9",
			wantValue: "mac=52:54:00:12:34:56 seg=0x00000000 dhcp-server=none addrs=none plen4=none plen6=none flags=none",
			wantJSON:  `{"ifindex":9,"mac":"52:54:00:12:34:56","segID":0,"flags":"none"}`,
		},
		{
			name:      "with a counter slot",
			k:         portmap.NewKey(9),
			v:         withSlot(portmap.NewValue(mac, 0, netip.Addr{}, 0), 3),
			wantKey:   "ifindex=9",
			wantValue: "mac=52:54:00:12:34:56 seg=0x00000000 dhcp-server=none addrs=none plen4=none plen6=none flags=none counter-slot=3",
			wantJSON:  `{"ifindex":9,"mac":"52:54:00:12:34:56","segID":0,"flags":"none","counterSlot":3}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.Format(names); got != tc.wantKey {
				t.Errorf("key %q, want %q", got, tc.wantKey)
			}
			if got := tc.v.String(); got != tc.wantValue {
				t.Errorf("value %q, want %q", got, tc.wantValue)
			}
			b, err := json.Marshal(portmap.Decode(tc.k, tc.v, names))
			if err != nil || string(b) != tc.wantJSON {
				t.Errorf("json %s (%v), want %s", b, err, tc.wantJSON)
			}
		})
	}
}

func withLens(v portmap.Value, v4, v6 []int) portmap.Value {
	if err := v.SetPrefixLens(v4, v6); err != nil {
		panic(err)
	}
	return v
}

func withSlot(v portmap.Value, slot uint32) portmap.Value {
	v.CounterSlot = slot
	return v
}

func TestSetPrefixLensLimit(t *testing.T) {
	var v portmap.Value
	if err := v.SetPrefixLens([]int{8, 16, 24, 30, 32}, nil); err == nil {
		t.Error("five lengths accepted")
	}
}
