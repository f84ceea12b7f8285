// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"

	"pivirt.hu/pivirt/dataplane/dhcp/pool"
)

// Handle runs one request through the state machine at time now. It
// returns the reply (Msg nil: send nothing) and in.Changes with the lease
// changes it made appended; a reply with Durable set must only leave after
// those changes are stored.
func (s *Server) Handle(now time.Time, in Request) (Reply, []LeaseChange) {
	m := in.Msg
	if m == nil || m.OpCode != dhcpv4.OpcodeBootRequest || len(m.ClientHWAddr) == 0 {
		return Reply{Ignored: IgnoreNotRequest}, in.Changes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	segID := in.Segment
	if gi := addr4(m.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		// A relay's giaddr names the client's subnet (RFC 2131 4.3.1).
		found := false
		for id, st := range s.segs {
			if st.subnet.Contains(gi) {
				segID, found = id, true
				break
			}
		}
		if !found {
			return Reply{Ignored: IgnoreNoSegment}, in.Changes
		}
	}
	st := s.segs[segID]
	if st == nil {
		return Reply{Ignored: IgnoreNoSegment}, in.Changes
	}
	h := handler{st: st, seg: segID, now: now, in: in, m: m, onHeld: s.HeldElsewhere, seq: &s.seq}
	h.id = appendIdentity(s.idBuf[:0], m.Options.Get(dhcpv4.OptionClientIdentifier), m.ClientHWAddr)
	switch msgTypeOf(m) {
	case dhcpv4.MessageTypeDiscover:
		return h.discover()
	case dhcpv4.MessageTypeRequest:
		return h.request()
	case dhcpv4.MessageTypeDecline:
		return h.decline()
	case dhcpv4.MessageTypeRelease:
		return h.release()
	case dhcpv4.MessageTypeInform:
		return h.inform()
	}
	return Reply{Ignored: IgnoreNoType}, h.in.Changes
}

type handler struct {
	st  *segState
	seg uint32
	now time.Time
	in  Request
	m   *dhcpv4.DHCPv4
	id  []byte  // in Server.idBuf, valid while the lock is held
	seq *uint64 // Server.seq

	onHeld func(seg uint32, mac net.HardwareAddr, ip netip.Addr) // Server.HeldElsewhere
}

// heldElsewhere reports whether the interlock holds the client's lease on
// another node, and tells Server.HeldElsewhere.
func (h *handler) heldElsewhere() bool {
	hold, ok := h.st.awayMAC[string(h.mac())]
	if !ok || !hold.Held {
		return false
	}
	if h.onHeld != nil {
		h.onHeld(h.seg, hold.MAC, hold.IP)
	}
	return true
}

func addr4(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// optAddr reads an IPv4 option without the library's allocating getters.
func optAddr(m *dhcpv4.DHCPv4, c dhcpv4.OptionCode) netip.Addr {
	v := m.Options.Get(c)
	if len(v) != 4 {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(v))
}

func msgTypeOf(m *dhcpv4.DHCPv4) dhcpv4.MessageType {
	v := m.Options.Get(dhcpv4.OptionDHCPMessageType)
	if len(v) != 1 {
		return 0
	}
	return dhcpv4.MessageType(v[0])
}

// change appends c to the caller's slice (Request.Changes).
func (h *handler) change(c LeaseChange) []LeaseChange { return append(h.in.Changes, c) }

func (h *handler) mac() net.HardwareAddr { return h.m.ClientHWAddr }

// newLease builds the lease record; it copies what aliases the request,
// unless the current record already holds equal bytes.
func (h *handler) newLease(ip netip.Addr, prevHost string, ttl time.Duration) Lease {
	l := Lease{IP: ip, Hostname: prevHost, Expires: h.now.Add(ttl)}
	cid := h.m.Options.Get(dhcpv4.OptionClientIdentifier)
	if cur := h.st.byID[string(h.id)]; cur != nil && bytes.Equal(cur.MAC, h.mac()) && bytes.Equal(cur.ClientID, cid) {
		l.MAC, l.ClientID = cur.MAC, cur.ClientID
	} else {
		l.MAC = append(net.HardwareAddr(nil), h.mac()...)
		if len(cid) > 0 {
			l.ClientID = append([]byte(nil), cid...)
		}
	}
	if v := h.m.Options.Get(dhcpv4.OptionHostName); len(v) > 0 {
		if string(v) != prevHost {
			l.Hostname = string(v)
		}
	} else if r, ok := h.st.resByMAC[string(h.mac())]; ok && r.Hostname != "" {
		l.Hostname = r.Hostname
	}
	return l
}

func (h *handler) discover() (Reply, []LeaseChange) {
	if h.heldElsewhere() {
		return Reply{Ignored: IgnoreHeld}, h.in.Changes // its lease is frozen on another node
	}
	if h.overOfferLimit() {
		return Reply{Ignored: IgnoreOfferLimit}, h.in.Changes
	}
	ip, ok := h.st.choose(h.id, h.mac(), optAddr(h.m, dhcpv4.OptionRequestedIPAddress), h.now)
	if !ok {
		return Reply{Ignored: IgnoreExhausted}, h.in.Changes
	}
	if h.m.Options.Has(dhcpv4.OptionRapidCommit) {
		rep, ch := h.ack(ip)
		rep.Msg.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionRapidCommit, nil))
		return rep, ch
	}
	prev := ""
	if cur := h.st.byID[string(h.id)]; cur != nil {
		prev = cur.Hostname
		if !cur.offered {
			// A bound client re-discovering keeps its binding; only offer,
			// what its REQUEST will be ACKed.
			msg := h.reply(dhcpv4.MessageTypeOffer, ip, cur.Hostname, true)
			if left, ok := h.reusable(cur, ip, cur.Hostname); ok {
				setLeaseTimes(msg, left)
			}
			return Reply{Msg: msg}, h.in.Changes
		}
	}
	if l := h.st.byMAC[string(h.mac())]; l != nil && l.IP == ip {
		// The MAC's lease under another identity (choose): it holds the
		// address, so the OFFER records nothing; the REQUEST replaces
		// the lease (bind). An offer recorded over it would free the
		// address when it lapsed, with the lease still bound.
		return Reply{Msg: h.reply(dhcpv4.MessageTypeOffer, ip, l.Hostname, true)}, h.in.Changes
	}
	l := h.st.bind(h.id, h.newLease(ip, prev, h.st.cfg.OfferHold), true)
	return Reply{Msg: h.reply(dhcpv4.MessageTypeOffer, ip, l.Hostname, true)}, h.in.Changes
}

