// SPDX-License-Identifier: Apache-2.0

// Package testutil gives tests their privilege gates and private kernel
// objects: a fresh network namespace, veth pairs inside it and a temporary
// bpffs, each removed in t.Cleanup. Privileged helpers skip without root,
// but fail when PIVIRT_E2E=1 (set by .ci/run) so CI never skips silently.
package testutil
