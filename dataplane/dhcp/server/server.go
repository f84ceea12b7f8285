// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"pivirt.hu/pivirt/dataplane/dhcp/pool"
)

// Sentinels of the lease table.
var (
	ErrNoSegment   = errors.New("no such segment")
	ErrOutOfRange  = errors.New("address outside the delegated range")
	ErrAddrInUse   = errors.New("address in use")
	ErrDuplicate   = errors.New("duplicate reservation")
	ErrNoSuchLease = errors.New("no such lease")
	ErrInFlight    = errors.New("lease renewed by an ACK not yet committed")
	ErrExpired     = errors.New("lease expired")
)

// Request is a decoded DHCP message plus the facts of its ingress.
type Request struct {
	Segment   uint32           // segment of the bridge it arrived on (giaddr may select another)
	SrcMAC    net.HardwareAddr // Ethernet source (the client, or the relay)
	SrcIP     netip.Addr       // IPv4 source (0.0.0.0 before the client has one)
	Broadcast bool             // IPv4 destination was 255.255.255.255 (tells REBINDING from RENEWING)
	// Msg is the request. Handle copies what it keeps, so Msg may alias
	// a receive buffer that is reused after Handle returns.
	Msg *dhcpv4.DHCPv4
	// Reply, if set, is overwritten with the reply instead of allocating
	// one (its Options map is reused). The caller owns it and must be done
	// with the previous reply; nil allocates a fresh message.
	Reply *dhcpv4.DHCPv4
	// Changes, if set, is where Handle appends the lease changes, so a
	// caller can reuse one slice for a whole batch.
	Changes []LeaseChange
	// Unwritable: the lease database's last write failed (a full or
	// failing disk). A client asking for the lease it holds durably is
	// then ACKed it for the time it has left, at once (Reply.Unwritten),
	// and its renewal is written if it can be, instead of getting no ACK
	// until the disk recovers and losing its address meanwhile.
	Unwritable bool
}

// State is the client state a REQUEST was recognised in (RFC 2131 4.3.2).
type State uint8

// Client states of a REQUEST.
const (
	NoState State = iota
	Selecting
	InitReboot
	Renewing
	Rebinding
)

func (s State) String() string {
	return [...]string{"none", "selecting", "init-reboot", "renewing", "rebinding"}[s]
}

// Ignore says why a request got no reply. Replies to RELEASE and DECLINE
// are never sent, so those are IgnoreNone with a nil Msg.
type Ignore uint8

// Reasons for not replying.
const (
	IgnoreNone         Ignore = iota
	IgnoreNotRequest          // op is not BOOTREQUEST, or no chaddr
	IgnoreNoType              // option 53 missing or not a client message
	IgnoreNoSegment           // giaddr or ingress names no segment
	IgnoreOtherServer         // REQUEST/DECLINE/RELEASE for another server
	IgnoreExhausted           // no free address
	IgnoreBadRequest          // REQUEST without server id, option 50 or ciaddr
	IgnoreNotOurs             // RELEASE/DECLINE of an address the client does not hold
	IgnoreHeld                // RELEASE/DECLINE of a lease the provisioning interlock holds
	IgnoreSpoofed             // RELEASE/DECLINE not from the lease's own MAC (and, for RELEASE, address)
	IgnoreDeclineLimit        // DECLINE within the probation of the MAC's last one: the lease ends, the address is not quarantined
	IgnoreOfferLimit          // DISCOVER under a new client identifier from a MAC holding Segment.OffersPerMAC offers
	IgnoreNotHeard            // INIT-REBOOT for an address of another node's range this node has no record of (Segment.Shared)
	NumIgnore
)

func (r Ignore) String() string {
	return [...]string{"none", "not-request", "no-type", "no-segment", "other-server", "exhausted", "bad-request", "not-ours", "held", "spoofed", "decline-limit", "offer-limit", "not-heard"}[r]
}

