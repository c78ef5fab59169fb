#!/usr/bin/env bash
# need-tool.sh COMMAND PACKAGE: makes sure COMMAND is on PATH for `make
# test`. If it is missing and this runs as root, installs the Debian
# PACKAGE with apt-get, without recommended packages and without starting
# the package's service (a policy-rc.d that says "no", removed again
# right after, and only if this script put it there: the package
# `prometheus`, which ships promtool, would otherwise start a Prometheus
# server). Otherwise it fails, printing the exact command to run.
set -euo pipefail

if (($# != 2)); then
	echo "usage: $0 COMMAND PACKAGE" >&2
	exit 2
fi
cmd=$1 pkg=$2
command -v "$cmd" >/dev/null 2>&1 && exit 0

install=(apt-get install -y --no-install-recommends "$pkg")
if [[ $(id -u) != 0 ]]; then
	echo "$cmd not installed; install it with: sudo apt-get update && sudo ${install[*]}" >&2
	exit 1
fi
echo "$cmd not installed: installing the Debian package $pkg" >&2
policy=/usr/sbin/policy-rc.d ours=
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	ours=1
fi
rc=0
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${install[@]}" -qq >/dev/null; } || rc=$?
[[ -n $ours ]] && rm -f "$policy"
if ((rc != 0)); then
	echo "apt-get install $pkg failed (exit $rc)" >&2
	exit "$rc"
fi
command -v "$cmd" >/dev/null 2>&1 || { echo "$pkg installed but $cmd is not on PATH" >&2; exit 1; }
