// SPDX-License-Identifier: Apache-2.0

package loader

import (
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

func describe(ifname string, hook Hook, pin string, lk link.Link) (Attachment, error) {
	info, err := lk.Info()
	if err != nil {
		return Attachment{}, fmt.Errorf("reading link info of %s: %w", pin, err)
	}
	a := Attachment{Interface: ifname, Ifindex: linkIfindex(info), Hook: hook, Mode: "tcx",
		Program: progName(hook), ProgramID: info.Program, LinkID: info.ID, PinPath: pin}
	if hook == HookXDP {
		a.Mode = "driver"
	}
	a.Defunct = a.Ifindex == 0
	if p, err := ebpf.NewProgramFromID(info.Program); err == nil {
		if pi, err := p.Info(); err == nil {
			a.Tag = pi.Tag
		}
		p.Close()
	}
	return a, nil
}

// Attached lists the pinned guard links under <base>/links, sorted by
// interface.
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
			hook := HookTCX
			if strings.Contains(f.Name(), "xdp") {
				hook = HookXDP
			}
			lk, err := link.LoadPinnedLink(pin, nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("opening pinned link %s: %w", pin, err))
				continue
			}
			a, err := describe(d.Name(), hook, pin, lk)
			lk.Close()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Attachment) int { return strings.Compare(a.Interface, b.Interface) })
	return out, errors.Join(errs...)
}

// Attachment returns the guard attachment of one interface, or an error
// wrapping os.ErrNotExist.
func (l *Loader) Attachment(ifname string) (Attachment, error) {
	for _, p := range []struct {
		hook Hook
		name string
	}{{HookXDP, progName(HookXDP)}, {HookTCX, progName(HookTCX)}} {
		pin := LinkPath(l.base, ifname, p.name)
		lk, err := link.LoadPinnedLink(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Attachment{}, fmt.Errorf("opening pinned link %s: %w", pin, err)
		}
		defer lk.Close()
		return describe(ifname, p.hook, pin, lk)
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
