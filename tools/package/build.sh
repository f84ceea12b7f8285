#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds pivirt_<version>_amd64.deb into OUT (default bin/): statically
# linked pivirtd and pivirtctl stamped with the version, the unit, the
# example config, tmpfiles and sysusers entries, man pages and shell
# completions generated from the binaries' cobra commands, packed by nfpm
# (tools/package/nfpm.yaml). Run through `make package`, which pins nfpm.
#
# Environment: GO (default go), NFPM (default bin/tools/nfpm), PKG_VERSION
# (default: tools/package/version.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "${1:-$root/bin}" && cd "${1:-$root/bin}" && pwd)
GO=${GO:-go}
NFPM=${NFPM:-$root/bin/tools/nfpm}
PKG_VERSION=${PKG_VERSION:-$("$here/version.sh")}
export PKG_VERSION

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# -s -w: no symbol table or DWARF (Debian ships stripped binaries; a
# panic's trace still names functions and lines).
ldflags="-s -w -X main.version=$PKG_VERSION -X pivirt.hu/pivirt/control/cli.Version=$PKG_VERSION"
for cmd in pivirtd pivirtctl; do
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" build -trimpath -ldflags "$ldflags" -o "$stage/$cmd" "./cmd/$cmd")
done

# Man pages and completions come from the commands themselves; the dates
# in the pages are the commit's, so a rebuild of one commit is the same.
SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct)
export SOURCE_DATE_EPOCH
"$stage/pivirtd" --gen-man "$stage/man/man8"
"$stage/pivirtctl" --gen-man "$stage/man/man1"
gzip -9n "$stage"/man/man*/*
mkdir -p "$stage/completions"
"$stage/pivirtctl" completion bash >"$stage/completions/pivirtctl.bash"
"$stage/pivirtctl" completion zsh >"$stage/completions/_pivirtctl"
"$stage/pivirtctl" completion fish >"$stage/completions/pivirtctl.fish"

cp "$here/pivirtd.service" "$here/pivirtd.yaml" "$here/tmpfiles.conf" "$here/sysusers.conf" "$here/copyright" "$here/lintian-overrides" "$stage/"
# A native package's changelog: the version and the commit it was built from.
{
	echo "pivirt ($PKG_VERSION) unstable; urgency=medium"
	echo
	echo "  * Built from git commit $(git -C "$root" rev-parse HEAD)."
	echo
	echo " -- pivirt developers <pivirt@pivirt.hu>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$stage/changelog.gz"
cp -r "$here/scripts" "$stage/scripts"

deb="$out/pivirt_${PKG_VERSION}_amd64.deb"
rm -f "$deb"
(cd "$stage" && "$NFPM" package --config "$here/nfpm.yaml" --packager deb --target "$deb" >/dev/null)
echo "$deb"
