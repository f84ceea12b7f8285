// SPDX-License-Identifier: Apache-2.0

package vmm_test

import (
	"slices"
	"testing"

	"pivirt.hu/pivirt/vmm"
)

func TestParseInfoNetwork(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want []vmm.NIC
	}{
		{"two taps, as QEMU 7.2 prints them",
			"net0: index=0,type=nic,model=virtio-net-pci,macaddr=52:54:00:aa:00:01\r\n \\ hostnet0: index=0,type=tap,ifname=tapq0,script=no,downscript=no\r\n" +
				"net1: index=0,type=nic,model=virtio-net-pci,macaddr=52:54:00:AA:00:02\r\n \\ hostnet1: index=0,type=tap,ifname=tapq1,script=no,downscript=no\r\n",
			[]vmm.NIC{{ID: "net0", MAC: "52:54:00:aa:00:01", Tap: "tapq0"}, {ID: "net1", MAC: "52:54:00:aa:00:02", Tap: "tapq1"}}},
		{"a user-mode NIC has no tap",
			"net0: index=0,type=nic,model=e1000,macaddr=52:54:00:12:34:56\n \\ user.0: index=0,type=user,net=10.0.2.0,restrict=off\n",
			[]vmm.NIC{{ID: "net0", MAC: "52:54:00:12:34:56"}}},
		{"a netdev without a NIC is skipped",
			"hostnet9: index=0,type=tap,ifname=tap9,script=no,downscript=no\n" +
				"net0: index=0,type=nic,model=virtio-net-pci,macaddr=52:54:00:00:00:01\n \\ hostnet0: index=0,type=tap,ifname=tap0\n",
			[]vmm.NIC{{ID: "net0", MAC: "52:54:00:00:00:01", Tap: "tap0"}}},
		{"nothing", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := vmm.ParseInfoNetwork(c.out); !slices.Equal(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestResolverWithoutDir(t *testing.T) {
	r := &vmm.Resolver{Dir: t.TempDir() + "/missing"}
	refs, err := r.Resolve()
	if err != nil || len(refs) != 0 {
		t.Errorf("missing dir: %v, %v; want no VM and no error", refs, err)
	}
}
