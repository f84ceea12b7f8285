// SPDX-License-Identifier: Apache-2.0

package apiserver

import "strings"

func lower(s string) string { return strings.ToLower(s) }

// cutKindName splits "Kind/name" as admission.Delete reports it.
func cutKindName(s string) (kind, name string, ok bool) {
	return strings.Cut(s, "/")
}