// Reply is the outcome of Handle. Msg is nil when nothing is sent.
type Reply struct {
	Msg     *dhcpv4.DHCPv4
	State   State  // for REQUEST
	Ignored Ignore // why Msg is nil
	Durable bool   // Msg is an ACK whose lease change must be persisted first
	Reused  bool   // Msg is an ACK of the stored lease as it is (Segment.ReuseThreshold)
	// Acked, for a Reused ACK, is the lease ACKed as it is (Kind
	// Renewed, At the ACK's time): nothing is persisted, but when a lease
	// was ACKed last decides between two nodes (responder.Acker).
	Acked LeaseChange
	// Unwritten: Msg ACKs the client's durable lease for the time it has
	// left (Request.Unwritable); its renewal is among the changes, not
	// Durable: written if it can be, the ACK leaving either way. Acked is
	// the durable lease, ACKed as it is.
	Unwritten bool
}

type lease struct {
	Lease
	id      string
	offered bool // held by an OFFER, not bound yet
	// released: the client released it while the interlock held it; it is
	// dropped when the hold ends.
	released bool
	// unsynced is the Seq of its last change while that is not known to
	// be durable (Persisted); only a durable lease is reused.
	unsynced uint64
	// rec is the MAC's binding as the lease database last committed it
	// (Seq 0: none yet); it goes with the MAC's bound lease.
	rec Record
}

type segState struct {
	cfg      Segment
	subnet   netip.Prefix
	bcast    netip.Addr
	serverID net.IP
	pool     *pool.Pool
	byIP     map[netip.Addr]*lease
	byID     map[string]*lease
	// byMAC is the bound lease of each MAC: one per MAC and segment, as
	// the store names leases (lease-<mac>) and the guard pins them, even
	// when a machine changes identity (a firmware without client-id, then
	// its OS with one).
	byMAC    map[string]*lease
	resByMAC map[string]Reservation
	resByIP  map[netip.Addr]string
	// given is the last Input.Reservations set, sorted by address.
	given []Reservation
	// intents are the revisions at which the reservations the operator
	// gave ahead of the store (Reserve, Unreserve) commit (0: the commit
	// failed), until an Input whose Revision is at or past them.
	intents []int64
	quar    map[netip.Addr]time.Time
	// declinedBy is, by MAC, the end of the probation its last DECLINE
	// started: one MAC quarantines one address per probation, or a loop
	// of DORA and DECLINE would drain the pool.
	declinedBy map[string]time.Time
	// offersBy counts, by MAC, the OFFERs held (Segment.OffersPerMAC).
	offersBy map[string]int
	last     map[string]netip.Addr    // previous address of an identity
	held     map[string]bool          // MACs whose lease the provisioning interlock holds
	away     map[netip.Addr][]Holding // held elsewhere in the cluster (SetElsewhere)
	awayMAC  map[string]Holding
	static   dhcpv4.Options // options every reply of this segment carries
	leaseOpt [3][]byte      // encoded 51, 58, 59
	ipTable  []byte         // 4 bytes per range address, for yiaddr without allocating
}

// Server owns the lease tables of its segments. Its methods are safe for
// concurrent use; Handle is meant to be called from one responder loop.
type Server struct {
	// HeldElsewhere, when set, is told of a client this server gave
	// nothing because the interlock holds its lease on another node
	// (SetElsewhere). It runs under the server's lock: it must not block
	// or call the server.
	HeldElsewhere func(seg uint32, mac net.HardwareAddr, ip netip.Addr)

	mu    sync.Mutex
	segs  map[uint32]*segState
	seq   uint64        // LeaseChange.Seq of the last ACK's change
	idBuf [1 + 255]byte // identity key of the request being handled
}

