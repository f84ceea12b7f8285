// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestRandomExchanges drives one segment, with more clients than
// addresses, through seeded random sequences of what its clients and its
// operator do: every kind of DISCOVER and REQUEST, half the clients
// with a client identifier, now and then a new one (a new DUID after a
// reboot, a firmware without one then its OS with one) (odd but legal
// ones too: a stale requested address, another server's id, rapid
// commit),
// RELEASE, DECLINE, reservations set, changed and removed, the
// provisioning interlock, operator deletions, addresses other nodes
// hold (some by these very clients: a VM that moved here), the range
// grown and shrunk, clock jumps with expiry sweeps, and restarts (a new Server
// loaded from what the lease changes said, as the journal and the store
// would, and from the probations saved beside them). After every step it
// checks what the server promises:
//
//   - an ACK comes with a durable Bound or Renewed change of that very
//     lease (the change is what is fsync'd before the ACK leaves), or,
//     in the odd seeds, which reuse leases (Segment.ReuseThreshold), is
//     a reuse: no change, of a lease whose last change was persisted
//     (Persisted; some persists fail, some come steps later), for no
//     longer than that lease has left; or, while the last persist
//     failed (Request.Unwritable), ACKs at once (Reply.Unwritten) with
//     a change to write, for no longer than the lease's last persisted
//     change (or the lease as a restart loaded it) has left, of that
//     address;
//   - an ACKed address is in the range, is not reserved for another MAC,
//     is not in a DECLINE's probation, and no other client holds it (by
//     the changes: bound, not yet ended, or held by the interlock);
//   - a MAC with a reservation is ACKed its reserved address or nothing;
//   - the server's leases are exactly what its changes describe;
//   - its tables agree (by address, identity and MAC), and no MAC holds
//     more offers than Segment.OffersPerMAC (some seeds allow two).
//
// Seeds above 100 (and every PIVIRT_DHCP_SEED) also have the operator
// apply dynamic leases (Import). Half of those above 200 serve a network
// other nodes share (Segment.Shared): an INIT-REBOOT gets no reply
// exactly when it asks for an address beyond the range that nothing
// here or elsewhere holds, from a MAC holding nothing elsewhere.
// PIVIRT_DHCP_SEED=N replays one seed (PIVIRT_DHCP_STEPS steps).
func TestRandomExchanges(t *testing.T) {
	// Seeds 1-24 as they always ran, 101-124 with the operator's
	// dynamic leases, 201-224 with some shared. At 10,000 steps seed 10,
	// and seed 5132 with imports, found a held MAC's reservation leaving
	// its lease bound and its offer kept (TestHeldMACsReservation).
	seeds := []uint64{}
	for s := uint64(1); s <= 24; s++ {
		seeds = append(seeds, s, 100+s, 200+s)
	}
	steps := 3000
	if v := os.Getenv("PIVIRT_DHCP_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PIVIRT_DHCP_SEED=%q: %v", v, err)
		}
		seeds = []uint64{s}
	}
	if v := os.Getenv("PIVIRT_DHCP_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PIVIRT_DHCP_STEPS=%q: %v", v, err)
		}
		steps = n
	}
	unwritten := 0 // ACKs while persists failed, over all seeds
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			w := newWorld(t, seed, seed > 100 || os.Getenv("PIVIRT_DHCP_SEED") != "")
			for i := range steps {
				w.step(i)
				if t.Failed() {
					t.Fatalf("seed %d failed at step %d; last steps:\n%s", seed, i, w.trail())
				}
			}
			if w.cfg.ReuseThreshold > 0 && w.reused == 0 && steps >= 1000 {
				t.Errorf("seed %d: no lease reused in %d steps; the reuse checks ran on nothing", seed, steps)
			}
			unwritten += w.unwritten
		})
	}
	if len(seeds) > 1 && steps >= 1000 && unwritten < len(seeds) {
		t.Errorf("%d ACKs while persists failed in %d seeds of %d steps: their checks ran on almost nothing", unwritten, len(seeds), steps)
	}
	t.Logf("%d ACKs while persists failed", unwritten)
}

// bound is a lease as the changes describe it.
type bound struct {
	ip       netip.Addr
	expires  time.Time
	clientID string // option 61, stored with the lease
}

