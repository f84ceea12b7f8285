// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/leasedb"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// TestRandomLedger drives the DHCP server, the ledger and the lease
// database together with seeded random sequences of what the world does
// to them: DORA, renewals, RELEASE, DECLINE, the operator's deletions of
// server-made leases, reservations applied and deleted (through the
// admission hook, as pivirtctl does), the clock running past expiries,
// the writer storing what is pending, the guard's sync of pv_leases
// from the store, and kill -9 and a restart (from its own random stream,
// so a seed's other steps stay as they were). After every step:
//   - the database binds exactly what the server binds (MAC, address,
//     expiry): the server is not a second truth;
//   - pv_leases, after the guard's sync, is the database's projection;
//   - a restart keeps every live binding as it was (no ACKed lease lost,
//     none brought back);
//   - with edits on, the operator also turns the server's leases into
//     reservations by editing them (type: static under the same name),
//     and such a reservation stays as the operator wrote it: nothing of
//     the server's overwrites or deletes it.
//
// PIVIRT_LEDGER_SEED runs one seed, with edits; PIVIRT_LEDGER_STEPS sets
// the length.
func TestRandomLedger(t *testing.T) {
	type run struct {
		seed  uint64
		steps int
		edits bool // the operator edits leases into reservations (off: the seeds replay as they were found)
	}
	runs := []run{{1, 600, false}, {2, 600, false}, {3, 600, false}, {20261206, 600, false},
		{7010, 600, false},  // a refused ACK dropped, its MAC's older stored lease kept: loaded at the restart over a reservation
		{7021, 1100, false}, // the same, another order
		{1, 600, true}, {20261207, 600, true},
	}
	if v, err := strconv.ParseUint(os.Getenv("PIVIRT_LEDGER_SEED"), 10, 64); err == nil {
		runs = []run{{v, 600, true}}
	}
	if v, err := strconv.Atoi(os.Getenv("PIVIRT_LEDGER_STEPS")); err == nil {
		for i := range runs {
			runs[i].steps = v
		}
	}
	for _, r := range runs {
		name := fmt.Sprint(r.seed)
		if r.edits {
			name += "/edits"
		}
		t.Run(name, func(t *testing.T) { runLedger(t, r.seed, r.steps, r.edits) })
	}
}

type ledgerWorld struct {
	t     *testing.T
	f     *segmentFixture
	rnd   *rand.Rand
	crash *rand.Rand // when pivirtd is killed and restarted
	// starting: what the operator writes while a restarted pivirtd does
	// not serve the segment yet (writeWhileStarting).
	starting *rand.Rand
	now      time.Time
	pins     *memLeases
	macs     []net.HardwareAddr
	trail    []string
	// synced: the last step was the guard's sync of pv_leases.
	synced bool
	// reserved: the reservations' entries the guard's last sync wrote.
	reserved map[leasemap.Key]leasemap.Value
	// edits (nil: off) is when the operator edits a server-made lease
	// into a reservation; edited is, by MAC, the address of each such
	// reservation the store took and the operator has not changed since.
	edits  *rand.Rand
	edited map[string]netip.Addr
}

func runLedger(t *testing.T, seed uint64, steps int, edits bool) {
	f := newSegmentFixture(t)
	w := &ledgerWorld{t: t, f: f, rnd: rand.New(rand.NewPCG(seed, seed^0x1ed6e2)), now: time.Now().Truncate(time.Second),
		crash: rand.New(rand.NewPCG(seed, seed^0xc4a54)), starting: rand.New(rand.NewPCG(seed, seed^0x57a27)), pins: &memLeases{m: map[leasemap.Key]leasemap.Value{}}}
	if edits {
		w.edits, w.edited = rand.New(rand.NewPCG(seed, seed^0xed17)), map[string]netip.Addr{}
	}
	f.m.Now = func() time.Time { return w.now }
	f.m.Leases = w.pins
	f.m.Events = events.NewRecorder(5)
	if err := f.m.ledger.recoverDB(); err != nil { // the writer is run by hand (a step)
		t.Fatal(err)
	}
	defer func() { w.f.m.ledger.db.Close() }()
	for i := range 8 {
		w.macs = append(w.macs, net.HardwareAddr{0x52, 0x54, 0, 0x55, 0, byte(i + 1)})
	}
	restarts := 0
	for step := 1; step <= steps; step++ {
		var bad []string
		if w.crash.IntN(40) == 0 {
			bad = w.restart()
			restarts++
		} else {
			w.step()
		}
		if w.edits != nil && w.edits.IntN(15) == 0 {
			w.editIntoReservation()
		}
		if bad = append(bad, w.violations()...); len(bad) > 0 {
			t.Fatalf("seed %d, step %d: %s\nlast steps:\n  %s", seed, step, strings.Join(bad, "\n"), strings.Join(w.trail[max(0, len(w.trail)-trailLen()):], "\n  "))
		}
	}
	if steps >= 400 && restarts == 0 {
		t.Fatalf("no restart in %d steps", steps)
	}
}

