#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Fails, naming both versions, when the go on PATH is older than go.mod's
# `go` line: the module and the pinned tools `make` installs need it.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(awk '$1 == "go" { print $2; exit }' go.mod)
if ! command -v "${GO:-go}" >/dev/null; then
	echo "Go ${want} or later is needed (go.mod), and there is no go on PATH: see https://go.dev/dl/" >&2
	exit 1
fi
have=$("${GO:-go}" env GOVERSION | sed 's/^go//')
# sort -V puts the older first: the one we have must not be it, unless equal.
if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
	echo "Go ${want} or later is needed (go.mod); ${GO:-go} is ${have}: see https://go.dev/dl/" >&2
	exit 1
fi