type world struct {
	t   *testing.T
	rnd *rand.Rand
	// imports is the operator's dynamic leases' own stream (Import), so
	// that the seeds' other steps stay as they were.
	imports *rand.Rand
	cfg     Segment
	srv     *Server
	now     time.Time

	macs     []net.HardwareAddr
	durable  map[string]bound      // by MAC: what the changes say is bound
	has      map[string]netip.Addr // by MAC: the address the client believes it holds
	offered  map[string]netip.Addr // by MAC: the last OFFER it got
	reserved map[string]netip.Addr // by MAC
	held     map[string]bool       // MACs under the interlock
	declined map[netip.Addr]time.Time
	// probation is what the changes put on a DECLINE's probation, as
	// the lease database keeps it (a restart loads it).
	probation map[netip.Addr]time.Time
	// declinedBy: by MAC, the end of the probation of its last DECLINE
	// (the server forgets it at a restart).
	declinedBy map[string]time.Time
	away       []Holding       // what other nodes' objects hold (SetElsewhere)
	migrated   map[string]bool // MACs whose lease came from another node's range
	// idGen is, by MAC, how many times its client changed identifier.
	idGen map[string]int
	// unpersisted is, by MAC, the Seq of the last ACK's change while it
	// is in pending, or was in a persist that failed.
	unpersisted map[string]uint64
	pending     []LeaseChange // changes of ACKs not yet persisted
	reused      int           // ACKs that reused a lease
	// pinned is, by MAC, the lease as its last persisted change (or a
	// restart's load) gives it: what an ACK may give while persists fail.
	pinned     map[string]bound
	unwritable bool // the last persist failed (Request.Unwritable)
	unwritten  int  // ACKs while it did (Reply.Unwritten)
	log        []string
}

// newWorld makes the world of seed; with imports, the operator applies
// dynamic leases too (seeds 1-24 run without, as they always did).
func newWorld(t *testing.T, seed uint64, imports bool) *world {
	cfg := Segment{Name: "rnd", ID: 9, Bridge: "br-rnd", HostIP: netip.MustParsePrefix("10.9.0.1/24"),
		RangeStart: ip("10.9.0.10"), RangeEnd: ip("10.9.0.17"),
		LeaseTime: time.Hour, DeclineProbation: 10 * time.Minute, OfferHold: 30 * time.Second}
	if seed%2 == 1 {
		cfg.ReuseThreshold = 0.25
	}
	if seed%4 >= 2 {
		cfg.OffersPerMAC = 2
	}
	cfg.Shared = seed > 200 && seed%8 >= 4
	w := &world{t: t, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cfg: cfg, now: t0,
		durable: map[string]bound{}, has: map[string]netip.Addr{}, offered: map[string]netip.Addr{},
		reserved: map[string]netip.Addr{}, held: map[string]bool{}, declined: map[netip.Addr]time.Time{}, probation: map[netip.Addr]time.Time{}, declinedBy: map[string]time.Time{},
		migrated: map[string]bool{}, unpersisted: map[string]uint64{}, idGen: map[string]int{}, pinned: map[string]bound{}}
	for i := range 12 {
		w.macs = append(w.macs, net.HardwareAddr{0x52, 0x54, 0, 0x99, 0, byte(i + 1)})
	}
	if imports {
		w.imports = rand.New(rand.NewPCG(seed^0x1a90, seed))
	}
	w.restart(false)
	return w
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%s "+format, append([]any{w.now.Sub(t0).Round(time.Second)}, args...)...))
}

func (w *world) trail() string {
	from := max(0, len(w.log)-40)
	out := ""
	for _, l := range w.log[from:] {
		out += "  " + l + "\n"
	}
	return out
}

