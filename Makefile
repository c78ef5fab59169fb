# tally: a multi-region CRDT counter service.
# `make run` starts a local three-region deployment; `make test` runs every check CI runs.

GO          ?= go
BIN         := bin/tallyd
# The release and commit stamped into the binary (scripts/version.sh): the
# tag at a tag; <tag>-dev+<commit> after one (-dirty for uncommitted
# changes); v<VERSION file>-dev+<commit> before the first tag. A plain
# `go build` says v<VERSION file>-dev (internal/base/version).
VERSION_INFO := $(shell bash scripts/version.sh 2>/dev/null)
STAMP       := $(word 1,$(VERSION_INFO))
REVISION    := $(word 2,$(VERSION_INFO))
VERSION_PKG := github.com/tally-dev/tally/internal/base/version
LDFLAGS     := $(if $(STAMP),-X $(VERSION_PKG).stamped=$(STAMP)) $(if $(REVISION),-X $(VERSION_PKG).stampedRevision=$(REVISION))
# Platforms `make dist` and `make image` build for.
PLATFORMS   := linux/amd64 linux/arm64
# Build tags whose files must also be vetted, linted and tested.
TAGS        := chaos

.PHONY: all build release dist release-check image run test lint vet staticcheck shellcheck fmt-check unit openapi bench bench-regress bench-peers bench-budget bench-edge bench-resp fuzz chaos clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/tallyd

## release: cut release VERSION (make release VERSION=0.2.0) from a clean
## tree: CHANGELOG.md's "Unreleased" entries become "## v0.2.0 (date)" and
## the VERSION file says 0.2.0 (scripts/release-notes.sh), committed and
## tagged v0.2.0 (annotated), then `make dist` builds the release's files.
## Pushing the commit and the tag is left to you.
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z" >&2; exit 2; }
	@git diff --quiet HEAD || { echo "release: the tree has uncommitted changes; commit or stash them first" >&2; exit 1; }
	bash scripts/release-notes.sh $(VERSION) CHANGELOG.md internal/base/version/VERSION
	git commit -q -m "release v$(VERSION:v%=%)" CHANGELOG.md internal/base/version/VERSION
	git tag -a -m "tally v$(VERSION:v%=%)" v$(VERSION:v%=%)
	$(MAKE) --no-print-directory dist

## dist: the release's files in dist/, for $(PLATFORMS): static
## (CGO_ENABLED=0) binaries tallyd-<version>-<os>-<arch>, a CycloneDX SBOM
## of each (tallyd-<version>-<os>-<arch>.cdx.json, by cyclonedx-gomod,
## pinned in go.mod's tool directive and built for this machine; it reads
## the repository with go-git, so run it in a clone, not a git worktree)
## and SHA256SUMS of them all; then checks them (release-check).
dist:
	rm -rf dist && mkdir -p dist
	@set -e; v='$(STAMP)'; test -n "$$v" || { echo "dist: scripts/version.sh says no version" >&2; exit 1; }; \
	sbom=$$($(GO) tool -n cyclonedx-gomod); \
	for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; f=dist/tallyd-$$v-$$os-$$arch; \
	  echo "== $$f"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $$f ./cmd/tallyd; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $$sbom app -json -licenses -main cmd/tallyd -output $$f.cdx.json . 2>dist/sbom.log \
	    || { cat dist/sbom.log >&2; exit 1; }; \
	done; \
	rm -f dist/sbom.log; cd dist && sha256sum tallyd-* > SHA256SUMS
	$(MAKE) --no-print-directory release-check

