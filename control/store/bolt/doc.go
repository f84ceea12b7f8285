// SPDX-License-Identifier: Apache-2.0

// Package bolt is the embedded manifest store of one node: store.Store on a
// bbolt file (pivirtd's --state-dir/state.db).
//
// Layout: bucket "meta" holds the global revision (8 bytes, big endian);
// bucket "objects" holds one nested bucket per kind, name → object JSON;
// bucket "index" the field indexes ListPage selects by (index.go).
//
// Writes go through a single committer goroutine that takes every Update
// waiting at that moment, runs their functions one after another in one
// bbolt transaction (each function buffers its writes, so a failing one
// leaves no trace and the others still commit), then commits with one
// fsync. Each successful Update gets its own revision, one more than the
// Update before it. Functions run exactly once.
//
// Watch replays from a bounded in-memory history of recent events
// (Options.HistorySize). Watchers read that history at their own pace, so a
// slow watcher never blocks writers and costs no memory of its own; a
// watcher that falls behind by more than the history is dropped: its
// channel is closed (while its ctx is still live) and the drop is logged.
// A consumer that sees its channel close without having cancelled re-lists
// and watches again from the listed revision.
package bolt
