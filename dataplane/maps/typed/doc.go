// SPDX-License-Identifier: Apache-2.0

// Package typed wraps an *ebpf.Map with a key and value type, so the
// per-map packages (portmap, allowmap, leasemap, countermap) only add
// constructors, String and JSON forms. Errors of the ebpf package, such as
// ebpf.ErrKeyNotExist, are returned as they are.
package typed