## release-check: every platform has its binary and SBOM in dist/, each
## binary built without cgo for its architecture (as `go version -m` reads
## them), SHA256SUMS matches them all, and the binary of this machine's
## platform reports the release in its name.
release-check:
	@set -e; cd dist; \
	test "$$(wc -l < SHA256SUMS)" -eq $$((2 * $(words $(PLATFORMS)))); \
	sha256sum --quiet -c SHA256SUMS; \
	for p in $(PLATFORMS); do \
	  f=$$(ls tallyd-*-$${p%/*}-$${p#*/}); info=$$($(GO) version -m $$f); \
	  for want in CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/}; do \
	    echo "$$info" | grep -q "build	$$want$$" || { echo "$$f: not built with $$want" >&2; exit 1; }; \
	  done; \
	  grep -q '"bomFormat": *"CycloneDX"' $$f.cdx.json || { echo "$$f.cdx.json: not a CycloneDX SBOM" >&2; exit 1; }; \
	done; \
	os=$$($(GO) env GOOS); arch=$$($(GO) env GOARCH); own=$$(ls tallyd-*-$$os-$$arch); \
	v=$${own#tallyd-}; v=$${v%-$$os-$$arch}; \
	./$$own version | grep -qF "tallyd $$v " || { echo "$$own version: $$(./$$own version)" >&2; exit 1; }; \
	echo "release ok: $$(ls | tr '\n' ' ')"

## image: the container image for $(PLATFORMS) with docker buildx, stamped
## with scripts/version.sh's release and commit (binary and OCI labels);
## IMAGE names it (default tally:<version>). Add --push or --load with
## IMAGE_ARGS.
IMAGE      ?= tally:$(subst +,_,$(STAMP))
IMAGE_ARGS ?=
image:
	docker buildx build --platform $(subst $(space),$(comma),$(PLATFORMS)) \
	  --build-arg VERSION=$(STAMP) --build-arg REVISION=$(REVISION) -t $(IMAGE) $(IMAGE_ARGS) .
space := $(subst ,, )
comma := ,

## run: a full local deployment (regions us, eu, ap) on embedded NATS and Pebble.
## Its ports: RUN_PORT (the first region's HTTP port; the others follow),
## RUN_NATS_PORT, RUN_RESP_PORT (0: no RESP), RUN_DASHBOARD (host:port, or
## "" for none); RUN_ARGS adds flags of `tallyd local`, e.g.
## make run RUN_PORT=9081 RUN_NATS_PORT=5222 RUN_RESP_PORT=7381 RUN_DASHBOARD=127.0.0.1:9080
RUN_PORT      ?= 8081
RUN_NATS_PORT ?= 4222
RUN_RESP_PORT ?= 6381
RUN_DASHBOARD ?= 127.0.0.1:8080
RUN_ARGS      ?=
run: build
	./$(BIN) local --port $(RUN_PORT) --nats-port $(RUN_NATS_PORT) --resp-port $(RUN_RESP_PORT) --dashboard '$(RUN_DASHBOARD)' $(RUN_ARGS)

## test: formatting, vet, staticcheck and the race-enabled test suite.
test: lint unit

# The chaos build's tests run again with the tag: the tests that read it,
# in each package's chaos_test.go (internal/chaos builds its own chaos
# binary in every run). internal/chaos runs a fixed set of its negative
# controls here (the README's test section names them) and every one of
# them in `make chaos`.
CHAOS_PKGS  := region replication internal/base/failpoint
CHAOS_TESTS := $(shell sed -nE 's/^func (Test[A-Za-z0-9_]+).*/\1/p' $(CHAOS_PKGS:%=%/chaos_test.go) | sort -u | paste -sd'|' -)

# -p 3 on two cores: the longest packages (the chaos suite, the local
# deployment's and the tour's tests) mostly wait on processes, so a third
# package at a time fills that wait. go test starts packages in the order
# given (each once), so the longest go first: in name order the
# deployment's tests started after a third of the run and ended it alone.
LONG_PKGS := ./internal/deploy/ ./internal/chaos/ ./cmd/tallyd/ ./region/ ./internal/bench/ ./replication/ ./milestone/ ./internal/deploytest/
#
# The chaos build's tests (unit-tagged: about 40 s, a minute of CPU) run
# beside the rest (unit-all), not after it, where they added their whole
# time to the run's: the rest leaves a core idle at times (its last
# minutes are the deployment's tests alone). Their lines interleave;
# go test writes each package's result as one line.
#
# The tests (and lint, below) build with -trimpath. Without it every
# compiled package records the absolute path of its source, and so does
# its key in Go's build cache: a clone in another directory (CI clones
# afresh) found nothing of the last run's race build and compiled the
# whole module again, two to four minutes of CPU on two cores. With it a
# package's key holds only its module path, so any clone of a commit
# reuses what another clone of it compiled.
TRIM := GOFLAGS='$(strip $(GOFLAGS) -trimpath)'
unit:
	@$(MAKE) --no-print-directory -j2 unit-all unit-tagged

.PHONY: unit-all unit-tagged
unit-all:
	$(TRIM) $(GO) test -race -count=1 -p 3 -timeout 15m $(LONG_PKGS) ./...
unit-tagged:
	$(TRIM) $(GO) test -race -count=1 -timeout 5m -tags $(TAGS) -run '^($(CHAOS_TESTS))$$' $(CHAOS_PKGS:%=./%/) ./internal/base/buildtags/

lint: fmt-check vet staticcheck shellcheck

## openapi: regenerate docs/openapi.json from httpapi's route table and the
## api structs (a test fails while the checked-in file is stale).
openapi:
	$(GO) run ./internal/openapigen -w docs/openapi.json

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The chaos build differs from the normal one only in the packages with
# files under the tag and those that read buildtags.Chaos or a failpoint
# (internal/base/failpoint); every other package compiles to the same
# code, so the tagged vet and staticcheck look at these alone.
TAGGED_PKGS = $(shell $(GO) list -tags $(TAGS) -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}} {{join .GoFiles " "}} {{join .TestGoFiles " "}} {{join .IgnoredGoFiles " "}}' ./... | awk '/internal\/base\/(buildtags|failpoint)|_chaos/{print $$1}' | sort -u)

