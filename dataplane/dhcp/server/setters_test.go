// SPDX-License-Identifier: Apache-2.0

package server

import (
	"fmt"
	"net"
	"time"
)

// The tests set one part of a segment's Input at a time; Apply takes it
// whole.

func (s *Server) setSegment(c Segment) ([]LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, changes, err := s.configure(c)
	return changes, err
}

// setReservations returns the superseded leases' changes.
func (s *Server) setReservations(now time.Time, seg uint32, res []Reservation, rev int64) ([]LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil, fmt.Errorf("segment %d: %w", seg, ErrNoSegment)
	}
	superseded, _, err := st.applyReservations(now, seg, res, rev)
	return superseded, err
}

func (s *Server) setHeld(now time.Time, seg uint32, macs []net.HardwareAddr) ([]LeaseChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil, fmt.Errorf("segment %d: %w", seg, ErrNoSegment)
	}
	return st.applyHeld(now, seg, macs), nil
}
