// SPDX-License-Identifier: Apache-2.0

package test

import (
	"fmt"
	"net/netip"
	"time"
)

// The operator's dynamic leases in the ordering test: now and then (its
// own random stream, so the seeds of TestPrivilegedOrderingRegressions
// replay as they did), a dynamic lease is applied for a client, at an
// address no one was ever given in this run or at the one it holds (an
// import of another server's lease, an edit of the address). From the
// apply on it is the client's lease: stored as applied, pinned, and its
// client's next DORA gets it (dora checks nothing else is ACKed for a
// MAC that holds one); the address it held before is freed.

// importStep applies a dynamic lease for a random client, one step in 20.
func (r *orderRun) importStep() {
	if r.importRng == nil || r.segGone || r.importRng.IntN(20) != 0 {
		return
	}
	c := r.clients[r.importRng.IntN(len(r.clients))]
	if c.lock != lockNone || c.reserv.IsValid() || c.heldBack || c.maybeHeld.IsValid() {
		return // relocating a held lease is refused; a reservation wins
	}
	ip := c.acked
	if !ip.IsValid() || r.importRng.IntN(2) == 0 {
		ip = netip.Addr{}
		for last := 40; last >= 10; last-- { // from the top: DORA hands out from the bottom
			a := netip.AddrFrom4([4]byte{10, 80, 0, byte(last)})
			if !r.used[a] {
				ip = a
				break
			}
		}
		if !ip.IsValid() {
			return
		}
	}
	exp := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	r.t.Logf("step %d: apply dynamic lease %s -> %s (held %v)", r.step, c.g.MAC, ip, c.acked)
	doc := fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: DHCPLease\nmetadata: {name: %s}\nspec: {network: br-ord, macAddress: %q, ipAddress: %s, type: dynamic, expiresAt: %q}\n",
		leaseName(c.g.MAC), c.g.MAC.String(), ip, exp)
	if res := r.d.CtlStdin([]byte(doc), "apply", "-f", "-"); res.Code != 0 {
		r.fatalf("applying a dynamic lease %s for %s: %s", ip, c.g.MAC, res)
	}
	r.use(ip)
	if ip != c.acked {
		// Its binding moved: the client does not know it, its renewal
		// of the old address would be NAKed; it starts over with DORA
		// and must be given the applied address.
		c.acked, c.ack = ip, nil
		c.imported = true
	}
}

// use notes that ip was given to someone in this run.
func (r *orderRun) use(ip netip.Addr) {
	if r.used == nil {
		r.used = map[netip.Addr]bool{}
	}
	r.used[ip] = true
}

// checkImported fails a DORA of a client whose lease the operator moved
// that was not given the applied address.
func (r *orderRun) checkImported(c *orderClient, want, got netip.Addr) {
	if c.imported && want.IsValid() && got != want && !c.reserv.IsValid() {
		r.fatalf("%s holds the applied lease %s but its DORA was ACKed %s", c.g.MAC, want, got)
	}
	c.imported = false
}
