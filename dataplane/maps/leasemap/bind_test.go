// SPDX-License-Identifier: Apache-2.0

package leasemap_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/dataplane/guard"
	"pivirt.hu/pivirt/dataplane/maps/leasemap"
	"pivirt.hu/pivirt/test/testutil"
)

// newLeaseMap is an unpinned pv_leases, closed with the test.
func newLeaseMap(t *testing.T) *leasemap.Map {
	t.Helper()
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps[guard.MapLeases].Copy()
	ms.Pinning = ebpf.PinNone
	raw, err := ebpf.NewMap(ms)
	testutil.SkipIfNotSupported(t, err)
	t.Cleanup(func() { raw.Close() })
	return leasemap.New(raw)
}

func mustOffset(t *testing.T) time.Duration {
	t.Helper()
	off, err := leasemap.ClockOffset()
	if err != nil {
		t.Fatal(err)
	}
	return off
}

func TestPrivilegedBindRelease(t *testing.T) {
	m := newLeaseMap(t)
	mac := [6]uint8{0x52, 0x54, 0, 0, 0, 1}
	ip := netip.MustParseAddr("192.168.100.20")
	exp := time.Now().Add(time.Hour)

	// A static reservation, bound and released: stays, unbound.
	k := leasemap.NewKey(1, mac)
	if err := m.Put(k, leasemap.NewValue(ip, guard.LeaseStatic, time.Time{}, time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.Bind(1, mac, ip, exp, time.Hour); err != nil {
		t.Fatal(err)
	}
	v, err := m.Lookup(k)
	if err != nil || v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound || v.ExpiresMonoNs == 0 {
		t.Errorf("bound static: %s, %v", v, err)
	}
	if err := m.Release(1, mac, netip.MustParseAddr("192.168.100.99")); err != nil { // another address's lease
		t.Fatal(err)
	}
	if v, err := m.Lookup(k); err != nil || v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound {
		t.Errorf("static after the release of another address: %s, %v", v, err)
	}
	if err := m.Refresh([]leasemap.Binding{{Segment: 1, MAC: mac, IP: netip.MustParseAddr("192.168.100.99"), Expires: exp, LeaseTime: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Lookup(k); err != nil || v.IP() != ip {
		t.Errorf("static after refreshing another address's lease: %s, %v", v, err)
	}
	if err := m.Refresh([]leasemap.Binding{{Segment: 1, MAC: mac, IP: ip, Expires: exp.Add(time.Hour), LeaseTime: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Lookup(k); err != nil || v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound ||
		leasemap.WallTime(v.ExpiresMonoNs, mustOffset(t)).Sub(exp) < 59*time.Minute {
		t.Errorf("static after refreshing its own lease an hour on: %s, %v", v, err)
	}
	if err := m.Release(1, mac, ip); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Lookup(k); err != nil || v.LeaseFlags() != guard.LeaseStatic || v.ExpiresMonoNs != 0 || v.IP() != ip {
		t.Errorf("released static: %s, %v", v, err)
	}

	// A dynamic lease: released means gone.
	k2 := leasemap.NewKey(2, mac)
	if err := m.Bind(2, mac, ip, exp, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Lookup(k2); err != nil || v.LeaseFlags() != guard.LeaseBound {
		t.Errorf("bound dynamic: %s, %v", v, err)
	}
	if err := m.Release(2, mac, ip); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lookup(k2); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("released dynamic: %v, want ErrKeyNotExist", err)
	}
	if err := m.Release(3, mac, ip); err != nil {
		t.Errorf("releasing nothing: %v", err)
	}
}

// TestPrivilegedBindAll writes a group in one batch: a static reservation
// keeps its flag, a repeated MAC ends with its last binding, and every
// lease of the group is bound.
func TestPrivilegedBindAll(t *testing.T) {
	m := newLeaseMap(t)
	exp := time.Now().Add(time.Hour)
	static := [6]uint8{0x52, 0x54, 0, 0, 0, 9}
	staticIP := netip.MustParseAddr("192.168.100.9")
	if err := m.Put(leasemap.NewKey(1, static), leasemap.NewValue(staticIP, guard.LeaseStatic, time.Time{}, time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	var bs []leasemap.Binding
	for i := range 200 {
		bs = append(bs, leasemap.Binding{Segment: 1, MAC: [6]uint8{0x52, 0x54, 0, 0, 1, byte(i)},
			IP: netip.AddrFrom4([4]byte{192, 168, 101, byte(i)}), Expires: exp, LeaseTime: time.Hour})
	}
	bs = append(bs, leasemap.Binding{Segment: 1, MAC: static, IP: staticIP, Expires: exp, LeaseTime: time.Hour})
	again := bs[0]
	again.IP = netip.MustParseAddr("192.168.102.1")
	bs = append(bs, again)
	if err := m.BindAll(bs); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs[1:200] {
		if v, err := m.Lookup(leasemap.NewKey(1, b.MAC)); err != nil || v.IP() != b.IP || v.LeaseFlags() != guard.LeaseBound {
			t.Errorf("%v: %s, %v", b.MAC, v, err)
		}
	}
	if v, err := m.Lookup(leasemap.NewKey(1, static)); err != nil || v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound {
		t.Errorf("static: %s, %v", v, err)
	}
	if v, err := m.Lookup(leasemap.NewKey(1, again.MAC)); err != nil || v.IP() != again.IP {
		t.Errorf("repeated MAC: %s, %v, want %s", v, err, again.IP)
	}
	if err := m.BindAll(nil); err != nil {
		t.Errorf("an empty group: %v", err)
	}
}

// TestPrivilegedConvertTAI checks that leases an older pivirtd wrote in
// CLOCK_TAI are rewritten into CLOCK_MONOTONIC at the same wall time, and
// that monotonic ones, even with a lease time of a century, are left.
func TestPrivilegedConvertTAI(t *testing.T) {
	m := newLeaseMap(t)
	off, err := leasemap.ClockOffset()
	if err != nil {
		t.Fatal(err)
	}
	var tai, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &tai); err != nil {
		t.Fatal(err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		t.Fatal(err)
	}
	taiOff := time.Duration(tai.Nano() - real.Nano()).Round(time.Second)
	ip := netip.MustParseAddr("192.168.100.20")
	now := time.Now()
	taiValue := func(exp time.Time) leasemap.Value {
		v := leasemap.NewValue(ip, guard.LeaseStatic, exp, time.Hour, 0)
		v.ExpiresMonoNs = uint64(exp.UnixNano() + int64(taiOff))
		return v
	}
	century := time.Duration(0xffffffff) * time.Second
	put := map[uint32]leasemap.Value{
		1: taiValue(now.Add(time.Hour)),
		2: taiValue(now.Add(-time.Hour)),
		3: leasemap.NewValue(ip, 0, now.Add(time.Hour), time.Hour, off),
		4: leasemap.NewValue(ip, 0, now.Add(century), century, off),
	}
	mac := [6]uint8{0x52, 0x54, 0, 0, 0, 1}
	for seg, v := range put {
		if err := m.Put(leasemap.NewKey(seg, mac), v); err != nil {
			t.Fatal(err)
		}
	}
	n, err := m.ConvertTAI()
	if err != nil || n != 2 {
		t.Fatalf("ConvertTAI() = %d, %v; want 2", n, err)
	}
	get := func(seg uint32) leasemap.Value {
		v, err := m.Lookup(leasemap.NewKey(seg, mac))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if exp := leasemap.WallTime(get(1).ExpiresMonoNs, off); exp.Sub(now.Add(time.Hour)).Abs() > time.Second {
		t.Errorf("converted expiry %v, want %v", exp, now.Add(time.Hour))
	}
	if v := get(1); v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound || v.IP() != ip || v.LeaseTime != 3600 {
		t.Errorf("conversion changed more than the expiry: %s", v)
	}
	if exp := leasemap.WallTime(get(2).ExpiresMonoNs, off); !exp.Before(now) {
		t.Errorf("expired lease now expires %v", exp)
	}
	for _, seg := range []uint32{3, 4} {
		if got := get(seg); got != put[seg] {
			t.Errorf("monotonic lease %d rewritten: %s, want %s", seg, got, put[seg])
		}
	}
	if n, err := m.ConvertTAI(); err != nil || n != 0 {
		t.Errorf("second ConvertTAI() = %d, %v; want nothing to do", n, err)
	}
}
