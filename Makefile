# tally: a multi-region CRDT counter service.
# `make run` starts a local three-region deployment; `make test` runs every check CI runs.

GO          ?= go
STATICCHECK_VERSION ?= 2026.2.2
GOBIN       := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
BIN         := bin/tallyd

.PHONY: all build run test lint vet staticcheck fmt-check unit bench fuzz chaos clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/tallyd

## run: a full local deployment (regions us, eu, ap) on embedded NATS and Pebble.
run: build
	./$(BIN) local

## test: formatting, vet, staticcheck and the race-enabled test suite.
test: lint unit

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

## bench: Go benchmarks of the hot paths, then HTTP load and replication lag
## and healing on in-process deployments (figures go to docs/benchmarks.md).
bench: build
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./storage/ ./region/
	./$(BIN) bench likes --duration 5s
	./$(BIN) bench events --duration 5s
	./$(BIN) bench space
	./$(BIN) bench replication

## fuzz: run each decoder fuzz target for a short while.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeVector -fuzztime=30s ./crdt/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeLikeRecord -fuzztime=30s ./crdt/
	$(GO) test -run='^$$' -fuzz=FuzzDecodePN -fuzztime=30s ./crdt/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeEvents -fuzztime=30s ./httpapi/

## chaos: the chaos suite on a chaos build (message faults and negative
## controls compiled in): partitions, one-way loss, flapping links, kill -9,
## wiped data dirs and NATS restarts against an exact model, ending in PASS
## or FAIL. CHAOS_DURATION=10m CHAOS_SEED=42 make chaos for another run.
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 1
chaos:
	$(GO) build -tags chaos -o bin/tallyd-chaos ./cmd/tallyd
	./bin/tallyd-chaos chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --report bin/chaos-report.json

clean:
	rm -rf bin
