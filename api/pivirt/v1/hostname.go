// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "strings"

// IsHostname reports whether s is an RFC 1123 host name: dot-separated
// labels of letters, digits and '-' (not at either end), at most 253
// characters ("web-01.local", as in seed 000).
func IsHostname(s string) bool { return isDomainName(s) }

// SanitizeHostname makes a host name a DHCP client sent (option 12 or
// 81, client data) storable: characters a host name cannot hold become
// '-', empty labels and '-' at a label's ends go, a trailing dot goes,
// labels are cut to 63 characters and the name to 253 at a label
// boundary. ok is false when nothing usable is left.
func SanitizeHostname(s string) (name string, ok bool) {
	var labels []string
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		b := []byte(l)
		for i, c := range b {
			if !isAlnum(c) && c != '-' {
				b[i] = '-'
			}
		}
		l = strings.Trim(string(b), "-")
		if len(l) > maxLabelLen {
			l = strings.TrimRight(l[:maxLabelLen], "-")
		}
		if l == "" {
			continue
		}
		if n+len(l)+len(labels) > maxSubdomainLen {
			break
		}
		labels = append(labels, l)
		n += len(l)
	}
	name = strings.Join(labels, ".")
	return name, name != "" && IsHostname(name)
}