// New returns a server for the given segments.
func New(segs ...Segment) (*Server, error) {
	s := &Server{segs: map[uint32]*segState{}}
	for _, c := range segs {
		if _, err := s.Apply(time.Time{}, Input{Segment: c}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newSegState(c Segment) (*segState, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	p, err := pool.New(c.RangeStart, c.RangeEnd)
	if err != nil {
		return nil, fmt.Errorf("segment %q: %w", c.Name, err)
	}
	st := &segState{
		cfg: c, subnet: c.HostIP.Masked(), bcast: broadcast(c.HostIP), pool: p,
		serverID: net.IP(c.HostIP.Addr().AsSlice()),
		byIP:     map[netip.Addr]*lease{}, byID: map[string]*lease{}, byMAC: map[string]*lease{}, declinedBy: map[string]time.Time{}, offersBy: map[string]int{},
		resByMAC: map[string]Reservation{}, resByIP: map[netip.Addr]string{},
		quar: map[netip.Addr]time.Time{}, last: map[string]netip.Addr{}, held: map[string]bool{},
	}
	st.static = staticOptions(&st.cfg, st.bcast)
	secs := uint32(c.LeaseTime / time.Second)
	st.leaseOpt = [3][]byte{be32(secs), be32(secs / 2), be32(uint32(uint64(secs) * 7 / 8))}
	if p.Size() <= 1<<16 {
		st.ipTable = make([]byte, 0, 4*p.Size())
		for a, i := c.RangeStart, 0; i < p.Size(); a, i = a.Next(), i+1 {
			st.ipTable = append(st.ipTable, a.AsSlice()...)
		}
	}
	return st, nil
}

// Expire reclaims expired offers, leases and quarantined addresses, and
// returns the expired leases. Call it periodically (every second is plenty).
func (s *Server) Expire(now time.Time) []LeaseChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LeaseChange
	for id, st := range s.segs {
		for _, l := range st.byID {
			if now.Before(l.Expires) || (!l.offered && st.held[string(l.MAC)]) {
				continue
			}
			st.drop(l)
			if !l.offered {
				out = append(out, l.end(Expired, id, now, st.isStatic(l.MAC)))
			}
		}
		for ip, until := range st.quar {
			if !now.Before(until) {
				delete(st.quar, ip)
				st.maybeFree(ip)
			}
		}
		for mac, until := range st.declinedBy {
			if !now.Before(until) {
				delete(st.declinedBy, mac)
			}
		}
	}
	return out
}

// quarantine adds the probations of q not ended at now, of free addresses
// of the range.
func (st *segState) quarantine(now time.Time, q map[netip.Addr]time.Time) {
	for ip, until := range q {
		if !now.Before(until) || !st.pool.Contains(ip) || st.byIP[ip] != nil || st.resByIP[ip] != "" {
			continue // over; outside the range; bound since, or reserved (a reservation ends a probation)
		}
		// An address another node's object holds is out of the pool
		// already; its probation still counts once that object goes (it
		// did not: restarted, the server set the cluster's holdings
		// first and lost the probation, and offered the address when the
		// holding went — the random model, seeds 20105 and 20115).
		st.quar[ip] = until
		if st.pool.Available(ip) {
			st.pool.Take(ip)
		}
	}
}

// Leases returns the bound leases of a segment, sorted by IP.
func (s *Server) Leases(seg uint32) []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return nil
	}
	var out []Lease
	for _, l := range st.byIP {
		if !l.offered {
			out = append(out, l.Lease)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return a.IP.Compare(b.IP) })
	return out
}

// SegmentStats is what status reports of a segment's range.
type SegmentStats struct {
	Size, Bound, Offered, Reserved, Quarantined, Free int
	// Elsewhere counts the addresses of the segment's network that other
	// nodes' objects hold (SetElsewhere), ElsewhereHeld those of them the
	// provisioning interlock holds.
	Elsewhere, ElsewhereHeld int
}

// Stats returns the occupancy of a segment's range.
func (s *Server) Stats(seg uint32) (SegmentStats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.segs[seg]
	if st == nil {
		return SegmentStats{}, false
	}
	ss := SegmentStats{Size: st.pool.Size(), Free: st.pool.Free(), Reserved: len(st.resByIP), Quarantined: len(st.quar), Elsewhere: len(st.away)}
	for _, hs := range st.away {
		if slices.ContainsFunc(hs, func(h Holding) bool { return h.Held }) {
			ss.ElsewhereHeld++
		}
	}
	for _, l := range st.byIP {
		if l.offered {
			ss.Offered++
		} else {
			ss.Bound++
		}
	}
	return ss, true
}

