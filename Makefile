# Lumen's two commands: `make demo` and `make test`. Both install what is missing first.
SWIFT ?= swift
# Warnings are errors in every build the Makefile runs.
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors

.PHONY: deps build release demo demo-fleet test fuzz-smoke check-sanitizers bench bench-compare bench-serve-compare clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFTFLAGS)

## Build in release mode and run Lumen's main job.
demo: release
	$(SWIFT) run -c release --skip-build lumen demo

## The fleet demo: three nodes behind nginx, with and without Redis (installs both if missing).
demo-fleet: release
	$(SWIFT) run -c release --skip-build lumen demo --fleet

## Run every test. One at a time: each test's time limit then covers its own work, not its
## wait for the other tests' threads (the suite takes about a minute either way on 2 cores).
test: deps
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build --no-parallel

## Every fuzz target (libFuzzer + AddressSanitizer, built with swiftc into .build/fuzz, not
## part of the package) for FUZZ_SMOKE_SECONDS (60) each from the saved seeds: one line per
## target; fails on any finding. See scripts/fuzz.sh for longer runs and reproducing one.
fuzz-smoke: deps
	@bash scripts/fuzz.sh smoke

## Every test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then under
## ThreadSanitizer, one suite per process, C shims included (scripts/check-sanitizers.sh; about
## an hour on 2 cores). Fails on any report or failed test.
check-sanitizers: deps
	@bash scripts/check-sanitizers.sh

## Side-by-side benchmarks (release build).
bench: release
	$(SWIFT) run -c release --skip-build lumen bench

## The decode benchmark with Pillow and libvips alongside (installs them first: optional
## tooling in a virtual environment, never needed by Lumen itself).
bench-compare: release
	@bash scripts/install-comparison-tools.sh
	$(SWIFT) run -c release --skip-build lumen bench decode

## The image server against thumbor and nginx's image filter: the same client, workloads and
## source bytes, wrk on the hot workload as a second opinion (installs them first: comparison
## tooling only, never needed by Lumen itself).
bench-serve-compare: release
	@bash scripts/bench-serve-compare.sh

clean:
	$(SWIFT) package clean
