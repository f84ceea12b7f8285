// SPDX-License-Identifier: Apache-2.0

package leasemap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapLeases

// Key mirrors struct pv_lease_key.
type Key guard.LeaseKey

// Value mirrors struct pv_lease.
type Value guard.Lease

// NewKey returns the key of a MAC on the segment segID.
func NewKey(segID uint32, mac [6]uint8) Key { return Key{SegId: segID, Mac: mac} }

// TAIOffset returns CLOCK_TAI minus CLOCK_REALTIME, rounded to whole
// seconds (the kernel's TAI offset is whole seconds: 0 until a time daemon
// sets it, then 37 as of 2017). Rounding keeps two reads equal, so values
// computed from the same wall time do not drift.
func TAIOffset() (time.Duration, error) {
	var tai, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &tai); err != nil {
		return 0, fmt.Errorf("reading CLOCK_TAI: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return 0, fmt.Errorf("reading CLOCK_REALTIME: %w", err)
	}
	d := time.Duration(tai.Nano() - real.Nano())
	return d.Round(time.Second), nil
}

// TAINanos converts a wall-clock time to CLOCK_TAI nanoseconds, given the
// TAI offset. The zero time gives 0 (not bound).
func TAINanos(t time.Time, taiOffset time.Duration) uint64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	return uint64(t.UnixNano() + int64(taiOffset))
}

// WallTime is the inverse of TAINanos; 0 gives the zero time.
func WallTime(taiNanos uint64, taiOffset time.Duration) time.Time {
	if taiNanos == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(taiNanos)-int64(taiOffset)).UTC()
}

// NewValue returns a lease of ip. A zero expires leaves it unbound (a
// static reservation not yet acknowledged); otherwise it is bound until
// expires.
func NewValue(ip netip.Addr, flags guard.LeaseFlags, expires time.Time, leaseTime time.Duration, taiOffset time.Duration) Value {
	v := Value{Ip: typed.BE32(ip), Flags: uint32(flags), LeaseTime: uint32(leaseTime / time.Second)}
	if !expires.IsZero() {
		v.Flags |= uint32(guard.LeaseBound)
		v.ExpiresTaiNs = TAINanos(expires, taiOffset)
	}
	return v
}

// IP returns the leased address.
func (v Value) IP() netip.Addr { return typed.Addr4(v.Ip) }

// LeaseFlags returns the flags.
func (v Value) LeaseFlags() guard.LeaseFlags { return guard.LeaseFlags(v.Flags) }

// String is "seg=0x.. mac=..".
func (k Key) String() string { return fmt.Sprintf("seg=0x%08x mac=%s", k.SegId, typed.MAC(k.Mac)) }

// String is "ip=.. flags=.. expires=RFC3339|never-bound lease-time=Ns",
// with expiry shown in wall-clock time at the current TAI offset.
func (v Value) String() string {
	off, _ := TAIOffset()
	return v.Format(off)
}

// Format is String at a given TAI offset.
func (v Value) Format(taiOffset time.Duration) string {
	exp := "unbound"
	if v.ExpiresTaiNs != 0 {
		exp = WallTime(v.ExpiresTaiNs, taiOffset).Format(time.RFC3339)
	}
	return fmt.Sprintf("ip=%s flags=%s expires=%s lease-time=%ds", v.IP(), v.LeaseFlags(), exp, v.LeaseTime)
}

// Entry is the decoded, JSON-friendly form of one entry.
type Entry struct {
	SegID        uint32     `json:"segID"`
	MAC          string     `json:"mac"`
	IP           string     `json:"ip"`
	Flags        string     `json:"flags"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	ExpiresTAINs uint64     `json:"expiresTAINs"`
	LeaseTime    uint32     `json:"leaseTime"`
}

// Decode returns the JSON-friendly form of an entry.
func Decode(k Key, v Value, taiOffset time.Duration) Entry {
	e := Entry{SegID: k.SegId, MAC: typed.MAC(k.Mac), IP: v.IP().String(),
		Flags: v.LeaseFlags().String(), ExpiresTAINs: v.ExpiresTaiNs, LeaseTime: v.LeaseTime}
	if v.ExpiresTaiNs != 0 {
		t := WallTime(v.ExpiresTaiNs, taiOffset)
		e.ExpiresAt = &t
	}
	return e
}

// Map is pv_leases.
type Map struct {
	typed.Map[Key, Value]
}

// New wraps the pv_leases map m.
func New(m *ebpf.Map) *Map { return &Map{Map: typed.New[Key, Value](m)} }

// Decoded returns every entry, sorted by segment and MAC.
func (m *Map) Decoded() ([]Entry, error) {
	off, err := TAIOffset()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for k, v := range m.All(&err) {
		out = append(out, Decode(k, v, off))
	}
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", Name, err)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.SegID, b.SegID), cmp.Compare(a.MAC, b.MAC))
	})
	return out, nil
}

// Dump writes one line per entry, sorted.
func (m *Map) Dump(w io.Writer) error {
	es, err := m.Decoded()
	if err != nil {
		return err
	}
	for _, e := range es {
		exp := "unbound"
		if e.ExpiresAt != nil {
			exp = e.ExpiresAt.Format(time.RFC3339)
		}
		if _, err := fmt.Fprintf(w, "seg=0x%08x mac=%s ip=%s flags=%s expires=%s lease-time=%ds\n",
			e.SegID, e.MAC, e.IP, e.Flags, exp, e.LeaseTime); err != nil {
			return err
		}
	}
	return nil
}

// Bind records that ip is leased to mac on segment segID until expires,
// as the DHCP server does when it acknowledges: the guard allows the IP
// from this moment. A static reservation stays marked static.
func (m *Map) Bind(segID uint32, mac [6]uint8, ip netip.Addr, expires time.Time, leaseTime time.Duration) error {
	off, err := TAIOffset()
	if err != nil {
		return err
	}
	k := NewKey(segID, mac)
	var flags guard.LeaseFlags
	if old, err := m.Lookup(k); err == nil && old.Ip == typed.BE32(ip) {
		flags = old.LeaseFlags() & guard.LeaseStatic
	}
	if err := m.Put(k, NewValue(ip, flags, expires, leaseTime, off)); err != nil {
		return fmt.Errorf("binding %s to %s: %w", ip, typed.MAC(mac), err)
	}
	return nil
}

// Release ends the lease of mac on segID (DHCPRELEASE, DECLINE or an
// expired dynamic lease): a static reservation stays, unbound; anything
// else is deleted. An absent entry is not an error.
func (m *Map) Release(segID uint32, mac [6]uint8) error {
	k := NewKey(segID, mac)
	old, err := m.Lookup(k)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if old.LeaseFlags()&guard.LeaseStatic != 0 {
		old.Flags &^= uint32(guard.LeaseBound)
		old.ExpiresTaiNs = 0
		return m.Put(k, old)
	}
	if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}