// restart makes a new server from the configuration, the reservations,
// the interlock and the leases the changes describe.
func (w *world) restart(load bool) {
	s, err := New(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.srv = s
	w.declinedBy = map[string]time.Time{}
	// What was loaded is durable; the persists under way died with the
	// process.
	w.pending, w.unpersisted, w.unwritable = nil, map[string]uint64{}, false
	// Set before the leases are loaded: a lease its MAC's reservation
	// supersedes is not loaded at all, so no change ends it.
	w.setReservations(false)
	if _, err := s.setHeld(w.now, w.cfg.ID, w.heldMACs()); err != nil {
		w.t.Fatal(err)
	}
	if !load {
		return
	}
	if err := s.SetElsewhere(w.cfg.ID, w.away); err != nil {
		w.t.Fatal(err)
	}
	var ls, moved []Lease
	for mac, b := range w.durable {
		l := Lease{MAC: net.HardwareAddr(mac), IP: b.ip, Expires: b.expires, ClientID: []byte(b.clientID)}
		switch {
		case w.inRange(b.ip):
			ls = append(ls, l)
		case w.migrated[mac] || w.held[mac]:
			// The manager serves a lease outside the range that a client
			// brought from another node (its object now this node's), or
			// that the interlock held through a shrink of the range.
			moved = append(moved, l)
		default:
			// Pending: its client is NAKed back into the range.
			delete(w.durable, mac)
		}
	}
	if _, err := s.Load(w.now, w.cfg.ID, Tables{Leases: Unrecorded(ls...), Moved: Unrecorded(moved...), Probations: w.probation}); err != nil {
		w.t.Errorf("restart: loading the leases and probations the changes describe: %v", err)
	}
	for a := range w.declined {
		if !w.inRange(a) {
			delete(w.declined, a) // only the range's probations are saved
		}
	}
	// Loading skips what expired, unless held; so do the changes then.
	for mac, b := range w.durable {
		if !w.now.Before(b.expires) && !w.held[mac] {
			delete(w.durable, mac)
		}
	}
	w.offered = map[string]netip.Addr{}
	w.pinned = maps.Clone(w.durable)
}

func (w *world) heldMACs() []net.HardwareAddr {
	var out []net.HardwareAddr
	for m := range w.held {
		out = append(out, net.HardwareAddr(m))
	}
	return out
}

func (w *world) setReservations(running bool) {
	var rs []Reservation
	for m, a := range w.reserved {
		rs = append(rs, Reservation{MAC: net.HardwareAddr(m), IP: a})
	}
	// Those outside the range are not loaded (their objects are Pending),
	// as the manager's Sync leaves them.
	ch, err := w.srv.setReservations(w.now, w.cfg.ID, rs, 0)
	if err != nil && !errors.Is(err, ErrOutOfRange) {
		w.t.Fatalf("setReservations(%v): %v", rs, err)
	}
	w.superseded(ch, running)
}

// inRange reports whether a is in the segment's range.
func (w *world) inRange(a netip.Addr) bool {
	return !a.Less(w.cfg.RangeStart) && !w.cfg.RangeEnd.Less(a)
}

// reservation returns the reservation of mac the server holds: one in
// the range.
func (w *world) reservation(mac string) (netip.Addr, bool) {
	a, ok := w.reserved[mac]
	return a, ok && w.inRange(a)
}

// superseded: a reservation of a MAC at another address drops its
// dynamic lease (unless the interlock holds it); apply does the same to
// the stored object. A reserved address leaves a DECLINE's probation:
// the operator said whose it is.
// On a running server (not a restart's, before it loads leases) each
// lease dropped so has its change.
func (w *world) superseded(ch []LeaseChange, running bool) {
	w.changes(ch)
	for m, a := range w.reserved {
		if !w.inRange(a) {
			continue
		}
		if b, ok := w.durable[m]; ok && b.ip != a && !w.held[m] {
			if running {
				w.t.Errorf("%s's lease of %s superseded by its reservation of %s without a change\n%s", net.HardwareAddr(m), b.ip, a, w.trail())
			}
			delete(w.durable, m)
		}
		delete(w.declined, a)
	}
}

func (w *world) addr(i int) netip.Addr {
	a := w.cfg.RangeStart
	for range i {
		a = a.Next()
	}
	return a
}

// someAddr is an address of the range, now and then one beyond it.
func (w *world) someAddr() netip.Addr {
	if w.rnd.IntN(5) == 0 {
		return w.addr(8 + w.rnd.IntN(4)) // beyond the range: another node's
	}
	return w.addr(w.rnd.IntN(8))
}

func (w *world) handle(mac net.HardwareAddr, broadcast bool, src netip.Addr, typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) (Reply, []LeaseChange) {
	if gen := w.idGen[string(mac)]; gen == 0 && mac[5]%2 == 0 {
		// Half the clients send a client identifier (option 61), as
		// systemd-networkd and Windows do: the server keys their leases
		// by it.
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientIdentifier(append([]byte{0xff, 0, 0, 0, 1}, mac...))))
	} else if gen > 0 && (int(mac[5])+gen)%3 != 0 {
		// A new one since (a DUID made at a reboot); or none (a
		// firmware's client).
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClientIdentifier(append([]byte{0xff, 0, 0, byte(gen), 1}, mac...))))
	}
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithMessageType(typ), dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.srv.Handle(w.now, Request{Segment: w.cfg.ID, SrcMAC: mac, SrcIP: src, Broadcast: broadcast, Msg: m, Unwritable: w.unwritable})
}