// overOfferLimit reports whether the client's MAC holds, under other
// client identifiers, as many OFFERs as it may (Segment.OffersPerMAC).
// A bound MAC's DISCOVERs are offered its lease's address (choose),
// which records no offer, and binding ended its offers (bind).
func (h *handler) overOfferLimit() bool {
	n := h.st.offersBy[string(h.mac())]
	if n == 0 || h.st.isStatic(h.mac()) {
		return false // a reserved MAC is offered its reservation only, under any identity
	}
	if cur := h.st.byID[string(h.id)]; cur != nil && cur.offered && bytes.Equal(cur.MAC, h.mac()) {
		n-- // its own offer, asked for again
	}
	return n >= h.st.cfg.OffersPerMAC
}

func (h *handler) request() (Reply, []LeaseChange) {
	sid := optAddr(h.m, dhcpv4.OptionServerIdentifier)
	req := optAddr(h.m, dhcpv4.OptionRequestedIPAddress)
	ci := addr4(h.m.ClientIPAddr)
	if ci.IsUnspecified() {
		ci = netip.Addr{}
	}
	switch {
	case sid.IsValid():
		if sid != h.st.cfg.HostIP.Addr() {
			// The client chose another server: its offer here is void.
			if l := h.st.byID[string(h.id)]; l != nil && l.offered {
				h.st.drop(l)
			}
			return Reply{State: Selecting, Ignored: IgnoreOtherServer}, h.in.Changes
		}
		if !req.IsValid() {
			req = ci
		}
		return h.confirm(Selecting, req)
	case req.IsValid() && !ci.IsValid():
		return h.confirm(InitReboot, req)
	case ci.IsValid():
		state := Renewing
		if h.in.Broadcast {
			state = Rebinding
		}
		return h.confirm(state, ci)
	}
	return Reply{Ignored: IgnoreBadRequest}, h.in.Changes
}

