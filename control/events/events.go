// SPDX-License-Identifier: Apache-2.0

package events

import (
	"sync"
	"time"
)

// Event types.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// Event is one folded event about an object.
type Event struct {
	Type    string
	Reason  string
	Message string
	Count   int64
	First   time.Time
	Last    time.Time
}

// Recorder keeps the last PerObject events of each object.
type Recorder struct {
	PerObject int
	now       func() time.Time

	mu   sync.Mutex
	byID map[string][]Event
}

// NewRecorder returns a recorder keeping perObject events per object.
func NewRecorder(perObject int) *Recorder {
	return &Recorder{PerObject: perObject, now: time.Now, byID: make(map[string][]Event)}
}

func key(kind, name string) string { return kind + "/" + name }

// Record notes an event about kind/name; an event equal in type, reason and
// message to the latest one only bumps its count and time.
func (r *Recorder) Record(kind, name, typ, reason, message string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key(kind, name)
	evs := r.byID[k]
	if n := len(evs); n > 0 {
		last := &evs[n-1]
		if last.Type == typ && last.Reason == reason && last.Message == message {
			last.Count++
			last.Last = now
			return
		}
	}
	evs = append(evs, Event{Type: typ, Reason: reason, Message: message, Count: 1, First: now, Last: now})
	if len(evs) > r.PerObject {
		evs = append(evs[:0:0], evs[len(evs)-r.PerObject:]...)
	}
	r.byID[k] = evs
}

// Events returns a copy of the events of kind/name, oldest first.
func (r *Recorder) Events(kind, name string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.byID[key(kind, name)]...)
}

// Forget drops the events of a deleted object.
func (r *Recorder) Forget(kind, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, key(kind, name))
}
