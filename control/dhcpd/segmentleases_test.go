// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"testing"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
)

// TestStartInputAfterAShrink: after the range shrank, a stored dynamic
// lease outside it is served at a start only while the interlock holds it
// (the running server kept it through the shrink for that reason); one not
// held is Pending, and its client is NAKed back into the range.
func TestStartInputAfterAShrink(t *testing.T) {
	f := newSegmentFixture(t) // range .100-.199 of 192.168.100.0/24
	lease := func(name, ip string) *pivirtv1.Object {
		t.Helper()
		return decodeYAML(t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+name+`},
			spec: {network: br-vm, macAddress: "52:54:00:00:00:`+name[len(name)-2:]+`", ipAddress: `+ip+`, type: dynamic, expiresAt: "2099-01-01T00:00:00Z"}}`)
	}
	objs := []*pivirtv1.Object{
		lease("lease-in-01", "192.168.100.150"),
		lease("lease-out-02", "192.168.100.50"),
		lease("lease-held-03", "192.168.100.60"),
	}
	held := map[string]bool{"lease-held-03": true}
	in := f.m.startInput(f.seg, server.Input{}, objs, reconcile.Snapshot{}, held)
	dynamic, moved := in.dynamic, in.moved
	if len(dynamic) != 1 || dynamic[0].IP.String() != "192.168.100.150" {
		t.Errorf("dynamic %v, want the lease in the range", dynamic)
	}
	if len(moved) != 1 || moved[0].IP.String() != "192.168.100.60" {
		t.Errorf("served outside the range %v, want the held lease only", moved)
	}
}