// confirm ACKs ip if the client may hold it, else NAKs (we are
// authoritative for the segment, so a wrong address is refused, not
// ignored), except an INIT-REBOOT for another node's address this node
// has not heard of (Segment.Shared), left to that node.
func (h *handler) confirm(state State, ip netip.Addr) (Reply, []LeaseChange) {
	if state == InitReboot && h.st.notHeardOf(ip, h.mac()) {
		return Reply{State: state, Ignored: IgnoreNotHeard}, h.in.Changes
	}
	if !ip.IsValid() || !h.st.subnet.Contains(ip) || h.heldElsewhere() || !h.st.assignable(h.id, h.mac(), ip, h.now) {
		changes := h.in.Changes
		if l := h.st.byID[string(h.id)]; l != nil && l.IP == ip && !l.offered && !h.st.held[string(l.MAC)] {
			// Its own lease, which a reservation has taken since: NAKed
			// off it, the client starts over, and the address is free for
			// the reservation.
			h.st.drop(l)
			changes = h.change(l.end(Released, h.seg, h.now, h.st.isStatic(l.MAC)))
		}
		return Reply{Msg: h.nak(), State: state}, changes
	}
	rep, ch := h.ack(ip)
	rep.State = state
	return rep, ch
}

func (h *handler) ack(ip netip.Addr) (Reply, []LeaseChange) {
	kind, prev := Bound, ""
	cur := h.st.byID[string(h.id)]
	if cur != nil {
		prev = cur.Hostname
		if !cur.offered && cur.IP == ip {
			kind = Renewed
		}
	}
	nl := h.newLease(ip, prev, h.st.cfg.LeaseTime)
	if left, ok := h.reusable(cur, ip, nl.Hostname); ok {
		msg := h.reply(dhcpv4.MessageTypeAck, ip, cur.Hostname, true)
		setLeaseTimes(msg, left)
		acked := LeaseChange{Kind: Renewed, Segment: h.seg, Lease: cur.Lease, At: h.now}
		return Reply{Msg: msg, Reused: true, Acked: acked}, h.in.Changes
	}
	var durable Lease // what an Unwritable ACK gives: cur before bind changes it
	unwritten := false
	if h.in.Unwritable {
		durable, unwritten = h.durable(cur, ip)
	}
	l := h.st.bind(h.id, nl, false)
	l.released = false
	*h.seq++
	l.unsynced = *h.seq
	msg := h.reply(dhcpv4.MessageTypeAck, ip, l.Hostname, true)
	rep := Reply{Msg: msg, Durable: true}
	if unwritten {
		setLeaseTimes(msg, min(durable.Expires.Sub(h.now), h.st.cfg.LeaseTime))
		rep = Reply{Msg: msg, Unwritten: true, Acked: LeaseChange{Kind: Renewed, Segment: h.seg, Lease: durable, At: h.now}}
	}
	return rep, h.change(LeaseChange{Kind: kind, Segment: h.seg, Lease: l.Lease, At: h.now,
		Static: h.st.isStatic(h.mac()), Seq: l.unsynced})
}

// durable returns the client's lease on ip as it is durable (committed
// and pinned, or loaded so): cur, or its record when cur's last change
// is not durable (in flight, or its write failed), if it has a second
// left. An offer, a released lease and another MAC's have none.
func (h *handler) durable(cur *lease, ip netip.Addr) (Lease, bool) {
	if cur == nil || cur.offered || cur.released || !bytes.Equal(cur.MAC, h.mac()) {
		return Lease{}, false
	}
	d := cur.Lease
	if cur.unsynced != 0 {
		if cur.rec.Seq == 0 {
			return Lease{}, false
		}
		d = cur.rec.Lease
	}
	return d, d.IP == ip && d.Expires.Sub(h.now) >= time.Second
}

