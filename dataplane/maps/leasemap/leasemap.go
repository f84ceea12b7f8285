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

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/typed"
)

// Name is the map's name and pin file.
const Name = guard.MapLeases

// Key mirrors struct pv_lease_key.
type Key guard.LeaseKey

// Value mirrors struct pv_lease.
type Value guard.Lease

// NewKey returns the key of a MAC on the segment segID.
func NewKey(segID uint32, mac [6]uint8) Key { return Key{SegId: segID, Mac: mac} }

// ClockOffset returns CLOCK_REALTIME minus CLOCK_MONOTONIC: the wall time
// at which the guard's clock (CLOCK_MONOTONIC, read coarse) was zero, the
// boot. A wall time minus the offset is the guard's time. The offset
// changes when the wall clock is stepped (settimeofday, an NTP step, a
// resume from suspend), not when it is slewed; callers read it again on
// every sync, so a step moves the guard's expiry only until then.
func ClockOffset() (time.Duration, error) {
	var mono, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0, fmt.Errorf("reading CLOCK_MONOTONIC: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return 0, fmt.Errorf("reading CLOCK_REALTIME: %w", err)
	}
	return time.Duration(real.Nano() - mono.Nano()), nil
}

// MonoNanos converts a wall-clock time to CLOCK_MONOTONIC nanoseconds,
// given the clock offset. The zero time gives 0 (not bound); a time before
// the boot gives 1, long expired.
func MonoNanos(t time.Time, clockOffset time.Duration) uint64 {
	if t.IsZero() {
		return 0
	}
	n := t.UnixNano() - int64(clockOffset)
	if n <= 0 {
		return 1
	}
	return uint64(n)
}

// WallTime is the inverse of MonoNanos; 0 gives the zero time.
func WallTime(monoNanos uint64, clockOffset time.Duration) time.Time {
	if monoNanos == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(monoNanos)+int64(clockOffset)).UTC()
}

// NewValue returns a lease of ip. A zero expires leaves it unbound (a
// static reservation not yet acknowledged); otherwise it is bound until
// expires, converted with clockOffset (ClockOffset).
func NewValue(ip netip.Addr, flags guard.LeaseFlags, expires time.Time, leaseTime time.Duration, clockOffset time.Duration) Value {
	v := Value{Ip: typed.BE32(ip), Flags: uint32(flags), LeaseTime: uint32(leaseTime / time.Second)}
	if !expires.IsZero() {
		v.Flags |= uint32(guard.LeaseBound)
		v.ExpiresMonoNs = MonoNanos(expires, clockOffset)
	}
	return v
}

// IP returns the leased address.
func (v Value) IP() netip.Addr { return typed.Addr4(v.Ip) }

// LeaseFlags returns the flags.
func (v Value) LeaseFlags() guard.LeaseFlags { return guard.LeaseFlags(v.Flags) }

// String is "seg=0x.. mac=..".
func (k Key) String() string { return fmt.Sprintf("seg=0x%08x mac=%s", k.SegId, typed.MAC(k.Mac)) }

// String is "ip=.. flags=.. expires=RFC3339|unbound lease-time=Ns",
// with expiry shown in wall-clock time at the current clock offset.
func (v Value) String() string {
	off, _ := ClockOffset()
	return v.Format(off)
}

// Format is String at a given clock offset.
func (v Value) Format(clockOffset time.Duration) string {
	exp := "unbound"
	if v.ExpiresMonoNs != 0 {
		exp = WallTime(v.ExpiresMonoNs, clockOffset).Format(time.RFC3339)
	}
	return fmt.Sprintf("ip=%s flags=%s expires=%s lease-time=%ds", v.IP(), v.LeaseFlags(), exp, v.LeaseTime)
}

// Entry is the decoded, JSON-friendly form of one entry.
type Entry struct {
	SegID         uint32     `json:"segID"`
	MAC           string     `json:"mac"`
	IP            string     `json:"ip"`
	Flags         string     `json:"flags"`
	ExpiresAt     *time.Time `json:"expiresAt,omitempty"`
	ExpiresMonoNs uint64     `json:"expiresMonoNs"`
	LeaseTime     uint32     `json:"leaseTime"`
}

