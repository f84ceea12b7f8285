// SPDX-License-Identifier: Apache-2.0

package compile_test

import (
	"fmt"
	"testing"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
)

// BenchmarkNewIndex compiles a segment and 10,000 dynamic leases, as the
// guard's full pass does every resync on a node with that many leases;
// its bytes/op is the garbage that pass makes.
func BenchmarkNewIndex(b *testing.B) {
	wide := pivirtv1.NetworkSegmentSpec{Bridge: "br0", NetworkRef: "net-a", HostIP: "10.100.0.1/16",
		DHCP: pivirtv1.DHCPSpec{DelegatedRangeStart: "10.100.0.10", DelegatedRangeEnd: "10.100.255.250"}}
	t := &testing.T{}
	objs := []*pivirtv1.Object{obj(t, pivirtv1.KindNetworkSegment, "seg-a", wide)}
	exp := time.Now().Add(time.Hour)
	for i := range 10000 {
		objs = append(objs, obj(t, pivirtv1.KindDHCPLease, fmt.Sprintf("l-%d", i), pivirtv1.DHCPLeaseSpec{
			Network: "net-a", MACAddress: fmt.Sprintf("52:54:01:00:%02x:%02x", i>>8, i&255),
			IPAddress: fmt.Sprintf("10.100.%d.%d", 1+i/250, 1+i%250), Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}))
	}
	b.ReportAllocs()
	for b.Loop() {
		x := compile.NewIndex(objs, host)
		_ = x.Desired()
	}
}
