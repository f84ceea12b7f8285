// SPDX-License-Identifier: Apache-2.0

package network

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/hostnet"
	"pivirt.hu/pivirt/test/testutil"
)

func TestConditions(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	nat := pivirtv1.NetworkSpec{Type: pivirtv1.NetworkNAT, Uplink: "eth3", CIDR: "10.91.0.0/24"}
	up := hostnet.State{Public: netip.MustParseAddr("203.0.113.2")}
	withStatus := func(conds ...pivirtv1.Condition) *pivirtv1.Object {
		b, _ := json.Marshal(pivirtv1.Status{Conditions: conds})
		return &pivirtv1.Object{Status: b}
	}
	for _, tc := range []struct {
		name string
		o    *pivirtv1.Object
		spec pivirtv1.NetworkSpec
		err  error
		want []pivirtv1.Condition
	}{
		{"bridge realized", &pivirtv1.Object{}, pivirtv1.NetworkSpec{Type: pivirtv1.NetworkBridge}, nil,
			[]pivirtv1.Condition{{Type: ConditionRealized, Status: "True", Reason: "Realized", LastTransitionTime: t1}}},
		{"failed", &pivirtv1.Object{}, pivirtv1.NetworkSpec{Type: pivirtv1.NetworkRouted}, errors.New("finding uplink eth9: not found"),
			[]pivirtv1.Condition{{Type: ConditionRealized, Status: "False", Reason: "RealizeFailed", Message: "finding uplink eth9: not found", LastTransitionTime: t1}}},
		{"nat realized keeps the time of a condition that holds", withStatus(pivirtv1.Condition{Type: ConditionRealized, Status: "True", LastTransitionTime: t0}), nat, nil,
			[]pivirtv1.Condition{
				{Type: ConditionRealized, Status: "True", Reason: "Realized", LastTransitionTime: t0},
				{Type: ConditionMasquerade, Status: "True", Reason: "BehindUplink", Message: "10.91.0.0/24 leaves eth3 as 203.0.113.2", LastTransitionTime: t1},
			}},
		{"nat failed", withStatus(pivirtv1.Condition{Type: ConditionRealized, Status: "True", LastTransitionTime: t0}), nat, errors.New("uplink eth3 has no IPv4 address to masquerade behind"),
			[]pivirtv1.Condition{
				{Type: ConditionRealized, Status: "False", Reason: "RealizeFailed", Message: "uplink eth3 has no IPv4 address to masquerade behind", LastTransitionTime: t1},
				{Type: ConditionMasquerade, Status: "False", Reason: "NotRealized", Message: "the bridge is not realized", LastTransitionTime: t1},
			}},
	} {
		hs := up
		if tc.err != nil {
			hs = hostnet.State{}
		}
		if diff := cmp.Diff(tc.want, conditions(tc.o, tc.spec, hs, tc.err, t1)); diff != "" {
			t.Errorf("%s: conditions (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestPrivilegedSweepsNetworksDeletedWhileDown: a Network deleted while
// pivirtd was down left its bridge, with the host's addresses on it; the
// first pass of a new controller gives them back to the uplink and
// deletes the bridge, and leaves a Network it still has alone.
func TestPrivilegedSweepsNetworksDeletedWhileDown(t *testing.T) {
	testutil.RequireTool(t, "ip")
	ns := testutil.NewNetNS(t)
	uplink, _ := testutil.VethPair(t, ns)
	kept, _ := testutil.VethPair(t, ns)
	if _, err := ns.Exec("ip", "addr", "add", "192.0.2.10/24", "dev", uplink); err != nil {
		t.Fatal(err)
	}
	err := ns.Do(func() error {
		if _, err := hostnet.Bridged("gone", "node-1", "pvbr-gone", uplink, 0); err != nil {
			return err
		}
		if _, err := hostnet.Routed("stays", "node-1", "pvbr-stays", kept, netip.MustParsePrefix("10.90.0.1/24"), 0, false); err != nil {
			return err
		}
		// A new controller: nothing realized yet, "stays" still in the
		// store, "gone" not.
		c := &Controller{Log: slog.New(slog.DiscardHandler), Node: "node-1", realized: map[string]pivirtv1.NetworkSpec{}}
		if err := c.sweep(); err != nil {
			return err
		}
		return errors.Join(c.prune(map[string]bool{"stays": true})...)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Exec("ip", "link", "show", "pvbr-gone"); err == nil {
		t.Error("the bridge of the Network deleted while down is still there")
	}
	if out, _ := ns.Exec("ip", "-4", "-br", "addr", "show", "dev", uplink); !strings.Contains(string(out), "192.0.2.10/24") {
		t.Errorf("the uplink did not get its address back: %s", out)
	}
	if _, err := ns.Exec("ip", "link", "show", "pvbr-stays"); err != nil {
		t.Error("the sweep removed a Network's bridge it still has")
	}
}
