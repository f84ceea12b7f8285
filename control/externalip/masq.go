// SPDX-License-Identifier: Apache-2.0

package externalip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/dataplane/hostnet"
	"pivirt.hu/pivirt/dataplane/nat"
)

// ExpireEvery is how often expired masqueraded flows are deleted: well
// under the shortest timeout (a closing TCP flow's 10 s) times a few, so
// a full table frees its dead flows soon.
const ExpireEvery = 5 * time.Second

// natNetwork is a NAT Network of this node as its uplink's program
// masquerades it.
type natNetwork struct {
	name    string
	uplink  string
	scope   uint32
	cidr    netip.Prefix
	bridge  string     // where its guests' frames come up (hairpin)
	gateway netip.Addr // the bridge's address: hairpin flows come from it
}

// natNetworks decodes the NAT Networks among objs.
func natNetworks(objs []*pivirtv1.Object, spec func(*pivirtv1.Object) (pivirtv1.Spec, error)) []natNetwork {
	var out []natNetwork
	for _, o := range objs {
		s, err := spec(o)
		if err != nil {
			continue
		}
		n := s.(*pivirtv1.NetworkSpec)
		cidr, err := netip.ParsePrefix(n.CIDR)
		if n.Type != pivirtv1.NetworkNAT || err != nil {
			continue
		}
		gw, _ := netip.ParseAddr(n.Gateway)
		out = append(out, natNetwork{name: o.Metadata.Name, uplink: n.Uplink, scope: nat.ScopeInterface(n.Uplink), cidr: cidr,
			bridge: n.Bridge, gateway: gw})
	}
	return out
}

// masqWanted is what pv_masq_nets should hold: each NAT Network's CIDR
// behind its uplink's address, each masquerading VPCRouter's inside subnet
// behind its uplink address (in the router's namespace, where its
// program runs). Routers that failed are left out.
func masqWanted(nets []natNetwork, routers []Router, routerErr map[string]string) (map[nat.MasqNetKey]nat.MasqNet, []error) {
	var errs []error
	want := map[nat.MasqNetKey]nat.MasqNet{}
	put := func(scope uint32, cidr netip.Prefix, pub netip.Addr) {
		want[nat.MasqNetKeyOf(scope, cidr)] = nat.MasqNet{Addr: nat.BE32(pub), PortMin: nat.MasqPortMin, PortMax: nat.MasqPortMax}
	}
	for _, n := range nets {
		l, err := netlink.LinkByName(n.uplink)
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: finding uplink %s: %w", n.name, n.uplink, err))
			continue
		}
		pub, err := hostnet.PublicAddr(l)
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", n.name, err))
			continue
		}
		put(n.scope, n.cidr, pub)
	}
	for _, r := range routers {
		if _, failed := routerErr[r.Name]; r.Spec.Masquerade && !failed {
			put(nat.ScopeRouter(r.Name), r.Config.InsideIP.Masked(), r.Config.UplinkIP.Addr())
		}
	}
	return want, errs
}

// syncMasq makes pv_masq_nets hold exactly want.
func (c *Controller) syncMasq(want map[nat.MasqNetKey]nat.MasqNet) error {
	if c.masq == nil {
		o, err := nat.OpenMaps(filepath.Join(c.bpffs, "maps"))
		if err != nil {
			return err
		}
		c.masq = o
	}
	have, err := c.masq.MasqNetEntries()
	if err != nil {
		return err
	}
	var errs []error
	for k, v := range want {
		if have[k] == v {
			continue
		}
		if err := c.masq.MasqNets.Put(&k, &v); err != nil {
			errs = append(errs, fmt.Errorf("masquerading %s: %w", k, err))
			continue
		}
		c.log.Info("masquerade programmed", "network", k.String(), "behind", nat.Addr4(v.Addr))
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			if err := c.masq.DeleteMasqNet(k); err != nil {
				errs = append(errs, err)
				continue
			}
			c.log.Info("masquerade removed", "network", k.String())
		}
	}
	return errors.Join(errs...)
}

// watchAddrs runs a pass on every IPv4 address change of this namespace:
// a NAT Network masquerades behind its uplink's current address (one a
// DHCP client on the uplink may change).
func (c *Controller) watchAddrs(ctx context.Context) {
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	if err := netlink.AddrSubscribe(updates, done); err != nil {
		c.log.Error("masquerade will not follow uplink address changes", "err", err)
		return
	}
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			if u.LinkAddress.IP.To4() != nil {
				c.loop.Trigger()
			}
		}
	}
}

// expireFlows deletes expired masqueraded flows every ExpireEvery. The
// maps are opened at the first tick that finds them openable: at start
// the reconcile pass may be creating and pinning them at the same moment
// (two creators of one pin: one gets EEXIST).
func (c *Controller) expireFlows(ctx context.Context) {
	var o *nat.Objects
	defer func() {
		if o != nil {
			o.Close()
		}
	}()
	t := time.NewTicker(ExpireEvery)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if o == nil {
			var err error
			if o, err = nat.OpenMaps(filepath.Join(c.bpffs, "maps")); err != nil {
				if !warned {
					c.log.Warn("masqueraded flows do not expire until the NAT maps open", "err", err)
					warned = true
				}
				continue
			}
		}
		if n, err := o.ExpireFlows(); err != nil {
			c.log.Warn("expiring masqueraded flows", "err", err)
		} else if n > 0 {
			c.log.Debug("masqueraded flows expired", "flows", n)
		}
	}
}