func (w *world) step(i int) {
	if w.imports != nil && w.imports.IntN(25) == 0 {
		w.importLease()
	}
	mac := w.macs[w.rnd.IntN(len(w.macs))]
	k := string(mac)
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(w.cfg.HostIP.Addr().AsSlice())))
	reqIP := func(a netip.Addr) dhcpv4.Modifier {
		return dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(a.AsSlice()))
	}
	ci := func(a netip.Addr) dhcpv4.Modifier { return dhcpv4.WithClientIP(net.IP(a.AsSlice())) }
	if w.rnd.IntN(40) == 0 {
		// The client changes identifier; it may still remember its
		// address (INIT-REBOOT) and offer.
		w.idGen[k]++
		w.logf("%s new client identifier (%d)", mac, w.idGen[k])
	}
	switch op := w.rnd.IntN(100); {
	case op < 22:
		mods := []dhcpv4.Modifier{}
		if w.rnd.IntN(4) == 0 {
			mods = append(mods, reqIP(w.someAddr()))
		}
		rapid := w.rnd.IntN(8) == 0
		if rapid {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionRapidCommit, nil)))
		}
		w.logf("%s DISCOVER rapid=%v", mac, rapid)
		rep, ch := w.handle(mac, true, netip.Addr{}, dhcpv4.MessageTypeDiscover, mods...)
		if a, ok := w.answered(mac, rep, ch); ok && rep.Msg.MessageType() == dhcpv4.MessageTypeOffer {
			w.offered[k] = a
		}
	case op < 42: // SELECTING: the offer taken, or now and then another address
		a, ok := w.offered[k]
		if !ok || w.rnd.IntN(6) == 0 {
			a = w.someAddr()
		}
		mods := []dhcpv4.Modifier{sid, reqIP(a)}
		if w.rnd.IntN(10) == 0 {
			mods[0] = dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP{10, 9, 0, 254})) // chose another server
		}
		w.logf("%s REQUEST selecting %s", mac, a)
		rep, ch := w.handle(mac, true, netip.Addr{}, dhcpv4.MessageTypeRequest, mods...)
		delete(w.offered, k)
		w.answered(mac, rep, ch)
	case op < 52: // INIT-REBOOT: what it had, or an address it remembers wrongly
		a, ok := w.has[k]
		if !ok || w.rnd.IntN(4) == 0 {
			a = w.someAddr()
		}
		w.logf("%s REQUEST init-reboot %s", mac, a)
		rep, ch := w.handle(mac, true, netip.Addr{}, dhcpv4.MessageTypeRequest, reqIP(a))
		w.checkNotHeard(mac, a, rep)
		w.answered(mac, rep, ch)
	case op < 64: // RENEWING (unicast) or REBINDING (broadcast)
		a, ok := w.has[k]
		if !ok {
			a = w.someAddr()
		}
		bc := w.rnd.IntN(3) == 0
		w.logf("%s REQUEST ciaddr %s broadcast=%v", mac, a, bc)
		rep, ch := w.handle(mac, bc, a, dhcpv4.MessageTypeRequest, ci(a))
		w.answered(mac, rep, ch)
	case op < 68:
		a, ok := w.has[k]
		if !ok {
			return
		}
		w.logf("%s RELEASE %s", mac, a)
		_, ch := w.handle(mac, false, a, dhcpv4.MessageTypeRelease, sid, ci(a))
		delete(w.has, k)
		w.changes(ch)
	case op < 70:
		a, ok := w.has[k]
		if !ok {
			return
		}
		w.logf("%s DECLINE %s", mac, a)
		_, ch := w.handle(mac, true, netip.Addr{}, dhcpv4.MessageTypeDecline, sid, reqIP(a))
		delete(w.has, k)
		if len(ch) > 0 {
			if _, static := w.reservedFor(a); !static {
				// One quarantine per MAC and probation: a second DECLINE
				// only ends the lease.
				if until, ok := w.declinedBy[k]; !ok || !w.now.Before(until) {
					w.declined[a] = w.now.Add(w.cfg.DeclineProbation)
					w.declinedBy[k] = w.declined[a]
				}
			}
		}
		w.changes(ch)
	case op < 76: // a reservation set, moved or removed
		a := w.addr(w.rnd.IntN(8))
		for m, r := range w.reserved {
			if r == a {
				delete(w.reserved, m)
			}
		}
		if w.rnd.IntN(3) == 0 {
			delete(w.reserved, k)
			w.logf("%s reservation removed", mac)
		} else {
			w.reserved[k] = a
			w.logf("%s reserved %s", mac, a)
		}
		if w.reserved[k] == a && w.rnd.IntN(2) == 0 {
			// Ahead of the store, as admission does; the next line sets
			// them all, as the next Sync does.
			if ch, err := w.srv.Reserve(w.now, w.cfg.ID, Reservation{MAC: mac, IP: a}, 0); err == nil {
				w.superseded(ch, true)
			}
		}
		w.setReservations(true)
	case op < 80: // the interlock put on or lifted
		if w.held[k] {
			delete(w.held, k)
		} else {
			w.held[k] = true
		}
		w.logf("%s held=%v", mac, w.held[k])
		due, err := w.srv.setHeld(w.now, w.cfg.ID, w.heldMACs())
		if err != nil {
			w.t.Fatal(err)
		}
		w.changes(due)
	case op < 83: // the operator deletes a lease
		// The operator deletes the object of mac's lease as stored:
		// what it names may have passed on since (another address, or
		// the address to another client), and then nothing is released.
		a := w.addr(w.rnd.IntN(8))
		if b, ok := w.durable[k]; ok && w.rnd.IntN(2) == 0 {
			a = b.ip
		}
		w.logf("operator deletes %s's lease of %s", mac, a)
		c, err := w.srv.Release(w.now, w.cfg.ID, mac, a)
		if err == nil {
			if c.Lease.IP != a || !bytes.Equal(c.Lease.MAC, mac) {
				w.t.Fatalf("deleting %s's lease of %s released %s of %s\n%s", mac, a, c.Lease.IP, c.Lease.MAC, w.trail())
			}
			w.changes([]LeaseChange{c})
		}
	case op < 96: // time passes; the sweep runs
		d := time.Duration(1+w.rnd.IntN(40*60)) * time.Second
		w.now = w.now.Add(d)
		w.logf("+%v, expire", d)
		w.changes(w.srv.Expire(w.now))
		for a, until := range w.declined {
			if !w.now.Before(until) {
				delete(w.declined, a)
			}
		}
	case op < 97: // other nodes' objects change: addresses held elsewhere
		w.away = nil
		for range w.rnd.IntN(4) {
			h := Holding{IP: w.addr(w.rnd.IntN(12)), Held: w.rnd.IntN(4) == 0} // .10-.21: the range and beyond
			if w.rnd.IntN(2) == 0 {
				h.MAC = w.macs[w.rnd.IntN(len(w.macs))] // a guest that is there now (a VM moving)
			} else {
				h.MAC = net.HardwareAddr{0x52, 0x54, 0, 0x77, 0, byte(w.rnd.IntN(4))}
			}
			if b, ok := w.heldHere(h.IP); ok && b != string(h.MAC) {
				continue // admission refuses a second lease of an address
			}
			w.away = append(w.away, h)
		}
		w.logf("held elsewhere %v", w.away)
		if err := w.srv.SetElsewhere(w.cfg.ID, w.away); err != nil {
			w.t.Fatal(err)
		}
	case op < 98: // the operator grows or shrinks the range
		end := w.addr(3 + w.rnd.IntN(5))
		w.logf("range end %s", end)
		cfg := w.cfg
		cfg.RangeEnd = end
		ch, err := w.srv.setSegment(cfg)
		if err != nil {
			w.t.Fatal(err)
		}
		w.cfg = cfg
		w.changes(ch)
		w.offered = map[string]netip.Addr{}
		for a := range w.declined {
			if !w.inRange(a) {
				delete(w.declined, a) // and back in the pool if the range grows again
			}
		}
		w.setReservations(true) // the next Sync sets the store's, in range or not
	default:
		w.logf("restart")
		w.restart(true)
	}
	if len(w.pending) > 0 && w.rnd.IntN(3) == 0 {
		w.persist()
	}
	w.checkLeases()
}

