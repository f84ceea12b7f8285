#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# mkguest.sh [OUTDIR] makes the small VM that `make demo-vm`, the QEMU end-to-end
# test (test/vm_test.go) and `make bench` (part vm) boot, from Debian
# packages only, installing nothing system-wide:
#
#   OUTDIR/vmlinuz     Debian's cloud kernel (linux-image-cloud-amd64's image)
#   OUTDIR/initrd.img  busybox-static, virtio_net + virtio_pci and the modules
#                      they depend on (read with modinfo -F depends), and /init
#   OUTDIR/stamp       what they were made from; a run that finds the same
#                      stamp does nothing (and needs no network)
#
# OUTDIR defaults to bin/guest. The .debs and their unpacked trees are kept in
# $PIVIRT_GUEST_CACHE (default $XDG_CACHE_HOME/pivirt-guest, else
# bin/guest-cache). KERNEL_PKG overrides the kernel package (e.g.
# linux-image-6.1.0-57-cloud-amd64-unsigned).
#
# The guest's /init (kernel command line keys):
#   mounts proc, sys, dev, tmp; loads the modules; brings lo and eth0 up;
#   pv.dhcp=1 (default) runs udhcpc on eth0 and prints
#     "PVGUEST LEASE ip=A/N router=R uptime=S" (or "PVGUEST NOLEASE");
#   then prints "PVGUEST READY" and runs commands read from the serial
#   console, one a line as "ID COMMAND": it prints "PVGUEST BEGIN ID", the
#   command's output (stdout and stderr), and "PVGUEST END ID rc=N". The
#   console does not echo, so only the guest's own output comes back.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bin/guest}
CACHE=${PIVIRT_GUEST_CACHE:-${XDG_CACHE_HOME:+$XDG_CACHE_HOME/pivirt-guest}}
CACHE=${CACHE:-$ROOT/bin/guest-cache}
mkdir -p "$OUT" "$CACHE"

# One builder at a time (tests of several packages may call this at once).
exec 9>"$OUT/.lock"
flock -w 600 9

SELF=$(sha256sum "$0" | cut -c1-16)
if [ -z "${KERNEL_PKG:-}" ] && [ -f "$OUT/stamp" ] && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ] &&
	grep -qx "script=$SELF" "$OUT/stamp"; then
	exit 0
fi

# apt-get download needs package lists; update them once if apt knows none.
fetch() { # fetch PKG: the .deb of PKG's candidate version into $CACHE, prints its path
	local pkg=$1 ver deb
	ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
	if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
		apt-get update -q >&2
		ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
	fi
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || { echo "mkguest: no Debian package $pkg" >&2; return 1; }
	# apt names a .deb PKG_VERSION_ARCH.deb with the epoch's colon as %3a.
	local glob="$CACHE/${pkg}_${ver//:/%3a}_*.deb"
	deb=$(ls $glob 2>/dev/null | head -1 || true)
	if [ -z "$deb" ]; then
		# Download as root: apt's _apt user cannot write a root-owned cache.
		(cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >&2)
		deb=$(ls $glob | head -1)
	fi
	echo "$deb"
}
unpack() { # unpack DEB DIR (once)
	[ -d "$2" ] || { mkdir -p "$2.tmp" && dpkg-deb -x "$1" "$2.tmp" && mv "$2.tmp" "$2"; }
}

if [ -z "${KERNEL_PKG:-}" ]; then
	meta=$(fetch linux-image-cloud-amd64)
	KERNEL_PKG=$(dpkg-deb -f "$meta" Depends | tr ',' '\n' | sed -n 's/^ *\(linux-image-[^ ]*-cloud-amd64[^ ]*\).*/\1/p' | head -1)
fi
kdeb=$(fetch "$KERNEL_PKG")
KDIR=$CACHE/$(basename "$kdeb" .deb)
unpack "$kdeb" "$KDIR"
bdeb=$(fetch busybox-static)
BDIR=$CACHE/$(basename "$bdeb" .deb)
unpack "$bdeb" "$BDIR"
# modinfo from Debian's kmod, unpacked (kmod is not installed everywhere).
mdeb=$(fetch kmod)
MDIR=$CACHE/$(basename "$mdeb" .deb)
unpack "$mdeb" "$MDIR"
ln -sf kmod "$MDIR/bin/modinfo"
MODINFO=$MDIR/bin/modinfo