// reusable reports whether the client's lease cur can be ACKed again as
// stored, and for how long it has left: it is bound to ip, durable,
// unchanged (MAC, host name), young enough (Segment.ReuseThreshold) and
// no longer than the segment's lease time now. A reservation's and a
// held lease's ACKs always go through the store, whose pins they renew,
// and so does the ACK of a MAC another node's object names (a VM moved
// back): its write makes the store say this node serves it.
func (h *handler) reusable(cur *lease, ip netip.Addr, hostname string) (time.Duration, bool) {
	c := &h.st.cfg
	if c.ReuseThreshold <= 0 || cur == nil || cur.offered || cur.released || cur.unsynced != 0 || cur.IP != ip ||
		cur.Hostname != hostname || !bytes.Equal(cur.MAC, h.mac()) || h.st.held[string(cur.MAC)] || h.st.isStatic(cur.MAC) {
		return 0, false
	}
	if _, away := h.st.awayMAC[string(cur.MAC)]; away {
		return 0, false
	}
	left := cur.Expires.Sub(h.now)
	age := c.LeaseTime - left
	return left, left > 0 && age >= 0 && float64(age) < c.ReuseThreshold*float64(c.LeaseTime)
}

// setLeaseTimes sets options 51, 58 and 59 for a lease with left to run,
// in whole seconds down, so the client's lease never outlives the
// stored one; T1 and T2 keep the segment's ratios (1/2, 7/8).
func setLeaseTimes(m *dhcpv4.DHCPv4, left time.Duration) {
	secs := uint32(left / time.Second)
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b[0:], secs)
	binary.BigEndian.PutUint32(b[4:], secs/2)
	binary.BigEndian.PutUint32(b[8:], uint32(uint64(secs)*7/8))
	m.Options[dhcpv4.OptionIPAddressLeaseTime.Code()] = b[0:4:4]
	m.Options[dhcpv4.OptionRenewTimeValue.Code()] = b[4:8:8]
	m.Options[dhcpv4.OptionRebindingTimeValue.Code()] = b[8:12:12]
}

func (h *handler) decline() (Reply, []LeaseChange) {
	if sid := optAddr(h.m, dhcpv4.OptionServerIdentifier); sid.IsValid() && sid != h.st.cfg.HostIP.Addr() {
		return Reply{Ignored: IgnoreOtherServer}, h.in.Changes
	}
	ip := optAddr(h.m, dhcpv4.OptionRequestedIPAddress)
	l := h.st.byIP[ip]
	if l == nil || l.id != string(h.id) || l.offered {
		// A client declines what it was ACKed (RFC 2131 4.4.1), not an
		// offer: there is no lease to end.
		return Reply{Ignored: IgnoreNotOurs}, h.in.Changes
	}
	if !h.fromLeaseOwner(l, netip.Addr{}) {
		return Reply{Ignored: IgnoreSpoofed}, h.in.Changes
	}
	if h.st.held[string(l.MAC)] {
		// The interlock keeps the address bound; the lease ends when it
		// lets go, as a RELEASE held back does. Ignored, a DECLINE that
		// came just before the server heard of the lock's end was lost
		// (the ordering soak, seed 3744676346783871220, step 6150).
		l.released = true
		return Reply{Ignored: IgnoreHeld}, h.in.Changes
	}
	// Quarantine first so drop keeps the bit set; one address per MAC and
	// probation: a second DECLINE only ends the lease.
	rep := Reply{}
	var until time.Time
	if _, static := h.st.resByIP[ip]; !static {
		if prev, ok := h.st.declinedBy[string(l.MAC)]; ok && h.now.Before(prev) {
			rep.Ignored = IgnoreDeclineLimit
		} else {
			until = h.now.Add(h.st.cfg.DeclineProbation)
			h.st.quar[ip] = until
			h.st.declinedBy[string(l.MAC)] = until
		}
	}
	h.st.drop(l)
	h.st.forget(h.id) // do not hand the declined address back
	ch := l.end(Declined, h.seg, h.now, h.st.isStatic(l.MAC))
	ch.Until = until
	return rep, h.change(ch)
}

func (h *handler) release() (Reply, []LeaseChange) {
	if sid := optAddr(h.m, dhcpv4.OptionServerIdentifier); sid.IsValid() && sid != h.st.cfg.HostIP.Addr() {
		return Reply{Ignored: IgnoreOtherServer}, h.in.Changes
	}
	l := h.st.byIP[addr4(h.m.ClientIPAddr)]
	if l == nil || l.id != string(h.id) || l.offered {
		return Reply{Ignored: IgnoreNotOurs}, h.in.Changes
	}
	if !h.fromLeaseOwner(l, l.IP) {
		return Reply{Ignored: IgnoreSpoofed}, h.in.Changes
	}
	if h.st.held[string(l.MAC)] {
		l.released = true // released when the interlock lets go
		return Reply{Ignored: IgnoreHeld}, h.in.Changes
	}
	h.st.drop(l)
	return Reply{}, h.change(l.end(Released, h.seg, h.now, h.st.isStatic(l.MAC)))
}

