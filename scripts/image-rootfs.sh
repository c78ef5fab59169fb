#!/usr/bin/env bash
# Builds the container image's root filesystem into DIR: the steps of the
# Dockerfile's build stage, as plain commands, so they run (and are tested,
# internal/deploytest) on a machine that cannot pull base images. The
# Dockerfile runs this script; its runtime stage copies DIR over an empty
# base.
#
#   scripts/image-rootfs.sh DIR      (make image-rootfs: bin/rootfs)
#
# DIR gets:
#   usr/local/bin/tallyd            static (CGO_ENABLED=0), stripped
#   etc/tally/tallyd.hcl            deploy/docker/tallyd.hcl
#   etc/passwd, etc/group           root, and tally (uid and gid 10001)
#   etc/ssl/certs/ca-certificates.crt  this machine's CA bundle (TLS to NATS
#                                   and to anything with a public certificate)
#   var/lib/tally                   the volume: tally's, mode 0750
#
# Environment: GO (default go); GOOS and GOARCH to build for another
# platform (the Dockerfile passes TARGETOS and TARGETARCH); TALLY_VERSION
# and TALLY_REVISION, the release and commit to stamp in (the Docker
# build's VERSION and REVISION arguments; default: scripts/version.sh, or
# unstamped where that cannot tell, outside a git checkout).
set -euo pipefail

# The image's user; the Dockerfile's USER and --chown say the same.
readonly TALLY_UID=10001 TALLY_GID=10001
readonly CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
root=$1
cd "$(dirname "$0")/.."
if [ -e "$root" ] && [ -n "$(ls -A "$root")" ]; then
  echo "$0: $root is not empty; give a new or empty directory" >&2
  exit 2
fi
if [ ! -f "$CA_BUNDLE" ]; then
  echo "$0: no CA bundle at $CA_BUNDLE: apt-get install ca-certificates" >&2
  exit 1
fi

mkdir -p "$root/usr/local/bin" "$root/etc/tally" "$root/etc/ssl/certs" "$root/var/lib/tally"
version=${TALLY_VERSION:-} revision=${TALLY_REVISION:-}
if [ -z "$version" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  read -r version revision < <(bash scripts/version.sh)
fi
ldflags='-s -w'
pkg=github.com/tally-dev/tally/internal/base/version
if [ -n "$version" ]; then ldflags="$ldflags -X $pkg.stamped=$version"; fi
if [ -n "$revision" ]; then ldflags="$ldflags -X $pkg.stampedRevision=$revision"; fi
CGO_ENABLED=0 "${GO:-go}" build -trimpath -ldflags="$ldflags" -o "$root/usr/local/bin/tallyd" ./cmd/tallyd
install -m 0644 deploy/docker/tallyd.hcl "$root/etc/tally/tallyd.hcl"
install -m 0644 "$CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\ntally:x:%d:%d:tally:/var/lib/tally:/sbin/nologin\n' \
  "$TALLY_UID" "$TALLY_GID" >"$root/etc/passwd"
printf 'root:x:0:\ntally:x:%d:\n' "$TALLY_GID" >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chmod 0750 "$root/var/lib/tally"
# Docker's COPY --chown does this in the image; here only root can.
if [ "$(id -u)" -eq 0 ]; then
  chown "$TALLY_UID:$TALLY_GID" "$root/var/lib/tally"
fi
# A binary for another platform (a multi-arch build) cannot run here.
target=$("${GO:-go}" env GOOS)/$("${GO:-go}" env GOARCH)
if [ "$target" = "$("${GO:-go}" env GOHOSTOS)/$("${GO:-go}" env GOHOSTARCH)" ]; then
  echo "$root: tallyd $("$root/usr/local/bin/tallyd" version | cut -d' ' -f2), user tally ($TALLY_UID)"
else
  echo "$root: tallyd ${version:-unstamped} for $target, user tally ($TALLY_UID)"
fi
