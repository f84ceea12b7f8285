#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Prints the Debian version of the package built from this checkout:
#   v0.N.0 tagged here                -> 0.N.0
#   K commits after v0.N.0            -> 0.N.0+gitK.<sha>   (sorts after 0.N.0)
#   no release tag in the history     -> 0.0.0~git<commit date>.<sha> (sorts before 0.0.0)
# and +dirty after any of them when the work tree has changes.
set -euo pipefail
cd "$(dirname "$0")/../.."

sha=$(git rev-parse --short=7 HEAD)
dirty=""
if ! git diff --quiet HEAD -- 2>/dev/null; then
	dirty="+dirty"
fi
if desc=$(git describe --tags --long --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null); then
	# v0.1.0-3-gabc1234
	tag=${desc%-*-g*}
	rest=${desc#"$tag"-}
	count=${rest%%-*}
	version=${tag#v}
	if [ "$count" != 0 ]; then
		version="$version+git$count.$sha"
	fi
else
	version="0.0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d).$sha"
fi
echo "$version$dirty"
