#!/usr/bin/env bash
# Cuts a release in the changelog: the entries under "## Unreleased" move
# under "## vX.Y.Z (YYYY-MM-DD)", an empty "## Unreleased" stays above
# it, and the VERSION file says X.Y.Z. `make release VERSION=X.Y.Z` runs
# it, then commits, tags and builds dist/ (the Makefile says how).
#
#   scripts/release-notes.sh X.Y.Z [CHANGELOG [VERSION_FILE]]
#
# Defaults: CHANGELOG.md and internal/base/version/VERSION (the top-level
# VERSION links to it). It refuses, changing nothing, a version that is
# not semantic (X.Y.Z, optionally -pre.release), is not newer than the
# VERSION file's, or is already in the changelog, and an Unreleased
# section with no entries. RELEASE_DATE overrides today's date (UTC).
set -euo pipefail

if (($# < 1 || $# > 3)); then
	echo "usage: $0 X.Y.Z [CHANGELOG [VERSION_FILE]]" >&2
	exit 2
fi
ver=${1#v}
log=${2:-CHANGELOG.md}
vfile=${3:-internal/base/version/VERSION}
date=${RELEASE_DATE:-$(date -u +%F)}

die() {
	echo "release-notes: $*" >&2
	exit 1
}

[[ $ver =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "version $1: want X.Y.Z or X.Y.Z-pre (semantic versioning)"
[[ -f $log ]] || die "$log: no such file"
[[ -f $vfile ]] || die "$vfile: no such file"
cur=$(tr -d '[:space:]' <"$vfile")
cur=${cur#v}
if [[ $ver == "$cur" ]] || [[ $(printf '%s\n%s\n' "$cur" "$ver" | sort -V | tail -n1) != "$ver" ]]; then
	die "version $ver is not newer than $cur ($vfile)"
fi
if grep -q "^## v$ver\( \|$\)" "$log"; then
	die "$log already has ## v$ver"
fi
grep -q '^## Unreleased$' "$log" || die "$log has no '## Unreleased' heading"

# The entries: the lines between "## Unreleased" and the next "## ".
entries=$(awk '/^## Unreleased$/ {on=1; next} on && /^## / {exit} on && NF {n++} END {print n+0}' "$log")
((entries > 0)) || die "$log: nothing under ## Unreleased to release"

tmp=$(mktemp "$log.XXXXXX")
trap 'rm -f "$tmp"' EXIT
awk -v head="## v$ver ($date)" '
	!done && /^## Unreleased$/ { print; print ""; print head; done = 1; next }
	{ print }
' "$log" >"$tmp"
cat "$tmp" >"$log" # in place: the file keeps its mode
printf '%s\n' "$ver" >"$vfile"
echo "$log: ## v$ver ($date) with the $entries lines that were unreleased; $vfile: $ver"