# Lint compiles in the shipped binaries' configuration, CGO_ENABLED=0 and
# -trimpath (make dist, scripts/image-rootfs.sh, and every tallyd the tests
# build: testkit.BuildTallyd). Each configuration is a full compile of the
# module and its dependencies (a few minutes of CPU on a fresh machine), so
# lint and those builds share one; the tests' race build is the other. The
# one file built only with cgo (internal/process/malloc_glibc.go) is
# checked again with cgo on.
LINT_ENV := CGO_ENABLED=0 $(TRIM)
CGO_PKGS := ./internal/process/

vet:
	$(LINT_ENV) $(GO) vet ./...
	$(LINT_ENV) $(GO) vet -tags $(TAGS) $(TAGGED_PKGS)
	$(TRIM) $(GO) vet $(CGO_PKGS)

# staticcheck is pinned in go.mod's tool directive: `go mod download` brings
# it and go.sum checks it, so nothing comes from what a machine happens to have.
staticcheck:
	$(LINT_ENV) $(GO) tool staticcheck ./...
	$(LINT_ENV) $(GO) tool staticcheck -tags $(TAGS) $(TAGGED_PKGS)
	$(TRIM) $(GO) tool staticcheck $(CGO_PKGS)

# shellcheck is a Debian package (.ci/run installs it); a missing one is
# installed when running as root, and otherwise fails the check, naming the
# command to run, rather than skipping it.
shellcheck:
	@bash scripts/need-tool.sh shellcheck shellcheck
	shellcheck .ci/run scripts/*.sh scripts/lib/*.sh deploy/*/*.sh

# promtool checks and unit-tests the Prometheus alert rules. It comes with
# the Debian package prometheus (.ci/run installs it; installed here when
# missing and running as root, else the check fails naming the command).
.PHONY: promtool
lint: promtool
promtool:
	@bash scripts/need-tool.sh promtool prometheus
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

## bench: Go benchmarks of the hot paths, then HTTP load and replication lag
## and healing on in-process deployments (figures go to docs/benchmarks.md).
bench: build
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./storage/ ./region/
	./$(BIN) bench likes --duration 5s
	./$(BIN) bench events --duration 5s
	./$(BIN) bench space
	./$(BIN) bench replication

## bench-regress: the single-like path of this working tree against older
## commits (BASE, default 693822d) and Redis with fsync always, interleaved,
## the servers pinned to one core: every round, then medians and the worst
## round. Run it before and after a change to the write path. About 3 min
## (5 rounds x 3 contestants x 10 s). Installs wrk and Redis if missing.
## BASE="693822d 687486b" VARIANTS=off SERVER_CPUS=0,1 GOMAXPROCS=1 also work;
## VARIANTS=nats adds the tree attached to NATS (tallyd local),
## VARIANTS=reads its reads of a like count beside Redis's GET, and
## SERVE=local runs every tally contestant so (old against new there).
bench-regress:
	bash scripts/bench-regress.sh