// importLease is the operator applying a dynamic lease of a MAC at an
// address of the range (or the one it holds): what admission lets
// through (no other MAC's stored lease or reservation has the address)
// reaches Import, which binds it unless the address is in use, in
// probation or its MAC's ACK is in flight. The client is not told: its
// next renewal of what it had is NAKed.
func (w *world) importLease() {
	mac := w.macs[w.imports.IntN(len(w.macs))]
	k := string(mac)
	a := w.addr(w.imports.IntN(8))
	if b, ok := w.durable[k]; ok && w.imports.IntN(3) == 0 {
		a = b.ip
	}
	if m, ok := w.heldHere(a); ok && m != k {
		return // admission refuses it: the address is another MAC's stored lease
	}
	if m, ok := w.reservedFor(a); ok && m != k {
		return // admission refuses it: reserved for another MAC
	}
	if _, ok := w.reserved[k]; ok {
		return // admission refuses it: the MAC is reserved
	}
	c, err := w.srv.Import(w.now, w.cfg.ID, Lease{IP: a, MAC: mac, Expires: w.now.Add(w.cfg.LeaseTime)}, false)
	w.logf("operator applies %s's dynamic lease of %s: %v", mac, a, err)
	if err != nil {
		_, pending := w.unpersisted[k]
		until, probation := w.declined[a]
		elsewhere := slices.ContainsFunc(w.away, func(h Holding) bool { return h.IP == a && !bytes.Equal(h.MAC, mac) })
		if !errors.Is(err, ErrInFlight) && !(probation && w.now.Before(until)) && !elsewhere && w.inRange(a) {
			w.t.Errorf("importing %s of %s refused: %v, with nothing holding it (ACK in flight %v)", a, mac, err, pending)
		}
		return
	}
	if until, ok := w.declined[a]; ok && w.now.Before(until) {
		w.t.Errorf("imported %s for %s in its DECLINE probation (until %v)", a, mac, until)
	}
	if c.Kind != Bound || c.Lease.IP != a || !bytes.Equal(c.Lease.MAC, mac) {
		w.t.Errorf("importing %s of %s: change %+v", a, mac, c)
	}
	w.changes([]LeaseChange{c})
	// Durable as it returns: the manager journals it before `apply`
	// returns, so an ACK may reuse it.
	delete(w.unpersisted, k)
	w.checkLeases()
}