KVER=$(ls "$KDIR/lib/modules" | head -1)
MODS=$KDIR/lib/modules/$KVER
VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | head -1)

# The modules the NIC needs, dependencies first (a depth-first walk of
# modinfo's depends).
declare -A seen=()
order=()
modpath() { find "$MODS/kernel" -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" | head -1; }
visit() {
	local m=$1 f d
	[ -n "${seen[$m]:-}" ] && return
	seen[$m]=1
	f=$(modpath "$m")
	[ -n "$f" ] || { echo "mkguest: module $m not in $KVER (built in?)" >&2; return 1; }
	for d in $("$MODINFO" -F depends "$f" | tr ',' ' '); do visit "$d"; done
	order+=("$m")
}
for m in virtio_pci virtio_net; do visit "$m"; done

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,dev,proc,sys,tmp,etc,lib/modules}
cp "$BDIR/bin/busybox" "$STAGE/bin/busybox"
ln -s busybox "$STAGE/bin/sh"
for m in "${order[@]}"; do
	f=$(modpath "$m")
	case $f in
	*.xz) xz -dc "$f" >"$STAGE/lib/modules/$m.ko" ;;
	*.zst) zstd -qdc "$f" >"$STAGE/lib/modules/$m.ko" ;;
	*) cp "$f" "$STAGE/lib/modules/$m.ko" ;;
	esac
done
printf '%s\n' "${order[@]}" >"$STAGE/lib/modules/order"

cat >"$STAGE/etc/udhcpc.script" <<'EOF'
#!/bin/sh
# udhcpc hook: set the address and the default route, print the lease.
case $1 in
deconfig) ip -4 addr flush dev "$interface"; ip link set "$interface" up ;;
bound|renew)
	ip -4 addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	[ -n "$router" ] && ip route replace default via "${router%% *}" dev "$interface"
	echo "PVGUEST LEASE ip=$ip/${mask:-24} router=${router%% *} uptime=$(cut -d' ' -f1 /proc/uptime)"  >/dev/console
	;;
esac
exit 0
EOF
chmod 755 "$STAGE/etc/udhcpc.script"

cat >"$STAGE/init" <<'EOF'
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
# The console carries the command protocol: keep the kernel off it.
dmesg -n 1
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko; done
hostname pvguest
ip link set lo up
i=0
while ! ip link show eth0 >/dev/null 2>&1 && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
ip link set eth0 up
case " $(cat /proc/cmdline) " in *" pv.dhcp=0 "*) ;; *)
	udhcpc -i eth0 -s /etc/udhcpc.script -t 20 -T 1 -n -q >/dev/null 2>&1 || echo "PVGUEST NOLEASE"
	;;
esac
stty -echo -icrnl -onlcr 2>/dev/null
echo "PVGUEST READY"
# Commands from the console, one a line: "ID COMMAND". Each runs in its
# own sh with stdin from /dev/null, so it never eats the next command.
while read -r id cmd; do
	[ -n "$id" ] || continue
	echo "PVGUEST BEGIN $id"
	sh -c "$cmd" </dev/null 2>&1
	echo "PVGUEST END $id rc=$?"
done
echo "PVGUEST EOF"
poweroff -f
EOF
chmod 755 "$STAGE/init"

(cd "$STAGE" && find . | sort | "$BDIR/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$OUT/initrd.img.tmp"
cp "$VMLINUZ" "$OUT/vmlinuz.tmp"
mv "$OUT/initrd.img.tmp" "$OUT/initrd.img"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
{
	echo "script=$SELF"
	echo "kernel=$(basename "$kdeb")"
	echo "busybox=$(basename "$bdeb")"
	echo "modules=${order[*]}"
} >"$OUT/stamp"
echo "mkguest: $OUT/vmlinuz ($KVER) and $OUT/initrd.img (modules: ${order[*]})"