// trailLen is how many steps a failure shows (PIVIRT_LEDGER_TRAIL).
func trailLen() int {
	if n, err := strconv.Atoi(os.Getenv("PIVIRT_LEDGER_TRAIL")); err == nil {
		return n
	}
	return 25
}

// restart kills pivirtd (-9: no writer run, offers lost; the store,
// the lease database's directory and pv_leases stay) and starts it again
// as the daemon does: Recover's catch-up, then the segment's Sync from a
// snapshot of the store. It returns the live bindings it did not keep.
func (w *ledgerWorld) restart() []string {
	w.logf("kill -9 pivirtd, start it again")
	before := w.live()
	declined := w.f.m.srv.Probations(w.f.cfg.ID)
	f := w.f
	held := f.m.ledger.segmentsByID()[f.cfg.ID].held
	f.m.ledger.db.Close()
	m, _ := newManager(w.t, f.st, f.ix, f.dir)
	m.Now, m.Leases, m.Events = f.m.Now, w.pins, events.NewRecorder(5)
	f.m = m
	f.ix.BeforeCommit, f.ix.AfterCommit = m.BeforeCommit, m.AfterCommit
	if err := m.ledger.recoverDB(); err != nil {
		w.t.Fatal(err)
	}
	ctx := context.Background()
	m.ledger.exp.catchUp(ctx)
	// A change the store refuses at the catch-up is resolved by its rule,
	// as the writer would have (TestJournalRefusalsNeverJam's ground): the
	// MAC's binding is the rule's, not the one before.
	exempt := map[string]bool{}
	for _, hw := range w.macs {
		if len(m.Events.Events(pivirtv1.KindDHCPLease, LeaseName(hw))) > 0 {
			w.logf("  the store refused a change of %s's lease", hw)
			exempt[hw.String()] = true
		}
	}
	expect := w.writeWhileStarting(before, held, exempt)
	m.ledger.setSegments(map[uint32]segInfo{f.cfg.ID: {seg: f.seg, bridge: "br-vm", leaseTime: time.Hour, held: held}})
	objs, rev, err := f.st.List(ctx, pivirtv1.KindDHCPLease, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	snap := reconcile.Snapshot{Revision: rev, Objects: map[string][]*pivirtv1.Object{pivirtv1.KindDHCPLease: objs},
		Decode: func(o *pivirtv1.Object) (pivirtv1.Spec, error) { return o.DefaultedSpec() }}
	var heldMACs []net.HardwareAddr
	heldNames := map[string]bool{}
	for mac := range held {
		hw, _ := net.ParseMAC(mac)
		heldMACs = append(heldMACs, hw)
		heldNames[LeaseName(hw)] = true
	}
	in := server.Input{Segment: f.cfg, Reservations: segmentReservations(f.seg, objs, snap), Revision: rev, Held: heldMACs}
	start := m.startInput(f.seg, in, objs, snap, heldNames)
	if os.Getenv("DBG") != "" {
		for _, o := range objs {
			w.logf("  DBG store %s %s", o.Metadata.Name, o.Spec)
		}
		for _, c := range m.ledger.db.Bindings(f.cfg.ID) {
			w.logf("  DBG db %s %s %v static=%v fromstore=%v seq=%d", c.MAC, c.IP, c.Expires, c.Static, c.FromStore, c.Seq)
		}
		w.logf("  DBG static=%v dynamic=%v moved=%v pending=%v", start.static, start.dynamic, start.moved, m.ledger.db.Pending())
	}
	// The binding of a reservation that moved to another address since
	// is not given back (reservationBindings).
	for _, r := range in.Reservations {
		if b, ok := before[r.MAC.String()]; ok && !strings.HasPrefix(b, r.IP.String()+" ") {
			w.logf("  %s's reservation moved to %s: its binding %s goes", r.MAC, r.IP, b)
			exempt[r.MAC.String()] = true
		}
	}
	if _, err := m.srv.Apply(m.now(), in); err != nil { // a new segment: nothing changes
		w.t.Fatal(err)
	}
	m.loadTables(ctx, infoOf(f.seg, held), f.cfg, start)
	after := w.live()
	w.synced = false
	var bad []string
	for _, mac := range slices.Sorted(maps.Keys(expect)) {
		if want, got := expect[mac], after[mac]; (want == "") != (got == "") || !strings.HasPrefix(got, want) {
			bad = append(bad, fmt.Sprintf("%s: the operator's write while the segment was not served wants %q bound, the start bound %q", mac, want, got))
		}
	}
	for _, mac := range slices.Sorted(maps.Keys(before)) {
		if !exempt[mac] && after[mac] != before[mac] {
			bad = append(bad, fmt.Sprintf("%s: bound %q before the restart, %q after", mac, before[mac], after[mac]))
		}
	}
	for _, mac := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[mac]; !ok && !exempt[mac] {
			bad = append(bad, fmt.Sprintf("%s: bound %q after the restart, nothing before", mac, after[mac]))
		}
	}
	// A DECLINE's probation outlives the restart, unless the address is
	// bound or reserved now (Load skips those).
	inUse := map[string]bool{}
	for _, b := range after {
		inUse[strings.Fields(b)[0]] = true
	}
	for _, r := range in.Reservations {
		inUse[r.IP.String()] = true
	}
	probations := m.srv.Probations(f.cfg.ID)
	for ip, until := range declined {
		if w.now.Before(until) && !inUse[ip.String()] && !probations[ip].Equal(until) {
			bad = append(bad, fmt.Sprintf("%s: on probation until %v before the restart, %v after", ip, until, probations[ip]))
		}
	}
	return bad
}

