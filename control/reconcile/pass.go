// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"sync"
	"time"
)

// PassStatus is what a Loop last did: readiness (the first full pass
// succeeded: everything the store held when it started is in the
// dataplane), when its last pass ended and how.
type PassStatus struct {
	Ready   bool
	Passes  uint64
	Last    time.Time
	LastErr error
}

// passes records a Loop's passes; safe for concurrent use.
type passes struct {
	mu sync.Mutex
	st PassStatus
}

func (p *passes) record(full bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Passes++
	p.st.Last, p.st.LastErr = time.Now(), err
	if full && err == nil {
		p.st.Ready = true
	}
}

func (p *passes) status() PassStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}
