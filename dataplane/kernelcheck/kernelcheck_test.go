// SPDX-License-Identifier: Apache-2.0

package kernelcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"pivirt.hu/pivirt/test/testutil"
)

func TestCheck(t *testing.T) {
	ok := func() error { return nil }
	absent := func() error { return fmt.Errorf("probe: %w", ebpf.ErrNotSupported) }
	denied := func() error { return fmt.Errorf("probe: %w", unix.EPERM) }
	tcx := Feature{Name: "tcx links", UsedBy: "the guard", Since: "6.6", Required: true}
	vx := Feature{Name: "VXLAN devices", UsedBy: "OverlayNetwork", Since: "3.7"}
	with := func(f Feature, p func() error) Feature { f.Probe = p; return f }
	for _, tc := range []struct {
		name         string
		fs           []Feature
		wantErr      []string // in the error, in order; none: no error
		wantOptional int
	}{
		{"everything there", []Feature{with(tcx, ok), with(vx, ok)}, nil, 0},
		{"a required one missing", []Feature{with(tcx, absent), with(vx, ok)},
			[]string{"this kernel cannot run pivirtd:", "the kernel lacks tcx links (Linux 6.6+), which the guard needs"}, 0},
		{"an optional one missing", []Feature{with(tcx, ok), with(vx, absent)}, nil, 1},
		{"no right to probe", []Feature{with(tcx, denied)}, []string{"probing for tcx links (Linux 6.6+)", "operation not permitted"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			optional, err := Check(tc.fs)
			if len(optional) != tc.wantOptional {
				t.Errorf("optional missing: %v, want %d", optional, tc.wantOptional)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			var u Unsupported
			if !errors.As(err, &u) {
				t.Fatalf("error %v, want Unsupported", err)
			}
			rest := err.Error()
			for _, w := range tc.wantErr {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error %q lacks %q (in order)", err, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestPrivilegedThisKernel: the kernel the tests run on has every feature
// (6.6 or later), each probe answers.
func TestPrivilegedThisKernel(t *testing.T) {
	testutil.RequireRoot(t)
	ns := testutil.NewNetNS(t)
	var optional []Missing
	err := ns.Do(func() error {
		var err error
		optional, err = Check(Features())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range optional {
		t.Errorf("optional feature missing here: %v", m)
	}
	// A feature this kernel truly lacks (XDP programs have no skb to push a
	// VLAN tag on) is reported as missing, by the real probe.
	_, err = Check([]Feature{{Name: "bpf_skb_vlan_push in XDP", UsedBy: "nothing", Since: "never", Required: true,
		Probe: func() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnSkbVlanPush) }}})
	if err == nil || !strings.Contains(err.Error(), "the kernel lacks bpf_skb_vlan_push in XDP") {
		t.Errorf("a helper XDP lacks: %v", err)
	}
}

// TestREADMEListsFeatures: README's table of kernel floors is Features.
func TestREADMEListsFeatures(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Features() {
		name := f.Name
		if strings.HasPrefix(name, "bpf_") {
			name = "`" + strings.Fields(name)[0] + "`" + strings.TrimPrefix(name, strings.Fields(name)[0])
		}
		if !strings.Contains(string(b), "| "+name+" |") || !strings.Contains(string(b), "| "+f.Since+" |") {
			t.Errorf("README's kernel table lacks %q (since %s)", f.Name, f.Since)
		}
	}
}
