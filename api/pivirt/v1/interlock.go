// SPDX-License-Identifier: Apache-2.0

package pivirtv1

import "time"

// IsProvisioning reports whether o carries the provisioning interlock
// annotation (AnnotationProvisioning "true"): its leases, or it as a
// lease, are neither deleted, released, expired nor relocated.
func IsProvisioning(o *Object) bool {
	return o != nil && o.Metadata.Annotations[AnnotationProvisioning] == "true"
}

// HeldPinLifetime is how far past its own expiry the guard's pin of a
// lease the interlock holds reaches: the pin must not lapse while the
// lock is on; once it is off, the lease's own expiry applies again.
const HeldPinLifetime = 10 * 365 * 24 * time.Hour