// writeWhileStarting has the operator delete leases or apply dynamic
// ones while the restarted pivirtd does not serve the segment yet (its
// own random stream, so the fixed seeds replay as before): no
// BeforeCommit delivers them, and the segment's start must take them in.
// It returns, by MAC, the binding each wants after the start (an address
// and a space; "": none), and marks those MACs exempt from "a restart
// keeps every binding".
func (w *ledgerWorld) writeWhileStarting(before map[string]string, held, exempt map[string]bool) map[string]string {
	expect := map[string]string{}
	if w.starting == nil {
		return expect
	}
	ctx := context.Background()
	objs, _, err := w.f.st.List(ctx, pivirtv1.KindDHCPLease, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	taken := map[string]string{} // address -> the MAC a stored lease or a binding gives it
	for _, o := range objs {
		if s, err := o.DefaultedSpec(); err == nil {
			l := s.(*pivirtv1.DHCPLeaseSpec)
			taken[l.IPAddress] = strings.ToLower(l.MACAddress)
		}
	}
	for mac, b := range before {
		taken[strings.Fields(b)[0]] = mac
	}
	for ip := range w.f.m.ledger.db.Probations(w.f.cfg.ID) {
		taken[ip.String()] = "declined"
	}
	for range w.starting.IntN(3) {
		mac := w.macs[w.starting.IntN(len(w.macs))]
		if _, err := w.f.st.Get(ctx, pivirtv1.KindDHCPLease, resName(mac)); err == nil || held[mac.String()] || w.edited[mac.String()].IsValid() {
			continue // its reservation binds it; admission refuses both writes of a held lease
		}
		deleting := w.starting.IntN(2) == 0
		if c, live, known := w.f.m.ledger.db.Lookup(w.f.cfg.ID, mac); !deleting && known && !live && c.Static {
			// Not followed (followStore): a reservation's binding is never
			// stored, so a stored lease of its MAC may predate its end.
			continue
		}
		exempt[mac.String()] = true
		if deleting {
			w.logf("  while the segment is not served: operator deletes %s", LeaseName(mac))
			if _, err := w.f.ix.Update(ctx, w.f.st, admission.Options{}, func(b *admission.Batch) error {
				_, err := b.Delete(pivirtv1.KindDHCPLease, LeaseName(mac), "")
				return err
			}); err == nil {
				expect[mac.String()] = ""
			}
			continue
		}
		ip := w.f.seg.Range.Start
		for range w.starting.IntN(40) {
			ip = ip.Next()
		}
		if who, ok := taken[ip.String()]; ok && who != mac.String() || !w.f.seg.InRange(ip) {
			continue
		}
		w.logf("  while the segment is not served: operator applies %s -> %s", LeaseName(mac), ip)
		o := decodeYAML(w.t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+LeaseName(mac)+`},
			spec: {network: br-vm, macAddress: "`+mac.String()+`", ipAddress: `+ip.String()+`, type: dynamic, expiresAt: "`+w.now.Add(time.Hour).UTC().Format(time.RFC3339)+`"}}`)
		if _, err := w.f.ix.Update(ctx, w.f.st, admission.Options{}, func(b *admission.Batch) error { _, _, err := b.Apply(o); return err }); err != nil {
			w.logf("    refused: %v", err)
			continue
		}
		taken[ip.String()] = mac.String()
		expect[mac.String()] = ip.String() + " "
	}
	return expect
}

// live is what the server binds and serves now (not expired, or held),
// by MAC.
func (w *ledgerWorld) live() map[string]string {
	held := w.f.m.ledger.segmentsByID()[w.f.cfg.ID].held
	out := map[string]string{}
	for _, l := range w.f.m.srv.Leases(w.f.cfg.ID) {
		if w.now.Before(l.Expires) || held[l.MAC.String()] {
			out[l.MAC.String()] = fmt.Sprint(l.IP, " ", l.Expires.Unix())
		}
	}
	return out
}

func (w *ledgerWorld) logf(format string, a ...any) {
	w.trail = append(w.trail, fmt.Sprintf(format, a...))
}

// handle runs one client message through the server and, as the
// responder does, persists its changes before the reply would leave.
func (w *ledgerWorld) handle(mac net.HardwareAddr, typ dhcpv4.MessageType, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	msg, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(typ)}, mods...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	rep, changes := w.f.m.srv.Handle(w.now, server.Request{Segment: w.f.cfg.ID, SrcMAC: mac, Msg: msg, Broadcast: true})
	w.persist(changes)
	if rep.Msg != nil {
		w.logf("  %s %s", rep.Msg.MessageType(), rep.Msg.YourIPAddr)
	}
	return rep.Msg
}

