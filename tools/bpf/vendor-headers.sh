#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Copies into bpf/vendor/include the host headers (libbpf-dev,
# linux-libc-dev) that the programs in bpf/ include, directly or not, as
# clang -M lists them. Run it after adding an #include; then make generate.
set -euo pipefail
cd "$(dirname "$0")/../../bpf"
rm -rf vendor/include
for f in $(for c in *.c; do clang -target bpf -M -O2 -I include -I . -I /usr/include/x86_64-linux-gnu "$c"; done |
	tr ' \\' '\n\n' | grep '^/usr/include' | sort -u); do
	rel=${f#/usr/include/}
	rel=${rel#x86_64-linux-gnu/}
	mkdir -p "vendor/include/$(dirname "$rel")"
	cp "$f" "vendor/include/$rel"
done
echo "$(find vendor/include -type f | wc -l) headers in bpf/vendor/include"
