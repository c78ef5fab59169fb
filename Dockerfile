# syntax=docker/dockerfile:1
#
# tallyd's container image: a static binary on an empty base, run as the
# unprivileged user tally (uid 10001), its state under the volume
# /var/lib/tally. Build and run:
#
#   docker build -t tally .
#   docker run -e TALLY_ADMIN_TOKEN=... -p 8080:8080 -v tally-data:/var/lib/tally tally
#
# Every build step is scripts/image-rootfs.sh, which `make image-rootfs`
# runs without Docker and internal/deploytest tests (it starts the tallyd
# it builds, as the user below); TestDockerfileMatchesRootfs keeps the
# facts here (user, volume, port, health check, command) in step with it.
# docs/operations.md, "Deploying", has the rest.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces redcon with the patched copy in third_party/.
COPY third_party/ third_party/
RUN go mod download
COPY . .
RUN scripts/image-rootfs.sh /rootfs

FROM scratch
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
  CMD ["/usr/local/bin/tallyd", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/tallyd"]
CMD ["serve", "--config", "/etc/tally/tallyd.hcl"]