## bench-peers: tally's durable like path side by side with Redis (INCR, the
## like-with-dedup Lua script, the same with AOF fsync always) and PostgreSQL
## (hot-row UPDATE, INSERT ... ON CONFLICT like) at the same concurrency
## levels: one table, docs/bench-peers.csv and docs/bench-peers.png. Installs
## redis-server, redis-tools, postgresql, wrk and gnuplot-nox with apt-get if
## missing, and runs them as throwaway loopback instances that it stops on
## exit. About 20 min (3 rounds of 4 levels x 8 workloads x 10 s); not part
## of `make test` or CI.
## ROUNDS=1 LEVELS=1,16 DURATION=5 make bench-peers for a short run.
bench-peers: build
	bash scripts/bench-peers.sh

## bench-budget: spending one bounded budget by 1 at 1, 16 and 64 clients,
## side by side: PostgreSQL naive read-then-update (which overspends),
## SELECT ... FOR UPDATE and UPDATE ... WHERE budget >= 1, against tally's
## budget on one replica (also pinned to one core) and across three
## regions: spends/s, p99 and overspend in one table,
## docs/bench-budget.csv and docs/bench-budget.png. Installs postgresql and
## gnuplot-nox with apt-get if missing; PostgreSQL runs as a throwaway
## loopback server. About 4 minutes; not part of `make test` or CI.
## LEVELS=1,16 DURATION=5 make bench-budget for a short run.
bench-budget: build
	bash scripts/bench-budget.sh

## bench-edge: what TLS and the rate limiter cost at the HTTP edge, with
## and without in one run: single likes at 1, 16 and 64 connections
## plain, over TLS and with a never-refusing write limit; likes with a new
## connection (and handshake) per request; batched ingest plain and over
## TLS; on both cores and on one (taskset -c 0). Rounds interleave, medians
## and the change from plain go to docs/bench-edge.csv (every run to
## docs/bench-edge-rounds.csv), the load average every 5 s to
## bin/bench-edge/load.log. About 12 minutes; not part of `make test` or CI.
## ROUNDS=1 DURATION=2 CORES=2 make bench-edge for a short run.
bench-edge: build
	bash scripts/bench-edge.sh

## bench-resp: redis-benchmark INCR and SADD likes:post <user> against a
## tallyd replica's RESP port and against redis-server with appendfsync
## always, rounds interleaved, pinned to core 0 and on 2 cores, at -P 1
## and 16: medians and the worst round to bin/bench-resp/summary.csv.
## Installs redis-server and redis-tools with apt-get if missing. Not part
## of `make test` or CI. ROUNDS=1 REQUESTS=2000 make bench-resp for a
## short run.
bench-resp: build
	bash scripts/bench-resp.sh

## fuzz: run every fuzz target in the tree for FUZZTIME each (go test runs
## one target at a time per package). FUZZTIME=2m make fuzz for a longer run.
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; \
	done

## chaos: the chaos suite's full tier (TALLY_CHAOS_SUITE=full): every
## scenario run and every negative control (`make test` runs a fixed set
## of them; internal/chaos/chaos_test.go names both), then a long run on a chaos build (message
## faults and negative controls compiled in): partitions, one-way loss,
## flapping links, kill -9, wiped data dirs and NATS restarts against an
## exact model, ending in PASS or FAIL. About 25 minutes.
## CHAOS_DURATION=10m CHAOS_SEED=42 make chaos for another run.
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 1
chaos:
	TALLY_CHAOS_SUITE=full $(GO) test -race -count=1 -timeout 40m ./internal/chaos/
	$(GO) build -tags chaos -o bin/tallyd-chaos ./cmd/tallyd
	./bin/tallyd-chaos chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --report bin/chaos-report.json

## image-rootfs: the container image's root filesystem, built without
## Docker into bin/rootfs by the Dockerfile's own steps
## (scripts/image-rootfs.sh): static tallyd, passwd with the user tally,
## /etc/tally/tallyd.hcl, the volume's directory.
.PHONY: image-rootfs
image-rootfs:
	rm -rf bin/rootfs
	bash scripts/image-rootfs.sh bin/rootfs

clean:
	rm -rf bin dist