// fromLeaseOwner reports whether a RELEASE or DECLINE of l comes from the
// client that holds it: chaddr is the lease's MAC and, sent directly (not
// through a relay), so is the Ethernet source, and a RELEASE comes from the
// leased address (src, when valid). Client-id and ciaddr are the client's
// to write, so another guest could copy them: one that frees a victim's
// lease can then take its address.
func (h *handler) fromLeaseOwner(l *lease, src netip.Addr) bool {
	if !bytes.Equal(l.MAC, h.mac()) {
		return false
	}
	if gi := addr4(h.m.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		return true // relayed: the relay is the frame's source
	}
	if len(h.in.SrcMAC) > 0 && !bytes.Equal(h.in.SrcMAC, h.mac()) {
		return false
	}
	return !src.IsValid() || !h.in.SrcIP.IsValid() || h.in.SrcIP == src
}

func (h *handler) inform() (Reply, []LeaseChange) {
	msg := h.reply(dhcpv4.MessageTypeAck, netip.Addr{}, "", false)
	return Reply{Msg: msg}, h.in.Changes
}

// msgType holds the encoded option 53 of each message type, shared by
// all replies (the encoder only reads it).
var msgType = func() (t [9][]byte) {
	for i := range t {
		t[i] = []byte{byte(i)}
	}
	return t
}()

// newReply returns the message the reply is built in: the caller's
// scratch (reset, Options map reused) or a fresh one.
func (h *handler) newReply(n int) *dhcpv4.DHCPv4 {
	r := h.in.Reply
	if r == nil {
		return &dhcpv4.DHCPv4{Options: make(dhcpv4.Options, n)}
	}
	opts := r.Options
	if opts == nil {
		opts = make(dhcpv4.Options, n)
	} else {
		clear(opts)
	}
	*r = dhcpv4.DHCPv4{Options: opts}
	return r
}

// yiaddr returns ip as a 4-byte slice, from the segment's table when it
// is in the range.
func (st *segState) yiaddr(ip netip.Addr) net.IP {
	if st.ipTable != nil && st.pool.Contains(ip) {
		o := 4 * int(pool.U32(ip)-pool.U32(st.cfg.RangeStart))
		return net.IP(st.ipTable[o : o+4 : o+4])
	}
	return net.IP(ip.AsSlice())
}

// reply builds the common part of a server message (RFC 2131 table 3).
func (h *handler) reply(t dhcpv4.MessageType, yi netip.Addr, hostname string, leaseOpts bool) *dhcpv4.DHCPv4 {
	m := h.m
	r := h.newReply(len(h.st.static) + 10)
	r.OpCode = dhcpv4.OpcodeBootReply
	r.HWType = m.HWType
	r.TransactionID = m.TransactionID
	r.Flags = m.Flags
	r.ClientIPAddr, r.YourIPAddr, r.ServerIPAddr = net.IPv4zero, net.IPv4zero, net.IPv4zero
	r.GatewayIPAddr = m.GatewayIPAddr
	r.ClientHWAddr = m.ClientHWAddr
	if t == dhcpv4.MessageTypeAck {
		r.ClientIPAddr = m.ClientIPAddr
	}
	if yi.IsValid() {
		r.YourIPAddr = h.st.yiaddr(yi)
	}
	for k, v := range h.st.static {
		r.Options[k] = v
	}
	r.Options[dhcpv4.OptionDHCPMessageType.Code()] = msgType[t]
	if v := m.Options.Get(dhcpv4.OptionHostName); len(v) > 0 && string(v) == hostname {
		r.Options[dhcpv4.OptionHostName.Code()] = v // echo without a copy
	} else if hostname != "" {
		r.Options[dhcpv4.OptionHostName.Code()] = []byte(hostname)
	}
	if leaseOpts {
		r.Options[dhcpv4.OptionIPAddressLeaseTime.Code()] = h.st.leaseOpt[0]
		r.Options[dhcpv4.OptionRenewTimeValue.Code()] = h.st.leaseOpt[1]
		r.Options[dhcpv4.OptionRebindingTimeValue.Code()] = h.st.leaseOpt[2]
	}
	copyOpt(r, m, dhcpv4.OptionClientIdentifier) // RFC 6842
	copyRelayInfo(r, m)
	return r
}

