# tally: a multi-region CRDT counter service.
# `make run` starts a local three-region deployment; `make test` runs every check CI runs.

GO          ?= go
BIN         := bin/tallyd
# Build tags whose files must also be vetted, linted and tested.
TAGS        := chaos

.PHONY: all build run test lint vet staticcheck shellcheck fmt-check unit openapi bench bench-regress bench-peers bench-budget bench-edge bench-resp fuzz chaos clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/tallyd

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
# binary in every run). internal/chaos runs a seeded pick of its negative
# controls here and every one of them in `make chaos`.
CHAOS_PKGS  := region milestone replication
CHAOS_TESTS := $(shell sed -nE 's/^func (Test[A-Za-z0-9_]+).*/\1/p' $(CHAOS_PKGS:%=%/chaos_test.go) | sort -u | paste -sd'|' -)

# -p 3 on two cores: the longest packages (the chaos suite, the local
# deployment's and the tour's tests) mostly wait on processes, so a third
# package at a time fills that wait.
unit:
	$(GO) test -race -count=1 -p 3 -timeout 15m ./...
	$(GO) test -race -count=1 -timeout 5m -tags $(TAGS) -run '^($(CHAOS_TESTS))$$' $(CHAOS_PKGS:%=./%/) ./internal/buildtags/

lint: fmt-check vet staticcheck shellcheck

## openapi: regenerate docs/openapi.json from httpapi's route table and the
## api structs (a test fails while the checked-in file is stale).
openapi:
	$(GO) run ./internal/openapi/gen -w docs/openapi.json

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags $(TAGS) ./...

# staticcheck is pinned in go.mod's tool directive: `go mod download` brings
# it and go.sum checks it, so nothing comes from what a machine happens to have.
staticcheck:
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags $(TAGS) ./...

# shellcheck is a Debian package (.ci/run installs it); a missing one fails
# the check rather than skipping it.
shellcheck:
	@command -v shellcheck >/dev/null 2>&1 || { echo "shellcheck not installed: apt-get install shellcheck" >&2; exit 1; }
	shellcheck .ci/run scripts/*.sh scripts/lib/*.sh deploy/*/*.sh

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
## BASE="693822d 687486b" VARIANTS=off SERVER_CPUS=0,1 GOMAXPROCS=1 also work.
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

## chaos: the chaos suite's tests with every negative control (`make test`
## runs a seeded pick of them), then a long run on a chaos build (message
## faults and negative controls compiled in): partitions, one-way loss,
## flapping links, kill -9, wiped data dirs and NATS restarts against an
## exact model, ending in PASS or FAIL. About 15 minutes.
## CHAOS_DURATION=10m CHAOS_SEED=42 make chaos for another run.
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 1
chaos:
	TALLY_CHAOS_CONTROLS=all $(GO) test -race -count=1 -timeout 30m ./internal/chaos/
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
	rm -rf bin