// heldHere returns the MAC whose lease the changes say holds a.
func (w *world) heldHere(a netip.Addr) (string, bool) {
	for m, b := range w.durable {
		if b.ip == a {
			return m, true
		}
	}
	return "", false
}

func (w *world) reservedFor(a netip.Addr) (string, bool) {
	for m, r := range w.reserved {
		if r == a && w.inRange(a) {
			return m, true
		}
	}
	return "", false
}

// changes applies lease changes to what the store would hold.
func (w *world) changes(ch []LeaseChange) {
	for _, c := range ch {
		k := string(c.Lease.MAC)
		switch c.Kind {
		case Bound, Renewed:
			w.durable[k] = bound{c.Lease.IP, c.Lease.Expires, string(c.Lease.ClientID)}
			delete(w.probation, c.Lease.IP)
			if c.Seq != 0 {
				w.unpersisted[k] = c.Seq
				w.pending = append(w.pending, c)
			} else {
				w.pinned[k] = w.durable[k] // the operator's: durable as it is made
			}
		case Released, Expired, Declined:
			if c.Kind == Declined && !c.Until.IsZero() {
				w.probation[c.Lease.IP] = c.Until
			}
			delete(w.pinned, k)
			if b, ok := w.durable[k]; ok && b.ip == c.Lease.IP {
				delete(w.durable, k)
			} else {
				w.t.Errorf("%s change of %s for %s, which the changes do not hold", c.Kind, c.Lease.IP, c.Lease.MAC)
			}
		}
		w.logf("  change %s %s %s", c.Kind, c.Lease.MAC, c.Lease.IP)
	}
}

// answered checks a reply to mac and applies its changes; it returns the
// address of an OFFER or ACK.
func (w *world) answered(mac net.HardwareAddr, rep Reply, ch []LeaseChange) (netip.Addr, bool) {
	k := string(mac)
	if rep.Msg == nil {
		w.logf("  no reply (%v)", rep.Ignored)
		w.changes(ch)
		return netip.Addr{}, false
	}
	typ := rep.Msg.MessageType()
	a, _ := netip.AddrFromSlice(rep.Msg.YourIPAddr.To4())
	w.logf("  %s %s", typ, a)
	switch typ {
	case dhcpv4.MessageTypeNak:
		delete(w.has, k)
		w.changes(ch)
		return netip.Addr{}, false
	case dhcpv4.MessageTypeAck:
		var mine []LeaseChange
		for _, c := range ch {
			if (c.Kind == Bound || c.Kind == Renewed) && c.Lease.IP == a && string(c.Lease.MAC) == k {
				mine = append(mine, c)
			}
		}
		if !rep.Durable && len(ch) == 0 {
			w.checkReused(mac, a, rep)
		} else if rep.Unwritten {
			w.checkUnwritten(mac, a, rep, mine)
		} else if len(mine) != 1 || !rep.Durable || !mine[0].Lease.Expires.Equal(w.now.Add(w.cfg.LeaseTime)) {
			w.t.Errorf("ACK of %s to %s: durable=%v with changes %+v; want one Bound or Renewed of it expiring in %v", a, mac, rep.Durable, ch, w.cfg.LeaseTime)
		}
	}
	w.checkGiven(mac, a, typ)
	w.changes(ch)
	if typ == dhcpv4.MessageTypeAck {
		w.has[k] = a
		if !w.inRange(a) {
			w.migrated[k] = true
		}
	}
	return a, true
}