// appendIdentity appends the lease table key of a client: its client-id
// if it sent one, else its hardware address. Lookups use string(id) in
// map index expressions, which do not allocate.
func appendIdentity(dst, clientID []byte, mac net.HardwareAddr) []byte {
	if len(clientID) > 0 {
		return append(append(dst, 'c'), clientID...)
	}
	return append(append(dst, 'h'), mac...)
}

// loadable reports whether a stored lease can be bound again at start: its
// address is in the range and held by no one else. A reservation of the
// address made since does not take it from its holder, whose renewals are
// NAKed until it ends; a reservation of its MAC elsewhere does.
func (st *segState) loadable(id []byte, mac net.HardwareAddr, ip netip.Addr, moved bool) bool {
	if r, ok := st.resByMAC[string(mac)]; ok && r.IP != ip && !st.held[string(mac)] {
		return false // superseded by its reservation (the interlock keeps it until it ends)
	}
	if l := st.byIP[ip]; l != nil && l.id != string(id) {
		return false
	}
	if _, q := st.quar[ip]; q {
		return false
	}
	if !st.pool.Contains(ip) {
		// Brought from another node's range; or held by the interlock
		// through a shrink of the range, which it outlives.
		return (moved || st.held[string(mac)]) && st.hostAddr(ip)
	}
	if own, _ := st.ownElsewhere(ip, mac); own && !st.takenElsewhere(ip, mac) {
		return true // SetElsewhere took it from the pool for its own MAC
	}
	return st.pool.Available(ip) || st.resByIP[ip] != "" || st.byIP[ip] != nil
}

// assignable reports whether ip may be given to the client id/mac now.
func (st *segState) assignable(id []byte, mac net.HardwareAddr, ip netip.Addr, now time.Time) bool {
	if st.takenElsewhere(ip, mac) || st.heldElsewhere(mac) {
		return false // the cluster shows it another MAC's; or the MAC's lease stays where it is
	}
	if r, ok := st.resByMAC[string(mac)]; ok {
		if ip != r.IP {
			return false
		}
	} else if st.resByIP[ip] != "" {
		return false
	}
	if l := st.byIP[ip]; l != nil {
		switch {
		case l.id == string(id) && l.offered && !st.pool.Contains(ip):
			// Its own offer of an address from another node's range is
			// good only while the address may still move here (movable,
			// below): the other node's object can go between the OFFER
			// and the REQUEST.
		case l.id == string(id) || (!l.offered && bytes.Equal(l.MAC, mac)):
			return true // its own, or the same MAC's under another identity (bind replaces it)
		case l.offered && bytes.Equal(l.MAC, mac):
			st.drop(l) // the same MAC's offer under another identity passes to this one
		case l.offered && !now.Before(l.Expires):
			st.drop(l) // a stale offer gives way
		default:
			return false
		}
	}
	if _, q := st.quar[ip]; q {
		return false // declined: in use by someone, the client said (a migrated one too)
	}
	if !st.pool.Contains(ip) {
		return st.movable(ip, mac) // a migrated client's address from another node's range
	}
	if own, _ := st.ownElsewhere(ip, mac); own {
		return true // its bit is set for everyone else
	}
	if _, reserved := st.resByMAC[string(mac)]; reserved {
		return true // its bit is set by the reservation itself
	}
	return st.pool.Available(ip)
}

