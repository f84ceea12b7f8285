// SPDX-License-Identifier: Apache-2.0

package vmm

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/digitalocean/go-qemu/qmp/raw"

	pivirtv1 "pivirt.hu/pivirt/api/pivirt/v1"
)

// NIC is one network device of a VM, in QEMU's order.
type NIC struct {
	ID  string // QEMU's device id, e.g. net0
	MAC string
	// Tap is the host device of its tap backend, "" for other backends.
	Tap string
}

// VM is what QMP says of one QEMU process.
type VM struct {
	Name   string // -name, else the socket's file name
	Socket string
	NICs   []NIC
}

var (
	nicRE     = regexp.MustCompile(`^(\S+): index=\d+,type=nic,.*macaddr=([0-9a-fA-F:]{17})`)
	backendRE = regexp.MustCompile(`^\s*\\\s*(\S+): index=\d+,type=(\w+)(?:,(.*))?$`)
)

// ParseInfoNetwork reads the NICs from the output of the monitor command
// "info network": each NIC line is followed by its backend ("\ hostnet0:
// ...,type=tap,ifname=tap0,..."). Lines of netdevs without a NIC are
// skipped.
func ParseInfoNetwork(out string) []NIC {
	var nics []NIC
	cur := -1
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		if m := nicRE.FindStringSubmatch(line); m != nil {
			nics = append(nics, NIC{ID: m[1], MAC: strings.ToLower(m[2])})
			cur = len(nics) - 1
			continue
		}
		m := backendRE.FindStringSubmatch(line)
		if m == nil || cur < 0 {
			cur = -1
			continue
		}
		if m[2] == "tap" {
			for _, kv := range strings.Split(m[3], ",") {
				if v, ok := strings.CutPrefix(kv, "ifname="); ok {
					nics[cur].Tap = v
				}
			}
		}
		cur = -1
	}
	return nics
}

// Query asks the QEMU behind socket for its name and NICs.
func Query(socket string, timeout time.Duration) (VM, error) {
	vm := VM{Name: strings.TrimSuffix(filepath.Base(socket), filepath.Ext(socket)), Socket: socket}
	mon, err := qmp.NewSocketMonitor("unix", socket, timeout)
	if err != nil {
		return vm, fmt.Errorf("connecting to QMP socket %s: %w", socket, err)
	}
	if err := mon.Connect(); err != nil {
		return vm, fmt.Errorf("QMP handshake on %s: %w", socket, err)
	}
	defer func() { _ = mon.Disconnect() }()
	r := raw.NewMonitor(mon)
	if n, err := r.QueryName(); err == nil && n.Name != nil && *n.Name != "" {
		vm.Name = *n.Name
	}
	// No QMP command names a tap backend's ifname; the monitor's
	// "info network" does.
	out, err := r.HumanMonitorCommand("info network", nil)
	if err != nil {
		return vm, fmt.Errorf("info network on %s: %w", socket, err)
	}
	vm.NICs = ParseInfoNetwork(out)
	return vm, nil
}

// Resolver maps vmRefs to taps from the QMP sockets in Dir, caching each
// VM's answer for TTL (QEMU is asked again after that, for hotplugged
// NICs, or when its socket is replaced).
type Resolver struct {
	Dir     string
	TTL     time.Duration // default 10s
	Timeout time.Duration // per QMP exchange; default 2s

	mu    sync.Mutex
	cache map[string]cached // by socket path
}

type cached struct {
	vm   VM
	ino  uint64
	when time.Time
}

// Resolve returns the tap of every NIC of every VM with a QMP socket in
// Dir. A missing Dir is no VM; a VM that does not answer is left out and
// its error returned among the others.
func (r *Resolver) Resolve() (map[pivirtv1.VMRef]string, error) {
	out := map[pivirtv1.VMRef]string{}
	if r.Dir == "" {
		return out, nil
	}
	socks, err := filepath.Glob(filepath.Join(r.Dir, "*.qmp"))
	if err != nil {
		return out, fmt.Errorf("listing QMP sockets in %s: %w", r.Dir, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = map[string]cached{}
	}
	ttl, timeout := cmp.Or(r.TTL, 10*time.Second), cmp.Or(r.Timeout, 2*time.Second)
	var errs []error
	seen := map[string]bool{}
	for _, s := range socks {
		seen[s] = true
		ino := inode(s)
		c, ok := r.cache[s]
		if !ok || c.ino != ino || time.Since(c.when) > ttl {
			vm, err := Query(s, timeout)
			if err != nil {
				delete(r.cache, s)
				errs = append(errs, err)
				continue
			}
			c = cached{vm: vm, ino: ino, when: time.Now()}
			r.cache[s] = c
		}
		for i, n := range c.vm.NICs {
			if n.Tap != "" {
				out[pivirtv1.VMRef{Name: c.vm.Name, NIC: i}] = n.Tap
			}
		}
	}
	for s := range r.cache {
		if !seen[s] {
			delete(r.cache, s)
		}
	}
	return out, errors.Join(errs...)
}

func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return statIno(fi)
}