func (w *ledgerWorld) persist(changes []server.LeaseChange) {
	if len(changes) == 0 {
		return
	}
	if err := w.f.m.ledger.Persist(context.Background(), changes); err != nil {
		w.t.Fatal(err)
	}
	w.f.m.srv.Persisted(changes)
	for _, c := range changes {
		w.logf("  change %s %s %s", c.Kind, c.Lease.MAC, c.Lease.IP)
	}
}

func (w *ledgerWorld) bound(mac net.HardwareAddr) (server.Lease, bool) {
	for _, l := range w.f.m.srv.Leases(w.f.cfg.ID) {
		if l.MAC.String() == mac.String() {
			return l, true
		}
	}
	return server.Lease{}, false
}

func (w *ledgerWorld) update(fn func(b *admission.Batch) error) error {
	_, err := w.f.ix.Update(context.Background(), w.f.st, admission.Options{}, fn)
	return err
}

// editIntoReservation has the operator edit the lease the server made
// for a bound MAC into a reservation, under its name (pivirtctl edit:
// type static), of its address or another one of the range. A held
// lease is edited at its own address only (admission refuses a
// reservation that supersedes a held lease; the model holds the lock in
// the segment, not where admission reads it).
func (w *ledgerWorld) editIntoReservation() {
	mac := w.macs[w.edits.IntN(len(w.macs))]
	l, bound := w.bound(mac)
	ip := w.f.seg.Range.Start
	for range w.edits.IntN(12) {
		ip = ip.Next()
	}
	if !bound || w.edited[mac.String()].IsValid() {
		return
	}
	if w.edits.IntN(2) == 0 || w.f.m.ledger.segmentsByID()[w.f.cfg.ID].held[mac.String()] {
		ip = l.IP
	}
	o := storedLease(w.t, w.f.st, LeaseName(mac))
	if o == nil || isReservation(mustSpec(w.t, o)) {
		return
	}
	w.logf("operator edits %s into a reservation of %s", LeaseName(mac), ip)
	w.synced = false // the store changed since the guard's sync
	delete(w.reserved, leasemap.NewKey(w.f.cfg.ID, [6]byte(mac)))
	r := decodeYAML(w.t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+LeaseName(mac)+`},
		spec: {network: br-vm, macAddress: "`+mac.String()+`", ipAddress: `+ip.String()+`, type: static}}`)
	if err := w.update(func(b *admission.Batch) error { _, _, err := b.Apply(r); return err }); err != nil {
		w.logf("  refused: %v", err)
		return
	}
	w.edited[mac.String()] = ip
}

