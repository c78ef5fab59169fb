# syntax=docker/dockerfile:1
#
# tallyd's container image: a static binary on an empty base, run as the
# unprivileged user tally (uid 10001), its state under the volume
# /var/lib/tally. Build (`make image` runs the first for both platforms
# of `make dist`, with the release and commit of scripts/version.sh) and
# run:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=v0.2.0 --build-arg REVISION=abcdef012345 -t tally .
#   docker run -e TALLY_ADMIN_TOKEN=... -p 8080:8080 -v tally-data:/var/lib/tally tally
#
# The build stage runs on the builder's own platform and cross-compiles
# for each target's (TARGETOS, TARGETARCH): no emulation. VERSION and
# REVISION are stamped into the binary (`tallyd version`, /v1/status)
# and the image's OCI labels; without them the binary says it is a
# development build (v<VERSION file>-dev).
#
# Every build step is scripts/image-rootfs.sh, which `make image-rootfs`
# runs without Docker and internal/deploytest tests (it starts the tallyd
# it builds, as the user below); TestDockerfileMatchesRootfs keeps the
# facts here (user, volume, port, health check, command) in step with it.
# docs/operations.md, "Deploying", has the rest.

FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS TARGETARCH
ARG VERSION REVISION
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces redcon with the patched copy in third_party/.
COPY third_party/ third_party/
RUN go mod download
COPY . .
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH TALLY_VERSION=$VERSION TALLY_REVISION=$REVISION \
    scripts/image-rootfs.sh /rootfs

FROM scratch
ARG VERSION REVISION
LABEL org.opencontainers.image.title="tally" \
      org.opencontainers.image.description="multi-region CRDT counter service" \
      org.opencontainers.image.source="https://github.com/tally-dev/tally" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /rootfs/ /
COPY --from=build --chown=10001:10001 /rootfs/var/lib/tally/ /var/lib/tally/
USER 10001:10001
VOLUME ["/var/lib/tally"]
# HTTP API, /metrics, /healthz, /readyz
EXPOSE 8080
# SIGTERM drains: /readyz fails for drain_delay, then in-flight requests
# finish (shutdown_timeout). Stop with `docker stop --time 30`.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/tallyd", "healthcheck", "--url", "http://127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/tallyd"]
CMD ["serve", "--config", "/etc/tally/tallyd.hcl"]
