# Build, test and demo entry points. `make test` is what CI runs.

GO        ?= go
BIN       := bin
FUZZTIME  ?= 10s
BENCH     ?= .
BENCHPKGS ?= ./...

# Go sources outside fetched and built folders, for the gofmt check.
GOFILES = $(shell find . -name '*.go' -not -path './.git/*' -not -path './bin/*' -not -path './third_party/*')

.PHONY: bench-all build serve test install-tools vet staticcheck fmtcheck tidycheck crosscheck binarycheck unit fuzz bench onnxruntime proto

## build: compile the streamer binary and its plotter streamer-bench (for bench --plot) into bin/
build:
	$(GO) build -o $(BIN)/streamer ./cmd/streamer
	$(GO) build -o $(BIN)/streamer-bench ./cmd/streamer-bench

## serve: build, fetch the ONNX Runtime library, serve the demo model on 127.0.0.1:5005
serve:
	bash scripts/install-tools.sh --serve
	$(GO) build -o $(BIN)/streamer ./cmd/streamer # the plotter of make build serves nothing
	$(BIN)/streamer serve --model demo --workers 2 --intra-op-threads 1 --listen 127.0.0.1:5005

## test: every check CI runs: vet, staticcheck, gofmt, a tidy go.mod, other platforms' builds, then the tests with -race
test: install-tools vet staticcheck fmtcheck tidycheck crosscheck binarycheck unit

## install-tools: install what the checks and tests need (idempotent)
install-tools:
	bash scripts/install-tools.sh

vet:
	$(GO) vet ./... ./testdata/gen
	$(GO) run ./testdata/gen -check

staticcheck:
	$(BIN)/staticcheck ./...

fmtcheck:
	@out=$$(gofmt -l $(GOFILES)); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Linux-only code sits behind build tags: the rest builds elsewhere (without
# cgo when cross-compiling, so ONNX models are refused there with a clear error).
crosscheck:
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) vet ./supervisor

# Compiled programs are built or fetched, never committed: refuse any tracked
# file that starts like an ELF, Windows or Mach-O executable.
binarycheck:
	@git rev-parse --git-dir >/dev/null 2>&1 || exit 0; \
	git ls-files | while IFS= read -r f; do \
	  [ -f "$$f" ] || continue; \
	  case "$$(head -c 4 "$$f" | od -An -tx1 | tr -d ' \n')" in \
	    7f454c46|4d5a*|cffaedfe|cefaedfe|feedfacf|feedface) echo "a compiled program is committed: $$f"; exit 1;; \
	  esac; \
	done

tidycheck:
	@if ! $(GO) mod tidy -diff >/dev/null; then echo "go.mod or go.sum is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

## fuzz: run every fuzz target for FUZZTIME (default 10s) each
fuzz:
	@set -e; \
	for file in $$(grep -rl --include='*_test.go' --exclude-dir=third_party --exclude-dir=bin --exclude-dir=.git '^func Fuzz' . | sort); do \
	  for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    echo "== $$target ($$(dirname $$file)) for $(FUZZTIME)"; \
	    $(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) ./$$(dirname $$file); \
	  done; \
	done

## bench: run the benchmarks (BENCH selects them, BENCHPKGS the packages)
bench:
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchmem $(BENCHPKGS)

## onnxruntime: fetch the ONNX Runtime shared library into third_party/
onnxruntime:
	@if [ -f scripts/fetch-onnxruntime.sh ]; then bash scripts/fetch-onnxruntime.sh; \
	else echo "scripts/fetch-onnxruntime.sh is not there yet"; exit 1; fi

## proto: regenerate the Go code of the plugin contract and of the v2 gRPC service from their .proto files
proto:
	@if [ -f scripts/gen-proto.sh ]; then bash scripts/gen-proto.sh; \
	else echo "scripts/gen-proto.sh is not there yet"; exit 1; fi

## bench-all: run every performance scenario of BENCHMARKS.md (about twenty minutes; not part of test)
bench-all:
	bash scripts/bench.sh
