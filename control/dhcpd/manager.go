// SPDX-License-Identifier: Apache-2.0

package dhcpd

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
	"pivirt.hu/pivirt/control/admission"
	"pivirt.hu/pivirt/control/collision"
	"pivirt.hu/pivirt/control/compile"
	"pivirt.hu/pivirt/control/events"
	"pivirt.hu/pivirt/control/reconcile"
	"pivirt.hu/pivirt/control/segment"
	"pivirt.hu/pivirt/control/store"
	"pivirt.hu/pivirt/dataplane/dhcp/responder"
	"pivirt.hu/pivirt/dataplane/dhcp/server"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
)

// LeaseMap is the guard's lease table (leasemap.Map satisfies it).
type LeaseMap interface {
	BindAll(bs []leasemap.Binding) error
	Refresh(bs []leasemap.Binding) error
	Release(segID uint32, mac [6]uint8, ip netip.Addr) error
	Decoded() ([]leasemap.Entry, error)
}

// Config is what a Manager needs; its ledger shares it.
type Config struct {
	Store  store.Store
	Index  *admission.Index
	Events *events.Recorder
	Leases LeaseMap
	Log    *slog.Logger
	// Node is this pivirtd's --node, stamped on the leases it serves
	// (label pivirt.hu/node).
	Node string
	Now  func() time.Time
	// PerMAC and PerPort are the responders' rate limits (zero: the
	// responder's defaults).
	PerMAC, PerPort responder.Limit
	// Relays are the trusted DHCP relay agents (responder.Config.Relays).
	Relays []netip.Prefix
	// LeaseReuse is every segment's server.Segment.ReuseThreshold.
	LeaseReuse float64
	// OffersPerMAC is every segment's server.Segment.OffersPerMAC.
	OffersPerMAC int
	// Shared: other nodes serve networks of this store (--store etcd),
	// every segment's server.Segment.Shared.
	Shared bool
	// JournalDir holds the lease journal (see journal.go).
	JournalDir string
	// JournalSyncDelay slows every journal flush down (wal.Options.SyncDelay;
	// tests only).
	JournalSyncDelay time.Duration
}

// Manager starts, reconfigures and stops one responder per segment; it
// implements segment.DHCP.
type Manager struct {
	Config

	once   sync.Once
	srv    *server.Server
	ledger *ledger // makes the responders' lease changes durable

	mu      sync.Mutex          // Sync and Stop
	running map[string]*running // by segment name
	// away is, by network, the addresses other nodes' objects hold
	// (SyncElsewhere), for the segments Sync starts.
	away map[string][]server.Holding

	nmu      sync.Mutex
	notMoved map[string]bool // clients told why they were not relocated (relocate.go)

	undos undos // BeforeCommit's lease writes, until their commit is known (undo.go)
	gone  gone  // deletions waiting for the other half of a move (observe.go)
}

type running struct {
	seg    segment.Segment
	id     uint32
	held   map[string]bool // MACs whose lease the provisioning interlock holds
	cancel context.CancelFunc
	done   chan struct{}
	resp   *responder.Responder
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Manager) init() {
	m.once.Do(func() {
		m.srv, _ = server.New()
		m.srv.HeldElsewhere = m.heldElsewhere
		m.running = map[string]*running{}
		m.ledger = newLedger(m)
	})
}

// Recover opens the lease journal in JournalDir, exports what it holds and
// starts its exporter; call it once before the reconcilers read the store.
func (m *Manager) Recover(ctx context.Context) error {
	m.init()
	return m.ledger.recover(ctx)
}

// errNotRecovered: segments run only once the lease database is open.
var errNotRecovered = errors.New("DHCP segments synced before the lease database was opened (Recover)")