func (w *ledgerWorld) step() {
	ctx := context.Background()
	w.synced = false
	mac := w.macs[w.rnd.IntN(len(w.macs))]
	srvID := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(w.f.cfg.HostIP.Addr().AsSlice()))
	switch n := w.rnd.IntN(100); {
	case n < 30:
		w.logf("DORA %s", mac)
		if offer := w.handle(mac, dhcpv4.MessageTypeDiscover); offer != nil {
			w.handle(mac, dhcpv4.MessageTypeRequest, srvID, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)))
		}
	case n < 45:
		if l, ok := w.bound(mac); ok {
			w.logf("renew %s %s", mac, l.IP)
			w.handle(mac, dhcpv4.MessageTypeRequest, dhcpv4.WithClientIP(l.IP.AsSlice()))
		}
	case n < 52:
		if l, ok := w.bound(mac); ok {
			w.logf("release %s %s", mac, l.IP)
			w.handle(mac, dhcpv4.MessageTypeRelease, srvID, dhcpv4.WithClientIP(l.IP.AsSlice()))
		}
	case n < 55:
		if l, ok := w.bound(mac); ok {
			w.logf("decline %s %s", mac, l.IP)
			w.handle(mac, dhcpv4.MessageTypeDecline, srvID, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(l.IP.AsSlice())))
		}
	case n < 62 && w.heldStored(mac):
		w.logf("operator deletes %s: refused, the interlock holds it", LeaseName(mac))
	case n < 70 && w.heldStored(mac):
		w.logf("reserve %s: refused, it would supersede a lease the interlock holds", mac)
	case n < 62:
		w.logf("operator deletes %s", LeaseName(mac))
		if w.update(func(b *admission.Batch) error {
			_, err := b.Delete(pivirtv1.KindDHCPLease, LeaseName(mac), "")
			return err
		}) == nil {
			delete(w.edited, mac.String())
		}
	case n < 70:
		ip := w.f.seg.Range.Start
		for range w.rnd.IntN(12) {
			ip = ip.Next()
		}
		w.logf("reserve %s -> %s", mac, ip)
		delete(w.reserved, leasemap.NewKey(w.f.cfg.ID, [6]byte(mac))) // the guard's next pass writes it
		o := decodeYAML(w.t, `{apiVersion: pivirt.hu/v1, kind: DHCPLease, metadata: {name: `+resName(mac)+`},
			spec: {network: br-vm, macAddress: "`+mac.String()+`", ipAddress: `+ip.String()+`, type: static}}`)
		w.update(func(b *admission.Batch) error { _, _, err := b.Apply(o); return err })
	case n < 76:
		name := resName(mac)
		if w.edited[mac.String()].IsValid() {
			name = LeaseName(mac)
		}
		w.logf("unreserve %s (%s)", mac, name)
		delete(w.reserved, leasemap.NewKey(w.f.cfg.ID, [6]byte(mac)))
		if w.update(func(b *admission.Batch) error {
			_, err := b.Delete(pivirtv1.KindDHCPLease, name, "")
			return err
		}) == nil {
			delete(w.edited, mac.String())
		}
	case n < 80:
		w.hold(mac)
	case n < 84:
		d := time.Duration(1+w.rnd.IntN(90)) * time.Minute
		w.now = w.now.Add(d)
		w.logf("+%v, expire", d)
		w.persist(w.f.m.srv.Expire(w.now))
	case n < 94:
		w.logf("the writer stores what is pending, and compacts the database")
		if err := w.f.m.ledger.exp.export(ctx); err != nil {
			w.t.Fatal(err)
		}
		// Compacted at every pass (pivirtd: after 10,000 records): the
		// snapshot holds the bindings the server holds, and the journal
		// it covers is cut, so a restart shows what the snapshot missed.
		w.f.m.ledger.compactNow()
	default:
		w.logf("the guard syncs pv_leases from the store")
		w.guardSync()
	}
}

