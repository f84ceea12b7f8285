// SPDX-License-Identifier: Apache-2.0

package test

// The provisioning interlock in the ordering test: an operator puts the
// lock on a client's lease (its annotation) or on the lease's owner (a
// PortSecurity the lease names), and takes it off, between the other
// steps. While it is on, the lease is neither deleted (refused), nor
// released or declined (the server keeps it: "held back"), nor its
// segment deleted (refused), and its pin reaches years past its expiry.
// The lock steps draw from their own random stream, so a seed replays
// the same main steps with and without them.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// lockKind is how the interlock holds a client's lease.
type lockKind int

const (
	lockNone  lockKind = iota
	lockLease          // the annotation on the lease
	lockOwner          // the annotation on a PortSecurity the lease names as owner
)

func (k lockKind) String() string { return [...]string{"none", "lease", "owner"}[k] }

// lockStep, one step in 16, puts the lock on a random client's lease or
// takes it off.
func (r *orderRun) lockStep() {
	if r.lockRng == nil || r.segGone || r.lockRng.IntN(16) != 0 {
		return
	}
	c := r.clients[r.lockRng.IntN(len(r.clients))]
	switch {
	case c.lock != lockNone:
		r.unlock(c)
	case c.ack != nil && !c.reserv.IsValid():
		r.lock(c, lockKind(1+r.lockRng.IntN(2)))
	}
}

func portName(c *orderClient) string { return "ps-" + strings.ReplaceAll(c.g.MAC.String(), ":", "") }

// portDoc is c's PortSecurity, with the lock's annotation when locked.
func portDoc(c *orderClient, locked bool) []byte {
	ann := ""
	if locked {
		ann = `, annotations: {pivirtd.pilab.hu/is-provisioning: "true"}`
	}
	return []byte(fmt.Sprintf("apiVersion: pivirt.hu/v1\nkind: PortSecurity\nmetadata: {name: %s%s}\nspec: {interface: %s, macAddress: %q}\n",
		portName(c), ann, c.g.HostSide, c.g.MAC.String()))
}

func (r *orderRun) lock(c *orderClient, kind lockKind) {
	r.t.Logf("step %d: lock %s's lease (%s) through the %s", r.step, c.g.MAC, c.acked, kind)
	if kind == lockOwner {
		if res := r.d.CtlStdin(portDoc(c, true), "apply", "-f", "-"); res.Code != 0 {
			r.fatalf("locking %s: %s", portName(c), res)
		}
	}
	// A binding whose reservation was just deleted becomes lease-<mac>
	// through the journal's writer: moments after the delete returns.
	waitFor(r.t, 5*time.Second, leaseName(c.g.MAC)+" stored", func() bool {
		return r.d.Ctl("get", "lease", leaseName(c.g.MAC)).Code == 0
	})
	if !r.editLease(c, func(meta map[string]any) {
		if kind == lockLease {
			ann, _ := meta["annotations"].(map[string]any)
			if ann == nil {
				ann = map[string]any{}
			}
			ann["pivirtd.pilab.hu/is-provisioning"] = "true"
			meta["annotations"] = ann
			return
		}
		meta["ownerReferences"] = []any{map[string]any{"apiVersion": "pivirt.hu/v1", "kind": "PortSecurity", "name": portName(c)}}
	}) {
		r.fatalf("%s was ACKed %s and has no lease to lock", c.g.MAC, c.acked)
	}
	c.lock = kind
}

// unlock takes the lock off; a release or decline it held back happens
// now, or not when pivirtd restarted since (the server forgot the client
// released it, and the lease runs out as any other).
func (r *orderRun) unlock(c *orderClient) {
	r.t.Logf("step %d: unlock %s's lease (%s, %s, held back %v)", r.step, c.g.MAC, c.lock, c.acked, c.heldBack)
	if c.lock == lockOwner {
		if res := r.d.CtlStdin(portDoc(c, false), "apply", "-f", "-"); res.Code != 0 {
			r.fatalf("unlocking %s: %s", portName(c), res)
		}
	}
	// Once the owner lets go, a release it held back may happen before
	// the lease is edited: gone is then what is expected.
	if !r.editLease(c, func(meta map[string]any) {
		if ann, _ := meta["annotations"].(map[string]any); ann != nil {
			delete(ann, "pivirtd.pilab.hu/is-provisioning")
		}
		delete(meta, "ownerReferences")
	}) && !c.heldBack {
		r.fatalf("%s's held lease %s is gone", c.g.MAC, leaseName(c.g.MAC))
	}
	c.lock = lockNone
	if c.heldBack {
		c.maybeHeld, c.acked, c.ack, c.heldBack = c.acked, netip.Addr{}, nil, false
	}
}

// editLease applies c's server-made lease with its metadata changed by
// edit; a lease the server wrote meanwhile is read again (a few times).
// It reports false when there is no such lease.
func (r *orderRun) editLease(c *orderClient, edit func(meta map[string]any)) bool {
	name := leaseName(c.g.MAC)
	for try := 0; ; try++ {
		got := r.d.Ctl("get", "lease", name, "-o", "json")
		if got.Code != 0 {
			if !strings.Contains(got.Stderr, "NotFound") && !strings.Contains(got.Stderr, "not found") {
				r.fatalf("get lease %s: %s", name, got)
			}
			return false
		}
		var o map[string]any
		if err := json.Unmarshal([]byte(got.Stdout), &o); err != nil {
			r.fatalf("decoding %s: %v", name, err)
		}
		meta, _ := o["metadata"].(map[string]any)
		edit(meta)
		delete(o, "status")
		doc, _ := json.Marshal(o)
		res := r.d.CtlStdin(doc, "apply", "-f", "-")
		if res.Code == 0 {
			return true
		}
		if try == 4 || !strings.Contains(res.Stderr, "onflict") {
			r.fatalf("applying %s's lease edited: %s\n%s", c.g.MAC, res, doc)
		}
	}
}
