// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"maps"
	"time"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/mapsync"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/dataplane/guard"
)

// hostStale reports whether the index was compiled with other facts
// about the interfaces ports name than the host has now (a tap that
// appeared since, a vmRef that resolves now): then only a full pass
// compiles them right. The link watch triggers one anyway; this keeps
// a change that comes first from compiling against the old facts.
func (c *Controller) hostStale(ports []*pivirtv1.Object, decode func(*pivirtv1.Object) (pivirtv1.Spec, error)) bool {
	if len(ports) == 0 {
		return false
	}
	h := c.idx.Host()
	spec := (reconcile.Snapshot{Decode: decode}).Spec
	resolved := false
	for _, o := range ports {
		sp, err := spec(o)
		if err != nil {
			continue // compile reports it
		}
		ps := sp.(*pivirtv1.PortSecuritySpec)
		ifname := ps.Interface
		if ifname == "" && ps.VMRef != nil {
			if c.VMs != nil && !resolved {
				refs, err := c.VMs.Resolve()
				if err != nil || !maps.Equal(refs, h.VMInterfaces) {
					return true
				}
				resolved = true
			}
			ifname = h.VMInterfaces[*ps.VMRef]
		}
		if ifname == "" {
			continue
		}
		known, had := h.Links[ifname]
		now, err := linkFacts(ifname)
		if err != nil {
			if had {
				return true // gone, or unreadable: let a full pass see
			}
			continue
		}
		if !had || now != known {
			return true
		}
	}
	return false
}

// linkFacts reads one interface as hostFacts does.
func linkFacts(name string) (compile.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return compile.Link{}, err
	}
	out := compile.Link{Index: uint32(l.Attrs().Index)}
	if mi := l.Attrs().MasterIndex; mi != 0 {
		m, err := netlink.LinkByIndex(mi)
		if err != nil {
			return compile.Link{}, err
		}
		out.Master = m.Attrs().Name
	}
	return out, nil
}

// sameHost reports whether two passes compiled against the same host
// facts, so that what the second wrote was drift and not news.
func sameHost(a, b compile.Host) bool {
	d := a.ClockOffset - b.ClockOffset
	return maps.Equal(a.Links, b.Links) && maps.Equal(a.VMInterfaces, b.VMInterfaces) && d < time.Second && d > -time.Second
}

// countRepairs adds what a resync pass wrote to the repair counts: with
// every change applied object by object, a resync (same store, same host)
// should find nothing to write, so anything it does is drift it repaired
// (an entry changed behind the controller's back, or one the incremental
// path missed). Logged, since it should not happen.
func (c *Controller) countRepairs(res map[string]mapsync.Result, rev int64) {
	if c.repairs == nil {
		c.repairs = map[string]uint64{}
	}
	var total int
	var attrs []any
	for name, r := range res {
		n := r.Added + r.Updated + r.Deleted
		if name == guard.MapConntrack || n == 0 {
			continue // forgetting flows follows from an ACL repair
		}
		c.repairs[name] += uint64(n)
		total += n
		attrs = append(attrs, name, r.String())
	}
	if total == 0 {
		c.Log.Debug("resync found the guard maps as compiled", "rev", rev)
		return
	}
	c.Log.Warn("resync repaired guard map entries", append([]any{"entries", total, "rev", rev}, attrs...)...)
}

// ResyncRepairs returns the entries resync passes repaired, per map
// (pivirt_resync_repairs_total).
func (c *Controller) ResyncRepairs() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.repairs)
}
