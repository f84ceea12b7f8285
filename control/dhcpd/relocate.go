// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/store"
)

// ConditionRelocated is the condition a node sets on another node's lease
// when the lease's client asked it for the address and the provisioning
// interlock kept the lease where it is (issue 17, migration).
const ConditionRelocated = "Relocated"

// heldElsewhere is the server's HeldElsewhere hook: a client whose lease
// the interlock holds on another node asked here. Reported once per
// client and address until the cluster's holdings change (SyncElsewhere).
func (m *Manager) heldElsewhere(seg uint32, mac net.HardwareAddr, ip netip.Addr) {
	key := mac.String() + "/" + ip.String()
	m.nmu.Lock()
	defer m.nmu.Unlock()
	if m.notMoved[key] {
		return
	}
	if m.notMoved == nil {
		m.notMoved = map[string]bool{}
	}
	m.notMoved[key] = true
	name := ""
	if si, ok := m.ledger.segmentsByID()[seg]; ok {
		name = si.seg.Name
	}
	go m.reportNotRelocated(name, append(net.HardwareAddr(nil), mac...), ip)
}

// reportNotRelocated says on the lease, and in an event, why this node
// did not take it over.
func (m *Manager) reportNotRelocated(seg string, mac net.HardwareAddr, ip netip.Addr) {
	name := LeaseName(mac)
	msg := fmt.Sprintf("%s asked node %s (segment %s) for %s; not relocated: the provisioning interlock (%s=true) keeps the lease on its node",
		mac, m.Node, seg, ip, pivirtv1.AnnotationProvisioning)
	cond := pivirtv1.Condition{Type: ConditionRelocated, Status: "False", Reason: "ProvisioningInterlock", Message: msg}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := m.Index.Update(ctx, m.Store, admission.Options{}, func(b *admission.Batch) error {
		cur, err := b.Get(pivirtv1.KindDHCPLease, name)
		if err != nil || cur == nil {
			return err
		}
		status, changed, err := reconcile.SetCondition(cur.Status, cond, m.now())
		if err != nil || !changed {
			return err
		}
		return b.UpdateStatus(pivirtv1.KindDHCPLease, name, status)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.Log.Warn("reporting a lease not relocated", "lease", name, "err", err)
	}
	m.Events.Record(pivirtv1.KindDHCPLease, name, events.Warning, "NotRelocated", msg)
	m.Log.Info("lease not relocated: the provisioning interlock holds it", "lease", name, "ip", ip, "segment", seg)
}
