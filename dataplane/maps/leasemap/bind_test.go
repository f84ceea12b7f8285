// SPDX-License-Identifier: Apache-2.0

package leasemap_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"pivirt.hu/dataplane/dataplane/guard"
	"pivirt.hu/dataplane/dataplane/maps/leasemap"
	"pivirt.hu/dataplane/test/testutil"
)

func TestPrivilegedBindRelease(t *testing.T) {
	testutil.RequireBPF(t)
	spec, err := guard.TypesSpec()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps[guard.MapLeases].Copy()
	ms.Pinning = ebpf.PinNone
	raw, err := ebpf.NewMap(ms)
	testutil.SkipIfNotSupported(t, err)
	defer raw.Close()
	m := leasemap.New(raw)
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
	if err != nil || v.LeaseFlags() != guard.LeaseStatic|guard.LeaseBound || v.ExpiresTaiNs == 0 {
		t.Errorf("bound static: %s, %v", v, err)
	}
	if err := m.Release(1, mac); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Lookup(k); err != nil || v.LeaseFlags() != guard.LeaseStatic || v.ExpiresTaiNs != 0 || v.IP() != ip {
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
	if err := m.Release(2, mac); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lookup(k2); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("released dynamic: %v, want ErrKeyNotExist", err)
	}
	if err := m.Release(3, mac); err != nil {
		t.Errorf("releasing nothing: %v", err)
	}
}