// choose picks the address to offer: reservation, current lease, the
// MAC's lease under another identity, previous address, option 50, next
// free.
func (st *segState) choose(id []byte, mac net.HardwareAddr, requested netip.Addr, now time.Time) (netip.Addr, bool) {
	if r, ok := st.resByMAC[string(mac)]; ok {
		return r.IP, st.assignable(id, mac, r.IP, now)
	}
	if l := st.byID[string(id)]; l != nil && st.assignable(id, mac, l.IP, now) {
		return l.IP, true
	}
	if l := st.byMAC[string(mac)]; l != nil && st.assignable(id, mac, l.IP, now) {
		// One MAC is one client (as Kea's match-client-id: false): a
		// firmware's lease, then its OS's identifier, or a new DUID after
		// a reboot, is offered the address it holds, not a second one.
		return l.IP, true
	}
	if ip, ok := st.last[string(id)]; ok && st.assignable(id, mac, ip, now) {
		return ip, true
	}
	if requested.IsValid() && st.assignable(id, mac, requested, now) {
		return requested, true
	}
	ip, ok := st.pool.Next()
	if !ok {
		st.reclaimOffers(now)
		ip, ok = st.pool.Next()
	}
	return ip, ok
}

func (st *segState) reclaimOffers(now time.Time) {
	for _, l := range st.byID {
		if l.offered && !now.Before(l.Expires) {
			st.drop(l)
		}
	}
}

// bind records that id holds l.IP (as an offer or bound). Any other
// address the identity held is freed.
func (st *segState) bind(id []byte, l Lease, offered bool) *lease {
	var rec Record // the MAC's record, which a bound lease takes over
	if b := st.byMAC[string(l.MAC)]; b != nil && !offered {
		rec = b.rec
	}
	if old := st.byID[string(id)]; old != nil && old.IP != l.IP {
		st.drop(old)
	}
	cur := st.byID[string(id)]
	if cur == nil {
		cur = &lease{id: string(id)}
		st.byID[cur.id] = cur
		st.byIP[l.IP] = cur
		if _, r := st.resByIP[l.IP]; !r {
			st.pool.Take(l.IP)
		}
	}
	if cur.offered {
		st.countOffer(cur.MAC, -1)
	}
	cur.Lease = l
	cur.offered = offered
	if offered {
		st.countOffer(l.MAC, +1)
	}
	if !offered {
		if other := st.byMAC[string(l.MAC)]; other != nil && other != cur {
			st.drop(other) // the MAC's binding under another identity
		}
		st.byMAC[string(l.MAC)] = cur
		if rec.Seq > cur.rec.Seq {
			cur.rec = rec
		}
		if st.offersBy[string(l.MAC)] > 0 {
			st.dropOffers(l.MAC) // bound, the MAC holds one address
		}
	}
	st.forget(id)
	return cur
}

// forget drops the previous-address memory of id.
func (st *segState) forget(id []byte) {
	delete(st.last, string(id))
}

// dropOffers drops the offers mac holds. It walks the table, but only
// for a MAC that binds while it holds an offer under another identity.
func (st *segState) dropOffers(mac net.HardwareAddr) {
	for _, l := range st.byID {
		if l.offered && bytes.Equal(l.MAC, mac) {
			st.drop(l)
		}
	}
}

// countOffer adds d to the OFFERs mac holds.
func (st *segState) countOffer(mac net.HardwareAddr, d int) {
	if n := st.offersBy[string(mac)] + d; n > 0 {
		st.offersBy[string(mac)] = n
	} else {
		delete(st.offersBy, string(mac))
	}
}

// drop forgets a lease (offer or bound) and frees its address.
func (st *segState) drop(l *lease) {
	if st.byID[l.id] == l {
		delete(st.byID, l.id)
		if l.offered {
			st.countOffer(l.MAC, -1)
		}
	}
	if st.byIP[l.IP] == l {
		delete(st.byIP, l.IP)
	}
	if st.byMAC[string(l.MAC)] == l {
		delete(st.byMAC, string(l.MAC))
	}
	if !l.offered {
		if len(st.last) >= 4*st.pool.Size()+64 {
			clear(st.last) // bounded memory against MAC floods
		}
		st.last[l.id] = l.IP
	}
	st.maybeFree(l.IP)
}

// maybeFree returns ip to the pool unless something still holds it.
func (st *segState) maybeFree(ip netip.Addr) {
	if st.byIP[ip] != nil || st.resByIP[ip] != "" || st.away[ip] != nil {
		return
	}
	if _, q := st.quar[ip]; q {
		return
	}
	st.pool.Put(ip)
}
