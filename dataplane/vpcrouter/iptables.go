// SPDX-License-Identifier: Apache-2.0

package vpcrouter

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

// Chains the router owns inside its namespace. Each is jumped to once
// from a built-in chain and rewritten whole when it differs, so re-applies
// never duplicate rules and stale rules of an older spec disappear.
const (
	chainMasq   = "PIVIRT-MASQ"   // nat POSTROUTING, of pivirtd before the eBPF masquerade: removed
	chainBypass = "PIVIRT-BYPASS" // raw PREROUTING
)

// Bypass exempts an ExternalIP's traffic from conntrack inside the router:
// the eBPF fast path translates it statelessly, and conntrack would only
// cost. Proto "" means every packet of Target.
type Bypass struct {
	Target netip.Addr
	Proto  string // "", "tcp" or "udp"
	Port   uint16 // target port, with Proto
}

// newIPT must run inside the router's namespace: iptables is exec'd from
// the calling (locked) thread and inherits its namespace.
func newIPT() (*iptables.IPTables, error) {
	ipt, err := iptables.New(iptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("initializing iptables: %w", err)
	}
	return ipt, nil
}

// removeMasquerade deletes the masquerade chain an older pivirtd kept in
// the router's namespace: the router's masquerade is its uplink's NAT
// program's now (pv_masq_nets, control/externalip), so no netfilter NAT
// table sits in its path.
func removeMasquerade() error {
	ipt, err := newIPT()
	if err != nil {
		return err
	}
	ok, err := ipt.ChainExists("nat", chainMasq)
	if err != nil || !ok {
		return err
	}
	if err := ipt.DeleteIfExists("nat", "POSTROUTING", "-j", chainMasq); err != nil {
		return fmt.Errorf("removing the jump to %s: %w", chainMasq, err)
	}
	if err := ipt.ClearAndDeleteChain("nat", chainMasq); err != nil {
		return fmt.Errorf("removing chain %s: %w", chainMasq, err)
	}
	return nil
}

// SetBypass makes the router's conntrack bypass exactly bs.
func SetBypass(name string, bs []Bypass) error {
	return Do(name, func() error {
		ipt, err := newIPT()
		if err != nil {
			return err
		}
		var rules [][]string
		for _, b := range bs {
			for _, dir := range []struct{ iface, addr, port string }{
				{InsideIf, "-s", "--sport"}, // the target's traffic out
				{UplinkIf, "-d", "--dport"}, // already DNATed at tc ingress
			} {
				// In the order iptables -S prints, which syncChain
				// compares with.
				r := []string{dir.addr, b.Target.String() + "/32", "-i", dir.iface}
				if b.Proto != "" {
					r = append(r, "-p", b.Proto, "-m", b.Proto, dir.port, strconv.Itoa(int(b.Port)))
				}
				rules = append(rules, append(r, "-j", "CT", "--notrack"))
			}
		}
		return syncChain(ipt, "raw", "PREROUTING", chainBypass, rules)
	})
}

// syncChain makes chain hold exactly rules and be jumped to from parent.
// Rules are written in the order iptables -S prints their options, so
// the listing compares as text. Missing rules are appended before stale
// ones are deleted: a changed set never passes through a moment without
// the rules both sets share (no bypass gap for an ExternalIP that stays).
func syncChain(ipt *iptables.IPTables, table, parent, chain string, rules [][]string) error {
	ok, err := ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("checking chain %s/%s: %w", table, chain, err)
	}
	if !ok {
		if err := ipt.NewChain(table, chain); err != nil {
			return fmt.Errorf("creating chain %s/%s: %w", table, chain, err)
		}
	}
	if err := ipt.AppendUnique(table, parent, "-j", chain); err != nil {
		return fmt.Errorf("jumping from %s/%s to %s: %w", table, parent, chain, err)
	}
	listed, err := ipt.List(table, chain)
	if err != nil {
		return fmt.Errorf("listing chain %s/%s: %w", table, chain, err)
	}
	have := map[string]bool{}
	for _, l := range listed {
		// List prints "-N CHAIN" then one "-A CHAIN <spec>" per rule.
		if spec, ok := strings.CutPrefix(l, "-A "+chain+" "); ok {
			have[spec] = true
		}
	}
	want := map[string]bool{}
	for _, r := range rules {
		spec := strings.Join(r, " ")
		want[spec] = true
		if have[spec] {
			continue
		}
		if err := ipt.Append(table, chain, r...); err != nil {
			return fmt.Errorf("adding rule %q to %s/%s: %w", spec, table, chain, err)
		}
		have[spec] = true
	}
	for spec := range have {
		if want[spec] {
			continue
		}
		if err := ipt.Delete(table, chain, strings.Fields(spec)...); err != nil {
			return fmt.Errorf("removing stale rule %q from %s/%s: %w", spec, table, chain, err)
		}
	}
	return nil
}

// Rules lists the router's own rules as iptables -S prints them, for
// status and tests: the bypass chain (and an older pivirtd's masquerade
// chain while it is there).
func Rules(name string) ([]string, error) {
	var out []string
	err := Do(name, func() error {
		ipt, err := newIPT()
		if err != nil {
			return err
		}
		for _, tc := range [][2]string{{"nat", chainMasq}, {"raw", chainBypass}} {
			rs, err := ipt.List(tc[0], tc[1])
			if err != nil {
				continue // chain not made yet
			}
			for _, r := range rs {
				if strings.HasPrefix(r, "-A ") {
					out = append(out, tc[0]+" "+r)
				}
			}
		}
		return nil
	})
	return out, err
}
