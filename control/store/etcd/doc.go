// SPDX-License-Identifier: Apache-2.0

// Package etcd is the cluster manifest store: store.Store on etcd v3.
//
// Keys: <prefix>o/<kind>/<name> holds the object JSON; resourceVersion is
// the key's ModRevision and the store revision is etcd's. The objects of
// a scoped kind (store.HasScopes) are kept under their scope instead
// (store.ScopeOf): a lease under its spec.network,
// <prefix>o/DHCPLease/<network>/<name>, a PortSecurity under its node,
// <prefix>o/PortSecurity/<node or _>/<name>, with <prefix>x/<kind>/<name>
// holding "<scope>/<name>" so that Get, Put and Delete by name find it
// and names stay unique across scopes; a Put that changes the scope
// moves it (a delete and a create at one revision). So a node lists and
// watches its own scopes alone (store.Scoped: ListScope, WatchScope, one
// etcd watch per scope beside those of every other kind) while a List of
// the kind still reads every scope. Objects stored at
// <prefix>o/<kind>/<name>, before their kind was scoped, move under their
// scope at a Store's first ListScope. <prefix>v/<kind>/<scope> is
// rewritten by every write in a scope ("" for the objects of kinds
// without scopes), so that a transaction depends on a scope or a
// kind with one compare of its version keys (store.ScopedTx), not one
// over every object; <prefix>d/<kind>, rewritten by every delete in a
// kind, is what pivirtd of schema 1 compared instead.
//
// Update is optimistic and serializable like concurrency.NewSTM, but with
// range reads, which STM lacks: fn reads at one revision R, every key it
// read (present or absent) and every kind or scope it listed become
// compares of one etcd Txn (ModRevision unchanged; for a listed kind or
// scope, no version key of it newer than R), and the Txn applies fn's writes only
// if they hold; otherwise fn runs again on a fresh snapshot. So fn may run
// more than once. Tx.Revision is R+1, exact unless another writer commits
// in between; objects passed to Create/Put get the real revision after the
// commit. Tx.DependOn adds a listed kind's compares without reading it.
//
// Every etcd call is bounded by Options.RequestTimeout (listing a kind by
// ten times it) and fails at once while no endpoint is reachable: etcd's
// client would otherwise wait for a connection as long as the caller's
// context allows. Such failures are store.ErrUnavailable, naming the
// endpoints.
//
// Watch uses etcd's watch; pivirt_store_watch_events_total and
// pivirt_store_watch_bytes_total (the Store is a prometheus.Collector)
// count what the watches received. etcd's client buffers events of a slow consumer
// in memory; a watch whose history was compacted ends with its channel
// closed (ctx still live), and the caller re-lists.
package etcd
