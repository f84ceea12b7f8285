// SPDX-License-Identifier: Apache-2.0

// Package vmguest boots the small guest that tools/vm/mkguest.sh makes
// (Debian's cloud kernel, a busybox initramfs) under QEMU with TCG, its
// NIC on a tap, and runs shell commands in it over the serial console.
// The end-to-end test, the VM benchmark and `make demo-vm` share it.
package vmguest
