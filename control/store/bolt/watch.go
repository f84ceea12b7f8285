// SPDX-License-Identifier: Apache-2.0

package bolt

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"pivirt.hu/pivirt/control/store"
)

// record is one event in the history; the object stays encoded so the
// history costs its JSON size and every watcher decodes a private copy.
type record struct {
	typ  store.EventType
	rev  int64
	data []byte
}

// history is a ring of the last size events, addressed by sequence number.
type history struct {
	mu      sync.Mutex
	ring    []record
	first   int64 // sequence number of the oldest event kept
	next    int64 // sequence number of the next event
	rev     int64 // last committed revision
	compact int64 // events of revisions <= compact may be missing
	notify  chan struct{}
}

func newHistory(size int, rev int64) *history {
	return &history{ring: make([]record, size), rev: rev, compact: rev, notify: make(chan struct{})}
}

func (h *history) revision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// append publishes the events of revisions up to rev, evicting the oldest.
func (h *history) append(evs []record, rev int64) {
	size := int64(len(h.ring))
	h.mu.Lock()
	for _, e := range evs {
		if h.next-h.first == size {
			h.compact = max(h.compact, h.ring[h.first%size].rev)
			h.ring[h.first%size] = record{}
			h.first++
		}
		h.ring[h.next%size] = e
		h.next++
	}
	h.rev = rev
	close(h.notify)
	h.notify = make(chan struct{})
	h.mu.Unlock()
}

// start returns the sequence number of the first event after fromRev
// (fromRev 0: now), or ErrCompacted.
func (h *history) start(fromRev int64) (int64, int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fromRev == 0 {
		return h.next, h.rev, nil
	}
	if fromRev < h.compact {
		return 0, 0, fmt.Errorf("watching from revision %d (oldest kept is %d): %w", fromRev, h.compact, store.ErrCompacted)
	}
	size := int64(len(h.ring))
	n := sort.Search(int(h.next-h.first), func(i int) bool {
		return h.ring[(h.first+int64(i))%size].rev > fromRev
	})
	return h.first + int64(n), fromRev, nil
}

// read copies up to max events from seq on; it returns a channel closed on
// the next append when there are none, and lagged when seq was evicted.
func (h *history) read(seq int64, buf []record) (n int, wait <-chan struct{}, lagged bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq < h.first {
		return 0, nil, true
	}
	size := int64(len(h.ring))
	for seq+int64(n) < h.next && n < len(buf) {
		buf[n] = h.ring[(seq+int64(n))%size]
		n++
	}
	if n == 0 {
		return 0, h.notify, false
	}
	return n, nil, false
}

// Watch implements store.Store. See the package doc for what happens to a
// watcher that falls behind.
func (s *Store) Watch(ctx context.Context, fromRev int64) (<-chan store.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	if fromRev < 0 {
		return nil, fmt.Errorf("watching from revision %d: must not be negative", fromRev)
	}
	seq, after, err := s.hist.start(fromRev)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event, 64)
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		defer close(out)
		s.feed(ctx, out, seq, after)
	}()
	return out, nil
}

// feed sends the history from seq on, skipping revisions <= after (a
// watch from a future revision), until ctx ends, the store closes or the
// watcher lags out of the history.
func (s *Store) feed(ctx context.Context, out chan<- store.Event, seq, after int64) {
	buf := make([]record, 256)
	last := after // last revision delivered, for the drop notice
	for {
		n, wait, lagged := s.hist.read(seq, buf)
		if lagged {
			s.log.Warn("dropping watcher that fell behind the event history; it must re-list",
				"last_revision_sent", last, "history_size", len(s.hist.ring))
			return
		}
		if n == 0 {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
		}
		for _, r := range buf[:n] {
			seq++
			if r.rev <= after {
				continue
			}
			obj, err := decode(r.data)
			if err != nil {
				s.log.Error("dropping watcher: undecodable event", "revision", r.rev, "err", err)
				return
			}
			if r.typ == store.Deleted {
				obj.Metadata.ResourceVersion = strconv.FormatInt(r.rev, 10)
			}
			select {
			case out <- store.Event{Type: r.typ, Object: obj, Revision: r.rev}:
				last = r.rev
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
		}
		clear(buf[:n])
	}
}