// hold puts the provisioning interlock on mac's lease or lifts it, as
// the manager's Sync does when a snapshot shows the lock changed: the
// segment's held set, the server's (whose releases held back are due
// now), then the pins of the leases it took or let go.
func (w *ledgerWorld) hold(mac net.HardwareAddr) {
	before := w.f.m.ledger.segmentsByID()
	si := before[w.f.cfg.ID]
	held := maps.Clone(si.held)
	if held == nil {
		held = map[string]bool{}
	}
	if held[mac.String()] {
		delete(held, mac.String())
		w.logf("unlock %s", mac)
	} else {
		held[mac.String()] = true
		w.logf("lock %s", mac)
	}
	si.held = held
	w.f.m.ledger.setSegments(map[uint32]segInfo{w.f.cfg.ID: si})
	var macs []net.HardwareAddr
	for m := range held {
		hw, _ := net.ParseMAC(m)
		macs = append(macs, hw)
	}
	objs, rev, err := w.f.st.List(context.Background(), pivirtv1.KindDHCPLease, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	snap := reconcile.Snapshot{Revision: rev, Decode: func(o *pivirtv1.Object) (pivirtv1.Spec, error) { return o.DefaultedSpec() }}
	a, err := w.f.m.srv.Apply(w.f.m.now(), server.Input{Segment: w.f.cfg, Reservations: segmentReservations(w.f.seg, objs, snap), Revision: rev, Held: macs})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.f.m.ledger.persistFromStore(a.Superseded); err != nil {
		w.t.Fatal(err)
	}
	w.persist(a.Changes)
	if err := w.f.m.ledger.repinHeld(before); err != nil {
		w.t.Fatal(err)
	}
}

// heldStored reports whether the interlock holds mac's lease and the
// store has it: admission refuses to delete it, or to apply a
// reservation that would supersede it (the model holds the lock in the
// segment's held set, not as the annotation admission reads).
func (w *ledgerWorld) heldStored(mac net.HardwareAddr) bool {
	if !w.f.m.ledger.segmentsByID()[w.f.cfg.ID].held[mac.String()] {
		return false
	}
	_, err := w.f.st.Get(context.Background(), pivirtv1.KindDHCPLease, LeaseName(mac))
	return err == nil
}

// mustSpec is o's decoded spec.
func mustSpec(t *testing.T, o *pivirtv1.Object) pivirtv1.Spec {
	t.Helper()
	s, err := o.DefaultedSpec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func resName(mac net.HardwareAddr) string { return "res-" + strings.ReplaceAll(mac.String(), ":", "") }

// guardSync runs the guard's full pass of pv_leases: compile the store's
// leases, project the lease database over them, write through GuardLeases.
func (w *ledgerWorld) guardSync() {
	leases := w.compiled()
	w.f.m.ProjectLeases(leases, nil, 0)
	if _, err := typed.Sync(w.f.m.GuardLeases(w.pins, 0), leases, compile.LeaseEqual); err != nil {
		w.t.Fatal(err)
	}
	w.synced = true
	w.reserved = map[leasemap.Key]leasemap.Value{}
	for k, v := range leases {
		if v.LeaseFlags()&guard.LeaseStatic != 0 {
			w.reserved[k] = v
		}
	}
}

// compiled is the pv_leases content compile derives from the store now.
func (w *ledgerWorld) compiled() map[leasemap.Key]leasemap.Value {
	objs, _, err := w.f.st.List(context.Background(), pivirtv1.KindDHCPLease, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	seg, err := w.f.st.Get(context.Background(), pivirtv1.KindNetworkSegment, "vm-net")
	if err != nil {
		w.t.Fatal(err)
	}
	return compile.Compile(append(objs, seg), compile.Host{}).Leases
}

// violations compares the server, the database and pv_leases, and the
// operator's edited reservations with the store.
func (w *ledgerWorld) violations() []string {
	var bad []string
	for _, mac := range slices.Sorted(maps.Keys(w.edited)) {
		hw, _ := net.ParseMAC(mac)
		o := storedLease(w.t, w.f.st, LeaseName(hw))
		var spec pivirtv1.DHCPLeaseSpec
		if o != nil {
			_ = json.Unmarshal(o.Spec, &spec)
		}
		if o == nil || !isReservation(mustSpec(w.t, o)) || spec.IPAddress != w.edited[mac].String() {
			bad = append(bad, fmt.Sprintf("the operator's reservation %s of %s: the store has %s %q", LeaseName(hw), w.edited[mac], spec.Type, spec.IPAddress))
		}
	}
	srv := map[string]string{}
	for _, l := range w.f.m.srv.Leases(w.f.cfg.ID) {
		srv[l.MAC.String()] = fmt.Sprint(l.IP, " ", l.Expires.Unix())
	}
	db := map[string]string{}
	for _, c := range w.f.m.ledger.db.Bindings(w.f.cfg.ID) {
		db[c.MAC.String()] = fmt.Sprint(c.IP, " ", c.Expires.Unix())
	}
	for _, mac := range slices.Sorted(maps.Keys(srv)) {
		if db[mac] != srv[mac] {
			bad = append(bad, fmt.Sprintf("%s: the server binds %q, the database %q", mac, srv[mac], db[mac]))
		}
	}
	for _, mac := range slices.Sorted(maps.Keys(db)) {
		if _, ok := srv[mac]; !ok {
			bad = append(bad, fmt.Sprintf("%s: the database binds %q, the server nothing", mac, db[mac]))
		}
	}
	// Without a reservation, a binding's pin follows the database at once
	// (the ACK path), and after the guard's sync every key the database
	// knows is pinned as its projection says.
	want := w.compiled()
	w.f.m.ProjectLeases(want, nil, 0)
	for _, c := range w.f.m.ledger.db.Bindings(w.f.cfg.ID) {
		k := leasemap.NewKey(w.f.cfg.ID, [6]byte(c.MAC))
		if v, ok := want[k]; ok && v.LeaseFlags()&guard.LeaseStatic != 0 {
			continue // a reservation's entry: the guard's sync makes it
		}
		if got, ok := w.pins.m[k]; w.now.Before(c.Expires) && (!ok || got.IP() != c.IP) {
			bad = append(bad, fmt.Sprintf("%s binds %s, pv_leases has %v (present %v)", c.MAC, c.IP, got, ok))
		}
	}
	// A binding that ended is pinned by nothing but a reservation, even
	// while the store still holds its lease.
	w.f.m.ledger.db.Known(func(uint32) bool { return true }, func(c leasedb.Change) {
		k := leasemap.NewKey(c.Segment, [6]byte(c.MAC))
		if got, ok := w.pins.m[k]; c.Kind.Durable() || !ok || got.LeaseFlags()&guard.LeaseStatic != 0 {
			return
		}
		bad = append(bad, fmt.Sprintf("%s's binding ended (%s), pv_leases still pins %v", c.MAC, c.Kind, w.pins.m[k]))
	})
	// A reservation's entry, once the guard wrote it, stays the
	// reservation's (of its address, static) while the reservation does:
	// no pin of the lease database's takes the key from it.
	for k, v := range w.reserved {
		if c, ok := want[k]; !ok || c.IP() != v.IP() || c.LeaseFlags()&guard.LeaseStatic == 0 {
			continue // the reservation changed or went since
		}
		if got, ok := w.pins.m[k]; !ok || got.IP() != v.IP() || got.LeaseFlags()&guard.LeaseStatic == 0 {
			bad = append(bad, fmt.Sprintf("reservation %v of %s: pv_leases has %v (present %v)", k, v.IP(), got, ok))
		}
	}
	if w.synced {
		for k, v := range want {
			if _, _, known := w.f.m.ledger.db.Lookup(k.SegId, k.Mac[:]); !known {
				continue
			}
			if got, ok := w.pins.m[k]; !ok || !compile.LeaseEqual(v, got) {
				bad = append(bad, fmt.Sprintf("after the guard's sync pv_leases %v: %v (present %v), the projection %v", k, got, ok, v))
			}
		}
		for k, got := range w.pins.m {
			if _, ok := want[k]; !ok {
				bad = append(bad, fmt.Sprintf("after the guard's sync pv_leases %v: %v, the projection none", k, got))
			}
		}
	}
	return bad
}