// checkNotHeard checks the reply to an INIT-REBOOT of mac for a: in a
// shared network, one for an address beyond the range that no binding
// here holds and no other node's object names, from a MAC no other
// node's object names, gets no reply (IgnoreNotHeard); every other gets
// its ACK or NAK.
func (w *world) checkNotHeard(mac net.HardwareAddr, a netip.Addr, rep Reply) {
	_, here := w.heldHere(a)
	named := slices.ContainsFunc(w.away, func(h Holding) bool { return h.IP == a || bytes.Equal(h.MAC, mac) })
	unheard := w.cfg.Shared && !w.inRange(a) && !here && !named
	if silent := rep.Msg == nil && rep.Ignored == IgnoreNotHeard; silent != unheard {
		w.t.Errorf("INIT-REBOOT of %s for %s: no reply as not heard of %v, want %v (shared %v, in range %v, bound here %v, named elsewhere %v)",
			mac, a, silent, unheard, w.cfg.Shared, w.inRange(a), here, named)
	}
	if rep.Msg == nil && rep.Ignored != IgnoreNotHeard {
		w.t.Errorf("INIT-REBOOT of %s for %s: no reply (%v)", mac, a, rep.Ignored)
	}
}

// checkReused checks an ACK that reused a lease: reuse is on, the lease
// is mac's, its last change persisted, and the ACK gives no more time
// than it has left.
func (w *world) checkReused(mac net.HardwareAddr, a netip.Addr, rep Reply) {
	k := string(mac)
	b, ok := w.durable[k]
	secs := binary.BigEndian.Uint32(rep.Msg.Options.Get(dhcpv4.OptionIPAddressLeaseTime))
	switch {
	case w.cfg.ReuseThreshold == 0:
		w.t.Errorf("ACK of %s to %s without a change, and reuse is off", a, mac)
	case !ok || b.ip != a:
		w.t.Errorf("ACK of %s to %s without a change: the changes give it %v", a, mac, b.ip)
	case w.unpersisted[k] != 0:
		w.t.Errorf("ACK of %s to %s reused a lease whose change (seq %d) is not persisted", a, mac, w.unpersisted[k])
	case w.now.Add(time.Duration(secs) * time.Second).After(b.expires):
		w.t.Errorf("ACK of %s to %s for %d s: past the stored expiry %v", a, mac, secs, b.expires.Sub(t0))
	case w.now.Sub(b.expires.Add(-w.cfg.LeaseTime)) >= time.Duration(w.cfg.ReuseThreshold*float64(w.cfg.LeaseTime)):
		w.t.Errorf("ACK of %s to %s reused a lease bound %v ago, past the threshold", a, mac, w.now.Sub(b.expires.Add(-w.cfg.LeaseTime)))
	}
	for _, h := range w.away {
		if string(h.MAC) == k {
			w.t.Errorf("ACK of %s to %s reused a lease while another node's object names the MAC", a, mac)
		}
	}
	w.reused++
	w.logf("  (reused, %d s left)", secs)
}

// checkUnwritten checks an ACK sent while persists failed: it came with
// the lease's change to write, and gives no more time than mac's
// persisted lease of a has left.
func (w *world) checkUnwritten(mac net.HardwareAddr, a netip.Addr, rep Reply, mine []LeaseChange) {
	p, ok := w.pinned[string(mac)]
	secs := binary.BigEndian.Uint32(rep.Msg.Options.Get(dhcpv4.OptionIPAddressLeaseTime))
	switch {
	case !w.unwritable:
		w.t.Errorf("ACK of %s to %s as unwritten, and the last persist did not fail", a, mac)
	case rep.Durable || len(mine) != 1 || !mine[0].Lease.Expires.Equal(w.now.Add(w.cfg.LeaseTime)):
		w.t.Errorf("unwritten ACK of %s to %s: durable=%v with changes %+v; want one to write, not waited for", a, mac, rep.Durable, mine)
	case !ok || p.ip != a:
		w.t.Errorf("unwritten ACK of %s to %s: its persisted lease is %v", a, mac, p.ip)
	case w.now.Add(time.Duration(secs) * time.Second).After(p.expires):
		w.t.Errorf("unwritten ACK of %s to %s for %d s: past its persisted expiry %v", a, mac, secs, p.expires.Sub(t0))
	}
	w.unwritten++
	w.logf("  (unwritten, %d s left)", secs)
}

