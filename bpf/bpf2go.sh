#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The one place the programs' compiler flags live: every go:generate
# directive runs bpf2go through this script. Include paths are relative to
# the directory go generate runs in, so the objects do not depend on where
# the checkout is; -nostdlibinc keeps the host's /usr/include out (the
# headers are vendored, bpf/vendor/README.md).
set -euo pipefail
bpf=$(realpath --relative-to="$PWD" "$(dirname "$0")")
exec go tool bpf2go -target bpfel \
	-cflags "-O2 -g -Wall -Werror -nostdlibinc -I$bpf/include -I$bpf -I$bpf/vendor/include" "$@"
