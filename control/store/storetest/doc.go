// SPDX-License-Identifier: Apache-2.0

// Package storetest is the conformance suite of store.Store: every backend
// (bbolt, etcd) runs Run against fresh stores, so they keep one semantics.
package storetest
