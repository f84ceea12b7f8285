// SPDX-License-Identifier: Apache-2.0

package portguard

import (
	"slices"
	"strings"

	"pivirt.hu/pivirt/dataplane/loader"
)

// Port is an interface the guard is attached to (`pivirtctl status`).
type Port struct {
	loader.Attachment
	ACL bool // the port ACL is attached too
}

// Ports returns the guarded interfaces, by name.
func (c *Controller) Ports() []Port {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Port, 0, len(c.attached))
	for name, a := range c.attached {
		out = append(out, Port{Attachment: a, ACL: c.withACL[name]})
	}
	slices.SortFunc(out, func(a, b Port) int { return strings.Compare(a.Interface, b.Interface) })
	return out
}