// Sync makes the responders match segments (those with DHCP on and a
// bridge up) and feeds them reservations and the operator's deletions.
// Each segment's server takes one Input (server.Apply); a segment new
// to it then starts from the lease database (loadTables).
func (m *Manager) Sync(ctx context.Context, segments []segment.Segment, snap reconcile.Snapshot) error {
	m.init()
	if m.ledger.db == nil {
		return errNotRecovered
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	want := map[string]bool{}
	leases := snap.Of(pivirtv1.KindDHCPLease)
	heldObjs := heldLeases(snap)
	heldByName := heldNames(heldObjs)
	before := m.ledger.segmentsByID()
	for _, seg := range segments {
		if !seg.HasRange() {
			continue // DHCP on but no delegated range: nothing to hand out
		}
		want[seg.Name] = true
		input, err := m.input(seg, leases, heldObjs, snap)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r := m.running[seg.Name]; r != nil && r.seg.Spec.Bridge != seg.Spec.Bridge {
			m.stop(seg.Name)
		}
		si := infoOf(seg, macSet(input.Held))
		r := m.running[seg.Name]
		if r == nil {
			errs = append(errs, m.startSegment(ctx, si, input, m.startInput(seg, input, leases, snap, heldByName)))
			continue
		}
		// What this pass persists is pinned by the held set of this
		// snapshot (ledger.persist), not the last pass's: a lease
		// locked since is pinned years ahead, as compile pins it
		// (ordering seed 1796499881600462388: a reservation's binding
		// kept as a dynamic lease was pinned at its plain expiry).
		r.seg, r.held = seg, si.held
		m.publishInfos()
		errs = append(errs, m.apply(ctx, input))
	}
	for name := range m.running {
		if !want[name] {
			m.stop(name)
		}
	}
	m.publishInfos()
	m.ledger.undecided.Store(false) // decided: running, or compile's
	if err := m.ledger.repinHeld(before); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// input is what seg's server is told of it (server.Input): its settings,
// the store's reservations of it at the snapshot's revision, the MACs of
// its held leases, what other nodes hold of its network.
func (m *Manager) input(seg segment.Segment, leases, heldObjs []*pivirtv1.Object, snap reconcile.Snapshot) (server.Input, error) {
	cfg, err := serverSegment(seg)
	if err != nil {
		return server.Input{}, err
	}
	cfg.ReuseThreshold, cfg.OffersPerMAC, cfg.Shared = m.LeaseReuse, m.OffersPerMAC, m.Shared
	input := server.Input{Segment: cfg, Reservations: segmentReservations(seg, leases, snap),
		Revision: snap.Revision, Elsewhere: m.away[collision.NetworkOf(seg)]}
	for _, o := range heldObjs {
		if l, ok := segmentLease(seg, o, snap); ok {
			input.Held = append(input.Held, l.MAC)
		}
	}
	return input, nil
}

// segmentReservations returns the reservations of seg among objs.
func segmentReservations(seg segment.Segment, objs []*pivirtv1.Object, snap reconcile.Snapshot) []server.Reservation {
	var out []server.Reservation
	for _, o := range objs {
		if l, ok := segmentLease(seg, o, snap); ok && !l.Dynamic() && seg.InRange(l.IP) {
			out = append(out, server.Reservation{MAC: l.MAC, IP: l.IP, Hostname: l.Spec.Hostname})
		}
	}
	return out
}

// segmentLease is o as a lease of seg's network.
func segmentLease(seg segment.Segment, o *pivirtv1.Object, snap reconcile.Snapshot) (pivirtv1.Lease, bool) {
	s, err := snap.Spec(o)
	if err != nil {
		return pivirtv1.Lease{}, false
	}
	l, err := pivirtv1.NewLease(o, s.(*pivirtv1.DHCPLeaseSpec))
	return l, err == nil && seg.Names(l.Spec.Network)
}

// apply gives a running segment's server its input and persists what
// that changed: the leases reservations superseded follow the store
// (admission deleted their objects with the reservations' apply); the
// rest are the server's changes.
func (m *Manager) apply(ctx context.Context, input server.Input) error {
	a, err := m.srv.Apply(m.now(), input)
	if err != nil {
		err = fmt.Errorf("configuring DHCP of segment %s: %w", input.Segment.Name, err)
	}
	m.persistSuperseded(a.Superseded)
	if len(a.Changes) > 0 {
		err = errors.Join(err, m.ledger.Persist(ctx, a.Changes))
	}
	return err
}

// persistSuperseded ends, in the lease database and pv_leases, the
// dynamic leases reservations superseded (server.Reserve): never written
// back to the store, whose objects the reservations' apply deleted.
func (m *Manager) persistSuperseded(changes []server.LeaseChange) {
	if len(changes) == 0 {
		return
	}
	if err := m.ledger.persistFromStore(changes); err != nil {
		m.Log.Warn("persisting the end of leases reservations superseded", "err", err)
	}
}

// startInput is what a starting segment takes from the store besides
// its Input: its dynamic leases, in its range and outside it that the
// server serves all the same (moved): clients brought them from another
// node's range (migrated), or the interlock holds them through a shrink
// of the range.
func (m *Manager) startInput(seg segment.Segment, input server.Input, objs []*pivirtv1.Object, snap reconcile.Snapshot, held map[string]bool) startInput {
	out := startInput{static: input.Reservations, held: input.Held, storeUnreachable: snap.Saved}
	for _, o := range objs {
		l, ok := segmentLease(seg, o, snap)
		if !ok || !l.Dynamic() || l.Spec.ExpiresAt == nil {
			continue
		}
		inRange := seg.InRange(l.IP)
		placedHere := m.Node != "" && o.Metadata.Labels[pivirtv1.NodeLabel] == m.Node
		if !inRange && !pivirtv1.ServedOutsideRange(l, placedHere, held[o.Metadata.Name], seg.HostIP) {
			continue // Pending: never served
		}
		sl := server.Lease{IP: l.IP, MAC: l.MAC, ClientID: l.ClientID, Hostname: l.Spec.Hostname, Expires: *l.Spec.ExpiresAt}
		if inRange {
			out.dynamic = append(out.dynamic, sl)
		} else {
			out.moved = append(out.moved, sl)
		}
	}
	return out
}

// macSet is the set of macs by their string form.
func macSet(macs []net.HardwareAddr) map[string]bool {
	out := make(map[string]bool, len(macs))
	for _, mac := range macs {
		out[mac.String()] = true
	}
	return out
}

// SyncElsewhere tells the responders which addresses of their networks
// other nodes' leases and ports hold (a snapshot of all nodes: Loop
// AllNodes), so none is offered or ACKed to another MAC, and a MAC that
// moved here keeps its own (server.SetElsewhere). Single-node mode has
// no elsewhere.
func (m *Manager) SyncElsewhere(_ context.Context, snap reconcile.Snapshot) error {
	if m.Node == "" {
		return nil
	}
	m.init()
	away := map[string][]server.Holding{}
	for k, hs := range collision.Collect(snap, m.now()) {
		for _, h := range hs {
			if pivirtv1.PlacedElsewhere(h.Object, m.Node) {
				away[k.Network] = append(away[k.Network], server.Holding{IP: k.IP, MAC: h.MAC, Held: h.Held})
			}
		}
	}
	m.nmu.Lock()
	m.notMoved = nil // the holdings changed: report again
	m.nmu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.away = away
	var errs []error
	for _, r := range m.running {
		if err := m.srv.SetElsewhere(r.id, away[collision.NetworkOf(r.seg)]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldLeases returns the leases the provisioning interlock holds
// (pivirtv1.Interlock: on the lease or on an owner of it this node
// stores; VM locks reach a node as the annotation on the VM's leases).
func heldLeases(snap reconcile.Snapshot) []*pivirtv1.Object {
	owners := pivirtv1.OwnersAmong(snap.Objects)
	var out []*pivirtv1.Object
	for _, o := range snap.Of(pivirtv1.KindDHCPLease) {
		if pivirtv1.Held(o, owners) {
			out = append(out, o)
		}
	}
	return out
}

// heldNames returns the names of held leases.
func heldNames(held []*pivirtv1.Object) map[string]bool {
	out := make(map[string]bool, len(held))
	for _, o := range held {
		out[o.Metadata.Name] = true
	}
	return out
}

func (m *Manager) start(si segInfo, id uint32) error {
	seg := si.seg
	resp, err := responder.New(responder.Config{
		Interface: seg.Spec.Bridge,
		Segment:   id,
		Server:    m.srv,
		Persister: m.ledger,
		PerMAC:    m.PerMAC,
		Relays:    m.Relays,
		PerPort:   m.PerPort,
		Log:       m.Log.With("segment", seg.Name),
		Now:       m.Now,
	})
	if err != nil {
		return fmt.Errorf("starting DHCP on %s: %w", seg.Spec.Bridge, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{seg: seg, id: id, held: si.held, cancel: cancel, done: make(chan struct{}), resp: resp}
	go func() {
		defer close(r.done)
		if err := resp.Run(ctx); err != nil && ctx.Err() == nil {
			m.Log.Error("DHCP responder stopped", "segment", seg.Name, "err", err)
		}
	}()
	m.running[seg.Name] = r
	m.publishInfos()
	m.Events.Record(pivirtv1.KindNetworkSegment, seg.Name, events.Normal, "DHCPStarted", "responder listening on "+seg.Spec.Bridge)
	if err := resp.PortConflict(); err != nil {
		m.Events.Record(pivirtv1.KindNetworkSegment, seg.Name, events.Warning, "DHCPPortShared", err.Error())
	}
	m.Log.Info("DHCP responder started", "segment", seg.Name, "bridge", seg.Spec.Bridge)
	return nil
}

func (m *Manager) stop(name string) {
	r := m.running[name]
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	m.ledger.db.Park(r.id) // the server forgets the segment; the lease database keeps its bindings
	delete(m.running, name)
	m.Events.Record(pivirtv1.KindNetworkSegment, name, events.Normal, "DHCPStopped", "responder stopped")
	c := r.resp.Counters().Snapshot()
	m.Log.Info("DHCP responder stopped", "segment", name, "received", c.Received, "socket_drops", c.SocketDrops,
		"dropped", c.Dropped, "ignored", c.Ignored, "replied", c.Replied, "persist_errors", c.PersistErrors, "send_errors", c.SendErrors)
}

// Stop stops every responder, then stores what the journal holds (daemon
// shutdown; what does not make it is stored by the next Recover).
func (m *Manager) Stop() {
	m.init()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.running {
		m.stop(name)
	}
	m.ledger.close()
}

// publishInfos swaps in the segInfo of every running segment; m.mu held.
func (m *Manager) publishInfos() {
	out := map[uint32]segInfo{}
	for _, r := range m.running {
		out[r.id] = infoOf(r.seg, r.held)
	}
	m.ledger.setSegments(out)
}

// LabelNetwork is the label naming the network of a lease the server made.
const LabelNetwork = "network"

// LeaseName is the DHCPLease name of a dynamic lease: lease-<mac-with-dashes>.
func LeaseName(mac net.HardwareAddr) string {
	return "lease-" + strings.ReplaceAll(mac.String(), ":", "-")
}

// leaseObject is the DHCPLease of a dynamic lease, with its typed spec.
func leaseObject(name, bridge string, l server.Lease) (*pivirtv1.Object, *pivirtv1.DHCPLeaseSpec) {
	exp := l.Expires.UTC().Truncate(time.Second)
	// Option 12 and 81 are client data: stored as a host name if they make one.
	host, _ := pivirtv1.SanitizeHostname(l.Hostname)
	spec := &pivirtv1.DHCPLeaseSpec{Network: bridge, MACAddress: l.MAC.String(), IPAddress: l.IP.String(),
		Hostname: host, Type: pivirtv1.LeaseDynamic, ExpiresAt: &exp}
	if len(l.ClientID) > 0 {
		spec.ClientID = hex.EncodeToString(l.ClientID)
	}
	// The network label, as in seed 000's example: get leases -l network=NAME.
	return &pivirtv1.Object{APIVersion: pivirtv1.APIVersion, Kind: pivirtv1.KindDHCPLease,
		Metadata: pivirtv1.ObjectMeta{Name: name, Labels: map[string]string{LabelNetwork: bridge}}}, spec
}

// serverSegment turns a NetworkSegment into the responder's settings.
func serverSegment(seg segment.Segment) (server.Segment, error) {
	d := seg.Spec.DHCP
	cfg := server.Segment{
		Name: seg.Name, ID: compile.SegmentID(seg.Name), Bridge: seg.Spec.Bridge, HostIP: seg.HostIP,
		RangeStart: seg.Range.Start, RangeEnd: seg.Range.End,
		LeaseTime:        time.Duration(d.LeaseTime()) * time.Second,
		DeclineProbation: time.Duration(d.DeclineProbation) * time.Second,
		Domain:           d.DomainName, Search: d.DomainSearch, MTU: uint16(d.MTU),
	}
	for _, s := range d.DNSServers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return cfg, fmt.Errorf("segment %s: spec.dhcp.dnsServers: %w", seg.Name, err)
		}
		cfg.DNS = append(cfg.DNS, a)
	}
	for _, r := range d.Routes {
		dst, err1 := netip.ParsePrefix(r.Destination)
		gw, err2 := netip.ParseAddr(r.Gateway)
		if err := errors.Join(err1, err2); err != nil {
			return cfg, fmt.Errorf("segment %s: spec.dhcp.routes: %w", seg.Name, err)
		}
		cfg.Routes = append(cfg.Routes, server.Route{Dst: dst, Gateway: gw})
	}
	return cfg, nil
}

// AfterCommit is the admission.Index hook that tells BeforeCommit's
// reservations the revision they landed at (0: none, the commit failed).
func (m *Manager) AfterCommit(expected, committed int64, err error) {
	if err != nil {
		committed = 0
	}
	m.srv.Committed(expected, committed)
	m.settle(expected, err != nil)
}

// OriginServer is the admission.Options.Origin of the ledger's writes:
// the server's own stores of what it ACKed, released or expired.
const OriginServer = "dhcp-server"

// BeforeCommit is the admission.Index hook: what the operator writes of
// leases reaches the responders inside the transaction that stores it,
// before `apply` or `delete` returns, ordered against every DHCP exchange
// that follows:
//   - a static reservation: a DISCOVER that follows cannot get the
//     address, or give the MAC another, as a dynamic lease (Sync then
//     sets the reservations from the store as usual);
//   - the deletion of a server-made lease: the binding it names (MAC and
//     address) is released and journaled at once, so the client's next
//     DORA makes a new binding that is written, and no ACK can reuse the
//     binding being deleted (found by the ordering test, seed 90417:
//     delete, DORA, kill -9 lost the ACKed lease when the deletion
//     reached the server only at the next Sync);
//   - a dynamic lease applied, or its address, MAC or expiry changed: the server
//     binds it as the client's lease (importLease), journaled and pinned
//     before `apply` returns, so its client keeps the address and no one
//     else is offered it (seed 000's dynamic lease, applied as written,
//     was served by no one and pinned only by the guard's next resync).
func (m *Manager) BeforeCommit(ws []admission.Written) {
	m.init()
	segs := m.ledger.segmentsByID()
	reserving := map[string]bool{} // MACs a reservation of this transaction supersedes
	for _, w := range ws {
		if l, ok := w.Spec.(*pivirtv1.DHCPLeaseSpec); ok && !w.Deleted && l.Type != pivirtv1.LeaseDynamic {
			if mac, err := net.ParseMAC(l.MACAddress); err == nil {
				reserving[mac.String()] = true
			}
		}
	}
	for _, w := range ws {
		l, ok := w.Spec.(*pivirtv1.DHCPLeaseSpec)
		if !ok || w.Object.Kind != pivirtv1.KindDHCPLease {
			continue
		}
		mac, err1 := net.ParseMAC(l.MACAddress)
		ip, err2 := netip.ParseAddr(l.IPAddress)
		if err1 != nil || err2 != nil {
			continue
		}
		if l.Type == pivirtv1.LeaseDynamic {
			switch {
			case w.Origin == OriginServer || reserving[mac.String()]:
			case w.Deleted:
				m.releaseDeletedLease(w.Object.Metadata.Name, l.Network, mac, ip, w.Revision, segs)
			case bindingChanged(w.Old, l):
				m.importLease(w.Object.Metadata.Name, l, mac, ip, w.Revision, segs)
			}
			continue
		}
		if w.Deleted {
			if !reserving[mac.String()] {
				m.unreserve(w.Object.Metadata.Name, l.Network, mac, w.Revision, segs)
			}
			continue
		}
		for id, si := range segs {
			if !si.seg.Names(l.Network) || !si.seg.InRange(ip) {
				continue
			}
			res := server.Reservation{MAC: mac, IP: ip, Hostname: l.Hostname}
			superseded, err := m.srv.Reserve(m.now(), id, res, w.Revision)
			if err != nil {
				m.Log.Warn("reservation not served yet", "lease", w.Object.Metadata.Name, "err", err)
			}
			m.persistSuperseded(superseded)
		}
	}
}

// bindingChanged reports whether a dynamic lease written with spec l
// binds anything its old spec did not: it is new, or its MAC, address or
// expiry changed. A write that keeps them (a status, a label) is not the
// operator's binding: the server's own, possibly newer than the object,
// stands.
func bindingChanged(old pivirtv1.Spec, l *pivirtv1.DHCPLeaseSpec) bool {
	o, ok := old.(*pivirtv1.DHCPLeaseSpec)
	return !ok || o.Type != l.Type || !strings.EqualFold(o.MACAddress, l.MACAddress) || o.IPAddress != l.IPAddress ||
		(o.ExpiresAt == nil) != (l.ExpiresAt == nil) || (o.ExpiresAt != nil && !o.ExpiresAt.Equal(*l.ExpiresAt))
}

// importLease binds, in the segments serving l's network whose range
// holds ip, the dynamic lease the operator applied (server.Import), and
// persists the binding as the operator's: journaled and pinned, not
// written back over the object (unless its client's ACK reaches further
// than the applied expiry: that one is). One the server refuses (the address
// bound to another client, the lease expired, a renewal in flight) is
// logged and left to the store: the collision report shows an address
// two MACs hold.
// rev is the revision BeforeCommit's transaction expects (0: committed
// already, Observe): a failed commit puts the binding back (undo.go).
func (m *Manager) importLease(name string, l *pivirtv1.DHCPLeaseSpec, mac net.HardwareAddr, ip netip.Addr, rev int64, segs map[uint32]segInfo) {
	if l.ExpiresAt == nil {
		return // never served (startInput)
	}
	if name != LeaseName(mac) {
		// The server stores the MAC's lease as lease-<mac>: its next ACK
		// would be refused beside this object, and the lease dropped.
		m.Log.Warn("dynamic lease applied under another name than the server's: not served; name it "+LeaseName(mac), "lease", name, "ip", ip, "mac", mac.String())
		return
	}
	clientID, _ := hex.DecodeString(l.ClientID)
	lease := server.Lease{IP: ip, MAC: mac, ClientID: clientID, Hostname: l.Hostname, Expires: *l.ExpiresAt}
	for id, si := range segs {
		if !si.seg.Names(l.Network) || !si.seg.InRange(ip) {
			continue
		}
		done := m.undoable(rev, id, mac)
		ch, err := m.srv.Import(m.now(), id, lease, false)
		if err != nil {
			m.Log.Warn("dynamic lease applied but not served", "lease", name, "ip", ip, "mac", mac.String(), "err", err)
			continue
		}
		persist := m.ledger.persistFromStore
		if !ch.Lease.Expires.Truncate(time.Second).Equal(lease.Expires.Truncate(time.Second)) {
			// Its client was ACKed for longer: the server's expiry stands
			// and is written back over the object.
			m.Log.Info("dynamic lease applied with an earlier expiry than its client was ACKed: the ACK's stands", "lease", name, "expires", ch.Lease.Expires)
			persist = func(chs []server.LeaseChange) error { return m.ledger.Persist(context.Background(), chs) }
		}
		if err := persist([]server.LeaseChange{ch}); err != nil {
			m.Log.Warn("persisting an applied dynamic lease", "lease", name, "err", err)
			continue
		}
		done()
		m.Log.Info("dynamic lease applied: served as its client's", "lease", name, "ip", ip, "mac", mac.String(), "expires", ch.Lease.Expires)
	}
}

// unreserve drops, in the segments serving network, the reservation of
// mac the operator deleted, and makes the binding it had durable as the
// dynamic lease it becomes (journal, pv_leases, then lease-<mac>) before
// the delete commits: the guard's pin follows the binding, not the
// reservation, so it never lapses, and a kill -9 right after the delete
// cannot lose it (it did: found by the ordering test, seed
// 1796492356900123160, when the binding was made durable only by the next
// Sync).
func (m *Manager) unreserve(name, network string, mac net.HardwareAddr, rev int64, segs map[uint32]segInfo) {
	for id, si := range segs {
		if !si.seg.Names(network) {
			continue
		}
		l, live, err := m.srv.Unreserve(m.now(), id, mac, rev)
		if err != nil || !live {
			continue
		}
		ch := server.LeaseChange{Kind: server.Bound, Segment: id, Lease: l, At: m.now()}
		if err := m.ledger.Persist(context.Background(), []server.LeaseChange{ch}); err != nil {
			// The server still binds it: its client's renewal persists it.
			m.Log.Warn("persisting the binding of a deleted reservation", "lease", name, "err", err)
			continue
		}
		m.Log.Info("reservation deleted: its binding stays as a dynamic lease", "lease", name, "ip", l.IP, "mac", mac.String(), "expires", l.Expires)
	}
}

// releaseDeletedLease releases, in the segments serving network, the
// binding of mac to ip that the operator deleted, and persists the
// release (journal and pv_leases). A binding that is no longer that one
// (the address passed to another client) is left alone.
// rev is as importLease's.
func (m *Manager) releaseDeletedLease(name, network string, mac net.HardwareAddr, ip netip.Addr, rev int64, segs map[uint32]segInfo) {
	for id, si := range segs {
		if !si.seg.Names(network) {
			continue
		}
		done := m.undoable(rev, id, mac)
		ch, err := m.srv.Release(m.now(), id, mac, ip)
		if errors.Is(err, server.ErrInFlight) {
			// Its store write re-creates the object.
			m.Log.Info("lease deleted while its client renewed it: the renewal stands", "lease", name, "ip", ip, "mac", mac.String())
		}
		if err != nil {
			continue
		}
		if err := m.ledger.persistFromStore([]server.LeaseChange{ch}); err != nil {
			// Released in the server: its client is NAKed at its next
			// renewal; the pin and the record follow at the next change.
			m.Log.Warn("persisting the release of a deleted lease", "lease", name, "err", err)
			continue
		}
		done()
		m.Log.Info("lease released by deletion", "lease", name, "ip", ip, "mac", mac.String())
	}
}
