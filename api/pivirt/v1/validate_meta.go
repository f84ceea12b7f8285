// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import (
	"sort"
	"strings"
)

// Name and metadata rules follow Kubernetes (apimachinery validation) so
// manifests move between the tiers unchanged. They are written out here
// rather than imported to keep this package free of apimachinery.

const (
	maxSubdomainLen     = 253
	maxLabelLen         = 63
	maxAnnotationsBytes = 256 * 1024
)

func isAlnumLower(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isAlnumLower(c) || c >= 'A' && c <= 'Z' }

// isDNS1123Label: at most 63 lowercase alphanumerics or '-', starting and
// ending alphanumeric.
func isDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > maxLabelLen || !isAlnumLower(s[0]) || !isAlnumLower(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnumLower(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// isDNS1123Subdomain: at most 253 characters, dot-separated DNS-1123 labels.
func isDNS1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > maxSubdomainLen {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isDNS1123Label(l) {
			return false
		}
	}
	return true
}

// isHostLabel is an RFC 1123 host name label; unlike Kubernetes names it
// may hold upper case, since DNS names compare case-insensitively.
func isHostLabel(s string) bool {
	if len(s) == 0 || len(s) > maxLabelLen || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// isDomainName: dot-separated host labels, at most 253 characters.
func isDomainName(s string) bool {
	if len(s) == 0 || len(s) > maxSubdomainLen {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isHostLabel(l) {
			return false
		}
	}
	return true
}

// isQualifiedNamePart: at most 63 alphanumerics, '-', '_' or '.',
// starting and ending alphanumeric (the name part of a label key, and a
// non-empty label value).
func isQualifiedNamePart(s string) bool {
	if len(s) == 0 || len(s) > maxLabelLen || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// labelKeyProblem explains why k is not a valid label or annotation key
// ([prefix/]name), or returns "".
func labelKeyProblem(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	switch {
	case hasPrefix && !isDNS1123Subdomain(prefix):
		return "is not a valid key: the prefix must be a DNS-1123 subdomain"
	case strings.Contains(name, "/"):
		return "is not a valid key: at most one '/'"
	case !isQualifiedNamePart(name):
		return "is not a valid key: the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
	}
	return ""
}

// labelValueProblem explains why v is not a valid label value, or "".
func labelValueProblem(v string) string {
	if v == "" || isQualifiedNamePart(v) {
		return ""
	}
	return "is not a valid label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
}

// IsReservedLabel reports whether key is in the pivirt.hu/ namespace (or a
// subdomain of it), which only the cluster tier may set.
func IsReservedLabel(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix+"/" == ReservedLabelPrefix || strings.HasSuffix(prefix, "."+strings.TrimSuffix(ReservedLabelPrefix, "/")))
}

// validateMeta checks the user-settable metadata. Server-set fields are
// ignored here: admission overwrites them.
func validateMeta(m *ObjectMeta) ErrorList {
	var errs ErrorList
	switch {
	case m.Name == "":
		errs.Add("metadata.name", nil, "required")
	case !isDNS1123Subdomain(m.Name):
		errs.Add("metadata.name", show(m.Name), "is not a DNS-1123 subdomain (at most 253 lowercase alphanumerics, '-' or '.', starting and ending alphanumeric)")
	}
	for _, k := range sortedKeys(m.Labels) {
		if p := labelKeyProblem(k); p != "" {
			errs.Add("metadata.labels", show(k), "%s", p)
		} else if p := labelValueProblem(m.Labels[k]); p != "" {
			errs.Add("metadata.labels["+k+"]", show(m.Labels[k]), "%s", p)
		}
	}
	size := 0
	for _, k := range sortedKeys(m.Annotations) {
		size += len(k) + len(m.Annotations[k])
		if p := labelKeyProblem(k); p != "" {
			errs.Add("metadata.annotations", show(k), "%s", p)
		}
	}
	if size > maxAnnotationsBytes {
		errs.Add("metadata.annotations", nil, "are %d bytes, more than the %d allowed", size, maxAnnotationsBytes)
	}
	for i, r := range m.OwnerReferences {
		p := "metadata.ownerReferences[" + itoa(i) + "]"
		checkRequired(&errs, p+".apiVersion", r.APIVersion)
		if checkRequired(&errs, p+".kind", r.Kind) && !isKindName(r.Kind) {
			errs.Add(p+".kind", show(r.Kind), "is not a kind name")
		}
		if checkRequired(&errs, p+".name", r.Name) && !isDNS1123Subdomain(r.Name) {
			errs.Add(p+".name", show(r.Name), "is not a DNS-1123 subdomain")
		}
	}
	return errs
}

// isKindName: an identifier of letters and digits starting with a letter
// (owners may be kinds of other tiers, such as VirtualMachine).
func isKindName(s string) bool {
	if s == "" || len(s) > maxLabelLen || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
