// SPDX-License-Identifier: Apache-2.0

package loader

import "path/filepath"

// DefaultBase is pivirtd's default --bpffs.
const DefaultBase = "/sys/fs/bpf/pivirt"

// MapsDir is where maps are pinned: <base>/maps. base may be a temporary
// bpffs in tests.
func MapsDir(base string) string { return filepath.Join(base, "maps") }

// MapPath is the pin of one map: <base>/maps/<name>.
func MapPath(base, name string) string { return filepath.Join(MapsDir(base), name) }

// LinksDir is where links are pinned: <base>/links.
func LinksDir(base string) string { return filepath.Join(base, "links") }

// IfaceLinksDir holds the links of one interface: <base>/links/<ifname>.
func IfaceLinksDir(base, ifname string) string { return filepath.Join(LinksDir(base), ifname) }

// LinkPath is the pin of a program's link on an interface:
// <base>/links/<ifname>/<prog>.
func LinkPath(base, ifname, prog string) string {
	return filepath.Join(IfaceLinksDir(base, ifname), prog)
}