// copyRelayInfo echoes option 82 to a relay (RFC 3046 2.2); in a direct
// request it is a client's forgery, and is not echoed.
func copyRelayInfo(dst, src *dhcpv4.DHCPv4) {
	if gi := addr4(src.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		copyOpt(dst, src, dhcpv4.OptionRelayAgentInformation)
	}
}

func (h *handler) nak() *dhcpv4.DHCPv4 {
	m := h.m
	r := h.newReply(4)
	r.OpCode, r.HWType, r.TransactionID, r.Flags = dhcpv4.OpcodeBootReply, m.HWType, m.TransactionID, m.Flags
	r.ClientIPAddr, r.YourIPAddr, r.ServerIPAddr = net.IPv4zero, net.IPv4zero, net.IPv4zero
	r.GatewayIPAddr, r.ClientHWAddr = m.GatewayIPAddr, m.ClientHWAddr
	r.Options[dhcpv4.OptionDHCPMessageType.Code()] = msgType[dhcpv4.MessageTypeNak]
	r.Options[dhcpv4.OptionServerIdentifier.Code()] = h.st.static[dhcpv4.OptionServerIdentifier.Code()]
	if !addr4(m.GatewayIPAddr).IsUnspecified() && len(m.GatewayIPAddr) > 0 {
		r.SetBroadcast() // RFC 2131 4.3.2: a relay must broadcast the NAK
	}
	copyOpt(r, m, dhcpv4.OptionClientIdentifier)
	copyRelayInfo(r, m)
	return r
}

func copyOpt(dst, src *dhcpv4.DHCPv4, c dhcpv4.OptionCode) {
	if v := src.Options.Get(c); v != nil {
		dst.Options[c.Code()] = v
	}
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// staticOptions encodes once the options that are the same in every reply
// of a segment.
func staticOptions(c *Segment, bcast netip.Addr) dhcpv4.Options {
	o := dhcpv4.Options{}
	host := c.HostIP.Addr().AsSlice()
	o[dhcpv4.OptionServerIdentifier.Code()] = host
	o[dhcpv4.OptionSubnetMask.Code()] = net.CIDRMask(c.HostIP.Bits(), 32)
	o[dhcpv4.OptionRouter.Code()] = host
	o[dhcpv4.OptionBroadcastAddress.Code()] = bcast.AsSlice()
	if len(c.DNS) > 0 {
		var b []byte
		for _, d := range c.DNS {
			b = append(b, d.AsSlice()...)
		}
		o[dhcpv4.OptionDomainNameServer.Code()] = b
	}
	if c.Domain != "" {
		o[dhcpv4.OptionDomainName.Code()] = []byte(c.Domain)
	}
	if c.MTU > 0 {
		o[dhcpv4.OptionInterfaceMTU.Code()] = binary.BigEndian.AppendUint16(nil, c.MTU)
	}
	if len(c.Search) > 0 {
		o[dhcpv4.OptionDNSDomainSearchList.Code()] = (&rfc1035label.Labels{Labels: c.Search}).ToBytes()
	}
	if len(c.Routes) > 0 {
		// RFC 3442: a client that gets option 121 ignores option 3, so the
		// default route must be in 121 too.
		var rs dhcpv4.Routes
		hasDefault := false
		for _, r := range c.Routes {
			if r.Dst.Bits() == 0 {
				hasDefault = true
			}
			rs = append(rs, &dhcpv4.Route{
				Dest:   &net.IPNet{IP: r.Dst.Masked().Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), 32)},
				Router: r.Gateway.AsSlice(),
			})
		}
		if !hasDefault {
			rs = append(rs, &dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Router: host})
		}
		o[dhcpv4.OptionClasslessStaticRoute.Code()] = rs.ToBytes()
	}
	return o
}
