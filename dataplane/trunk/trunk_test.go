// SPDX-License-Identifier: Apache-2.0

package trunk_test

import (
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"pivirt.hu/pivirt/dataplane/frame"
	"pivirt.hu/pivirt/dataplane/trunk"
	"pivirt.hu/pivirt/test/testutil"
)

// Verdicts as a test run returns them (int32 as uint32).
const (
	actNext     = 0xffffffff // TC_ACT_UNSPEC: tcx goes on, the frame to the host
	actShot     = 2          // TC_ACT_SHOT
	actRedirect = 7          // TC_ACT_REDIRECT
)

func TestReasonNames(t *testing.T) {
	for r := trunk.Reason(0); r < trunk.ReasonMax; r++ {
		if n := r.String(); n == "" || n[:min(len(n), 7)] == "reason-" {
			t.Errorf("reason %d has no name", r)
		}
	}
	if trunk.ReasonToTrunk.Drop() || !trunk.ReasonUnknownVID.Drop() {
		t.Error("Drop() disagrees with PV_TRUNK_R_DROP_MIN")
	}
	e := trunk.Entry{Key: "eth4(3)", Reasons: map[string]uint64{"unknown-vid": 2, "untagged-to-vlan": 5}}
	if got, want := e.String(), "eth4(3) unknown-vid=2 untagged-to-vlan=5"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// skbCtx is a __sk_buff for a test run on ifindex.
func skbCtx(ifindex int) []byte {
	b := make([]byte, 180)
	binary.NativeEndian.PutUint32(b[40:], uint32(ifindex))
	return b
}

// TestPrivilegedTrunkPrograms test-runs both programs (BPF_PROG_RUN) on
// devices of a namespace: uplink and veth, VLAN 10 between them. A test
// run does not move a tag into the skb's metadata as reception does, so
// a tag in the frame is, to the uplink's program, a second one.
func TestPrivilegedTrunkPrograms(t *testing.T) {
	testutil.RequireBPF(t)
	o, err := trunk.Load(filepath.Join(testutil.TempBPFFS(t), "maps"))
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { o.Close() })
	ns := testutil.NewNetNS(t)
	upName, vethName := testutil.VethPair(t, ns)
	var upl, veth int
	if err := ns.Do(func() error {
		for _, x := range []struct {
			name string
			idx  *int
		}{{upName, &upl}, {vethName, &veth}} {
			l, err := netlink.LinkByName(x.name)
			if err != nil {
				return err
			}
			*x.idx = l.Attrs().Index
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync([]trunk.VLAN{{Uplink: uint32(upl), ID: 10, Veth: uint32(veth)}}); err != nil {
		t.Fatal(err)
	}
	src, dst := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	arp := frame.ARP(1, src, netip.MustParseAddr("10.10.0.5"), netip.MustParseAddr("10.10.0.1"))
	untagged := frame.Ethernet(dst, src, frame.TypeARP, 0, arp)
	tagged := frame.Ethernet(dst, src, frame.TypeARP, 10, arp)
	for _, tc := range []struct {
		name    string
		prog    *ebpf.Program
		ifindex int
		f       []byte
		want    uint32
		reason  string
	}{
		{"the VLAN's frame is tagged and sent out of the uplink", o.Out, veth, untagged, actRedirect, "tagged-to-trunk"},
		{"a frame tagged already at the veth is dropped", o.Out, veth, tagged, actShot, "tagged-from-bridge"},
		{"a device not in pv_trunk_ports drops", o.Out, upl, untagged, actShot, "unconfigured"},
		{"untagged at the uplink goes to the host", o.In, upl, untagged, actNext, "untagged-to-host"},
		{"a tag left in the frame at the uplink is a second one", o.In, upl, tagged, actShot, "stacked-tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := o.CountersOf(uint32(tc.ifindex))
			if err != nil {
				t.Fatal(err)
			}
			ro := &ebpf.RunOptions{Data: tc.f, DataOut: make([]byte, len(tc.f)+64), Context: skbCtx(tc.ifindex)}
			var ret uint32
			if err := ns.Do(func() error { ret, err = tc.prog.Run(ro); return err }); err != nil {
				t.Fatal(err)
			}
			if ret != tc.want {
				t.Errorf("verdict %d, want %d", ret, tc.want)
			}
			after, err := o.CountersOf(uint32(tc.ifindex))
			if err != nil {
				t.Fatal(err)
			}
			if after[tc.reason] != before[tc.reason]+1 {
				t.Errorf("counters %v (before %v), want one more %s", after, before, tc.reason)
			}
		})
	}

	t.Run("Sync to nothing empties the maps and the counters", func(t *testing.T) {
		if err := o.Sync(nil); err != nil {
			t.Fatal(err)
		}
		for _, m := range trunk.MapNames {
			es, err := o.Decoded(m, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 0 {
				t.Errorf("%s after Sync(nil): %v", m, es)
			}
		}
	})
}