// persist ends the pending persists: most succeed (Persisted, after the
// lease database's records), some fail (their leases stay bound, not
// reusable until a newer change persists, and ACKs are unwritten until
// the next persist succeeds).
func (w *world) persist() {
	ok := w.rnd.IntN(8) != 0
	w.logf("persist %d changes ok=%v", len(w.pending), ok)
	w.unwritable = !ok
	if ok {
		for _, c := range w.pending {
			w.srv.SetRecords(c.Segment, Record{Lease: c.Lease, Kind: c.Kind, At: c.At, Seq: c.Seq})
			if k := string(c.Lease.MAC); w.durable[k].ip == c.Lease.IP {
				w.pinned[k] = bound{c.Lease.IP, c.Lease.Expires, string(c.Lease.ClientID)}
			}
		}
		w.srv.Persisted(w.pending)
		for _, c := range w.pending {
			if k := string(c.Lease.MAC); w.unpersisted[k] == c.Seq {
				delete(w.unpersisted, k)
			}
		}
	}
	w.pending = nil
}

// checkGiven checks an address offered or ACKed to mac against the
// state before the reply's changes.
func (w *world) checkGiven(mac net.HardwareAddr, a netip.Addr, typ dhcpv4.MessageType) {
	k := string(mac)
	ownAway, heldAway := false, false
	for _, h := range w.away {
		if string(h.MAC) == k {
			ownAway = ownAway || h.IP == a
			heldAway = heldAway || h.Held
		} else if h.IP == a {
			w.t.Errorf("%s of %s to %s: %s holds it on another node", typ, a, mac, h.MAC)
		}
	}
	if heldAway {
		w.t.Errorf("%s of %s to %s, whose lease the interlock holds on another node", typ, a, mac)
	}
	if b, ok := w.durable[k]; !w.inRange(a) && !(ok && b.ip == a) && !ownAway {
		// (A lease the interlock held through a shrink of the range
		// keeps its address, and is renewed there while the server has
		// it; a client brought from another node's range keeps its.)
		w.t.Errorf("%s of %s to %s: outside the range", typ, a, mac)
	}
	if m, ok := w.reservedFor(a); ok && m != k {
		w.t.Errorf("%s of %s to %s: reserved for %s", typ, a, mac, net.HardwareAddr(m))
	}
	if r, ok := w.reservation(k); ok && r != a {
		w.t.Errorf("%s of %s to %s, whose reservation is %s", typ, a, mac, r)
	}
	if until, ok := w.declined[a]; ok && w.now.Before(until) {
		w.t.Errorf("%s of %s to %s: declined, in probation until %v", typ, a, mac, until.Sub(t0))
	}
	for m, b := range w.durable {
		if m != k && b.ip == a && (w.now.Before(b.expires) || w.held[m]) {
			w.t.Errorf("%s of %s to %s: %s holds it until %v", typ, a, mac, net.HardwareAddr(m), b.expires.Sub(t0))
		}
	}
}

// checkLeases: the server's leases are the ones the changes describe.
func (w *world) checkLeases() {
	var want []string
	for m, b := range w.durable {
		want = append(want, fmt.Sprintf("%s %s %v", net.HardwareAddr(m), b.ip, b.expires.Sub(t0)))
	}
	var got []string
	for _, l := range w.srv.Leases(w.cfg.ID) {
		got = append(got, fmt.Sprintf("%s %s %v", l.MAC, l.IP, l.Expires.Sub(t0)))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		w.t.Errorf("server's leases\n  %v\nthe changes describe\n  %v", got, want)
	}
	// The count of each MAC's OFFERs (Segment.OffersPerMAC) is its
	// offers in the tables.
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	st := w.srv.segs[w.cfg.ID]
	offers := map[string]int{}
	for id, l := range st.byID {
		if l.offered {
			offers[string(l.MAC)]++
		}
		// One record per address, identity and MAC: an offer recorded
		// over a bound lease frees its address when it lapses.
		if st.byIP[l.IP] != l {
			w.t.Errorf("%s's %x of %s (offered=%v) is not the address table's (%+v)", net.HardwareAddr(l.MAC), id, l.IP, l.offered, st.byIP[l.IP])
		}
		if !l.offered && st.byMAC[string(l.MAC)] != l {
			w.t.Errorf("%s's bound lease of %s is not the MAC table's", l.MAC, l.IP)
		}
	}
	if len(st.byIP) != len(st.byID) {
		w.t.Errorf("%d addresses recorded, %d identities", len(st.byIP), len(st.byID))
	}
	if !maps.Equal(offers, st.offersBy) {
		w.t.Errorf("offers by MAC counted %v, the tables hold %v\n%s", st.offersBy, offers, w.trail())
	}
	for m, n := range offers {
		if n > max(1, w.cfg.OffersPerMAC) {
			w.t.Errorf("%s holds %d offers, more than %d", net.HardwareAddr(m), n, max(1, w.cfg.OffersPerMAC))
		}
	}
}
