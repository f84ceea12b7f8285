// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Attachment is one attached guard, for status and `inspect progs`.
type Attachment struct {
	Interface string `json:"interface"`
	Ifindex   uint32 `json:"ifindex"`
	Hook      Hook   `json:"hook"`
	// Mode is "driver" for XDP (never generic) or "tcx".
	Mode      string         `json:"mode"`
	Program   string         `json:"program"`
	ProgramID ebpf.ProgramID `json:"programID"`
	Tag       string         `json:"tag"`
	LinkID    link.ID        `json:"linkID"`
	PinPath   string         `json:"pinPath"`
	// Defunct: the device went away; the pin is removed on next Attach.
	Defunct bool `json:"defunct,omitempty"`
}

// describe reads a pinned link: hook and device from the link, program
// name and tag from the program (so links of other pivirt programs pinned
// in the same tree, such as the NAT's, are described correctly too).
func describe(ifname string, pin string, lk link.Link) (Attachment, error) {
	info, err := lk.Info()
	if err != nil {
		return Attachment{}, fmt.Errorf("reading link info of %s: %w", pin, err)
	}
	a := Attachment{Interface: ifname, ProgramID: info.Program, LinkID: info.ID, PinPath: pin}
	switch {
	case info.XDP() != nil:
		a.Hook, a.Mode, a.Ifindex = HookXDP, "driver", info.XDP().Ifindex
	case info.TCX() != nil:
		a.Hook, a.Mode, a.Ifindex = HookTCX, "tcx", info.TCX().Ifindex
		if uint32(info.TCX().AttachType) == uint32(ebpf.AttachTCXEgress) {
			a.Hook = HookTCXEgress
		}
	default:
		a.Hook, a.Mode = Hook(fmt.Sprint(info.Type)), "link"
	}
	a.Defunct = a.Ifindex == 0
	if p, err := ebpf.NewProgramFromID(info.Program); err == nil {
		if pi, err := p.Info(); err == nil {
			a.Program, a.Tag = pi.Name, pi.Tag
		}
		p.Close()
	}
	return a, nil
}

// Attached lists every link pinned under <base>/links/<dir>/ (the guard's
// and those other pivirt programs pin there), sorted by interface and
// program, for `inspect progs`.
func (l *Loader) Attached() ([]Attachment, error) {
	dirs, err := os.ReadDir(LinksDir(l.base))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", LinksDir(l.base), err)
	}
	var out []Attachment
	var errs []error
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(LinksDir(l.base), d.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range files {
			pin := filepath.Join(LinksDir(l.base), d.Name(), f.Name())
			lk, err := link.LoadPinnedLink(pin, nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("opening pinned link %s: %w", pin, err))
				continue
			}
			a, err := describe(d.Name(), pin, lk)
			lk.Close()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Attachment) int {
		return cmp.Or(strings.Compare(a.Interface, b.Interface), strings.Compare(a.Program, b.Program))
	})
	return out, errors.Join(errs...)
}

// Attachment returns the guard attachment of one interface, or an error
// wrapping os.ErrNotExist.
func (l *Loader) Attachment(ifname string) (Attachment, error) {
	for _, name := range []string{progName(HookXDP), progName(HookTCX)} {
		pin := LinkPath(l.base, ifname, name)
		lk, err := link.LoadPinnedLink(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Attachment{}, fmt.Errorf("opening pinned link %s: %w", pin, err)
		}
		defer lk.Close()
		return describe(ifname, pin, lk)
	}
	return Attachment{}, fmt.Errorf("guard on %s: %w", ifname, os.ErrNotExist)
}

// MapInfo describes one pinned map, for `inspect maps`.
type MapInfo struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	KeySize    uint32 `json:"keySize"`
	ValueSize  uint32 `json:"valueSize"`
	MaxEntries uint32 `json:"maxEntries"`
	Entries    int    `json:"entries"`
	ID         uint32 `json:"id"`
	PinPath    string `json:"pinPath"`
}

// PinnedMaps lists the maps pinned under <base>/maps with their current
// number of entries (counted by walking keys), sorted by name.
func (l *Loader) PinnedMaps() ([]MapInfo, error) {
	files, err := os.ReadDir(MapsDir(l.base))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", MapsDir(l.base), err)
	}
	var out []MapInfo
	var errs []error
	for _, f := range files {
		pin := filepath.Join(MapsDir(l.base), f.Name())
		m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			errs = append(errs, fmt.Errorf("opening pinned map %s: %w", pin, err))
			continue
		}
		mi := MapInfo{Name: f.Name(), Type: m.Type().String(), KeySize: m.KeySize(),
			ValueSize: m.ValueSize(), MaxEntries: m.MaxEntries(), PinPath: pin}
		if info, err := m.Info(); err == nil {
			if id, ok := info.ID(); ok {
				mi.ID = uint32(id)
			}
		}
		n, err := countKeys(m)
		m.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("counting entries of %s: %w", pin, err))
		}
		mi.Entries = n
		out = append(out, mi)
	}
	slices.SortFunc(out, func(a, b MapInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// countKeys walks the keys of m (the kernel keeps no entry count).
func countKeys(m *ebpf.Map) (int, error) {
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	n := 0
	var cur any // nil starts the walk
	for {
		err := m.NextKey(cur, &next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		copy(key, next)
		cur = key
		if n > int(m.MaxEntries())+1 {
			return n, errors.New("walk did not end")
		}
	}
}
