// SPDX-License-Identifier: Apache-2.0

// Package vmm talks to the VMs' QEMU processes through QMP
// (github.com/digitalocean/go-qemu) to find their NICs: which tap carries
// NIC n of VM name, so that a PortSecurity's vmRef resolves to the
// device the guard attaches to. Each VM's QMP socket lies in one
// directory (pivirtd --qmp-dir), as <name>.qmp.
package vmm
