#!/usr/bin/env bash
# Prints the release a build of the checkout in the current directory is,
# and its commit, on one line: "VERSION REVISION". The Makefile stamps
# both into the binary, the Docker build passes them as build arguments.
#
#   at a tag, clean tree      v0.2.0 <rev>
#   after a tag, or dirty     v0.2.0-dev+<rev>       (<rev>-dirty if dirty)
#   no tag at all             v<VERSION file>-dev+<rev>
#   not a git checkout        v<VERSION file>-dev unknown
#
# <rev> is the commit's 12-character hash; a build between tags is never
# mistaken for the release it follows. internal/base/version applies the same
# rule to a build that was not stamped.
set -euo pipefail

file=$(tr -d '[:space:]' <VERSION)
file=v${file#v}

if ! rev=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	echo "$file-dev unknown"
	exit 0
fi
if ! git diff --quiet HEAD 2>/dev/null; then
	rev=$rev-dirty
fi
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null) && [[ $rev != *-dirty ]]; then
	echo "$tag $rev"
elif tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null); then
	echo "$tag-dev+$rev $rev"
else
	echo "$file-dev+$rev $rev"
fi