// Decode returns the JSON-friendly form of an entry.
func Decode(k Key, v Value, clockOffset time.Duration) Entry {
	e := Entry{SegID: k.SegId, MAC: typed.MAC(k.Mac), IP: v.IP().String(),
		Flags: v.LeaseFlags().String(), ExpiresMonoNs: v.ExpiresMonoNs, LeaseTime: v.LeaseTime}
	if v.ExpiresMonoNs != 0 {
		t := WallTime(v.ExpiresMonoNs, clockOffset)
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
	off, err := ClockOffset()
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

// Binding is one acknowledged lease for BindAll.
type Binding struct {
	Segment   uint32
	MAC       [6]uint8
	IP        netip.Addr
	Expires   time.Time
	LeaseTime time.Duration
}

// Bind records that ip is leased to mac on segment segID until expires,
// as the DHCP server does when it acknowledges: the guard allows the IP
// from this moment. A static reservation stays marked static.
func (m *Map) Bind(segID uint32, mac [6]uint8, ip netip.Addr, expires time.Time, leaseTime time.Duration) error {
	return m.BindAll([]Binding{{Segment: segID, MAC: mac, IP: ip, Expires: expires, LeaseTime: leaseTime}})
}

// BindAll is Bind for a group of leases (later ones win for a repeated
// MAC): the clocks are read once and the entries written in one batch.
func (m *Map) BindAll(bs []Binding) error {
	if len(bs) == 0 {
		return nil
	}
	off, err := ClockOffset()
	if err != nil {
		return err
	}
	keys, values := make([]Key, len(bs)), make([]Value, len(bs))
	for i, b := range bs {
		keys[i] = NewKey(b.Segment, b.MAC)
		var flags guard.LeaseFlags
		if old, err := m.Lookup(keys[i]); err == nil && old.Ip == typed.BE32(b.IP) {
			flags = old.LeaseFlags() & guard.LeaseStatic
		}
		values[i] = NewValue(b.IP, flags, b.Expires, b.LeaseTime, off)
	}
	if err := m.PutAll(keys, values); err != nil {
		if len(bs) == 1 {
			return fmt.Errorf("binding %s to %s: %w", bs[0].IP, typed.MAC(bs[0].MAC), err)
		}
		return fmt.Errorf("binding %d leases: %w", len(bs), err)
	}
	return nil
}

// Refresh is BindAll for the entries that hold their binding's address
// already (a new expiry for the same lease); the others are left as they
// are: an entry of another address is not that lease's.
func (m *Map) Refresh(bs []Binding) error {
	var same []Binding
	for _, b := range bs {
		if old, err := m.Lookup(NewKey(b.Segment, b.MAC)); err == nil && old.Ip == typed.BE32(b.IP) {
			same = append(same, b)
		}
	}
	return m.BindAll(same)
}

// Release ends the lease of mac to ip on segID (DHCPRELEASE, DECLINE or
// an expired dynamic lease): a static reservation stays, unbound;
// anything else is deleted. An entry of another address is not that
// lease's (a reservation's since, say) and stays as it is; an absent
// entry is not an error.
func (m *Map) Release(segID uint32, mac [6]uint8, ip netip.Addr) error {
	k := NewKey(segID, mac)
	old, err := m.Lookup(k)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if old.Ip != typed.BE32(ip) {
		return nil
	}
	if old.LeaseFlags()&guard.LeaseStatic != 0 {
		old.Flags &^= uint32(guard.LeaseBound)
		old.ExpiresMonoNs = 0
		return m.Put(k, old)
	}
	if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// taiFloor separates the two clocks expiry has been kept in: 2^60 ns is
// 36 years, so a CLOCK_MONOTONIC time (since boot) stays below it and a
// CLOCK_TAI time (since 1970) has been above it since 2006.
const taiFloor = 1 << 60

// ConvertTAI rewrites into CLOCK_MONOTONIC the expiry of every lease that
// a pivirtd from before the guard read CLOCK_MONOTONIC_COARSE wrote in
// CLOCK_TAI nanoseconds, and returns how many it rewrote. Such a pin is
// reused across an in-place upgrade, and its static bindings (known only
// to this map) would otherwise look bound for decades. A lease is taken
// for TAI when its expiry minus its lease time, about when it was
// written, is past taiFloor; a monotonic one cannot be, even with a lease
// time of decades.
func (m *Map) ConvertTAI() (int, error) {
	var err error
	old := map[Key]Value{}
	for k, v := range m.All(&err) {
		lt := uint64(v.LeaseTime) * uint64(time.Second)
		if v.ExpiresMonoNs >= taiFloor && v.ExpiresMonoNs-lt >= taiFloor {
			old[k] = v
		}
	}
	if err != nil || len(old) == 0 {
		return 0, err
	}
	var tai, mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &tai); err != nil {
		return 0, fmt.Errorf("reading CLOCK_TAI: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0, fmt.Errorf("reading CLOCK_MONOTONIC: %w", err)
	}
	off := uint64(tai.Nano() - mono.Nano())
	n := 0
	var errs []error
	for k, v := range old {
		if v.ExpiresMonoNs > off {
			v.ExpiresMonoNs -= off
		} else {
			v.ExpiresMonoNs = 1 // expired before the boot
		}
		// UpdateExist: a lease released meanwhile stays released.
		if err := m.Raw().Update(&k, v, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("converting the expiry of %s: %w", k, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
